"""Device memory, memory pools, pinned host memory, copies and memset.

Owning objects (`DeviceBuffer`, `PinnedBuffer`) free their memory exactly once:
on `close()`, at the end of a ``with`` block, or from a finalizer; never after
the driver has been shut down at interpreter exit. Non-owning `DeviceView`s
describe memory someone else owns (a slice of a buffer, a PyTorch tensor's
storage) and keep that owner alive.
"""

from __future__ import annotations

import ctypes
import weakref
from typing import Any

from cuda_core import _driver
from cuda_core._device import Device, resolve_device
from cuda_core._stream import Stream


def _host_span(obj: Any, *, writable: bool, what: str) -> tuple[int | Any, int]:
    """(address or buffer object to hand to the driver, byte size) of a host buffer."""
    if isinstance(obj, PinnedBuffer):
        if obj.closed:
            raise ValueError(f"{what}: the PinnedBuffer has been freed")
        return obj.ptr, obj.nbytes
    interface = getattr(obj, "__array_interface__", None)
    if isinstance(interface, dict) and interface.get("strides") is None:
        # numpy arrays of dtypes the buffer protocol cannot describe (ml_dtypes' bfloat16, fp8)
        address, readonly = interface["data"]
        if writable and readonly:
            raise ValueError(f"{what}: the host array is read-only")
        itemsize = int("".join(c for c in interface["typestr"] if c.isdigit()) or 0)
        count = 1
        for extent in interface["shape"]:
            count *= int(extent)
        return int(address), count * itemsize
    try:
        view = memoryview(obj)
    except TypeError:
        raise TypeError(
            f"{what}: expected a host buffer (bytes, bytearray, memoryview, numpy array, "
            f"PinnedBuffer), got {type(obj).__name__}"
        ) from None
    if not view.contiguous:
        raise ValueError(f"{what}: the host buffer must be contiguous")
    if view.readonly:
        if writable:
            raise ValueError(f"{what}: the host buffer is read-only")
        return obj, view.nbytes  # cuda-bindings takes buffer-protocol objects directly
    nbytes = view.nbytes
    if nbytes == 0:
        return 0, 0
    array = (ctypes.c_char * nbytes).from_buffer(view.cast("B"))
    return ctypes.addressof(array), nbytes


