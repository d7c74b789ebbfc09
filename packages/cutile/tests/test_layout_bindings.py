"""A kernel's bindings by layout, on a fake driver (no GPU needed): a call with new view
objects over the memory and layouts of an earlier call reuses that call's binding (its
holds, accesses, plan and packed parameters, and its native binding), while another
offset, stride, shape, storage or partition misses; a binding never keeps memory alive
and never matches once its storage is freed; everything that can change between calls
(consumed objects, pending holds, scalars) is still checked on every call.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import weakref
import struct
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

import cuda_async
import cutile
from cuda_core.testing import FakeDriver
from cutile import _binding, _entry, _gpu, _native, api
from cutile.core import Constant, Mut, Tensor, f32, load_tile_like

pytestmark = pytest.mark.interpreter_only  # runs once, on its own fake GPU


@cutile.entry
def axpy(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]], y: Tensor[f32, [-1]], a: f32):
    z.store(a * load_tile_like(x, z) + load_tile_like(y, z))


FakeGpu = Callable[..., contextlib.AbstractContextManager[FakeDriver]]


@pytest.fixture
def gpu(make_fake_gpu: FakeGpu) -> Iterator[FakeDriver]:
    with make_fake_gpu(kernels=(axpy,)) as fake:
        yield fake


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> list[_binding.ObjectBinding]:
    """Every `ObjectBinding` made meanwhile."""
    bindings: list[_binding.ObjectBinding] = []
    original = _binding.ObjectBinding.__init__

    def init(self: _binding.ObjectBinding, *args: Any) -> None:
        original(self, *args)
        bindings.append(self)

    monkeypatch.setattr(_binding.ObjectBinding, "__init__", init)
    return bindings


def _register(fake: FakeDriver, launch: cutile.Launch) -> Any:
    compiled = launch.kernel.compiled(launch.plan().spec, "sm_90")
    fake.kernels[compiled.name] = _gpu.fake_param_layout(compiled.abi)
    launch.cancel()
    return compiled


def _params(compiled: Any, launch: dict[str, Any]) -> dict[str, Any]:
    """The launch's parameters by (parameter, kind): pointers as addresses, dims and
    strides as ints, the f32 scalar as a float."""
    out: dict[str, Any] = {}
    for arg, raw in zip(compiled.abi, launch["params"]):
        name = f"{arg.param}.{arg.kind}{arg.axis if arg.kind in ('dim', 'stride') else ''}"
        out[name] = (struct.unpack("<Q", raw)[0] if arg.kind == "pointer" else struct.unpack("<f", raw)[0]
                     if arg.kind == "scalar" else struct.unpack("<i", raw)[0])
    return out


def _buffers(n: int = 1024) -> tuple[cutile.Tensor, cutile.Tensor, cutile.Tensor]:
    x = api.from_numpy(np.arange(n, dtype=np.float32))
    y = api.from_numpy(np.ones(n, np.float32))
    z = api.empty([n], dtype=f32)
    return z, x, y


def _native_made() -> int:
    return int(_native.module.stats()[0]) if _native.module is not None else 0


def test_new_views_of_the_same_memory_reuse_one_binding(gpu: FakeDriver, made: list[Any]) -> None:
    z, x, y = _buffers()
    compiled = _register(gpu, axpy(z[:256].partition([128]), x[:256], y[:256], 1.0))
    made.clear()
    gpu.launches.clear()
    native_before = _native_made()
    for i in range(6):  # every argument a new object each call
        axpy(z[:256].partition([128]), x[:256], y[:256], float(i)).sync()
    assert made == []  # the binding of the launch `_register` cancelled serves them all
    params = [_params(compiled, launch) for launch in gpu.launches]
    assert [p["a.scalar"] for p in params] == [float(i) for i in range(6)]  # scalars refilled per call
    assert all(p["x.pointer"] == x.address() and p["z.pointer"] == z.address() for p in params)
    if _native.module is not None:  # once armed (after its first launch), the native path makes them
        assert _native_made() - native_before == 5
    # Constants by keyword and a mix of positions find it too.
    axpy(z[:256].partition([128]), x[:256], y[:256], a=7.0).sync()
    assert made == [] and _params(compiled, gpu.launches[-1])["a.scalar"] == 7.0


@pytest.mark.parametrize("change", ["offset", "stride", "shape", "storage", "tile"])
def test_another_layout_or_storage_misses(gpu: FakeDriver, made: list[Any], change: str) -> None:
    z, x, y = _buffers()
    first = _register(gpu, axpy(z[:256].partition([128]), x[:256], y[:256], 1.0))
    axpy(z[:256].partition([128]), x[:256], y[:256], 1.0).sync()
    made.clear()
    other = api.from_numpy(np.zeros(1024, np.float32))
    xs = {"offset": x[256:512], "stride": x[::4], "shape": x[:128], "storage": other[:256], "tile": x[:256]}[change]
    n = 128 if change == "shape" else 256
    ys, tile = y[:n], [64] if change in ("tile", "shape") else [128]
    compiled = _register(gpu, axpy(z[:n].partition(tile), xs, ys, 1.0))  # (another specialization, maybe)
    axpy(z[:n].partition(tile), xs, ys, 1.0).sync()
    assert len(made) == 1  # a binding of its own (made by the launch `_register` cancelled)
    launched = _params(compiled, gpu.launches[-1])
    assert launched["x.pointer"] == xs.address()
    assert launched["x.dim0"] == xs.shape[0] and launched.get("x.stride0", 1) == xs.strides[0]  # (1: static)
    # ... and the first layout still finds its own binding. (The fake driver knows one
    # parameter layout per kernel name: the first specialization's again.)
    gpu.kernels[first.name] = _gpu.fake_param_layout(first.abi)
    made.clear()
    axpy(z[:256].partition([128]), x[:256], y[:256], 2.0).sync()
    assert made == []
    assert _params(first, gpu.launches[-1])["x.pointer"] == x.address()


def test_a_binding_keeps_no_memory_alive_and_dies_with_its_storage(gpu: FakeDriver, made: list[Any]) -> None:
    z, x, y = _buffers()
    _register(gpu, axpy(z[:256].partition([128]), x[:256], y[:256], 1.0))
    other = api.from_numpy(np.zeros(1024, np.float32))
    made.clear()
    axpy(z[:256].partition([128]), other[:256], y[:256], 1.0).sync()
    (binding,) = made
    key = next(k for k, b in axpy._bindings._data.items() if b is binding)
    address = other.address()
    assert address in gpu.memory and not binding.dead
    del other
    gc.collect()
    # The memory is freed although the kernel still holds the binding: dead, it matches nothing.
    assert address not in gpu.memory
    assert binding.dead and binding.accesses.accesses == () and binding.fast is None
    assert axpy._bindings.get(key) is binding
    # New memory at the very address (and, as CPython may reuse the storage's id, under the
    # dead binding's key: a forged one here) makes a binding of its own.
    gpu._addresses = itertools.chain([address], gpu._addresses)  # type: ignore[attr-defined]
    again = api.from_numpy(np.full(1024, 3.0, np.float32))
    assert again.address() == address
    made.clear()
    values = (z[:256].partition([128]), again[:256], y[:256], 1.0)
    axpy._bindings.put(_binding.layout_key(axpy, values), binding)
    axpy(*values).sync()
    assert len(made) == 1 and made[0] is not binding and not made[0].dead


def test_a_layout_hit_still_checks_what_changes_between_calls(gpu: FakeDriver, made: list[Any]) -> None:
    z, x, y = _buffers()
    _register(gpu, axpy(z[:256].partition([128]), x[:256], y[:256], 1.0))
    for _ in range(2):  # the second round: the binding is armed (the native path's checks)
        axpy(z[:256].partition([128]), x[:256], y[:256], 1.0).sync()
        # A consumed object: the partition was handed back.
        consumed = z[:256].partition([128])
        consumed.unpartition()
        with pytest.raises(cutile.OwnershipError, match="consumed"):
            axpy(consumed, x[:256], y[:256], 1.0)
        # Another pending launch holds the output: a new view of it is refused, naming both.
        pending = axpy(z[:256].partition([128]), x[:256], y[:256], 1.0)
        with pytest.raises(cutile.OwnershipError, match="parameter 'z'"):
            axpy(z[:256].partition([128]), x[:256], y[:256], 1.0)
        pending.cancel()
        # A scalar its dtype cannot hold.
        with pytest.raises(cutile.LaunchError, match="parameter 'a' is a f32 scalar; 1e\\+39 overflows it"):
            axpy(z[:256].partition([128]), x[:256], y[:256], 1e39)
        with pytest.raises(cutile.LaunchError, match="parameter 'a' is a f32 scalar, got 'one'"):
            axpy(z[:256].partition([128]), x[:256], y[:256], "one")
    assert len(made) == 1


def test_the_bindings_are_bounded(gpu: FakeDriver) -> None:
    layouts = _entry._BINDINGS + 8  # more layouts than a kernel keeps
    z, x, y = _buffers(16 * layouts + 128)
    _register(gpu, axpy(z[:128].partition([128]), x[:128], y[:128], 1.0))
    for offset in range(0, 16 * layouts, 16):
        axpy(z[:128].partition([128]), x[offset:offset + 128], y[:128], 1.0).sync()
    assert len(axpy._bindings._data) == _entry._BINDINGS


@pytest.mark.parametrize("value", [1.0, -0.0, 3.4028234e38, 3.4028235677973366e38, 3.4028235677973367e38, 1e39,
                                   -1e39, float("inf"), float("nan"), 1e-50])
def test_f32_scalars_overflow_as_numpy_casts_them(value: float) -> None:
    with np.errstate(over="ignore"):
        fits = not np.isfinite(value) or bool(np.isfinite(np.float32(value)))
    if fits:
        assert _binding.scalar_value("k", "a", cutile.core.f32, value) == value or value != value
    else:
        with pytest.raises(cutile.LaunchError, match="overflows it"):
            _binding.scalar_value("k", "a", cutile.core.f32, value)



def test_a_new_bindings_first_launch_runs_natively_once_its_kernel_is_loaded(gpu: FakeDriver, made: list[Any]) -> None:
    if _native.load() is None:
        pytest.skip("native code is turned off (CUDA_CORE_NATIVE=0)")
    z, x, y = _buffers()
    compiled = _register(gpu, axpy(z[:256].partition([128]), x[:256], y[:256], 1.0))
    axpy(z[:256].partition([128]), x[:256], y[:256], 1.0).sync()  # loads the kernel
    for step in range(3):  # new memory each call (a step's fresh inputs): a binding each, run in C
        fresh = api.from_numpy(np.full(256, float(step), np.float32))
        runs = int(_native.module.stats()[1])
        made.clear()
        axpy(z[:256].partition([128]), fresh, y[:256], 2.0).sync()
        assert len(made) == 1 and made[0].fast is not None
        assert int(_native.module.stats()[1]) == runs + 1
        launched = _params(compiled, gpu.launches[-1])
        assert launched["x.pointer"] == fresh.address() and launched["a.scalar"] == 2.0
    # A launch changed before it runs (an explicit grid) is the Python path's, as before.
    fresh = api.from_numpy(np.zeros(256, np.float32))
    runs = int(_native.module.stats()[1])
    axpy(z[:256].partition([128]), fresh, y[:256], 2.0).grid(2).sync()
    assert int(_native.module.stats()[1]) == runs


def test_an_ops_launches_over_armed_bindings_are_queued_in_c(gpu: FakeDriver) -> None:
    if _native.load() is None:
        pytest.skip("native code is turned off (CUDA_CORE_NATIVE=0)")
    z, x, y = _buffers()
    compiled = _register(gpu, axpy(z[:256].partition([128]), x[:256], y[:256], 1.0))
    axpy(z[:256].partition([128]), x[:256], y[:256], 1.0).sync()  # armed
    axpy(z[256:512].partition([128]), x[:256], y[:256], 1.0).sync()
    gpu.launches.clear()
    queued = int(_native.module.enqueued())
    op = axpy(z[:256].partition([128]), x[:256], y[:256], 3.0).then(
        lambda _: axpy(z[256:512].partition([128]), x[:256], y[:256], 4.0))
    op.sync()
    assert int(_native.module.enqueued()) == queued + 2
    launched = [_params(compiled, launch) for launch in gpu.launches]
    assert [(p["z.pointer"] - z.address(), p["a.scalar"]) for p in launched] == [(0, 3.0), (1024, 4.0)]
    # The op's holds were the job's: both outputs are free again.
    axpy(z[:256].partition([128]), x[:256], y[:256], 1.0).sync()


def test_a_layout_hits_launch_left_unrun_warns_at_its_call_line_and_takes_every_path(gpu: FakeDriver) -> None:
    import sys
    import warnings

    z, x, y = _buffers()
    _register(gpu, axpy(z[:256].partition([128]), x[:256], y[:256], 1.0))
    axpy(z[:256].partition([128]), x[:256], y[:256], 1.0).sync()  # armed
    axpy._warned_never_run = False
    with pytest.warns(cutile.LaunchNeverRunWarning) as caught:
        line = sys._getframe().f_lineno + 1
        axpy(z[:256].partition([128]), x[:256], y[:256], 2.0)  # new objects, freed at once
    (warning,) = [w for w in caught if issubclass(w.category, cutile.LaunchNeverRunWarning)]
    assert (warning.filename, warning.lineno) == (__file__, line)
    with warnings.catch_warnings(record=True) as quiet:
        warnings.simplefilter("always")
        with cutile.batch():
            for i in range(3):
                axpy(z[:256].partition([128]), x[:256], y[:256], float(i)).sync()
        axpy(z[:256].partition([128]), x[:256], y[:256], 5.0).cancel()
        axpy(z[:256].partition([128]), x[:256], y[:256], 6.0).op.sync()
        future = axpy(z[:256].partition([128]), x[:256], y[:256], 7.0).schedule()
        future.result()
    assert not [w for w in quiet if issubclass(w.category, cutile.LaunchNeverRunWarning)]
    pending = axpy(z[:256].partition([128]), x[:256], y[:256], 8.0)
    assert pending.arguments["a"] == 8.0 and pending.arguments["x"].shape == (256,)
    pending.cancel()


@cutile.entry
def mapped_scale(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]], B: Constant[int]):
    for idx in z.tiles():
        z.store(x.load(index=idx, shape=(B,)) * 2.0, idx)


def test_a_binding_armed_at_its_call_launches_on_its_own_grid(gpu: FakeDriver) -> None:
    # One loaded kernel, several grids (a mapped partition's block count is no part of the
    # specialization): a binding armed at its call, before its first launch, launches on
    # its own grid, not on the one the kernel's last launch set.
    mapped_scale.clear_cache()
    z, x, _ = _buffers()
    _register(gpu, mapped_scale(z[...].partition([128]).map([1], blocks=2), x, 128))
    for blocks in (2, 4, 3):
        mapped_scale(z[...].partition([128]).map([1], blocks=blocks), x, 128).sync()
        assert gpu.launches[-1]["grid"] == (blocks, 1, 1)
    fresh = api.from_numpy(np.zeros(1024, np.float32))  # a new binding of the first layout's plan
    mapped_scale(z[...].partition([128]).map([1], blocks=2), fresh, 128).sync()
    assert gpu.launches[-1]["grid"] == (2, 1, 1)
    mapped_scale.clear_cache()


@cutile.entry
def scaled(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]], c: Constant[float]):
    z.store(load_tile_like(x, z) * c)


def test_a_constant_of_another_sign_or_type_makes_its_own_binding(make_fake_gpu: FakeGpu,
                                                                  made: list[Any]) -> None:
    # 0.0 == -0.0 and 1 == 1.0, but they compile differently: the layout key keeps them apart.
    with make_fake_gpu(kernels=(scaled,)) as fake:
        z, x, _ = _buffers()
        _register(fake, scaled(z[:256].partition([128]), x[:256], 0.0))
        for _ in range(2):
            scaled(z[:256].partition([128]), x[:256], 0.0).sync()
        made.clear()
        negative = scaled(z[:256].partition([128]), x[:256], -0.0)
        assert len(made) == 1  # not the 0.0 binding
        positive = scaled(z[256:512].partition([128]), x[:256], 0.0)
        assert negative.plan().spec != positive.plan().spec
        negative.cancel()
        positive.cancel()


def test_numpy_and_int_scalars_on_a_layout_hit_are_packed_as_the_dtype(gpu: FakeDriver) -> None:
    z, x, y = _buffers()
    compiled = _register(gpu, axpy(z[:256].partition([128]), x[:256], y[:256], np.float32(1.0)))
    for value in (1.5, 2.5, 3.0):  # other scalar types than the binding's: the Python path packs them
        axpy(z[:256].partition([128]), x[:256], y[:256], np.float32(value)).sync()
        assert _params(compiled, gpu.launches[-1])["a.scalar"] == value
        axpy(z[:256].partition([128]), x[:256], y[:256], int(value)).sync()
        assert _params(compiled, gpu.launches[-1])["a.scalar"] == int(value)


@pytest.fixture
def planned(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What a call checked and planned from scratch meanwhile: its argument kinds and
    ranges (`Launch._argument_ranges`) and its plan (`Kernel.plan_for`)."""
    seen: list[str] = []
    ranges, plan_for = cutile.Launch._argument_ranges, _entry.Kernel.plan_for

    def argument_ranges(self: cutile.Launch, **kwargs: Any) -> Any:
        seen.append("ranges")
        return ranges(self, **kwargs)

    def planning(self: _entry.Kernel, *args: Any) -> Any:
        seen.append("plan")
        return plan_for(self, *args)

    monkeypatch.setattr(cutile.Launch, "_argument_ranges", argument_ranges)
    monkeypatch.setattr(_entry.Kernel, "plan_for", planning)
    return seen


