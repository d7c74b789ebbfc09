"""RMSNorm: y = x / sqrt(mean(x^2) + eps) * w, one block per row, bf16 in and out,
f32 arithmetic.

Run: ``python examples/rms_norm.py``.
"""

import sys

import ml_dtypes
import numpy as np

import cutile
import cutile.core as ct
from cutile import api
from cutile.core import Constant, Mut, Tensor, bf16, f32


@cutile.entry
def rms_norm(y: Mut[Tensor[bf16, [1, "BN"]]], x: Tensor[bf16, [-1, "N"]], w: Tensor[bf16, ["N"]],
             N: Constant[int], BN: Constant[int], EPS: Constant[float]) -> None:
    row, _, _ = ct.get_tile_block_id()
    values = ct.load(x, index=(row, 0), shape=(1, BN)).astype(f32)   # zero past the end
    mean_square = ct.sum(values * values, axis=1, keepdims=True) / N
    weight = ct.reshape(ct.load(w, index=(0,), shape=(BN,)).astype(f32), (1, BN))
    y.store((values * ct.rsqrt(mean_square + EPS) * weight).astype(bf16))


def main() -> int:
    m, n, eps = 256, 768, 1e-6
    rng = np.random.default_rng(2)
    xs = rng.standard_normal((m, n)).astype(ml_dtypes.bfloat16)
    ws = rng.uniform(0.5, 1.5, n).astype(ml_dtypes.bfloat16)
    block = 1 << (n - 1).bit_length()
    y = api.empty([m, n], dtype=bf16).partition([1, block])
    y, _, _ = rms_norm(y, api.from_numpy(xs), api.from_numpy(ws), EPS=eps).sync()
    x64 = xs.astype(np.float64)
    expected = x64 / np.sqrt((x64 * x64).mean(axis=1, keepdims=True) + eps) * ws.astype(np.float64)
    error = float(np.max(np.abs(y.to_numpy().astype(np.float64) - expected) / (np.abs(expected) + 1e-2)))
    ok = error < 1.6e-2  # bf16 output: 8 bits of mantissa
    print(f"rms_norm: {m} rows of {n} bf16 on the {cutile.backend()} backend; max relative error "
          f"{error:.1e}: {'OK' if ok else 'WRONG'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
