/* cutile._native_launch: the steady state of `kernel(*args).sync()` in C.
 *
 * A kernel whose last call's objects are passed again (the same tensors and
 * partitions, equal constants, scalars of the same types) skips everything that
 * depends only on them; cutile.Kernel keeps that knowledge in a Python `ObjectBinding`,
 * and, once the binding has launched on the GPU, in a NativeObjectBinding here. Then:
 *   kernel(*args)  matches the arguments, checks none was consumed, claims the
 *                  launch's holds in cuda_async's ledger (its C API, batch_api.h:
 *                  when nothing else may conflict) and makes the Launch;
 *   launch.sync()  inside a cuda_async batch whose ledger is in its steady state,
 *                  or on idle memory outside any batch, hands the claim over to
 *                  the running op (the same API), packs the scalars and calls
 *                  cuLaunchKernel, then records the accesses.
 * launch.sync() runs here only while every global, closure variable and attribute
 * the kernel's compile read still holds the value it read (`reads_current`):
 * otherwise the Python path compiles again (at the run, as the Python path checks).
 * A launch made here remembers where it was made (the caller's code object and
 * instruction, no line lookup); freed while still pending, it hands that to
 * cutile's never-run hook (`configure_classes`), which warns.
 * Anything else misses and runs the Python code, which is the reference and
 * raises every error: this file never decides that something is wrong.
 *
 * cutile's Kernel, Launch and Owned (the base of Tensor and Partition) are Python
 * classes; `configure_classes` hands them over when the module is loaded (the first
 * launch on the GPU backend). The fields read here are `__slots__` of those very
 * classes (found from their member descriptors), and the fast paths are installed on
 * them: Kernel's call slot, Launch.sync and Launch's finalizer. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <math.h>
#include "batch_api.h"

typedef int (*launch_kernel_fn)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                void *, void **, void **);
typedef int (*ctx_get_fn)(void **);
typedef int (*handle_fn)(void *); /* cuCtxSetCurrent, cuStreamSynchronize */

static const CudaAsyncBatchAPI *batch_api; /* (set by configure_classes) */
static launch_kernel_fn cu_launch_kernel;  /* (set by configure, with the other entry points) */
static ctx_get_fn cu_ctx_get_current;
static handle_fn cu_ctx_set_current, cu_stream_synchronize;
static PyObject *raise_launch_error; /* Python: (code, what) -> raises cuda_core's error */
static PyObject *never_run_hook;     /* Python: (kernel, code, lasti) -> warns of a launch freed unrun */
static PyObject *python_call;        /* Python: Kernel._call(kernel, *args, **kwargs), every other call */
static PyObject *python_sync;        /* Python: Launch._sync_slow(launch), every other sync */
static unsigned long generation; /* bumped by each configure: a binding armed under another driver misses */
/* (tests) launches made and run here, and launches an op queued through `enqueue` */
static unsigned long long native_calls, native_syncs, native_enqueues;

enum { CHECK_TENSOR, CHECK_CONSTANT, CHECK_SCALAR };
enum { P_I8 = 1, P_I16, P_I32, P_I64, P_U8, P_U16, P_U32, P_U64, P_F32, P_F64 };
#define SLOT 8          /* every parameter lives in an 8-byte slot of the buffer */
#define MAX_PARAMS 256

typedef struct {
    int kind;
    PyObject *ref;          /* tensor: weakref; constant: value */
    PyTypeObject *type;     /* constant, scalar: the exact type */
    int code, slot;         /* scalar: the C type it is packed as, parameter index */
    int range;              /* scalar: the C type of its dtype (the values it accepts) */
} Check;

typedef struct {
    PyObject_HEAD
    PyObject *owner;        /* a weak reference to the Python ObjectBinding (which holds this object) */
    PyObject *access_set;   /* its cuda_async.AccessSet, */
    PyObject *claim;        /* the ClaimPlan of a launch's pending holds, */
    PyObject *run;          /* and the ClaimPlan of a synchronous run's (owned by a Job kept for it) */
    PyObject *name;         /* "launch of NAME", for driver errors */
    Py_ssize_t nargs;
    Check *checks;          /* (one block with `results` and `packed`) */
    Py_ssize_t nresults;
    Py_ssize_t *results;    /* argument indices of the tensors a run returns */
    void *function, *context;
    unsigned grid[3], block[3], shared_memory;
    Py_ssize_t nparams;
    unsigned char *packed;  /* nparams * SLOT bytes: the parameters, scalars refilled per call */
    PyObject *reads;        /* the compile's ExternalReads.entries (a list cutile_compiler may refresh) */
    int armed;
    unsigned long generation;
    PyObject *weakrefs;
} NativeObjectBinding;

/* cutile's classes (`configure_classes`) and the offsets of the slots read here: the
 * kernel's native binding, an Owned's consumer (None while it may be used) and a
 * launch's fields (`_fast`: the NativeObjectBinding while the native sync may run it;
 * `_args`: every parameter's value in order; `_claim`: its pending holds until its op
 * takes them; `_pending`: made, neither run nor handed to an op; `_site_*`: where it
 * was made). */
