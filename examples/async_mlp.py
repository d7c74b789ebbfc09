"""A two-layer MLP over several batches: GEMM -> bias + ReLU -> GEMM per batch,
chained with ``then`` (in order on one stream) and the batches zipped (free to run
on different streams of the pool). Run: ``python examples/async_mlp.py``.
"""

import sys

import numpy as np

import cutile
import cutile.core as ct
from cuda_async import DeviceOp
from cutile import api
from cutile.core import Constant, Mut, Tensor, f16, f32


@cutile.entry
def gemm(z: Mut[Tensor[f32, ["BM", "BN"]]], x: Tensor[f16, [-1, "K"]], w: Tensor[f16, ["K", -1]],
         BM: Constant[int], BN: Constant[int], BK: Constant[int], K: Constant[int]) -> None:
    bm, bn, _ = ct.get_tile_block_id()
    acc = ct.zeros((BM, BN), f32)
    for k in range(ct.cdiv(K, BK)):
        acc = ct.mma(ct.load(x, index=(bm, k), shape=(BM, BK)), ct.load(w, index=(k, bn), shape=(BK, BN)), acc)
    z.store(acc)


@cutile.entry
def bias_relu(h: Mut[Tensor[f16, ["BM", "BN"]]], pre: Tensor[f32, [-1, -1]], bias: Tensor[f32, [-1]],
              BM: Constant[int], BN: Constant[int]) -> None:
    _, bn, _ = ct.get_tile_block_id()
    b = ct.reshape(ct.load(bias, index=(bn,), shape=(BN,)), (1, BN))
    h.store(ct.maximum(ct.load_tile_like(pre, h) + b, 0.0).astype(f16))


def main() -> int:
    batches, rows, d_in, d_hidden, d_out = 4, 128, 256, 512, 128
    rng = np.random.default_rng(2)
    w1 = (rng.standard_normal((d_in, d_hidden)) / 16).astype(np.float16)
    w2 = (rng.standard_normal((d_hidden, d_out)) / 16).astype(np.float16)
    b1 = rng.standard_normal(d_hidden).astype(np.float32)
    xs = [rng.standard_normal((rows, d_in)).astype(np.float16) for _ in range(batches)]
    W1, W2, B1 = api.from_numpy(w1), api.from_numpy(w2), api.from_numpy(b1)

    def chain(x: cutile.Tensor) -> DeviceOp[tuple[cutile.Partition, cutile.Tensor, cutile.Tensor]]:
        """One batch's three launches, each fed the one before's output."""
        pre = api.empty([rows, d_hidden], dtype=f32).partition([64, 128])
        hidden = api.empty([rows, d_hidden], dtype=f16).partition([64, 128])
        out = api.empty([rows, d_out], dtype=f32).partition([64, 64])
        return (gemm(pre, x, W1, BK=64)
                .then(lambda r: bias_relu(hidden, r[0].unpartition(), B1))
                .then(lambda r: gemm(out, r[0].unpartition(), W2, BK=64)))

    chains = [chain(api.from_numpy(x)) for x in xs]
    results = cutile.zip(*chains).sync()
    ok = True
    for (out, _, _), x in zip(results, xs):
        h = np.maximum(x.astype(np.float64) @ w1.astype(np.float64) + b1, 0).astype(np.float16)
        expected = h.astype(np.float64) @ w2.astype(np.float64)
        ok &= float(np.linalg.norm(out.to_numpy() - expected) / np.linalg.norm(expected)) < 1e-2
    print(f"async_mlp: {batches} batches of GEMM -> bias+ReLU -> GEMM ({rows}x{d_in} -> {d_hidden} -> {d_out}), "
          f"chained and zipped, on the {cutile.backend()} backend: {'OK' if ok else 'WRONG'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
