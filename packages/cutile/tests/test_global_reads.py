"""A kernel runs with the values its globals, closure variables and device functions
have when it runs: what a compile read is part of what the compiled code is kept
for, and a change compiles again (on the interpreter, through `cutile.compile`, and
on the GPU backend's Python and native launch paths, checked here on a fake driver).
"""

from __future__ import annotations

import importlib
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import cutile
from cuda_core.testing import FakeDriver
from cutile import _gpu, _native, api
from cutile.core import Mut, Tensor, f32, load_tile_like
from cutile_compiler import compile_kernel

pytestmark = pytest.mark.interpreter_only  # the GPU path runs on its own fake GPU below

SCALE = 2.0
OFFSET = 0.5


@cutile.function
def offset(t):  # type: ignore[no-untyped-def]
    return t + OFFSET


@cutile.entry
def scaled(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    z.store(load_tile_like(x, z) * SCALE)


@cutile.entry
def shifted(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    z.store(offset(load_tile_like(x, z)))  # OFFSET is read by the device function


@pytest.fixture(autouse=True)
def restore_globals() -> Iterator[None]:
    module = sys.modules[__name__]
    saved = dict(SCALE=SCALE, OFFSET=OFFSET, offset=offset)
    yield
    for name, value in saved.items():
        setattr(module, name, value)
    offset.python_function.__code__ = _OFFSET_CODE
    for kernel in (scaled, shifted):
        kernel.clear_cache()


_OFFSET_CODE = offset.python_function.__code__


def _run(kernel: Any, x: np.ndarray[Any, Any], *extra: Any) -> np.ndarray[Any, Any]:
    z = api.zeros([x.size], dtype=f32).partition([64])
    z, _ = kernel(z, api.from_numpy(x), *extra).sync()
    return np.asarray(z.unpartition().to_numpy(), dtype=np.float64)


def _set(name: str, value: Any) -> None:
    setattr(sys.modules[__name__], name, value)


def test_a_rebound_global_is_used_at_the_next_launch() -> None:
    x = np.random.default_rng(1).standard_normal(1000).astype(np.float32)
    for scale in (2.0, 3.0, -0.25, 2.0):
        _set("SCALE", scale)
        np.testing.assert_allclose(_run(scaled, x), x.astype(np.float64) * scale, rtol=1e-6)


def test_a_global_read_by_a_device_function_is_used_at_the_next_launch() -> None:
    x = np.random.default_rng(2).standard_normal(333).astype(np.float32)
    for value in (0.5, 7.0):
        _set("OFFSET", value)
        np.testing.assert_allclose(_run(shifted, x), x.astype(np.float64) + value, rtol=1e-6)


def test_a_redefined_device_function_is_used_at_the_next_launch() -> None:
    x = np.random.default_rng(3).standard_normal(200).astype(np.float32)
    np.testing.assert_allclose(_run(shifted, x), x.astype(np.float64) + 0.5, rtol=1e-6)

    @cutile.function
    def offset(t):  # type: ignore[no-untyped-def]  # a new definition under the old name
        return t - 1.0

    _set("offset", offset)
    np.testing.assert_allclose(_run(shifted, x), x.astype(np.float64) - 1.0, rtol=1e-6)


def test_a_device_function_whose_code_is_replaced_in_place_is_compiled_again() -> None:
    # What a hot reload (IPython's autoreload) does: the function object stays.
    x = np.random.default_rng(4).standard_normal(130).astype(np.float32)
    np.testing.assert_allclose(_run(shifted, x), x.astype(np.float64) + 0.5, rtol=1e-6)

    def replacement(t):  # type: ignore[no-untyped-def]
        return t * 4.0

    offset.python_function.__code__ = replacement.__code__
    np.testing.assert_allclose(_run(shifted, x), x.astype(np.float64) * 4.0, rtol=1e-6)


def test_a_closure_variable_assigned_later_is_used_at_the_next_launch() -> None:
    def make() -> tuple[Any, Any]:
        factor = 2.0

        @cutile.entry
        def times(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
            z.store(load_tile_like(x, z) * factor)

        def set_factor(value: float) -> None:
            nonlocal factor
            factor = value

        return times, set_factor

    times, set_factor = make()
    x = np.random.default_rng(5).standard_normal(65).astype(np.float32)
    np.testing.assert_allclose(_run(times, x), x.astype(np.float64) * 2.0, rtol=1e-6)
    set_factor(-3.0)
    np.testing.assert_allclose(_run(times, x), x.astype(np.float64) * -3.0, rtol=1e-6)


def test_an_equal_value_rebound_compiles_nothing_again() -> None:
    x = np.ones(64, np.float32)
    _run(scaled, x)
    (spec,) = [key for key, _ in scaled._compiler._ir._data.items()]
    before = scaled.kernel_ir(spec)
    _set("SCALE", float("2.0"))  # another float object, equal to the one compiled in
    np.testing.assert_allclose(_run(scaled, x), 2.0)
    assert scaled.kernel_ir(spec) is before


def test_compile_gives_the_code_of_the_current_value() -> None:
    meta = (api.meta([1024], dtype=f32).partition([128]), api.meta([1024], dtype=f32))
    first = cutile.compile(scaled, *meta)
    assert cutile.compile(scaled, *meta) is first  # kept while nothing changed
    _set("SCALE", 3.0)
    second = cutile.compile(scaled, *meta)
    assert second.bytecode != first.bytecode
    _set("SCALE", 2.0)
    assert cutile.compile(scaled, *meta).bytecode == first.bytecode


def test_a_module_attribute_and_a_reloaded_module_are_read_again(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "cutile_reload_helpers.py"
    path.write_text("import cutile\nBIAS = 1.0\n\n@cutile.function\ndef bias(t):\n    return t + BIAS\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        helpers = importlib.import_module("cutile_reload_helpers")
        _set("helpers", helpers)
        x = np.random.default_rng(6).standard_normal(100).astype(np.float32)
        np.testing.assert_allclose(_run(biased, x), x.astype(np.float64) + 1.0, rtol=1e-6)
        helpers.BIAS = 2.5  # type: ignore[attr-defined]
        np.testing.assert_allclose(_run(biased, x), x.astype(np.float64) + 2.5, rtol=1e-6)
        # A new source for the device function (another length: a new mtime may not show).
        path.write_text("import cutile\nBIAS = 1.0\n\n@cutile.function\ndef bias(t):\n    return t * 10.0 + BIAS\n")
        sys.dont_write_bytecode, saved = True, sys.dont_write_bytecode
        try:
            importlib.reload(helpers)
        finally:
            sys.dont_write_bytecode = saved
        np.testing.assert_allclose(_run(biased, x), x.astype(np.float64) * 10.0 + 1.0, rtol=1e-6)
    finally:
        sys.modules.pop("cutile_reload_helpers", None)
        biased.clear_cache()


helpers: types.ModuleType | None = None  # set by the test above


@cutile.entry
def biased(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    z.store(helpers.bias(load_tile_like(x, z)))


# -- the GPU backend, on a fake driver ------------------------------------------------------
class _Loads(FakeDriver):
    """Records every image loaded as a module."""

    def __init__(self) -> None:
        super().__init__()
        self.images: list[bytes] = []

    def cuModuleLoadData(self, image: bytes) -> tuple[Any, int]:
        self.images.append(bytes(image))
        return super().cuModuleLoadData(image)


SETTINGS = types.SimpleNamespace(bias=0.0)  # a host object whose attribute a kernel reads


def _make_mixed() -> tuple[Any, Any]:
    shift = 0.0

    @cutile.entry
    def mixed(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
        z.store(load_tile_like(x, z) * SCALE + SETTINGS.bias + shift)

    def set_shift(value: float) -> None:
        nonlocal shift
        shift = value

    return mixed, set_shift


# A global, an attribute of a host object and a closure variable, each read again in C.
mixed, set_shift = _make_mixed()
CHANGES = {
    "global": (lambda: _set("SCALE", 3.0), lambda: _set("SCALE", float("3.0"))),
    "attribute": (lambda: setattr(SETTINGS, "bias", 1.0), lambda: setattr(SETTINGS, "bias", float("1.0"))),
    "closure": (lambda: set_shift(-1.0), lambda: set_shift(float("-1.0"))),
}


@pytest.fixture
def fake_gpu(make_fake_gpu: Any) -> Iterator[_Loads]:
    """The GPU backend on a driver that keeps every image loaded; the globals the
    tests change are put back after."""
    try:
        with make_fake_gpu(_Loads(), kernels=(mixed,)) as fake:
            yield fake
    finally:
        SETTINGS.bias = 0.0
        set_shift(0.0)


@pytest.mark.parametrize("what", list(CHANGES))
@pytest.mark.parametrize("native", [True, False], ids=["native path", "python path"])
def test_the_gpu_path_loads_the_code_of_the_current_value(native: bool, what: str, fake_gpu: _Loads) -> None:
    if native and _native.load() is None:
        pytest.skip(f"the native launch path is unavailable: {_native.unavailable_reason()}")
    change, change_to_equal = CHANGES[what]

    def loop(z: Any, x: Any, launches: int) -> tuple[Any, Any]:
        for _ in range(launches):
            z, x = mixed(z, x).sync()
            if not native:
                mixed._native_binding = None  # as without the native module
        return z, x

    x = api.from_numpy(np.zeros(256, np.float32))
    z = api.empty([256], dtype=f32).partition([128])
    probe = mixed(z, x)
    spec = probe.plan().spec
    probe.cancel()  # made only to learn the specialization

    def cubin_now() -> bytes:  # compiled afresh, past every cache of the kernel
        return compile_kernel(mixed.function, mixed.signature, spec, "sm_90").cubin

    old = cubin_now()
    fake_gpu.kernels[mixed.compiled(spec, "sm_90").name] = _gpu.fake_param_layout(mixed.compiled(spec, "sm_90").abi)
    z, x = loop(z, x, 3)  # the binding launches, is armed, then (native) runs in C
    assert fake_gpu.images == [old]
    made, run = _native.module.stats() if native else (0, 0)

    change()
    new = cubin_now()
    assert new != old
    pending = mixed(z, x)  # made before the change is seen: it runs with the value at its run
    z, x = pending.sync()
    assert fake_gpu.images == [old, new] and len(fake_gpu.launches) == 4
    z, x = loop(z, x, 2)
    assert fake_gpu.images == [old, new] and len(fake_gpu.launches) == 6
    if native:
        assert _native.module.stats()[1] == run + 2  # armed again, with the new code

    # Equal, another object: no new code; the Python path sees it once, then C again.
    change_to_equal()
    z, x = loop(z, x, 3)
    assert fake_gpu.images == [old, new] and len(fake_gpu.launches) == 9
    if native:
        assert _native.module.stats()[1] == run + 4


def test_a_change_seen_inside_a_graph_capture_is_refused_naming_it(fake_gpu: _Loads) -> None:
    x = api.from_numpy(np.zeros(256, np.float32))
    z = api.empty([256], dtype=f32).partition([128])
    probe = mixed(z, x)
    compiled = mixed.compiled(probe.plan().spec, "sm_90")
    probe.cancel()  # made only to learn the specialization
    fake_gpu.kernels[compiled.name] = _gpu.fake_param_layout(compiled.abi)
    z, x = mixed(z, x).sync()  # warm: compiled and loaded
    _set("SCALE", 5.0)
    with pytest.raises(cutile.GraphCaptureError,
                       match=r"mixed is launched inside a CUDA graph capture after global 'SCALE' changed"):
        with cutile.graph_scope("after a change"):
            z, x = mixed(z, x).sync()
    del z, x