static PyTypeObject *launch_type, *owned_type;
static Py_ssize_t kernel_binding_at, consumed_by_at;
enum { L_KERNEL, L_FAST, L_ARGS, L_DONE, L_CLAIM, L_BINDING, L_PENDING, L_SITE_CODE, L_SITE_LASTI, L_COUNT };
static const char *launch_slots[L_COUNT] = {"kernel", "_fast", "_args", "_done", "_claim", "_binding", "_pending",
                                            "_site_code", "_site_lasti"};
static Py_ssize_t launch_at[L_COUNT];
#define FIELD(obj, offset) (*(PyObject **)((char *)(obj) + (offset)))
#define LAUNCH(obj, which) FIELD(obj, launch_at[which])

static void set_launch(PyObject *launch, int which, PyObject *value) {
    Py_XSETREF(LAUNCH(launch, which), Py_NewRef(value));
}

static PyTypeObject FastBindingType;

/* -- helpers ---------------------------------------------------------------------------- */

/* After a conversion's error: 0 (cleared) when it was an overflow, else -1. */
static int overflow_misses(void) {
    if (!PyErr_ExceptionMatches(PyExc_OverflowError)) return -1;
    PyErr_Clear();
    return 0;
}

/* The values of each integer C type but u64, and its size: it is packed as the low
 * bytes of a long long (the host is little-endian, as the device). */
static const struct { long long min, max; size_t size; } int_types[] = {
    [P_I8] = {INT8_MIN, INT8_MAX, 1}, [P_I16] = {INT16_MIN, INT16_MAX, 2}, [P_I32] = {INT32_MIN, INT32_MAX, 4},
    [P_I64] = {LLONG_MIN, LLONG_MAX, 8}, [P_U8] = {0, UINT8_MAX, 1}, [P_U16] = {0, UINT16_MAX, 2},
    [P_U32] = {0, UINT32_MAX, 4}};

/* A scalar argument written into an 8-byte slot; 0 when it does not fit (the Python
 * path then raises the error), -1 on an error. */
static int pack_scalar(int code, PyObject *value, unsigned char *slot) {
    memset(slot, 0, SLOT);
    if (code == P_F32 || code == P_F64) {
        double d = PyFloat_AsDouble(value);
        if (d == -1.0 && PyErr_Occurred()) return overflow_misses(); /* (an int beyond f64) */
        if (code == P_F32) {
            float f = (float)d;
            if (isinf(f) && isfinite(d)) return 0; /* a finite value f32 cannot hold (inf and NaN pass) */
            memcpy(slot, &f, sizeof f);
        }
        else memcpy(slot, &d, sizeof d);
        return 1;
    }
    if (code == P_U64) {
        unsigned long long u = PyLong_AsUnsignedLongLong(value);
        if (u == (unsigned long long)-1 && PyErr_Occurred()) return overflow_misses();
        memcpy(slot, &u, sizeof u);
        return 1;
    }
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (v == -1 && PyErr_Occurred()) return -1;
    if (overflow || code < P_I8 || code > P_U32 || v < int_types[code].min || v > int_types[code].max) return 0;
    memcpy(slot, &v, int_types[code].size);
    return 1;
}

/* -- NativeObjectBinding ---------------------------------------------------------------- */
/* disarm(): forgets the objects (also at deallocation); later calls miss. */
static PyObject *fast_disarm(NativeObjectBinding *self, PyObject *unused) {
    for (Py_ssize_t i = 0; i < self->nargs; i++) {
        Py_CLEAR(self->checks[i].ref);
        Py_CLEAR(self->checks[i].type);
    }
    Py_CLEAR(self->access_set); /* it refers to the memory */
    self->armed = 0;
    Py_RETURN_NONE;
}

