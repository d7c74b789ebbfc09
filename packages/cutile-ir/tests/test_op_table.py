"""The op table is the single source of truth: its facts are consistent, and one new
entry is enough for the builder, verifier, printer, writer and reader."""

from __future__ import annotations

import pytest

from cutile_ir import (
    F32, OPS, SUPPORTED_VERSIONS, V13_3, V13_4, Builder, Module, VersionError, differences, print_module,
    read_bytecode, tile, verify, write_bytecode,
)
from cutile_ir._ops import OPS_BY_OPCODE, Arity, AttrKind, O, OpDef, R, register_op, unregister_op, A


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
