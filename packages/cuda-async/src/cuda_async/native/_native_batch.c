/* cuda_async._native_batch: the C API of cuda_async's ledger (see batch_api.h) for
 * the native launch paths: claims of pending ops, the steady state of a leaf op
 * repeated in a batch and a synchronous run on idle memory. It mirrors, for those
 * states, what ClaimPlan.claim and FnOp._enqueue do in Python: before_enqueue
 * (nothing to mark), Job.acquire (no conflict, no new hold, no wait), Job.record.
 * It works on the ledger's own lists (`_ledger.holds`) and on the state of
 * cuda_async's classes, handed over by cuda_async._native.configure as the slot
 * descriptors of those classes; its callers see none of it. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "batch_api.h"

enum { D_LAST_WRITE, D_READS, D_JOB_STREAMS, D_STATE_EPOCH, D_STATE_INTEREST,
       D_BATCH_OPS, D_BATCH_FAST, D_ACCESSES, D_INTEREST, D_LISTS, D_ENTRIES, D_COUNT };
static const char *descriptor_names[D_COUNT] = {
    "Resource._last_write", "Resource._reads", "Job.streams", "StreamState.epoch",
    "StreamState.interest", "Batch.ops", "Batch._fast", "AccessSet.accesses", "AccessSet.interest",
    "ClaimPlan.lists", "ClaimPlan.entries"};

static PyObject *descriptors[D_COUNT];
static PyObject *active_batch;      /* the ContextVar of the batch active on this thread/task */
static PyObject *ledger_lock, *streams_lock;
static PyObject *dropped_claims;    /* cuda_async._ledger.dropped: claims given back by finalizers */
static PyObject *active_captures;   /* cuda_async._capture._active: every thread's capture */
static PyObject *policy_module;     /* cuda_async._policy: its _scoped ContextVar, _default, default_policy */
static PyObject *scoped_policy;     /* cuda_async._policy._scoped */
static PyObject *round_robin_type, *single_stream_type;
static PyObject *stream_state;      /* cuda_async._streams.state */
static PyObject *str_next_stream, *str_handle, *str_default, *str_default_policy, *str_streams, *str_counter,
    *str_stream;
static int configured;
#define STREAM_CACHE_SIZE 16

/* -- RLock: a reentrant lock C code takes without a Python call --------------------------- */
typedef struct {
    PyObject_HEAD
    PyThread_type_lock lock;
    unsigned long owner, count;
} RLockObject;

static PyTypeObject RLockType;

static int lock_try_acquire(PyObject *obj) {
    RLockObject *self = (RLockObject *)obj;
    unsigned long me = PyThread_get_thread_ident();
    if (self->count && self->owner == me) { self->count++; return 1; }
    if (!PyThread_acquire_lock(self->lock, NOWAIT_LOCK)) return 0;
    self->owner = me;
    self->count = 1;
    return 1;
}

static void lock_release(PyObject *obj) {
    RLockObject *self = (RLockObject *)obj;
    if (--self->count == 0) {
        self->owner = 0;
        PyThread_release_lock(self->lock);
    }
}

static PyObject *rlock_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    if (PyTuple_GET_SIZE(args) || (kwargs && PyDict_GET_SIZE(kwargs)))
        return PyErr_Format(PyExc_TypeError, "RLock() takes no arguments");
    RLockObject *self = (RLockObject *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    self->lock = PyThread_allocate_lock();
    if (self->lock == NULL) { Py_DECREF(self); return PyErr_NoMemory(); }
    return (PyObject *)self;
}

