"""The errors a cutile user may catch; `CutileError` is the base of them all.

Every error cutile or its compiler raises on purpose is a `CutileError` and is
re-exported by `cutile` (the table is in the package README). The layers below
surface this way: cuda_async's ownership, capture and batch errors are raised as
the subclasses here (`use_error_classes`); cutile_ir's `IRError` never reaches a
user (the compiler turns it into a `TileCompilerError` naming the kernel); a failing
CUDA driver call is cuda_core's `CudaError` (re-exported by `cutile`): the driver's
report of a fault, not a refusal of cutile's.
"""

from __future__ import annotations

import cuda_async
from cuda_core import CudaError, CudaLaunchError, CudaOutOfMemoryError
from cutile_compiler import (
    ArchError,
    ArgumentError,
    ArgumentTypeError,
    ConfigError,
    CutileError,
    HintError,
    HostCallError,
    SignatureError,
    SourceLocation,
    SpecializationError,
    TensorIndexError,
    TileCompilerError,
    TileError,
    TileirasError,
    TileirasTimeoutError,
    TileSyntaxError,
    TileTypeError,
    ToolchainError,
)


class OwnershipError(CutileError, cuda_async.OwnershipError):
    """A tensor was used while another owner has it: consumed by ``partition()``,
    or held by a launch that has not completed. (A `cuda_async.OwnershipError`
    too, so either class catches it.)"""

    def __init__(self, message: str, *, resource: str = "", holder: str = "", requester: str = "") -> None:
        cuda_async.OwnershipError.__init__(self, message, resource=resource, holder=holder, requester=requester)


class GraphCaptureError(CutileError, cuda_async.GraphCaptureError):
    """Work that cannot be recorded into a CUDA graph was attempted during a capture
    (a `cuda_async.GraphCaptureError` too)."""


class BatchError(CutileError, cuda_async.BatchError):
    """A `cutile.batch` used against its rules: nested, or given a launch after its
    block ended (a `cuda_async.BatchError` too)."""


class GraphUpdateError(CutileError, cuda_async.GraphUpdateError):
    """`Graph.update` was given a tensor the captured graph cannot take: of another
    layout (dtype, shape, strides, device) than the input it replaces, or not a
    tensor; the message names the input's parameter and both layouts."""


class KernelRuntimeError(CutileError, RuntimeError):
    """A kernel did something invalid while the interpreter ran it (a race between
    blocks, a read of memory nothing wrote, an integer division by zero, a failed assert)."""

    def __init__(self, message: str, location: SourceLocation | None) -> None:
        where = f"{location}: " if location else ""
        excerpt = location.excerpt() if location else ""
        super().__init__(f"{where}{message}" + (f"\n{excerpt}" if excerpt else ""))
        self.location = location


class LaunchError(CutileError, ValueError):
    """A launch's arguments or grid do not fit the kernel (checked before any GPU work)."""


class InteropError(CutileError, TypeError):
    """An array cannot be shared with cutile without a copy (or at all): DLPack, the
    CUDA Array Interface, ``np.asarray``."""


class BenchError(CutileError):
    """A benchmark rep could not be timed as asked (see `cutile.bench`)."""


class TuneError(CutileError):
    """A search found no usable config, or a trial log or record cannot be read or used."""


class StaleRecordError(TuneError):
    """A tuning record (or cached winner) was made under other conditions than these:
    ``field`` names the provenance field that differs, ``recorded`` and ``current``
    its two values."""

    def __init__(self, path: str, field_name: str, recorded: str, current: str) -> None:
        super().__init__(f"tuning record {path} is stale: its {field_name} is {recorded!r}, "
                         f"here it is {current!r}; re-tune to refresh it")
        self.path = path
        self.field = field_name
        self.recorded = recorded
        self.current = current


# cuda_async raises these (its errors' subclasses) from then on, whichever path an op
# takes to the user: launches, zip/then/map, graphs, constructors as ops, batches.
cuda_async.use_error_classes(ownership=OwnershipError, graph_capture=GraphCaptureError, batch=BatchError,
                             graph_update=GraphUpdateError)

__all__ = [
    "ArgumentError", "ArgumentTypeError", "TensorIndexError",
    "ArchError", "BatchError", "BenchError", "ConfigError", "CudaError", "CudaLaunchError", "CudaOutOfMemoryError", "CutileError",
    "GraphCaptureError", "GraphUpdateError", "HintError", "HostCallError", "InteropError", "LaunchError", "OwnershipError",
    "SignatureError", "SpecializationError", "StaleRecordError", "TileCompilerError", "TileError", "TileSyntaxError", "TileTypeError",
    "TileirasError", "TileirasTimeoutError", "ToolchainError", "TuneError",
]
