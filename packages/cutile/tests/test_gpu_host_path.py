"""The GPU backend's host side, on a fake driver (no GPU needed): what each launch
passes to cuLaunchKernel (pointers with view offsets, dims, strides, scalars, the
grid), the reuse of a call's packed parameters, and batches. The kernels compile
with tileiras for sm_90; the fake driver records launches instead of running them.
"""

from __future__ import annotations

import contextlib
import gc
import struct
import sys
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

import cuda_async
import cutile
import cutile_compiler
from cuda_core.testing import FakeDriver, use_fake_driver
from cutile import _backend, _gpu, _native, api
from fake_add_script import FAKE_ADD_PRELUDE
from cutile.core import Mut, Tensor, bid, bool_, f16, f32, i8, i32, i64, load_tile_like, tf32

pytestmark = pytest.mark.interpreter_only  # runs once, on its own fake GPU


@cutile.entry
def saxpy(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]], y: Tensor[f32, [-1]], a: f32):
    z.store(a * load_tile_like(x, z) + load_tile_like(y, z))


@cutile.entry
def scale2d(z: Mut[Tensor[f32, ["BM", "BN"]]], x: Tensor[f32, [-1, -1]], s: f16, n: i64):
    z.store(load_tile_like(x, z) * s.astype(f32) + n.astype(f32))


@cutile.entry
def no_mut():  # its grid is always explicit
    print("block %d", bid(0))


def _register(fake: FakeDriver, launch: cutile.Launch, *, cancel: bool = True) -> Any:
    """Compiles ``launch`` for the fake sm_90 device and tells the fake driver the
    kernel's parameter layout (as the cubin would); then cancels the launch, made
    only for this, unless the caller runs it."""
    compiled = launch.kernel.compiled(launch.plan().spec, "sm_90")
    fake.kernels[compiled.name] = _gpu.fake_param_layout(compiled.abi)
    if cancel:
        launch.cancel()
    return compiled


def _unpack(compiled: Any, params: list[bytes]) -> list[tuple[str, str, Any]]:
    out = []
    for arg, raw in zip(compiled.abi, params):
        if arg.kind == "pointer":
            value: Any = struct.unpack("<Q", raw)[0]
        elif arg.kind in ("dim", "stride"):
            value = struct.unpack("<i", raw)[0]
        else:
            value = {"f32": lambda b: struct.unpack("<f", b)[0], "f16": lambda b: float(np.frombuffer(b, np.float16)[0]),
                     "i64": lambda b: struct.unpack("<q", b)[0]}[arg.dtype.name](raw)
        out.append((arg.param, arg.kind if arg.kind != "stride" else f"stride{arg.axis}", value))
    return out


FakeGpu = Callable[..., contextlib.AbstractContextManager[FakeDriver]]


_KERNELS = (saxpy, scale2d, no_mut)


@pytest.fixture
def fake_gpu(make_fake_gpu: FakeGpu) -> Iterator[FakeDriver]:
    """The GPU backend on a fake driver (conftest's `make_fake_gpu`), forgetting the
    modules this file's kernels loaded into it."""
    with make_fake_gpu(kernels=_KERNELS) as fake:
        yield fake


def test_a_launch_passes_pointers_dims_and_scalars(fake_gpu: FakeDriver) -> None:
    x = api.from_numpy(np.zeros(1000, np.float32))
    y = api.from_numpy(np.zeros(1000, np.float32))
    whole = api.empty([1024], dtype=f32)
    z = whole[24:].partition([128])  # a view 24 elements into its memory
    launch = saxpy(z, x, y, 2.5)
    compiled = _register(fake_gpu, launch, cancel=False)
    z, x, y = launch.sync()
    (record,) = fake_gpu.launches
    assert record["grid"] == (8, 1, 1) and record["block"] == (1, 1, 1)
    values = dict(((p, k), v) for p, k, v in _unpack(compiled, record["params"]))
    assert values[("z", "pointer")] == whole._storage.base_address + 24 * 4
    assert values[("x", "pointer")] == x._storage.base_address
    assert values[("x", "dim")] == 1000 and values[("a", "scalar")] == 2.5
    assert not any(k.startswith("stride") for _, k in values)  # unit innermost strides are not passed


def test_repeated_launches_reuse_the_packing_and_refill_scalars(fake_gpu: FakeDriver) -> None:
    x = api.from_numpy(np.zeros(512, np.float32))
    y = api.from_numpy(np.zeros(512, np.float32))
    z = api.empty([512], dtype=f32).partition([128])
    compiled = _register(fake_gpu, saxpy(z, x, y, 1.0))
    for a in (1.0, -0.0, 3.5, 3.5):
        z, x, y = saxpy(z, x, y, a).sync()
    scalars = [_unpack(compiled, r["params"])[-1][2] for r in fake_gpu.launches]
    assert scalars[0] == 1.0 and np.signbit(scalars[1]) and scalars[2:] == [3.5, 3.5]
    pointers = {tuple(r["params"][:2]) for r in fake_gpu.launches}
    assert len(pointers) == 1
    other = api.from_numpy(np.ones(512, np.float32))  # a different object: its own pointer
    z, other, y = saxpy(z, other, y, 1.0).sync()
    last = {(p, k): v for p, k, v in _unpack(compiled, fake_gpu.launches[-1]["params"])}
    assert last[("x", "pointer")] == other._storage.base_address


def test_views_with_other_strides_pass_them(fake_gpu: FakeDriver) -> None:
    values = np.zeros((64, 96), np.float32)
    x = api.from_numpy(values)
    source = x[:, 16:80].T  # 64 x 64, strides (1, 96)
    z = api.empty([64, 64], dtype=f32).partition([32, 32])
    launch = scale2d(z, source, 0.5, 7)
    compiled = _register(fake_gpu, launch, cancel=False)
    launch.sync()
    got = {(p, k): v for p, k, v in _unpack(compiled, fake_gpu.launches[-1]["params"])}
    assert got[("x", "stride0")] == 1 and got[("x", "stride1")] == 96
    assert got[("x", "pointer")] == x._storage.base_address + 16 * 4
    assert got[("z", "stride0")] == 64 and ("z", "stride1") not in got
    assert got[("s", "scalar")] == 0.5 and got[("n", "scalar")] == 7
    assert fake_gpu.launches[-1]["grid"] == (2, 2, 1)


def test_each_launch_gets_its_own_grid(fake_gpu: FakeDriver) -> None:
    # One loaded kernel launched on grids of 4, 2 and 2 blocks, then 4 again: its
    # prepared launch changes grid, and changes it back.
    _register(fake_gpu, no_mut().grid(1))
    for blocks in (4, 2, 2, 4):
        no_mut().grid(blocks).sync()
    assert [r["grid"] for r in fake_gpu.launches] == [(4, 1, 1), (2, 1, 1), (2, 1, 1), (4, 1, 1)]
    assert len(no_mut._loaded_kernels) == 1


