"""The exceptions of cuda_async."""

from __future__ import annotations


class OwnershipError(Exception):
    """A resource is used against the ownership rules while an op holding it is pending.

    The rules: a resource written by a pending op may not be touched by any other
    op; a resource read by pending ops may be read by others but not written.

    Attributes:
        resource: the name of the resource in conflict.
        holder: the name of the pending op that holds it.
        requester: the name of the op that was refused.
    """

    def __init__(self, message: str, *, resource: str = "", holder: str = "", requester: str = "") -> None:
        super().__init__(message)
        self.resource = resource
        self.holder = holder
        self.requester = requester


class GraphCaptureError(RuntimeError):
    """Work that cannot be recorded into a CUDA graph was attempted during capture
    (an allocation, a host synchronization, an ``await``), or the capture failed."""


class BatchError(RuntimeError):
    """A `batch` used against its rules: started inside another batch, or given an op
    after its block ended. (Starting one inside a graph capture is a
    `GraphCaptureError`, like everything else a capture cannot hold.)"""


class GraphUpdateError(ValueError):
    """`CudaGraph.update` was given an input the captured work cannot take: of
    another layout than the captured one, not a resource, or not used by the graph."""


class _Raised:
    """The classes cuda_async raises: its own, or subclasses a layer above registered
    with `use_error_classes` (so that its users catch one family of errors)."""

    ownership: type[OwnershipError] = OwnershipError
    graph_capture: type[GraphCaptureError] = GraphCaptureError
    batch: type[BatchError] = BatchError
    graph_update: type[GraphUpdateError] = GraphUpdateError


raised = _Raised()


def use_error_classes(
    *,
    ownership: type[OwnershipError] | None = None,
    graph_capture: type[GraphCaptureError] | None = None,
    batch: type[BatchError] | None = None,
    graph_update: type[GraphUpdateError] | None = None,
) -> None:
    """Makes cuda_async raise these subclasses of its errors instead of its own
    classes (``except cuda_async.OwnershipError`` still catches them). A layer
    above calls it once, e.g. cutile so that its users see cutile's error family."""
    for given, base in ((ownership, OwnershipError), (graph_capture, GraphCaptureError), (batch, BatchError),
                        (graph_update, GraphUpdateError)):
        if given is not None and not (isinstance(given, type) and issubclass(given, base)):
            raise TypeError(f"use_error_classes: expected a subclass of {base.__name__}, got {given!r}")
    if ownership is not None:
        raised.ownership = ownership
    if graph_capture is not None:
        raised.graph_capture = graph_capture
    if batch is not None:
        raised.batch = batch
    if graph_update is not None:
        raised.graph_update = graph_update