static void rlock_dealloc(RLockObject *self) {
    if (self->lock != NULL) {
        if (self->count) PyThread_release_lock(self->lock);
        PyThread_free_lock(self->lock);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Blocks (without the GIL) until this thread holds the lock; with `interruptible`,
 * signals are checked every 50 ms (-1: a handler raised). */
static int lock_wait(RLockObject *self, int interruptible) {
    if (lock_try_acquire((PyObject *)self)) return 0;
    for (;;) {
        PyLockStatus status;
        Py_BEGIN_ALLOW_THREADS
        status = PyThread_acquire_lock_timed(self->lock, 50000, 0);
        Py_END_ALLOW_THREADS
        if (status == PY_LOCK_ACQUIRED) break;
        if (interruptible && PyErr_CheckSignals() < 0) return -1;
    }
    self->owner = PyThread_get_thread_ident();
    self->count = 1;
    return 0;
}

/* acquire(blocking=True), and __enter__ (as threading's RLock's). */
static PyObject *rlock_acquire(RLockObject *self, PyObject *const *args, Py_ssize_t nargs) {
    int blocking = 1;
    if (nargs > 1) return PyErr_Format(PyExc_TypeError, "acquire() takes at most one argument (blocking)");
    if (nargs == 1 && (blocking = PyObject_IsTrue(args[0])) < 0) return NULL;
    if (!blocking) return PyBool_FromLong(lock_try_acquire((PyObject *)self));
    if (lock_wait(self, 1) < 0) return NULL;
    Py_RETURN_TRUE;
}

static PyObject *rlock_release(RLockObject *self, PyObject *unused) {
    if (self->count == 0 || self->owner != PyThread_get_thread_ident())
        return PyErr_Format(PyExc_RuntimeError, "cannot release un-acquired lock");
    lock_release((PyObject *)self);
    Py_RETURN_NONE;
}

static PyObject *rlock_exit(RLockObject *self, PyObject *const *args, Py_ssize_t nargs) {
    return rlock_release(self, NULL);
}

static PyObject *rlock_is_owned(RLockObject *self, PyObject *unused) {
    return PyBool_FromLong(self->count && self->owner == PyThread_get_thread_ident());
}

static PyMethodDef rlock_methods[] = {
    {"acquire", (PyCFunction)(void (*)(void))rlock_acquire, METH_FASTCALL, "acquire(blocking=True) -> bool"},
    {"release", (PyCFunction)rlock_release, METH_NOARGS, NULL},
    {"__enter__", (PyCFunction)(void (*)(void))rlock_acquire, METH_FASTCALL, NULL},
    {"__exit__", (PyCFunction)(void (*)(void))rlock_exit, METH_FASTCALL, NULL},
    {"_is_owned", (PyCFunction)rlock_is_owned, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL}};

static PyTypeObject RLockType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "cuda_async._native_batch.RLock",
    .tp_basicsize = sizeof(RLockObject), .tp_dealloc = (destructor)rlock_dealloc, .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = rlock_new, .tp_methods = rlock_methods,
    .tp_doc = "A reentrant lock that C code can take without a Python call."};
static PyObject *one;

/* The slot `which` of `obj` (a new reference), and its setter. */
static inline PyObject *get(int which, PyObject *obj) {
    return Py_TYPE(descriptors[which])->tp_descr_get(descriptors[which], obj, (PyObject *)Py_TYPE(obj));
}

static inline int set(int which, PyObject *obj, PyObject *value) {
    return Py_TYPE(descriptors[which])->tp_descr_set(descriptors[which], obj, value);
}

static void clear_txn(CudaAsyncBatchTxn *txn) {
    Py_CLEAR(txn->batch); Py_CLEAR(txn->job); Py_CLEAR(txn->points); Py_CLEAR(txn->stream); Py_CLEAR(txn->state);
}

static void txn_abort(CudaAsyncBatchTxn *txn) {
    lock_release(streams_lock);
    lock_release(ledger_lock);
    clear_txn(txn);
}

/* -- the ledger's holds: tuples (start, end, writes, label, owner, what) in one list per domain -- */
typedef struct { unsigned long long start, end; int writes; } Span;

static int span_of(PyObject *hold, Span *span) {
    span->start = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(hold, 0));
    span->end = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(hold, 1));
    span->writes = PyTuple_GET_ITEM(hold, 2) == Py_True;
    return PyErr_Occurred() ? -1 : 0;
}

/* Calls `visit(list, hold, context)` for each hold of `plan` and the ledger list it
 * goes in, while it answers 1: 1, or its first other answer (0; -1 on an error).
 * (Inlined: each caller's `visit` is then a direct call.) */
static inline Py_ALWAYS_INLINE int each_hold(PyObject *plan, int (*visit)(PyObject *, PyObject *, PyObject *), PyObject *context) {
    PyObject *lists = get(D_LISTS, plan), *entries = lists ? get(D_ENTRIES, plan) : NULL;
    int result = entries != NULL ? 1 : -1;
    for (Py_ssize_t i = 0; result == 1 && i < PyTuple_GET_SIZE(entries); i++)
        result = visit(PyTuple_GET_ITEM(lists, i), PyTuple_GET_ITEM(entries, i), context);
    Py_XDECREF(lists); Py_XDECREF(entries);
    return result;
}

/* 1 when no hold of `list` but those of the job `own` (NULL: none) overlaps the span
 * of the hold `entry` in a conflicting way (writes on either side), 0 when one does,
 * -1 error. `own` None: pending holds (owned by None, before any number) do not
 * count, and any running one does. */