static void fast_dealloc(NativeObjectBinding *self) {
    if (self->weakrefs != NULL) PyObject_ClearWeakRefs((PyObject *)self);
    Py_DECREF(fast_disarm(self, NULL));
    Py_XDECREF(self->owner);
    Py_XDECREF(self->claim);
    Py_XDECREF(self->run);
    Py_XDECREF(self->name);
    Py_XDECREF(self->reads);
    PyMem_Free(self->checks);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* NativeObjectBinding(owner, access_set, claim, run, name, checks, results, function, context,
 *             grid, block, shared_memory, packed, reads)
 *   owner:   a weak reference to the ObjectBinding (it holds this object: no cycle)
 *   checks:  per argument (kind, target, value, packed_as, slot, range): a tensor (0, weakref, None, 0, 0, 0),
 *            a constant (1, type, value, 0, 0, 0), a scalar (2, type, None, packed_as, slot, range):
 *            packed_as the cubin's C type, range the dtype's
 *   claim, run: cuda_async.ClaimPlan objects (pending holds; a synchronous run's)
 *   results: argument indices of the tensors a run returns
 *   packed:  bytes, 8 per parameter (scalars are refilled per call) */
static PyObject *fast_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    PyObject *owner, *access_set, *claim, *run, *name, *checks, *results, *packed, *reads;
    unsigned long long function, context;
    unsigned grid[3], block[3], shared_memory;
    if (!PyArg_ParseTuple(args, "OOOOUO!O!KK(III)(III)ISO!", &owner, &access_set, &claim, &run, &name,
                          &PyTuple_Type, &checks, &PyTuple_Type, &results, &function, &context,
                          &grid[0], &grid[1], &grid[2], &block[0], &block[1], &block[2], &shared_memory, &packed,
                          &PyList_Type, &reads))
        return NULL;
    if (cu_launch_kernel == NULL)
        return PyErr_Format(PyExc_RuntimeError, "NativeObjectBinding: configure the module first");
    if (!PyWeakref_CheckRef(owner))
        return PyErr_Format(PyExc_TypeError, "NativeObjectBinding: the owner must be a weak reference");
    Py_ssize_t nbytes = PyBytes_GET_SIZE(packed);
    if (nbytes % SLOT || nbytes / SLOT > MAX_PARAMS)
        return PyErr_Format(PyExc_ValueError, "NativeObjectBinding: packed parameters must be 8 bytes each, at most %d", MAX_PARAMS);
    NativeObjectBinding *self = (NativeObjectBinding *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    PyObject **fields[] = {&self->owner, &self->access_set, &self->claim, &self->run, &self->name, &self->reads};
    PyObject *values[] = {owner, access_set, claim, run, name, reads};
    for (size_t i = 0; i < sizeof fields / sizeof *fields; i++) *fields[i] = Py_NewRef(values[i]);
    self->function = (void *)(uintptr_t)function;
    self->context = (void *)(uintptr_t)context;
    memcpy(self->grid, grid, sizeof grid);
    memcpy(self->block, block, sizeof block);
    self->shared_memory = shared_memory;
    self->nparams = nbytes / SLOT;
    Py_ssize_t nargs = PyTuple_GET_SIZE(checks), nresults = PyTuple_GET_SIZE(results);
    self->checks = PyMem_Calloc(1, nargs * sizeof(Check) + nresults * sizeof(Py_ssize_t) + nbytes + 1);
    if (self->checks == NULL) { PyErr_NoMemory(); goto fail; }
    self->results = (Py_ssize_t *)(self->checks + nargs);
    self->packed = (unsigned char *)(self->results + nresults);
    memcpy(self->packed, PyBytes_AS_STRING(packed), nbytes);
    self->nargs = nargs; /* set once the block exists: the deallocator walks it */
    for (Py_ssize_t i = 0; i < self->nargs; i++) {
        PyObject *spec = PyTuple_GET_ITEM(checks, i), *target, *value;
        Check *check = &self->checks[i];
        if (!PyTuple_Check(spec) || !PyArg_ParseTuple(spec, "iOOiii", &check->kind, &target, &value, &check->code,
                                                      &check->slot, &check->range))
            goto bad_check;
        int valid = check->kind == CHECK_TENSOR ? PyWeakref_CheckRef(target)
                  : check->kind == CHECK_CONSTANT ? PyType_Check(target)
                  : check->kind == CHECK_SCALAR && PyType_Check(target) && check->code >= P_I8 && check->code <= P_F64 &&
                    check->range >= P_I8 && check->range <= P_F64 && check->slot >= 0 && check->slot < self->nparams;
        if (!valid) goto bad_check;
        if (check->kind != CHECK_TENSOR) check->type = (PyTypeObject *)Py_NewRef(target);
        if (check->kind != CHECK_SCALAR) check->ref = Py_NewRef(check->kind == CHECK_TENSOR ? target : value);
    }
    self->nresults = nresults;
    for (Py_ssize_t i = 0; i < nresults; i++) {
        self->results[i] = PyLong_AsSsize_t(PyTuple_GET_ITEM(results, i));
        if (self->results[i] < 0 || self->results[i] >= self->nargs) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "NativeObjectBinding: result index out of range");
            goto fail;
        }
    }
    self->armed = 1;
    self->generation = generation;
    return (PyObject *)self;
bad_check:
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "NativeObjectBinding: malformed argument check");
fail:
    Py_DECREF(self);
    return NULL;
}

static PyMethodDef fast_methods[] = {
    {"disarm", (PyCFunction)fast_disarm, METH_NOARGS, "Forgets the objects; later calls miss."},
    {NULL, NULL, 0, NULL}};

/* -- kernel(*args) ----------------------------------------------------------------------- */
/* 1: `args` (every parameter's value in order) may launch on the binding; 0: a miss (the
 * Python path raises what is wrong); -1: error. With `same_objects`, they must be the
 * binding's very tensors and equal constants; without, the Python caller matched their
 * memory, layouts and constants to the binding's (`cutile._binding.layout_key`). Either
 * way every tensor object is unconsumed and every scalar of the binding's type and
 * within its dtype. */
