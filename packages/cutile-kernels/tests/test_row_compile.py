"""Every row kernel compiles for sm_90 and sm_100 through tileiras, as the functions
launch it: the specialization of a real call (shapes with tails) and the config's hints;
the kernels of calls that chain launches (LayerNorm's statistics and apply kernels,
its backward) from placeholder tensors."""

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from cutile_kernels_testkit import CHUNKED, ONE_PASS, normal

import cutile
from cutile import api
from cutile.core import bf16, f16, f32
from cutile_compiler import CompileOptions, KernelHints
from cutile_kernels import add_rms_norm, layer_norm, log_softmax, rms_norm, softmax
from cutile_kernels import _norms as norms

ARCHS = ("sm_90", "sm_100")
SHAPE = (37, 300)


def calls(dtype: str) -> dict[str, Callable[[dict[str, int]], Any]]:
    x, r = normal(SHAPE, dtype, seed=1), normal(SHAPE, dtype, seed=2)
    w = normal(SHAPE[1:], dtype, seed=3)
    out = lambda: api.empty(list(SHAPE), {"f32": f32, "f16": f16, "bf16": bf16}[dtype])  # noqa: E731
    return {
        "softmax": lambda c: softmax.launch(x, out=out(), config=c),
        "log_softmax": lambda c: log_softmax.launch(x, out=out(), config=c),
        "rms_norm": lambda c: rms_norm.launch(x, w, out=out(), config=c),
        "add_rms_norm": lambda c: add_rms_norm.launch(x, r, w, out=(out(), out()), config=c),
        "layer_norm": lambda c: layer_norm.launch(x, w, w, out=out(), config=c),
    }


def cases() -> list[Any]:
    found = [pytest.param(name, dtype, schedule, id=f"{name}-{dtype}-{schedule}")
             for name in calls("f32") for dtype in ("bf16",) for schedule in ("one_pass", "chunked")]
    found += [pytest.param(name, dtype, "one_pass", id=f"{name}-{dtype}-one_pass")
              for name in ("softmax", "rms_norm", "layer_norm") for dtype in ("f32", "f16")]
    return found


def compile_for_archs(launch: cutile.Launch, hints: dict[str, int] | None) -> None:
    spec, _ = launch.specialization()
    assert launch.kernel.hints == KernelHints.parse(hints)  # the config's hints are the entry's
    options = CompileOptions()
    try:
        with ThreadPoolExecutor(len(ARCHS)) as pool:
            compiled = list(pool.map(lambda arch: launch.kernel.compiled(spec, arch, options), ARCHS))
    finally:
        launch.cancel()
    for kernel in compiled:
        assert kernel.cubin, f"{launch.kernel.name}: no cubin"


@pytest.mark.parametrize("name, dtype, schedule", cases())
def test_compiles_as_launched(name: str, dtype: str, schedule: str) -> None:
    config = ONE_PASS if schedule == "one_pass" else CHUNKED
    launch = calls(dtype)[name](config)
    assert isinstance(launch, cutile.Launch)
    compile_for_archs(launch, {"occupancy": config["occupancy"], "num_worker_warps": config["num_worker_warps"]})


def test_layer_norm_with_stats_in_one_pass_compiles() -> None:
    x, w = normal(SHAPE, "bf16", seed=5), normal(SHAPE[1:], "f32", seed=6)
    stats = api.empty([SHAPE[0], 1], f32), api.empty([SHAPE[0], 1], f32)
    launch = layer_norm.launch(x, w, w, return_stats=True, out=(api.empty(list(SHAPE), bf16), *stats), config=ONE_PASS)
    compile_for_archs(launch, {"occupancy": 1, "num_worker_warps": 4})


def test_a_config_is_one_kernel_with_its_hints() -> None:
    """Hints live in the entry (launches are not re-optioned one by one): calls with one
    config share one kernel."""
    x, w = normal(SHAPE, "f32", seed=7), normal(SHAPE[1:], "f32", seed=8)
    first = rms_norm.launch(x, w, out=api.empty(list(SHAPE), f32), config=ONE_PASS)
    second = rms_norm.launch(x, w, out=api.empty(list(SHAPE), f32), config=ONE_PASS)
    assert first.kernel is second.kernel  # one kernel per (dtype, schedule, hints)
    first.sync()
    second.sync()


def _dx_arguments(dx: Any) -> tuple[Any, ...]:
    return (dx, api.meta([37, 300], bf16), api.meta([37, 300], bf16), api.meta([300], f32), api.meta([37, 1], f32),
            api.meta([37, 1], f32), 1 / 300)


#: the kernels of chained calls (a chain's later launches are built as it runs)
META_KERNELS: dict[str, Callable[[], tuple[Any, tuple[Any, ...], dict[str, Any]]]] = {
    "layer_norm_dx_rows": lambda: (norms.layer_norm_dx_kernel(bf16, f32, True), _dx_arguments(
        api.meta([37, 300], bf16).partition([1, 512])), {}),
    "layer_norm_dx_chunked": lambda: (norms.layer_norm_dx_kernel(bf16, f32, False), _dx_arguments(
        api.meta([37, 300], bf16).partition([2, 64]).map([1, cutile.OWNED], blocks=8)), {}),
    "layer_norm_stats": lambda: (norms.layer_norm_stats_kernel(bf16), (
        api.meta([37, 1], f32).partition([2, 1]), api.meta([37, 1], f32).partition([2, 1]), api.meta([37, 300], bf16),
        1e-5, 1 / 300, 300, 5), {"BN": 64}),
    "layer_norm_apply": lambda: (norms.layer_norm_apply_kernel(bf16, f32), (
        api.meta([37, 300], bf16).partition([2, 64]), api.meta([37, 300], bf16), api.meta([37, 1], f32),
        api.meta([37, 1], f32), api.meta([300], f32), api.meta([300], f32)), {}),
    "layer_norm_partials": lambda: (norms.layer_norm_partials_kernel(bf16), (
        api.meta([3, 300], f32).partition([1, 64]), api.meta([3, 300], f32).partition([1, 64]),
        api.meta([37, 300], bf16), api.meta([37, 300], bf16), api.meta([37, 1], f32), api.meta([37, 1], f32), 1),
        {"BM": 32}),
    "column_sums": lambda: (norms.column_sum_kernel(bf16), (
        api.meta([300], bf16).partition([1024]), api.meta([300], bf16).partition([1024]), api.meta([3, 300], f32),
        api.meta([3, 300], f32), 4), {}),
    "zero": lambda: (norms.zero_kernel(f16), (api.meta([300], f16).partition([512]),), {}),
}


@pytest.mark.parametrize("name", list(META_KERNELS))
@pytest.mark.parametrize("arch", ARCHS)
def test_chained_kernels_compile(name: str, arch: str) -> None:
    kernel, args, constants = META_KERNELS[name]()
    assert cutile.compile(kernel, *args, arch=arch, **constants).cubin
