"""cuda_async's C interface for native launch paths of the layers above
(``native/batch_api.h``): the steady state of a leaf op repeated in a `batch`,
and `rlock`, the reentrant lock cuda_async's bookkeeping is guarded by, which
C code takes without a Python call.

The extension is loaded (built once, then from the disk cache) at import, by
`cuda_core.native.load_extension`: the locks made with `rlock` at import must be
the native ones from the start. Without it (no C compiler or Python headers,
``CUDA_CORE_NATIVE=0``, or under the default ``auto`` no GPU to serve) the locks
are `threading.RLock` and `batch_api` raises: callers take their Python paths.
The Python path stays the reference: every state but the steady one is its.
"""

from __future__ import annotations

import threading
from pathlib import Path
from types import ModuleType
from typing import Any

from cuda_core.native import NativeUnavailable, load_extension

NATIVE_DIR = Path(__file__).parent / "native"  # the C source and batch_api.h (for callers' builds)

_module: ModuleType | None
_reason: str | None
try:
    _module = load_extension("cuda_async._native_batch", NATIVE_DIR / "_native_batch.c", (NATIVE_DIR,))
    _reason = None
except (NativeUnavailable, OSError) as exc:
    _module, _reason = None, str(exc)
_configured = False


def rlock() -> Any:
    """A reentrant lock: the native one (which C callers take directly) when the
    extension is available, else `threading.RLock`."""
    return _module.RLock() if _module is not None else threading.RLock()


def batch_api() -> ModuleType:
    """The configured extension; its ``API`` capsule is a ``CudaAsyncBatchAPI``.
    Raises `cuda_core.native.NativeUnavailable` with the reason."""
    global _configured
    if _module is None:
        raise NativeUnavailable(_reason or "cuda_async's native extension is unavailable")
    if not _configured:
        from cuda_async import _batch, _capture, _ledger, _policy, _streams
        from cuda_async._ledger import ClaimPlan
        from cuda_async._resource import AccessSet, Job, Resource

        # The slot descriptors of cuda_async's own state that its C API reads and writes.
        descriptors = {
            f"{cls.__name__}.{name}": vars(cls)[name]
            for cls, names in ((Resource, ("_last_write", "_reads")), (Job, ("streams",)),
                               (_streams.StreamState, ("epoch", "interest")), (_batch.Batch, ("ops", "_fast")),
                               (AccessSet, ("accesses", "interest")), (ClaimPlan, ("lists", "entries")))
            for name in names
        }
        _module.configure(_batch._active, _ledger.lock, _streams._lock, descriptors, _capture._active,
                          _policy, _policy._scoped, _policy.RoundRobin, _policy.SingleStream, _streams.state,
                          _ledger.dropped)
        _configured = True
    return _module
