"""The op table is the single source of truth: its facts are consistent, and one new
entry is enough for the builder, verifier, printer, writer and reader."""

from __future__ import annotations

import pytest

from cutile_ir import (
    F32, OPS, SUPPORTED_VERSIONS, V13_3, V13_4, Builder, Module, VersionError, differences, ops_in, print_module,
    read_bytecode, tile, verify, write_bytecode,
)
from cutile_ir._ops import OPS_BY_OPCODE, A, Arity, AttrKind, O, OpDef, R, layout, register_op, unregister_op


def test_table_facts() -> None:
    assert len(OPS) == 105
    assert len({op.opcode for op in OPS}) == len(OPS)
    for op in OPS:
        assert op.fmt, op.name
        assert op.since in SUPPORTED_VERSIONS
        for a in op.attrs:
            assert a.since >= op.since, (op.name, a.name)
            if a.since > op.since and not a.in_flags:
                assert a.default is not None, f"{op.name}.{a.name} added later needs a default"
        names = [o.name for o in op.operands] + [a.name for a in op.attrs]
        assert len(names) == len(set(names)), op.name
        # several variadic/optional groups are only decodable with per-group sizes
        if sum(o.arity is not Arity.ONE for o in op.operands) > 1:
            assert op.segmented, op.name
    assert OPS_BY_OPCODE[0x79].name == "fpowi" and OPS_BY_OPCODE[0x54].name == "fpowf"


def test_flag_bits_are_in_version_order_attributes_first() -> None:
    load = OPS_BY_OPCODE[0x3D]  # load_ptr_tko
    assert [n for n, _, _ in load.flag_fields()] == ["memory_scope", "optimization_hints", "mask", "paddingValue",
                                                      "token"]
    print_tko = OPS_BY_OPCODE[0x55]
    assert [n for n, _, _ in print_tko.flag_fields()] == ["token"]
    assert not print_tko.has_flags(SUPPORTED_VERSIONS[0]) and print_tko.has_flags(SUPPORTED_VERSIONS[1])


def test_one_entry_adds_an_op() -> None:
    op = register_op(OpDef(
        "test_scale", 0x7F0, V13_4, (O("source", "base_float_tile"),),
        (A("factor", AttrKind.INT), A("fast", AttrKind.UNIT)), (R("result", "base_float_tile", infer="same:source"),),
        same=(("source", "result"),), fmt="$source `by` $factor (`fast` $fast^)? attr-dict `:` type($result)"))
    try:
        m = Module()
        b = Builder(m.add_entry("k", []))
        y = b.test_scale(b.constant(1.0, tile(8, F32)), factor=3, fast=True)
        assert y.type == tile(8, F32)
        b.return_()
        verify(m)
        assert "%0 = test_scale %cst_1_f32 by 3 fast : tile<8xf32>" in print_module(m)
        data = write_bytecode(m, V13_4)
        assert differences(m, read_bytecode(data)) == []
        with pytest.raises(VersionError, match="'test_scale': op needs bytecode 13.4, writing 13.3"):
            write_bytecode(m, V13_3)
        assert op.opcode in OPS_BY_OPCODE
    finally:
        unregister_op("test_scale")


def test_reregistering_an_opcode_uses_the_new_record() -> None:
    """register / unregister / register on one opcode: the layout, the writer and the reader
    follow the op now in the table, and ops_in lists it."""
    fmt = "$source attr-dict `:` type($result)"
    first = OpDef("test_first", 0x7F0, V13_4, (O("source", "base_float_tile"),), (),
                  (R("result", "base_float_tile", infer="same:source"),), same=(("source", "result"),), fmt=fmt)
    second = OpDef("test_second", 0x7F0, V13_4, (O("source", "base_float_tile"),), (A("factor", AttrKind.INT),),
                   (R("result", "base_float_tile", infer="same:source"),), same=(("source", "result"),),
                   fmt="$source `by` $factor " + fmt)
    register_op(first)
    try:
        assert layout(first, V13_4).attrs == ()
        assert first in ops_in(V13_4) and first not in ops_in(V13_3)
    finally:
        unregister_op("test_first")
    assert first not in ops_in(V13_4)
    register_op(second)
    try:
        lay = layout(second, V13_4)
        assert lay.opdef is second and [a.name for a, _ in lay.attrs] == ["factor"]
        m = Module()
        b = Builder(m.add_entry("k", []))
        b.test_second(b.constant(1.0, tile(8, F32)), factor=5)
        b.return_()
        m2 = read_bytecode(write_bytecode(m, V13_4))
        assert differences(m, m2) == []
        assert m2.functions[0].body.ops[1].attributes == {"factor": 5}
    finally:
        unregister_op("test_second")


