"""The kernel suite compiles for sm_90 and sm_100 (front end, lowering, tileiras):
each kernel once per arch, in a module-wide fixture, two tileiras at a time."""

from __future__ import annotations

import importlib.util
import inspect
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from cutile_compiler import CompileOptions, TensorSpec, compile_kernel, parse_signature, specialize
from cutile_compiler import _dtypes as dt
from cutile_compiler._hints import KernelHints

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


def tensor(shape: list[int], dtype: dt.DType, tile: list[int] | None = None,
           mapped: list[int] | None = None) -> TensorSpec:
    """A freshly allocated tensor's spec (dense, 256-byte aligned), partitioned into
    ``tile`` when given (and mapped by ``mapped``, 0 for an owned axis), as a launch
    describes it."""
    strides = [1] * len(shape)
    for axis in range(len(shape) - 2, -1, -1):
        strides[axis] = strides[axis + 1] * shape[axis + 1]
    return TensorSpec.describe(dtype, shape, strides, 256, tuple(tile) if tile is not None else None,
                               tuple(mapped) if mapped is not None else None)


def arguments(name: str) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Placeholder arguments: shapes with tails, as a user would launch them."""
    if name in ("add", "saxpy"):
        extra = (2.0,) if name == "saxpy" else ()
        return (tensor([1000], F32, [128]), tensor([1000], F32), tensor([1000], F32), *extra), {}
    if name == "gemm":
        return (tensor([200, 136], F32, [64, 64]), tensor([200, 96], F16), tensor([96, 136], F16)), {"BK": 32}
    if name == "persistent_gemm":
        return ((tensor([200, 136], F32, [64, 64]), tensor([200, 96], F16), tensor([96, 136], F16)),
                {"BK": 32, "GROUP_M": 2})
    if name == "mapped_gemm":
        return ((tensor([200, 136], F32, [64, 64], [8, 1]), tensor([200, 96], F16), tensor([96, 136], F16)),
                {"BK": 32})
    if name in ("chunked_softmax", "chunked_layernorm"):
        rows: tuple[Any, ...] = (tensor([100, 3000], F32, [4, 512], [1, 0]), tensor([100, 3000], F32))
        if name == "chunked_layernorm":
            rows += (tensor([3000], F32), tensor([3000], F32), 1e-5)
        return rows, {}
    if name == "sum_and_product":
        return ((tensor([100, 72], F32, [32, 32], [2, 2]), tensor([100, 72], F32, [32, 32], [2, 2]),
                 tensor([100, 72], F32), tensor([100, 72], F32)), {})
    if name == "cache_update":
        return (tensor([512, 64], F32, [4, 64], [1, 1]), tensor([37, 64], F32), 3), {}
    if name == "split_k_gemm":
        return ((tensor([200, 136], F32, [64, 64]), tensor([200, 96], F16), tensor([96, 136], F16)),
                {"BK": 16, "SPLITS": 3})
    if name == "batched_matmul":
        return ((tensor([3, 100, 72], F32, [1, 64, 64]), tensor([3, 100, 48], F16), tensor([3, 48, 72], F16)),
                {"BK": 16})
    if name == "softmax":
        return (tensor([100, 200], F32, [16, 256]), tensor([100, 200], F32)), {}
    if name in ("rmsnorm", "layernorm"):
        norm_args: tuple[Any, ...] = (tensor([100, 200], F32, [16, 256]), tensor([100, 200], F32), tensor([200], F32))
        if name == "layernorm":
            norm_args += (tensor([200], F32),)
        return (*norm_args, 1e-5), {}
    if name == "transpose":
        return (tensor([72, 100], F32, [32, 32]), tensor([100, 72], F32)), {}
    if name == "attention":
        return ((tensor([4, 200, 64], F32, [1, 64, 64]), tensor([4, 200, 64], F16), tensor([4, 200, 64], F16),
                 tensor([4, 200, 64], F16), 0.125), {"BN": 32})
    if name == "stencil_1d":
        return (tensor([1000], F32, [128]), tensor([1000], F32)), {}
    if name == "stencil_2d":
        return (tensor([100, 136], F32, [32, 64]), tensor([100, 136], F32)), {}
    if name == "embedding":
        return (tensor([37, 200], dt.bf16, [16, 128]), tensor([1001, 200], dt.bf16), tensor([37], dt.i32)), {}
    if name == "features_float":
        return ((tensor([128, 128], F32, [64, 64]), tensor([128, 64], dt.f8e4m3fn), tensor([64, 128], dt.f8e5m2),
                 tensor([128, 128], F32)), {})
    if name == "features_reductions":
        return (tensor([100, 4], F32, [16, 4]), tensor([100, 64], dt.bf16), tensor([100, 64], F16)), {}
    if name == "features_memory":
        return (tensor([256], dt.i32, [64]), tensor([1000], F32), tensor([256], dt.i32)), {}
    raise KeyError(name)


def compile_for(name: str, arch: str) -> Any:
    """Compiles one suite kernel with the compiler's own API (signature, specialization,
    hints as options), as the runtime does for a launch."""
    function, unsafe, hints = SUITE[name]
    args, kwargs = arguments(name)
    signature = parse_signature(function)
    spec = specialize(signature, name, inspect.signature(function).bind_partial(*args, **kwargs).arguments)
    return compile_kernel(function, signature, spec, arch, unsafe=unsafe,
                          options=CompileOptions(hints=KernelHints.parse(hints)))


@pytest.fixture(scope="module")
def compiled() -> dict[tuple[str, str], Any]:
    def build(job: tuple[str, str]) -> Any:
        try:
            return compile_for(*job)
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


def test_safe_reads_lower_to_views_inside_and_masked_pointer_loads_at_the_edges(
        compiled: dict[tuple[str, str], Any]) -> None:
    stencil = compiled[("stencil_2d", "sm_90")].mlir
    # the centre tile is tile-aligned: a partition view, padded outside the tensor
    assert "load_view_tko weak %pview" in stencil
    # a tile one row up is aligned along columns only: a strided view stepping 1 x BN elements
    assert "traversal_strides=[1,64]" in stencil
    # a tile one column left or right: the tiles 4 f32 (16 bytes) either side of the
    # centre, strided views stepping BM x 4, spliced with the centre's (shared) tile
    assert "traversal_strides=[32,4]" in stencil and "traversal_strides=[32,1]" not in stencil
    assert stencil.count(" cat ") == 6 and stencil.count("load_view_tko") == 5
    # where the tile reaches outside the tensor, a masked pointer load (4 of the 5 tiles)
    assert stencil.count("load_ptr_tko") == 4 and stencil.count(" = if ") == 5
    lookup = compiled[("embedding", "sm_100")].mlir
    assert "cmpi less_than" in lookup and "unsigned" in lookup and "load_ptr_tko" in lookup


def test_a_mapped_schedule_lowers_to_a_persistent_loop_without_checks(compiled: dict[tuple[str, str], Any]) -> None:
    for arch in ARCHS:
        mapped = compiled[("mapped_gemm", arch)].mlir
        # the loop over this block's items, stepping by the grid, and the grouped order's arithmetic
        assert "for %loopIdx in (%blockId_x to" in mapped and "step %gridSize_x" in mapped
        assert "divi" in mapped and "remi" in mapped and "mini" in mapped
        assert "assert" not in mapped  # minted indices need no run-time check
        assert "store_view_tko" in mapped
    assert "num_worker_warps_per_cta = 8" in compiled[("mapped_gemm", "sm_90")].mlir
    # a run-time sub-range is checked against the grid (assert), the other schedules are not
    assert compiled[("cache_update", "sm_90")].mlir.count("assert") == 3
    assert "assert" not in compiled[("chunked_softmax", "sm_100")].mlir


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