static int arguments_match(NativeObjectBinding *fb, PyObject *args, int same_objects) {
    if (PyTuple_GET_SIZE(args) != fb->nargs) return 0;
    for (Py_ssize_t i = 0; i < fb->nargs; i++) {
        Check *check = &fb->checks[i];
        PyObject *value = PyTuple_GET_ITEM(args, i);
        if (check->kind == CHECK_TENSOR) {
            if (same_objects && cuda_async_referent(check->ref) != value) return 0; /* a dead reference gives None */
            if (!PyObject_TypeCheck(value, owned_type)) return 0; /* (a tensor or partition) */
            PyObject *consumed_by = FIELD(value, consumed_by_at);
            if (consumed_by != NULL && consumed_by != Py_None) return 0;
        } else if (check->kind == CHECK_CONSTANT && !same_objects) {
            continue;
        } else if (Py_TYPE(value) != check->type) {
            return 0;
        } else if (check->kind == CHECK_CONSTANT && value != check->ref) {
            if (PyFloat_CheckExact(value)) return 0; /* 0.0 and -0.0 compile differently */
            int equal = PyObject_RichCompareBool(value, check->ref, Py_EQ);
            if (equal <= 0) return equal;
        } else if (check->kind == CHECK_SCALAR) {
            unsigned char scratch[SLOT]; /* a value its dtype cannot hold is the Python path's error */
            int fits = pack_scalar(check->range, value, scratch);
            if (fits <= 0) return fits;
        }
    }
    return 1;
}

/* Where the launch is made: the running Python frame's code and instruction (the
 * kernel's caller, as kernel_call is C). A reference to the code, not the frame, so
 * that no locals are kept; the line is looked up only if a warning needs it. */
static void remember_site(PyObject *launch) {
    static PyObject *lasti_object; /* (the last one, for a loop's repeated call) */
    PyObject *code = LAUNCH(launch, L_SITE_CODE);
    if (code != NULL && code != Py_None) return;
    PyFrameObject *caller = PyEval_GetFrame(); /* borrowed; NULL when called from C alone */
    if (caller == NULL) return;
    int lasti = PyFrame_GetLasti(caller);
    if (lasti_object == NULL || PyLong_AsLong(lasti_object) != lasti) {
        PyObject *made = PyLong_FromLong(lasti);
        if (made == NULL) { PyErr_Clear(); return; }
        Py_XSETREF(lasti_object, made);
    }
    Py_XSETREF(LAUNCH(launch, L_SITE_CODE), (PyObject *)PyFrame_GetCode(caller));
    set_launch(launch, L_SITE_LASTI, lasti_object);
}

/* The launch of `kernel` over `args` on the binding: its holds claimed, pending. NULL
 * without an error set: a miss (another hold may conflict: the Python path refuses the
 * call, naming both parameters; or the binding's owner is gone). */
static PyObject *minus_one; /* (a launch's `_site_lasti` until its site is known) */

static PyObject *make_launch(PyObject *kernel, NativeObjectBinding *fb, PyObject *args) {
    PyObject *owner = cuda_async_referent(fb->owner); /* (the Python ObjectBinding; None once gone) */
    if (owner == Py_None) return NULL;
    Py_INCREF(owner);
    int taken = batch_api->claim(fb->claim);
    PyObject *launch = taken > 0 ? launch_type->tp_alloc(launch_type, 0) : NULL; /* (its slots NULL, its dict made on use) */
    if (launch != NULL) {
        PyObject *values[L_COUNT] = {kernel, (PyObject *)fb, args, Py_False, fb->claim, owner, Py_True, Py_None, minus_one};
        for (int i = 0; i < L_COUNT; i++) LAUNCH(launch, i) = Py_NewRef(values[i]);
        native_calls++;
    } else if (taken > 0) {
        batch_api->drop(fb->claim); /* queued: the lock may be another thread's now */
    }
    Py_DECREF(owner);
    return launch;
}

/* The launch of `kernel` over `args` on the binding when they match (`arguments_match`);
 * NULL without an error set: a miss. */
static PyObject *bound_launch(PyObject *kernel, NativeObjectBinding *fb, PyObject *args, int same_objects) {
    if (!fb->armed || fb->generation != generation) return NULL;
    Py_INCREF(fb); /* the checks may drop the kernel's reference (a weakref callback) */
    int matched = arguments_match(fb, args, same_objects);
    PyObject *launch = matched > 0 ? make_launch(kernel, fb, args) : NULL;
    Py_DECREF(fb);
    return launch;
}

/* launch_bound(kernel, binding, args): the launch of a call with other objects over
 * the binding's memory in its layouts, or None (a miss). */
static PyObject *launch_bound(PyObject *module, PyObject *const *argv, Py_ssize_t argc) {
    if (argc != 3 || !PyObject_TypeCheck(argv[1], &FastBindingType) || !PyTuple_CheckExact(argv[2]))
        return PyErr_Format(PyExc_TypeError, "launch_bound(kernel, binding, args: tuple)");
    PyObject *launch = bound_launch(argv[0], (NativeObjectBinding *)argv[1], argv[2], 0);
    return launch != NULL || PyErr_Occurred() ? launch : Py_NewRef(Py_None);
}

