"""Batched matrix multiply: z[b] = x[b] @ y[b], one (BM, BN) tile of one batch per block.

Run: ``python examples/batch_matmul.py``. fp16 inputs, f32 accumulation; sizes with
tails in every dimension but K.
"""

import sys

import numpy as np

import cutile
import cutile.core as ct
from cutile import api
from cutile.core import Constant, Mut, Tensor, f16, f32


@cutile.entry
def batch_matmul(z: Mut[Tensor[f32, [1, "BM", "BN"]]], x: Tensor[f16, [-1, -1, "K"]], y: Tensor[f16, [-1, "K", -1]],
                 BM: Constant[int], BN: Constant[int], BK: Constant[int], K: Constant[int]) -> None:
    b, m, n = ct.get_tile_block_id()
    acc = ct.zeros((BM, BN), f32)
    for k in range(ct.cdiv(K, BK)):
        a = ct.reshape(ct.load(x, index=(b, m, k), shape=(1, BM, BK)), (BM, BK))
        w = ct.reshape(ct.load(y, index=(b, k, n), shape=(1, BK, BN)), (BK, BN))
        acc = ct.mma(a, w, acc)
    z.store(ct.reshape(acc, (1, BM, BN)))


def main() -> int:
    batches, m, n, k = 4, 200, 136, 256
    rng = np.random.default_rng(3)
    xs = rng.standard_normal((batches, m, k)).astype(np.float16)
    ys = rng.standard_normal((batches, k, n)).astype(np.float16)
    z = api.empty([batches, m, n], dtype=f32).partition([1, 64, 64])
    z, _, _ = batch_matmul(z, api.from_numpy(xs), api.from_numpy(ys), BK=64).sync()
    expected = xs.astype(np.float64) @ ys.astype(np.float64)
    error = float(np.linalg.norm(z.to_numpy() - expected) / np.linalg.norm(expected))
    ok = error < 1e-5
    print(f"batch_matmul: {batches} x ({m}x{k} @ {k}x{n}) f16 -> f32 on the {cutile.backend()} backend; "
          f"relative error {error:.1e}: {'OK' if ok else 'WRONG'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
