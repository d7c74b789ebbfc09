"""GEMMs scheduled ahead: the host queues every product, then collects the results
through futures. Run: ``python examples/async_gemm.py``.
"""

import sys

import numpy as np

import cutile
import cutile.core as ct
from cutile import api
from cutile.core import Constant, Mut, Tensor, f16, f32


@cutile.entry
def gemm(z: Mut[Tensor[f32, ["BM", "BN"]]], x: Tensor[f16, [-1, "K"]], y: Tensor[f16, ["K", -1]],
         BM: Constant[int], BN: Constant[int], BK: Constant[int], K: Constant[int]) -> None:
    bm, bn, _ = ct.get_tile_block_id()
    acc = ct.zeros((BM, BN), f32)
    for k in range(ct.cdiv(K, BK)):
        acc = ct.mma(ct.load(x, index=(bm, k), shape=(BM, BK)), ct.load(y, index=(k, bn), shape=(BK, BN)), acc)
    z.store(acc)


def main() -> int:
    m, n, k, count = 256, 384, 512, 3
    rng = np.random.default_rng(1)
    pairs = [(rng.standard_normal((m, k)).astype(np.float16), rng.standard_normal((k, n)).astype(np.float16))
             for _ in range(count)]
    futures = [gemm(api.empty([m, n], dtype=f32).partition([128, 128]), api.from_numpy(a), api.from_numpy(b), BK=64)
               .schedule() for a, b in pairs]
    ok = True
    for future, (a, b) in zip(futures, pairs):
        z, _, _ = future.result()
        expected = a.astype(np.float64) @ b.astype(np.float64)
        ok &= float(np.linalg.norm(z.to_numpy() - expected) / np.linalg.norm(expected)) < 1e-5
    print(f"async_gemm: {count} scheduled {m}x{k} @ {k}x{n} GEMMs collected through futures on the "
          f"{cutile.backend()} backend: {'OK' if ok else 'WRONG'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
