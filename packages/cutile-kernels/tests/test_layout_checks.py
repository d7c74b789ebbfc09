"""The argument checks the library remembers by layout (GEMV / split-K operands and
merged configs, kv_cache_update's arguments): a call with the layouts of an earlier one
skips them, yet every call still gets the error it got before, as a first call with its
arguments does (consumed tensors, alpha, overlaps at other addresses, host positions'
values, config=). Runs on the CPU interpreter: values against numpy float64."""

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import cutile
from cutile import api
from cutile.core import f32
from cutile_kernels import _gemv, _kv_cache, _splitk
from cutile_kernels._gemv import small_m_matmul

import cutile_kernels as ck

CONFIG = {"tile_n": 16, "tile_k": 64}


def error_of(call: Callable[[], Any]) -> tuple[type, str]:
    with pytest.raises(cutile.CutileError) as caught:
        call()
    return type(caught.value), str(caught.value)


def same_error_without_memo(call: Callable[[], Any]) -> None:
    """``call`` fails, and as it does once the remembered checks are forgotten."""
    remembered = error_of(call)
    _splitk._CHECKED.clear()
    _gemv._CONFIGS.clear()
    _kv_cache._CHECKED.clear()
    assert error_of(call) == remembered


def test_gemv_calls_with_remembered_layouts_compute_and_still_refuse_what_changed() -> None:
    rng = np.random.default_rng(3)
    a_np, w_np = rng.standard_normal((2, 96)).astype(np.float32), rng.standard_normal((40, 96)).astype(np.float32)
    a, w = api.from_numpy(a_np), api.from_numpy(w_np)
    out = api.full([2, 40], np.nan, dtype=f32)
    for alpha in (1.0, 0.5):  # the second call's checks are remembered ones: alpha still applies
        small_m_matmul(a, w.T, out, alpha=alpha, config=CONFIG).sync()
        np.testing.assert_allclose(out.to_numpy(), alpha * (a_np.astype(np.float64) @ w_np.T), rtol=1e-4, atol=1e-4)
    assert any(key[0] == "small_m_matmul" for key in _splitk._CHECKED)
    same_error_without_memo(lambda: small_m_matmul(a, w.T, out, alpha=float("inf"), config=CONFIG))
    same_error_without_memo(lambda: small_m_matmul(a, w.T, out, alpha=True, config=CONFIG))
    # A consumed out (partitioned by the caller) is refused, naming it.
    small_m_matmul(a, w.T, out, config=CONFIG).sync()
    view = out[...]
    small_m_matmul(a, w.T, view, config=CONFIG).sync()
    view.partition([2, 8])
    same_error_without_memo(lambda: small_m_matmul(a, w.T, view, config=CONFIG))
    # Another address is another layout: an out over b's memory is refused.
    shared = api.from_numpy(np.zeros((40, 96), np.float32))
    same_error_without_memo(lambda: small_m_matmul(a, shared.T, shared[:2, :40], config=CONFIG))
    # A config's values are checked as before (a bad one is never remembered).
    same_error_without_memo(lambda: small_m_matmul(a, w.T, out, config={**CONFIG, "tile_m": 1, "split_k": 0}))
    # Values equal to a remembered config's but of another type (16.0 == 16, True == 1) are
    # refused as a first call refuses them.
    for good, odd in (({"tile_n": 16}, {"tile_n": 16.0}), ({"split_k": 1}, {"split_k": True})):
        small_m_matmul(a, w.T, out, config=good).sync()
        same_error_without_memo(lambda: small_m_matmul(a, w.T, out, config=odd))  # noqa: B023 (called at once)


def test_kv_cache_update_with_remembered_checks_writes_and_still_checks_host_positions() -> None:
    cache = api.zeros([1, 16, 2, 8], dtype=f32)
    rows = np.arange(2 * 2 * 8, dtype=np.float32).reshape(1, 2, 2, 8)
    for start in (4, 4, 6):  # an int start: its value is part of what is remembered
        ck.kv_cache_update(cache, api.from_numpy(rows + start), start)
        np.testing.assert_array_equal(cache.to_numpy()[:, start:start + 2], rows + start)
    assert len(_kv_cache._CHECKED) == 2  # (4 and 6)
    # Host positions (the interpreter's tensors): their values are checked on every call.
    ck.kv_cache_update(cache, api.from_numpy(rows), api.from_numpy(np.array([2, 3], np.int64)))
    assert _kv_cache._checks_key(cache, api.from_numpy(rows), api.from_numpy(np.array([2, 3]))) is None
    same_error_without_memo(lambda: ck.kv_cache_update(cache, api.from_numpy(rows),
                                                       api.from_numpy(np.array([2, 4], np.int64))))
    same_error_without_memo(lambda: ck.kv_cache_update(cache, api.from_numpy(rows), 15))  # past the end
    unbatched, new = api.zeros([16, 2, 8], dtype=f32), api.from_numpy(rows[0])
    ck.kv_cache_update(unbatched, new, 0)
    new.partition([2, 2, 8])  # consumed
    same_error_without_memo(lambda: ck.kv_cache_update(unbatched, new, 0))
    same_error_without_memo(lambda: ck.kv_cache_update(cache, api.from_numpy(rows), 0, config={"tile_rows": 3}))
