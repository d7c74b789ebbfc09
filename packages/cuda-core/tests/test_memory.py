"""Allocation, copies, memset and lifetimes, against the fake driver."""

from __future__ import annotations

import ctypes
import gc
import sys
from typing import Any

import pytest

import cuda_core as cc


def test_buffer_freed_exactly_once_by_close_context_manager_or_gc(fake_driver: Any) -> None:
    buffer = cc.DeviceBuffer.allocate(100)
    buffer.close()
    buffer.close()
    assert fake_driver.calls["cuMemFree"] == 1
    with pytest.raises(ValueError, match="has been freed"):
        _ = buffer.ptr
    with cc.DeviceBuffer.allocate(8):
        pass
    assert fake_driver.calls["cuMemFree"] == 2
    cc.DeviceBuffer.allocate(8)  # dropped at once
    gc.collect()
    assert fake_driver.calls["cuMemFree"] == 3
    assert fake_driver.memory == {}


def test_views_keep_their_buffer_alive(fake_driver: Any) -> None:
    view = cc.DeviceBuffer.allocate(64).view(16, 32)
    gc.collect()
    assert fake_driver.calls["cuMemFree"] == 0
    assert view.nbytes == 32
    del view
    gc.collect()
    assert fake_driver.calls["cuMemFree"] == 1


def test_pool_allocation_is_stream_ordered_and_freed_on_its_stream(fake_driver: Any) -> None:
    stream = cc.Stream.create()
    buffer = cc.DeviceBuffer.allocate(256, stream=stream)
    assert buffer.stream is stream
    assert fake_driver.calls["cuMemAllocFromPoolAsync"] == 1
    # The default pool keeps freed memory (release threshold set once).
    assert fake_driver.calls["cuMemPoolSetAttribute"] == 1
    buffer.close()
    assert fake_driver.calls["cuMemFreeAsync"] == 1
    with pytest.raises(ValueError, match="stream-ordered; pass stream="):
        cc.DeviceBuffer.allocate(8, pool=cc.MemoryPool.default())


def test_a_buffer_keeps_its_allocating_stream_alive(fake_driver: Any) -> None:
    buffer = cc.DeviceBuffer.allocate(256, stream=cc.Stream.create())
    gc.collect()
    assert len(fake_driver.live_handles["stream"]) == 1
    del buffer
    gc.collect()
    assert fake_driver.live_handles["stream"] == set()


@pytest.mark.parametrize("nbytes", [1, 3, 1000, 4097])
def test_host_device_round_trip_of_odd_sizes(fake_driver: Any, nbytes: int) -> None:
    data = bytes((i * 7 + 3) % 251 for i in range(nbytes))
    with cc.DeviceBuffer.allocate(nbytes + 8) as buffer:
        buffer.memset(0xAB)
        buffer.copy_from_host(data, offset=4)
        out = bytearray(nbytes + 8)
        buffer.copy_to_host(out)
        assert out[:4] == b"\xab" * 4 and out[4 : 4 + nbytes] == data and out[4 + nbytes :] == b"\xab" * 4


def test_device_to_device_copy_and_memset_widths(fake_driver: Any) -> None:
    with cc.DeviceBuffer.allocate(16) as a, cc.DeviceBuffer.allocate(16) as b:
        a.memset(0x01020304, width=4)
        b.copy_from(a, 8, dst_offset=8)
        assert b.to_bytes()[8:] == bytes.fromhex("0403020104030201")
        a.memset(0xBEEF, offset=2, nbytes=4, width=2)
        assert a.to_bytes()[:8] == bytes.fromhex("0403efbeefbe0201")
        a.memset(0x7F, offset=15, nbytes=1)
        assert a.to_bytes()[15] == 0x7F


@pytest.mark.parametrize(
    ("action", "message"),
    [
        (lambda b: b.copy_from_host(bytes(17)), r"range \[0, 17\) is outside the 16-byte memory"),
        (lambda b: b.copy_to_host(bytearray(8), offset=12), r"range \[12, 20\)"),
        (lambda b: b.copy_to_host(b"readonly!"), "read-only"),
        (lambda b: b.copy_from_host(12), "expected a host buffer"),
        (lambda b: b.view(-1), r"range \[-1"),
        (lambda b: b.memset(256), "does not fit in 1 byte"),
        (lambda b: b.memset(0, 6, width=4), "multiples of width=4"),
        (lambda b: b.memset(0, width=3), "width must be 1, 2 or 4"),
        (lambda b: b.copy_from(b"x"), "expected device memory"),
    ],
)
def test_bad_copies_are_refused_before_the_driver(fake_driver: Any, action: Any, message: str) -> None:
    with cc.DeviceBuffer.allocate(16) as buffer:
        def driver_writes() -> int:
            return sum(v for k, v in fake_driver.calls.items() if k.startswith(("cuMemcpy", "cuMemset")))

        before = driver_writes()
        with pytest.raises((ValueError, TypeError), match=message):
            action(buffer)
        assert driver_writes() == before


def test_allocation_sizes_are_checked(fake_driver: Any) -> None:
    for bad in (0, -5, 1.5):
        with pytest.raises(ValueError, match="nbytes must be a positive int"):
            cc.DeviceBuffer.allocate(bad)  # type: ignore[arg-type]