def test_reading_back_cutiles_own_memory_waits_for_its_writers_not_the_whole_device(fake_gpu: FakeDriver) -> None:
    x = api.from_numpy(np.arange(256, dtype=np.float32))
    out = api.empty([256], dtype=f32)
    z = out[...].partition([128])
    _register(fake_gpu, saxpy(z, x, x, 1.0))
    z = out[...].partition([128])
    with cutile.batch("queued", wait=False) as queued:
        saxpy(z, x, x, 1.0).sync()
    syncs = fake_gpu.calls["cuCtxSynchronize"]
    # work queued on other memory goes on: the read-back waits for nothing of it
    assert x.to_numpy().tolist() == list(range(256))
    assert fake_gpu.calls["cuCtxSynchronize"] == syncs
    with pytest.raises(cutile.OwnershipError, match="pending op launch of saxpy"):
        out.to_numpy()  # its writer is queued: refused, never read early
    assert queued.future is not None
    queued.future.result()
    out.to_numpy()
    assert fake_gpu.calls["cuCtxSynchronize"] == syncs
    # a batch whose future is dropped unwaited gives its holds back at once; its write stays
    # recorded, and the read-back waits for that write's event
    with cutile.batch("dropped", wait=False):
        saxpy(out[...].partition([128]), x, x, 1.0).sync()
    gc.collect()
    events = fake_gpu.calls["cuEventSynchronize"]
    out.to_numpy()
    assert fake_gpu.calls["cuEventSynchronize"] == events + 1
    assert fake_gpu.calls["cuCtxSynchronize"] == syncs
    # memory another library was handed may be written on streams the ledger does not see
    x.__dlpack__()
    x.to_numpy()
    assert fake_gpu.calls["cuCtxSynchronize"] == syncs + 2  # the export's wait, then the read-back's
    imported = api.from_dlpack(api.from_numpy(np.ones(4, np.float32)))
    before = fake_gpu.calls["cuCtxSynchronize"]
    imported.to_numpy()
    assert fake_gpu.calls["cuCtxSynchronize"] == before + 1


def test_a_batch_waits_once_and_holds_its_tensors(fake_gpu: FakeDriver) -> None:
    x = api.from_numpy(np.zeros(256, np.float32))
    y = api.from_numpy(np.zeros(256, np.float32))
    z = api.empty([256], dtype=f32).partition([128])
    _register(fake_gpu, saxpy(z, x, y, 1.0))
    before = fake_gpu.calls["cuStreamSynchronize"]
    with cutile.batch():
        for _ in range(20):
            z, x, y = saxpy(z, x, y, 1.0).sync()
        assert fake_gpu.calls["cuStreamSynchronize"] == before  # nothing waited for yet
        with pytest.raises(cutile.OwnershipError, match=r"written by the pending op launch of saxpy \(parameter 'z'\)"):
            z.to_numpy()
    assert len(fake_gpu.launches) == 20
    assert fake_gpu.calls["cuStreamSynchronize"] == before + 1
    assert len({r["stream"] for r in fake_gpu.launches}) == 1
    z.to_numpy()  # free again


def test_memory_is_freed_when_the_last_reference_goes_without_the_garbage_collector(fake_gpu: FakeDriver) -> None:
    import gc

    x = api.from_numpy(np.zeros(256, np.float32))
    y = api.from_numpy(np.zeros(256, np.float32))
    z = api.empty([256], dtype=f32).partition([128])
    _register(fake_gpu, saxpy(z, x, y, 1.0))
    gc.collect()
    gc.disable()  # no cycle may hold the memory: plain reference counting frees it
    try:
        z, x, y = saxpy(z, x, y, 1.0).sync()
        with cutile.batch():
            z, x, y = saxpy(z, x, y, 2.0).sync()
        address = x._storage.base_address
        del x
        assert address not in fake_gpu.memory  # freed at once (stream-ordered free)
    finally:
        gc.enable()


def _run_racing(bodies: list[Callable[[], None]]) -> None:
    """Runs each body on a thread of its own, switching threads as often as possible."""
    import sys
    import threading

    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=body) for body in bodies]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(previous)


def test_threads_launching_one_kernel_never_mix_their_arguments(fake_gpu: FakeDriver) -> None:
    x = api.from_numpy(np.zeros(256, np.float32))
    y = api.from_numpy(np.zeros(256, np.float32))
    outputs = [api.empty([256], dtype=f32).partition([128]) for _ in range(2)]
    compiled = _register(fake_gpu, saxpy(outputs[0], x, y, 1.0))
    expected_scalar = {outputs[i]._tensor._storage.base_address: float(i + 1) for i in range(2)}
    errors: list[BaseException] = []

    def worker(index: int) -> None:
        z = outputs[index]
        try:
            for _ in range(1000):
                z, _, _ = saxpy(z, x, y, float(index + 1)).sync()
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    _run_racing([lambda: worker(0), lambda: worker(1)])
    assert not errors, errors
    assert len(fake_gpu.launches) == 2000
    for record in fake_gpu.launches:
        got = {(p, k): v for p, k, v in _unpack(compiled, record["params"])}
        assert got[("a", "scalar")] == expected_scalar[got[("z", "pointer")]]


class _FreeLog(FakeDriver):
    """Records the order of launches and frees."""

    def __init__(self) -> None:
        super().__init__()
        self.order: list[tuple[str, int]] = []

    def cuLaunchKernel(self, *args: Any) -> tuple[Any]:
        self.order.append(("launch", 0))
        return super().cuLaunchKernel(*args)

    def cuMemFreeAsync(self, ptr: int, stream: Any) -> tuple[Any]:
        self.order.append(("free", ptr))
        return super().cuMemFreeAsync(ptr, stream)


def test_memory_of_a_shared_op_lives_until_its_work_is_observed_done(make_fake_gpu: FakeGpu) -> None:
    import gc

    log = _FreeLog()
    with make_fake_gpu(log, cuda_async.RoundRobin(2), kernels=_KERNELS):
        try:
            x = api.from_numpy(np.zeros(256, np.float32))
            y = api.from_numpy(np.zeros(256, np.float32))
            z = api.empty([256], dtype=f32).partition([128])
            _register(log, saxpy(z, x, y, 1.0))
            address = x._storage.base_address
            gc.collect()
            gc.disable()
            future = saxpy(z, x, y, 1.0).shared().map(lambda r: r[0]).schedule()
            del x, y  # the caller keeps only the future
            assert ("free", address) not in log.order  # the queued kernel still reads x
            z = future.result()
            del future, z  # (nothing of the fake GPU may outlive the fake driver)
            assert ("free", address) in log.order  # handed back once observed done
        finally:
            gc.enable()


def test_an_imported_array_is_released_without_the_garbage_collector(fake_gpu: FakeDriver) -> None:
    import gc
    import weakref

    class Producer:  # another library's array, seen through the CUDA Array Interface
        def __init__(self, backing: Any) -> None:
            self.backing = backing
            self.__cuda_array_interface__ = dict(backing.__cuda_array_interface__)

    x = api.from_numpy(np.zeros(256, np.float32))
    z = api.empty([256], dtype=f32).partition([128])
    producer = Producer(api.from_numpy(np.zeros(256, np.float32)))
    alive = weakref.ref(producer)
    _register(fake_gpu, saxpy(z, x, x, 1.0))
    gc.collect()
    gc.disable()
    try:
        y = api.from_dlpack(producer)
        del producer
        z, x, y = saxpy(z, x, y, 1.0).sync()
        del y
        assert alive() is None
    finally:
        gc.enable()


