"""Test helpers for the layers above the driver (not used by cutile itself).

- `FakeDriver` and `use_fake_driver`: an in-process stand-in for the CUDA driver
  that keeps device memory in host bytearrays and records every call and launch
  (with its parameters read back through the ``void**`` array), so that host-side
  logic is tested on machines without a GPU. Its enums are the real ones.
- `PTX`: small kernels written by hand, JIT-compiled by the driver for the device,
  shared by the GPU tests of cuda_core and cuda_async:

  - ``axpy(y, x, a, n)``: y[i] = a * x[i] + y[i] for i < n (f32);
  - ``store_i64(out, v)``: out[0] = v (a 64-bit integer parameter);
  - ``cluster_size(out)``: out[blockIdx.x] = the number of blocks in the block's cluster;
  - ``sleep_then_store(out, v, ns)``: spins about ``ns`` nanoseconds, then out[0] = v
    (makes ordering and overlap visible);
  - ``inc(out)``: out[0] += 1 (u32).
"""

from __future__ import annotations

import copy
import ctypes
import gc
import itertools
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from cuda.bindings import driver as real_driver

from cuda_core import _device, _driver, _memory, _module

PTX = r"""
.version 8.0
.target sm_90
.address_size 64

// y[i] = a * x[i] + y[i] for i < n
.visible .entry axpy(.param .u64 p_y, .param .u64 p_x, .param .f32 p_a, .param .u32 p_n)
{
    .reg .pred %p;
    .reg .b32 %r<6>;
    .reg .f32 %f<4>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [p_y];
    ld.param.u64 %rd2, [p_x];
    ld.param.f32 %f1, [p_a];
    ld.param.u32 %r1, [p_n];
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mov.u32 %r4, %tid.x;
    mad.lo.s32 %r5, %r2, %r3, %r4;
    setp.ge.u32 %p, %r5, %r1;
    @%p bra DONE;
    cvta.to.global.u64 %rd3, %rd1;
    cvta.to.global.u64 %rd4, %rd2;
    mul.wide.u32 %rd5, %r5, 4;
    add.s64 %rd6, %rd3, %rd5;
    add.s64 %rd7, %rd4, %rd5;
    ld.global.f32 %f2, [%rd7];
    ld.global.f32 %f3, [%rd6];
    fma.rn.f32 %f3, %f1, %f2, %f3;
    st.global.f32 [%rd6], %f3;
DONE:
    ret;
}

// out[0] = v (a 64-bit integer parameter)
.visible .entry store_i64(.param .u64 p_out, .param .s64 p_v)
{
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [p_out];
    ld.param.s64 %rd2, [p_v];
    cvta.to.global.u64 %rd3, %rd1;
    st.global.s64 [%rd3], %rd2;
    ret;
}

// out[blockIdx.x] = number of blocks in this block's cluster
.visible .entry cluster_size(.param .u64 p_out)
{
    .reg .b32 %r<3>;
    .reg .b64 %rd<5>;
    ld.param.u64 %rd1, [p_out];
    cvta.to.global.u64 %rd2, %rd1;
    mov.u32 %r1, %ctaid.x;
    mov.u32 %r2, %cluster_nctarank;
    mul.wide.u32 %rd3, %r1, 4;
    add.s64 %rd4, %rd2, %rd3;
    st.global.u32 [%rd4], %r2;
    ret;
}

// Spins for about `ns` nanoseconds, then out[0] = v: makes stream-ordering bugs visible.
.visible .entry sleep_then_store(.param .u64 p_out, .param .u32 p_v, .param .u64 p_ns)
{
    .reg .pred %p;
    .reg .b32 %r<2>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [p_out];
    ld.param.u32 %r1, [p_v];
    ld.param.u64 %rd2, [p_ns];
    mov.u64 %rd3, %globaltimer;
    add.s64 %rd4, %rd3, %rd2;
WAIT:
    nanosleep.u32 1000;
    mov.u64 %rd5, %globaltimer;
    setp.lt.u64 %p, %rd5, %rd4;
    @%p bra WAIT;
    cvta.to.global.u64 %rd6, %rd1;
    st.global.u32 [%rd6], %r1;
    ret;
}

// out[0] += 1 (one thread)
.visible .entry inc(.param .u64 p_out)
{
    .reg .b32 %r<3>;
    .reg .b64 %rd<3>;
    ld.param.u64 %rd1, [p_out];
    cvta.to.global.u64 %rd2, %rd1;
    ld.global.u32 %r1, [%rd2];
    add.s32 %r2, %r1, 1;
    st.global.u32 [%rd2], %r2;
    ret;
}
"""