/* Kernel's call slot (`configure_classes`). */
static PyObject *kernel_call(PyObject *self, PyObject *args, PyObject *kwargs) {
    PyObject *launch = NULL, *fast = FIELD(self, kernel_binding_at);
    if (fast != NULL && Py_IS_TYPE(fast, &FastBindingType) && (kwargs == NULL || PyDict_GET_SIZE(kwargs) == 0))
        launch = bound_launch(self, (NativeObjectBinding *)fast, args, 1);
    if (launch == NULL && !PyErr_Occurred()) {
        Py_ssize_t n = PyTuple_GET_SIZE(args);
        PyObject *small[16], **stack = n < 16 ? small : PyMem_Malloc((n + 1) * sizeof(PyObject *));
        if (stack == NULL) return PyErr_NoMemory();
        stack[0] = self;
        for (Py_ssize_t i = 0; i < n; i++) stack[i + 1] = PyTuple_GET_ITEM(args, i);
        launch = PyObject_VectorcallDict(python_call, stack, n + 1, kwargs);
        if (stack != small) PyMem_Free(stack);
    }
    if (launch != NULL && Py_IS_TYPE(launch, launch_type)) remember_site(launch);
    return launch;
}

/* -- the compile's reads ----------------------------------------------------------------- */
/* cutile_compiler._reads's kinds of entry (kind, where, key, value). */
enum { READ_NAME, READ_NAME_ABSENT, READ_CELL, READ_CELL_EMPTY, READ_ATTRIBUTE, READ_CODE };

/* 1: every entry still reads as the compile saw it (by identity); 0: one differs, or
 * cannot be read here (the Python path looks again, refreshes equal constants, and
 * compiles again if one changed). */
static int reads_current(PyObject *reads) {
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(reads); i++) {
        PyObject *entry = PyList_GET_ITEM(reads, i);
        if (!PyTuple_CheckExact(entry) || PyTuple_GET_SIZE(entry) != 4) return 0;
        long kind = PyLong_AsLong(PyTuple_GET_ITEM(entry, 0));
        PyObject *where = PyTuple_GET_ITEM(entry, 1), *key = PyTuple_GET_ITEM(entry, 2);
        PyObject *value = PyTuple_GET_ITEM(entry, 3), *current;
        int same;
        switch (kind) {
        case READ_NAME:
        case READ_NAME_ABSENT:
            if (!PyDict_Check(where)) return 0;
            current = PyDict_GetItemWithError(where, key); /* borrowed */
            if (current == NULL && PyErr_Occurred()) { PyErr_Clear(); return 0; }
            if (current != (kind == READ_NAME ? value : NULL)) return 0;
            break;
        case READ_CELL:
        case READ_CELL_EMPTY:
            if (!PyCell_Check(where) || PyCell_GET(where) != (kind == READ_CELL ? value : NULL)) return 0;
            break;
        case READ_ATTRIBUTE:
            Py_INCREF(entry); /* a property runs Python code, which may refresh the list */
            current = PyObject_GetAttr(where, key);
            same = current == value;
            Py_XDECREF(current);
            Py_DECREF(entry);
            if (current == NULL) PyErr_Clear();
            if (!same) return 0;
            break;
        case READ_CODE:
            if (!PyFunction_Check(where) || PyFunction_GET_CODE(where) != value) return 0;
            break;
        default:
            PyErr_Clear();
            return 0;
        }
    }
    return 1;
}

/* -- launch.sync() ----------------------------------------------------------------------- */
static PyObject *results_of(NativeObjectBinding *fb, PyObject *args) {
    if (fb->nresults == 1) return Py_NewRef(PyTuple_GET_ITEM(args, fb->results[0]));
    PyObject *tuple = PyTuple_New(fb->nresults);
    if (tuple == NULL) return NULL;
    for (Py_ssize_t i = 0; i < fb->nresults; i++)
        PyTuple_SET_ITEM(tuple, i, Py_NewRef(PyTuple_GET_ITEM(args, fb->results[i])));
    return tuple;
}

/* The driver calls, without the GIL: cuLaunchKernel blocks while the stream's queue
 * is full, and the wait lasts as long as the kernel; other threads run meanwhile
 * (cuda_async's locks stay held: waiters wait for them without the GIL). With
 * `wait`, the stream is synchronized after a successful launch (*waited says whether
 * that happened: its error is then the wait's). */
static int launch_on(NativeObjectBinding *fb, unsigned long long stream, void **pointers, int wait, int *waited) {
    int err;
    Py_BEGIN_ALLOW_THREADS
    void *current = NULL;
    err = cu_ctx_get_current(&current);
    if (!err && current != fb->context) err = cu_ctx_set_current(fb->context);
    if (!err)
        err = cu_launch_kernel(fb->function, fb->grid[0], fb->grid[1], fb->grid[2], fb->block[0], fb->block[1],
                               fb->block[2], fb->shared_memory, (void *)(uintptr_t)stream, pointers, NULL);
    if (!err && wait) {
        *waited = 1;
        err = cu_stream_synchronize((void *)(uintptr_t)stream);
    }
    Py_END_ALLOW_THREADS
    return err;
}

