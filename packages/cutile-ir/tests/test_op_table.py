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