# -- the native launch path (cutile._native) ------------------------------------------------
@cutile.entry
def shift(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]], n: i32):
    z.store(load_tile_like(x, z) + n.astype(f32))


@cutile.entry
def shift8(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]], n: i8):
    z.store(load_tile_like(x, z) + n.astype(f32))


def _require_native() -> None:
    """CI builds the native launch path (it has a C compiler and the Python headers):
    its absence fails a test; only CUDA_CORE_NATIVE=0 turns it off (a skip)."""
    from cuda_core._native import enabled

    if _native.load() is None:
        if enabled():
            pytest.fail(f"the native launch path could not be built: {_native.unavailable_reason()}")
        pytest.skip("native code is turned off (CUDA_CORE_NATIVE=0)")


@pytest.fixture
def native_gpu(fake_gpu: FakeDriver) -> Iterator[FakeDriver]:
    """The fake GPU, with the native launch path required (see `_require_native`)."""
    _require_native()
    try:
        yield fake_gpu
    finally:
        shift.clear_cache()
        shift8.clear_cache()


def _armed_saxpy(fake: FakeDriver) -> tuple[Any, Any, Any]:
    """z (partitioned), x, y of 256 floats, after one launch of saxpy over them: its
    binding is armed, so the next call with these objects takes the native path."""
    x = api.from_numpy(np.zeros(256, np.float32))
    y = api.from_numpy(np.zeros(256, np.float32))
    z = api.empty([256], dtype=f32).partition([128])
    _register(fake, saxpy(z, x, y, 1.0))
    return saxpy(z, x, y, 1.0).sync()


def _stats() -> tuple[int, int]:
    made, run = _native.module.stats()
    return int(made), int(run)


def _ledger(resources: list[Any], stream: Any) -> list[Any]:
    """What cuda_async's ledger says about ``resources`` (epochs relative to the stream's)."""
    from cuda_async import _ledger, _streams

    now = _streams.current_epoch(stream)
    state = []
    for resource in resources:
        last = resource._last_write
        domain, start, end = resource.span
        holds = [hold for hold in _ledger.holds.get(domain, ()) if hold[0] < end and start < hold[1]]
        state.append((
            sorted((None if owner is None else owner.name, writes, label) for _, _, writes, label, owner, _ in holds),
            None if last is None else (last[0] is stream, now - last[1], last[2].name),
            sorted((s is stream, now - epoch, job.name) for s, (epoch, job) in resource._reads.items()),
        ))
    return state


def _batch_of_saxpy(fake: FakeDriver, *, native: bool) -> tuple[list[Any], list[Any], int, tuple[int, int]]:
    x = api.from_numpy(np.zeros(256, np.float32))
    y = api.from_numpy(np.zeros(256, np.float32))
    z = api.empty([256], dtype=f32).partition([128])
    _register(fake, saxpy(z, x, y, 1.0))
    z, x, y = saxpy(z, x, y, 1.0).sync()  # the binding launches once, and arms the native path
    fake.launches.clear()
    before = _stats()
    with cutile.batch() as active:
        for i in range(40):
            if not native:
                saxpy._native_binding = None  # the Python path, as without the native module
            z, x, y = saxpy(z, x, y, float(i)).sync()
        resources = [t._storage.resource for t in (z._tensor, x, y)]
        ledger = _ledger(resources, active.stream)
        ops = active.ops
    made, run = _stats()
    params = [r["params"] for r in fake.launches]
    return params, ledger, ops, (made - before[0], run - before[1])


def test_the_native_path_runs_a_batch_loop_as_the_python_path_does(native_gpu: FakeDriver) -> None:
    native_params, native_ledger, native_ops, (made, run) = _batch_of_saxpy(native_gpu, native=True)
    # Every launch was made in C; all but the first ran in C (the first takes the
    # batch's holds, through Python: the steady state begins after it).
    assert made == 40 and run == 39
    saxpy.clear_cache()
    python_params, python_ledger, python_ops, (made, run) = _batch_of_saxpy(native_gpu, native=False)
    assert made == 0 and run == 0
    # Same parameters (pointers differ between the two runs' tensors: compare all but them)...
    compiled_abi = [arg.kind for arg in saxpy.compiled(saxpy._object_binding.plan.spec, "sm_90").abi]
    strip = lambda params: [[p for p, kind in zip(ps, compiled_abi) if kind != "pointer"] for ps in params]  # noqa: E731
    assert strip(native_params) == strip(python_params)
    assert [struct.unpack("<f", ps[-1])[0] for ps in native_params] == [float(i) for i in range(40)]
    # ... and the same ledger: holds, last writer and readers at the same epochs.
    assert native_ledger == python_ledger and native_ops == python_ops == 40


def test_a_native_launch_is_refused_what_a_python_launch_is(native_gpu: FakeDriver) -> None:
    z, x, y = _armed_saxpy(native_gpu)
    made = _stats()[0]
    pending = saxpy(z, x, y, 2.0)  # made in C: it holds z
    assert _stats()[0] == made + 1
    with pytest.raises(cutile.OwnershipError, match=r"held by the pending launch of saxpy \(parameter 'z'\)"):
        saxpy(z, x, y, 3.0)
    with pytest.raises(cutile.OwnershipError, match="held by the pending launch of saxpy"):
        z._tensor.to_numpy()
    saxpy._warned_never_run = False
    with pytest.warns(cutile.LaunchNeverRunWarning, match="launch of saxpy was never run"):
        del pending  # dropped unrun: its holds are given back, and it warns
    z, x, y = saxpy(z, x, y, 4.0).sync()
    with cutile.batch():
        z, x, y = saxpy(z, x, y, 5.0).sync()
        launch = saxpy(z, x, y, 6.0)
        z, x, y = launch.sync()
        with pytest.raises(cutile.OwnershipError, match="has already run"):
            launch.sync()
        with pytest.raises(cutile.OwnershipError, match=r"written by the pending op launch of saxpy \(parameter 'z'\)"):
            z._tensor.to_numpy()
    tensor = z.unpartition()  # consumes z
    with pytest.raises(cutile.OwnershipError, match="consumed by"):
        saxpy(z, x, y, 1.0)
    z = tensor.partition([128])
    z, x, y = saxpy(z, x, y, 1.0).sync()