class DeviceMemory:
    """A range of device memory: `ptr`, `nbytes`, `device`.

    Base of `DeviceBuffer` (owning) and `DeviceView` (borrowed); both copy and
    fill the same way, always bounds-checked.
    """

    __slots__ = ("_ptr", "nbytes", "device", "__weakref__")

    _ptr: int
    nbytes: int
    device: Device

    @property
    def ptr(self) -> int:
        """The device address (raises once the memory has been freed)."""
        return self._ptr

    def __int__(self) -> int:
        return self.ptr

    def view(self, offset: int = 0, nbytes: int | None = None) -> DeviceView:
        """A borrowed sub-range ``[offset, offset + nbytes)`` that keeps this memory alive."""
        if nbytes is None:
            nbytes = self.nbytes - offset
        _check_range(self.nbytes, offset, nbytes, "view")
        return DeviceView(self.ptr + offset, nbytes, self.device, owner=self)

    # -- copies ----------------------------------------------------------------
    def copy_from_host(self, src: Any, *, offset: int = 0, stream: Stream | None = None) -> None:
        """Copies all of host buffer ``src`` to ``[offset, offset + len(src))``.

        With ``stream`` the copy is queued on it (the host buffer must stay
        alive and unchanged until it runs; pinned buffers make it truly async);
        without, it completes before returning.
        """
        address, nbytes = _host_span(src, writable=False, what="copy_from_host(src)")
        _check_range(self.nbytes, offset, nbytes, "copy_from_host")
        if nbytes == 0:
            return
        self.device.activate()
        if stream is None:
            _driver.call("cuMemcpyHtoD", self.ptr + offset, address, nbytes)
        else:
            _driver.call("cuMemcpyHtoDAsync", self.ptr + offset, address, nbytes, stream.handle)

    def copy_to_host(self, dst: Any, *, offset: int = 0, stream: Stream | None = None) -> None:
        """Fills writable host buffer ``dst`` from ``[offset, offset + len(dst))``."""
        address, nbytes = _host_span(dst, writable=True, what="copy_to_host(dst)")
        _check_range(self.nbytes, offset, nbytes, "copy_to_host")
        if nbytes == 0:
            return
        self.device.activate()
        if stream is None:
            _driver.call("cuMemcpyDtoH", address, self.ptr + offset, nbytes)
        else:
            _driver.call("cuMemcpyDtoHAsync", address, self.ptr + offset, nbytes, stream.handle)

    def to_bytes(self) -> bytes:
        """The whole range copied to a new bytes object (synchronous)."""
        out = bytearray(self.nbytes)
        self.copy_to_host(out)
        return bytes(out)

    def copy_from(
        self,
        src: DeviceMemory,
        nbytes: int | None = None,
        *,
        dst_offset: int = 0,
        src_offset: int = 0,
        stream: Stream | None = None,
    ) -> None:
        """Device-to-device copy of ``nbytes`` (default: all of ``src``)."""
        if not isinstance(src, DeviceMemory):
            raise TypeError(f"copy_from(src): expected device memory, got {type(src).__name__}")
        if nbytes is None:
            nbytes = src.nbytes - src_offset
        _check_range(src.nbytes, src_offset, nbytes, "copy_from (source)")
        _check_range(self.nbytes, dst_offset, nbytes, "copy_from (destination)")
        if nbytes == 0:
            return
        self.device.activate()
        if stream is None:
            _driver.call("cuMemcpyDtoD", self.ptr + dst_offset, src.ptr + src_offset, nbytes)
        else:
            _driver.call(
                "cuMemcpyDtoDAsync", self.ptr + dst_offset, src.ptr + src_offset, nbytes, stream.handle
            )

    def memset(
        self,
        value: int,
        nbytes: int | None = None,
        *,
        offset: int = 0,
        width: int = 1,
        stream: Stream | None = None,
    ) -> None:
        """Sets ``nbytes`` from ``offset`` to a repeated ``width``-byte ``value``.

        ``width`` is 1, 2 or 4; ``offset`` and ``nbytes`` must be multiples of it.
        """
        if width not in (1, 2, 4):
            raise ValueError(f"memset: width must be 1, 2 or 4 bytes, got {width}")
        if nbytes is None:
            nbytes = self.nbytes - offset
        _check_range(self.nbytes, offset, nbytes, "memset")
        if offset % width or nbytes % width or (self.ptr + offset) % width:
            raise ValueError(f"memset: offset, nbytes and address must be multiples of width={width}")
        if not 0 <= value < (1 << (8 * width)):
            raise ValueError(f"memset: value {value} does not fit in {width} byte(s)")
        if nbytes == 0:
            return
        self.device.activate()
        suffix = {1: "D8", 2: "D16", 4: "D32"}[width]
        count = nbytes // width
        if stream is None:
            _driver.call(f"cuMemset{suffix}", self.ptr + offset, value, count)
        else:
            _driver.call(f"cuMemset{suffix}Async", self.ptr + offset, value, count, stream.handle)


def _check_range(size: int, offset: int, nbytes: int, what: str) -> None:
    if offset < 0 or nbytes < 0 or offset + nbytes > size:
        raise ValueError(
            f"{what}: range [{offset}, {offset + nbytes}) is outside the {size}-byte memory"
        )


def _free_device(api: Any, ptr: int, stream: Stream | None, device: Device) -> None:
    # The finalizer holds the allocating stream, so it outlives the buffer
    # unless closed explicitly.
    if _driver.shutting_down or _driver.defer_while_capturing(_free_device, api, ptr, stream, device):
        return
    if api is _driver.in_use():  # never initializes: a finalizer must not raise
        device.activate()
    # else: allocated under a driver since swapped out (tests): freed through that
    # driver, without making a context current through the one in use now.
    if stream is None:
        api.cuMemFree(ptr)
    elif not stream.closed:
        api.cuMemFreeAsync(ptr, stream.handle)
    else:  # the allocating stream is gone: free in order with the whole device
        api.cuMemFreeAsync(ptr, 0)