/* Raises cuda_core's error for `err` of DOING + NAME (e.g. "waiting for the " "launch of f"). */
static void raise_driver_error(int err, const char *doing, PyObject *name) {
    PyObject *what = PyUnicode_FromFormat("%s%U", doing, name);
    PyObject *raised = what ? PyObject_CallFunction(raise_launch_error, "iO", err, what) : NULL;
    Py_XDECREF(raised);
    Py_XDECREF(what);
    if (!PyErr_Occurred()) PyErr_Format(PyExc_RuntimeError, "%s%U failed with CUDA error %d", doing, name, err);
}

/* The binding's parameters with the scalars of `args` (every parameter's value in order)
 * packed in, and a pointer to each: 1; 0 a miss (a scalar its C type cannot hold, or,
 * with `same_types`, not of the binding's type); -1 error. */
static int pack_params(NativeObjectBinding *fb, PyObject *args, int same_types, unsigned char *params, void **pointers) {
    memcpy(params, fb->packed, fb->nparams * SLOT);
    for (Py_ssize_t p = 0; p < fb->nparams; p++) pointers[p] = params + p * SLOT;
    for (Py_ssize_t i = 0; i < fb->nargs; i++) {
        Check *check = &fb->checks[i];
        if (check->kind != CHECK_SCALAR) continue;
        PyObject *value = PyTuple_GET_ITEM(args, i);
        if (same_types && Py_TYPE(value) != check->type) return 0;
        int packed = pack_scalar(check->code, value, params + (Py_ssize_t)check->slot * SLOT);
        if (packed <= 0) return packed;
    }
    return 1;
}

/* The launch in a batch's steady state, or run synchronously on idle resources;
 * NULL without an error set: a miss (nothing changed). */
static PyObject *fast_sync(PyObject *self, NativeObjectBinding *fb, PyObject *args) {
    unsigned char params[MAX_PARAMS * SLOT];
    void *pointers[MAX_PARAMS];
    if (!reads_current(fb->reads) || pack_params(fb, args, 0, params, pointers) <= 0) return NULL;
    PyObject *access_set = fb->access_set;
    CudaAsyncBatchTxn txn;
    CudaAsyncSyncTxn sync;
    int in_batch = batch_api->begin(access_set, fb->claim, &txn);
    if (in_batch < 0 || (!in_batch && batch_api->sync_begin(access_set, fb->claim, fb->run, &sync) <= 0))
        return NULL;
    set_launch(self, L_CLAIM, Py_None); /* the batch job's holds cover it now, or the run's replace it */
    set_launch(self, L_DONE, Py_True); /* from here on the launch has run, whatever the driver says */
    set_launch(self, L_PENDING, Py_False);
    int waited = 0; /* (a run's holds keep other threads off the resources during its wait) */
    int err = launch_on(fb, in_batch ? txn.stream_handle : sync.stream_handle, pointers, !in_batch, &waited);
    if (in_batch) {
        if (err) { batch_api->abort(&txn); raise_driver_error(err, "", fb->name); return NULL; }
        if (batch_api->commit(access_set, &txn) < 0) return NULL;
    } else {
        if (err) raise_driver_error(err, waited ? "waiting for the " : "", fb->name);
        if (batch_api->sync_end(&sync, waited) < 0 || err) return NULL; /* waited: the launch was enqueued */
    }
    native_syncs++;
    return results_of(fb, args);
}

/* enqueue(binding, args, stream): the launch of `args` (every parameter's value in
 * order, over the binding's memory) queued on `stream` (a CUstream handle) for an op
 * that holds its memory (cuda_async's job: no ledger work here). True when it was
 * enqueued; False (nothing done) when the binding cannot (disarmed, another driver, a
 * global the compile read rebound, a scalar it does not pack): the Python path then
 * enqueues it. A driver error raises. */
