"""The one place that talks to ``cuda.bindings.driver``.

Everything in cuda_core calls the driver through `call` (or, on hot paths, a
function fetched once from `api()`), so that failures are mapped to `CudaError`
in one place and tests can substitute a fake driver module.
"""

from __future__ import annotations

import atexit
import copy
import threading
from collections.abc import Callable
from typing import Any

from cuda_core._errors import NOT_READY, CudaError, make_error, no_driver_error

# The driver module in use; tests replace it with a fake through `use_driver`.
# ``cuda.bindings.driver`` is imported on first need (`in_use`), not with cuda_core:
# an import of the layers above that never reaches the driver does not pay for it.
_NOT_IMPORTED: Any = object()
_api: Any = _NOT_IMPORTED
_IMPORT_ERROR: str | None = None  # why cuda-bindings is not importable, once tried
_init_lock = threading.RLock()  # (reentrant: `_initialize` calls `in_use`)
_initialized = False
# Why cuInit failed, raised again on every later use; each raise is of a copy: a raised
# exception keeps its traceback, and with it the frames and arguments of the call that
# raised it, which the kept one must not keep alive.
_init_failure: CudaError | None = None
# Set once the interpreter is exiting: finalizers must not call into a driver
# whose contexts are being torn down.
shutting_down = False
_exit_hooks: list[Callable[[], None]] = []


def api() -> Any:
    """The driver module, initialized (`cuInit`) on first use."""
    if not _initialized:
        _initialize()
    return _api


def in_use() -> Any:
    """The driver module in use, without initializing it (for finalizers, which
    compare it with the module that made their handle); None when cuda-bindings is
    not importable (`_IMPORT_ERROR` says why)."""
    global _api, _IMPORT_ERROR
    if _api is _NOT_IMPORTED:
        with _init_lock:
            if _api is _NOT_IMPORTED:
                try:
                    from cuda.bindings import driver
                except ImportError as exc:  # cuda-bindings missing: import still works, use fails
                    _IMPORT_ERROR = str(exc)
                    _api = None
                else:
                    _api = driver
    return _api


def _initialize() -> None:
    global _initialized, _init_failure
    with _init_lock:
        if _initialized:
            return
        if _init_failure is not None:
            raise copy.copy(_init_failure)
        if in_use() is None:
            _init_failure = no_driver_error(f"cuda-bindings is not importable ({_IMPORT_ERROR})")
            raise copy.copy(_init_failure)
        try:
            result = _api.cuInit(0)
        except (RuntimeError, OSError) as exc:  # DynamicLibNotFoundError is a RuntimeError
            _init_failure = no_driver_error(str(exc))
            raise copy.copy(_init_failure) from None
        if int(result[0]) != 0:
            _init_failure = _error_from(result[0], "cuInit")
            if int(result[0]) == 100:
                _init_failure.message = (
                    "the NVIDIA driver is installed but sees no GPU "
                    "(is CUDA_VISIBLE_DEVICES empty, or the device busy or absent?)"
                )
            raise copy.copy(_init_failure)
        _initialized = True


def _error_from(result: Any, call: str) -> CudaError:
    code = int(result)
    try:
        name = _api.CUresult(code).name
    except (ValueError, AttributeError):
        name = f"CUDA_ERROR_{code}"
    message: str | None = None
    try:
        err, text = _api.cuGetErrorString(result)
        if int(err) == 0 and text:
            message = text.decode() if isinstance(text, bytes) else str(text)
    except Exception:  # the driver may be unusable after a fault; keep the code
        message = None
    return make_error(code, name, message, call)


def raise_error(result: Any, call: str) -> None:
    """Raises the `CudaError` for a non-success CUresult of `call`."""
    raise _error_from(result, call)


def call(name: str, *args: Any) -> Any:
    """Calls driver function `name`; returns its outputs (None, one value, or a tuple).

    Raises the `CudaError` subclass that matches the CUresult on failure.
    """
    out = getattr(api(), name)(*args)
    if out[0]:
        raise _error_from(out[0], name)
    if len(out) == 1:
        return None
    if len(out) == 2:
        return out[1]
    return out[1:]