def test_out_of_memory_leaves_the_process_usable(fake_driver: Any) -> None:
    with pytest.raises(cc.CudaOutOfMemoryError):
        cc.DeviceBuffer.allocate(1 << 41)
    with cc.DeviceBuffer.allocate(32) as buffer:
        assert buffer.nbytes == 32


def test_foreign_pointer_view_keeps_its_owner(fake_driver: Any) -> None:
    class Owner:
        pass

    owner = Owner()
    view = cc.DeviceView.from_pointer(0x1234, 64, owner=owner)
    assert view.owner is owner and view.ptr == 0x1234 and int(view) == 0x1234
    with pytest.raises(ValueError, match="non-negative"):
        cc.DeviceView.from_pointer(-1, 4)


def test_stream_ownership(fake_driver: Any) -> None:
    owned = cc.Stream.create(priority=-2)
    borrowed = cc.Stream.wrap(0xBEEF)
    assert borrowed.owned is False and int(borrowed) == 0xBEEF
    borrowed.close()
    owned.close()
    owned.close()
    assert fake_driver.calls["cuStreamDestroy"] == 1
    with pytest.raises(ValueError, match="priority must lie in"):
        cc.Stream.create(priority=3)

    class TorchLikeStream:
        cuda_stream = 0xF00D

    class Stream:  # CuPy's: the handle is .ptr
        ptr = 0xCAFE

    assert int(cc.Stream.wrap(TorchLikeStream())) == 0xF00D
    assert int(cc.Stream.wrap(Stream())) == 0xCAFE
    assert int(cc.Stream.wrap(borrowed)) == 0xBEEF
    with pytest.raises(TypeError, match="cannot take a CUDA stream handle"):
        cc.Stream.wrap("stream")
    with pytest.raises(TypeError, match="cannot take a CUDA stream handle from DeviceBuffer"):
        cc.Stream.wrap(cc.DeviceBuffer.allocate(16))  # its .ptr is an address, not a stream


def test_numpy_arrays_of_non_buffer_dtypes_copy_through_the_array_interface(fake_driver: Any) -> None:
    class ArrayLike:  # what numpy exposes for ml_dtypes' bfloat16 arrays
        def __init__(self, data: bytearray) -> None:
            self._data = data
            self._buffer = (ctypes.c_char * len(data)).from_buffer(data)
            self.__array_interface__ = {
                "data": (ctypes.addressof(self._buffer), False), "shape": (len(data) // 2,),
                "strides": None, "typestr": "<V2", "version": 3,
            }

    source = ArrayLike(bytearray(range(16)))
    with cc.DeviceBuffer.allocate(16) as buffer:
        buffer.copy_from_host(source)
        target = ArrayLike(bytearray(16))
        buffer.copy_to_host(target)
        assert bytes(target._data) == bytes(range(16))


def test_memory_and_modules_dropped_during_a_capture_are_released_after_it(fake_driver: Any) -> None:
    import gc

    from cuda_core.testing import PTX

    stream = cc.Stream.create()
    buffer = cc.DeviceBuffer.allocate(256, stream=stream)
    module = cc.Module.load(PTX.encode())
    frees, unloads = fake_driver.calls["cuMemFreeAsync"], fake_driver.calls["cuModuleUnload"]
    with cc.capture(stream):
        # A capture forbids these calls on its thread; the garbage collector may
        # drop objects anywhere, so their releases wait for the end of the capture.
        del buffer, module
        gc.collect()
        assert fake_driver.calls["cuMemFreeAsync"] == frees and fake_driver.calls["cuModuleUnload"] == unloads
    assert fake_driver.calls["cuMemFreeAsync"] == frees + 1 and fake_driver.calls["cuModuleUnload"] == unloads + 1


def test_a_buffer_outliving_its_fake_driver_is_freed_through_it_without_initializing_another() -> None:
    """Freed after the fake driver was swapped out (on a machine whose real driver
    cannot initialize, as on CI): the finalizer frees through the fake and raises
    nothing (it asked the real driver to initialize and raised CudaNoDeviceError)."""
    from cuda_core.testing import use_fake_driver

    unraisable: list[Any] = []
    old_hook = sys.unraisablehook
    sys.unraisablehook = unraisable.append
    try:
        with use_fake_driver() as fake:
            buffer = cc.DeviceBuffer.allocate(64)
        del buffer
        gc.collect()
    finally:
        sys.unraisablehook = old_hook
    assert unraisable == [] and fake.calls["cuMemFree"] == 1 and fake.memory == {}


def test_a_mapped_pinned_word_gates_a_stream(fake_driver: Any) -> None:
    stream = cc.Stream.create()
    gate = cc.PinnedBuffer.allocate(4, mapped=True)
    word = gate.view().cast("I")
    word[0] = 3
    stream.wait_value32(gate.device_ptr, 4)
    assert gate.device_ptr == gate.ptr  # the fake maps host memory at its own address
    assert fake_driver.log[-1] == ("wait_value", int(stream.handle), (gate.ptr, 4))
    assert bytes(gate.view()) == (3).to_bytes(4, "little")
    del word
    gate.close()
    with pytest.raises(ValueError, match="freed"):
        gate.device_ptr


def test_a_buffer_freed_while_releases_are_deferred_is_freed_after(fake_driver: Any) -> None:
    buffer = cc.DeviceBuffer.allocate(64)
    ptr = buffer.ptr
    with cc.releases_deferred():
        del buffer
        gc.collect()
        assert ptr in fake_driver.memory  # (a synchronous free here would wait for held work)
    assert ptr not in fake_driver.memory