def _known_shape(fake: FakeDriver) -> tuple[cutile.Tensor, cutile.Tensor, Any]:
    """z and y, and the compiled axpy, after calls that loaded the kernel and made the
    shape of axpy(z[:256] partitioned by 128, x[:256] of a fresh storage, y[:256])."""
    z, x, y = _buffers()
    compiled = _register(fake, axpy(z[:256].partition([128]), x[:256], y[:256], 1.0))
    axpy(z[:256].partition([128]), x[:256], y[:256], 1.0).sync()  # loads the kernel
    axpy(z[:256].partition([128]), api.from_numpy(np.zeros(1024, np.float32))[:256], y[:256], 1.0).sync()
    return z, y, compiled


def test_new_memory_in_an_earlier_calls_layouts_is_bound_without_checking_the_layouts_again(
        gpu: FakeDriver, made: list[Any], planned: list[str]) -> None:
    z, y, compiled = _known_shape(gpu)
    for step in range(3):  # a step's fresh input: new memory in the same layouts each call
        fresh = api.from_numpy(np.full(1024, float(step), np.float32))
        made.clear()
        planned.clear()
        runs = int(_native.module.stats()[1]) if _native.module is not None else 0
        axpy(z[:256].partition([128]), fresh[:256], y[:256], 3.0 + step).sync()
        assert len(made) == 1 and planned == []  # a binding of its own, no kind, stride or plan checked again
        launched = _params(compiled, gpu.launches[-1])
        assert launched["x.pointer"] == fresh.address() and launched["z.pointer"] == z.address()
        assert launched["a.scalar"] == 3.0 + step and launched["x.dim0"] == 256
        if _native.module is not None:  # outside a batch it runs in C at once, as a fresh binding
            assert made[0].fast is not None and int(_native.module.stats()[1]) == runs + 1
        # Its memory is free again, and its binding found by the next call over it.
        made.clear()
        axpy(z[:256].partition([128]), fresh[:256], y[:256], 1.0).sync()
        assert made == []
    # Another layout (an offset, hence an alignment) plans afresh.
    other = api.from_numpy(np.zeros(1024, np.float32))
    made.clear()
    axpy(z[:256].partition([128]), other[1:257], y[:256], 1.0).sync()
    assert len(made) == 1 and "plan" in planned and "ranges" in planned