static int unshared(PyObject *list, PyObject *entry, PyObject *own) {
    Span span, other;
    if (span_of(entry, &span) < 0) return -1;
    span.writes |= own == Py_None;
    for (Py_ssize_t j = 0; j < PyList_GET_SIZE(list); j++) {
        PyObject *hold = PyList_GET_ITEM(list, j);
        if (PyTuple_GET_ITEM(hold, 4) == own) continue;
        if (span_of(hold, &other) < 0) return -1;
        if (other.start < span.end && span.start < other.end && (span.writes || other.writes)) return 0;
    }
    return 1;
}

/* `unshared` for an op joining a batch: the holds of either job of `joined`, (the
 * batch's job, the job it follows: `batch(after=...)`, whose work its stream orders
 * before the op's; the batch's job again when it follows none), are no conflict. */
static int unshared_joined(PyObject *list, PyObject *entry, PyObject *joined) {
    PyObject *job = PyTuple_GET_ITEM(joined, 0), *follows = PyTuple_GET_ITEM(joined, 1);
    Span span, other;
    if (span_of(entry, &span) < 0) return -1;
    for (Py_ssize_t j = 0; j < PyList_GET_SIZE(list); j++) {
        PyObject *hold = PyList_GET_ITEM(list, j), *owner = PyTuple_GET_ITEM(hold, 4);
        if (owner == job || owner == follows) continue;
        if (span_of(hold, &other) < 0) return -1;
        if (other.start < span.end && span.start < other.end && (span.writes || other.writes)) return 0;
    }
    return 1;
}

static int take_hold(PyObject *list, PyObject *hold, PyObject *unused) {
    return PyList_Append(list, hold) < 0 ? -1 : 1;
}

static int give_back_hold(PyObject *list, PyObject *hold, PyObject *unused) {
    for (Py_ssize_t j = PyList_GET_SIZE(list) - 1; j >= 0; j--)
        if (PyList_GET_ITEM(list, j) == hold) return PyList_SetSlice(list, j, j + 1, NULL) < 0 ? -1 : 1;
    return 1;
}

/* Gives back (remove) or takes (append) every hold of `plan`. 0, or -1 on an error. */
static inline Py_ALWAYS_INLINE int plan_apply(PyObject *plan, int append) {
    return each_hold(plan, append ? take_hold : give_back_hold, NULL) < 0 ? -1 : 0;
}

/* Takes `plan`'s pending holds when none conflicts with a hold but the running ones
 * of the batch open on this thread/task (the op joins it) and of the job that batch
 * follows. 1 taken, 0 not the simple case (nothing taken: the Python path decides, and
 * names a conflict), -1 error. */
static int claim(PyObject *plan) {
    if (!configured) return 0;
    PyObject *batch = NULL, *fast = NULL;
    if (PyContextVar_Get(active_batch, Py_None, &batch) < 0) return -1;
    if (batch != Py_None && (fast = get(D_BATCH_FAST, batch)) == NULL) { Py_DECREF(batch); return -1; }
    /* (the batch's job and the job it follows, or the batch's again: `Batch._fast`'s last item) */
    PyObject *joined = fast != NULL && PyTuple_Check(fast) ? PyTuple_GET_ITEM(fast, 5) : Py_None;
    int result = 0;
    if (lock_try_acquire(ledger_lock)) {
        result = PyObject_Length(dropped_claims) == 0; /* the Python path gives those back first */
        if (result) result = joined == Py_None ? each_hold(plan, unshared, NULL) : each_hold(plan, unshared_joined, joined);
        if (result == 1 && plan_apply(plan, 1) < 0) result = -1; /* appended after every check */
        lock_release(ledger_lock);
    }
    Py_XDECREF(fast); Py_DECREF(batch);
    return result;
}

/* Queues `plan`'s holds to be given back by the next user of the ledger (safe in a
 * finalizer); an exception being raised stays the one raised. */
static void drop(PyObject *plan) {
    if (dropped_claims == NULL) return; /* never configured: nothing held */
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyObject *appended = PyObject_CallMethod(dropped_claims, "append", "O", plan);
    if (appended == NULL) PyErr_WriteUnraisable(dropped_claims);
    Py_XDECREF(appended);
    PyErr_Restore(type, value, tb);
}

/* 1 when the job `job` holds the span of the hold `entry` as strongly (running), 0
 * when not, -1 error. */
