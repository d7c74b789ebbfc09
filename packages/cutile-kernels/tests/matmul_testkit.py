"""Shared by the GEMV and split-K tests: random inputs of a dtype, the float64 reference
of a product with its epilogue, and the check of a result against it."""

from typing import Any

import ml_dtypes
import numpy as np

from cutile.core import bf16, f16, f32

NUMPY = {f16: np.float16, bf16: ml_dtypes.bfloat16, f32: np.float32}
#: each dtype's unit roundoff (a result is compared to a few of them)
EPS = {f16: 2.0 ** -10, bf16: 2.0 ** -7, f32: 2.0 ** -20}


def reference(a: Any, b: Any, bias: Any = None, activation: str | None = None, residual: Any = None,
              alpha: float = 1.0) -> Any:
    """act(alpha * a @ b + bias) + residual in float64 (GELU: the tanh approximation)."""
    y = alpha * (np.asarray(a, np.float64) @ np.asarray(b, np.float64))
    if bias is not None:
        y = y + np.asarray(bias, np.float64)
    if activation == "relu":
        y = np.maximum(y, 0.0)
    elif activation == "gelu":
        y = 0.5 * y * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (y + 0.044715 * y ** 3)))
    elif activation == "silu":
        y = y / (1.0 + np.exp(-y))
    if residual is not None:
        y = y + np.asarray(residual, np.float64)
    return y


def assert_close(got: Any, expected: Any, dtype: Any) -> None:
    got = np.asarray(got, np.float64)
    assert np.isfinite(got).all(), "unwritten (NaN-poisoned) elements left in out"
    scale = float(np.abs(expected).max())
    np.testing.assert_allclose(got, expected, rtol=4 * EPS[dtype], atol=4 * EPS[dtype] * scale + 1e-5)


def random(rng: np.random.Generator, shape: tuple[int, ...], dtype: Any) -> Any:
    return rng.standard_normal(shape).astype(NUMPY[dtype])