def test_in_a_batch_a_binding_over_new_memory_is_armed_when_it_is_called_again(gpu: FakeDriver,
                                                                             made: list[Any]) -> None:
    if _native.module is None:
        pytest.skip("native code is turned off (CUDA_CORE_NATIVE=0)")
    z, y, compiled = _known_shape(gpu)
    fresh = api.from_numpy(np.ones(1024, np.float32))
    with cutile.batch():
        made.clear()
        axpy(z[:256].partition([128]), fresh[:256], y[:256], 2.0).sync()
        (binding,) = made
        assert binding.fast is None and binding.unarmed  # prepared, not armed: it may never be called again
        calls, runs = (int(n) for n in _native.module.stats()[:2])
        for i in range(3):
            axpy(z[:256].partition([128]), fresh[:256], y[:256], float(i)).sync()
        assert binding.fast is not None and not binding.unarmed and made == [binding]
        assert int(_native.module.stats()[0]) == calls + 3 and int(_native.module.stats()[1]) > runs
    assert [_params(compiled, launch)["a.scalar"] for launch in gpu.launches[-4:]] == [2.0, 0.0, 1.0, 2.0]
    assert all(_params(compiled, launch)["x.pointer"] == fresh.address() for launch in gpu.launches[-4:])


def test_a_call_in_a_known_shape_still_refuses_what_a_fresh_binding_refuses(gpu: FakeDriver, made: list[Any],
                                                                             planned: list[str]) -> None:
    from cutile._interop import ForeignDeviceStorage

    z, x, y = _buffers()
    _register(gpu, axpy(z[:256].partition([128]), x[:256], y[:256], 1.0))

    def foreign(tensor: cutile.Tensor) -> cutile.Tensor:  # another storage over the same memory
        storage = tensor._storage
        return cutile.Tensor(ForeignDeviceStorage(storage.base_address, storage.nbytes, 0, tensor), tensor.dtype,
                             tensor.shape)

    a, b = api.from_numpy(np.zeros(1024, np.float32)), api.from_numpy(np.zeros(1024, np.float32))
    axpy(foreign(a)[:256].partition([128]), foreign(b)[:256], y[:256], 1.0).sync()  # loads the kernel
    axpy(foreign(a)[:256].partition([128]), foreign(b)[:256], y[:256], 1.0).sync()  # the shape of this layout
    # The same layouts over other memory: a binding made from the shape...
    made.clear()
    planned.clear()
    c = api.from_numpy(np.zeros(1024, np.float32))
    values = (foreign(c)[:256].partition([128]), foreign(a)[:256], y[:256], 1.0)
    assert _binding.shape_key(axpy, values) == _binding.shape_key(
        axpy, (foreign(a)[:256].partition([128]), foreign(b)[:256], y[:256], 1.0))
    axpy(*values).sync()
    assert len(made) == 1 and planned == []
    # ... but one whose written partition's memory is also an input's (two storages over one
    # allocation, as two imports of an array are) is refused, as a fresh binding refuses it.
    made.clear()
    shared = (foreign(c)[:256].partition([128]), foreign(c)[:256], y[:256], 1.0)
    assert _binding.shape_key(axpy, shared) == _binding.shape_key(axpy, values)
    with pytest.raises(cutile.LaunchError, match="parameters 'z' and 'x' share memory and 'z' is written"):
        axpy(*shared)
    assert made == [] and planned == []
    # A consumed object: the partition was handed back.
    d = api.from_numpy(np.zeros(1024, np.float32))
    consumed = foreign(d)[:256].partition([128])
    consumed.unpartition()
    with pytest.raises(cutile.OwnershipError, match=r"axpy: parameter 'z': this partition was consumed by unpartition\(\)"):
        axpy(consumed, foreign(a)[:256], y[:256], 1.0)
    # Memory a pending launch holds: refused at the call, naming both parameters.
    pending = axpy(foreign(d)[:256].partition([128]), foreign(a)[:256], y[:256], 1.0)
    with pytest.raises(cutile.OwnershipError, match=r"axpy: parameter 'x': the tensor is held by the pending launch "
                                                    r"of axpy \(parameter 'z'\), which writes it"):
        axpy(foreign(c)[:256].partition([128]), foreign(d)[:256], y[:256], 1.0)
    pending.cancel()
    # A scalar its dtype cannot hold.
    with pytest.raises(cutile.LaunchError, match="parameter 'a' is a f32 scalar; 1e\\+39 overflows it"):
        axpy(foreign(d)[:256].partition([128]), foreign(c)[:256], y[:256], 1e39)
    assert planned == []
    # Read-only memory is another shape: the fresh binding's check refuses it.
    readonly = foreign(d)
    readonly._storage.readonly = True
    with pytest.raises(cutile.LaunchError, match="parameter 'z' is Mut\\[...\\] but its memory is read-only"):
        axpy(readonly[:256].partition([128]), foreign(c)[:256], y[:256], 1.0)
    # Nothing was left held: the memory is free for the next call.
    axpy(foreign(d)[:256].partition([128]), foreign(c)[:256], y[:256], 1.0).sync()


