"""cuda_async's C interface for native launch paths of the layers above
(``native/batch_api.h``): the steady state of a leaf op repeated in a `batch`.

Importing cuda_async builds and loads nothing native: the extension is built (once,
then loaded from the disk cache, by `cuda_core.native.load_extension`) at the first
`batch_api` call, i.e. when a layer above first takes its native path. cuda_async's
bookkeeping is guarded by two reentrant locks, `_ledger.lock` and `_streams._lock`:
`threading.RLock`s until then; the first `batch_api` call puts the extension's
``RLock``s (which its C code takes without a Python call) in their place, at a moment
when that is safe (neither is held and no other thread runs cuda_async's code, so no
thread holds a reference to an old one it is about to take; it waits a moment for
such a thread to leave). Without the extension (no C compiler or Python headers,
``CUDA_CORE_NATIVE=0``, or under the default ``auto`` no GPU to serve) `batch_api`
raises: callers take their Python paths. The Python path stays the reference: every
state but the steady one is its.
"""

from __future__ import annotations

import time
from pathlib import Path
from types import ModuleType

from cuda_core.native import NativeUnavailable, load_extension

NATIVE_DIR = Path(__file__).parent / "native"  # the C source and batch_api.h (for callers' builds)

_module: ModuleType | None = None
_INSTALL_TRIES = 50  # (1 ms apart)


def batch_api() -> ModuleType:
    """The configured extension (built and loaded at the first call); its ``API``
    capsule is a ``CudaAsyncBatchAPI``. Raises `cuda_core.native.NativeUnavailable`
    with the reason."""
    global _module
    if _module is None:
        module = load_extension("cuda_async._native_batch", NATIVE_DIR / "_native_batch.c", (NATIVE_DIR,))
        from cuda_async import _batch, _capture, _ledger, _policy, _resource, _streams
        from cuda_async._ledger import ClaimPlan
        from cuda_async._resource import AccessSet, Job, Resource

        # Every global that holds one of the two locks.
        ledger_lock, streams_lock = module.RLock(), module.RLock()
        places = [(vars(_ledger), "lock", ledger_lock), (vars(_resource), "_ledger_lock", ledger_lock),
                  (vars(_streams), "_lock", streams_lock), (vars(_resource), "_streams_lock", streams_lock)]
        for _ in range(_INSTALL_TRIES):
            if module.install_locks(places, str(Path(__file__).parent)):
                break
            time.sleep(0.001)  # (held, or another thread is inside cuda_async: let it leave)
        else:
            raise NativeUnavailable("another thread stayed inside cuda_async's bookkeeping while its native "
                                    "locks were to be put in place")
        # The slot descriptors of cuda_async's own state that its C API reads and writes.
        descriptors = {
            f"{cls.__name__}.{name}": vars(cls)[name]
            for cls, names in ((Resource, ("_last_write", "_reads")), (Job, ("streams",)),
                               (_streams.StreamState, ("epoch", "interest")), (_batch.Batch, ("ops", "_fast")),
                               (AccessSet, ("accesses", "interest")), (ClaimPlan, ("lists", "entries")))
            for name in names
        }
        module.configure(_batch._active, _ledger.lock, _streams._lock, descriptors, _capture._active,
                         _policy, _policy._scoped, _policy.RoundRobin, _policy.SingleStream, _streams.state,
                         _ledger.dropped)
        _module = module
    return _module