static int held_by(PyObject *list, PyObject *entry, PyObject *job) {
    Span span, other;
    if (span_of(entry, &span) < 0) return -1;
    int ok = 0;
    for (Py_ssize_t j = 0; !ok && j < PyList_GET_SIZE(list); j++) {
        PyObject *hold = PyList_GET_ITEM(list, j);
        if (PyTuple_GET_ITEM(hold, 4) != job) continue;
        int writes = PyTuple_GET_ITEM(hold, 2) == Py_True || !span.writes;
        if (PyTuple_GET_ITEM(hold, 0) == PyTuple_GET_ITEM(entry, 0) &&
            PyTuple_GET_ITEM(hold, 1) == PyTuple_GET_ITEM(entry, 1)) { ok = writes; continue; } /* the same ints */
        if (span_of(hold, &other) < 0) return -1;
        ok = other.start == span.start && other.end == span.end && writes;
    }
    return ok;
}

/* Whether every access of `accesses` has its last points on `stream` (no wait needed:
 * the last write on it and, for a write, no read on another); with `stream` NULL,
 * whether none has any recorded access. -1: error. */
static int accesses_on(PyObject *accesses, PyObject *stream) {
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(accesses); i++) {
        PyObject *pair = PyTuple_GET_ITEM(accesses, i), *resource = PyTuple_GET_ITEM(pair, 0);
        long access = stream ? PyLong_AsLong(PyTuple_GET_ITEM(pair, 1)) : 0; /* (idle: any access) */
        if (access == -1 && PyErr_Occurred()) return -1;
        PyObject *last = get(D_LAST_WRITE, resource);
        if (last == NULL) return -1;
        int ok = last == Py_None || (stream && PyTuple_Check(last) && PyTuple_GET_ITEM(last, 0) == stream);
        Py_DECREF(last);
        if (ok && (access == 2 || stream == NULL)) { /* a write waits for readers on other streams */
            PyObject *reads = get(D_READS, resource);
            if (reads == NULL) return -1;
            Py_ssize_t count = PyDict_GET_SIZE(reads);
            ok = count == 0 || (stream && count == 1 && PyDict_Contains(reads, stream) == 1);
            Py_DECREF(reads);
        }
        if (!ok) return 0;
    }
    return 1;
}

/* Whether this op's accesses (`interest`) supersede every access point the stream
 * has not marked with an event (`pending`): then no event is needed before it, as
 * `_streams.before_enqueue` decides (a miss where it would look further). */
static int superseded(PyObject *pending, PyObject *interest) {
    if (pending == interest) return 1;
    if (!PyDict_Check(pending) || !PyDict_Check(interest)) return 0;
    Py_ssize_t position = 0;
    PyObject *resource, *access;
    while (PyDict_Next(pending, &position, &resource, &access)) {
        PyObject *found = PyDict_GetItemWithError(interest, resource);
        if (found == NULL) return PyErr_Occurred() ? -1 : 0;
        long before = PyLong_AsLong(access), now = PyLong_AsLong(found);
        if (PyErr_Occurred()) return -1;
        if (before == 2 ? now != 2 : now <= 0) return 0;
    }
    return 1;
}

static int txn_begin(PyObject *access_set, PyObject *plan, CudaAsyncBatchTxn *txn) {
    memset(txn, 0, sizeof *txn);
    /* A capture anywhere on this thread (an asyncio task may hold one across an
     * await while another runs a batch): DeviceOp.sync records; the Python path. */
    if (!configured || PyList_GET_SIZE(active_captures) != 0) return 0;
    if (PyContextVar_Get(active_batch, Py_None, &txn->batch) < 0) return -1;
    /* The batch's (job, points, stream, state, handle); None once closed. */
    PyObject *fast = txn->batch == Py_None ? Py_NewRef(Py_None) : get(D_BATCH_FAST, txn->batch);
    int result = fast == NULL ? -1 : PyTuple_Check(fast) && PyTuple_GET_SIZE(fast) == 6;
    if (result == 1) {
        PyObject **fields[] = {&txn->job, &txn->points, &txn->stream, &txn->state};
        for (int i = 0; i < 4; i++) *fields[i] = Py_NewRef(PyTuple_GET_ITEM(fast, i));
        txn->stream_handle = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(fast, 4));
        if (PyErr_Occurred()) result = -1;
    }
    Py_XDECREF(fast);
    if (result != 1) { clear_txn(txn); return result; }

    /* Held by another thread: it is changing the ledger; the Python path waits for it. */
    if (!lock_try_acquire(ledger_lock)) { clear_txn(txn); return 0; }
    if (!lock_try_acquire(streams_lock)) { lock_release(ledger_lock); clear_txn(txn); return 0; }

    result = 0;
    PyObject *interest = get(D_INTEREST, access_set);
    PyObject *accesses = interest ? get(D_ACCESSES, access_set) : NULL;
    PyObject *pending = accesses ? get(D_STATE_INTEREST, txn->state) : NULL;
    PyObject *streams = pending ? get(D_JOB_STREAMS, txn->job) : NULL;
    if (streams == NULL) result = -1;
    else if (superseded(pending, interest) == 1 && PyDict_Contains(streams, txn->stream) == 1) {
        /* The steady state: the job holds every span as strongly, no access needs a wait. */
        result = each_hold(plan, held_by, txn->job);
        if (result == 1) result = accesses_on(accesses, txn->stream);
    }
    if (result == 0 && PyErr_Occurred()) result = -1;
    if (result == 1 && plan_apply(plan, 0) < 0) result = -1; /* the batch job's holds cover the claim's */
    Py_XDECREF(interest); Py_XDECREF(accesses); Py_XDECREF(pending); Py_XDECREF(streams);
    if (result != 1) txn_abort(txn);
    return result;
}

