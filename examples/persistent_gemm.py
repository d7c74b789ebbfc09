"""A safe persistent GEMM: z = x @ y with a fixed number of blocks walking the output
tiles in grouped order (groups of 8 tile rows), as fast GEMMs do, without ``unsafe``.

The host maps z's partition (``.map([8, 1], blocks=n)``: the tile grid stays z's, the
order is grouped, n blocks share the tiles, default one per SM); in the kernel, ``for
idx in z.tiles():`` walks this block's share and ``z.store(acc, idx)`` accepts only the
indices the schedule mints, so the compiler proves that no two blocks write one tile.

Run: ``python examples/persistent_gemm.py``. Compares with numpy in float64.
"""

import sys
import time

import numpy as np

import cutile
from cutile import api
from cutile.core import Constant, Mut, Tensor, cdiv, f16, f32, mma, zeros


@cutile.entry(hints={"occupancy": 1, "sm_90": {"num_worker_warps": 8}})
def persistent_gemm(z: Mut[Tensor[f32, ["BM", "BN"]]], x: Tensor[f16, [-1, "K"]], y: Tensor[f16, ["K", -1]],
                    BM: Constant[int], BN: Constant[int], BK: Constant[int], K: Constant[int]) -> None:
    part_x = x.partition([BM, BK])
    part_y = y.partition([BK, BN])
    for idx in z.tiles():                   # this block's tiles, in the map's grouped order
        bm, bn = idx                        # tile coordinates, for the loads of x and y
        acc = zeros((BM, BN), f32)
        for k in range(cdiv(K, BK)):
            acc = mma(part_x.load([bm, k]), part_y.load([k, bn]), acc)
        z.store(acc, idx)                   # a minted index: no run-time check, no unsafe


def main() -> int:
    m, n, k = (2048, 2048, 520) if cutile.backend() == "gpu" else (512, 384, 160)  # K not a multiple of BK: a tail
    x = api.randn([m, k], dtype=f16)
    y = api.randn([k, n], dtype=f16)
    z = api.full([m, n], np.nan, dtype=f32).partition([128, 128]).map([8, 1])  # grouped order, default blocks
    blocks = z.blocks
    start = time.perf_counter()
    z, x, y = persistent_gemm(z, x, y, BK=64).sync()  # grid (blocks, 1, 1), inferred from the map
    elapsed = time.perf_counter() - start
    reference = x.to_numpy().astype(np.float64) @ y.to_numpy().astype(np.float64)
    error = float(np.linalg.norm(z.to_numpy() - reference) / np.linalg.norm(reference))
    ok = error < 1e-5
    print(f"persistent_gemm: {m}x{n}x{k} f16 -> f32 on {blocks} blocks of the {cutile.backend()} backend in "
          f"{elapsed:.2f} s (first call: a compile unless cached); relative error {error:.1e}: {'OK' if ok else 'WRONG'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