def test_a_native_launch_in_a_following_batch_joins_the_holds_of_the_batch_it_follows_only(
        native_gpu: FakeDriver) -> None:
    """A launch in ``batch(after=first)`` over memory ``first`` still holds is made in C
    (the stream orders it after that work); memory held by a batch before ``first``, or
    by a pending launch, is refused as on the Python path."""
    z, x, y = _armed_saxpy(native_gpu)
    with cutile.batch("layer 0", wait=False) as first:
        z, x, y = saxpy(z, x, y, 1.0).sync()
    made = _stats()[0]
    with cutile.batch("layer 1", wait=False, after=first) as second:
        z, x, y = saxpy(z, x, y, 2.0).sync()  # first writes z still: joined, in C
        assert _stats()[0] == made + 1
    with pytest.raises(cutile.OwnershipError, match=r"written by the pending op launch of saxpy \(parameter 'z'\)"):
        with cutile.batch("layer 2", wait=False, after=second):
            saxpy(z, x, y, 3.0)  # first's holds are no one's to join here
    assert _stats()[0] == made + 1
    for done in (first, second):
        assert done.future is not None
        done.future.result()
    pending = saxpy(z, x, y, 4.0)  # a pending launch's holds: joined by no batch
    with cutile.batch("layer 0", wait=False) as first:
        w = api.empty([256], dtype=f32).partition([128])
        w, x, y = saxpy(w, x, y, 1.0).sync()
    with pytest.raises(cutile.OwnershipError, match="pending launch of saxpy"):
        with cutile.batch("layer 1", after=first):
            saxpy(z, x, y, 5.0)
    pending.sync()
    assert first.future is not None
    first.future.result()


def test_a_native_launch_is_a_complete_object(native_gpu: FakeDriver) -> None:
    from cutile._launch import Launch

    assert "__getattr__" not in vars(Launch)  # nothing is adopted on attribute access
    z, x, y = _armed_saxpy(native_gpu)
    made = _stats()[0]
    launch = saxpy(z, x, y, 2.0)
    assert _stats()[0] == made + 1 and vars(launch) == {}  # made in C: only its C members are set
    assert launch.kernel is saxpy and launch._binding is saxpy._object_binding
    assert launch.arguments == {"z": z, "x": x, "y": y, "a": 2.0}
    assert launch.plan() is saxpy._object_binding.plan and launch.description == "launch of saxpy"
    assert launch._claim is saxpy._object_binding.claim_plan and not launch._done
    run = _stats()[1]
    z, x, y = launch.grid(2).sync()  # the grid changes what it runs: the Python path runs it
    assert _stats()[1] == run and launch._done and launch._claim is None
    launch = saxpy(z, x, y, 3.0)
    assert vars(launch) == {}
    z, x, y = launch.sync()  # run in C, and complete afterwards too
    assert _stats()[1] == run + 1 and launch._done and launch._claim is None
    with pytest.raises(cutile.OwnershipError, match="has already run"):
        launch.sync()


def test_the_native_launch_code_reads_no_python_attribute_of_cutile_or_cuda_async() -> None:
    # cutile's C reaches cuda_async only through its C API (batch_api.h), and cutile's
    # objects only through the slots of the three classes handed to it (their offsets
    # taken once from those classes' own member descriptors): no attribute lookup by
    # name, no descriptor call (the one attribute read is of a user's module, a
    # compile's read).
    import re
    from pathlib import Path

    source = (Path(_native.__file__).parent / "native" / "_native_launch.c").read_text()
    assert "tp_descr_get" not in source and "GetAttrString" not in source
    assert source.count("tp_dict") == 1 and source.count("slot_offset(") == 4  # (its definition and three uses)
    assert re.findall(r"slot_offset\((\w+), \"(\w+)\"", source) == [("kernel", "_native_binding"),
                                                                  ("owned", "_consumed_by")]
    assert re.findall(r"PyObject_GetAttr\((\w+)", source) == ["where"]
    assert "CallMethod" not in source and "InternFromString" not in source  # no method looked up by name
    assert re.findall(r'#include "(\w+\.h)"', source) == ["batch_api.h"]


def test_a_native_launch_left_unrun_warns_at_its_call_line(native_gpu: FakeDriver) -> None:
    z, x, y = _armed_saxpy(native_gpu)
    saxpy._warned_never_run = False
    made, run = _stats()
    with pytest.warns(cutile.LaunchNeverRunWarning) as caught:
        line = sys._getframe().f_lineno + 1
        saxpy(z, x, y, 2.0)  # made in C, freed at once
    assert _stats() == (made + 1, run)
    (warning,) = [w for w in caught if issubclass(w.category, cutile.LaunchNeverRunWarning)]
    assert (warning.filename, warning.lineno) == (__file__, line)
    assert f"launch of saxpy was never run: the call at {__file__}:{line} made it" in str(warning.message)
    saxpy._warned_never_run = False
    with warnings.catch_warnings(record=True) as quiet:
        warnings.simplefilter("always")
        z, x, y = saxpy(z, x, y, 3.0).sync()  # made and run in C
        with cutile.batch():
            for _ in range(3):
                z, x, y = saxpy(z, x, y, 4.0).sync()
        saxpy(z, x, y, 5.0).cancel()  # made in C, adopted, cancelled
        z, x, y = saxpy(z, x, y, 6.0).op.sync()  # made in C, run as an op
    assert _stats()[1] >= run + 2  # the synchronous run and the batch's steady state, in C
    assert not [w for w in quiet if issubclass(w.category, cutile.LaunchNeverRunWarning)]


def test_a_native_launch_takes_every_python_method(native_gpu: FakeDriver) -> None:
    z, x, y = _armed_saxpy(native_gpu)
    launch = saxpy(z, x, y, 2.0)
    assert launch.arguments["a"] == 2.0 and launch.plan().grid == (2, 1, 1)  # adopted by Python
    z, x, y = launch.grid(2).sync()
    z, x, y = saxpy(z, x, y, 3.0).op.then(lambda r: saxpy(*r, 4.0)).sync()
    z, x, y = cutile.zip(saxpy(z, x, y, 5.0)).sync()[0]
    scalars = [struct.unpack("<f", r["params"][-1])[0] for r in native_gpu.launches[-4:]]
    assert scalars == [2.0, 3.0, 4.0, 5.0]


def test_the_native_path_checks_scalars_and_constants_at_the_call(native_gpu: FakeDriver) -> None:
    x = api.from_numpy(np.zeros(256, np.float32))
    z = api.empty([256], dtype=f32).partition([128])
    _register(native_gpu, shift(z, x, 1))
    z, x = shift(z, x, 1).sync()
    made = _stats()[0]
    with pytest.raises(cutile.LaunchError, match="'n' is a i32 scalar; 1099511627776 does not fit"):
        shift(z, x, 1 << 40)
    with pytest.raises(cutile.LaunchError, match="'n' is a i32 scalar"):
        shift(z, x, "7")
    assert _stats()[0] == made  # both went to the Python path, which raised
    with cutile.batch():
        for n in (-(1 << 31), (1 << 31) - 1, 0):
            z, x = shift(z, x, n).sync()
    assert [struct.unpack("<i", r["params"][-1][:4])[0] for r in native_gpu.launches[-3:]] == [-(1 << 31), (1 << 31) - 1, 0]
    assert _stats()[0] == made + 3