/* Adds one to the int in the slot `which` of `obj`: 0, or -1 on an error. */
static int increment(int which, PyObject *obj) {
    PyObject *value = get(which, obj), *next = value ? PyNumber_Add(value, one) : NULL;
    int failed = next == NULL || set(which, obj, next) < 0;
    Py_XDECREF(value); Py_XDECREF(next);
    return failed ? -1 : 0;
}

static int txn_commit(PyObject *access_set, CudaAsyncBatchTxn *txn) {
    PyObject *epoch = get(D_STATE_EPOCH, txn->state), *next = epoch ? PyNumber_Add(epoch, one) : NULL;
    PyObject *interest = next ? get(D_INTEREST, access_set) : NULL;
    PyObject *accesses = interest ? get(D_ACCESSES, access_set) : NULL;
    PyObject *write = accesses ? PyTuple_Pack(3, txn->stream, next, txn->job) : NULL;
    PyObject *read = write ? PyTuple_Pack(2, next, txn->job) : NULL;
    int failed = read == NULL || set(D_STATE_EPOCH, txn->state, next) < 0 ||
                 set(D_STATE_INTEREST, txn->state, interest) < 0;
    for (Py_ssize_t i = 0; !failed && i < PyTuple_GET_SIZE(accesses); i++) {
        PyObject *pair = PyTuple_GET_ITEM(accesses, i), *resource = PyTuple_GET_ITEM(pair, 0);
        long access = PyLong_AsLong(PyTuple_GET_ITEM(pair, 1));
        PyObject *reads = get(D_READS, resource);
        failed = reads == NULL ||
                 (access == 2 ? set(D_LAST_WRITE, resource, write) : PyDict_SetItem(reads, txn->stream, read)) < 0;
        if (!failed && access == 2) PyDict_Clear(reads); /* a write supersedes the reads */
        Py_XDECREF(reads);
    }
    failed = failed || PyDict_SetItem(txn->points, txn->stream, next) < 0 || increment(D_BATCH_OPS, txn->batch) < 0;
    Py_XDECREF(epoch); Py_XDECREF(next); Py_XDECREF(write); Py_XDECREF(read);
    Py_XDECREF(interest); Py_XDECREF(accesses);
    txn_abort(txn); /* unlocks */
    return failed ? -1 : 0;
}

/* -- synchronous runs ---------------------------------------------------------------- */
/* The (handle, state) of recent streams, by identity (a weak reference), in order of
 * first use; a new stream takes the first dead stream's entry (which keeps that
 * stream's state alive), else the entries in turn. */
typedef struct { PyObject *ref, *state; unsigned long long handle; } StreamFacts;
static StreamFacts stream_cache[STREAM_CACHE_SIZE];
static unsigned stream_cache_turn;

/* The handle and state of `stream`: 1, or -1 on an error. */
static int stream_facts(PyObject *stream, unsigned long long *handle, PyObject **state) {
    for (int i = 0; i < STREAM_CACHE_SIZE && stream_cache[i].ref != NULL; i++)
        if (cuda_async_referent(stream_cache[i].ref) == stream) {
            *handle = stream_cache[i].handle;
            *state = Py_NewRef(stream_cache[i].state);
            return 1;
        }
    PyObject *raw = PyObject_GetAttr(stream, str_handle), *number = raw ? PyNumber_Long(raw) : NULL;
    PyObject *found = number ? PyObject_CallOneArg(stream_state, stream) : NULL;
    PyObject *ref = found ? PyWeakref_NewRef(stream, NULL) : NULL;
    if (ref != NULL) *handle = PyLong_AsUnsignedLongLong(number);
    Py_XDECREF(raw); Py_XDECREF(number);
    if (ref == NULL || PyErr_Occurred()) { Py_XDECREF(found); Py_XDECREF(ref); return -1; }
    int slot = 0; /* (chosen after the Python calls above, which may let another thread in) */
    while (slot < STREAM_CACHE_SIZE && stream_cache[slot].ref && cuda_async_referent(stream_cache[slot].ref) != Py_None)
        slot++;
    if (slot == STREAM_CACHE_SIZE) slot = stream_cache_turn++ % STREAM_CACHE_SIZE;
    StreamFacts old = stream_cache[slot];
    stream_cache[slot] = (StreamFacts){ref, Py_NewRef(found), *handle};
    Py_XDECREF(old.ref); Py_XDECREF(old.state); /* after: freeing a state may run Python code */
    *state = found;
    return 1;
}

