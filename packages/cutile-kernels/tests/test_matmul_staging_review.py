"""matmul's staging on the interpreter, the cases a review found wrong: a residual
whose layout stages it (a transposed view, a column broadcast) is staged as it is and
the call keeps its path, config and accumulation (2-D, batched, fp8, K=0); a pending
staged launch owns everything it uses from the call (a conflict met at the call and a
later conflicting use are refused, by name); temporaries are kept per tensor and
operand (alternating calls reuse them; a tuning precompile of many configs makes one
set); refusals name the matmul operand, not the copy kernel. Results against numpy
float64, outputs poisoned."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest

import cutile
from cutile import api
from cutile.core import bf16, f8e4m3fn, f16, f32

from cutile_kernels import _matmul, _operands, _staging, _tuning, matmul

pytestmark = pytest.mark.skipif(cutile.backend() != "interpreter", reason="interpreter tests")

NP = {f16: np.float16, bf16: ml_dtypes.bfloat16, f32: np.float32, f8e4m3fn: ml_dtypes.float8_e4m3fn}
TOLERANCE = {f16: 2e-3, bf16: 1.6e-2, f32: 1e-5}
TINY = {"tile_m": 16, "tile_n": 16, "tile_k": 16, "group_size": 2, "num_worker_warps": 4}


def rand(rng: np.random.Generator, shape: tuple[int, ...], dtype: Any) -> np.ndarray[Any, Any]:
    return rng.standard_normal(shape).astype(np.float32).astype(NP[dtype])


def reference(a: Any, b: Any, residual: Any = None) -> np.ndarray[Any, Any]:
    out: np.ndarray[Any, Any] = np.matmul(np.asarray(a, np.float64), np.asarray(b, np.float64))
    return out if residual is None else out + np.asarray(residual, np.float64)


def close(got: Any, expected: np.ndarray[Any, Any], dtype: Any) -> None:
    got = np.asarray(got.to_numpy() if isinstance(got, cutile.Tensor) else got, np.float64)
    assert got.shape == expected.shape
    assert not np.isnan(got).any(), "an element was not written"
    scale = max(1.0, float(np.abs(expected).max()))
    np.testing.assert_allclose(got, expected, rtol=0, atol=TOLERANCE[dtype] * scale)


def prepared(a: Any, b: Any, out: Any, residual: Any = None, config: Any = None, accumulate_dtype: Any = f32,
             **scales: Any) -> _matmul._Call:
    return _matmul._prepare(a, b, out=out, bias=None, activation=None, residual=residual, alpha=1.0,
                            scale_a=scales.get("scale_a"), scale_b=scales.get("scale_b"), out_dtype=None,
                            accumulate_dtype=accumulate_dtype, allow_tf32=False, config=config)


# -- a residual that stages the call ------------------------------------------------------------------


def test_a_transposed_residual_is_staged_as_it_is_and_the_call_keeps_its_config() -> None:
    """r.T ([N, M] stored, [M, N] read): copied in out's orientation; the tiled GEMM runs
    with the config and f16 accumulation asked for (not split-K's defaults)."""
    rng = np.random.default_rng(41)
    m, n, k = 40, 24, 2048  # few output tiles, a long K: split-K's shape but for the config
    an, bn, rn = rand(rng, (m, k), f16), rand(rng, (k, n), f16), rand(rng, (n, m), f16)
    a, b, res = api.from_numpy(an), api.from_numpy(bn), api.from_numpy(rn).T
    out = api.full([m, n], np.nan, dtype=f16)
    call = prepared(a, b, out, res, config=TINY, accumulate_dtype=f16)
    assert call.staged is not None and call.plan is not None and call.plan.path == "tiled"
    assert call.plan.config["tile_m"] == 16 and call.plan.kernel is not None
    (role, source, target), = call.staged.copies_in
    assert role == "residual" and source is _operands.private_view(res) and target.shape == (m, n) and target.strides[-1] == 1
    matmul(a, b, out=out, residual=res, config=TINY, accumulate_dtype=f16)
    expected = reference(an, bn, rn.T)
    got = np.asarray(out.to_numpy(), np.float64)
    assert not np.isnan(got).any()
    np.testing.assert_allclose(got, expected, rtol=0, atol=0.05 * max(1.0, float(np.abs(expected).max())))
    out.host_view()[...] = np.nan
    matmul(a, b, out=out, residual=res)  # no config: split-K, on the staged residual
    assert matmul._last is not None and matmul._last.call.plan is not None
    assert matmul._last.call.plan.path == "split_k"
    close(out, expected, f16)


def test_a_batched_transposed_residual_is_staged() -> None:
    rng = np.random.default_rng(43)
    batch, m, n, k = 3, 19, 24, 32
    an, bn, rn = rand(rng, (batch, m, k), bf16), rand(rng, (k, n), bf16), rand(rng, (batch, n, m), bf16)
    res = api.from_numpy(rn).permute(0, 2, 1)  # each batch's [M, N] transposed
    out = api.full([batch, m, n], np.nan, dtype=bf16)
    assert prepared(api.from_numpy(an), api.from_numpy(bn), out, res, config=TINY).staged is not None
    matmul(api.from_numpy(an), api.from_numpy(bn), out=out, residual=res, config=TINY)
    close(out, reference(an, bn, rn.transpose(0, 2, 1)), bf16)
    out.host_view()[...] = np.nan
    matmul(api.from_numpy(an), api.from_numpy(bn), out=out, residual=res)  # the default plan too
    close(out, reference(an, bn, rn.transpose(0, 2, 1)), bf16)


def test_an_fp8_call_with_a_transposed_residual_is_staged() -> None:
    rng = np.random.default_rng(47)
    m, n, k = 40, 32, 48
    an, bn, rn = rand(rng, (m, k), f8e4m3fn), rand(rng, (k, n), f8e4m3fn), rand(rng, (n, m), bf16)
    out = api.full([m, n], np.nan, dtype=bf16)
    res = api.from_numpy(rn).T
    matmul(api.from_numpy(an), api.from_numpy(bn), out=out, residual=res, scale_a=0.5, scale_b=2.0)
    close(out, reference(an, bn, rn.T), bf16)


def test_a_transposed_residual_with_an_empty_k_is_the_residual() -> None:
    rng = np.random.default_rng(53)
    m, n = 40, 24
    rn = rand(rng, (n, m), f32)
    out = api.full([m, n], np.nan, dtype=f32)
    a, b = api.from_numpy(np.zeros((m, 0), np.float32)), api.from_numpy(np.zeros((0, n), np.float32))
    matmul(a, b, out=out, residual=api.from_numpy(rn).T)
    close(out, rn.T.astype(np.float64), f32)


@pytest.mark.parametrize("dtype", [f16, f32])
def test_a_column_broadcast_residual_is_staged(dtype: Any) -> None:
    """r.reshape(M, 1).broadcast_to(M, N): strides (1, 0), read as it is."""
    rng = np.random.default_rng(59)
    m, n, k = 40, 24, 32
    an, bn, rn = rand(rng, (m, k), dtype), rand(rng, (k, n), dtype), rand(rng, (m,), dtype)
    res = api.from_numpy(rn).reshape(m, 1).broadcast_to(m, n)
    assert res.strides == (1, 0)
    out = api.full([m, n], np.nan, dtype=dtype)
    call = prepared(api.from_numpy(an), api.from_numpy(bn), out, res, config=TINY)
    assert call.staged is not None and call.plan is not None and call.plan.path == "tiled"
    assert call.plan.config["tile_m"] == 16  # (the config asked for: not split-K's default)
    staged_residual = call.staged.inner.epilogue.residual
    assert staged_residual is not None and staged_residual.strides[-1] == 1 and _staging.strides_aligned(staged_residual)
    matmul(api.from_numpy(an), api.from_numpy(bn), out=out, residual=res, config=TINY)
    close(out, reference(an, bn, np.broadcast_to(rn[:, None], (m, n))), dtype)
    out.host_view()[...] = np.nan
    matmul(api.from_numpy(an), api.from_numpy(bn), out=out, residual=res)
    close(out, reference(an, bn, np.broadcast_to(rn[:, None], (m, n))), dtype)


# -- a pending staged launch owns what it uses ----------------------------------------------------------


def odd_operands(rng: np.random.Generator) -> tuple[Any, ...]:
    m, n, k = 40, 24, 29  # a's rows of 58 bytes and b's of 48: a staged, b read as it is
    an, bn = rand(rng, (m, k), f16), rand(rng, (k, 45), f16)
    return an, bn, api.from_numpy(an), api.from_numpy(bn)[:, :n]  # (b's rows of 90 bytes, staged too)


def test_a_pending_staged_launch_refuses_a_later_write_to_what_it_uses() -> None:
    rng = np.random.default_rng(61)
    an, bn, a, b = odd_operands(rng)
    m, n = 40, 24
    rn = rand(rng, (m, n), f16)
    r = api.from_numpy(rn)  # aligned: the GEMM reads it as it is
    y = api.full([m, n], np.nan, dtype=f16)
    x1, x2 = api.from_numpy(rand(rng, (m, 32), f16)), api.from_numpy(rand(rng, (32, n), f16))
    op = matmul.launch(a, b, out=y, residual=r)
    for out, name in ((r, "residual"), (y, "out")):
        with pytest.raises(cutile.OwnershipError, match=f"pending matmul \\(parameter '{name}'\\)"):
            matmul(x1, x2, out=out)
    with pytest.raises(cutile.OwnershipError, match="pending matmul \\(parameter 'b'\\)"):
        b.host_view()  # (held from the call by the operand's name, not the copy kernel's)
    with pytest.raises(cutile.OwnershipError, match="pending matmul \\(parameter 'out'\\)"):
        y.to_numpy()
    op.sync()
    close(y, reference(an, bn[:, :n], rn), f16)  # the values of the call
    matmul(x1, x2, out=r)  # nothing held once it ran


def test_a_staged_call_meeting_a_pending_write_is_refused_by_name_and_holds_nothing() -> None:
    rng = np.random.default_rng(67)
    an, bn, a, b = odd_operands(rng)
    m, n = 40, 24
    r, y = api.empty([m, n], dtype=f16), api.full([m, n], np.nan, dtype=f16)
    x1, x2 = api.from_numpy(rand(rng, (m, 32), f16)), api.from_numpy(rand(rng, (32, n), f16))
    for taken, name in ((r, "residual"), (y, "out")):
        pending = matmul.launch(x1, x2, out=taken)
        with pytest.raises(cutile.OwnershipError, match=f"matmul: parameter '{name}'"):
            matmul.launch(a, b, out=y, residual=r)
        pending.sync()
    pending = matmul.launch(x2.T, x1.T, out=a[:, :24].T)  # writes part of a, which the call copies
    with pytest.raises(cutile.OwnershipError, match="matmul: parameter 'a'"):
        matmul(a, b, out=y, residual=r)
    pending.sync()
    a.host_view()[...] = an
    rn = rand(rng, (m, n), f16)
    r.host_view()[...] = rn
    matmul(a, b, out=y, residual=r)  # the refused calls left nothing held
    close(y, reference(an, bn[:, :n], rn), f16)


def test_two_pending_launches_staging_one_tensor_both_run() -> None:
    """Both read a and b (two pending reads are allowed): the second takes temporaries
    of its own rather than being refused on the first's."""
    rng = np.random.default_rng(71)
    an, bn, a, b = odd_operands(rng)
    y1, y2 = api.full([40, 24], np.nan, dtype=f16), api.full([40, 24], np.nan, dtype=f16)
    first = matmul.launch(a, b, out=y1)
    kept = matmul._last
    second = matmul.launch(a, b, out=y2)
    assert kept is not None and kept.call.staged is not None
    second.sync()
    first.sync()
    close(y1, reference(an, bn[:, :24]), f16)
    close(y2, reference(an, bn[:, :24]), f16)
    with pytest.raises(cutile.OwnershipError, match="pending matmul \\(parameter 'out'\\)"):
        pending = matmul.launch(a, b, out=y1)
        try:
            matmul.launch(a, b, out=y1)  # (one out, written twice: still refused)
        finally:
            pending.sync()


def test_a_staged_launch_runs_when_the_caller_consumes_its_tensors_after_the_call() -> None:
    """The op reaches the caller's tensors through views made at the call: consuming the
    caller's objects (``partition()``) while it is pending does not fail it."""
    rng = np.random.default_rng(72)
    an, bn, a, b = odd_operands(rng)
    m, n = 40, 24
    rn = rand(rng, (m, n + 1), f16)
    r = api.from_numpy(rn)[:, 1:]  # staged too
    whole = api.full([m, n + 1], np.nan, dtype=f16)
    y = whole[:, 1:]  # written through a temporary
    op = matmul.launch(a, b, out=y, residual=r)
    taken = [t.partition([8, 8]) for t in (a, b, r, y)]
    op.sync()
    close(whole.to_numpy()[:, 1:], reference(an, bn[:, :n], rn[:, 1:]), f16)
    with pytest.raises(cutile.OwnershipError, match="matmul: a: .*consumed"):
        matmul(a, b, out=y, residual=r)  # (a consumed object is refused at the next call)
    del taken


def test_two_pending_launches_staging_one_tensor_of_a_folded_batch_both_run() -> None:
    """A batch folded into one GEMM (a [3, 20, 29] of 58-byte rows, b 2-D): the second
    launch's own temporaries are planned before it holds anything (its hold on out
    would refuse them)."""
    rng = np.random.default_rng(74)
    an, bn = rand(rng, (3, 20, 29), f16), rand(rng, (29, 24), f16)
    a, b = api.from_numpy(an), api.from_numpy(bn)
    y1, y2 = (api.full([3, 20, 24], np.nan, dtype=f16) for _ in range(2))
    first = matmul.launch(a, b, out=y1)
    second = matmul.launch(a, b, out=y2)
    second.sync()
    first.sync()
    close(y1, reference(an, bn), f16)
    close(y2, reference(an, bn), f16)


def test_a_staged_call_refused_at_its_hold_keeps_no_claim() -> None:
    """The temporaries are held first; a refusal of the caller's tensors gives them back
    at once (not when the exception is freed): a retry inside the handler runs."""
    rng = np.random.default_rng(75)
    an, bn, a, b = odd_operands(rng)
    y = api.full([40, 24], np.nan, dtype=f16)
    x1, x2 = api.from_numpy(rand(rng, (40, 32), f16)), api.from_numpy(rand(rng, (32, 24), f16))
    pending = matmul.launch(x1, x2, out=y)
    try:
        matmul.launch(a, b, out=y)
    except cutile.OwnershipError:
        pending.sync()
        matmul(a, b, out=y)  # (the refused call's temporaries are free)
    else:
        raise AssertionError("a write to a pending launch's out was accepted")
    close(y, reference(an, bn[:, :24]), f16)


def test_a_staged_call_leaves_no_reference_cycle() -> None:
    """The caller's tensors and their temporaries go when the caller drops them, without
    the cyclic collector (a cycle would keep device memory until it runs)."""
    import gc
    import weakref

    rng = np.random.default_rng(76)
    _, _, a, b = odd_operands(rng)
    y = api.empty([40, 24], dtype=f16)
    gc.disable()
    try:
        matmul(a, b, out=y)
        last = matmul._last
        assert last is not None and last.call.staged is not None
        temporary = weakref.ref(last.call.staged.copies_in[0][2])
        tensor = weakref.ref(a)
        del last
        x = api.ones([16, 16], dtype=f16)
        matmul(x, x, out=api.empty([16, 16], dtype=f16))  # (the last call is another one)
        del a, b, y
        assert tensor() is None and temporary() is None
    finally:
        gc.enable()


def test_a_tensor_consumed_before_a_staged_call_is_refused_by_name() -> None:
    rng = np.random.default_rng(77)
    _, _, a, b = odd_operands(rng)
    r = api.from_numpy(rand(rng, (40, 25), f16))[:, 1:]
    for name in ("a", "b", "residual"):
        operands = {"a": a[...], "b": b[...], "residual": r[...]}
        taken = operands[name].partition([8, 8])
        with pytest.raises(cutile.OwnershipError, match=f"matmul: {name}: .*consumed"):
            matmul(operands["a"], operands["b"], out=api.empty([40, 24], dtype=f16), residual=operands["residual"])
        del taken


def test_a_staged_out_whose_elements_share_memory_is_refused_at_the_call() -> None:
    """out of strides (0, 1) off a 16-byte base: refused at the call as an aligned call's
    Mut parameter is, before any copy runs."""
    rng = np.random.default_rng(78)
    an, bn = rand(rng, (40, 24), f16), rand(rng, (24, 24), f16)
    out = api.zeros([25], dtype=f16)[1:].broadcast_to(40, 24)
    with pytest.raises(cutile.LaunchError, match="matmul: parameter 'out' .*share memory"):
        matmul(api.from_numpy(an), api.from_numpy(bn), out=out)


def test_staged_launches_in_a_batch_share_their_temporaries_in_order() -> None:
    rng = np.random.default_rng(73)
    an, bn, a, b = odd_operands(rng)
    y1, y2 = api.full([40, 24], np.nan, dtype=f16), api.full([40, 24], np.nan, dtype=f16)
    with cutile.batch():
        matmul(a, b, out=y1)
        matmul(a, b, out=y2)  # a's and b's temporaries again: the batch's job holds them
    close(y1, reference(an, bn[:, :24]), f16)
    close(y2, reference(an, bn[:, :24]), f16)


# -- temporaries per tensor and operand ---------------------------------------------------------------


def test_alternating_staged_calls_reuse_their_temporaries() -> None:
    rng = np.random.default_rng(79)
    an, bn, a, b = odd_operands(rng)
    w = api.from_numpy(rand(rng, (29, 40), f16))  # aligned rows: only a is staged
    y1, y2 = api.full([40, 24], np.nan, dtype=f16), api.full([40, 40], np.nan, dtype=f16)
    targets = []
    for _ in range(3):
        matmul(a, b, out=y1)
        assert matmul._last is not None and matmul._last.call.staged is not None
        first = [t for _, _, t in matmul._last.call.staged.copies_in]
        matmul(a, w, out=y2)
        assert matmul._last is not None and matmul._last.call.staged is not None
        second = [t for _, _, t in matmul._last.call.staged.copies_in]
        assert second[0] is first[0]  # a's temporary, per tensor and operand: one for both calls
        targets.append(first + second)
    assert all(t is u for t, u in zip(targets[0], targets[-1]))
    close(y1, reference(an, bn[:, :24]), f16)


def test_precompile_makes_one_set_of_temporaries_for_every_config(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[tuple[int, ...]] = []
    real = _staging.padded

    def counted(shape: tuple[int, ...], dtype: Any, like: cutile.Tensor) -> cutile.Tensor:
        made.append(shape)
        return real(shape, dtype, like)

    compiled: list[Any] = []
    monkeypatch.setattr(_staging, "padded", counted)
    monkeypatch.setattr(_matmul, "_compile_call", lambda call, arch: compiled.append(call))
    configs = [dict(TINY, tile_k=tk) for tk in (16, 32)] + [dict(TINY, tile_m=32)]
    assert _tuning.precompile(f16, (40, 24, 29), configs, "sm_90", 2) == 3  # a's rows of 58 bytes: staged
    assert len(compiled) == 3 and all(call.staged is not None for call in compiled)
    assert made == [(40, 29)]