def test_bindings_whose_memory_is_freed_leave_the_kernels_bindings_and_are_freed_at_once(gpu: FakeDriver,
                                                                                       made: list[Any]) -> None:
    z, y, _ = _known_shape(gpu)
    before = len(axpy._bindings)
    gc.disable()  # (freed by reference counting: a binding is in no cycle)
    try:
        refs = []
        for _ in range(20):
            fresh = api.from_numpy(np.zeros(1024, np.float32))
            made.clear()
            axpy(z[:256].partition([128]), fresh[:256], y[:256], 1.0).sync()
            refs.append(weakref.ref(made[0]))
            made.clear()
            del fresh  # its binding dies, and is dropped from the kernel's at the next new binding
        assert len(axpy._bindings) <= before + 1
        assert sum(ref() is not None for ref in refs) <= 1  # (the last, still the kernel's last binding)
    finally:
        gc.enable()


def test_claims_and_runs_made_in_c_sit_after_the_jobs_holds_in_the_ledger(gpu: FakeDriver) -> None:
    # cuda_async's C API appends claims and a synchronous run's holds to a domain's list
    # and removes them by identity; the jobs' holds stay at the list's front.
    if _native.module is None:
        pytest.skip("native code is turned off (CUDA_CORE_NATIVE=0)")
    from cuda_async import _ledger

    z, x, y = _buffers()
    _register(gpu, axpy(z[:256].partition([128]), x[:256], y[:256], 1.0))
    for _ in range(2):  # both bindings armed
        axpy(z[:256].partition([128]), x[:256], y[:256], 1.0).sync()
        axpy(z[256:512].partition([128]), x[:256], y[:256], 1.0).sync()
    listed = _ledger.holds[z.device]
    w = api.empty([1024], dtype=f32)

    def owners() -> list[Any]:
        return [hold[4] for hold in listed]

    calls = int(_native.module.stats()[0])
    with cutile.batch():
        axpy(z[:256].partition([128]), x[:256], y[:256], 1.0).sync()  # the batch's job holds z[:256], x, y
        (job,) = listed.owners
        pending = axpy(z[256:512].partition([128]), x[:256], y[:256], 2.0)  # claimed in C
        assert int(_native.module.stats()[0]) > calls
        assert listed.front == 3 and owners() == [job] * 3 + [None] * 3
        axpy(w[:256].partition([128]), x[:256], y[:256], 3.0).sync()  # new memory: the job's hold, before the claim
        assert listed.front == 4 and owners() == [job] * 4 + [None] * 3
        with pytest.raises(cutile.OwnershipError, match=r"held by the pending launch of axpy \(parameter 'z'\)"):
            axpy(w[:256].partition([128]), z[256:512], y[:256], 1.0)  # the claim is still met
        pending.sync()
        assert owners() == [job] * 5 and listed.front == 5
    assert listed == [] and listed.front == 0
    # A synchronous run in C (on the pool's other stream) beside another job's holds: its
    # holds go after them, and back.
    runs = int(_native.module.stats()[1])
    with cuda_async.using_policy(cuda_async.RoundRobin(2)):
        future = axpy(w[:256].partition([128]), w[512:768], w[768:1024], 1.0).schedule()
        assert listed.front == 3
        axpy(z[:256].partition([128]), x[:256], y[:256], 4.0).sync()
        assert int(_native.module.stats()[1]) == runs + 1
        assert listed.front == len(listed) == 3 and len(listed.owners) == 1
        future.result()
    assert listed == [] and listed.front == 0 and not listed.owners