static PyObject *enqueue_bound(PyObject *module, PyObject *const *argv, Py_ssize_t argc) {
    if (argc != 3 || !PyObject_TypeCheck(argv[0], &FastBindingType) || !PyTuple_CheckExact(argv[1]))
        return PyErr_Format(PyExc_TypeError, "enqueue(binding, args: tuple, stream: int)");
    unsigned long long stream = PyLong_AsUnsignedLongLong(argv[2]);
    if (stream == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
    NativeObjectBinding *fb = (NativeObjectBinding *)argv[0];
    PyObject *args = argv[1];
    if (!fb->armed || fb->generation != generation || PyTuple_GET_SIZE(args) != fb->nargs) Py_RETURN_FALSE;
    unsigned char params[MAX_PARAMS * SLOT];
    void *pointers[MAX_PARAMS];
    Py_INCREF(fb);
    int enqueued = reads_current(fb->reads) ? pack_params(fb, args, 1, params, pointers) : 0, waited = 0;
    int err = enqueued > 0 ? launch_on(fb, stream, pointers, 0, &waited) : 0;
    if (err) { raise_driver_error(err, "", fb->name); enqueued = -1; }
    else if (enqueued > 0) native_enqueues++;
    Py_DECREF(fb);
    return enqueued < 0 ? NULL : PyBool_FromLong(enqueued);
}

/* Launch.sync (`configure_classes`). */
static PyObject *launch_sync(PyObject *self, PyObject *unused) {
    PyObject *fast = LAUNCH(self, L_FAST), *args = LAUNCH(self, L_ARGS);
    NativeObjectBinding *fb = (NativeObjectBinding *)fast;
    if (fast != NULL && Py_IS_TYPE(fast, &FastBindingType) && fb->armed && fb->generation == generation &&
        LAUNCH(self, L_CLAIM) == fb->claim && LAUNCH(self, L_DONE) == Py_False && args != NULL &&
        PyTuple_CheckExact(args) && PyTuple_GET_SIZE(args) == fb->nargs) {
        Py_INCREF(fb); Py_INCREF(args);
        PyObject *result = fast_sync(self, fb, args);
        Py_DECREF(fb); Py_DECREF(args);
        if (result == NULL && PyErr_Occurred()) /* refused by an error, as the Python path's: no warning later */
            set_launch(self, L_PENDING, Py_False);
        if (result != NULL || PyErr_Occurred()) return result;
    }
    return PyObject_CallOneArg(python_sync, self);
}

/* Launch's finalizer (`configure_classes`): a launch freed while pending warns (the
 * hook, once per kernel), and one freed with its claim gives it back (queued). */
static void launch_finalize(PyObject *self) {
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyObject *kernel = LAUNCH(self, L_KERNEL), *claim = LAUNCH(self, L_CLAIM);
    if (LAUNCH(self, L_PENDING) == Py_True && kernel != NULL) {
        PyObject *code = LAUNCH(self, L_SITE_CODE), *lasti = LAUNCH(self, L_SITE_LASTI);
        PyObject *warned = PyObject_CallFunctionObjArgs(never_run_hook, kernel, code ? code : Py_None,
                                                        lasti ? lasti : minus_one, NULL);
        if (warned == NULL) PyErr_WriteUnraisable(kernel); /* e.g. the warning filtered as an error */
        Py_XDECREF(warned);
    }
    if (claim != NULL && claim != Py_None) batch_api->drop(claim);
    PyErr_Restore(type, value, tb);
}

static PyMethodDef launch_sync_def = {"sync", launch_sync, METH_NOARGS,
    "Runs the launch to completion and returns its tensor arguments (one as itself, several as a tuple)."};

/* -- module ------------------------------------------------------------------------------ */
static PyTypeObject FastBindingType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "cutile._native_launch.NativeObjectBinding",
    .tp_basicsize = sizeof(NativeObjectBinding), .tp_dealloc = (destructor)fast_dealloc, .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = fast_new, .tp_methods = fast_methods, .tp_weaklistoffset = offsetof(NativeObjectBinding, weakrefs)};

/* The offset of the object slot `name` of the class `type` (its own `__slots__` entry). */
static int slot_offset(PyTypeObject *type, const char *name, Py_ssize_t *offset) {
    PyObject *d = PyDict_GetItemString(type->tp_dict, name);
    if (d == NULL || !Py_IS_TYPE(d, &PyMemberDescr_Type) || PyDescr_TYPE(d) != type ||
        ((PyMemberDescrObject *)d)->d_member->type != T_OBJECT_EX) {
        PyErr_Format(PyExc_TypeError, "configure_classes: %s.%s is not a slot of that class", type->tp_name, name);
        return -1;
    }
    *offset = ((PyMemberDescrObject *)d)->d_member->offset;
    return 0;
}

/* configure_classes(api, kernel, launch, owned, call, sync, never_run): cuda_async's C
 * API (batch_api.h: its capsule), then cutile's classes,
 * whose slots this file reads and on which it installs the fast paths: Kernel's call
 * slot (a heap type's slot set here: Kernel has no subclass and its __call__ is never
 * reassigned, which would reset it), Launch.sync (a method descriptor of Launch) and
 * Launch's finalizer (in place of its Python __del__); then the Python path of a call
 * (call(kernel, *args, **kwargs)) and of a sync (sync(launch)), and the hook called as
 * never_run(kernel, code, lasti) for a launch freed while pending. Once, before any
 * binding is made. */
static PyObject *configure_classes(PyObject *module, PyObject *args) {
    PyObject *capsule, *call, *sync, *hook;
    PyTypeObject *kernel, *launch, *owned;
    if (!PyArg_ParseTuple(args, "OO!O!O!OOO", &capsule, &PyType_Type, &kernel, &PyType_Type, &launch, &PyType_Type,
                          &owned, &call, &sync, &hook))
        return NULL;
    if (batch_api != NULL) return PyErr_Format(PyExc_RuntimeError, "configure_classes: configured already");
    const CudaAsyncBatchAPI *api = PyCapsule_GetPointer(capsule, CUDA_ASYNC_BATCH_API_CAPSULE);
    if (api == NULL) return NULL;
    if (api->version != CUDA_ASYNC_BATCH_API_VERSION)
        return PyErr_Format(PyExc_RuntimeError, "cuda_async's batch API is version %d, expected %d", api->version,
                            CUDA_ASYNC_BATCH_API_VERSION);
    if (!(kernel->tp_flags & launch->tp_flags & Py_TPFLAGS_HEAPTYPE))
        return PyErr_Format(PyExc_TypeError, "configure_classes: Kernel and Launch must be Python classes");
    if (slot_offset(kernel, "_native_binding", &kernel_binding_at) < 0 ||
        slot_offset(owned, "_consumed_by", &consumed_by_at) < 0)
        return NULL;
    for (int i = 0; i < L_COUNT; i++)
        if (slot_offset(launch, launch_slots[i], &launch_at[i]) < 0) return NULL;
    PyObject *method = PyDescr_NewMethod(launch, &launch_sync_def);
    int failed = method == NULL || PyObject_SetAttrString((PyObject *)launch, "sync", method) < 0;
    Py_XDECREF(method);
    if (failed) return NULL;
    kernel->tp_call = kernel_call;
    launch->tp_finalize = launch_finalize;
    PyType_Modified(kernel);
    PyType_Modified(launch);
    launch_type = (PyTypeObject *)Py_NewRef(launch);
    owned_type = (PyTypeObject *)Py_NewRef(owned);
    batch_api = api;
    python_call = Py_NewRef(call);
    python_sync = Py_NewRef(sync);
    never_run_hook = Py_NewRef(hook);
    Py_RETURN_NONE;
}