SUCCESS = real_driver.CUresult.CUDA_SUCCESS
R = real_driver.CUresult


class FakeDriver:
    """Enough of the driver API for the host-side logic of cuda_core and the layers
    above it. Device memory lives in host bytearrays; launches are recorded (with
    their parameters) instead of run. Stream-ordered calls are logged in ``log`` as
    ``(call, stream, detail)`` — kernels ``("launch", s, name)``, event records
    ``("record", s, event)``, waits ``("wait", s, stream the event was recorded on)``,
    synchronizations ``("synchronize", s, None)``, async memsets ``("memset", s, bytes)``,
    gates ``("wait_value", s, (address, value))`` (logged, never waited on),
    graph launches — and work queued
    on a capturing stream goes into its graph instead. Events complete when recorded,
    unless ``hold_events`` is set; then `finish_events` completes them (from any thread).
    Each stream-ordered call advances a fake clock by ``ms_per_call``; an event's
    elapsed time is the clock's advance between the two records.
    """

    def __init__(self, devices: int = 1) -> None:
        self.devices = devices
        self.calls: Counter[str] = Counter()
        self.memory: dict[int, bytearray] = {}
        self.host_memory: dict[int, Any] = {}  # pinned host allocations by address
        self.live_handles: dict[str, set[int]] = {"stream": set(), "module": set(), "event": set()}
        self.launches: list[dict[str, Any]] = []
        self.fail_next: dict[str, Any] = {}
        self._addresses = itertools.count(0x7F0000000000, 0x100000)
        self._handles = itertools.count(0x1000)
        self.init_exception: Exception | None = None
        self.without_param_count = False  # act as a driver older than CUDA 12.8
        self.version = 13000  # what cuDriverGetVersion answers: CUDA 13.0
        self.total_memory = 141 * 1024**3  # what cuDeviceTotalMem answers, in bytes
        # Functions by name: name -> list of (offset, size) parameters
        self.kernels: dict[str, list[tuple[int, int]]] = {
            "axpy": [(0, 8), (8, 8), (16, 4), (20, 4)],
            "empty": [],
        }
        # Streams, events and graphs, as seen from the host.
        self.log: list[tuple[str, int, Any]] = []
        self.events: dict[int, dict[str, Any]] = {}
        self.hold_events = False
        self.waited_events: list[int] = []
        # The fake device clock: every stream-ordered call advances it by ms_per_call;
        # an event records its time, and cuEventElapsedTime answers the difference.
        self.clock_ms = 0.0
        self.ms_per_call = 0.001
        self.capturing: dict[int, list[tuple[str, Any]]] = {}
        self.graphs: dict[int, list[tuple[str, Any]]] = {}
        self.execs: dict[int, list[tuple[str, Any]]] = {}
        self._lock = threading.Lock()  # the poller thread of cuda_async queries events
        self._function_handles: dict[str, int] = {}
        self.function_names: dict[int, str] = {}  # function handle -> kernel name
        # The context current (0xC0 + ordinal) when each stream, module and device
        # allocation was made, by handle or address: what multi-device tests check.
        self.made_in: dict[str, dict[int, int]] = {"stream": {}, "module": {}, "memory": {}}
        self.context = 0  # what the native cuCtxGetCurrent reports
        self._native: Any = None

    def __getattr__(self, name: str) -> Any:  # enums and structs come from the real module
        if name.startswith("cu") and not name.startswith("cuuint"):
            raise AttributeError(f"FakeDriver has no {name}")
        return getattr(real_driver, name)

    def _enter(self, name: str) -> Any:
        with self._lock:
            self.calls[name] += 1
            return self.fail_next.pop(name, None)

    def enqueue(self, call: str, stream: Any, detail: Any = None) -> None:
        """Logs a stream-ordered call (tests' own fake kernels use it too); on a
        capturing stream the call goes into the graph being captured."""
        handle = int(stream)
        with self._lock:
            self.clock_ms += self.ms_per_call
            if handle in self.capturing:
                self.capturing[handle].append((call, detail))
            else:
                self.log.append((call, handle, detail))

    def finish_events(self) -> None:
        """Completes every event recorded so far (with ``hold_events`` set)."""
        with self._lock:
            for event in self.events.values():
                event["done"] = True

    # -- init / devices ------------------------------------------------------------
    def cuInit(self, flags: int) -> tuple[Any]:
        self.calls["cuInit"] += 1
        if self.init_exception is not None:  # (a new one each call, as a real loader's failure is)
            raise copy.copy(self.init_exception)
        return (SUCCESS if self.devices else R.CUDA_ERROR_NO_DEVICE,)

    def cuGetErrorString(self, err: Any) -> tuple[Any, bytes]:
        return (SUCCESS, f"fake message for {R(int(err)).name}".encode())

    def cuDriverGetVersion(self) -> tuple[Any, int]:
        return (SUCCESS, self.version)

    def cuDeviceGetCount(self) -> tuple[Any, int]:
        return (SUCCESS, self.devices)

    def cuDeviceGet(self, ordinal: int) -> tuple[Any, int]:
        return (SUCCESS, ordinal)

    def cuDeviceGetAttribute(self, attr: Any, dev: int) -> tuple[Any, int]:
        values = {"COMPUTE_CAPABILITY_MAJOR": 9, "COMPUTE_CAPABILITY_MINOR": 0, "MULTIPROCESSOR_COUNT": 132}
        key = attr.name.removeprefix("CU_DEVICE_ATTRIBUTE_")
        return (SUCCESS, values.get(key, 1024))

    def cuDeviceTotalMem(self, dev: int) -> tuple[Any, int]:
        return (SUCCESS, self.total_memory)

    def cuDeviceGetName(self, length: int, dev: int) -> tuple[Any, bytes]:
        return (SUCCESS, b"Fake H200\0\0\0")

    def cuDeviceGetPCIBusId(self, length: int, dev: int) -> tuple[Any, bytes]:
        return (SUCCESS, f"0000:{0x3B + dev:02X}:00.0".encode().ljust(length, b"\0"))

    def cuDevicePrimaryCtxRetain(self, dev: int) -> tuple[Any, int]:
        self.calls["cuDevicePrimaryCtxRetain"] += 1
        return (SUCCESS, 0xC0 + dev)

    def cuDevicePrimaryCtxRelease(self, dev: int) -> tuple[Any]:
        self.calls["cuDevicePrimaryCtxRelease"] += 1
        return (SUCCESS,)

    def cuCtxSetCurrent(self, ctx: Any) -> tuple[Any]:
        self.calls["cuCtxSetCurrent"] += 1
        self.context = int(ctx)
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
        return (SUCCESS,)

    def cuDeviceGetDefaultMemPool(self, dev: int) -> tuple[Any, int]:
        return (SUCCESS, 0xD00 + dev)

    def cuMemPoolSetAttribute(self, pool: Any, attr: Any, value: Any) -> tuple[Any]:
        self._enter("cuMemPoolSetAttribute")
        return (SUCCESS,)

    def cuMemAllocFromPoolAsync(self, nbytes: int, pool: Any, stream: Any) -> tuple[Any, int]:
        self._enter("cuMemAllocFromPoolAsync")
        address = self._alloc(nbytes)
        self.made_in["memory"][address] = self.context
        return (SUCCESS, address)

    def cuMemFreeAsync(self, ptr: int, stream: Any) -> tuple[Any]:
        self._enter("cuMemFreeAsync")
        return self.cuMemFree(ptr)

    def cuMemHostAlloc(self, nbytes: int, flags: int) -> tuple[Any, int]:
        failure = self._enter("cuMemHostAlloc")
        if failure is not None:
            return (failure, 0)
        block = ctypes.create_string_buffer(nbytes)  # real host memory: PinnedBuffer views it
        with self._lock:
            self.host_memory[ctypes.addressof(block)] = block
        return (SUCCESS, ctypes.addressof(block))

    def cuMemFreeHost(self, ptr: int) -> tuple[Any]:
        with self._lock:
            self.host_memory.pop(int(ptr), None)
        return (SUCCESS,)

    def cuMemHostGetDevicePointer(self, ptr: int, flags: int) -> tuple[Any, int]:
        with self._lock:
            known = int(ptr) in self.host_memory
        return (SUCCESS, int(ptr)) if known else (R.CUDA_ERROR_INVALID_VALUE, 0)

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

    def cuMemcpyDtoHAsync(self, dst: int, src: int, nbytes: int, stream: Any) -> tuple[Any]:
        return self.cuMemcpyDtoH(dst, src, nbytes)

    def cuMemcpyDtoD(self, dst: int, src: int, nbytes: int) -> tuple[Any]:
        self._enter("cuMemcpyDtoD")
        return self._copy_device(dst, src, nbytes)

    def cuMemcpyDtoDAsync(self, dst: int, src: int, nbytes: int, stream: Any) -> tuple[Any]:
        failure = self._enter("cuMemcpyDtoDAsync")  # counted, and failed on request, under its own name
        return (failure,) if failure is not None else self._copy_device(dst, src, nbytes)

    def _copy_device(self, dst: int, src: int, nbytes: int) -> tuple[Any]:
        sblock, soff = self._locate(src, nbytes)
        dblock, doff = self._locate(dst, nbytes)
        dblock[doff : doff + nbytes] = sblock[soff : soff + nbytes]
        return (SUCCESS,)

    def cuMemsetD8(self, dst: int, value: int, count: int) -> tuple[Any]:
        self._enter("cuMemsetD8")
        block, offset = self._locate(dst, count)
        block[offset : offset + count] = bytes([value]) * count
        return (SUCCESS,)

    def cuMemsetD16(self, dst: int, value: int, count: int) -> tuple[Any]:
        self._enter("cuMemsetD16")
        block, offset = self._locate(dst, 2 * count)
        block[offset : offset + 2 * count] = value.to_bytes(2, "little") * count
        return (SUCCESS,)

    def cuMemsetD32(self, dst: int, value: int, count: int) -> tuple[Any]:
        self._enter("cuMemsetD32")
        block, offset = self._locate(dst, 4 * count)
        block[offset : offset + 4 * count] = value.to_bytes(4, "little") * count
        return (SUCCESS,)

    def cuMemsetD32Async(self, dst: int, value: int, count: int, stream: Any) -> tuple[Any]:
        self.cuMemsetD32(dst, value, count)
        self.enqueue("memset", stream, 4 * count)  # logged as ("memset", stream, bytes)
        return (SUCCESS,)

    # -- streams / modules ---------------------------------------------------------
    def cuStreamCreateWithPriority(self, flags: int, priority: int) -> tuple[Any, Any]:
        handle = next(self._handles)
        self.live_handles["stream"].add(handle)
        self.made_in["stream"][handle] = self.context
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
        self.made_in["module"][handle] = self.context
        return (SUCCESS, handle)

    def cuModuleUnload(self, module: int) -> tuple[Any]:
        self._enter("cuModuleUnload")
        self.live_handles["module"].remove(module)
        return (SUCCESS,)

    def cuModuleGetFunction(self, module: int, name: bytes) -> tuple[Any, Any]:
        found = name.decode()
        if found not in self.kernels:
            return (R.CUDA_ERROR_NOT_FOUND, None)
        # A handle per name, as integers (native launch paths pass them through C).
        handle = self._function_handles.get(found)
        if handle is None:
            handle = self._function_handles[found] = next(self._handles)
            self.function_names[handle] = found
        return (SUCCESS, real_driver.CUfunction(handle))

    def cuFuncGetParamCount(self, function: Any) -> tuple[Any, int]:
        if self.without_param_count:  # what cuda-bindings does when the driver lacks it
            raise RuntimeError('Function "cuFuncGetParamCount" not found')
        return (SUCCESS, len(self.kernels[self.function_names[int(function)]]))

    def cuFuncGetParamInfo(self, function: Any, index: int) -> tuple[Any, int, int]:
        params = self.kernels[self.function_names[int(function)]]
        if index >= len(params):
            return (R.CUDA_ERROR_INVALID_VALUE, 0, 0)
        return (SUCCESS, *params[index])

    def cuLaunchKernel(self, function: Any, gx: int, gy: int, gz: int, bx: int, by: int, bz: int,
                       shmem: int, stream: Any, params: int, extra: int) -> tuple[Any]:
        failure = self._enter("cuLaunchKernel")
        if failure is not None:
            return (failure,)
        self._record_launch(function, (gx, gy, gz), (bx, by, bz), shmem, stream, params, ())
        return (SUCCESS,)

    def cuLaunchKernelEx(self, config: Any, function: Any, params: int, extra: int) -> tuple[Any]:
        """`cuLaunchKernel` with ``config``'s dims; the launch's ``attributes`` are the
        names of the attributes set (``"PROGRAMMATIC_STREAM_SERIALIZATION"``, ...)."""
        failure = self._enter("cuLaunchKernelEx")
        if failure is not None:
            return (failure,)
        names = tuple(attr.id.name.removeprefix("CU_LAUNCH_ATTRIBUTE_") for attr in config.attrs[:config.numAttrs])
        self._record_launch(function, (config.gridDimX, config.gridDimY, config.gridDimZ),
                            (config.blockDimX, config.blockDimY, config.blockDimZ), config.sharedMemBytes,
                            config.hStream, params, names)
        return (SUCCESS,)

    def _record_launch(self, function: Any, grid: tuple[int, int, int], block: tuple[int, int, int], shmem: int,
                       stream: Any, params: int, attributes: tuple[str, ...]) -> None:
        f = self.function_names[int(function)]
        # Read the parameters back through the void** array, as the driver does.
        layout = self.kernels[f]
        values: list[bytes] = []
        if params:
            pointers = (ctypes.c_void_p * max(1, len(layout))).from_address(params)
            values = [ctypes.string_at(int(pointers[i] or 0), size) for i, (_, size) in enumerate(layout)]
        self.launches.append({"function": f, "grid": grid, "block": block, "shared": shmem, "stream": int(stream),
                              "params": values, "context": self.context, "attributes": attributes})
        self.enqueue("launch", stream, f)

    # -- synchronization ---------------------------------------------------------------
    def cuStreamSynchronize(self, stream: Any) -> tuple[Any]:
        failure = self._enter("cuStreamSynchronize")
        if failure is not None:
            return (failure,)
        with self._lock:
            self.log.append(("synchronize", int(stream), None))
            for event in self.events.values():
                if event["stream"] == int(stream):
                    event["done"] = True
        return (SUCCESS,)

    def cuCtxSynchronize(self) -> tuple[Any]:
        self._enter("cuCtxSynchronize")
        self.finish_events()
        return (SUCCESS,)

    def cuStreamWaitEvent(self, stream: Any, event: Any, flags: int) -> tuple[Any]:
        self._enter("cuStreamWaitEvent")
        self.waited_events.append(int(event))
        self.enqueue("wait", stream, self.events[int(event)]["stream"])
        return (SUCCESS,)

    def cuStreamWaitValue32(self, stream: Any, address: int, value: int, flags: int) -> tuple[Any]:
        """The fake runs work as it is queued, so the gate is logged, not waited on."""
        failure = self._enter("cuStreamWaitValue32")
        if failure is not None:
            return (failure,)
        self.enqueue("wait_value", stream, (int(address), int(value)))
        return (SUCCESS,)

    def cuEventCreate(self, flags: int) -> tuple[Any, Any]:
        self._enter("cuEventCreate")
        handle = next(self._handles)
        with self._lock:
            self.live_handles["event"].add(handle)
            self.events[handle] = {"stream": None, "done": True}
        return (SUCCESS, real_driver.CUevent(handle))

    def cuEventDestroy(self, event: Any) -> tuple[Any]:
        with self._lock:
            self.live_handles["event"].discard(int(event))
            self.events.pop(int(event), None)
        return (SUCCESS,)

    def cuEventRecord(self, event: Any, stream: Any) -> tuple[Any]:
        self._enter("cuEventRecord")
        with self._lock:
            self.events[int(event)] = {"stream": int(stream), "done": not self.hold_events}
        self.enqueue("record", stream, int(event))
        with self._lock:
            self.events[int(event)]["time"] = self.clock_ms
        return (SUCCESS,)

    def cuEventElapsedTime(self, start: Any, end: Any) -> tuple[Any, float]:
        failure = self._enter("cuEventElapsedTime")
        if failure is not None:
            return (failure, 0.0)
        with self._lock:
            return (SUCCESS, float(self.events[int(end)]["time"] - self.events[int(start)]["time"]))

    def cuEventQuery(self, event: Any) -> tuple[Any]:
        failure = self._enter("cuEventQuery")
        if failure is not None:
            return (failure,)
        return (SUCCESS if self.events[int(event)]["done"] else R.CUDA_ERROR_NOT_READY,)

    def cuEventSynchronize(self, event: Any) -> tuple[Any]:
        failure = self._enter("cuEventSynchronize")
        if failure is not None:
            return (failure,)
        with self._lock:
            self.events[int(event)]["done"] = True
        return (SUCCESS,)

    # -- graphs ----------------------------------------------------------------------------
    def cuStreamBeginCapture(self, stream: Any, mode: Any) -> tuple[Any]:
        with self._lock:
            self.capturing[int(stream)] = []
        return (SUCCESS,)

    def cuStreamIsCapturing(self, stream: Any) -> tuple[Any, Any]:
        status = real_driver.CUstreamCaptureStatus
        with self._lock:
            active = int(stream) in self.capturing
        return (SUCCESS, status.CU_STREAM_CAPTURE_STATUS_ACTIVE if active else status.CU_STREAM_CAPTURE_STATUS_NONE)

    def cuStreamEndCapture(self, stream: Any) -> tuple[Any, Any]:
        handle = next(self._handles)
        with self._lock:
            self.graphs[handle] = self.capturing.pop(int(stream))
        return (SUCCESS, real_driver.CUgraph(handle))

    def cuGraphGetNodes(self, graph: Any, count: int) -> tuple[Any, Any, int]:
        return (SUCCESS, None, len(self.graphs[int(graph)]))

    def cuGraphDestroy(self, graph: Any) -> tuple[Any]:
        return (SUCCESS,)

    def cuGraphInstantiate(self, graph: Any, flags: int) -> tuple[Any, Any]:
        handle = next(self._handles)
        self.execs[handle] = list(self.graphs[int(graph)])
        return (SUCCESS, real_driver.CUgraphExec(handle))

    def cuGraphUpload(self, graph_exec: Any, stream: Any) -> tuple[Any]:
        return (SUCCESS,)

    def cuGraphLaunch(self, graph_exec: Any, stream: Any) -> tuple[Any]:
        self._enter("cuGraphLaunch")
        self.enqueue("graph", stream, list(self.execs[int(graph_exec)]))
        return (SUCCESS,)

    def cuGraphExecDestroy(self, graph_exec: Any) -> tuple[Any]:
        return (SUCCESS,)


    # -- native launch paths ---------------------------------------------------------------
    def native_entry_points(self) -> Any:
        """C-callable stand-ins (ctypes callbacks) of ``cuLaunchKernel``,
        ``cuCtxGetCurrent``, ``cuCtxSetCurrent`` and ``cuStreamSynchronize``, for native launch paths
        (`cuda_core._native.entry_points`): launches from C are recorded like any other."""
        if self._native is None:
            from cuda_core._native import EntryPoints

            result = ctypes.c_int
            handle = ctypes.c_void_p
            dim = ctypes.c_uint

            def launch(function: int | None, gx: int, gy: int, gz: int, bx: int, by: int, bz: int,
                       shmem: int, stream: int | None, params: int | None, extra: int | None) -> int:
                err = self.cuLaunchKernel(function or 0, gx, gy, gz, bx, by, bz, shmem, stream or 0, params or 0, 0)[0]
                return int(err)

            def get_current(out: Any) -> int:
                ctypes.cast(out, ctypes.POINTER(ctypes.c_void_p))[0] = self.context or None
                return 0

            def set_current(context: int | None) -> int:
                self.calls["cuCtxSetCurrent"] += 1
                self.context = context or 0
                return 0

            def synchronize(stream: int | None) -> int:
                return int(self.cuStreamSynchronize(stream or 0)[0])

            callbacks = (
                ctypes.CFUNCTYPE(result, handle, dim, dim, dim, dim, dim, dim, dim, handle, handle, handle)(launch),
                ctypes.CFUNCTYPE(result, handle)(get_current),
                ctypes.CFUNCTYPE(result, handle)(set_current),
                ctypes.CFUNCTYPE(result, handle)(synchronize),
            )
            launch_kernel, get, set_, sync = (ctypes.cast(c, ctypes.c_void_p).value or 0 for c in callbacks)
            self._native = EntryPoints(launch_kernel, get, set_, sync, keep=callbacks)
        return self._native


