/* cuda_async's C interface for native launch paths (used by cutile's): the ledger's
 * claims and the two states of a leaf op that C may run alone.
 *
 * Objects: a ClaimPlan (cuda_async.ClaimPlan) is the holds an op takes on its
 * memory, made once by the caller; an AccessSet is the op's resources, whose spans
 * are the plan's. The caller holds them; this API reads and changes the ledger
 * and cuda_async's bookkeeping, which nothing else in C touches.
 *
 * Locks: the ledger and the stream bookkeeping are guarded by the extension's
 * `RLock`s (put in place of cuda_async's `threading.RLock`s when it is loaded),
 * reentrant locks that C code takes without a Python call (`lock_try_acquire` /
 * `lock_release`).
 *
 * Every function answers 0 for a state it does not handle (nothing changed): the
 * caller takes its Python path, which handles every case and raises every error.
 */
#ifndef CUDA_ASYNC_BATCH_API_H
#define CUDA_ASYNC_BATCH_API_H

#include <Python.h>

#define CUDA_ASYNC_BATCH_API_VERSION 4
#define CUDA_ASYNC_BATCH_API_CAPSULE "cuda_async._native_batch.API"

/* A leaf op repeated inside an active `batch` usually finds the ledger as its
 * previous run left it: the batch's job holds the plan's spans, the last accesses
 * are on the batch's stream, nothing else was enqueued in between. `begin` checks
 * that state, gives the claim's pending holds back (the job's cover them) and keeps
 * the ledger locked; the caller enqueues on txn->stream_handle, then `commit`s
 * (records the accesses as `Job.record` does) or `abort`s. */
typedef struct {
    PyObject *batch, *job, *points, *stream, *state; /* strong references while begun */
    unsigned long long stream_handle;
} CudaAsyncBatchTxn;

/* A synchronous run outside any batch and capture: `sync_begin` finds the memory
 * idle (no running hold, no pending access), turns the claim's pending holds into
 * the holds of `run` (a ClaimPlan whose owner is a Job the caller keeps for this
 * purpose) on the default policy's next stream and returns with the ledger
 * unlocked; the caller launches, waits for the stream (without the GIL: the holds
 * keep other threads out), and calls `sync_end`, which gives them back. */
typedef struct {
    PyObject *access_set, *run, *state; /* strong references while begun */
    unsigned long long stream_handle;
} CudaAsyncSyncTxn;

typedef struct {
    int version;
    /* Takes the plan's pending holds (an op made now, run later; the running holds of
     * the open batch's job and of the job it follows are no conflict). 1 taken; 0
     * another hold may conflict (the Python path decides and names it); -1 error set. */
    int (*claim)(PyObject *plan);
    /* Gives a claim back from a finalizer (queued: safe anywhere, errors unraisable). */
    void (*drop)(PyObject *plan);
    /* 1: begun (ledger locked, the claim given back); 0: not the steady state; -1: error set. */
    int (*begin)(PyObject *access_set, PyObject *claimed, CudaAsyncBatchTxn *txn);
    /* Records the accesses at the stream's next epoch, unlocks. 0 or -1 (error set). */
    int (*commit)(PyObject *access_set, CudaAsyncBatchTxn *txn);
    /* Unlocks without recording. */
    void (*abort)(CudaAsyncBatchTxn *txn);
    /* 1: begun (the run's holds taken, the claim's given back); 0: not idle; -1: error set. */
    int (*sync_begin)(PyObject *access_set, PyObject *claimed, PyObject *run, CudaAsyncSyncTxn *txn);
    /* Gives the run's holds back (waiting for the ledger lock without the GIL); `ran`:
     * the op was enqueued (the stream advances). 0, or -1 with an error set. */
    int (*sync_end)(CudaAsyncSyncTxn *txn, int ran);
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