/* configure(launch_kernel, ctx_get_current, ctx_set_current, stream_synchronize, raise_launch_error) */
static PyObject *configure(PyObject *module, PyObject *args) {
    PyObject *raiser;
    unsigned long long launch, get_current, set_current, synchronize;
    if (!PyArg_ParseTuple(args, "KKKKO", &launch, &get_current, &set_current, &synchronize, &raiser))
        return NULL;
    if (batch_api == NULL) return PyErr_Format(PyExc_RuntimeError, "configure: call configure_classes first");
    if (!launch || !get_current || !set_current || !synchronize) return PyErr_Format(PyExc_ValueError, "configure: null entry point");
    cu_launch_kernel = (launch_kernel_fn)(uintptr_t)launch;
    cu_ctx_get_current = (ctx_get_fn)(uintptr_t)get_current;
    cu_ctx_set_current = (handle_fn)(uintptr_t)set_current;
    cu_stream_synchronize = (handle_fn)(uintptr_t)synchronize;
    generation++;
    Py_XSETREF(raise_launch_error, Py_NewRef(raiser));
    Py_RETURN_NONE;
}

/* Stand-ins for the driver that do nothing, for measuring the host path alone. */
static int null_launch(void *f, unsigned a, unsigned b, unsigned c, unsigned d, unsigned e, unsigned g, unsigned h,
                       void *s, void **p, void **x) { return 0; }
static void *null_context;
static int null_get_current(void **out) { *out = null_context; return 0; }
static int null_set_current(void *context) { null_context = context; return 0; }
static int null_synchronize(void *stream) { return 0; }

#define ADDRESS(f) (unsigned long long)(uintptr_t)(f)
static PyObject *null_entry_points(PyObject *module, PyObject *unused) {
    return Py_BuildValue("KKKK", ADDRESS(null_launch), ADDRESS(null_get_current), ADDRESS(null_set_current),
                         ADDRESS(null_synchronize));
}

static PyObject *invalidate(PyObject *module, PyObject *unused) {
    generation++; /* every binding armed so far misses from now on */
    Py_RETURN_NONE;
}

static PyObject *stats(PyObject *module, PyObject *unused) {
    return Py_BuildValue("KK", native_calls, native_syncs);
}

static PyObject *enqueued(PyObject *module, PyObject *unused) {
    return PyLong_FromUnsignedLongLong(native_enqueues);
}

static PyMethodDef module_methods[] = {
    {"invalidate", invalidate, METH_NOARGS, "Makes every binding armed so far miss (the driver changed)."},
    {"stats", stats, METH_NOARGS, "(launches made, launches run) by the native path so far."},
    {"enqueued", enqueued, METH_NOARGS, "Launches ops queued through `enqueue` so far."},
    {"enqueue", (PyCFunction)(void (*)(void))enqueue_bound, METH_FASTCALL,
     "Queues a launch of the binding's memory on a stream, for an op that holds it; False: not done."},
    {"launch_bound", (PyCFunction)(void (*)(void))launch_bound, METH_FASTCALL,
     "The launch of a call whose memory and layouts match a binding's, or None."},
    {"configure_classes", configure_classes, METH_VARARGS,
     "Hands over cuda_async's C API, cutile's classes (installing the fast paths), the Python paths and the never-run hook."},
    {"configure", configure, METH_VARARGS, "Hands over the driver's entry points."},
    {"null_entry_points", null_entry_points, METH_NOARGS, "Driver stand-ins that do nothing (benchmarks)."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "cutile._native_launch", NULL, -1, module_methods};

PyMODINIT_FUNC PyInit__native_launch(void) {
    if (minus_one == NULL && (minus_one = PyLong_FromLong(-1)) == NULL) return NULL;
    PyObject *m = PyModule_Create(&module_def);
    if (m != NULL && (PyType_Ready(&FastBindingType) < 0 ||
                      PyModule_AddObjectRef(m, "NativeObjectBinding", (PyObject *)&FastBindingType) < 0))
        Py_CLEAR(m);
    return m;
}
