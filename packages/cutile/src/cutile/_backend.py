"""Which backend runs kernels: the GPU, or the CPU interpreter.

``CUTILE_BACKEND`` = ``gpu`` | ``interpreter`` | ``auto`` (default). ``auto`` uses
the GPU where cuda_core finds one, else the interpreter, and says so once, as a
warning of the ``cutile.backend`` logger (on stderr unless the application
configures logging); nothing falls back silently.
"""

from __future__ import annotations

import logging
import threading

from cutile._errors import CutileError
from cutile import _config

_log = logging.getLogger("cutile.backend")
_lock = threading.Lock()
_chosen: str | None = None


class BackendError(CutileError, RuntimeError):
    """CUTILE_BACKEND asks for a backend that cannot run here."""


def _requested() -> str:
    try:
        return _config.BACKEND.get()
    except _config.ConfigError as exc:
        raise BackendError(str(exc)) from None


def gpu_unavailable_reason() -> str | None:
    """None when a GPU can be used, else why not (`cuda_core.unavailable_reason`)."""
    import cuda_core

    return cuda_core.unavailable_reason()


def explain() -> tuple[str | None, str]:
    """The backend `current` would choose now, and why, without choosing it (for
    ``cutile info``); the backend is None where kernels could not run (``CUTILE_BACKEND``
    malformed, or ``gpu`` without a GPU: launches raise `BackendError`)."""
    if _chosen is not None:
        return _chosen, "chosen already in this process"
    try:
        requested = _requested()
    except BackendError as exc:
        return None, str(exc)
    if requested == "interpreter":
        return "interpreter", "CUTILE_BACKEND=interpreter"
    reason = gpu_unavailable_reason()
    if reason is None:
        return "gpu", f"CUTILE_BACKEND={requested} and a GPU is present"
    if requested == "gpu":
        return None, f"CUTILE_BACKEND=gpu but no GPU can be used: {reason}"
    return "interpreter", f"CUTILE_BACKEND=auto and no GPU is available: {reason}"


def current() -> str:
    """``"gpu"`` or ``"interpreter"``, decided once per process."""
    global _chosen
    chosen = _chosen
    if chosen is not None:
        return chosen
    with _lock:
        requested = _requested()
        if requested == "interpreter":
            _chosen = "interpreter"
            _use_host_policy()
        else:
            reason = gpu_unavailable_reason()
            if reason is None:
                _chosen = "gpu"  # (the native launch path is loaded at the first launch: `cutile._native.load`)
            elif requested == "gpu":
                raise BackendError(f"CUTILE_BACKEND=gpu but no GPU can be used: {reason}")
            else:
                _log.warning("cutile: no GPU available (%s); running kernels on the CPU interpreter", reason)
                _chosen = "interpreter"
                _use_host_policy()
        return _chosen


def _use_host_policy() -> None:
    # The interpreter runs every op eagerly on the host: cuda_async's host policy.
    import cuda_async

    cuda_async.set_default_policy(cuda_async.HostPolicy())


def reset_for_tests(value: str | None = None) -> None:
    """Forgets (or forces) the choice; for tests only."""
    global _chosen
    _chosen = value
    if value == "interpreter":
        _use_host_policy()
    elif value == "gpu":
        import cuda_async

        cuda_async.set_default_policy(None)  # the default: streams where a GPU is
