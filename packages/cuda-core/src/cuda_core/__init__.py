"""cuda_core: a typed, safe CUDA driver layer over cuda-python (``cuda.bindings.driver``).

Every driver handle belongs to one Python object that releases it exactly once
(``close()``, a ``with`` block, or its finalizer); borrowed handles are marked as
such and never released. Every failing driver call raises a `CudaError`
subclass naming the call. Importing this package never touches the driver: on a
machine without one, the first use raises `CudaNoDeviceError` with an explanation.

Quick tour::

    import cuda_core as cc
    dev = cc.Device(0)                       # primary context retained on first use
    stream = cc.Stream.create(dev)
    buf = cc.DeviceBuffer.allocate(4096, stream=stream)     # stream-ordered pool memory
    buf.copy_from_host(bytes(4096), stream=stream)
    fn = cc.Module.load(cubin).get_function("kernel")
    launch = cc.PreparedLaunch(fn, cc.LaunchConfig(grid=8, block=128), ["ptr", "i32"])
    launch(stream, buf, 1024)
    stream.synchronize()

Native launch paths of the layers above build their C extensions and find the
driver's entry points through `cuda_core.native`; `cuda_core.testing` provides a
fake driver for host-path tests.
"""


from cuda_core._device import (
    Device,
    MemoryInfo,
    current_device,
    device_count,
    driver_version,
    is_available,
    unavailable_reason,
)
from cuda_core._errors import (
    CudaError,
    CudaInvalidValueError,
    CudaLaunchError,
    CudaNoDeviceError,
    CudaOutOfMemoryError,
)
from cuda_core._graph import (
    Capture,
    CaptureMode,
    Graph,
    GraphExec,
    GraphUpdateError,
    begin_capture,
    capture,
    end_capture,
    is_capturing,
    releases_deferred,
)
from cuda_core._launch import PARAM_CTYPES, KernelArg, LaunchConfig, PreparedLaunch, infer_param_types, launch
from cuda_core._memory import DeviceBuffer, DeviceMemory, DeviceView, MemoryPool, PinnedBuffer
from cuda_core._module import Function, Module
from cuda_core._stream import Event, Stream, stream_handle_of

__all__ = [
    "Capture",
    "CaptureMode",
    "CudaError",
    "CudaInvalidValueError",
    "CudaLaunchError",
    "CudaNoDeviceError",
    "CudaOutOfMemoryError",
    "Device",
    "DeviceBuffer",
    "DeviceMemory",
    "DeviceView",
    "Event",
    "Function",
    "Graph",
    "GraphExec",
    "GraphUpdateError",
    "KernelArg",
    "LaunchConfig",
    "MemoryInfo",
    "MemoryPool",
    "Module",
    "PARAM_CTYPES",
    "PinnedBuffer",
    "PreparedLaunch",
    "Stream",
    "begin_capture",
    "capture",
    "current_device",
    "device_count",
    "driver_version",
    "end_capture",
    "infer_param_types",
    "is_available",
    "is_capturing",
    "launch",
    "releases_deferred",
    "stream_handle_of",
    "unavailable_reason",
]


__version__ = "0.1.0"  # the distribution's version (tests/test_release.py keeps them equal)
