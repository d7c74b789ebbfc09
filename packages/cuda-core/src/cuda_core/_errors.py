"""The exceptions of cuda_core: every failing driver call becomes a `CudaError`."""

from __future__ import annotations

# CUresult codes grouped by the exception a caller most likely wants to catch.
# Values are the CUDA driver's (cuda.h); they never change across versions.
_OUT_OF_MEMORY = frozenset({2})
_INVALID_VALUE = frozenset({1, 101, 400})  # invalid value, invalid device, invalid handle
_NO_DEVICE = frozenset({3, 4, 34, 46, 100, 803, 804})  # not initialized, deinitialized,
# stub library, device unavailable, no device, system driver mismatch, compat not supported
_LAUNCH_FAILURE = frozenset({700, 701, 702, 714, 715, 716, 717, 718, 719, 720})
NOT_READY = 600  # CUDA_ERROR_NOT_READY: a query's "not yet", not an error

# Short explanations used when the driver itself cannot be asked (no driver
# loaded) or returns none; the driver's own string is preferred when available.
_FALLBACK_MESSAGES = {
    1: "invalid argument",
    2: "out of memory",
    3: "initialization error",
    34: "CUDA driver is a stub library",
    46: "CUDA-capable device is busy or unavailable",
    100: "no CUDA-capable device is detected",
    101: "invalid device ordinal",
    400: "invalid resource handle",
    700: "an illegal memory access was encountered",
    719: "unspecified launch failure",
}


class CudaError(RuntimeError):
    """A CUDA driver call failed.

    Attributes:
        code: the `CUresult` value as an int; -1 when the driver library itself
            could not be loaded (no call was made).
        name: the CUDA error name, e.g. ``"CUDA_ERROR_OUT_OF_MEMORY"``.
        message: the driver's explanation of the error.
        call: the driver call that failed, e.g. ``"cuMemAlloc"``, with a short
            description of what cuda_core was doing when it is useful.
    """

    def __init__(self, code: int, name: str, message: str, call: str) -> None:
        self.code = code
        self.name = name
        self.message = message
        self.call = call
        super().__init__(code, name, message, call)

    def __str__(self) -> str:
        # Built from the fields, so that a layer refining ``call`` or ``message``
        # (e.g. naming the image a module load failed on) changes what is shown.
        return f"{self.call} failed: {self.name} ({self.message})"


class CudaOutOfMemoryError(CudaError, MemoryError):
    """The device (or pinned host memory) has no room for the allocation."""


class CudaInvalidValueError(CudaError, ValueError):
    """An argument, device ordinal or handle was rejected by the driver."""


class CudaLaunchError(CudaError):
    """A kernel launch failed or a kernel faulted (the context may be unusable)."""


class CudaNoDeviceError(CudaError):
    """No usable NVIDIA driver or GPU is present."""


def error_class(code: int) -> type[CudaError]:
    """The most specific `CudaError` subclass for a CUresult code."""
    if code in _OUT_OF_MEMORY:
        return CudaOutOfMemoryError
    if code in _INVALID_VALUE:
        return CudaInvalidValueError
    if code in _NO_DEVICE or code == -1:
        return CudaNoDeviceError
    if code in _LAUNCH_FAILURE:
        return CudaLaunchError
    return CudaError


def make_error(code: int, name: str, message: str | None, call: str) -> CudaError:
    """Builds the exception for a failed call; `message` falls back to a fixed table."""
    text = message or _FALLBACK_MESSAGES.get(code, "no description available")
    return error_class(code)(code, name, text, call)


def no_driver_error(reason: str) -> CudaNoDeviceError:
    """The error raised on first use when the driver library cannot be loaded."""
    return CudaNoDeviceError(
        -1,
        "CUDA_ERROR_NO_DRIVER",
        "no NVIDIA driver was found on this machine, so no GPU can be used; "
        "install the NVIDIA driver, or use a backend that runs on the CPU. "
        f"Loader said: {reason}",
        "cuInit",
    )