def enum_member(enum: Any, prefix: str, name: str, what: str) -> Any:
    """The member of a driver enum named ``name`` (any case, ``prefix`` optional),
    e.g. ``enum_member(api.CUdevice_attribute, "CU_DEVICE_ATTRIBUTE_", "warp_size", ...)``;
    an unknown name raises ValueError naming ``what`` and the closest names."""
    key = name.upper()
    if not key.startswith(prefix):
        key = prefix + key
    member = getattr(enum, key, None)
    if member is None:
        import difflib  # (only to name the closest: a first launch asks for known ones)

        close = difflib.get_close_matches(key, [n for n in dir(enum) if n.startswith(prefix)], n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise ValueError(f"{what}: unknown attribute {name!r}{hint}")
    return member


def query(name: str, handle: Any) -> bool:
    """Calls a completion query (``cuStreamQuery``, ``cuEventQuery``): True when the
    work is done, False for CUDA_ERROR_NOT_READY (an answer, not an error)."""
    result = getattr(api(), name)(handle)[0]
    if int(result) == NOT_READY:
        return False
    if result:
        raise_error(result, name)
    return True


def release(driver: Any, function_name: str, *args: Any) -> None:
    """Finalizer body: calls ``driver.function_name(*args)`` unless exiting.

    Finalizers are given the driver module that created the handle (not the
    one current when they run), and ignore the result: a failed release at
    collection time has no caller to report to.
    """
    if not shutting_down and not defer_while_capturing(release, driver, function_name, *args):
        getattr(driver, function_name)(*args)


# A thread recording a CUDA graph must not make calls a capture forbids (freeing
# memory, unloading a module...): a finalizer that runs on it then (the garbage
# collector runs anywhere) would invalidate the capture. Such calls wait until the
# thread's capture ends.
_capture_state = threading.local()


def capture_started() -> None:
    """Notes that this thread has begun a stream capture."""
    _capture_state.depth = getattr(_capture_state, "depth", 0) + 1


def capture_ended() -> None:
    """Notes that this thread's capture ended; runs the releases it deferred."""
    depth = getattr(_capture_state, "depth", 0) - 1
    _capture_state.depth = max(depth, 0)
    if depth <= 0:
        deferred: list[tuple[Callable[..., None], tuple[Any, ...]]] = getattr(_capture_state, "deferred", [])
        _capture_state.deferred = []
        for function, args in deferred:
            try:
                function(*args)
            except Exception:  # a finalizer's failure has no caller to report to
                pass


def defer_while_capturing(function: Callable[..., None], *args: Any) -> bool:
    """If this thread is capturing, queues ``function(*args)`` for the end of the
    capture and returns True; otherwise returns False (the caller runs it)."""
    if not getattr(_capture_state, "depth", 0):
        return False
    deferred = getattr(_capture_state, "deferred", None)
    if deferred is None:
        deferred = _capture_state.deferred = []
    deferred.append((function, args))
    return True


def use_driver(module: Any) -> Any:
    """Replaces the driver module (for tests); returns the previous one.

    Resets initialization so that the next use calls ``module.cuInit``.
    """
    global _api, _initialized, _init_failure
    previous = in_use()
    _api = module
    _initialized = False
    _init_failure = None
    for hook in _driver_change_hooks:
        hook()
    return previous


_driver_change_hooks: list[Callable[[], None]] = []


def on_driver_change(hook: Callable[[], None]) -> None:
    """Registers a hook run whenever `use_driver` swaps the driver (native launch
    paths forget the handles they took from the previous one)."""
    _driver_change_hooks.append(hook)


def on_exit(hook: Callable[[], None]) -> None:
    """Registers a hook run at interpreter exit, after `shutting_down` is set."""
    _exit_hooks.append(hook)


@atexit.register
def _at_exit() -> None:
    # Registered at import, so it runs after atexit handlers registered later
    # (weakref.finalize's included): finalizers see live contexts first, then
    # the contexts are released and any finalizer that runs afterwards is a no-op.
    global shutting_down
    shutting_down = True
    for hook in reversed(_exit_hooks):
        try:
            hook()
        except Exception:  # the process is exiting; nothing useful to report to
            pass
