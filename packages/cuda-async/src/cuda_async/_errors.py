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
    """A `batch` used against its rules: started inside another batch or a graph
    capture, or given an op after its block ended."""