class DeviceBuffer(DeviceMemory):
    """Device memory owned by this object.

    ``DeviceBuffer.allocate(n)`` uses ``cuMemAlloc``; with a ``stream`` it is a
    stream-ordered allocation from the device's (or the given) `MemoryPool`,
    freed in order on that stream. Use as a context manager to free at the end
    of a block; otherwise it is freed when garbage-collected.
    """

    __slots__ = ("stream", "_finalizer")

    stream: Stream | None

    def __init__(self, ptr: int, nbytes: int, device: Device, stream: Stream | None) -> None:
        self._ptr = ptr
        self.nbytes = nbytes
        self.device = device
        self.stream = stream
        self._finalizer = weakref.finalize(self, _free_device, _driver.api(), ptr, stream, device)

    @classmethod
    def allocate(
        cls,
        nbytes: int,
        *,
        device: Device | int | None = None,
        stream: Stream | None = None,
        pool: MemoryPool | None = None,
    ) -> DeviceBuffer:
        """Allocates ``nbytes`` (> 0) of device memory.

        Args:
            device: the device (default: the stream's, else the current one).
            stream: allocate stream-ordered on this stream (from ``pool`` or the
                device's default pool); the memory may be used by work queued
                on the stream right away, and by other streams after an event.
            pool: a `MemoryPool` (requires ``stream``).
        """
        if not isinstance(nbytes, int) or nbytes <= 0:
            raise ValueError(f"DeviceBuffer.allocate: nbytes must be a positive int, got {nbytes!r}")
        if device is None and stream is not None:
            device = stream.device
        dev = resolve_device(device)
        if stream is None:
            if pool is not None:
                raise ValueError("DeviceBuffer.allocate: a pool allocation is stream-ordered; pass stream=")
            ptr = int(_driver.call("cuMemAlloc", nbytes))
            return cls(ptr, nbytes, dev, None)
        if pool is None:
            pool = MemoryPool.default(dev)
        ptr = int(_driver.call("cuMemAllocFromPoolAsync", nbytes, pool.handle, stream.handle))
        return cls(ptr, nbytes, dev, stream)

    @property
    def ptr(self) -> int:
        if not self._finalizer.alive:
            raise ValueError("the DeviceBuffer has been freed")
        return self._ptr

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    def close(self) -> None:
        """Frees the memory now (stream-ordered if it was allocated so); idempotent."""
        self._finalizer()

    def __enter__(self) -> DeviceBuffer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "freed" if self.closed else f"0x{self._ptr:x}"
        return f"<DeviceBuffer {state}, {self.nbytes} bytes on device {self.device.ordinal}>"


class DeviceView(DeviceMemory):
    """Device memory this object does not own: a slice, or a foreign pointer.

    ``owner`` (any object) is kept alive as long as the view is.
    """

    __slots__ = ("owner",)

    def __init__(self, ptr: int, nbytes: int, device: Device, *, owner: Any = None) -> None:
        if ptr < 0 or nbytes < 0:
            raise ValueError(f"DeviceView: ptr and nbytes must be non-negative, got {ptr}, {nbytes}")
        self._ptr = ptr
        self.nbytes = nbytes
        self.device = device
        self.owner = owner

    @classmethod
    def from_pointer(
        cls, ptr: int, nbytes: int, device: Device | int | None = None, *, owner: Any = None
    ) -> DeviceView:
        """Borrows ``nbytes`` at device address ``ptr`` (e.g. a PyTorch tensor's
        ``data_ptr()``, with the tensor as ``owner``)."""
        return cls(int(ptr), int(nbytes), resolve_device(device), owner=owner)

    def __repr__(self) -> str:
        return f"<DeviceView 0x{self._ptr:x}, {self.nbytes} bytes on device {self.device.ordinal}>"


