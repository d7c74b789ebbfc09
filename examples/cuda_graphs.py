"""A decode-style step captured once as a CUDA graph and replayed with new inputs:
RMSNorm -> matrix-vector product -> residual add.

Run: ``python examples/cuda_graphs.py``. On the GPU a replay is one driver call for
all three kernels; on the interpreter the recorded launches run again eagerly.
"""

import sys

import numpy as np

import cutile
import cutile.core as ct
from cutile import api
from cutile.core import Constant, Mut, Tensor, f32

N, M, EPS = 512, 256, 1e-6


@cutile.entry
def rms_norm(y: Mut[Tensor[f32, [1, "N"]]], x: Tensor[f32, [1, "N"]], w: Tensor[f32, ["N"]], N: Constant[int]) -> None:
    values = ct.load_tile_like(x, y)
    inverse = ct.rsqrt(ct.sum(values * values, axis=1, keepdims=True) / N + EPS)
    y.store(values * inverse * ct.reshape(ct.load(w, index=(0,), shape=(N,)), (1, N)))


@cutile.entry
def matvec(v: Mut[Tensor[f32, ["BM"]]], a: Tensor[f32, [-1, "N"]], y: Tensor[f32, [1, "N"]],
           BM: Constant[int], N: Constant[int]) -> None:
    row, _, _ = ct.get_tile_block_id()
    rows = ct.load(a, index=(row, 0), shape=(BM, N))
    v.store(ct.sum(rows * ct.load(y, index=(0, 0), shape=(1, N)), axis=1))


@cutile.entry
def residual(out: Mut[Tensor[f32, ["B"]]], v: Tensor[f32, [-1]], r: Tensor[f32, [-1]]) -> None:
    out.store(ct.load_tile_like(v, out) + ct.load_tile_like(r, out))


def main() -> int:
    rng = np.random.default_rng(3)
    w = rng.uniform(0.5, 1.5, N).astype(np.float32)
    a = (rng.standard_normal((M, N)) / 16).astype(np.float32)
    first = rng.standard_normal((1, N)).astype(np.float32)
    r = rng.standard_normal(M).astype(np.float32)
    x, W, A, R = api.from_numpy(first), api.from_numpy(w), api.from_numpy(a), api.from_numpy(r)
    y = api.empty([1, N], dtype=f32).partition([1, N])
    v = api.empty([M], dtype=f32).partition([64])
    out = api.empty([M], dtype=f32).partition([M])

    Partitions = tuple[cutile.Partition, cutile.Partition, cutile.Partition]

    def step(y: cutile.Partition, v: cutile.Partition, out: cutile.Partition) -> Partitions:
        y, _, _ = rms_norm(y, x, W).sync()
        normed = y.unpartition()
        v, _, _ = matvec(v, A, normed).sync()
        products = v.unpartition()
        out, _, _ = residual(out, products, R).sync()
        return normed.partition([1, N]), products.partition([64]), out

    y, v, out = step(y, v, out)              # one eager step: kernels load outside the capture
    with cutile.graph_scope("decode step") as scope:
        y, v, out = step(y, v, out)           # recorded, not run
    graph = scope.graph

    ok = True
    steps = 5
    for replay in range(steps):
        inputs = first if replay == 0 else rng.standard_normal((1, N)).astype(np.float32)
        if replay:
            graph.update(api.from_numpy(inputs))   # new contents for x, the graph's first input
        graph.launch().sync()
        x64 = inputs.astype(np.float64)
        normed = x64 / np.sqrt((x64 * x64).mean() + EPS) * w
        expected = a.astype(np.float64) @ normed[0] + r
        ok &= bool(np.allclose(out.to_numpy(), expected, rtol=1e-4, atol=1e-4))
    print(f"cuda_graphs: RMSNorm -> matvec -> add captured once, replayed {steps} times with new inputs on the "
          f"{cutile.backend()} backend: {'OK' if ok else 'WRONG'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
