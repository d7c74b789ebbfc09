"""cuda_core on a real GPU (marked ``gpu``; run on the H200).

The kernels are PTX written here, JIT-compiled by the driver for the device.
"""

from __future__ import annotations

import gc
import struct
import threading

import pytest

import cuda_core as cc

pytestmark = pytest.mark.gpu

from cuda_core.testing import PTX  # noqa: E402  (the shared sample kernels)


@pytest.fixture(scope="module")
def module() -> cc.Module:
    return cc.Module.load(PTX.encode())


def floats(values: list[float]) -> bytes:
    return struct.pack(f"<{len(values)}f", *values)


def test_device_properties() -> None:
    device = cc.Device(0)
    assert cc.device_count() >= 1
    assert device.sm_name.startswith("sm_") and device.compute_capability[0] >= 7
    assert device.sm_count > 0 and device.l2_cache_size > 0
    assert 0 < device.free_memory <= device.total_memory
    assert device.max_shared_memory_per_block_optin >= device.max_shared_memory_per_block > 0
    assert device.name


@pytest.mark.parametrize("nbytes", [1, 7, 4097, (1 << 20) + 3])
def test_round_trips_of_odd_sizes(nbytes: int) -> None:
    data = bytes((i * 31 + 7) % 256 for i in range(nbytes))
    stream = cc.Stream.create()
    with cc.DeviceBuffer.allocate(nbytes) as a, cc.DeviceBuffer.allocate(nbytes, stream=stream) as b:
        a.copy_from_host(data)
        b.copy_from(a, stream=stream)
        out = bytearray(nbytes)
        b.copy_to_host(out, stream=stream)
        stream.synchronize()
        assert out == data


def test_pinned_async_round_trip_and_memset() -> None:
    stream = cc.Stream.create()
    with cc.PinnedBuffer.allocate(4096) as host, cc.DeviceBuffer.allocate(4096, stream=stream) as dev:
        view = host.view()
        view[:] = bytes(range(256)) * 16
        dev.copy_from_host(host, stream=stream)
        dev.memset(0x5A5A5A5A, 64, offset=128, width=4, stream=stream)
        dev.copy_to_host(host, stream=stream)
        stream.synchronize()
        expected = bytearray(bytes(range(256)) * 16)
        expected[128:192] = b"\x5a" * 64
        assert bytes(view) == bytes(expected)
        with pytest.raises(BufferError):
            host.close()
        del view
        gc.collect()


def test_event_timing_and_query(module: cc.Module) -> None:
    stream = cc.Stream.create()
    sleep = module.get_function("sleep_then_store")
    with cc.DeviceBuffer.allocate(4) as out:
        start, end = cc.Event.create(), cc.Event.create()
        start.record(stream)
        cc.launch(sleep, cc.LaunchConfig(1, 1), out, cc.KernelArg("u32", 1), cc.KernelArg("u64", 20_000_000), stream=stream)
        end.record(stream)
        assert not end.query()  # 20 ms of sleep cannot be over yet
        end.synchronize()
        assert end.query() and stream.query()
        elapsed = start.elapsed_ms(end)
        assert 15.0 < elapsed < 2000.0
        with pytest.raises(ValueError, match="timing=True"):
            start.elapsed_ms(cc.Event.create(timing=False))


def test_cross_stream_wait_orders_work(module: cc.Module) -> None:
    producer, consumer = cc.Stream.create(), cc.Stream.create()
    sleep = module.get_function("sleep_then_store")
    with cc.DeviceBuffer.allocate(4) as flag, cc.DeviceBuffer.allocate(4) as copy:
        flag.memset(0, width=4)
        copy.memset(0, width=4)
        cc.launch(sleep, cc.LaunchConfig(1, 1), flag, cc.KernelArg("u32", 42), cc.KernelArg("u64", 30_000_000), stream=producer)
        consumer.wait(producer.record())
        copy.copy_from(flag, stream=consumer)
        consumer.synchronize()
        assert struct.unpack("<I", copy.to_bytes())[0] == 42


def test_stream_priority_and_foreign_handle() -> None:
    least, greatest = cc.Stream.priority_range()
    with cc.Stream.create(priority=greatest) as stream:
        assert stream.priority == greatest
        borrowed = cc.Stream.wrap(int(stream))
        borrowed.synchronize()
        borrowed.close()  # borrowed: the stream must still work
        stream.synchronize()