@contextmanager
def use_fake_driver(fake: FakeDriver | None = None) -> Iterator[FakeDriver]:
    """Swaps the driver for ``fake`` (a new `FakeDriver` by default) inside the block,
    with cuda_core's per-process state (devices, pools, exit hooks) set aside and
    restored after."""
    fake = fake if fake is not None else FakeDriver()
    previous = _driver.use_driver(fake)
    saved_devices = dict(_device.Device._instances)
    saved_pools = dict(_memory.MemoryPool._defaults)
    _device.Device._instances.clear()
    _memory.MemoryPool._defaults.clear()
    _device._tls.__dict__.clear()
    saved_hooks = list(_driver._exit_hooks)
    saved_missing = _module._param_count_missing
    _module._param_count_missing = False
    _driver._exit_hooks.clear()  # only the fake devices' hooks during the block
    try:
        yield fake
    finally:
        gc.collect()  # objects made in the block release their handles to the fake
        _driver.use_driver(previous)
        _device.Device._instances.clear()
        _device.Device._instances.update(saved_devices)
        _memory.MemoryPool._defaults.clear()
        _memory.MemoryPool._defaults.update(saved_pools)
        _device._tls.__dict__.clear()
        _driver._exit_hooks[:] = saved_hooks
        _module._param_count_missing = saved_missing
