#!/usr/bin/env python3
"""Speed of the CPU interpreter: a 1024x1024x1024 fp32 GEMM with 64x64x32 tiles.

Target (issue "CPU interpreter backend"): under 5 s on the 2-core CI machine.
Prints the time of the first run (including the front end) and of a second run,
and checks the result against numpy.
"""

from __future__ import annotations

import os
import sys
import time

os.environ["CUTILE_BACKEND"] = "interpreter"

import numpy as np  # noqa: E402

import cutile  # noqa: E402
from cutile import api  # noqa: E402
from cutile.core import Constant, Mut, Tensor, f32, get_tile_block_id, mma  # noqa: E402


@cutile.entry
def gemm(z: Mut[Tensor[f32, ["BM", "BN"]]], x: Tensor[f32, [-1, "K"]], y: Tensor[f32, ["K", -1]],
         BM: Constant[int], BN: Constant[int], BK: Constant[int], K: Constant[int]) -> None:
    part_x = x.partition([BM, BK])
    part_y = y.partition([BK, BN])
    bm, bn, _ = get_tile_block_id()
    acc = z.load()
    for k in range(K // BK):
        acc = mma(part_x.load([bm, k]), part_y.load([k, bn]), acc)
    z.store(acc)


def main() -> int:
    n = 1024
    x = api.randn([n, n], dtype=f32, seed=1)
    y = api.randn([n, n], dtype=f32, seed=2)
    times = []
    for _ in range(2):
        z = api.zeros([n, n], dtype=f32).partition([64, 64])
        start = time.perf_counter()
        z, x, y = gemm(z, x, y, BK=32).sync()
        times.append(time.perf_counter() - start)
    reference = x.to_numpy().astype(np.float64) @ y.to_numpy().astype(np.float64)
    error = float(np.linalg.norm(z.to_numpy() - reference) / np.linalg.norm(reference))
    print(f"interpreter GEMM {n}x{n}x{n} f32, tiles 64x64x32, grid 16x16 (8192 mma steps), {os.cpu_count()} CPUs")
    print(f"{'run':<28}{'seconds':>10}")
    print(f"{'first (front end included)':<28}{times[0]:>10.2f}")
    print(f"{'second':<28}{times[1]:>10.2f}")
    ok = error < 1e-5
    print(f"relative error {error:.1e}: {'OK' if ok else 'WRONG'}; target < 5 s: {'met' if times[0] < 5 else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