def test_a_driver_error_in_the_native_path_is_cudas_error(native_gpu: FakeDriver) -> None:
    from cuda_core import CudaError
    from cuda_core.testing import R

    z, x, y = _armed_saxpy(native_gpu)
    with pytest.raises(CudaError, match="launch of saxpy.*CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"):
        with cutile.batch():
            z, x, y = saxpy(z, x, y, 1.0).sync()
            native_gpu.fail_next["cuLaunchKernel"] = R.CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES
            z, x, y = saxpy(z, x, y, 1.0).sync()
    z._tensor.to_numpy()  # the batch ended: nothing holds z


_WITHOUT_NATIVE_SCRIPT = FAKE_ADD_PRELUDE + """
with use_fake_driver() as fake:
    _backend.reset_for_tests("gpu")
    with cuda_async.using_policy(cuda_async.SingleStream()):
        z, x, first = first_add(fake)
        del first
        with cutile.batch():
            for _ in range(10):
                z, x = add(z, x).sync()
        print("launches:", len(fake.launches))
        del z, x
        add.clear_cache()
assert _native.module is None  # (the first launch tried to load it, and said why not)
print("reason:", _native.unavailable_reason())
"""


def test_without_native_code_launches_take_the_python_path(tmp_path: Any) -> None:
    import os
    import subprocess
    import sys

    script = tmp_path / "without_native.py"
    script.write_text(_WITHOUT_NATIVE_SCRIPT)
    env = dict(os.environ, CUDA_CORE_NATIVE="0")
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "reason: native code is turned off (CUDA_CORE_NATIVE=0)" in done.stdout
    assert "launches: 10" in done.stdout
    assert "native launch path" not in done.stderr  # turned off on purpose: nothing to say
    env = dict(os.environ, CC="/nonexistent/cc", CUDA_CORE_NATIVE_DIR=str(tmp_path / "cache"), CUDA_CORE_NATIVE="1")
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "reason: the C compiler CC='/nonexistent/cc' is not found" in done.stdout
    assert "launches: 10" in done.stdout
    assert ("cutile: the native launch path is unavailable (the C compiler CC='/nonexistent/cc' is not found); "
            "launches take the Python path") in done.stderr


class _WatchingSync(FakeDriver):
    """Calls ``on_synchronize`` whenever a stream is waited for (the native path
    waits without the GIL: the callback runs as another thread would)."""

    on_synchronize: Callable[[], None] = staticmethod(lambda: None)

    def cuStreamSynchronize(self, stream: Any) -> tuple[Any]:
        self.on_synchronize()
        return super().cuStreamSynchronize(stream)


def _five_launches_hold_their_tensors_while_they_wait(fake: Any, driver: "_WatchingSync",
                                                      sync: Callable[[cutile.Launch], Any]) -> tuple[Any, ...]:
    """Five saxpy launches run by ``sync`` on idle memory: each holds z while the host
    waits (another thread may not read it), z is idle after, the stream advanced by five.
    Gives (z, x, y, z's resource, the stream, its epoch before)."""
    from cuda_async import _streams

    x = api.from_numpy(np.zeros(256, np.float32))
    y = api.from_numpy(np.zeros(256, np.float32))
    z = api.empty([256], dtype=f32).partition([128])
    _register(fake, saxpy(z, x, y, 1.0))
    z, x, y = sync(saxpy(z, x, y, 1.0))
    resource = z._tensor._storage.resource
    seen: list[Any] = []

    def during_the_wait() -> None:
        seen.append(resource.holders)
        try:
            resource.check_available(cuda_async.Access.READ, by="another thread")
        except cutile.OwnershipError as exc:
            seen.append(str(exc))

    driver.on_synchronize = during_the_wait
    stream = cuda_async.default_policy().next_stream()
    epoch = _streams.current_epoch(stream)
    for i in range(5):
        z, x, y = sync(saxpy(z, x, y, float(i)))
    assert seen[0] == [("launch of saxpy (parameter 'z')", cuda_async.Access.WRITE)]
    assert "written by the pending op launch of saxpy (parameter 'z'); 'another thread' may not read it" in seen[1]
    assert not resource.is_held and resource._last_write is None and not resource._reads  # idle again
    assert _streams.current_epoch(stream) == epoch + 5
    assert [struct.unpack("<f", r["params"][-1])[0] for r in fake.launches[-5:]] == [0.0, 1.0, 2.0, 3.0, 4.0]
    return z, x, y, resource, stream, epoch


def test_the_native_path_runs_synchronous_launches_holding_their_tensors(make_fake_gpu: FakeGpu) -> None:
    driver = _WatchingSync()
    with make_fake_gpu(driver, kernels=_KERNELS) as fake:
        _require_native()
        run = _stats()[1]
        z, x, y, resource, stream, _ = _five_launches_hold_their_tensors_while_they_wait(
            fake, driver, lambda launch: launch.sync())
        assert _stats()[1] == run + 5  # the five after the first (which armed the binding)
        z._tensor.to_numpy()
        del z, x, y, resource, stream  # nothing of the fake GPU may outlive the fake driver


def _python_sync(launch: cutile.Launch) -> Any:
    """Runs ``launch`` on the Python path (as without the native module)."""
    launch._detach()
    return launch.sync()


def test_the_python_path_runs_synchronous_launches_on_idle_memory_holding_their_tensors(
        make_fake_gpu: FakeGpu) -> None:
    from cuda_async import _streams

    driver = _WatchingSync()
    with make_fake_gpu(driver, kernels=_KERNELS) as fake:
        z, x, y, resource, stream, epoch = _five_launches_hold_their_tensors_while_they_wait(fake, driver,
                                                                                            _python_sync)
        # A failed launch gives the holds back and does not advance the stream; a failed
        # wait is cuda's error, its holds given back too.
        from cuda_core import CudaError
        from cuda_core.testing import R

        driver.on_synchronize = lambda: None
        fake.fail_next["cuLaunchKernel"] = R.CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES
        with pytest.raises(CudaError, match="CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"):
            _python_sync(saxpy(z, x, y, 1.0))
        assert not resource.is_held and _streams.current_epoch(stream) == epoch + 5
        fake.fail_next["cuStreamSynchronize"] = R.CUDA_ERROR_ILLEGAL_ADDRESS
        with pytest.raises(CudaError, match="CUDA_ERROR_ILLEGAL_ADDRESS"):
            _python_sync(saxpy(z, x, y, 1.0))
        assert not resource.is_held and _streams.current_epoch(stream) == epoch + 6
        z, x, y = _python_sync(saxpy(z, x, y, 1.0))
        z._tensor.to_numpy()
        del z, x, y, resource, stream  # nothing of the fake GPU may outlive the fake driver


class _CountingPolicy(cuda_async.SingleStream):
    """One stream, counting how often a stream is asked of it."""

    def __init__(self) -> None:
        super().__init__()
        self.asked = 0

    def next_stream(self) -> Any:
        self.asked += 1
        return super().next_stream()


