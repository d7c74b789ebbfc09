"""The thread's active graph capture, if any (kept apart to avoid import cycles)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import cuda_core

from cuda_async._errors import raised
from cuda_async._resource import Access, Resource, ResourceView

if TYPE_CHECKING:
    from cuda_async._op import FnOp

_tls = threading.local()
# Every thread's active capture and `python_path_only` block: the native sync path
# runs only while this is empty (it cannot read other threads' thread-locals, nor
# cheaply its own).
_active: list[object] = []


class CaptureState:
    """What a capture has recorded so far: its stream (None on the host), the leaf
    ops in order (replayed on the host), the resources they touch, how the first
    op to use each one sees it (its `ResourceView`), and the results."""

    def __init__(self, name: str, stream: cuda_core.Stream | None) -> None:
        self.name = name
        self.stream = stream
        self.leaves: list[FnOp[Any]] = []
        self.accesses: dict[Resource, Access] = {}
        self.views: dict[Resource, ResourceView] = {}
        self.results: list[Any] = []

    def add_leaf(self, leaf: FnOp[Any]) -> None:
        if leaf.allocates:
            raise raised.graph_capture(
                f"{leaf.name!r} allocates memory, which cannot be recorded into the CUDA graph "
                f"{self.name!r}: allocate its memory before capturing (run it with .sync() first) "
                "and capture only the ops that write into them"
            )
        self.leaves.append(leaf)
        if leaf.views is not None:
            for view in leaf.views():
                self.views.setdefault(view.resource, view)
        for resource, access in leaf.accesses:
            previous = self.accesses.get(resource)
            if previous is None or previous < access:
                self.accesses[resource] = access


def current() -> CaptureState | None:
    """The capture active on this thread, or None."""
    state: CaptureState | None = getattr(_tls, "capture", None)
    return state


def push(state: CaptureState) -> None:
    if current() is not None:
        raise raised.graph_capture(
            f"cannot capture {state.name!r}: the graph capture {current().name!r} is already "  # type: ignore[union-attr]
            "active on this thread (captures do not nest)"
        )
    _tls.capture = state
    _active.append(state)


def pop() -> None:
    state = current()
    _tls.capture = None
    if state is not None:
        _active.remove(state)


@contextlib.contextmanager
def python_path_only() -> Iterator[None]:
    """Inside the block (on every thread, as while a capture is active) ops run on the
    Python path, never the native one: for a caller that must see each launch run
    (cutile's dependent launches choose their kernel and launch attribute there)."""
    marker = object()
    _active.append(marker)
    try:
        yield
    finally:
        _active.remove(marker)


def is_capturing() -> bool:
    """Whether this thread is recording a CUDA graph (ops are recorded, not run)."""
    return current() is not None


def ensure_not_capturing(what: str) -> None:
    """Raises `GraphCaptureError` naming ``what`` if this thread is capturing a graph.

    For work that a graph cannot record, e.g. ``ensure_not_capturing("api.zeros
    (allocates memory)")`` in an allocator, or a read back to the host.
    """
    state = current()
    if state is not None:
        raise raised.graph_capture(
            f"{what} cannot run while the CUDA graph {state.name!r} is being captured: "
            "do it before the capture (or after, between replays)"
        )
