"""The GPU backend's host side, on a fake driver (no GPU needed): what each launch
passes to cuLaunchKernel (pointers with view offsets, dims, strides, scalars, the
grid), the reuse of a call's packed parameters, and batches. The kernels compile
with tileiras for sm_90; the fake driver records launches instead of running them.
"""

from __future__ import annotations

import contextlib
import struct
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

import cuda_async
import cutile
from cuda_core.testing import FakeDriver, use_fake_driver
from cutile import _backend, _gpu, api
from cutile.core import Mut, Tensor, bid, f16, f32, i64, load_tile_like

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


def _register(fake: FakeDriver, launch: cutile.Launch) -> Any:
    """Compiles ``launch`` for the fake sm_90 device and tells the fake driver the
    kernel's parameter layout (as the cubin would)."""
    compiled = launch.kernel.compiled(launch.plan().spec, "sm_90")
    fake.kernels[compiled.name] = _gpu.fake_param_layout(compiled.abi)
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


@pytest.fixture
def make_fake_gpu() -> FakeGpu:
    """A factory of fake GPUs: ``with make_fake_gpu(driver, policy) as fake:`` runs
    cutile's GPU backend on ``driver`` (a new `FakeDriver` by default) under the
    scheduling ``policy`` (one stream by default), and puts everything back after."""

    @contextlib.contextmanager
    def fake_gpu(driver: FakeDriver | None = None,
                 policy: cuda_async.SchedulingPolicy | None = None) -> Iterator[FakeDriver]:
        saved_streams = dict(_gpu._streams)
        with use_fake_driver(driver) as fake:
            _gpu._streams.clear()
            _backend.reset_for_tests("gpu")
            try:
                with cuda_async.using_policy(policy or cuda_async.SingleStream()):
                    yield fake
            finally:
                for kernel in (saxpy, scale2d, no_mut):
                    kernel.clear_cache()  # its modules were loaded into the fake
                _gpu._streams.clear()
                _gpu._streams.update(saved_streams)
                _backend.reset_for_tests("interpreter")

    return fake_gpu


@pytest.fixture
def fake_gpu(make_fake_gpu: FakeGpu) -> Iterator[FakeDriver]:
    with make_fake_gpu() as fake:
        yield fake


def test_a_launch_passes_pointers_dims_and_scalars(fake_gpu: FakeDriver) -> None:
    x = api.from_numpy(np.zeros(1000, np.float32))
    y = api.from_numpy(np.zeros(1000, np.float32))
    whole = api.empty([1024], dtype=f32)
    z = whole[24:].partition([128])  # a view 24 elements into its memory
    launch = saxpy(z, x, y, 2.5)
    compiled = _register(fake_gpu, launch)
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
    compiled = _register(fake_gpu, saxpy(z, x, y, 1.0))  # (this launch is dropped unrun)
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
    compiled = _register(fake_gpu, launch)
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
    assert len(no_mut._loaded) == 1


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
        with pytest.raises(cutile.OwnershipError, match="written by the pending op 'launch of saxpy'"):
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


def test_threads_launching_one_kernel_never_mix_their_arguments(fake_gpu: FakeDriver) -> None:
    import sys
    import threading

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

    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible
    try:
        threads = [threading.Thread(target=worker, args=(i,)) for i in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(previous)
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
    with make_fake_gpu(log, cuda_async.RoundRobin(2)):
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