/* Whether the memory is idle: no running hold on any span of `plan`, no recorded
 * access of `access_set`'s. */
static int idle(PyObject *access_set, PyObject *plan) {
    PyObject *accesses = get(D_ACCESSES, access_set);
    int ok = accesses == NULL ? -1 : each_hold(plan, unshared, Py_None);
    if (ok == 1) ok = accesses_on(accesses, NULL);
    Py_XDECREF(accesses);
    return ok;
}

/* The default policy's next stream: `default_policy().next_stream()`, with the
 * built-in SingleStream and RoundRobin answered here as their next_stream does
 * (`_stream`; `_streams[next(_counter) % len(_streams)]`) once their streams exist. */
static PyObject *next_stream(void) {
    PyObject *policy = NULL, *held = NULL, *stream = NULL;
    if (PyContextVar_Get(scoped_policy, Py_None, &policy) < 0) return NULL;
    if (policy == Py_None) Py_SETREF(policy, PyObject_GetAttr(policy_module, str_default));
    if (policy == Py_None) Py_SETREF(policy, PyObject_CallMethodNoArgs(policy_module, str_default_policy));
    if (policy == NULL) return NULL;
    PyObject *type = (PyObject *)Py_TYPE(policy);
    if (type == single_stream_type || type == round_robin_type) {
        held = PyObject_GetAttr(policy, type == single_stream_type ? str_stream : str_streams);
        if (held == NULL) PyErr_Clear(); /* then asked as any other policy */
    }
    if (held != NULL && type == single_stream_type && held != Py_None) {
        stream = Py_NewRef(held);
    } else if (held != NULL && PyTuple_Check(held) && PyTuple_GET_SIZE(held) > 0) {
        PyObject *counter = PyObject_GetAttr(policy, str_counter);
        PyObject *index = counter ? PyIter_Next(counter) : NULL;
        Py_ssize_t i = index ? PyLong_AsSsize_t(index) : -1;
        if (i >= 0) stream = Py_NewRef(PyTuple_GET_ITEM(held, i % PyTuple_GET_SIZE(held)));
        else if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "RoundRobin: bad counter");
        Py_XDECREF(counter); Py_XDECREF(index);
    }
    if (stream == NULL && !PyErr_Occurred()) /* any other policy, or streams not made yet */
        stream = PyObject_CallMethodNoArgs(policy, str_next_stream);
    Py_XDECREF(held); Py_DECREF(policy);
    return stream;
}

static void clear_sync(CudaAsyncSyncTxn *txn) {
    Py_CLEAR(txn->access_set); Py_CLEAR(txn->run); Py_CLEAR(txn->state);
}

static int sync_begin(PyObject *access_set, PyObject *claimed, PyObject *run, CudaAsyncSyncTxn *txn) {
    memset(txn, 0, sizeof *txn);
    if (!configured || PyList_GET_SIZE(active_captures) != 0) return 0;
    PyObject *batch = NULL;
    if (PyContextVar_Get(active_batch, Py_None, &batch) < 0) return -1;
    Py_DECREF(batch);
    if (batch != Py_None) return 0;
    /* Memory not idle: the Python path, without asking the policy for a stream
     * twice (asked below; re-checked after, as the policy may run any code). */
    if (!lock_try_acquire(ledger_lock)) return 0;
    int ready = idle(access_set, claimed);
    lock_release(ledger_lock);
    if (ready <= 0) return ready;
    PyObject *stream = next_stream(); /* (None: host mode, the Python path) */
    ready = stream == NULL ? -1 : stream == Py_None ? 0 : stream_facts(stream, &txn->stream_handle, &txn->state);
    Py_XDECREF(stream);
    if (ready <= 0) return ready;
    if (!lock_try_acquire(ledger_lock)) { clear_sync(txn); return 0; }
    if (!lock_try_acquire(streams_lock)) { lock_release(ledger_lock); clear_sync(txn); return 0; }
    /* Another op's access points not yet marked: the Python path decides about events. */
    PyObject *pending = get(D_STATE_INTEREST, txn->state);
    int result = pending == NULL ? -1 : PyDict_Check(pending) && PyDict_GET_SIZE(pending) == 0;
    Py_XDECREF(pending);
    if (result == 1) result = idle(access_set, claimed);
    /* The claim's pending holds become the run's (the job's running ones). */
    if (result == 1 && plan_apply(run, 1) < 0) result = -1;
    if (result == 1 && plan_apply(claimed, 0) < 0) { /* (out of memory) leave no run hold behind */
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        if (plan_apply(run, 0) < 0) PyErr_Clear();
        PyErr_Restore(type, value, tb);
        result = -1;
    }
    lock_release(streams_lock);
    lock_release(ledger_lock);
    if (result != 1) { clear_sync(txn); return result; }
    txn->access_set = Py_NewRef(access_set);
    txn->run = Py_NewRef(run);
    return 1;
}

