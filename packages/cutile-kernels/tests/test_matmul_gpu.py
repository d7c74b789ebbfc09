"""cutile_kernels.matmul on the GPU at real sizes (the configs the records or defaults
choose), against float64 products of sampled rows; torch tensors in and out."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import cutile
from cutile import api
from cutile.core import bf16, f16, f32, f8e4m3fn, f8e5m2

from cutile_kernels import matmul
from cutile_kernels._epilogue import activation_reference

pytestmark = pytest.mark.gpu


def _rows_close(out: Any, a: np.ndarray[Any, Any], b: np.ndarray[Any, Any], tolerance: float, *,
                bias: Any = None, activation: str | None = None, residual: Any = None, alpha: float = 1.0) -> None:
    got = np.asarray(out.to_numpy() if isinstance(out, cutile.Tensor) else out, np.float64)
    assert not np.isnan(got).any()
    rows = sorted({0, 1, got.shape[-2] // 2, got.shape[-2] - 1})
    expected = alpha * (a.astype(np.float64)[..., rows, :] @ b.astype(np.float64))
    if bias is not None:
        expected = expected + bias
    expected = activation_reference(expected, activation)
    if residual is not None:
        expected = expected + np.asarray(residual, np.float64)[..., rows, :]
    scale = max(1.0, float(np.abs(expected).max()))
    np.testing.assert_allclose(got[..., rows, :], expected, rtol=0, atol=tolerance * scale)


@pytest.mark.parametrize("dtype,tolerance", [(f16, 2e-3), (bf16, 1.6e-2), (f32, 1e-5)])
@pytest.mark.parametrize("shape", [(2048, 2048, 2048), (3000, 5000, 1000), (8191, 257, 129), (128, 4096, 4096)])
def test_sizes_and_tails(dtype: Any, tolerance: float, shape: tuple[int, int, int]) -> None:
    m, n, k = shape
    a, b = api.randn([m, k], dtype=dtype, seed=1), api.randn([k, n], dtype=dtype, seed=2)
    out = api.full([m, n], np.nan, dtype=dtype)
    matmul(a, b, out=out)
    _rows_close(out, a.to_numpy(), b.to_numpy(), tolerance)


def test_fused_epilogue_and_transposed_weight() -> None:
    m, n, k = 3000, 4096, 1000
    a = api.randn([m, k], dtype=bf16, seed=3)
    weight = api.randn([n, k], dtype=bf16, seed=4)  # [N, K], read as its transpose in place
    bias, residual = api.randn([n], dtype=f32, seed=5), api.randn([m, n], dtype=bf16, seed=6)
    out = matmul(a, weight.T, bias=bias, activation="gelu", residual=residual, alpha=0.5)
    _rows_close(out, a.to_numpy(), weight.to_numpy().T, 1.6e-2, bias=bias.to_numpy(), activation="gelu",
                residual=residual.to_numpy(), alpha=0.5)


@pytest.mark.parametrize("fp8", [f8e4m3fn, f8e5m2])
def test_fp8_with_device_scales(fp8: Any) -> None:
    m = n = k = 2048
    a = api.astype(api.randn([m, k], dtype=f16, seed=7), fp8)
    b = api.astype(api.randn([k, n], dtype=f16, seed=8), fp8)
    scale_a, scale_b = api.full([1], 0.5, dtype=f32), api.full([1], 2.0, dtype=f32)
    out = matmul(a, b, scale_a=scale_a, scale_b=scale_b)
    assert out.dtype == bf16
    _rows_close(out, a.to_numpy(), b.to_numpy(), 1.6e-2)


def test_batched_and_broadcast() -> None:
    a = api.randn([8, 512, 384], dtype=f16, seed=9)
    b = api.randn([8, 384, 640], dtype=f16, seed=10)
    _rows_close(matmul(a, b), a.to_numpy(), b.to_numpy(), 2e-3)
    shared = api.randn([384, 640], dtype=f16, seed=11)
    _rows_close(matmul(a, shared), a.to_numpy(), shared.to_numpy(), 2e-3)  # folded into one GEMM
    _rows_close(matmul(a.permute(0, 2, 1).permute(0, 2, 1), shared.broadcast_to(8, 384, 640)), a.to_numpy(),
                shared.to_numpy(), 2e-3)


def test_launch_form_times_device_work() -> None:
    from cutile.bench import do_bench

    a, b = api.randn([4096, 4096], dtype=f16, seed=12), api.randn([4096, 4096], dtype=f16, seed=13)
    out = api.empty([4096, 4096], dtype=f16)
    result = do_bench(lambda: matmul.launch(a, b, out=out), warmup=3, reps=10)
    assert result.timing == "cuda-events" and result.median_ms > 0
    _rows_close(out, a.to_numpy(), b.to_numpy(), 2e-3)


def test_torch_tensors_in_and_out_on_the_gpu() -> None:
    torch = pytest.importorskip("torch", reason="torch is not installed here")
    a = torch.randn(1000, 700, dtype=torch.float16, device="cuda")
    b = torch.randn(700, 900, dtype=torch.float16, device="cuda")
    got = matmul(a, b)
    assert isinstance(got, torch.Tensor) and got.is_cuda and got.dtype == torch.float16
    torch.testing.assert_close(got.float(), (a.double() @ b.double()).float(), atol=0.06, rtol=2e-3)
    out = torch.empty(1000, 900, dtype=torch.float32, device="cuda")
    assert matmul(a, b, out=out, bias=torch.ones(900, device="cuda"), activation="relu") is out
    torch.testing.assert_close(out, torch.relu(a.float() @ b.float() + 1), atol=0.06, rtol=2e-3)


def test_cupy_arrays_in_and_out_on_the_gpu() -> None:
    cupy = pytest.importorskip("cupy", reason="CuPy is not installed here")
    a = cupy.random.standard_normal((500, 300), dtype=cupy.float32)
    b = cupy.random.standard_normal((300, 200), dtype=cupy.float32)
    got = matmul(a, b)
    assert isinstance(got, cupy.ndarray)
    np.testing.assert_allclose(cupy.asnumpy(got), cupy.asnumpy(a).astype(np.float64) @ cupy.asnumpy(b), atol=1e-3)


@pytest.mark.parametrize("dtype,tolerance", [(f16, 2e-3), (bf16, 1.6e-2), (f32, 1e-5)])
def test_operands_off_16_bytes_are_staged(dtype: Any, tolerance: float) -> None:
    """Rows of 1031 elements, a view one element into its buffer, a w.T weight of rows of
    1031, an out that is a column slice of a wider tensor (all staged: `_staging`)."""
    m, n, k = 2047, 8191, 1031
    a = api.randn([m, k + 1], dtype=dtype, seed=11)[:, 1:]
    weight = api.randn([n, k], dtype=dtype, seed=12)
    wide = api.full([m, n + 3], np.nan, dtype=dtype)
    out = wide[:, 1:n + 1]
    matmul(a, weight.T, out=out, activation="relu")
    _rows_close(out, a.to_numpy(), weight.to_numpy().T, tolerance, activation="relu")
    edges = wide.to_numpy()
    assert np.isnan(edges[:, 0]).all() and np.isnan(edges[:, n + 1:]).all()
    launched = matmul.launch(a, weight.T, out=out)
    assert not isinstance(launched, cutile.Launch)  # the copies, the GEMM and the copy back: one op
    launched.sync()
    _rows_close(out, a.to_numpy(), weight.to_numpy().T, tolerance)
