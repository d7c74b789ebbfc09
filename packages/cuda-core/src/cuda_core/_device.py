"""Devices and their primary contexts.

A `Device` retains its primary context on first use and makes it current on
each thread that uses it (the model of the CUDA runtime and of PyTorch, whose
contexts are the same primary contexts). Contexts are released at exit.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from cuda_core import _driver
from cuda_core._errors import CudaInvalidValueError

_tls = threading.local()  # .context: the context handle (int) this module made current


def device_count() -> int:
    """The number of CUDA devices visible to this process.

    Raises `CudaNoDeviceError` with an explanation when no driver is installed or
    the driver sees no device (``cuInit`` itself fails then).
    """
    return int(_driver.call("cuDeviceGetCount"))


def driver_version() -> tuple[int, int]:
    """The CUDA version the installed driver supports, as (major, minor), e.g. ``(13, 0)``
    (``cuDriverGetVersion``, which needs no device: it answers where the driver sees none).

    Raises `CudaNoDeviceError` with an explanation when no driver can be loaded.
    """
    from cuda_core._errors import no_driver_error

    api = _driver.in_use()
    if api is None:
        raise no_driver_error(f"cuda-bindings is not importable ({_driver._IMPORT_ERROR})")
    try:
        result, version = api.cuDriverGetVersion()
    except (RuntimeError, OSError) as exc:  # the driver library cannot be loaded
        raise no_driver_error(str(exc)) from None
    if int(result) != 0:
        _driver.raise_error(result, "cuDriverGetVersion")
    return int(version) // 1000, int(version) % 1000 // 10


def is_available() -> bool:
    """True when a driver is loaded and at least one device is visible; never raises
    for a missing driver or device (other errors propagate)."""
    from cuda_core._errors import CudaNoDeviceError

    try:
        return device_count() > 0
    except CudaNoDeviceError:
        return False


def unavailable_reason() -> str | None:
    """None when a GPU can be used, else why not, in plain words (e.g. "no NVIDIA
    driver was found on this machine", "the NVIDIA driver is installed but sees no
    GPU (...)"); never raises for a driver error."""
    from cuda_core._errors import CudaError

    try:
        count = device_count()
    except CudaError as exc:
        return exc.message.split(";")[0]  # the reason; what follows is advice and the loader's words
    return None if count else "the NVIDIA driver sees no GPU"


@dataclass(frozen=True)
class MemoryInfo:
    """Device memory as reported by the driver, in bytes."""

    free: int
    total: int


class Device:
    """A CUDA device; ``Device(i)`` returns the same object for the same ordinal.

    Properties query the driver the first time and are cached where the value
    cannot change (name, compute capability, limits).
    """

    _instances: dict[int, Device] = {}
    _instances_lock = threading.Lock()

    ordinal: int
    _handle: Any
    _context: Any
    _context_int: int
    _attribute_cache: dict[str, int]
    _retained_by: Any  # the driver module that retained the context

    def __new__(cls, ordinal: int = 0) -> Device:
        if not isinstance(ordinal, int) or isinstance(ordinal, bool):
            raise TypeError(f"Device(ordinal): ordinal must be an int, got {type(ordinal).__name__}")
        with cls._instances_lock:
            existing = cls._instances.get(ordinal)
            if existing is not None:
                return existing
            count = device_count()
            if not 0 <= ordinal < count:
                raise CudaInvalidValueError(
                    101,
                    "CUDA_ERROR_INVALID_DEVICE",
                    f"device ordinal {ordinal} is out of range: {count} device(s) visible",
                    "Device()",
                )
            device = super().__new__(cls)
            device.ordinal = ordinal
            device._handle = _driver.call("cuDeviceGet", ordinal)
            device._context = None
            device._context_int = 0
            device._attribute_cache = {}
            cls._instances[ordinal] = device
            return device

    def __repr__(self) -> str:
        return f"<Device {self.ordinal}: {self.name} ({self.sm_name})>"

    def __reduce__(self) -> tuple[type[Device], tuple[int]]:
        return (Device, (self.ordinal,))

    # -- context ---------------------------------------------------------------
    def activate(self) -> None:
        """Makes this device's primary context current on the calling thread.

        Every cuda_core call that needs a context calls this first; it costs a
        thread-local lookup when the context is already current.
        """
        if getattr(_tls, "context", 0) == self._context_int and self._context_int:
            return
        if self._context is None:
            with Device._instances_lock:
                if self._context is None:
                    context = _driver.call("cuDevicePrimaryCtxRetain", self._handle)
                    self._context_int = int(context)
                    self._context = context
                    _driver.on_exit(self._release_primary_context)
                    self._retained_by = _driver.api()
        _driver.call("cuCtxSetCurrent", self._context)
        _tls.context = self._context_int

    def _release_primary_context(self) -> None:
        if self._context is not None:
            self._retained_by.cuDevicePrimaryCtxRelease(self._handle)
            self._context = None
            self._context_int = 0

    @property
    def context_handle(self) -> int:
        """The primary context's handle (retained on first use)."""
        self.activate()
        return self._context_int

    def synchronize(self) -> None:
        """Blocks until all work on this device's primary context has finished."""
        self.activate()
        _driver.call("cuCtxSynchronize")

    # -- attributes ------------------------------------------------------------
    def attribute(self, attribute: str | Any) -> int:
        """Any device attribute, by ``CUdevice_attribute`` or by name.

        Names may be given without the ``CU_DEVICE_ATTRIBUTE_`` prefix and in any
        case, e.g. ``device.attribute("max_threads_per_block")``.
        """
        if isinstance(attribute, str):
            key = attribute.upper()
            cached = self._attribute_cache.get(key)
            if cached is not None:
                return cached
            enum = _driver.enum_member(_driver.api().CUdevice_attribute, "CU_DEVICE_ATTRIBUTE_", attribute,
                                       "Device.attribute")
        else:
            enum, key = attribute, str(getattr(attribute, "name", attribute))
        value = int(_driver.call("cuDeviceGetAttribute", enum, self._handle))
        self._attribute_cache[key] = value
        return value

    @property
    def name(self) -> str:
        """The marketing name, e.g. ``"NVIDIA H200"``."""
        raw = _driver.call("cuDeviceGetName", 256, self._handle)
        return bytes(raw).split(b"\0", 1)[0].decode()

    @property
    def compute_capability(self) -> tuple[int, int]:
        """(major, minor), e.g. (9, 0) for Hopper."""
        return (
            self.attribute("COMPUTE_CAPABILITY_MAJOR"),
            self.attribute("COMPUTE_CAPABILITY_MINOR"),
        )

    @property
    def sm_name(self) -> str:
        """The architecture name tileiras and ptxas take, e.g. ``"sm_90"``."""
        major, minor = self.compute_capability
        return f"sm_{major}{minor}"

    @property
    def sm_count(self) -> int:
        """Number of streaming multiprocessors."""
        return self.attribute("MULTIPROCESSOR_COUNT")

    @property
    def total_memory(self) -> int:
        """Total device memory in bytes."""
        return int(_driver.call("cuDeviceTotalMem", self._handle))

    def memory_info(self) -> MemoryInfo:
        """Free and total device memory in bytes, as the driver sees them now."""
        self.activate()
        free, total = _driver.call("cuMemGetInfo")
        return MemoryInfo(int(free), int(total))

    @property
    def free_memory(self) -> int:
        """Free device memory in bytes right now."""
        return self.memory_info().free

    @property
    def l2_cache_size(self) -> int:
        """L2 cache size in bytes."""
        return self.attribute("L2_CACHE_SIZE")

    @property
    def max_shared_memory_per_block(self) -> int:
        """Shared memory a block may use without opting in (bytes)."""
        return self.attribute("MAX_SHARED_MEMORY_PER_BLOCK")

    @property
    def max_shared_memory_per_block_optin(self) -> int:
        """Shared memory a block may use after raising its dynamic limit (bytes)."""
        return self.attribute("MAX_SHARED_MEMORY_PER_BLOCK_OPTIN")

    @property
    def max_threads_per_block(self) -> int:
        """The largest block a kernel may be launched with."""
        return self.attribute("MAX_THREADS_PER_BLOCK")

    @property
    def pci_bus_id(self) -> str:
        """The PCI bus id, e.g. ``"0000:3B:00.0"``."""
        raw = _driver.call("cuDeviceGetPCIBusId", 32, self._handle)
        return bytes(raw).split(b"\0", 1)[0].decode() if not isinstance(raw, str) else raw


def current_device() -> Device:
    """The device whose context cuda_core last made current on this thread (device 0 if none)."""
    context = getattr(_tls, "context", 0)
    for device in list(Device._instances.values()):
        if context and device._context_int == context:
            return device
    return Device(0)


def resolve_device(device: Device | int | None) -> Device:
    """Accepts a `Device`, an ordinal or None (the current device), activated."""
    if device is None:
        resolved = current_device()
    elif isinstance(device, Device):
        resolved = device
    else:
        resolved = Device(device)
    resolved.activate()
    return resolved