static int sync_end(CudaAsyncSyncTxn *txn, int ran) {
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb); /* a launch or wait error being raised stays the error */
    lock_wait((RLockObject *)ledger_lock, 0); /* not interruptible: the holds must go back */
    lock_wait((RLockObject *)streams_lock, 0);
    int failed = plan_apply(txn->run, 0) < 0; /* (out of memory only: its error is raised) */
    if (failed && type != NULL) PyErr_Clear(); /* the launch's error matters more */
    if (ran && !failed) /* the stream advanced by one op, as Job.record counts */
        failed = increment(D_STATE_EPOCH, txn->state) < 0;
    lock_release(streams_lock);
    lock_release(ledger_lock);
    clear_sync(txn);
    if (type != NULL) { PyErr_Restore(type, value, tb); return -1; }
    return failed ? -1 : 0;
}

static CudaAsyncBatchAPI api = {CUDA_ASYNC_BATCH_API_VERSION, claim, drop, txn_begin, txn_commit, txn_abort,
                                sync_begin, sync_end};

static PyObject *configure(PyObject *self, PyObject *args) {
    PyObject *var, *ledger, *streams, *table, *captures, *policies, *scoped, *round_robin, *single_stream, *state, *dropped;
    if (!PyArg_ParseTuple(args, "O!O!O!O!O!OO!O!O!OO", &PyContextVar_Type, &var, &RLockType, &ledger, &RLockType,
                          &streams, &PyDict_Type, &table, &PyList_Type, &captures, &policies, &PyContextVar_Type,
                          &scoped, &PyType_Type, &round_robin, &PyType_Type, &single_stream, &state, &dropped))
        return NULL;
    for (int i = 0; i < D_COUNT; i++) {
        PyObject *d = PyDict_GetItemString(table, descriptor_names[i]);
        if (d == NULL || Py_TYPE(d)->tp_descr_get == NULL || Py_TYPE(d)->tp_descr_set == NULL)
            return PyErr_Format(PyExc_TypeError, "configure: %s is not a slot descriptor", descriptor_names[i]);
        Py_XSETREF(descriptors[i], Py_NewRef(d));
    }
    PyObject **into[] = {&active_batch, &active_captures, &policy_module, &scoped_policy, &round_robin_type,
                         &single_stream_type, &stream_state, &ledger_lock, &streams_lock, &dropped_claims};
    PyObject *values[] = {var, captures, policies, scoped, round_robin, single_stream, state, ledger, streams, dropped};
    for (size_t i = 0; i < sizeof into / sizeof *into; i++) Py_XSETREF(*into[i], Py_NewRef(values[i]));
    configured = 1;
    Py_RETURN_NONE;
}

/* Whether no thread but this one runs code of the files under `folder` (cuda_async's):
 * one that does may hold a reference to a lock it is about to take. 1 yes, 0 no, -1 error. */
static int others_outside(PyObject *folder) {
    PyThreadState *me = PyThreadState_Get();
    for (PyThreadState *t = PyInterpreterState_ThreadHead(PyThreadState_GetInterpreter(me)); t; t = PyThreadState_Next(t)) {
        PyFrameObject *frame = t == me ? NULL : PyThreadState_GetFrame(t);
        while (frame != NULL) {
            PyCodeObject *code = PyFrame_GetCode(frame);
            Py_ssize_t inside = PyUnicode_Tailmatch(code->co_filename, folder, 0, PY_SSIZE_T_MAX, -1);
            PyFrameObject *back = inside ? NULL : PyFrame_GetBack(frame);
            Py_DECREF(code);
            Py_DECREF(frame);
            if (inside) return inside < 0 ? -1 : 0;
            frame = back;
        }
    }
    return 1;
}