def test_ptx_kernel_with_pointer_float_and_int_arguments(module: cc.Module) -> None:
    axpy = module.get_function("axpy")
    assert len(axpy.param_layout) == 4
    assert axpy.num_registers > 0 and axpy.max_threads_per_block >= 256
    n = 1000
    xs = [float(i) for i in range(n)]
    ys = [1.0] * n
    with cc.DeviceBuffer.allocate(4 * n) as y, cc.DeviceBuffer.allocate(4 * n) as x:
        x.copy_from_host(floats(xs))
        y.copy_from_host(floats(ys))
        cc.launch(axpy, cc.LaunchConfig(grid=(n + 255) // 256, block=256), y, x, 0.5, n)
        cc.Device(0).synchronize()
        got = struct.unpack(f"<{n}f", y.to_bytes())
        assert got == tuple(0.5 * xi + 1.0 for xi in xs)
    store = module.get_function("store_i64")
    with cc.DeviceBuffer.allocate(8) as out:
        cc.launch(store, cc.LaunchConfig(1, 1), out, -(2**40) - 3)
        assert struct.unpack("<q", out.to_bytes())[0] == -(2**40) - 3


def test_prepared_launch_repeated(module: cc.Module) -> None:
    axpy = module.get_function("axpy")
    n = 4096
    stream = cc.Stream.create()
    prepared = cc.PreparedLaunch(axpy, cc.LaunchConfig(n // 256, 256), ["ptr", "ptr", "f32", "u32"])
    with cc.DeviceBuffer.allocate(4 * n) as y, cc.DeviceBuffer.allocate(4 * n) as x:
        x.copy_from_host(floats([1.0] * n))
        y.memset(0, width=4)
        for _ in range(10):
            prepared.launch(stream, y, x, 2.0, n)
        prepared[2] = 0.25
        prepared.launch(stream)
        stream.synchronize()
        assert set(struct.unpack(f"<{n}f", y.to_bytes())) == {20.25}


def test_dynamic_shared_memory_limit(module: cc.Module) -> None:
    function = module.get_function("axpy")
    device = cc.Device(0)
    function.max_dynamic_shared_memory = device.max_shared_memory_per_block_optin - function.static_shared_memory
    assert function.max_dynamic_shared_memory == device.max_shared_memory_per_block_optin - function.static_shared_memory
    with pytest.raises(ValueError, match="the device allows at most"):
        function.max_dynamic_shared_memory = 1 << 30


def test_cluster_and_cooperative_launch(module: cc.Module) -> None:
    if cc.Device(0).compute_capability < (9, 0):
        pytest.skip("thread-block clusters need compute capability 9.0")
    function = module.get_function("cluster_size")
    with cc.DeviceBuffer.allocate(4 * 8) as out:
        cc.launch(function, cc.LaunchConfig(8, 32, cluster=2), out)
        assert struct.unpack("<8I", out.to_bytes()) == (2,) * 8
        cc.launch(function, cc.LaunchConfig(8, 32, cooperative=True), out)
        assert struct.unpack("<8I", out.to_bytes()) == (1,) * 8


def test_graph_capture_replay_and_update(module: cc.Module) -> None:
    axpy = module.get_function("axpy")
    n = 1024
    stream = cc.Stream.create()
    with cc.DeviceBuffer.allocate(4 * n) as y, cc.DeviceBuffer.allocate(4 * n) as x, cc.DeviceBuffer.allocate(4 * n) as y2:
        x.copy_from_host(floats([1.0] * n))
        y.memset(0, width=4)
        y2.memset(0, width=4)
        prepared = cc.PreparedLaunch(axpy, cc.LaunchConfig(n // 256, 256), ["ptr", "ptr", "f32", "u32"])
        with cc.capture(stream) as recorded:
            assert cc.is_capturing(stream)
            for _ in range(3):
                prepared.launch(stream, y, x, 1.0, n)
        assert recorded.graph is not None and recorded.graph.node_count == 3
        executable = recorded.graph.instantiate(upload_stream=stream)
        for _ in range(4):
            executable.launch(stream)
        stream.synchronize()
        assert set(struct.unpack(f"<{n}f", y.to_bytes())) == {12.0}
        # Same topology, new destination: update the executable graph in place.
        with cc.capture(stream) as again:
            for _ in range(3):
                prepared.launch(stream, y2, x, 2.0, n)
        assert again.graph is not None
        executable.update(again.graph)
        executable.launch(stream)
        stream.synchronize()
        assert set(struct.unpack(f"<{n}f", y2.to_bytes())) == {6.0}
        # Different topology: refused with a clear error.
        with cc.capture(stream) as other:
            prepared.launch(stream, y2, x, 2.0, n)
        assert other.graph is not None
        with pytest.raises(cc.GraphUpdateError, match="cannot update"):
            executable.update(other.graph)


def test_capture_of_the_legacy_stream_is_refused() -> None:
    with pytest.raises(ValueError, match="legacy default stream cannot be captured"):
        cc.begin_capture(cc.Stream.default())


def test_pool_allocation_reuses_memory() -> None:
    stream = cc.Stream.create()
    pool = cc.MemoryPool.default()
    first = cc.DeviceBuffer.allocate(1 << 20, stream=stream)
    address = first.ptr
    first.close()
    second = cc.DeviceBuffer.allocate(1 << 20, stream=stream)
    assert second.ptr == address  # stream-ordered reuse of the cached block
    assert pool.used_bytes >= 1 << 20 and pool.reserved_bytes >= pool.used_bytes
    second.close()
    stream.synchronize()
    own = cc.MemoryPool.create(release_threshold=0)
    buffer = own.allocate(4096, stream)
    buffer.memset(3, stream=stream)
    assert own.used_bytes >= 4096
    buffer.close()
    stream.synchronize()
    own.trim()
    assert own.used_bytes == 0
    own.close()


def test_out_of_memory_raises_cleanly_and_process_stays_usable() -> None:
    device = cc.Device(0)
    with pytest.raises(cc.CudaOutOfMemoryError, match="cuMemAlloc"):
        cc.DeviceBuffer.allocate(device.total_memory * 4)
    with pytest.raises(cc.CudaOutOfMemoryError):
        cc.DeviceBuffer.allocate(device.total_memory * 4, stream=cc.Stream.create()).ptr
    with cc.DeviceBuffer.allocate(1 << 20) as ok:
        ok.memset(1)
        assert ok.to_bytes()[:4] == b"\x01" * 4


def test_contexts_work_from_other_threads(module: cc.Module) -> None:
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            with cc.DeviceBuffer.allocate(64) as buffer:
                buffer.memset(7)
                assert buffer.to_bytes() == b"\x07" * 64
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []


def test_pytorch_stream_and_memory_interop(module: cc.Module) -> None:
    torch = pytest.importorskip("torch", reason="PyTorch interop is checked where PyTorch is installed")
    n = 4096
    x = torch.arange(n, dtype=torch.float32, device="cuda")
    y = torch.ones(n, dtype=torch.float32, device="cuda")
    stream = cc.Stream.wrap(torch.cuda.current_stream())
    assert not stream.owned and int(stream) == torch.cuda.current_stream().cuda_stream
    y_view = cc.DeviceView.from_pointer(y.data_ptr(), y.numel() * 4, owner=y)
    x_view = cc.DeviceView.from_pointer(x.data_ptr(), x.numel() * 4, owner=x)
    cc.launch(module.get_function("axpy"), cc.LaunchConfig(n // 256, 256), y_view, x_view, 2.0, n, stream=stream)
    torch.cuda.current_stream().synchronize()
    assert torch.equal(y, 2.0 * x + 1.0)


def test_a_stream_waits_for_a_value_the_host_writes() -> None:
    import time

    stream = cc.Stream.create()
    gate = cc.PinnedBuffer.allocate(4, mapped=True)
    word = gate.view().cast("I")
    word[0] = 0
    stream.wait_value32(gate.device_ptr, 1)
    done = stream.record()
    time.sleep(0.05)
    assert not done.query()  # held at the gate
    word[0] = 1
    done.synchronize()
    assert stream.query()
    del word
    stream.synchronize()
