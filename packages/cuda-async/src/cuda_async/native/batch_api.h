/* cuda_async's C interface for native launch paths (used by cutile's).
 *
 * Locks: cuda_async's ledger and stream bookkeeping, and the callers' own state,
 * are guarded by `cuda_async._native.rlock()` locks, reentrant locks that C code
 * takes without a Python call (`lock_try_acquire` / `lock_release`).
 *
 * A leaf op repeated inside an active `batch` usually finds the ledger exactly as
 * its previous run left it: the batch's job already holds its resources, their
 * last accesses are on the batch's stream, nothing else was enqueued in between.
 * `begin` checks that state for an AccessSet and, when it holds, keeps the ledger
 * locked; the caller enqueues its work on txn->stream_handle, then calls `commit`
 * (which records the accesses as `Job.record` does) or `abort`. Any other state
 * answers 0: the caller takes the Python path, which handles every case.
 */
#ifndef CUDA_ASYNC_BATCH_API_H
#define CUDA_ASYNC_BATCH_API_H

#include <Python.h>

#define CUDA_ASYNC_BATCH_API_VERSION 2
#define CUDA_ASYNC_BATCH_API_CAPSULE "cuda_async._native_batch.API"

typedef struct {
    PyObject *batch, *job, *points, *stream, *state; /* strong references while begun */
    unsigned long long stream_handle;
} CudaAsyncBatchTxn;

/* A synchronous run outside any batch and capture: `sync_begin` finds the resources
 * idle (no holder, no pending access), takes their holds for `job` (a Job the
 * caller keeps for this purpose) on the default policy's next stream and returns
 * with the ledger unlocked; the caller launches, waits for the stream (without the
 * GIL: the holds keep other threads out), and calls `sync_end`. */
typedef struct {
    PyObject *access_set, *job, *state; /* strong references while begun */
    unsigned long long stream_handle;
} CudaAsyncSyncTxn;

typedef struct {
    int version;
    /* 1: begun (ledger locked); 0: not the steady state (nothing held); -1: error set. */
    int (*begin)(PyObject *access_set, CudaAsyncBatchTxn *txn);
    /* Records the accesses at the stream's next epoch, unlocks. 0 or -1 (error set). */
    int (*commit)(PyObject *access_set, CudaAsyncBatchTxn *txn);
    /* Unlocks without recording. */
    void (*abort)(CudaAsyncBatchTxn *txn);
    /* On an rlock(): 1 acquired (by this thread, reentrantly), 0 held by another thread. */
    int (*lock_try_acquire)(PyObject *lock);
    void (*lock_release)(PyObject *lock);
    PyTypeObject *lock_type;
    /* 1: begun (holds taken); 0: not the steady state (nothing taken); -1: error set. */
    int (*sync_begin)(PyObject *access_set, PyObject *job, PyObject *name, CudaAsyncSyncTxn *txn);
    /* Gives the holds back (waiting for the ledger lock without the GIL); `ran`: the
     * op was enqueued (the stream advances). 0, or -1 with an error set. */
    int (*sync_end)(CudaAsyncSyncTxn *txn, int ran);
    /* Whether an op with these accesses may be made now without the Python path's
     * check (`check_startable`): 1 when no pending job holds its resources but the
     * batch open on this thread; 0: the caller's Python path checks; -1: error set. */
    int (*startable)(PyObject *access_set);
} CudaAsyncBatchAPI;

/* The object the weak reference `ref` points to, or None once it is dead: for
 * comparisons only (borrowed; valid while the caller holds the object otherwise). */
static inline PyObject *cuda_async_referent(PyObject *ref) {
#if PY_VERSION_HEX >= 0x030D0000
    PyObject *target = NULL;
    if (PyWeakref_GetRef(ref, &target) <= 0) { PyErr_Clear(); return Py_None; }
    Py_DECREF(target);
    return target;
#else
    return PyWeakref_GetObject(ref);
#endif
}

#endif
