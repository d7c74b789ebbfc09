"""cutile_kernels.matmul against numpy float64 on the interpreter: dtypes, epilogues,
views, batches, tails, out=, errors; torch tensors where torch is installed."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest

import cuda_async
import cutile
from cutile import api
from cutile.core import bf16, f16, f32, f8e4m3fn, f8e5m2

import cutile_kernels
from cutile_kernels import matmul
from cutile_kernels._epilogue import activation_reference

pytestmark = pytest.mark.skipif(cutile.backend() != "interpreter", reason="interpreter tests (GPU ones: test_matmul_gpu)")

TINY = {"tile_m": 16, "tile_n": 16, "tile_k": 16, "group_size": 2, "num_worker_warps": 4}  # several tiles, tails
M, N, K = 67, 45, 39

NP = {f16: np.float16, bf16: ml_dtypes.bfloat16, f32: np.float32, f8e4m3fn: ml_dtypes.float8_e4m3fn,
      f8e5m2: ml_dtypes.float8_e5m2}
# The tolerance is the output's rounding (relative to the largest value) plus f32 accumulation.
TOLERANCE = {f16: 2e-3, bf16: 1.6e-2, f32: 1e-5}


def rand(rng: np.random.Generator, shape: tuple[int, ...], dtype: Any) -> np.ndarray[Any, Any]:
    return rng.standard_normal(shape).astype(np.float32).astype(NP[dtype])


def reference(a: Any, b: Any, *, bias: Any = None, activation: str | None = None, residual: Any = None,
              alpha: float = 1.0) -> np.ndarray[Any, Any]:
    out: np.ndarray[Any, Any] = alpha * np.matmul(np.asarray(a, np.float64), np.asarray(b, np.float64))
    if bias is not None:
        out = out + np.asarray(bias, np.float64)
    out = activation_reference(out, activation)
    if residual is not None:
        out = out + np.asarray(residual, np.float64)
    return out


def close(got: Any, expected: np.ndarray[Any, Any], dtype: Any) -> None:
    got = np.asarray(got.to_numpy() if isinstance(got, cutile.Tensor) else got, np.float64)
    assert got.shape == expected.shape
    assert not np.isnan(got).any(), "an element was not written"
    scale = max(1.0, float(np.abs(expected).max()))
    np.testing.assert_allclose(got, expected, rtol=0, atol=TOLERANCE[dtype] * scale)


@pytest.mark.parametrize("dtype", [f16, bf16, f32])
@pytest.mark.parametrize("activation", [None, "relu", "gelu", "silu"])
def test_every_dtype_and_epilogue(dtype: Any, activation: str | None) -> None:
    rng = np.random.default_rng(hash((dtype.name, activation)) % 2**32)
    a, b = rand(rng, (M, K), dtype), rand(rng, (K, N), dtype)
    bias, residual = rand(rng, (N,), f32), rand(rng, (M, N), bf16)
    out = api.full([M, N], np.nan, dtype=dtype)  # poisoned: every element must be written
    got = matmul(api.from_numpy(a), api.from_numpy(b), out=out, bias=api.from_numpy(bias), activation=activation,
                 residual=api.from_numpy(residual), alpha=0.75, config=TINY)
    assert got is out
    close(out, reference(a, b, bias=bias, activation=activation, residual=residual, alpha=0.75), dtype)


@pytest.mark.parametrize("dtype", [f16, bf16, f32])
def test_plain_product_with_default_configs(dtype: Any) -> None:
    rng = np.random.default_rng(5)
    for m, n, k in [(M, N, K), (1, 1, 1), (130, 17, 200), (33, 300, 5)]:
        a, b = rand(rng, (m, k), dtype), rand(rng, (k, n), dtype)
        close(matmul(a, b), reference(a, b), dtype)


@pytest.mark.parametrize("a_shape, b_shape, path", [
    ((3, 300), (300, 70), "gemv"), ((16, 39), (39, 45), "gemv"), ((100, 2100), (2100, 60), "split_k"),
    ((2, 5, 40), (40, 3), "gemv"),  # a batch sharing b: folded into one GEMM of 10 rows
    ((130, 200), (200, 17), "tiled")])
@pytest.mark.parametrize("dtype", [bf16, f32])
def test_each_shape_goes_to_its_kernel_family_with_the_whole_epilogue(a_shape: tuple[int, ...], b_shape: tuple[int, int],
                                                                      path: str, dtype: Any) -> None:
    from cutile_kernels import _matmul

    rng = np.random.default_rng(sum(a_shape) + b_shape[1])
    a, b = rand(rng, a_shape, dtype), rand(rng, b_shape, dtype)
    out_shape = a_shape[:-1] + b_shape[1:]
    bias, residual = rand(rng, b_shape[1:], f32), rand(rng, out_shape, dtype)
    out = api.full(list(out_shape), np.nan, dtype=dtype)
    matmul(api.from_numpy(a), api.from_numpy(b), out=out, bias=api.from_numpy(bias), activation="silu",
           residual=api.from_numpy(residual), alpha=0.5)
    close(out, reference(a, b, bias=bias, activation="silu", residual=residual, alpha=0.5), dtype)
    assert [s.plan.path for s in _matmul._SIGNATURES.values() if s.plan is not None][-1] == path
    pending = matmul.launch(api.from_numpy(a), api.from_numpy(b), out=out, alpha=2.0)
    pending.sync()
    close(out, reference(a, b, alpha=2.0), dtype)


@pytest.mark.parametrize("fp8", [f8e4m3fn, f8e5m2])
def test_fp8_with_scales_as_numbers_and_as_tensors(fp8: Any) -> None:
    rng = np.random.default_rng(8)
    a, b = rand(rng, (M, K), fp8), rand(rng, (K, N), fp8)
    expected = reference(a, b, bias=None, activation="relu", alpha=2.0 * 0.5 * 0.25)
    got = matmul(a, b, scale_a=0.5, scale_b=0.25, alpha=2.0, activation="relu", config=TINY)
    assert got.dtype == ml_dtypes.bfloat16  # fp8's default output
    close(got, expected, bf16)
    scales = (api.from_numpy(np.array([0.5], np.float32)), api.from_numpy(np.array([[0.25]], np.float32)))
    got = matmul(a, b, scale_a=scales[0], scale_b=scales[1], alpha=2.0, activation="relu", out_dtype="f32",
                 config=TINY)
    assert got.dtype == np.float32
    close(got, expected, f32)
    half = matmul(a, b, out_dtype=f16, accumulate_dtype=f16, config=TINY)
    close(half, reference(a, b), f16)


def test_f32_is_exact_by_default_and_tf32_on_request() -> None:
    rng = np.random.default_rng(9)
    a, b = rand(rng, (M, K), f32), rand(rng, (K, N), f32)
    exact = reference(a, b)
    np.testing.assert_allclose(matmul(a, b, config=TINY), exact, rtol=0, atol=1e-5)
    tf32 = matmul(a, b, allow_tf32=True, config=TINY)  # inputs rounded to 10 mantissa bits
    error = float(np.abs(tf32 - exact).max())
    assert 1e-5 < error < 5e-2


def test_transposed_and_strided_views_are_read_in_place(monkeypatch: pytest.MonkeyPatch) -> None:
    from cutile_kernels import _staging

    # Strides and bases on 16 bytes (others are staged: test_matmul_staging), odd M and K.
    monkeypatch.setattr(_staging, "copy", lambda *_: pytest.fail("an aligned view was staged"))
    rng = np.random.default_rng(11)
    n = 48  # (a new f16 result's rows of 96 bytes)
    a, b = rand(rng, (K, M + 5), f16), rand(rng, (2 * K, n + 16), f16)  # a read as a.T, b as every other row
    ta, tb = api.from_numpy(a)[:, :M].T, api.from_numpy(b)[::2, 8:8 + n]
    assert not ta.is_contiguous and not tb.is_contiguous
    close(matmul(ta, tb, config=TINY), reference(a[:, :M].T, b[::2, 8:8 + n]), f16)
    wide = api.full([M, 2 * n], np.nan, dtype=f32)
    window = wide[:, n:]  # a strided output
    matmul(ta, tb, out=window, config=TINY)
    close(window, reference(a[:, :M].T, b[::2, 8:8 + n]), f32)
    assert np.isnan(wide.to_numpy()[:, :n]).all()  # nothing outside out= written


@pytest.mark.parametrize("case", ["batched", "b_shared_2d", "b_shared_1kn", "a_shared", "a_transposed"])
def test_batched_and_broadcast_batched(case: str) -> None:
    rng = np.random.default_rng(13)
    batch = 3
    a = rand(rng, (1 if case == "a_shared" else batch, M, K), f16)
    b = rand(rng, {"b_shared_2d": (K, N), "b_shared_1kn": (1, K, N)}.get(case, (batch, K, N)), f16)
    bias, residual = rand(rng, (N,), f16), rand(rng, (batch, M, N), f16)
    ta: Any = api.from_numpy(a)
    if case == "a_transposed":
        ta = api.from_numpy(np.ascontiguousarray(a.transpose(0, 2, 1))).permute(0, 2, 1)
    got = matmul(ta, api.from_numpy(b), bias=bias, residual=residual, activation="gelu", config=TINY)
    assert got.shape == (batch, M, N)
    close(got, reference(a, b, bias=bias, activation="gelu", residual=residual), f16)


def test_tails_every_size_small() -> None:
    rng = np.random.default_rng(17)
    for m, n, k in [(1, 17, 16), (16, 16, 17), (17, 1, 33), (31, 33, 1), (48, 16, 0)]:
        a, b = rand(rng, (m, k), f32), rand(rng, (k, n), f32)
        bias = rand(rng, (n,), f32)
        close(matmul(a, b, bias=bias, config=TINY), reference(a, b, bias=bias), f32)


def test_empty_outputs_launch_nothing() -> None:
    a, b = np.ones((0, 5), np.float32), np.ones((5, 4), np.float32)
    assert matmul(a, b).shape == (0, 4)
    with pytest.raises(cutile.ArgumentError, match="empty"):
        matmul.launch(a, b)


@pytest.mark.parametrize("k, n", [(40, 48), (K, N)], ids=["aligned", "staged"])
def test_launch_form_is_pending_until_run(k: int, n: int) -> None:
    rng = np.random.default_rng(19)
    a, b = rand(rng, (M, k), f16), rand(rng, (k, n), f16)  # (K, N = 39, 45: rows off 16 bytes, staged)
    out = api.full([M, n], np.nan, dtype=f32)
    launch = matmul.launch(a, b, out=out, config=TINY)
    assert isinstance(launch, cutile.Launch) is (k == 40)  # staged: one op of the copies, GEMM, copy back
    launch.sync()
    close(out, reference(a, b), f32)
    from cutile.bench import do_bench

    result = do_bench(lambda: matmul.launch(a, b, out=out, config=TINY), warmup=1, reps=2)
    assert result.timing == "wall-clock" and result.reps == 2
    close(out, reference(a, b), f32)  # the caller's out object stays usable across launches


def test_numpy_in_numpy_out_and_out_given_back() -> None:
    rng = np.random.default_rng(23)
    a, b = rand(rng, (M, K), f32), rand(rng, (K, N), f32)
    out = np.full((M, N), np.nan, np.float32)
    assert matmul(a, b, out=out, config=TINY) is out
    close(out, reference(a, b), f32)


def _error(match: str, **kwargs: Any) -> None:
    rng = np.random.default_rng(29)
    args = {"a": rand(rng, (M, K), f16), "b": rand(rng, (K, N), f16), **kwargs}
    with pytest.raises(cutile.CutileError, match=match):
        matmul(args.pop("a"), args.pop("b"), **args)


def test_bad_arguments_name_the_parameter() -> None:
    rng = np.random.default_rng(31)
    a = rand(rng, (M, K), f16)
    _error(r"b has 40 rows but a has 39", b=rand(rng, (K + 1, N), f16))
    _error(r"b has dtype f32 and a f16", b=rand(rng, (K, N), f32))
    _error(r"a must be a matrix", a=np.ones((2, 2, 2, 2), np.float16))
    _error(r"a must be a tensor", a=[[1.0]])
    _error(r"batch sizes of a \(2\) and b \(3\)", a=rand(rng, (2, M, K), f16), b=rand(rng, (3, K, N), f16))
    _error(r"out has shape \[45, 67\]", out=np.empty((N, M), np.float16))
    _error(r"out has dtype f16, out_dtype is f32", out=np.empty((M, N), np.float16), out_dtype=f32)
    _error(r"out_dtype='int8' is not a dtype", out_dtype="int8")
    _error(r"out_dtype=f8e4m3fn; the output is f16, bf16 or f32", out_dtype=f8e4m3fn)
    _error(r"accumulate_dtype=f16 with f32", a=rand(rng, (M, K), f32), b=rand(rng, (K, N), f32),
           accumulate_dtype=f16)
    _error(r"bias must have shape \[45\]", bias=np.ones(M, np.float32))
    _error(r"residual must have the output's shape", residual=np.ones((M, 1), np.float32))
    _error(r"activation='tanh' is not one of", activation="tanh")
    _error(r"alpha must be finite", alpha=float("inf"))
    _error(r"alpha must be a number", alpha="2")
    _error(r"scale_b is a number while the other scale is a tensor",
           scale_a=api.from_numpy(np.ones(1, np.float32)), scale_b=2.0)
    _error(r"scale_a must be a one-element f32 tensor", scale_a=api.from_numpy(np.ones(2, np.float32)),
           scale_b=api.from_numpy(np.ones(1, np.float32)))
    _error(r"config must be a dict of some of", config={"tile_q": 3})
    _error(r"config tile_m=24 is not a power of two", config={"tile_m": 24})
    _error(r"config num_worker_warps: 3 is not a power of two", config={"num_worker_warps": 3})
    _error(r"allow_tf32 must be a bool", allow_tf32=1)
    readonly = np.empty((M, N), np.float16)
    readonly.flags.writeable = False
    with pytest.raises(cutile.LaunchError, match="parameter 'out'"):  # the kernel's own check, under the user's name
        matmul(a, rand(rng, (K, N), f16), out=readonly)
    with pytest.raises(cutile.ArgumentTypeError, match="b is a partition"):
        matmul(a, api.zeros([K, N], dtype=f16).partition([16, 16]))


def test_out_overlapping_an_input_is_refused() -> None:
    both = api.zeros([M, 2 * K], dtype=f32)
    a = both[:, :K]
    b = api.zeros([K, K], dtype=f32)
    with pytest.raises(cutile.ArgumentError, match="out overlaps the memory of a"):
        matmul(a, b, out=both[:, 1:K + 1])
    with pytest.raises(cutile.ArgumentError, match="out overlaps the memory of a"):  # interleaved rows: one byte range
        matmul(a, b, out=both[:, K:])
    residual = api.zeros([M, K], dtype=f32)
    with pytest.raises(cutile.ArgumentError, match="out overlaps the memory of residual"):
        matmul(a, b, out=residual, residual=residual)
    rows = api.zeros([2 * M, K], dtype=f32)
    matmul(rows[:M], b, out=rows[M:])  # beside a, not over it: fine


def test_repeated_calls_reuse_one_plan() -> None:
    from cutile_kernels import _matmul

    rng = np.random.default_rng(37)
    a, b = rand(rng, (M, 40), f16), rand(rng, (40, 48), f16)  # (rows on 16 bytes: one signature, unstaged)
    matmul(a, b, config=TINY)
    plans = len(_matmul._SIGNATURES)
    for _ in range(3):
        matmul(a, b, config=TINY)
    assert len(_matmul._SIGNATURES) == plans
    matmul(a, b, config={**TINY, "tile_m": 32})
    assert len(_matmul._SIGNATURES) == plans + 1


def test_a_call_repeating_the_last_ones_objects_reuses_its_checked_call_and_nothing_stale(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from cutile_kernels import _matmul

    # (plans kept by layout serve such calls before the last call is asked: left out here)
    monkeypatch.setattr(_matmul._KEPT_CALLS, "get", lambda key: None)
    rng = np.random.default_rng(41)
    an, bn, bias_n = rand(rng, (40, 30), f32), rand(rng, (30, 20), f32), rand(rng, (20,), f32)
    a, b, bias = api.from_numpy(an), api.from_numpy(bn), api.from_numpy(bias_n)
    out = api.full([40, 20], np.nan)
    matmul(a, b, out=out, bias=bias)
    remembered = matmul._last
    assert remembered is not None
    matmul(a, b, out=out, bias=bias)
    assert matmul._last is remembered  # the same objects and arguments: the same checked call
    close(out, reference(an, bn, bias=bias_n), f32)
    matmul(a, b, out=out, bias=bias, alpha=3.0)  # another alpha (a run-time value): checked, and right
    close(out, reference(an, bn, bias=bias_n, alpha=3.0), f32)
    with pytest.raises(cutile.ArgumentError, match="alpha"):
        matmul(a, b, out=out, bias=bias, alpha=float("inf"))
    other = api.full([40, 20], np.nan)
    matmul(a, b, out=other, bias=bias, alpha=3.0)  # another out: its own call
    close(other, reference(an, bn, bias=bias_n, alpha=3.0), f32)
    matmul(an, bn, out=np.full((40, 20), np.nan, np.float32))  # numpy (a foreign kind): imported every call
    assert matmul._last is None
    matmul(a, b, out=other, bias=bias, alpha=3.0)
    whole = a.partition([8, 8])  # a consumed: the launch still refuses it, naming it
    with pytest.raises(cutile.OwnershipError, match="consumed"):
        matmul(a, b, out=other, bias=bias, alpha=3.0)
    del whole


@pytest.mark.parametrize("rows", [3, 40], ids=["gemv", "tiled"])
def test_a_repeated_call_reuses_its_launch_arguments_and_still_refuses_what_changed(
        rows: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """A call repeating the last one's objects launches on the arguments made the first
    time (the GEMV path's launches too); a call in another layout, dtype or stride is
    checked and planned afresh; bad arguments and a consumed out are still refused. (Plans
    kept by layout serve such calls first: left out here, so that the last call is asked.)"""
    from cutile_kernels import _matmul

    monkeypatch.setattr(_matmul._KEPT_CALLS, "get", lambda key: None)
    rng = np.random.default_rng(43)
    xn, wn = rand(rng, (rows, 64), bf16), rand(rng, (48, 64), bf16)  # the weight [out, in], passed as .T
    x, w = api.from_numpy(xn), api.from_numpy(wn)
    w_t = w.T
    out = api.full([rows, 48], np.nan, bf16)  # poisoned: the first call writes it
    matmul(x, w_t, out=out)
    remembered = matmul._last
    assert remembered is not None
    if rows <= 16:
        assert remembered.call.gemv_launches is not None  # made at the first launch
    matmul(x, w_t, out=out)
    assert matmul._last is remembered
    close(out, reference(xn, wn.T), bf16)
    strided = api.from_numpy(np.ascontiguousarray(wn.T))  # [in, out] row-major: another stride
    other = api.full([rows, 48], np.nan, bf16)
    matmul(x, strided, out=other)
    assert matmul._last is not remembered and matmul._last is not None
    assert matmul._last.call is not remembered.call
    close(other, reference(xn, wn.T), bf16)
    f32_out = api.full([rows, 48], np.nan, f32)  # another dtype of out
    matmul(x, w_t, out=f32_out)
    close(f32_out, reference(xn, wn.T), bf16)
    matmul(x, w_t, out=out)
    with pytest.raises(cutile.ArgumentError, match="out"):
        matmul(x, w_t, out=api.full([rows, 47], np.nan, bf16))
    with pytest.raises(cutile.ArgumentError, match="alpha"):
        matmul(x, w_t, out=out, alpha=float("inf"))
    matmul(x, w_t, out=out)  # remembered again
    taken = out.partition([1, 16])  # out consumed: the remembered call's launch refuses it
    with pytest.raises(cutile.OwnershipError, match="consumed"):
        matmul(x, w_t, out=out)
    del taken


@pytest.mark.parametrize("consumed", ["bias", "b", "a"])
def test_a_repeated_tiled_call_refuses_a_consumed_bias_or_transposed_operand(
        consumed: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The remembered call launches on views made the first time (a transposed a or b
    read through its transpose, the bias as a row): those would not see their tensor
    consumed since, so the launch checks them again (as the kept-plan launch does)."""
    from cutile_kernels import _matmul

    monkeypatch.setattr(_matmul._KEPT_CALLS, "get", lambda key: None)
    rng = np.random.default_rng(47)
    xn, wn, bn = rand(rng, (64, 40), bf16), rand(rng, (48, 64), bf16), rand(rng, (48,), bf16)
    x_t = api.from_numpy(np.ascontiguousarray(xn)).T  # [40, 64] read through its transpose
    w_t = api.from_numpy(wn).T
    bias = api.from_numpy(bn)
    out = api.full([40, 48], np.nan, bf16)
    matmul(x_t, w_t, out=out, bias=bias)
    matmul(x_t, w_t, out=out, bias=bias)  # the remembered call
    assert matmul._last is not None and matmul._last.call.positional is not None
    close(out, reference(xn.T, wn.T, bias=bn), bf16)
    tensor = {"bias": bias, "b": w_t, "a": x_t}[consumed]
    taken = tensor.partition([8] if tensor.ndim == 1 else [8, 8])
    with pytest.raises(cutile.OwnershipError, match=f"matmul: {consumed}: .*consumed"):
        matmul(x_t, w_t, out=out, bias=bias)
    del taken


@pytest.mark.parametrize("rows, k", [(100, 2112), (4, 4096)], ids=["split_k", "gemv_k_split"])
def test_a_two_launch_call_owns_its_out_and_epilogue_operands_while_pending(rows: int, k: int) -> None:
    """Split-K and a GEMV over slices of K make their reduction as the partial sums are
    enqueued: the pending op holds out, bias and residual from the call all the same, so a
    write to them, or a read of out, is refused while it is pending (as for one launch)."""
    rng = np.random.default_rng(53)
    an, bn, rn, biasn = (rand(rng, (rows, k), f32), rand(rng, (k, 32), f32), rand(rng, (rows, 32), f32),
                         rand(rng, (32,), f32))
    a, b, r, bias = (api.from_numpy(v) for v in (an, bn, rn, biasn))
    y = api.full([rows, 32], np.nan, f32)
    op = matmul.launch(a, b, out=y, residual=r, bias=bias)
    assert isinstance(op, cuda_async.DeviceOp)  # (two launches: the path under test)
    x1, x2 = api.from_numpy(rand(rng, (rows, 8), f32)), api.from_numpy(rand(rng, (8, 32), f32))
    with pytest.raises(cutile.OwnershipError, match="residual"):
        matmul(x1, x2, out=r)  # a write to what the pending op reads
    with pytest.raises(cutile.OwnershipError, match="out"):
        y.to_numpy()  # a read of what it writes
    with pytest.raises(cutile.OwnershipError, match="bias"):
        bias.host_view()
    op.sync()
    close(y, reference(an, bn, bias=biasn) + rn, f32)
    matmul(x1, x2, out=r)  # given back once it ran


def test_torch_tensors_in_and_out() -> None:
    torch = pytest.importorskip("torch", reason="torch is not installed here")
    rng = np.random.default_rng(41)
    a, b = rand(rng, (M, K), f32), rand(rng, (K, N), f32)
    got = matmul(torch.from_numpy(a), torch.from_numpy(b), config=TINY)
    assert isinstance(got, torch.Tensor)
    close(got.numpy(), reference(a, b), f32)
    out = torch.full((M, N), float("nan"))
    assert matmul(torch.from_numpy(a), torch.from_numpy(b), out=out, config=TINY) is out
    close(out.numpy(), reference(a, b), f32)


def test_gemm_space_keys_are_what_config_takes() -> None:
    assert set(cutile_kernels.GEMM_SPACE.params) == {"tile_m", "tile_n", "tile_k", "num_worker_warps", "occupancy",
                                                      "group_size", "blocks_per_sm"}


def test_a_transposed_operand_is_read_through_its_contiguous_transpose() -> None:
    from cutile_kernels import _matmul

    rng = np.random.default_rng(43)
    a, weight = rand(rng, (K, M), bf16), rand(rng, (N, K), bf16)  # a stored column-major, a weight [N, K]
    got = matmul(api.from_numpy(a).T, api.from_numpy(weight).T, bias=rand(rng, (N,), f32), config=TINY)
    plans = [s.plan for s in _matmul._SIGNATURES.values() if s.plan is not None and s.plan.b_transposed]
    assert plans and plans[-1].a_transposed
    assert isinstance(got, cutile.Tensor) and got.shape == (M, N)
    close(matmul(api.from_numpy(a).T, api.from_numpy(weight).T, config=TINY), reference(a.T, weight.T), bf16)


def test_tiled_calls_of_new_objects_in_known_layouts_take_their_plan() -> None:
    """A prefill's layer calls matmul(x, w.T, out=o) of many rows with a new w.T view
    each time: the tiled path keeps its plan by the operands' layouts and memory, so a
    call of new objects over the same memory takes it (new values computed right);
    another layout or epilogue is planned afresh; a bad alpha, a bad out and a consumed
    out, bias or transposed operand are still refused."""
    from cutile_kernels import _matmul

    rng = np.random.default_rng(53)
    xn, wn, bias_n = rand(rng, (40, 64), bf16), rand(rng, (48, 64), bf16), rand(rng, (48,), bf16)
    x, w, bias = api.from_numpy(xn), api.from_numpy(wn), api.from_numpy(bias_n)
    out = api.full([40, 48], np.nan, bf16)
    _matmul._KEPT_CALLS.clear()
    matmul(x, w.T, out=out)
    close(out, reference(xn, wn.T), bf16)
    assert len(_matmul._KEPT_CALLS) == 1
    kept = next(iter(_matmul._KEPT_CALLS.values()))
    assert kept.path == "tiled" and kept.b_transposed
    new_x = rand(rng, (40, 64), bf16)
    x.host_view()[...] = new_x
    out.host_view()[...] = np.nan
    signatures = len(_matmul._SIGNATURES)
    assert matmul(x[...], w.T, out=out[...]) is not None  # new objects over the same memory
    assert len(_matmul._KEPT_CALLS) == 1 and next(iter(_matmul._KEPT_CALLS.values())) is kept
    assert len(_matmul._SIGNATURES) == signatures  # (not asked: the kept plan launched)
    close(out, reference(new_x, wn.T), bf16)
    out.host_view()[...] = np.nan
    matmul(x, w.T, out=out, bias=bias, activation="silu", alpha=0.5)  # another epilogue: its own plan
    close(out, reference(new_x, wn.T, bias=bias_n, activation="silu", alpha=0.5), bf16)
    matmul(x, w.T, out=out, bias=bias, activation="silu", alpha=2.0)  # alpha is a run-time value
    close(out, reference(new_x, wn.T, bias=bias_n, activation="silu", alpha=2.0), bf16)
    column_major = api.from_numpy(np.ascontiguousarray(new_x.T)).T  # a read through its transpose
    matmul(column_major, w.T, out=out)
    close(out, reference(new_x, wn.T), bf16)
    matmul(column_major, w.T, out=out)
    assert len(_matmul._KEPT_CALLS) == 3
    with pytest.raises(cutile.ArgumentError, match="alpha"):
        matmul(x, w.T, out=out, alpha=float("nan"))
    with pytest.raises(cutile.ArgumentError, match="out"):
        matmul(x, w.T, out=api.full([40, 47], np.nan, bf16))  # another shape: checked (and refused)
    with pytest.raises(cutile.ArgumentError, match="out overlaps the memory of a"):
        matmul(x[:, :48], w[:, :48].T, out=x[:, :48])  # its memory an input's: checked (and refused)
    for name, tensor, call in (  # (each stays consumed: out last)
            ("bias", bias, lambda: matmul(x, w.T, out=out, bias=bias, activation="silu", alpha=0.5)),
            ("a", column_major, lambda: matmul(column_major, w.T, out=out)),
            ("out", out, lambda: matmul(x, w.T, out=out))):
        taken = tensor.partition([1, 8] if tensor.ndim == 2 else [8])
        with pytest.raises(cutile.OwnershipError, match=f"matmul: {name}: .*consumed"):
            call()
        del taken


@pytest.mark.parametrize("k", [64, 4096], ids=["direct", "split_k"])
def test_gemv_calls_of_new_objects_in_known_layouts_take_their_plan(k: int) -> None:
    """A model's layer calls matmul(x, w.T, out=o) with a new w.T view each time: the
    GEMV path keeps its plan by the operands' layouts and memory, so a call of new objects
    over the same memory takes it (new values computed right); another layout, dtype or
    epilogue is planned afresh; a bad alpha and a consumed out are still refused."""
    from cutile_kernels import _matmul

    rng = np.random.default_rng(47)
    xn, wn, bias_n = rand(rng, (2, k), bf16), rand(rng, (40, k), bf16), rand(rng, (40,), bf16)
    x, w, bias = api.from_numpy(xn), api.from_numpy(wn), api.from_numpy(bias_n)
    out = api.full([2, 40], np.nan, bf16)
    _matmul._KEPT_CALLS.clear()
    matmul(x, w.T, out=out)
    close(out, reference(xn, wn.T), bf16)
    assert len(_matmul._KEPT_CALLS) == 1
    kept = next(iter(_matmul._KEPT_CALLS.values()))
    assert (kept.config["split_k"] > 1) is (k == 4096)
    new_x = rand(rng, (2, k), bf16)
    x.host_view()[...] = new_x
    out.host_view()[...] = np.nan
    assert matmul(x[...], w.T, out=out[...]) is not None  # new objects over the same memory
    assert len(_matmul._KEPT_CALLS) == 1 and next(iter(_matmul._KEPT_CALLS.values())) is kept
    close(out, reference(new_x, wn.T), bf16)
    out.host_view()[...] = np.nan
    matmul(x, w.T, out=out, bias=bias, activation="silu", alpha=0.5)  # another epilogue: its own plan
    close(out, reference(new_x, wn.T, bias=bias_n, activation="silu", alpha=0.5), bf16)
    matmul(x, w.T, out=out, bias=bias, activation="silu", alpha=2.0)  # alpha is a run-time value
    close(out, reference(new_x, wn.T, bias=bias_n, activation="silu", alpha=2.0), bf16)
    f32_out = api.full([2, 40], np.nan, f32)  # another dtype of out
    matmul(x, w.T, out=f32_out)
    close(f32_out, reference(new_x, wn.T), bf16)
    row_major = api.from_numpy(np.ascontiguousarray(wn.T))  # [K, N] row-major: another stride
    matmul(x, row_major, out=out)
    close(out, reference(new_x, wn.T), bf16)
    assert len(_matmul._KEPT_CALLS) == 4
    with pytest.raises(cutile.ArgumentError, match="alpha"):
        matmul(x, w.T, out=out, alpha=float("nan"))
    with pytest.raises(cutile.ArgumentError, match="out"):
        matmul(x, w.T, out=api.full([2, 41], np.nan, bf16))  # another shape: checked (and refused)
    taken = out.partition([1, 8])
    with pytest.raises(cutile.OwnershipError, match="consumed"):
        matmul(x, w.T, out=out)
    del taken