class MemoryPool:
    """A stream-ordered memory pool (``cuMemPool``).

    `MemoryPool.default(device)` is the device's default pool, configured like
    PyTorch's caching allocator to keep freed memory for reuse rather than
    return it to the system at every synchronization.
    """

    __slots__ = ("handle", "device", "owned", "_finalizer", "__weakref__")

    _defaults: dict[int, MemoryPool] = {}

    def __init__(self, handle: Any, device: Device, *, owned: bool) -> None:
        self.handle = handle
        self.device = device
        self.owned = owned
        self._finalizer = (
            weakref.finalize(self, _driver.release, _driver.api(), "cuMemPoolDestroy", handle)
            if owned
            else None
        )

    @classmethod
    def default(cls, device: Device | int | None = None) -> MemoryPool:
        dev = resolve_device(device)
        existing = cls._defaults.get(dev.ordinal)
        if existing is not None:
            return existing
        handle = _driver.call("cuDeviceGetDefaultMemPool", dev._handle)
        pool = cls(handle, dev, owned=False)
        pool.release_threshold = (1 << 64) - 1
        cls._defaults[dev.ordinal] = pool
        return pool

    @classmethod
    def create(cls, device: Device | int | None = None, *, release_threshold: int | None = None) -> MemoryPool:
        """A new pool of device memory on ``device``."""
        dev = resolve_device(device)
        api = _driver.api()
        props = api.CUmemPoolProps()
        props.allocType = api.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
        props.location.type = api.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        props.location.id = dev.ordinal
        pool = cls(_driver.call("cuMemPoolCreate", props), dev, owned=True)
        if release_threshold is not None:
            pool.release_threshold = release_threshold
        return pool

    def _attribute(self, name: str) -> Any:
        return getattr(_driver.api().CUmemPool_attribute, name)

    @property
    def release_threshold(self) -> int:
        """Bytes of freed memory the pool keeps before returning memory to the system."""
        return int(_driver.call("cuMemPoolGetAttribute", self.handle, self._attribute("CU_MEMPOOL_ATTR_RELEASE_THRESHOLD")))

    @release_threshold.setter
    def release_threshold(self, value: int) -> None:
        api = _driver.api()
        _driver.call(
            "cuMemPoolSetAttribute",
            self.handle,
            self._attribute("CU_MEMPOOL_ATTR_RELEASE_THRESHOLD"),
            api.cuuint64_t(value),
        )

    @property
    def used_bytes(self) -> int:
        """Bytes currently allocated from the pool."""
        return int(_driver.call("cuMemPoolGetAttribute", self.handle, self._attribute("CU_MEMPOOL_ATTR_USED_MEM_CURRENT")))

    @property
    def reserved_bytes(self) -> int:
        """Bytes the pool holds from the system (allocated or cached)."""
        return int(_driver.call("cuMemPoolGetAttribute", self.handle, self._attribute("CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT")))

    def trim(self, keep_bytes: int = 0) -> None:
        """Returns cached memory to the system, keeping at least ``keep_bytes``."""
        _driver.call("cuMemPoolTrimTo", self.handle, keep_bytes)

    def allocate(self, nbytes: int, stream: Stream) -> DeviceBuffer:
        """A stream-ordered allocation from this pool."""
        return DeviceBuffer.allocate(nbytes, device=self.device, stream=stream, pool=self)

    def close(self) -> None:
        if self._finalizer is not None:
            self._finalizer()


class PinnedBuffer:
    """Page-locked host memory (``cuMemHostAlloc``): fast, truly asynchronous copies.

    Its bytes are reached through `view()` (and ``memoryview(buf)`` on Python 3.12+); `close()` refuses while
    any such view is still alive, so no view ever points at freed memory.
    """

    __slots__ = ("ptr", "nbytes", "_finalizer", "_exports", "__weakref__")

    def __init__(self, ptr: int, nbytes: int) -> None:
        self.ptr = ptr
        self.nbytes = nbytes
        self._finalizer = weakref.finalize(self, _driver.release, _driver.api(), "cuMemFreeHost", ptr)
        self._exports: list[weakref.ref[Any]] = []

    @classmethod
    def allocate(cls, nbytes: int, *, device: Device | int | None = None, mapped: bool = False) -> PinnedBuffer:
        """``nbytes`` (> 0) of pinned host memory, usable from every context; ``mapped``
        also maps it into the device's address space (`device_ptr`)."""
        if not isinstance(nbytes, int) or nbytes <= 0:
            raise ValueError(f"PinnedBuffer.allocate: nbytes must be a positive int, got {nbytes!r}")
        resolve_device(device)
        api = _driver.api()
        flags = int(api.CU_MEMHOSTALLOC_PORTABLE)
        if mapped:
            flags |= int(api.CU_MEMHOSTALLOC_DEVICEMAP)
        return cls(int(_driver.call("cuMemHostAlloc", nbytes, flags)), nbytes)

    @property
    def device_ptr(self) -> int:
        """The address device work reaches this memory at (allocate with ``mapped=True``)."""
        if self.closed:
            raise ValueError("the PinnedBuffer has been freed")
        return int(_driver.call("cuMemHostGetDevicePointer", self.ptr, 0))

    def view(self) -> memoryview:
        """A writable byte view of the memory; it keeps this buffer alive."""
        if self.closed:
            raise ValueError("the PinnedBuffer has been freed")
        array = (ctypes.c_char * self.nbytes).from_address(self.ptr)
        array._owner = self  # type: ignore[attr-defined]  # keeps the buffer alive
        self._exports = [ref for ref in self._exports if ref() is not None]
        self._exports.append(weakref.ref(array))
        return memoryview(array).cast("B")

    def __buffer__(self, flags: int) -> memoryview:  # PEP 688 (Python 3.12+)
        return self.view()

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    def close(self) -> None:
        """Frees the memory now; raises `BufferError` while views of it are alive."""
        alive = sum(ref() is not None for ref in self._exports)
        if alive:
            raise BufferError(f"PinnedBuffer.close: {alive} view(s) of the buffer are still alive")
        self._finalizer()

    def __enter__(self) -> PinnedBuffer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<PinnedBuffer 0x{self.ptr:x}, {self.nbytes} bytes>"
