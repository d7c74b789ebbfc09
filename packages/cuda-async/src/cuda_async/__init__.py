"""cuda_async: lazy device operations, stream scheduling, asyncio and CUDA graphs.

Built on cuda_core only. A `DeviceOp` is lazy and typed by its result; it runs
with ``.sync()``, ``.sync_on(stream)``, ``await op`` or ``.schedule(policy)``,
composes with `then`, `map`, `zip`, `all_of`, `shared` and `value`, and is
captured into a replayable `CudaGraph` with ``op.graph()`` or `graph_scope`;
`batch` enqueues many ops as one job without a host wait after each.

Ops declare the `Resource` objects they read and write. While an op is pending,
a resource it writes cannot be used by any other op, and one it reads cannot be
written (`OwnershipError`, naming the holder); everything is handed back when
the host observes completion. Ops on different streams that share resources are
ordered by event waits, never by device-wide synchronization.

A `SchedulingPolicy` picks streams: `SingleStream`, `RoundRobin` (the default
where a GPU is present: 4 streams), `HostPolicy` (every op runs eagerly on the
host with stream None: the interpreter's mode, also used where no GPU is
present), or any object with ``next_stream()``.

Quick tour::

    import cuda_async as ca
    z = ca.Resource("z", memory=buf_z)
    op = ca.DeviceOp.from_fn(lambda s: launch_add(s), reads=[x, y], writes=[z], name="add")
    op.sync()                                   # run and wait
    result = await op                           # inside asyncio
    a, b = ca.zip(op_a, op_b).sync()            # may overlap on two streams
    graph = op.graph(); graph.launch().sync()   # capture once, replay

The ownership ledger holds, by domain and byte range, the pending holds of ops
made to run later (`ClaimPlan`, `claim`) and the running holds of jobs; a layer
above asks it before the host touches memory (`check_access`), and runs a
synchronous op whose memory is idle without a job (`begin_idle_run`,
`end_idle_run`) and a repeated leaf op in a batch without an op object
(`begin_batch_step`, `Batch.commit_step`).

For the native (C) launch paths of the layers above: `native_batch_api` gives
the configured extension whose ``API`` capsule is the C interface of
``native/batch_api.h`` (in `NATIVE_INCLUDE_DIR`, for the caller's build), and `Job`
is the holds and streams of one submission.
"""


from cuda_async._batch import Batch, batch, begin_step as begin_batch_step, current as current_batch
from cuda_async._capture import ensure_not_capturing, is_capturing, python_path_only
from cuda_async._errors import BatchError, GraphCaptureError, GraphUpdateError, OwnershipError, use_error_classes
from cuda_async._future import DeviceFuture, set_await_spin
from cuda_async._graph import CudaGraph, GraphScope, graph_scope
from cuda_async._native import NATIVE_DIR as NATIVE_INCLUDE_DIR
from cuda_async._native import batch_api as native_batch_api
from cuda_async._ledger import ClaimPlan
from cuda_async._ledger import check as check_access
from cuda_async._op import (
    DeviceOp,
    FnOp,
    PresentsDeviceOp,
    SharedOp,
    all_of,
    begin_idle_run,
    claim,
    end_idle_run,
    value,
)
from cuda_async._op import zip_ops as zip
from cuda_async._policy import (
    HostPolicy,
    RoundRobin,
    SchedulingPolicy,
    SingleStream,
    default_policy,
    set_default_policy,
    using_policy,
)
from cuda_async._resource import Access, AccessSet, Job, Resource, ResourceView

__all__ = [
    "Access",
    "AccessSet",
    "ClaimPlan",
    "Batch",
    "BatchError",
    "CudaGraph",
    "DeviceFuture",
    "DeviceOp",
    "PresentsDeviceOp",
    "FnOp",
    "GraphCaptureError",
    "GraphScope",
    "GraphUpdateError",
    "HostPolicy",
    "Job",
    "NATIVE_INCLUDE_DIR",
    "OwnershipError",
    "Resource",
    "ResourceView",
    "RoundRobin",
    "SchedulingPolicy",
    "SharedOp",
    "SingleStream",
    "all_of",
    "batch",
    "begin_batch_step",
    "begin_idle_run",
    "current_batch",
    "check_access",
    "claim",
    "default_policy",
    "end_idle_run",
    "ensure_not_capturing",
    "graph_scope",
    "is_capturing",
    "python_path_only",
    "native_batch_api",
    "set_await_spin",
    "set_default_policy",
    "use_error_classes",
    "using_policy",
    "value",
    "zip",
]


__version__ = "0.1.0"  # the distribution's version (tests/test_release.py keeps them equal)
