"""The tiled GEMM of cuTile Rust: z = x @ y, 128x128 tiles of z, a K loop of mma.

Run: ``python examples/gemm.py``. Compares with numpy in float64.
"""

import sys
import time

import numpy as np

import cutile
from cutile import api
from cutile.core import Constant, Mut, Tensor, f16, f32, get_tile_block_id, mma


@cutile.entry
def gemm(z: Mut[Tensor[f32, ["BM", "BN"]]], x: Tensor[f16, [-1, "K"]], y: Tensor[f16, ["K", -1]],
         BM: Constant[int], BN: Constant[int], BK: Constant[int], K: Constant[int]) -> None:
    part_x = x.partition([BM, BK])          # read-only view of x in (BM, BK) tiles
    part_y = y.partition([BK, BN])
    bm, bn, _ = get_tile_block_id()
    acc = z.load()                          # this block's own tile of z
    for k in range(K // BK):
        acc = mma(part_x.load([bm, k]), part_y.load([k, bn]), acc)
    z.store(acc)


def main() -> int:
    x = api.randn([1024, 512], dtype=f16)
    y = api.randn([512, 2048], dtype=f16)
    z = api.zeros([1024, 2048], dtype=f32).partition([128, 128])
    start = time.perf_counter()
    z, x, y = gemm(z, x, y, BK=64).sync()       # BM, BN, K inferred; grid (8, 16, 1)
    elapsed = time.perf_counter() - start
    reference = x.to_numpy().astype(np.float64) @ y.to_numpy().astype(np.float64)
    error = float(np.linalg.norm(z.to_numpy() - reference) / np.linalg.norm(reference))
    ok = error < 1e-5
    print(f"gemm: 1024x2048x512 f16 -> f32 on the {cutile.backend()} backend in {elapsed:.2f} s "
          f"(first call, compile included); relative error {error:.1e}: {'OK' if ok else 'WRONG'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
