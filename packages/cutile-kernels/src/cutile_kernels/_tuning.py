"""What a tuning search of the tiled GEMM runs: random operands per shape (made on the
host, copied to the device once), a runner per config (one `matmul.launch` into the
same output) and the correctness gate every config passes before it is timed.

The gate compares a few rows (first, middle, last) and up to 256 columns of the output
with float64 products of the host operands: on the large shapes of the search a whole
reference (or a copy of the whole output to the host) would cost more than the search.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import cutile
from cutile import api
from cutile.core import bf16, f8e4m3fn, f8e5m2, f16, f32

_FP8 = (f8e4m3fn, f8e5m2)

#: dtype -> (shape, host a, host b, device a, device b, output): the latest shape only
_INPUTS: dict[Any, tuple[tuple[int, ...], Any, Any, cutile.Tensor, cutile.Tensor, cutile.Tensor]] = {}


def _inputs(dtype: Any, shape: tuple[int, ...]) -> tuple[tuple[int, ...], Any, Any, cutile.Tensor, cutile.Tensor,
                                                         cutile.Tensor]:
    found = _INPUTS.get(dtype)
    if found is None or found[0] != shape:
        m, n, k = shape
        rng = np.random.default_rng(0)
        host_a = rng.standard_normal((m, k), dtype=np.float32).astype(np.dtype(dtype.numpy_name))
        host_b = rng.standard_normal((k, n), dtype=np.float32).astype(np.dtype(dtype.numpy_name))
        out = api.empty([m, n], dtype=bf16 if dtype in _FP8 else dtype)
        found = (shape, host_a, host_b, api.from_numpy(host_a, dtype), api.from_numpy(host_b, dtype), out)
        _INPUTS[dtype] = found
    return found


def setup(dtype: Any) -> Callable[[dict[str, Any], tuple[int, ...]], Callable[[], Any]]:
    """The `cutile.tune.Tuner` setup: ``setup(config, (m, n, k))`` gives the runner of
    one launch of that config (the launch, not run: `cutile.bench` queues it)."""
    def make(config: dict[str, Any], shape: tuple[int, ...]) -> Callable[[], Any]:
        from cutile_kernels._matmul import matmul

        _, _, _, a, b, out = _inputs(dtype, tuple(int(s) for s in shape))
        chosen = dict(config)
        return lambda: matmul.launch(a, b, out=out, config=chosen)
    return make


def reference(dtype: Any) -> Callable[[tuple[int, ...]], Callable[[Any], bool]]:
    """The `cutile.tune.Tuner` reference: for a shape, the gate of a runner's result."""
    def gate_for(shape: tuple[int, ...]) -> Callable[[Any], bool]:
        def gate(_: Any) -> bool:
            _, host_a, host_b, _, _, out = _inputs(dtype, tuple(int(s) for s in shape))
            m, n = out.shape
            rows = sorted({0, m // 2, m - 1})
            cols = np.unique(np.linspace(0, n - 1, num=min(n, 256)).astype(np.int64))
            got = np.stack([out[r].to_numpy() for r in rows]).astype(np.float64)[:, cols]
            expected = host_a[rows].astype(np.float64) @ host_b[:, cols].astype(np.float64)
            scale = max(1.0, float(np.abs(expected).max()))
            tolerance = 1e-4 if out.dtype == f32 else 2e-2
            return bool(np.allclose(got, expected, rtol=0, atol=tolerance * scale))
        return gate
    return gate_for


def precompile(dtype: Any, shape: tuple[int, ...], configs: list[dict[str, Any]], arch: str, jobs: int) -> int:
    """Compiles the launch of each config for ``shape`` in ``jobs`` threads (tileiras
    runs as a process per compile, so they overlap), before a search times them one by
    one; returns how many compiled. A config that fails here fails again in the search,
    which marks it invalid with the reason."""
    from concurrent.futures import ThreadPoolExecutor

    from cutile_kernels._matmul import _compile_call, _prepare

    _, _, _, a, b, out = _inputs(dtype, tuple(int(s) for s in shape))
    calls = []
    # Plans are made here, one thread: their tables are not shared. A staged shape's calls
    # share one set of temporaries (kept per tensor and operand: `_staging.temporary`),
    # so keeping every config's call holds views, not a copy of the operands per config.
    for config in configs:
        try:
            calls.append(_prepare(a, b, out=out, bias=None, activation=None, residual=None, alpha=1.0, scale_a=None,
                                  scale_b=None, out_dtype=None, accumulate_dtype=f32, allow_tf32=False,
                                  config=dict(config)))
        except cutile.CutileError:
            continue

    def compile_one(call: Any) -> bool:
        try:
            _compile_call(call, arch)
        except cutile.CutileError:
            return False
        return True

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return sum(pool.map(compile_one, calls))
