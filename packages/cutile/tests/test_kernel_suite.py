"""The kernel suite (``packages/cutile-compiler/tests/suite_kernels.py``) runs and
agrees with numpy in float64: on the interpreter here, on the GPU too where one is."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import cutile
from cutile import api
from cutile.core import f16, f32
from compiler_suite import entries, load_suite

BOTH_BACKENDS = True
RNG = np.random.default_rng(2026)


SUITE = load_suite().SUITE
KERNELS = entries(SUITE)


def normal(*shape: int, dtype: Any = np.float32) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


def test_add() -> None:
    x, y = normal(1000), normal(1000)
    z = api.full([1000], np.nan).partition([128])
    z, _, _ = KERNELS["add"](z, api.from_numpy(x), api.from_numpy(y)).sync()
    np.testing.assert_array_equal(z.to_numpy(), x + y)


def test_saxpy() -> None:
    x, y = normal(1000), normal(1000)
    z = api.full([1000], np.nan).partition([256])
    z, _, _ = KERNELS["saxpy"](z, api.from_numpy(x), api.from_numpy(y), 2.5).sync()
    np.testing.assert_allclose(z.to_numpy(), np.float32(2.5) * x + y, rtol=1e-6)


def gemm_inputs(m: int, n: int, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    x, y = normal(m, k, dtype=np.float16), normal(k, n, dtype=np.float16)
    return x, y, x.astype(np.float64) @ y.astype(np.float64)


def test_gemm_with_k_loop_and_tails() -> None:
    x, y, expected = gemm_inputs(200, 136, 96)
    z = api.zeros([200, 136]).partition([64, 64])
    z, _, _ = KERNELS["gemm"](z, api.from_numpy(x, f16), api.from_numpy(y, f16), BK=32).sync()
    np.testing.assert_allclose(z.to_numpy(), expected, rtol=1e-4, atol=1e-4)


def test_persistent_gemm_with_grouped_order() -> None:
    x, y, expected = gemm_inputs(200, 136, 96)
    z = api.full([200, 136], np.nan).partition([64, 64])  # 4 x 3 tiles, 5 persistent blocks
    launch = KERNELS["persistent_gemm"](z, api.from_numpy(x, f16), api.from_numpy(y, f16), BK=32, GROUP_M=2)
    z, _, _ = launch.grid(5).sync()
    np.testing.assert_allclose(z.to_numpy(), expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("splits", [1, 3, 4])
def test_split_k_gemm_adds_partial_tiles_atomically(splits: int) -> None:
    x, y, expected = gemm_inputs(200, 136, 96)
    z = api.zeros([200, 136]).partition([64, 64])  # 4 x 3 tiles, `splits` blocks each
    launch = KERNELS["split_k_gemm"](z, api.from_numpy(x, f16), api.from_numpy(y, f16), BK=16, SPLITS=splits)
    z, _, _ = launch.grid(4, 3, splits).sync()
    np.testing.assert_allclose(z.to_numpy(), expected, rtol=1e-4, atol=1e-4)


def test_batched_matmul() -> None:
    a, b = normal(3, 100, 48, dtype=np.float16), normal(3, 48, 72, dtype=np.float16)
    z = api.full([3, 100, 72], np.nan).partition([1, 64, 64])
    z, _, _ = KERNELS["batched_matmul"](z, api.from_numpy(a, f16), api.from_numpy(b, f16), BK=16).sync()
    np.testing.assert_allclose(z.to_numpy(), a.astype(np.float64) @ b.astype(np.float64), rtol=1e-4, atol=1e-4)


def test_row_softmax() -> None:
    x = normal(100, 200) * 3
    z = api.full([100, 200], np.nan).partition([16, 256])
    z, _ = KERNELS["softmax"](z, api.from_numpy(x)).sync()
    e = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(z.to_numpy(), e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-7)


def test_rmsnorm() -> None:
    x, w = normal(100, 200), normal(200)
    z = api.full([100, 200], np.nan).partition([16, 256])
    z, _, _ = KERNELS["rmsnorm"](z, api.from_numpy(x), api.from_numpy(w), 1e-5).sync()
    x64 = x.astype(np.float64)
    expected = x64 / np.sqrt((x64 * x64).mean(axis=1, keepdims=True) + 1e-5) * w
    np.testing.assert_allclose(z.to_numpy(), expected, rtol=1e-5, atol=1e-5)


def test_layernorm() -> None:
    x, w, b = normal(100, 200) + 3, normal(200), normal(200)
    z = api.full([100, 200], np.nan).partition([16, 256])
    z, _, _, _ = KERNELS["layernorm"](z, api.from_numpy(x), api.from_numpy(w), api.from_numpy(b), 1e-5).sync()
    x64 = x.astype(np.float64)
    mean = x64.mean(axis=1, keepdims=True)
    expected = (x64 - mean) / np.sqrt(x64.var(axis=1, keepdims=True) + 1e-5) * w + b
    np.testing.assert_allclose(z.to_numpy(), expected, rtol=1e-4, atol=1e-4)


def test_transpose() -> None:
    x = normal(100, 72)
    z = api.full([72, 100], np.nan).partition([32, 32])
    z, _ = KERNELS["transpose"](z, api.from_numpy(x)).sync()
    np.testing.assert_array_equal(z.to_numpy(), x.T)


def test_causal_flash_attention() -> None:
    heads, seq, dim = 3, 200, 64
    q, k, v = (normal(heads, seq, dim, dtype=np.float16) for _ in range(3))
    scale = 1 / np.sqrt(dim)
    o = api.full([heads, seq, dim], np.nan).partition([1, 64, dim])
    o, _, _, _ = KERNELS["attention"](o, api.from_numpy(q, f16), api.from_numpy(k, f16), api.from_numpy(v, f16),
                                      float(scale), BN=32).sync()
    s = np.einsum("hqd,hkd->hqk", q.astype(np.float64), k.astype(np.float64)) * np.float32(scale)
    s = np.where(np.tril(np.ones((seq, seq), dtype=bool)), s, -np.inf)
    p = np.exp(s - s.max(axis=2, keepdims=True))
    expected = np.einsum("hqk,hkd->hqd", p / p.sum(axis=2, keepdims=True), v.astype(np.float64))
    # p is rounded to f16 before the second product, as flash attention does
    np.testing.assert_allclose(o.to_numpy(), expected, rtol=2e-2, atol=2e-3)


@pytest.mark.parametrize("grid", [1, 3, 12, 20])
def test_persistent_gemm_covers_every_tile_on_any_grid(grid: int) -> None:
    x, y, expected = gemm_inputs(130, 70, 40)
    z = api.full([130, 70], np.nan).partition([64, 64])
    z, _, _ = KERNELS["persistent_gemm"](z, api.from_numpy(x, f16), api.from_numpy(y, f16), BK=32,
                                         GROUP_M=3).grid(grid).sync()
    np.testing.assert_allclose(z.to_numpy(), expected, rtol=1e-4, atol=1e-4)


def test_a_safe_kernel_still_refuses_an_explicit_grid_that_disagrees() -> None:
    x = normal(1000)
    z = api.zeros([1000]).partition([128])
    with pytest.raises(cutile.LaunchError, match="disagrees"):
        KERNELS["add"](z, api.from_numpy(x), api.from_numpy(x)).grid(3).sync()
