"""Fixtures for cuda_core's tests.

`fake_driver` swaps cuda.bindings.driver for `FakeDriver`, a small in-process
stand-in that keeps device memory in host bytearrays and records every call, so
that argument packing, error mapping and resource lifetimes are tested on
machines without a GPU. Its enums are the real ones from cuda-bindings.
"""

from __future__ import annotations

import ctypes
import gc
import itertools
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from cuda.bindings import driver as real_driver

from cuda_core import _device, _driver, _memory

SUCCESS = real_driver.CUresult.CUDA_SUCCESS
R = real_driver.CUresult


class FakeDriver:
    """Enough of the driver API for cuda_core's host-side logic."""

    def __init__(self, devices: int = 1) -> None:
        self.devices = devices
        self.calls: Counter[str] = Counter()
        self.memory: dict[int, bytearray] = {}
        self.freed: list[int] = []
        self.live_handles: dict[str, set[int]] = {"stream": set(), "module": set(), "event": set(), "pool": set()}
        self.launches: list[dict[str, Any]] = []
        self.fail_next: dict[str, Any] = {}
        self._addresses = itertools.count(0x7F0000000000, 0x100000)
        self._handles = itertools.count(0x1000)
        self.init_exception: Exception | None = None
        self.without_param_count = False  # act as a driver older than CUDA 12.8
        # Functions by name: name -> list of (offset, size) parameters
        self.kernels: dict[str, list[tuple[int, int]]] = {
            "axpy": [(0, 8), (8, 8), (16, 4), (20, 4)],
            "empty": [],
        }

    def __getattr__(self, name: str) -> Any:  # enums and structs come from the real module
        if name.startswith("cu") and not name.startswith("cuuint"):
            raise AttributeError(f"FakeDriver has no {name}")
        return getattr(real_driver, name)

    def _enter(self, name: str) -> Any:
        self.calls[name] += 1
        return self.fail_next.pop(name, None)

    # -- init / devices ------------------------------------------------------------
    def cuInit(self, flags: int) -> tuple[Any]:
        self.calls["cuInit"] += 1
        if self.init_exception is not None:
            raise self.init_exception
        return (SUCCESS if self.devices else R.CUDA_ERROR_NO_DEVICE,)

    def cuGetErrorString(self, err: Any) -> tuple[Any, bytes]:
        return (SUCCESS, f"fake message for {R(int(err)).name}".encode())

    def cuDeviceGetCount(self) -> tuple[Any, int]:
        return (SUCCESS, self.devices)

    def cuDeviceGet(self, ordinal: int) -> tuple[Any, int]:
        return (SUCCESS, ordinal)

    def cuDeviceGetAttribute(self, attr: Any, dev: int) -> tuple[Any, int]:
        values = {"COMPUTE_CAPABILITY_MAJOR": 9, "COMPUTE_CAPABILITY_MINOR": 0, "MULTIPROCESSOR_COUNT": 132}
        key = attr.name.removeprefix("CU_DEVICE_ATTRIBUTE_")
        return (SUCCESS, values.get(key, 1024))

    def cuDeviceGetName(self, length: int, dev: int) -> tuple[Any, bytes]:
        return (SUCCESS, b"Fake H200\0\0\0")

    def cuDevicePrimaryCtxRetain(self, dev: int) -> tuple[Any, int]:
        self.calls["cuDevicePrimaryCtxRetain"] += 1
        return (SUCCESS, 0xC0 + dev)

    def cuDevicePrimaryCtxRelease(self, dev: int) -> tuple[Any]:
        self.calls["cuDevicePrimaryCtxRelease"] += 1
        return (SUCCESS,)

    def cuCtxSetCurrent(self, ctx: Any) -> tuple[Any]:
        self.calls["cuCtxSetCurrent"] += 1
        return (SUCCESS,)

    def cuCtxGetStreamPriorityRange(self) -> tuple[Any, int, int]:
        return (SUCCESS, 0, -5)

    # -- memory --------------------------------------------------------------------
    def _alloc(self, nbytes: int) -> int:
        address = next(self._addresses)
        self.memory[address] = bytearray(nbytes)
        return address

    def cuMemAlloc(self, nbytes: int) -> tuple[Any, int]:
        failure = self._enter("cuMemAlloc")
        if failure is not None:
            return (failure, 0)
        if nbytes > 1 << 40:
            return (R.CUDA_ERROR_OUT_OF_MEMORY, 0)
        return (SUCCESS, self._alloc(nbytes))

    def cuMemFree(self, ptr: int) -> tuple[Any]:
        self._enter("cuMemFree")
        if ptr not in self.memory:
            return (R.CUDA_ERROR_INVALID_VALUE,)
        del self.memory[ptr]
        self.freed.append(ptr)
        return (SUCCESS,)

    def cuDeviceGetDefaultMemPool(self, dev: int) -> tuple[Any, int]:
        return (SUCCESS, 0xD00 + dev)

    def cuMemPoolSetAttribute(self, pool: Any, attr: Any, value: Any) -> tuple[Any]:
        self._enter("cuMemPoolSetAttribute")
        return (SUCCESS,)

    def cuMemAllocFromPoolAsync(self, nbytes: int, pool: Any, stream: Any) -> tuple[Any, int]:
        self._enter("cuMemAllocFromPoolAsync")
        return (SUCCESS, self._alloc(nbytes))

    def cuMemFreeAsync(self, ptr: int, stream: Any) -> tuple[Any]:
        self._enter("cuMemFreeAsync")
        return self.cuMemFree(ptr)

    def _locate(self, address: int, nbytes: int) -> tuple[bytearray, int]:
        for base, block in self.memory.items():
            if base <= address and address + nbytes <= base + len(block):
                return block, address - base
        raise AssertionError(f"fake driver: access outside any allocation at 0x{address:x}")

    def cuMemcpyHtoD(self, dst: int, src: Any, nbytes: int) -> tuple[Any]:
        self._enter("cuMemcpyHtoD")
        block, offset = self._locate(dst, nbytes)
        data = ctypes.string_at(src, nbytes) if isinstance(src, int) else bytes(memoryview(src))[:nbytes]
        block[offset : offset + nbytes] = data
        return (SUCCESS,)

    def cuMemcpyHtoDAsync(self, dst: int, src: Any, nbytes: int, stream: Any) -> tuple[Any]:
        return self.cuMemcpyHtoD(dst, src, nbytes)

    def cuMemcpyDtoH(self, dst: int, src: int, nbytes: int) -> tuple[Any]:
        self._enter("cuMemcpyDtoH")
        block, offset = self._locate(src, nbytes)
        ctypes.memmove(dst, bytes(block[offset : offset + nbytes]), nbytes)
        return (SUCCESS,)

    def cuMemcpyDtoD(self, dst: int, src: int, nbytes: int) -> tuple[Any]:
        self._enter("cuMemcpyDtoD")
        sblock, soff = self._locate(src, nbytes)
        dblock, doff = self._locate(dst, nbytes)
        dblock[doff : doff + nbytes] = sblock[soff : soff + nbytes]
        return (SUCCESS,)

    def cuMemsetD8(self, dst: int, value: int, count: int) -> tuple[Any]:
        block, offset = self._locate(dst, count)
        block[offset : offset + count] = bytes([value]) * count
        return (SUCCESS,)

    def cuMemsetD32(self, dst: int, value: int, count: int) -> tuple[Any]:
        block, offset = self._locate(dst, 4 * count)
        block[offset : offset + 4 * count] = value.to_bytes(4, "little") * count
        return (SUCCESS,)

    # -- streams / modules ---------------------------------------------------------
    def cuStreamCreateWithPriority(self, flags: int, priority: int) -> tuple[Any, Any]:
        handle = next(self._handles)
        self.live_handles["stream"].add(handle)
        return (SUCCESS, real_driver.CUstream(handle))

    def cuStreamDestroy(self, stream: Any) -> tuple[Any]:
        self._enter("cuStreamDestroy")
        self.live_handles["stream"].remove(int(stream))
        return (SUCCESS,)

    def cuModuleLoadData(self, image: bytes) -> tuple[Any, int]:
        failure = self._enter("cuModuleLoadData")
        if failure is not None:
            return (failure, 0)
        handle = next(self._handles)
        self.live_handles["module"].add(handle)
        return (SUCCESS, handle)

    def cuModuleUnload(self, module: int) -> tuple[Any]:
        self._enter("cuModuleUnload")
        self.live_handles["module"].remove(module)
        return (SUCCESS,)

    def cuModuleGetFunction(self, module: int, name: bytes) -> tuple[Any, Any]:
        if name.decode() not in self.kernels:
            return (R.CUDA_ERROR_NOT_FOUND, None)
        return (SUCCESS, name.decode())

    def cuFuncGetParamCount(self, function: str) -> tuple[Any, int]:
        if self.without_param_count:  # what cuda-bindings does when the driver lacks it
            raise RuntimeError('Function "cuFuncGetParamCount" not found')
        return (SUCCESS, len(self.kernels[function]))

    def cuFuncGetParamInfo(self, function: str, index: int) -> tuple[Any, int, int]:
        params = self.kernels[function]
        if index >= len(params):
            return (R.CUDA_ERROR_INVALID_VALUE, 0, 0)
        return (SUCCESS, *params[index])

    def cuLaunchKernel(self, f: str, gx: int, gy: int, gz: int, bx: int, by: int, bz: int,
                       shmem: int, stream: Any, params: int, extra: int) -> tuple[Any]:
        self._enter("cuLaunchKernel")
        # Read the parameters back through the void** array, as the driver does.
        layout = self.kernels[f]
        pointers = (ctypes.c_void_p * max(1, len(layout))).from_address(params) if params else []
        values = [ctypes.string_at(pointers[i], size) for i, (_, size) in enumerate(layout)]
        self.launches.append({"function": f, "grid": (gx, gy, gz), "block": (bx, by, bz),
                              "shared": shmem, "stream": int(stream), "params": values})
        return (SUCCESS,)


@pytest.fixture
def fake_driver() -> Iterator[FakeDriver]:
    fake = FakeDriver()
    previous = _driver.use_driver(fake)
    saved_devices = dict(_device.Device._instances)
    saved_pools = dict(_memory.MemoryPool._defaults)
    _device.Device._instances.clear()
    _memory.MemoryPool._defaults.clear()
    _device._tls.__dict__.clear()
    saved_hooks = list(_driver._exit_hooks)
    from cuda_core import _module

    _module._param_count_missing = False
    _driver._exit_hooks.clear()  # only the fake devices' hooks during the test
    try:
        yield fake
    finally:
        gc.collect()  # objects made in the test release their handles to the fake
        _driver.use_driver(previous)
        _device.Device._instances.clear()
        _device.Device._instances.update(saved_devices)
        _memory.MemoryPool._defaults.clear()
        _memory.MemoryPool._defaults.update(saved_pools)
        _device._tls.__dict__.clear()
        _driver._exit_hooks[:] = saved_hooks