def _saxpy_and_shift(fake: FakeDriver) -> tuple[Any, Any, Any, Any]:
    """z and w (partitioned), x, y of 256 floats, with saxpy(z, x, y) and shift(w, x)
    registered with ``fake`` (neither launched)."""
    x = api.from_numpy(np.zeros(256, np.float32))
    y = api.from_numpy(np.zeros(256, np.float32))
    z = api.empty([256], dtype=f32).partition([128])
    w = api.empty([256], dtype=f32).partition([128])
    _register(fake, saxpy(z, x, y, 1.0))
    _register(fake, shift(w, x, 1))
    return z, x, y, w


def test_a_python_sync_on_busy_memory_asks_the_policy_once(fake_gpu: FakeDriver) -> None:
    z, x, y, w = _saxpy_and_shift(fake_gpu)
    counting = _CountingPolicy()
    with cuda_async.using_policy(counting):
        z, x, y = _python_sync(saxpy(z, x, y, 1.0))  # idle: one stream asked for
        assert counting.asked == 1
        future = shift(w, x, 1).schedule()  # a pending job reads x: saxpy's memory is not idle
        z, x, y = _python_sync(saxpy(z, x, y, 1.0))
        assert counting.asked == 3  # the schedule's stream, then saxpy's job's, once
        w, x = future.result()
    shift.clear_cache()


def test_a_failed_wait_in_the_native_path_is_cudas_error(native_gpu: FakeDriver) -> None:
    from cuda_core import CudaError
    from cuda_core.testing import R

    z, x, y = _armed_saxpy(native_gpu)
    native_gpu.fail_next["cuStreamSynchronize"] = R.CUDA_ERROR_ILLEGAL_ADDRESS
    launch = saxpy(z, x, y, 1.0)
    with pytest.raises(CudaError, match="waiting for the launch of saxpy.*CUDA_ERROR_ILLEGAL_ADDRESS"):
        launch.sync()
    assert not z._tensor._storage.resource.is_held  # the holds were given back


def test_the_native_path_honours_the_policy_and_leaves_captures_to_python(native_gpu: FakeDriver) -> None:
    import cuda_core

    z, x, y = _armed_saxpy(native_gpu)
    mine = cuda_core.Stream.create()
    run = _stats()[1]
    with cuda_async.using_policy(cuda_async.SingleStream(mine)):
        z, x, y = saxpy(z, x, y, 2.0).sync()
    assert _stats()[1] == run + 1 and native_gpu.launches[-1]["stream"] == int(mine.handle)
    pool = cuda_async.RoundRobin(3)
    with cuda_async.using_policy(pool):
        for i in range(7):
            z, x, y = saxpy(z, x, y, 2.0).sync()
    assert _stats()[1] == run + 8  # the pool's streams, in turn, as RoundRobin.next_stream gives them
    assert [r["stream"] for r in native_gpu.launches[-7:]] == [int(pool.streams[i % 3].handle) for i in range(7)]
    with cutile.graph_scope("step") as scope:
        z, x, y = saxpy(z, x, y, 3.0).sync()  # recorded, by the Python path
    assert _stats()[1] == run + 8 and scope.graph.node_count == 1
    scope.graph.close()


def test_the_native_sync_finds_each_streams_facts_among_more_streams_than_it_caches(native_gpu: FakeDriver) -> None:
    # The C code caches a few streams' handle and state by identity: with more streams
    # alive than it keeps, and streams dying and new ones made (possibly at the same
    # address), every run must still go to its policy's stream and advance that one.
    import cuda_core
    from cuda_async import _streams

    z, x, y = _armed_saxpy(native_gpu)
    run = _stats()[1]
    alive = [cuda_core.Stream.create() for _ in range(40)]
    for round_ in range(2):
        for stream in alive:
            with cuda_async.using_policy(cuda_async.SingleStream(stream)):
                z, x, y = saxpy(z, x, y, 1.0).sync()
            assert native_gpu.launches[-1]["stream"] == int(stream.handle)
            assert _streams.current_epoch(stream) == round_ + 1
        for _ in range(20):  # short-lived streams
            stream = cuda_core.Stream.create()
            with cuda_async.using_policy(cuda_async.SingleStream(stream)):
                z, x, y = saxpy(z, x, y, 1.0).sync()
            assert native_gpu.launches[-1]["stream"] == int(stream.handle) and _streams.current_epoch(stream) == 1
            del stream
    assert _stats()[1] == run + 2 * 60  # all of them in C
    del alive


def test_a_binding_armed_under_another_driver_is_not_used(native_gpu: FakeDriver) -> None:
    from cuda_core._native import EntryPoints

    z, x, y = _armed_saxpy(native_gpu)
    made = _stats()[0]
    saxpy(z, x, y, 1.0).sync()
    assert _stats()[0] == made + 1
    # Another driver's entry points (as after swapping drivers): the module is
    # configured anew when the next kernel is armed, and saxpy's binding, armed
    # with the first driver's handles, must not launch through it.
    native_gpu.native_entry_points = lambda: EntryPoints(*_native.module.null_entry_points())  # type: ignore[method-assign]
    w = api.empty([256], dtype=f32).partition([128])
    _register(native_gpu, shift(w, x, 1))
    w, x = shift(w, x, 1).sync()
    launches = len(native_gpu.launches)
    z, x, y = saxpy(z, x, y, 2.0).sync()
    assert _stats()[0] == made + 1 and len(native_gpu.launches) == launches + 1  # the Python path ran it


def test_grid_and_compile_options_of_a_native_launch_are_kept(native_gpu: FakeDriver) -> None:
    z, x, y = _armed_saxpy(native_gpu)
    with pytest.raises(cutile.LaunchError, match="explicit grid \\[9, 1, 1\\] disagrees"):
        saxpy(z, x, y, 1.0).grid(9).sync()  # made in C, then changed: the Python path checks it
    run = _stats()[1]
    z, x, y = saxpy(z, x, y, 1.0).compile_options(opt_level=0).sync()
    assert _stats()[1] == run  # not the armed binding's code: Python ran it
    assert any(key[2].opt_level == 0 for key in saxpy._compiler._compiled.keys())
    with cutile.batch():
        z, x, y = saxpy(z, x, y, 1.0).sync()
        z, x, y = saxpy(z, x, y, 1.0).grid(2, 1, 1).sync()
    assert native_gpu.launches[-1]["grid"] == (2, 1, 1)


