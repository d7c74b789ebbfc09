"""The row kernels on the GPU at the sizes they are for (16384 x 8192, and 8192 x 151936
for softmax), with the default and chunked schedules, against float64 on sampled rows;
torch tensors in and out. Marked ``gpu``: skipped where no GPU is present (their
behaviour is tested on the interpreter by the other files)."""

from typing import Any

import numpy as np
import pytest
from cutile_kernels_testkit import CHUNKED, DTYPES, TOLERANCE

import cutile
from cutile import api
from cutile_kernels import add_rms_norm, layer_norm, layer_norm_backward, log_softmax, qk_norm, rms_norm, softmax
from cutile_kernels._norms import layer_norm_backward_reference

pytestmark = pytest.mark.gpu
SAMPLE = 61


def inputs(rows: int, cols: int, dtype: str, seed: int, shift: float = 0.0) -> tuple[cutile.Tensor, Any]:
    values = np.random.default_rng(seed).standard_normal((rows, cols), dtype=np.float32) + shift
    tensor = api.from_numpy(values, DTYPES[dtype])
    return tensor, tensor.to_numpy()  # as rounded to the dtype (in float64 only where used: they are large)


def sampled(rows: int) -> Any:
    return np.unique(np.linspace(0, rows - 1, SAMPLE).astype(np.int64))


def check_rows(result: cutile.Tensor, expected: Any, rows: Any, dtype: str, scale: float = 4.0) -> None:
    got = result.to_numpy()[rows].astype(np.float64)
    assert np.isfinite(got).all()
    rtol, atol = TOLERANCE[dtype]
    np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol * scale)


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
@pytest.mark.parametrize("shape", [(16384, 8192), (8192, 151936)])
@pytest.mark.parametrize("log", [False, True])
def test_softmax_at_size(dtype: str, shape: tuple[int, int], log: bool) -> None:
    x, values = inputs(*shape, dtype, seed=1)
    rows = sampled(shape[0])
    picked = values[rows].astype(np.float64)
    shifted = picked - picked.max(axis=1, keepdims=True)
    logs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    result = (log_softmax if log else softmax)(x)
    check_rows(result, logs if log else np.exp(logs), rows, dtype, scale=20.0 if log else 1.0)


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
@pytest.mark.parametrize("config", [None, CHUNKED])
def test_norms_at_size(dtype: str, config: Any) -> None:
    rows_n, cols = 16384, 8192
    x, xv = inputs(rows_n, cols, dtype, seed=2, shift=1.0)
    r, rv = inputs(rows_n, cols, dtype, seed=3)
    w, wv = inputs(1, cols, dtype, seed=4)
    b, bv = inputs(1, cols, dtype, seed=5)
    w, b, wv, bv = w.reshape(cols), b.reshape(cols), wv[0].astype(np.float64), bv[0].astype(np.float64)
    rows = sampled(rows_n)
    xv = xv.astype(np.float64)
    xs = xv[rows]
    check_rows(rms_norm(x, w, config=config), xs / np.sqrt((xs * xs).mean(1, keepdims=True) + 1e-6) * wv, rows, dtype)
    total, normed = add_rms_norm(x, r, w, config=config)
    ts = total.to_numpy()[rows].astype(np.float64)
    check_rows(total, xs + rv[rows].astype(np.float64), rows, dtype)
    check_rows(normed, ts / np.sqrt((ts * ts).mean(1, keepdims=True) + 1e-6) * wv, rows, dtype)
    y, mean, rstd = layer_norm(x, w, b, return_stats=True, config=config)
    m, s = xs.mean(1, keepdims=True), 1 / np.sqrt(xs.var(1, keepdims=True) + 1e-5)
    check_rows(y, (xs - m) * s * wv + bv, rows, dtype)
    check_rows(mean.reshape(rows_n, 1), m, rows, "f32")
    check_rows(layer_norm(x, w, b, config=config), (xs - m) * s * wv + bv, rows, dtype)
    dy, gv = inputs(rows_n, cols, dtype, seed=6)
    dx, dw, db = layer_norm_backward(dy, x, w, mean, rstd, config=config)
    full_mean = xv.mean(1, keepdims=True)
    full_rstd = 1 / np.sqrt(xv.var(1, keepdims=True) + 1e-5)
    edx, edw, edb = layer_norm_backward_reference(gv.astype(np.float64), xv, wv, full_mean, full_rstd)
    check_rows(dx, edx[rows], rows, dtype)
    rtol, atol = TOLERANCE[dtype]
    np.testing.assert_allclose(dw.to_numpy().astype(np.float64), edw, rtol=rtol, atol=atol * 4 * np.sqrt(rows_n))
    np.testing.assert_allclose(db.to_numpy().astype(np.float64), edb, rtol=rtol, atol=atol * 4 * np.sqrt(rows_n))


def test_torch_tensors_in_and_out() -> None:
    torch = pytest.importorskip("torch")
    x = torch.randn(4, 32, 1024, 128, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(4, 8, 1024, 128, device="cuda", dtype=torch.bfloat16)
    qw, kw = torch.randn(128, device="cuda", dtype=torch.bfloat16), torch.randn(128, device="cuda",
                                                                               dtype=torch.bfloat16)
    qn, kn = qk_norm(x, k, qw, kw, 1e-6)
    assert isinstance(qn, torch.Tensor) and qn.shape == x.shape and qn.dtype == torch.bfloat16
    expected = torch.nn.functional.rms_norm(x.float(), (128,), qw.float(), 1e-6)
    torch.testing.assert_close(qn.float(), expected, rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(kn.float(), torch.nn.functional.rms_norm(k.float(), (128,), kw.float(), 1e-6),
                               rtol=2e-2, atol=2e-2)
    out = torch.full((64, 3000), float("nan"), device="cuda")
    logits = torch.randn(64, 3000, device="cuda")
    assert softmax(logits, out=out) is out
    torch.testing.assert_close(out, torch.softmax(logits, -1), rtol=1e-5, atol=1e-7)
    stats = layer_norm(logits, torch.ones(3000, device="cuda"), torch.zeros(3000, device="cuda"), return_stats=True)
    assert all(isinstance(t, torch.Tensor) for t in stats) and stats[1].dtype == torch.float32