def test_one_entry_carries_an_ops_rules_region_and_printer() -> None:
    """What is particular to an op (its extra rule, minimum SM, element types, region rules,
    result naming, custom printer) is in its record: the generic verifier and printer follow
    a registered region op and its terminator with no other code."""
    from cutile_ir import I32, I64, ElementRule, RegionRule, make_op, problems, scalar
    from cutile_ir._printer import Printer

    def body_args(op, index):  # type: ignore[no-untyped-def]
        return [v.type for v in op.group("inits")]

    def end_problem(op, last):  # type: ignore[no-untyped-def]
        got, want = [v.type for v in last.operands], [r.type for r in op.results]
        return None if got == want else f"test_done gives {len(got)} values, test_repeat has {len(want)} results"

    def print_repeat(printer: Printer, op, indent: int) -> None:  # type: ignore[no-untyped-def]
        inits = ", ".join(printer.names(v) for v in op.group("inits"))
        printer.region(op, 0, indent, f"{printer.results_prefix(op)}test_repeat {op.attributes['times']}x ({inits})")

    def times_positive(op, ty):  # type: ignore[no-untyped-def]
        return [] if op.attributes["times"] > 0 else [f"times must be positive, found {op.attributes['times']}"]

    repeat = OpDef("test_repeat", 0x7F0, V13_4, (O("inits", "any", Arity.VARIADIC),), (A("times", AttrKind.INT),),
                   (R("results", "any", variadic=True),), regions=("body",), fmt=print_repeat,
                   asm_name=lambda op, index: f"rep{op.attributes['times']}" if index == 0 else "",
                   check=times_positive, min_sm=120,
                   elements=ElementRule("inits", None, ((None, frozenset({I32})),)),
                   region_rule=RegionRule(body_args, "test_done", end_problem, pure_body=True,
                                          arg_names=lambda n: [f"it{i}" for i in range(n)]))
    done = OpDef("test_done", 0x7F1, V13_4, (O("operands", "any", Arity.VARIADIC),), terminator=True,
                 parents=("test_repeat",), pure=True, elided_when_empty=True,
                 fmt="attr-dict ($operands^ `:` type($operands))?")
    register_op(repeat)
    register_op(done)
    try:
        def build(times: int, *, element=I32, impure: bool = False, give: int = 1) -> Module:  # type: ignore[no-untyped-def]
            m = Module()
            b = Builder(m.add_entry("k", []))
            x = b.constant(1, scalar(element))
            op = make_op("test_repeat", [[x]], {"times": times}, [scalar(element)], check=False)
            b.block.append(op)
            with b.region(op, 0, [scalar(element)]) as (arg,):
                y = b.addi(arg, arg)
                if impure:
                    b.divi(y, y, signedness="signed")
                b.create("test_done", [y] * give)
            b.return_()
            return m

        m = build(3)
        assert problems(m) == []
        text = print_module(m)
        assert "%rep3 = test_repeat 3x (%cst_1_i32) {" in text, text
        assert "%0 = addi %it0, %it0 : tile<i32>" in text, text
        assert "test_done %0 : tile<i32>" in text, text
        assert differences(m, read_bytecode(write_bytecode(m, V13_4))) == []
        assert any("'test_repeat': needs sm_120 or newer, target is sm_100" in p for p in problems(m, "sm_100"))
        assert any("times must be positive, found 0" in p for p in problems(build(0)))
        assert any("'test_repeat': 'inits' works only with integers i32, found tile<i64>" in p
                   for p in problems(build(2, element=I64)))
        assert any("'divi': only pure ops may appear in the body of 'test_repeat'" in p
                   for p in problems(build(2, impure=True)))
        assert any("'test_done': test_done gives 2 values, test_repeat has 1 results" in p
                   for p in problems(build(2, give=2)))
    finally:
        unregister_op("test_done")
        unregister_op("test_repeat")


def test_the_first_sm_of_each_element_type_is_read_from_the_table(monkeypatch: pytest.MonkeyPatch) -> None:
    """`ELEMENT_MIN_SM` (in the op table's module, keyed by element type) is what the
    verifier checks every result type against: an entry changed there changes its verdict."""
    from cutile_ir import F8E4M3FN, F16, SCALAR_TYPES, problems, scalar
    from cutile_ir import _opdef

    assert set(_opdef.ELEMENT_MIN_SM) <= set(SCALAR_TYPES)
    assert _opdef.ELEMENT_MIN_SM[F8E4M3FN] == 89

    def constant_of(element) -> Module:  # type: ignore[no-untyped-def]
        m = Module()
        b = Builder(m.add_entry("k", []))
        b.constant(1.0, scalar(element))
        b.return_()
        return m

    f8 = constant_of(F8E4M3FN)
    assert any("element type f8E4M3FN needs sm_89 or newer, target is sm_80" in p for p in problems(f8, "sm_80"))
    assert problems(f8, "sm_89") == []
    half = constant_of(F16)
    assert problems(half, "sm_100") == []
    monkeypatch.setitem(_opdef.ELEMENT_MIN_SM, F16, 120)
    assert any("element type f16 needs sm_120 or newer, target is sm_100" in p for p in problems(half, "sm_100"))