/* Whether no thread holds `lock` (a threading lock: its own methods are asked). -1: error. */
static int unheld(PyObject *lock) {
    PyObject *mine = PyObject_CallMethod(lock, "_is_owned", NULL), *got = NULL;
    if (mine == Py_False) got = PyObject_CallMethod(lock, "acquire", "O", Py_False);
    int free = got == Py_True;
    if (free) Py_XDECREF(PyObject_CallMethod(lock, "release", NULL));
    Py_XDECREF(mine); Py_XDECREF(got);
    return PyErr_Occurred() ? -1 : free;
}

/* install_locks(places, folder): puts native locks in place of cuda_async's threading
 * locks, as the values of every (module dict, name, native lock) of `places`, all at
 * once (no Python code runs meanwhile: the collector is off), when that is safe: no
 * old lock held and no other thread inside cuda_async (`folder`). True: installed;
 * False: not now (nothing changed). */
static PyObject *install_locks(PyObject *self, PyObject *args) {
    PyObject *places, *folder;
    if (!PyArg_ParseTuple(args, "O!U", &PyList_Type, &places, &folder)) return NULL;
    int collecting = PyGC_Disable();
    int safe = others_outside(folder);
    for (Py_ssize_t i = 0; safe == 1 && i < PyList_GET_SIZE(places); i++) {
        PyObject *dict, *name, *lock, *old;
        if (!PyArg_ParseTuple(PyList_GET_ITEM(places, i), "O!UO!", &PyDict_Type, &dict, &name, &RLockType, &lock) ||
            (old = PyDict_GetItemWithError(dict, name)) == NULL)
            safe = PyErr_Occurred() ? -1 : 0; /* (no such global: not installed) */
        else
            safe = unheld(old);
    }
    for (Py_ssize_t i = 0; safe == 1 && i < PyList_GET_SIZE(places); i++) { /* (existing keys: no allocation) */
        PyObject *place = PyList_GET_ITEM(places, i);
        safe = PyDict_SetItem(PyTuple_GET_ITEM(place, 0), PyTuple_GET_ITEM(place, 1), PyTuple_GET_ITEM(place, 2)) < 0 ? -1 : 1;
    }
    if (collecting) PyGC_Enable();
    return safe < 0 ? NULL : PyBool_FromLong(safe);
}

/* For tests: run begin/commit from Python (an AccessSet and the ClaimPlan of its
 * spans). Returns the stream handle, or None when the state is not the steady one. */
static PyObject *repeat(PyObject *self, PyObject *args) {
    PyObject *access_set, *plan;
    CudaAsyncBatchTxn txn;
    if (!PyArg_ParseTuple(args, "OO", &access_set, &plan)) return NULL;
    int begun = txn_begin(access_set, plan, &txn);
    if (begun <= 0) return begun < 0 ? NULL : Py_NewRef(Py_None);
    unsigned long long handle = txn.stream_handle;
    return txn_commit(access_set, &txn) < 0 ? NULL : PyLong_FromUnsignedLongLong(handle);
}

static PyMethodDef methods[] = {
    {"configure", configure, METH_VARARGS, "Hands over the ContextVar, the locks and the slot descriptors."},
    {"install_locks", install_locks, METH_VARARGS, "Puts native locks in place of cuda_async's, when safe: whether it did."},
    {"repeat", repeat, METH_VARARGS, "begin + commit for an AccessSet and its ClaimPlan (tests): the stream handle, or None."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "cuda_async._native_batch", NULL, -1, methods};

PyMODINIT_FUNC PyInit__native_batch(void) {
    struct { PyObject **name; const char *text; } names[] = {
        {&str_next_stream, "next_stream"}, {&str_handle, "handle"}, {&str_default, "_default"},
        {&str_default_policy, "default_policy"}, {&str_streams, "_streams"}, {&str_counter, "_counter"},
        {&str_stream, "_stream"}};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if ((*names[i].name = PyUnicode_InternFromString(names[i].text)) == NULL) return NULL;
    if ((one = PyLong_FromLong(1)) == NULL) return NULL;
    if (PyType_Ready(&RLockType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module), *capsule = PyCapsule_New(&api, CUDA_ASYNC_BATCH_API_CAPSULE, NULL);
    if (m == NULL || capsule == NULL || PyModule_AddObjectRef(m, "RLock", (PyObject *)&RLockType) < 0 ||
        PyModule_AddObjectRef(m, "API", capsule) < 0)
        Py_CLEAR(m);
    Py_XDECREF(capsule);
    return m;
}
