"""A 10,000-op module (the size scripts/bench_ir.py times; speed is its job, not a
test's) writes, reads back equal, and writes the same bytes again."""

from __future__ import annotations

from cutile_ir import differences, read_bytecode, write_bytecode
from cutile_ir._catalog import large_module


def test_a_ten_thousand_op_module_round_trips() -> None:
    module = large_module(10_000)
    data = write_bytecode(module, "13.3")
    back = read_bytecode(data)
    assert not differences(module, back)
    assert write_bytecode(back, "13.3") == data
