"""`KernelCompiler`, the compiler entry the runtime uses: ``compile(spec, arch,
options)`` returns a `CompiledKernel`, and the compiler keeps its caches (the typed
IR and the compiled kernels in process, over the disk cache). Only the package's
public surface is used here, as the runtime uses it."""

from __future__ import annotations

from pathlib import Path

import pytest

import cutile_compiler as cc
from cutile_compiler import dtypes as dt
from cutile_compiler.language import Mut, Tensor, f32, load_tile_like

SCALE = 2.0


def scaled(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    z.store(load_tile_like(x, z) * SCALE)


def make(hints: cc.KernelHints | None = None) -> tuple[cc.KernelCompiler, cc.Specialization]:
    signature = cc.parse_signature(scaled)
    spec = cc.specialize(signature, "scaled", {"z": cc.TensorSpec(dt.f32, (1000,), (128,)),
                                               "x": cc.TensorSpec(dt.f32, (1000,))})
    return cc.KernelCompiler(scaled, signature, hints=hints, cache_size=4), spec


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CUTILE_CACHE_DIR", str(tmp_path))
    return tmp_path


def test_compile_is_kept_in_process_and_clear_forgets_it(real_toolchain: object, cache_dir: Path) -> None:
    compiler, spec = make()
    first = compiler.compile(spec, "sm_90")
    assert isinstance(first, cc.CompiledKernel) and first.cubin.startswith(b"\x7fELF") and not first.cache_hit
    assert compiler.compile(spec, "sm_90") is first
    assert compiler.compile(spec, "sm_90", cc.DEFAULT_OPTIONS) is first  # no options means the defaults
    assert compiler.kernel_ir(spec) is first.kernel_ir
    other = compiler.compile(spec, "sm_90", cc.CompileOptions(opt_level=1))
    assert other is not first and other.cubin
    compiler.clear()
    again = compiler.compile(spec, "sm_90")
    assert again is not first and again.cache_hit  # built again in process, the cubin from the disk cache
    assert again.cubin == first.cubin


def test_a_changed_global_is_compiled_again(real_toolchain: object, cache_dir: Path, monkeypatch: pytest.MonkeyPatch,
                                            caplog: pytest.LogCaptureFixture) -> None:
    compiler, spec = make()
    before = compiler.compile(spec, "sm_90")
    monkeypatch.setitem(globals(), "SCALE", 3.0)
    monkeypatch.setenv("CUTILE_JIT_TIMING", "1")
    after = compiler.compile(spec, "sm_90")
    assert after is not before and after.kernel_ir is not before.kernel_ir
    assert "3.0" in after.ir_text and "3.0" not in before.ir_text
    notes = [r.getMessage() for r in caplog.records if r.name == "cutile.compiler" and r.levelname == "WARNING"]
    assert "cutile: scaled: global 'SCALE' changed since it was compiled; compiling again" in notes
    assert compiler.compile(spec, "sm_90") is after


def test_the_kernels_hints_are_under_those_of_the_options(real_toolchain: object, cache_dir: Path) -> None:
    compiler, spec = make(cc.KernelHints.parse({"sm_90": {"num_worker_warps": 8, "occupancy": 1}}))
    plain = compiler.compile(spec, "sm_90")
    assert "num_worker_warps_per_cta = 8" in plain.mlir and "occupancy = 1" in plain.mlir
    overridden = compiler.compile(spec, "sm_90", cc.CompileOptions(hints=cc.KernelHints.parse({"sm_90": {"occupancy": 2}})))
    assert "num_worker_warps_per_cta = 8" in overridden.mlir and "occupancy = 2" in overridden.mlir


@pytest.mark.parametrize("arch", ["sm_90", "sm_100"])
def test_every_worker_warp_count_tile_ir_takes_compiles(real_toolchain: object, cache_dir: Path, arch: str) -> None:
    """num_worker_warps 1 to 32 (powers of two) all compile; tileiras 13.4 builds 1 and 2
    as 4, and 16 and 32 as 8 (the same cubins), which is why the tuning spaces search 4
    and 8 alone."""
    cubins = {}
    for warps in (1, 2, 4, 8, 16, 32):
        compiler, spec = make(cc.KernelHints.parse({arch: {"num_worker_warps": warps}}))
        compiled = compiler.compile(spec, arch)
        assert f"num_worker_warps_per_cta = {warps}" in compiled.mlir
        cubins[warps] = compiled.cubin
    assert cubins[1] == cubins[2] == cubins[4] and cubins[8] == cubins[16] == cubins[32]
    assert cubins[4] != cubins[8]


def test_the_in_process_cache_is_bounded(real_toolchain: object, cache_dir: Path) -> None:
    compiler, spec = make()
    first = compiler.compile(spec, "sm_90")
    for level in range(4):  # four other option sets fill the cache of four
        compiler.compile(spec, "sm_90", cc.CompileOptions(opt_level=level % 4, hints=cc.KernelHints.parse(
            {"occupancy": level + 1})))
    assert compiler.compile(spec, "sm_90") is not first  # evicted: compiled again (from the disk cache)


def _combining(op: object) -> object:
    def combined(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
        tile = load_tile_like(x, z)
        z.store(op(tile, tile * SCALE))  # type: ignore[operator]
    return combined


def test_functions_written_on_one_line_are_told_apart_on_disk(real_toolchain: object, cache_dir: Path) -> None:
    """Two lambdas on one line share their source lines, qualified name and first
    line; a kernel reading one must not be served the other's cubin from the disk
    (the add kernel's cubin ran for sub, div and mod on the GPU)."""
    ops = [lambda a, b: a + b, lambda a, b: a - b]
    compiled = []
    for op in ops:
        kernel = _combining(op)
        signature = cc.parse_signature(kernel)
        spec = cc.specialize(signature, "combined", {"z": cc.TensorSpec(dt.f32, (1000,), (128,)),
                                                     "x": cc.TensorSpec(dt.f32, (1000,))})
        compiled.append(cc.KernelCompiler(kernel, signature).compile(spec, "sm_90"))
    assert not compiled[1].warm and compiled[1].cubin != compiled[0].cubin
    assert "addf" in compiled[0].mlir and "subf" in compiled[1].mlir
    again = _combining(ops[1])  # the same function again, from a new compiler: a warm start
    signature = cc.parse_signature(again)
    spec = cc.specialize(signature, "combined", {"z": cc.TensorSpec(dt.f32, (1000,), (128,)),
                                                 "x": cc.TensorSpec(dt.f32, (1000,))})
    warm = cc.KernelCompiler(again, signature).compile(spec, "sm_90")
    assert warm.warm and warm.cubin == compiled[1].cubin