def test_a_widened_small_scalar_is_checked_against_its_dtype(native_gpu: FakeDriver) -> None:
    x = api.from_numpy(np.zeros(256, np.float32))
    z = api.empty([256], dtype=f32).partition([128])
    compiled = _register(native_gpu, shift8(z, x, 1))
    layout = native_gpu.kernels[compiled.name]
    offset = layout[-1][0]
    layout[-1] = (-(-offset // 4) * 4, 4)  # the cubin declares the i8 scalar as 4 bytes
    z, x = shift8(z, x, 1).sync()
    made = _stats()[0]
    with pytest.raises(cutile.LaunchError, match="'n' is a i8 scalar; 200 does not fit"):
        shift8(z, x, 200)
    z, x = shift8(z, x, -100).sync()
    assert _stats()[0] == made + 1
    assert struct.unpack("<i", native_gpu.launches[-1]["params"][-1])[0] == -100


def test_a_sync_that_the_native_path_leaves_asks_the_policy_once(native_gpu: FakeDriver) -> None:
    z, x, y, w = _saxpy_and_shift(native_gpu)
    z, x, y = saxpy(z, x, y, 1.0).sync()
    counting = _CountingPolicy()
    with cuda_async.using_policy(counting):
        z, x, y = saxpy(z, x, y, 1.0).sync()  # native
        assert counting.asked == 1
        future = shift(w, x, 1).schedule()  # a pending job reads x: saxpy's resources are not idle
        run = _stats()[1]
        z, x, y = saxpy(z, x, y, 1.0).sync()
        assert _stats()[1] == run and counting.asked == 3  # the schedule's stream, then saxpy's, once
        w, x = future.result()


def test_a_driver_change_retires_the_native_bindings(native_gpu: FakeDriver) -> None:
    from cuda_core import _driver

    z, x, y = _armed_saxpy(native_gpu)
    made = _stats()[0]
    _driver.use_driver(_driver.api())  # as use_fake_driver does when it swaps drivers
    z, x, y = saxpy(z, x, y, 1.0).sync()
    assert _stats()[0] == made


def test_threads_on_the_native_path_keep_their_arguments_and_the_ledger_consistent(native_gpu: FakeDriver) -> None:
    x = api.from_numpy(np.zeros(256, np.float32))
    y = api.from_numpy(np.zeros(256, np.float32))
    z = api.empty([256], dtype=f32).partition([128])
    w = api.empty([256], dtype=f32).partition([128])
    saxpy_abi = _register(native_gpu, saxpy(z, x, y, 1.0))
    _register(native_gpu, shift(w, x, 1))
    z, x, y = saxpy(z, x, y, 1.0).sync()
    w, x = shift(w, x, 1).sync()
    made, run = _stats()
    errors: list[BaseException] = []

    def saxpys() -> None:
        nonlocal z
        try:
            for i in range(300):
                if i % 2:
                    with cutile.batch():
                        for _ in range(3):
                            z, _, _ = saxpy(z, x, y, 2.0).sync()
                else:
                    z, _, _ = saxpy(z, x, y, 2.0).sync()
        except BaseException as exc:
            errors.append(exc)

    def shifts() -> None:
        nonlocal w
        try:
            for _ in range(300):
                w, _ = shift(w, x, 3).sync()  # reads x too: the two threads share it
        except BaseException as exc:
            errors.append(exc)

    _run_racing([saxpys, shifts])
    assert not errors, errors
    assert _stats()[0] > made and _stats()[1] > run  # the C path ran in both threads
    for record in native_gpu.launches[-900:]:
        params = dict(((p, k), v) for p, k, v in _unpack(saxpy_abi, record["params"])) if len(record["params"]) == len(saxpy_abi.abi) else None
        if params is not None:
            assert params[("a", "scalar")] == 2.0 and params[("z", "pointer")] == z._tensor._storage.base_address
        else:
            assert struct.unpack("<i", record["params"][-1][:4])[0] == 3
    for tensor in (z._tensor, w._tensor, x, y):
        resource = tensor._storage.resource
        assert not resource.is_held and resource._last_write is None  # every job completed and released


@cutile.entry
def scale_tf32(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]], s: tf32):
    z.store(load_tile_like(x, z) * s.astype(f32))


def test_a_tf32_scalar_takes_the_native_path_packed_and_checked_as_f32(native_gpu: FakeDriver) -> None:
    """tf32 is stored as f32: its scalars are packed as C floats and refused where f32
    would overflow, in C as in Python."""
    x = api.from_numpy(np.zeros(256, np.float32))
    z = api.empty([256], dtype=f32).partition([128])
    _register(native_gpu, scale_tf32(z, x, 1.0))
    z, x = scale_tf32(z, x, 1.0).sync()
    made = _stats()[0]
    with pytest.raises(cutile.LaunchError, match=r"parameter 's' is a tf32 scalar; 1e\+39 overflows it"):
        scale_tf32(z, x, 1e39)
    assert _stats()[0] == made  # left C for the Python path, which raised
    values = (0.1, -3.0e38, float("inf"))
    for value in values:
        z, x = scale_tf32(z, x, value).sync()
    assert _stats()[0] == made + len(values)  # made in C
    packed = [struct.unpack("<f", r["params"][-1][:4])[0] for r in native_gpu.launches[-len(values):]]
    assert packed == [float(np.float32(v)) for v in values]


@cutile.entry
def flag_scale(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]], s: f16, on: bool_):
    z.store(load_tile_like(x, z) * s.astype(f32) + on.astype(f32))


def test_the_native_path_refuses_a_float_scalar_that_would_overflow(native_gpu: FakeDriver) -> None:
    """A finite f32 argument beyond f32's range is refused (it became inf), in C
    and in Python alike; an explicit inf or NaN passes."""
    z, x, y = _armed_saxpy(native_gpu)
    z, x, y = saxpy(z, x, y, 2.0).sync()
    made = _stats()[0]
    for value in (1e300, -3.5e38, np.float64(1e39)):
        with pytest.raises(cutile.LaunchError, match=r"parameter 'a' is a f32 scalar; .* overflows it"):
            saxpy(z, x, y, value)
    assert _stats()[0] == made  # each left C for the Python path, which raised
    for value in (float("inf"), float("-inf"), float("nan"), 3.4028234e38):
        z, x, y = saxpy(z, x, y, value).sync()
    assert _stats()[0] == made + 4
    packed = [struct.unpack("<f", r["params"][-1][:4])[0] for r in native_gpu.launches[-4:]]
    assert packed[:2] == [np.inf, -np.inf] and np.isnan(packed[2]) and packed[3] == np.float32(3.4028234e38)


def test_f16_and_bool_scalars_out_of_range_are_refused_on_the_gpu_path(fake_gpu: FakeDriver) -> None:
    x = api.from_numpy(np.zeros(256, np.float32))
    z = api.empty([256], dtype=f32).partition([128])
    _register(fake_gpu, flag_scale(z, x, 1.0, True))
    z, x = flag_scale(z, x, 1.0, True).sync()
    try:
        with pytest.raises(cutile.LaunchError, match=r"parameter 's' is a f16 scalar; 1000000.0 overflows it"):
            flag_scale(z, x, 1e6, True)
        for flag in (5, -1, np.int64(2)):
            with pytest.raises(cutile.LaunchError, match=r"parameter 'on' is a bool scalar; -?\d+ is neither 0 nor 1"):
                flag_scale(z, x, 1.0, flag)
        for flag in (0, 1, False, np.bool_(True)):
            z, x = flag_scale(z, x, 65504.0, flag).sync()
        params = [r["params"] for r in fake_gpu.launches[-4:]]
        assert [p[-1][0] for p in params] == [0, 1, 0, 1]
        assert all(float(np.frombuffer(p[-2][:2], np.float16)[0]) == 65504.0 for p in params)
    finally:
        flag_scale.clear_cache()


