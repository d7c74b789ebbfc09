"""Benchmark of cutile_ir's bytecode writer and reader on a 10,000-op module.

Usage: uv run --frozen python scripts/bench_ir.py [--ops N] [--repeat R] [--version 13.3]
Prints the best-of-R wall time of write_bytecode and read_bytecode in milliseconds.
"""

from __future__ import annotations

import argparse
import time

from cutile_ir import (
    F32, I32, Builder, Module, add_function, ptr, read_bytecode, scalar, tile, verify, write_bytecode,
)


def build(n_ops: int) -> Module:
    """One kernel of ``n_ops`` ops: loads, a long arithmetic chain with a loop, stores."""
    m = Module()
    f = add_function(m, "bench", [scalar(ptr(F32)), scalar(I32)])
    b = Builder(f)
    t = tile(128, F32)
    x = b.constant(1.0, t)
    y = b.constant([float(i) for i in range(128)], t)
    count = 2
    acc = x
    while count < n_ops - 8:
        acc = b.addf(acc, y, rounding_mode="nearest_even")
        acc = b.mulf(acc, x, rounding_mode="zero", flush_to_zero=True)
        c = b.cmpf(acc, y, comparison_predicate="less_than", comparison_ordering="ordered")
        acc = b.select(c, acc, y)
        count += 4
        if count % 400 == 0 and count < n_ops - 16:
            zero = b.constant(0, scalar(I32))
            one = b.constant(1, scalar(I32))
            with b.for_(zero, f.args[1], one, inits=[acc]) as loop:
                (_, a) = loop.args
                b.continue_([b.negf(a)])
            acc = loop.results[0]
            count += 5
    while count < n_ops - 1:
        acc = b.absf(acc)
        count += 1
    b.return_()
    count += 1
    assert sum(1 for _ in m.walk()) == n_ops, sum(1 for _ in m.walk())
    return m


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
    m = build(args.ops)
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
