"""A 10,000-op module (the size scripts/bench_ir.py times; speed is its job, not a
test's) writes, reads back equal, and writes the same bytes again."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from cutile_ir import differences, read_bytecode, write_bytecode

BENCH = Path(__file__).resolve().parents[3] / "scripts" / "bench_ir.py"


def test_a_ten_thousand_op_module_round_trips() -> None:
    spec = importlib.util.spec_from_file_location("bench_ir", BENCH)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    module = bench.build(10_000)
    data = write_bytecode(module, "13.3")
    back = read_bytecode(data)
    assert not differences(module, back)
    assert write_bytecode(back, "13.3") == data