def test_a_device_graph_update_checks_the_layout_and_copies_the_memory(fake_gpu: FakeDriver) -> None:
    """On the GPU path (a device graph, captured on the fake driver) an update is
    checked like on the interpreter, and a fitting one is copied in before the replay."""
    xs, ys = np.random.default_rng(0).standard_normal((2, 300)).astype(np.float32)
    x, y = api.from_numpy(xs), api.from_numpy(ys)
    z = api.empty([300], dtype=f32).partition([128])
    _register(fake_gpu, saxpy(z, x, y, 2.0))
    z, x, y = saxpy(z, x, y, 2.0).sync()  # warm-up: loaded outside the capture
    graph = saxpy(z, x, y, 2.0).graph()
    assert graph.node_count == 1
    device = x.device
    assert [(i.label, str(i.layout)) for i in graph.inputs] == [
        ("parameter 'x' of launch of saxpy", f"f32[300] (strides [1]) on {device}"),
        ("parameter 'y' of launch of saxpy", f"f32[300] (strides [1]) on {device}")]
    with pytest.raises(cutile.GraphUpdateError, match=rf"input 0 \(parameter 'x' of launch of saxpy\) was captured as "
                       rf"f32\[300\] \(strides \[1\]\) on {device}; the tensor given for it is f16\[600\]"):
        graph.update(api.from_numpy(np.zeros(600, np.float16)))
    new_xs = np.random.default_rng(1).standard_normal(300).astype(np.float32)
    graph.update(api.from_numpy(new_xs))
    graph.launch().sync()
    np.testing.assert_array_equal(x.to_numpy(), new_xs)  # copied into the captured input
    graph.close()


def test_the_native_path_leaves_a_call_that_a_scheduled_launch_conflicts_with(native_gpu: FakeDriver) -> None:
    """The same objects as the armed binding while a scheduled launch of them runs:
    C makes no launch, the Python path refuses the call, naming both parameters."""
    z, x, y = _armed_saxpy(native_gpu)
    z, x, y = saxpy(z, x, y, 2.0).sync()  # (made in C)
    made = _stats()[0]
    pending = saxpy(z, x, y, 3.0).schedule()
    with pytest.raises(cutile.OwnershipError, match=r"written by the pending op launch of saxpy \(parameter 'z'\); "
                                                    r"launch of saxpy \(parameter 'z'\) may not write it"):
        saxpy(z, x, y, 4.0)
    assert _stats()[0] == made + 1  # only the scheduled launch was made in C
    z, x, y = pending.result()
    z, x, y = saxpy(z, x, y, 5.0).sync()
    assert _stats()[0] == made + 2
    assert [struct.unpack("<f", r["params"][-1])[0] for r in native_gpu.launches[-2:]] == [3.0, 5.0]


_PDL = ("PROGRAMMATIC_STREAM_SERIALIZATION",)


def test_dependent_launches_launch_a_kernel_compiled_to_wait(native_gpu: FakeDriver) -> None:
    """Inside `cutile.dependent_launches` each launch is a programmatic dependent one
    (the attribute, through cuLaunchKernelEx) of the kernel compiled to signal and wait
    at its start; the native path, which launches the plain kernel, stays out; after
    the block the plain kernel launches again, in C."""
    z, x, y = _armed_saxpy(native_gpu)
    native_gpu.launches.clear()
    before = _stats()
    with cutile.dependent_launches(), cutile.batch():
        for i in range(3):
            z, x, y = saxpy(z, x, y, float(i)).sync()
    assert _stats()[1] == before[1]  # none ran in C
    z, x, y = saxpy(z, x, y, 7.0).sync()
    assert _stats()[1] == before[1] + 1  # the armed binding again
    assert [r["attributes"] for r in native_gpu.launches] == [_PDL] * 3 + [()]
    assert [struct.unpack("<f", r["params"][-1])[0] for r in native_gpu.launches] == [0.0, 1.0, 2.0, 7.0]
    spec = saxpy._object_binding.plan.spec
    dependent = saxpy.compiled(spec, "sm_90", cutile_compiler.CompileOptions(dependent_launch=True))
    assert "gdc_wait_tko" in dependent.mlir and "gdc_wait_tko" not in saxpy.compiled(spec, "sm_90").mlir


def test_a_graph_captured_inside_dependent_launches_records_dependent_launches(fake_gpu: FakeDriver) -> None:
    x = api.from_numpy(np.zeros(256, np.float32))
    y = api.from_numpy(np.zeros(256, np.float32))
    z = api.empty([256], dtype=f32).partition([128])
    _register(fake_gpu, saxpy(z, x, y, 1.0))
    with cutile.dependent_launches():
        z, x, y = saxpy(z, x, y, 1.0).sync()  # loads the dependent kernel (a capture cannot)
        fake_gpu.launches.clear()
        with cutile.graph_scope("pdl") as scope:
            z, x, y = saxpy(z, x, y, 2.0).sync()
            z, x, y = saxpy(z, x, y, 3.0).sync()
    assert [r["attributes"] for r in fake_gpu.launches] == [_PDL, _PDL]
    scope.graph.close()


def test_scheduled_and_chained_launches_inside_dependent_launches_are_dependent(fake_gpu: FakeDriver) -> None:
    x = api.from_numpy(np.zeros(256, np.float32))
    y = api.from_numpy(np.zeros(256, np.float32))
    z = api.empty([256], dtype=f32).partition([128])
    w = api.empty([256], dtype=f32).partition([128])
    _register(fake_gpu, saxpy(z, x, y, 1.0))
    with cutile.dependent_launches():
        z, x, y = saxpy(z, x, y, 1.0).schedule().result()
        chained = saxpy(z, x, y, 2.0).then(lambda result: saxpy(w, result[1], result[2], 3.0))
        w, x, y = chained.sync()
    assert [r["attributes"] for r in fake_gpu.launches] == [_PDL] * 3
    assert [struct.unpack("<f", r["params"][-1])[0] for r in fake_gpu.launches] == [1.0, 2.0, 3.0]


def test_one_launch_made_dependent_by_its_options(fake_gpu: FakeDriver) -> None:
    x = api.from_numpy(np.zeros(256, np.float32))
    y = api.from_numpy(np.zeros(256, np.float32))
    z = api.empty([256], dtype=f32).partition([128])
    _register(fake_gpu, saxpy(z, x, y, 1.0))
    z, x, y = saxpy(z, x, y, 1.0).compile_options(dependent_launch=True).sync()
    z, x, y = saxpy(z, x, y, 1.0).sync()
    with cutile.dependent_launches(enabled=False):
        z, x, y = saxpy(z, x, y, 1.0).sync()
    assert [r["attributes"] for r in fake_gpu.launches] == [_PDL, (), ()]
    with pytest.raises(cutile.LaunchError, match=r"saxpy.compile_options: parameter 'dependent_launch' must be a "
                                                 r"bool, got 'yes'"):
        saxpy(z, x, y, 1.0).compile_options(dependent_launch="yes")  # type: ignore[arg-type]
