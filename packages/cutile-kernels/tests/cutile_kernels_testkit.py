"""Shared by the row kernels' tests: random inputs rounded to a dtype, float64
references, poisoned outputs, tolerances per dtype."""

from typing import Any

import ml_dtypes
import numpy as np

import cutile
from cutile import api
from cutile.core import bf16, f16, f32

DTYPES = {"f32": f32, "f16": f16, "bf16": bf16}
NUMPY = {"f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16}
#: rtol, atol of a result rounded to the dtype (a few of its ulps)
TOLERANCE = {"f32": (2e-5, 2e-6), "f16": (4e-3, 2e-3), "bf16": (2e-2, 1e-2)}

#: configs that take each schedule at the tests' sizes: one pass; chunked, tails in both dims
ONE_PASS = {"tile_rows": 4, "tile_cols": 2048, "occupancy": 1, "num_worker_warps": 4}
CHUNKED = {"tile_rows": 2, "tile_cols": 64, "occupancy": 2, "num_worker_warps": 4}
CONFIGS = {"one_pass": ONE_PASS, "chunked": CHUNKED, "tuned": None}


def normal(shape: tuple[int, ...], dtype: str, seed: int, scale: float = 1.0, shift: float = 0.0) -> Any:
    """Normal values as a numpy array of ``dtype`` (ml_dtypes for bf16)."""
    values = np.random.default_rng(seed).standard_normal(shape) * scale + shift
    return values.astype(NUMPY[dtype])


def f64(array: Any) -> Any:
    return np.asarray(array).astype(np.float64)


def poisoned(shape: tuple[int, ...], dtype: str) -> cutile.Tensor:
    return api.full(list(shape), np.nan, dtype=DTYPES[dtype])


def check(result: Any, expected: Any, dtype: str, scale: float = 1.0) -> None:
    rtol, atol = TOLERANCE[dtype]
    got = f64(result.to_numpy() if isinstance(result, cutile.Tensor) else result)
    assert got.shape == expected.shape
    assert np.isfinite(got).all(), "an element was not written"
    np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol * scale)


def rope_reference(x: Any, positions: Any, theta: float, style: str) -> Any:
    """RoPE in float64 at ``positions`` (x's leading shape; every head alike)."""
    d = x.shape[-1]
    inv_freq = theta ** (-2.0 * np.arange(d // 2) / d)
    angle = np.asarray(positions).astype(np.float64)[..., None, None] * inv_freq  # (..., 1, d/2): every head
    c, s = np.cos(angle), np.sin(angle)
    out = np.empty_like(x)
    if style == "neox":
        x1, x2 = x[..., : d // 2], x[..., d // 2:]
        out[..., : d // 2], out[..., d // 2:] = x1 * c - x2 * s, x2 * c + x1 * s
    else:
        x1, x2 = x[..., 0::2], x[..., 1::2]
        out[..., 0::2], out[..., 1::2] = x1 * c - x2 * s, x2 * c + x1 * s
    return out
