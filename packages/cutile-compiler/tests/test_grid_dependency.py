"""The grid-dependency ops of a programmatic dependent launch: the wait lowers to
``gdc_wait_tko`` after every access before it, as an acquire (every later load and
store, read-only loads included, takes its token); the launch signal to
``gdc_launch_dependents_tko``; both only at the kernel's top level; tileiras compiles
them for sm_90 and sm_100."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

import cutile_compiler as cc
import cutile_ir as ir
from cutile_compiler import _dtypes as dt
from cutile_compiler._errors import TileCompilerError, TileSyntaxError
from cutile_compiler._frontend import build_kernel_ir
from cutile_compiler._lowering import lower_kernel
from cutile_compiler._signature import TensorSpec, parse_signature, specialize
from cutile_compiler.language import (
    Constant, Mut, Tensor, bid, f32, grid_dependency_control_launch_dependents, grid_dependency_control_wait,
)

Z = TensorSpec(dt.f32, (1000,), (128,))
X = TensorSpec(dt.f32, (1000,))


def mlir(function: Any, version: str = "13.4", **specs: Any) -> str:
    signature = parse_signature(function)
    kernel = build_kernel_ir(function, signature, specialize(signature, function.__name__, specs))
    return ir.print_module(lower_kernel(kernel, version, "sm_90"))


def waits_then_reads(z: Mut[Tensor[f32, ["B"]]], w: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]],
                     B: Constant[int]):
    early = x.load(index=(bid(0),), shape=(B,))  # before the wait: the predecessor may still write x
    w.store(early)
    grid_dependency_control_launch_dependents()
    grid_dependency_control_wait()
    z.store(x.load(index=(bid(0),), shape=(B,)) + early)


def test_the_wait_follows_every_access_and_orders_every_later_one() -> None:
    text = mlir(waits_then_reads, z=Z, w=Z, x=X)
    signal = re.search(r"(%\w+) = gdc_launch_dependents_tko token = (%\w+)", text)
    wait = re.search(r"(%\w+) = gdc_wait_tko token = (%\w+)", text)
    assert signal and wait
    store_w = re.search(r"(%\w+) = store_view_tko weak %\w+, %pview\w*\[", text)
    assert store_w is not None
    # both take a token after w's store (joined with z's untouched chain)
    joined = re.search(rf"{re.escape(wait[2])} = join_tokens ([^:]+):", text)
    assert joined is not None and store_w[1] in joined[1]
    # after the wait: the read-only load of x and the store of z take the wait's token
    after = text[wait.end():]
    assert re.search(rf"load_view_tko weak %\w+\[%\w+\] token = {re.escape(wait[1])}", after)
    assert re.search(rf"store_view_tko weak [^\n]*token = {re.escape(wait[1])}", after)
    assert text.count("load_view_tko") == 2


def shared_tile(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]], B: Constant[int]):
    early = x.load(at=(bid(0) * B,), shape=(B,))
    z.store(early + x.load(at=(bid(0) * B,), shape=(B,)))


def tile_across_the_wait(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]], B: Constant[int]):
    early = x.load(at=(bid(0) * B,), shape=(B,))
    grid_dependency_control_wait()
    z.store(early + x.load(at=(bid(0) * B,), shape=(B,)))


def test_loads_at_offsets_after_the_wait_take_its_token() -> None:
    alone = mlir(shared_tile, z=Z, x=X)
    assert not re.search(r"load_view_tko weak %\w+\[%\w+\] token", alone)  # read-only: no token
    across = mlir(tile_across_the_wait, z=Z, x=X)
    wait = re.search(r"(%\w+) = gdc_wait_tko", across)
    assert wait is not None
    before, after = across[:wait.start()], across[wait.end():]
    assert not re.search(r"load_view_tko weak %\w+\[%\w+\] token", before)
    assert re.search(rf"load_view_tko weak %\w+\[%\w+\] token = {re.escape(wait[1])}", after)


def wait_in_loop(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]], B: Constant[int]):
    for _ in range(bid(0)):
        grid_dependency_control_wait()
    z.store(x.load(index=(bid(0),), shape=(B,)))


def signal_in_if(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]], B: Constant[int]):
    if bid(0) > 0:
        grid_dependency_control_launch_dependents()
    z.store(x.load(index=(bid(0),), shape=(B,)))


@pytest.mark.parametrize("kernel, name", [(wait_in_loop, "grid_dependency_control_wait"),
                                          (signal_in_if, "grid_dependency_control_launch_dependents")])
def test_only_at_the_kernels_top_level(kernel: Any, name: str) -> None:
    with pytest.raises(TileSyntaxError, match=rf"{name}\(\) must be at the kernel's top level") as caught:
        mlir(kernel, z=Z, x=X)
    assert "test_grid_dependency.py:" in str(caught.value) and "^" in str(caught.value)


def dependent(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]], B: Constant[int]):
    grid_dependency_control_launch_dependents()
    grid_dependency_control_wait()
    z.store(x.load(index=(bid(0),), shape=(B,)) * 2.0)


def test_older_bytecode_is_refused_with_the_line() -> None:
    with pytest.raises(TileCompilerError, match=r"grid_dependency_control_launch_dependents\(\) needs Tile IR "
                                                r"bytecode 13.4 or newer .* writes 13.3") as caught:
        mlir(dependent, "13.3", z=Z, x=X)
    assert "test_grid_dependency.py:" in str(caught.value)


@pytest.mark.parametrize("arch", ["sm_90", "sm_100"])
def test_tileiras_compiles_them(real_toolchain: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                arch: str) -> None:
    monkeypatch.setenv("CUTILE_CACHE_DIR", str(tmp_path))
    signature = cc.parse_signature(dependent)
    spec = cc.specialize(signature, "dependent", {"z": Z, "x": X})
    compiled = cc.KernelCompiler(dependent, signature).compile(spec, arch)
    assert compiled.cubin and "gdc_wait_tko" in compiled.mlir and "gdc_launch_dependents_tko" in compiled.mlir


# -- kernels compiled for a programmatic dependent launch (CompileOptions.dependent_launch)

def dependent_mlir(function: Any, version: str = "13.4", **specs: Any) -> str:
    signature = parse_signature(function)
    kernel = build_kernel_ir(function, signature, specialize(signature, function.__name__, specs))
    return ir.print_module(lower_kernel(kernel, version, "sm_90", dependent_launch=True))


def plain(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]], B: Constant[int]):
    z.store(x.load(index=(bid(0),), shape=(B,)) * 2.0)


def test_a_dependent_kernel_signals_and_waits_before_its_first_access() -> None:
    text = dependent_mlir(plain, z=Z, x=X)
    signal = re.search(r"gdc_launch_dependents_tko", text)
    wait = re.search(r"(%\w+) = gdc_wait_tko", text)
    assert signal and wait and signal.start() < wait.start()
    assert text.count("gdc_wait_tko") == 1 and text.count("gdc_launch_dependents_tko") == 1
    before, after = text[:wait.start()], text[wait.end():]
    assert "load_view_tko" not in before and "store_view_tko" not in before
    # every access after it is ordered after it (the read-only load too)
    assert re.search(rf"load_view_tko weak %\w+\[%\w+\] token = {re.escape(wait[1])}", after)
    assert "gdc" not in mlir(plain, z=Z, x=X)  # (not compiled so: neither op)


def test_a_dependent_kernel_keeps_the_ops_it_places() -> None:
    text = dependent_mlir(dependent, z=Z, x=X)
    assert text.count("gdc_wait_tko") == 1 and text.count("gdc_launch_dependents_tko") == 1


def signals_late(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]], B: Constant[int]):
    grid_dependency_control_wait()
    tile = x.load(index=(bid(0),), shape=(B,))
    grid_dependency_control_launch_dependents()
    z.store(tile)


def test_a_dependent_kernel_that_signals_itself_gets_no_early_signal() -> None:
    text = dependent_mlir(signals_late, z=Z, x=X)
    assert text.count("gdc_launch_dependents_tko") == 1
    assert text.index("load_view_tko") < text.index("gdc_launch_dependents_tko")


def test_a_dependent_kernel_may_read_a_read_only_tensor_before_its_wait() -> None:
    text = dependent_mlir(tile_across_the_wait, z=Z, x=X)
    wait = re.search(r"(%\w+) = gdc_wait_tko", text)
    assert wait is not None and "load_view_tko" in text[:wait.start()]
    assert "store_view_tko" not in text[:wait.start()]
    assert text.count("gdc_launch_dependents_tko") == 1 and text.index("gdc_launch_dependents_tko") < wait.start()


def reads_own_output_early(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]], B: Constant[int]):
    early = z.load()  # its own tile
    grid_dependency_control_wait()
    z.store(early + x.load(index=(bid(0),), shape=(B,)))


@pytest.mark.parametrize("kernel, line, what", [
    (waits_then_reads, "w.store(early)", "of 'w', which the kernel writes"),
    (reads_own_output_early, "early = z.load", "of 'z', which the kernel writes")])
def test_a_dependent_kernel_may_not_touch_what_it_writes_before_its_wait(kernel: Any, line: str, what: str) -> None:
    with pytest.raises(TileCompilerError, match=rf"an access {what} before grid_dependency_control_wait\(\) in a "
                                                r"kernel compiled for a programmatic dependent launch") as caught:
        dependent_mlir(kernel, z=Z, w=Z, x=X) if kernel is waits_then_reads else dependent_mlir(kernel, z=Z, x=X)
    assert "test_grid_dependency.py:" in str(caught.value) and line in str(caught.value)


def test_the_reads_before_the_wait_are_named() -> None:
    from cutile_compiler._lowering import reads_before_wait

    def kernel_of(function: Any, **specs: Any) -> Any:
        signature = parse_signature(function)
        return build_kernel_ir(function, signature, specialize(signature, function.__name__, specs))

    assert reads_before_wait(kernel_of(tile_across_the_wait, z=Z, x=X)) == ("x",)
    assert reads_before_wait(kernel_of(plain, z=Z, x=X)) == ()  # no wait placed: nothing before it
    assert reads_before_wait(kernel_of(dependent, z=Z, x=X)) == ()


def test_a_dependent_kernel_needs_bytecode_13_4() -> None:
    with pytest.raises(TileCompilerError, match=r"plain, compiled for a programmatic dependent launch, needs Tile "
                                                r"IR bytecode 13.4 or newer .* writes 13.3"):
        dependent_mlir(plain, "13.3", z=Z, x=X)


def test_the_compile_option_is_checked() -> None:
    with pytest.raises(cc.ArgumentError, match=r"CompileOptions.dependent_launch must be a bool, got 1"):
        cc.CompileOptions(dependent_launch=1)  # type: ignore[arg-type]


@pytest.mark.parametrize("arch", ["sm_90", "sm_100"])
def test_tileiras_compiles_a_dependent_kernel(real_toolchain: object, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch, arch: str) -> None:
    monkeypatch.setenv("CUTILE_CACHE_DIR", str(tmp_path))
    signature = cc.parse_signature(plain)
    spec = cc.specialize(signature, "plain", {"z": Z, "x": X})
    compiler = cc.KernelCompiler(plain, signature)
    compiled = compiler.compile(spec, arch, cc.CompileOptions(dependent_launch=True))
    assert compiled.cubin and "gdc_wait_tko" in compiled.mlir and "gdc_launch_dependents_tko" in compiled.mlir
    assert compiled.cubin != compiler.compile(spec, arch).cubin
