"""The kernel suite compiles for sm_90 and sm_100 (front end, lowering, tileiras):
each kernel once per arch, in a module-wide fixture, two tileiras at a time."""

from __future__ import annotations

import importlib.util
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import cutile
from cutile import api
from cutile_compiler import _dtypes as dt

ARCHS = ("sm_90", "sm_100")


def load_suite() -> ModuleType:
    path = Path(__file__).with_name("suite_kernels.py")
    spec = importlib.util.spec_from_file_location("cutile_suite_kernels", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("cutile_suite_kernels", module)
    spec.loader.exec_module(module)
    return module


MODULE = load_suite()
SUITE = {**MODULE.SUITE, **MODULE.FEATURES}
F16, F32 = dt.f16, dt.f32


def meta_args(name: str) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Placeholder arguments: shapes with tails, as a user would launch them."""
    m = api.meta
    if name in ("add", "saxpy"):
        extra = (2.0,) if name == "saxpy" else ()
        return (m([1000], dtype=F32).partition([128]), m([1000], dtype=F32), m([1000], dtype=F32), *extra), {}
    if name == "gemm":
        return (m([200, 136], dtype=F32).partition([64, 64]), m([200, 96], dtype=F16), m([96, 136], dtype=F16)), {"BK": 32}
    if name == "persistent_gemm":
        return ((m([200, 136], dtype=F32).partition([64, 64]), m([200, 96], dtype=F16), m([96, 136], dtype=F16)),
                {"BK": 32, "GROUP_M": 2})
    if name == "split_k_gemm":
        return ((m([200, 136], dtype=F32).partition([64, 64]), m([200, 96], dtype=F16), m([96, 136], dtype=F16)),
                {"BK": 16, "SPLITS": 3})
    if name == "batched_matmul":
        return ((m([3, 100, 72], dtype=F32).partition([1, 64, 64]), m([3, 100, 48], dtype=F16),
                 m([3, 48, 72], dtype=F16)), {"BK": 16})
    if name == "softmax":
        return (m([100, 200], dtype=F32).partition([16, 256]), m([100, 200], dtype=F32)), {}
    if name in ("rmsnorm", "layernorm"):
        norm_args: tuple[Any, ...] = (m([100, 200], dtype=F32).partition([16, 256]), m([100, 200], dtype=F32),
                                      m([200], dtype=F32))
        if name == "layernorm":
            norm_args += (m([200], dtype=F32),)
        return (*norm_args, 1e-5), {}
    if name == "transpose":
        return (m([72, 100], dtype=F32).partition([32, 32]), m([100, 72], dtype=F32)), {}
    if name == "attention":
        return ((m([4, 200, 64], dtype=F32).partition([1, 64, 64]), m([4, 200, 64], dtype=F16),
                 m([4, 200, 64], dtype=F16), m([4, 200, 64], dtype=F16), 0.125), {"BN": 32})
    if name == "features_float":
        return ((m([128, 128], dtype=F32).partition([64, 64]), m([128, 64], dtype=dt.f8e4m3fn),
                 m([64, 128], dtype=dt.f8e5m2), m([128, 128], dtype=F32)), {})
    if name == "features_memory":
        return (m([256], dtype=dt.i32).partition([64]), m([1000], dtype=F32), m([256], dtype=dt.i32)), {}
    raise KeyError(name)


def kernel_of(name: str) -> cutile.Kernel:
    function, unsafe, hints = SUITE[name]
    return cutile.entry(unsafe=unsafe, hints=hints)(function)


@pytest.fixture(scope="module")
def compiled() -> dict[tuple[str, str], Any]:
    kernels = {name: kernel_of(name) for name in SUITE}

    def build(job: tuple[str, str]) -> Any:
        name, arch = job
        args, kwargs = meta_args(name)
        try:
            return cutile.compile(kernels[name], *args, arch=arch, **kwargs)
        except Exception as exc:  # reported per test, not as a fixture error
            return exc

    jobs = [(name, arch) for name in SUITE for arch in ARCHS]
    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip(jobs, pool.map(build, jobs)))


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("name", sorted(SUITE))
def test_kernel_compiles(compiled: dict[tuple[str, str], Any], name: str, arch: str) -> None:
    result = compiled[(name, arch)]
    if isinstance(result, Exception):
        raise result
    assert result.arch == arch
    assert result.cubin[:4] == b"\x7fELF"
    assert result.bytecode.startswith(b"\x7fTileIR\x00")


def test_hints_reach_the_bytecode_per_arch(compiled: dict[tuple[str, str], Any]) -> None:
    sm90 = compiled[("gemm", "sm_90")].mlir
    sm100 = compiled[("gemm", "sm_100")].mlir
    assert "num_worker_warps_per_cta = 8" in sm90 and "sm_90" in sm90
    assert "num_worker_warps_per_cta" not in sm100 and "num_cta_in_cga = 1" in sm100
    assert "latency = 3" in sm90  # load hints of the K loop
    assert "occupancy = 1" in compiled[("persistent_gemm", "sm_100")].mlir


def test_the_suite_uses_the_ops_it_claims(compiled: dict[tuple[str, str], Any]) -> None:
    attention = compiled[("attention", "sm_90")].mlir
    assert attention.count("mmaf") >= 2 and "exp" in attention and " for " in attention
    assert "atomic_red_view_tko relaxed device" in compiled[("split_k_gemm", "sm_100")].mlir
    persistent = compiled[("persistent_gemm", "sm_90")].mlir
    assert "get_num_tile_blocks" in persistent and persistent.count(" for ") >= 2


def test_features_lower_to_the_tile_ir_ops(compiled: dict[tuple[str, str], Any]) -> None:
    memory = compiled[("features_memory", "sm_90")].mlir
    for op in ("load_ptr_tko", "store_ptr_tko", "atomic_rmw_tko", "atomic_cas_tko", "print_tko", "assert",
               "assume div_by<16>", "assume bounded<0, ?>", " scan ", " reduce ", "acq_rel device", "acquire sys",
               "latency = 4", ", xor,"):
        assert op in memory, op
    floats = compiled[("features_float", "sm_100")].mlir
    for op in ("f8E4M3FN", "f8E5M2", "tf32", "rounding<zero> flush_to_zero", "rounding<approx>",
               "rounding<positive_inf>", "rounding<full>", "rounding<approx> flush_to_zero", "ftof %"):
        assert op in floats, op
