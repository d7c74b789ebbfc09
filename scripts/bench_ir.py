"""Benchmark of cutile_ir's bytecode writer and reader on a 10,000-op module.

Usage: uv run --frozen python scripts/bench_ir.py [--ops N] [--repeat R] [--version 13.3]
Prints the best-of-R wall time of write_bytecode and read_bytecode in milliseconds.
"""

from __future__ import annotations

import argparse
import time

from cutile_ir import read_bytecode, verify, write_bytecode
from cutile_ir._catalog import large_module


def best_ms(fn, repeat: int) -> float:  # type: ignore[no-untyped-def]
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--ops", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--version", default="13.3")
    args = ap.parse_args()
    m = large_module(args.ops)
    verify(m)
    data = write_bytecode(m, args.version)
    w = best_ms(lambda: write_bytecode(m, args.version), args.repeat)
    r = best_ms(lambda: read_bytecode(data), args.repeat)
    assert write_bytecode(read_bytecode(data), args.version) == data
    print(f"ops={args.ops} bytes={len(data)} version={args.version}")
    print(f"write_ms={w:.1f}")
    print(f"read_ms={r:.1f}")


if __name__ == "__main__":
    main()
