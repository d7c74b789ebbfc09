"""Devices: ``device=`` on every constructor, the ``cutile.device`` context, tensors
that record their device, launches that run on their tensors' device (its context,
its module, its streams) and refuse tensors of several devices. The GPU side runs on
a fake driver with two devices (each records the context current when a stream, a
module or an allocation is made, and at each launch: device N's is 0xC0 + N)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

import cuda_async
import cutile
from cuda_core.testing import FakeDriver
from cutile import _fill, _gpu, _native, api
from cutile.core import Mut, Tensor, f32, load_tile_like
from cutile_compiler import dtypes as dt

FakeGpu = Callable[..., contextlib.AbstractContextManager[FakeDriver]]


@cutile.entry
def saxpy(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]], y: Tensor[f32, [-1]], a: f32):
    z.store(a * load_tile_like(x, z) + load_tile_like(y, z))


CONSTRUCTORS: dict[str, Callable[..., Any]] = {
    "zeros": lambda **kw: api.zeros([7], **kw),
    "ones": lambda **kw: api.ones([7], **kw),
    "full": lambda **kw: api.full([7], 2.0, **kw),
    "empty": lambda **kw: api.empty([7], **kw),
    "rand": lambda **kw: api.rand([7], **kw),
    "randn": lambda **kw: api.randn([7], **kw),
    "arange": lambda **kw: api.arange(7, **kw),
    "linspace": lambda **kw: api.linspace(0.0, 1.0, 7, **kw),
    "eye": lambda **kw: api.eye(3, **kw),
    "from_numpy": lambda **kw: api.from_numpy(np.ones(7, np.float32), **kw),
    "ops.zeros": lambda **kw: api.ops.zeros([7], **kw).sync(),
    "ops.full": lambda **kw: api.ops.full([7], 3, dt.i32, **kw).sync(),
    "ops.rand": lambda **kw: api.ops.rand([7], **kw).sync(),
}


# -- the interpreter: one device, 0 ------------------------------------------------------

@pytest.mark.interpreter_only
@pytest.mark.parametrize("name", sorted(CONSTRUCTORS))
def test_the_interpreter_refuses_another_device_naming_the_parameter(name: str) -> None:
    with pytest.raises(cutile.ArgumentError, match=r"device=1, but the interpreter backend has one device, 0"):
        CONSTRUCTORS[name](device=1)
    for accepted in (0, "cuda:0", None):
        assert CONSTRUCTORS[name](device=accepted).device == "cpu"


@pytest.mark.interpreter_only
def test_a_device_is_an_ordinal_or_cuda_n() -> None:
    with pytest.raises(cutile.ArgumentTypeError, match=r"zeros: device must be an int ordinal, got float"):
        api.zeros([3], device=1.0)  # type: ignore[arg-type]
    with pytest.raises(cutile.ArgumentError, match=r"zeros: device must be a non-negative ordinal, got -1"):
        api.zeros([3], device=-1)
    with pytest.raises(cutile.ArgumentError, match=r"device must be an int ordinal or 'cuda:N', got 'gpu1'"):
        api.zeros([3], device="gpu1")
    with pytest.raises(cutile.ArgumentError, match=r"cutile.device: ordinal=1, but the interpreter"):
        with cutile.device(1):
            pass
    with cutile.device(0) as chosen:
        assert chosen == 0 and cutile.current_device() == 0
    assert api.zeros([3], device=np.int64(0)).device == "cpu"


@pytest.mark.interpreter_only
@pytest.mark.parametrize("dtype", [dt.f32, dt.f64, dt.i32, dt.f16])
def test_to_copies_on_the_interpreter(dtype: dt.DType) -> None:
    values = np.random.default_rng(5).standard_normal(37) * 10
    source = api.from_numpy(values, dtype)
    moved = source.to(0)
    assert moved is not source and moved._storage is not source._storage
    np.testing.assert_array_equal(moved.to_numpy(), source.to_numpy())


# -- two devices on the fake driver ------------------------------------------------------

def _contexts(fake: FakeDriver, tensor: Any) -> int:
    return fake.made_in["memory"][tensor._storage.base_address]


@pytest.fixture
def two_gpus(make_fake_gpu: FakeGpu) -> Iterator[FakeDriver]:
    with make_fake_gpu(FakeDriver(devices=2), kernels=(saxpy,)) as fake:
        yield fake


def _register(fake: FakeDriver, launch: cutile.Launch) -> None:
    compiled = launch.kernel.compiled(launch.plan().spec, "sm_90")
    fake.kernels[compiled.name] = _gpu.fake_param_layout(compiled.abi)
    launch.cancel()


def _register_fill(fake: FakeDriver, dtype: dt.DType, count: int) -> None:
    """Tells the fake driver the layout of the fill kernel `api.zeros` launches."""
    target = api.empty([count], dtype, device=0)
    made = _fill.kernel("fill", dtype)
    call = {"z": target.partition([_fill.tile_size("gpu", count)]), "value": 0}
    compiled = made.compiled(made.plan_for(call).spec, "sm_90")
    fake.kernels[compiled.name] = _gpu.fake_param_layout(compiled.abi)


@pytest.mark.interpreter_only
def test_tensors_are_made_on_the_device_asked(two_gpus: FakeDriver) -> None:
    values = np.random.default_rng(1).standard_normal(33).astype(np.float32)
    on_one = api.from_numpy(values, device=1)
    on_zero = api.from_numpy(values)
    assert on_one.device == "cuda:1" and on_zero.device == "cuda:0"
    assert _contexts(two_gpus, on_one) == 0xC1 and _contexts(two_gpus, on_zero) == 0xC0
    np.testing.assert_array_equal(on_one.to_numpy(), values)
    assert api.empty([5], device="cuda:1").device == "cuda:1"
    assert api.empty_like(on_one).device == "cuda:1"  # _like: the tensor's device
    assert api.empty_like(on_one, device=0).device == "cuda:0"
    with pytest.raises(cutile.ArgumentError, match=r"empty: device=2 is out of range: 2 GPU\(s\) visible"):
        api.empty([5], device=2)


@pytest.mark.interpreter_only
def test_zeros_fills_on_its_device(two_gpus: FakeDriver) -> None:
    _register_fill(two_gpus, dt.f32, 7)
    two_gpus.launches.clear()
    z = api.zeros([7], device=1)
    assert z.device == "cuda:1"
    (launch,) = two_gpus.launches
    assert launch["context"] == 0xC1 and two_gpus.made_in["stream"][launch["stream"]] == 0xC1


@pytest.mark.interpreter_only
def test_the_device_context_is_per_thread_and_nests(two_gpus: FakeDriver) -> None:
    seen: list[int] = []
    with cutile.device(1) as chosen:
        assert chosen == 1 and cutile.current_device() == 1
        assert api.empty([4]).device == "cuda:1"
        thread = threading.Thread(target=lambda: seen.append(cutile.current_device()))
        thread.start()
        thread.join()
        with cutile.device(0):
            assert api.empty([4]).device == "cuda:0"
        assert api.empty([4]).device == "cuda:1"
    assert seen == [0] and cutile.current_device() == 0
    assert api.empty([4]).device == "cuda:0"


def _saxpy_on(fake: FakeDriver, device: int, n: int = 300) -> tuple[Any, Any, Any]:
    rng = np.random.default_rng(device)
    x = api.from_numpy(rng.standard_normal(n).astype(np.float32), device=device)
    y = api.from_numpy(rng.standard_normal(n).astype(np.float32), device=device)
    z = api.empty([n], device=device).partition([128])
    return z, x, y


@pytest.mark.interpreter_only
@pytest.mark.parametrize("how", ["sync", "schedule", "inside device(1)"])
def test_a_launch_runs_on_its_tensors_device(two_gpus: FakeDriver, how: str) -> None:
    z, x, y = _saxpy_on(two_gpus, 1)
    _register(two_gpus, saxpy(z, x, y, 2.0))
    two_gpus.launches.clear()
    modules_before = set(two_gpus.made_in["module"])
    if how == "sync":
        saxpy(z, x, y, 2.0).sync()
    elif how == "schedule":
        saxpy(z, x, y, 2.0).schedule().result()
    else:
        with cutile.device(1):
            saxpy(z, x, y, 2.0).op.sync()
    (launch,) = two_gpus.launches
    assert launch["context"] == 0xC1
    assert two_gpus.made_in["stream"][launch["stream"]] == 0xC1
    loaded = [two_gpus.made_in["module"][m] for m in set(two_gpus.made_in["module"]) - modules_before]
    assert loaded == [0xC1]
    # ... and the same kernel on device 0's tensors: device 0's module and stream.
    z0, x0, y0 = _saxpy_on(two_gpus, 0)
    two_gpus.launches.clear()
    saxpy(z0, x0, y0, 2.0).sync()
    (launch,) = two_gpus.launches
    assert launch["context"] == 0xC0 and two_gpus.made_in["stream"][launch["stream"]] == 0xC0


@pytest.mark.interpreter_only
def test_tensors_of_two_devices_are_refused_before_any_work(two_gpus: FakeDriver) -> None:
    z, x, y = _saxpy_on(two_gpus, 1)
    _register(two_gpus, saxpy(z, x, y, 2.0))
    x0 = api.from_numpy(np.zeros(300, np.float32), device=0)
    two_gpus.launches.clear()
    with pytest.raises(cutile.LaunchError,
                       match=r"saxpy: tensor arguments live on different devices \('x' on cuda:0; 'z', 'y' on "
                             r"cuda:1\); a launch runs on one device"):
        saxpy(z, x0, y, 2.0)
    assert two_gpus.launches == []
    saxpy(z, x, y, 2.0).sync()  # nothing was held by the refused call
    assert len(two_gpus.launches) == 1


@pytest.mark.interpreter_only
def test_a_stream_of_another_device_is_refused(two_gpus: FakeDriver) -> None:
    z, x, y = _saxpy_on(two_gpus, 1)
    _register(two_gpus, saxpy(z, x, y, 2.0))
    two_gpus.launches.clear()
    with pytest.raises(cutile.LaunchError, match=r"saxpy: its tensors are on cuda:1 but it was given a stream of cuda:0"):
        with cuda_async.using_policy(cuda_async.SingleStream(device=0)):
            saxpy(z, x, y, 2.0).op.sync()
    assert two_gpus.launches == []


@pytest.mark.interpreter_only
@pytest.mark.parametrize("dtype", [dt.f32, dt.i32, dt.f16])
def test_to_moves_a_copy_to_another_device(two_gpus: FakeDriver, dtype: dt.DType) -> None:
    values = np.random.default_rng(3).standard_normal(41) * 8
    source = api.from_numpy(values, dtype, device=0)
    moved = source.to(1)
    assert moved.device == "cuda:1" and _contexts(two_gpus, moved) == 0xC1
    np.testing.assert_array_equal(moved.to_numpy(), source.to_numpy())
    strided = source[::3].to("cuda:1")  # not contiguous: through the host
    assert strided.device == "cuda:1"
    np.testing.assert_array_equal(strided.to_numpy(), source.to_numpy()[::3])


@pytest.mark.interpreter_only
def test_the_native_path_never_launches_off_device_zero(make_fake_gpu: FakeGpu) -> None:
    if _native.load() is None:
        pytest.skip("native code is turned off (CUDA_CORE_NATIVE=0)")
    with make_fake_gpu(FakeDriver(devices=2), kernels=(saxpy,)) as fake:
        z, x, y = _saxpy_on(fake, 0)
        _register(fake, saxpy(z, x, y, 1.0))
        z, x, y = saxpy(z, x, y, 1.0).sync()  # armed
        made, run = _native.module.stats()
        z, x, y = saxpy(z, x, y, 1.0).sync()
        assert _native.module.stats()[1] == run + 1  # device 0 alone: the native path
        z1, x1, y1 = _saxpy_on(fake, 1)  # a second device in use: the C path is off
        fake.launches.clear()
        for _ in range(3):
            z, x, y = saxpy(z, x, y, 1.0).sync()
            z1, x1, y1 = saxpy(z1, x1, y1, 1.0).sync()
        assert _native.module.stats()[1] == run + 1
        assert [launch["context"] for launch in fake.launches] == [0xC0, 0xC1] * 3
        assert all(fake.made_in["stream"][launch["stream"]] == launch["context"] for launch in fake.launches)


# -- the real GPU: device 0, named explicitly -------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("n", [1, 300, 4099])
def test_device_zero_named_explicitly_on_the_gpu(n: int) -> None:
    rng = np.random.default_rng(n)
    xs, ys = rng.standard_normal(n), rng.standard_normal(n)
    x = api.from_numpy(xs.astype(np.float32), device=0)
    y = api.from_numpy(ys.astype(np.float32), device="cuda:0")
    z = api.full([n], np.nan, device=0)  # poisoned
    assert x.device == y.device == z.device == "cuda:0"
    with cutile.device(0):
        z_part, _, _ = saxpy(z.partition([128]), x, y, 2.0).sync()
    z = z_part.unpartition()
    np.testing.assert_allclose(z.to_numpy().astype(np.float64), 2.0 * xs.astype(np.float32) + ys.astype(np.float32),
                               rtol=1e-6, atol=1e-6)
    moved = z.to(0)
    assert moved.device == "cuda:0" and moved._storage is not z._storage
    np.testing.assert_array_equal(moved.to_numpy(), z.to_numpy())
    assert api.zeros([n], device=0).to_numpy().tolist() == [0.0] * n
    with pytest.raises(cutile.ArgumentError, match=r"out of range"):
        from cuda_core import device_count

        api.empty([4], device=device_count())


@pytest.mark.interpreter_only
def test_a_batch_runs_on_the_device_of_its_block(two_gpus: FakeDriver) -> None:
    z, x, y = _saxpy_on(two_gpus, 1)
    _register(two_gpus, saxpy(z, x, y, 2.0))
    two_gpus.launches.clear()
    with cutile.device(1), cutile.batch():
        for i in range(4):
            z, x, y = saxpy(z, x, y, float(i)).sync()
    assert [launch["context"] for launch in two_gpus.launches] == [0xC1] * 4
    assert {two_gpus.made_in["stream"][launch["stream"]] for launch in two_gpus.launches} == {0xC1}
    # A batch of device 0 (the fixture's policy) cannot take device 1's tensors.
    with pytest.raises(cutile.LaunchError, match=r"its tensors are on cuda:1 but it was given a stream of cuda:0"):
        with cutile.batch():
            saxpy(z, x, y, 1.0).sync()


@pytest.mark.interpreter_only
def test_an_op_of_another_device_runs_under_that_devices_policy(two_gpus: FakeDriver) -> None:
    _register_fill(two_gpus, dt.f32, 9)
    two_gpus.launches.clear()
    with cutile.device(1):
        z = api.ops.zeros([9]).sync()
    assert z.device == "cuda:1"
    (launch,) = two_gpus.launches
    assert launch["context"] == 0xC1 and two_gpus.made_in["stream"][launch["stream"]] == 0xC1
    # Outside the block the job's stream is device 0's (the fixture's policy): refused.
    with pytest.raises(cutile.LaunchError, match=r"its tensors are on cuda:1 but it was given a stream of cuda:0"):
        api.ops.zeros([9], device=1).sync()
