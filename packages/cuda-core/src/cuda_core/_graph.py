"""CUDA graphs through stream capture: capture, instantiate, launch, update."""

from __future__ import annotations

import enum
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from cuda_core import _driver
from cuda_core._device import Device
from cuda_core._errors import CudaError
from cuda_core._stream import Stream


class CaptureMode(enum.Enum):
    """Which unsafe calls from other threads abort a capture (``CUstreamCaptureMode``).

    GLOBAL: any thread's potentially unsafe call; THREAD_LOCAL: this thread's
    only; RELAXED: none are checked.
    """

    GLOBAL = "CU_STREAM_CAPTURE_MODE_GLOBAL"
    THREAD_LOCAL = "CU_STREAM_CAPTURE_MODE_THREAD_LOCAL"
    RELAXED = "CU_STREAM_CAPTURE_MODE_RELAXED"


class GraphUpdateError(CudaError):
    """`GraphExec.update` could not apply the new graph (e.g. different topology)."""


@contextmanager
def releases_deferred() -> Iterator[None]:
    """Inside, releases that finalizers make on this thread (freeing memory, unloading
    a module) wait until the block ends, as during a capture: for code that holds a
    stream's work back (a `Stream.wait_value32` gate the host opens later), where a
    synchronous free would wait for the held work and never return."""
    _driver.capture_started()
    try:
        yield
    finally:
        _driver.capture_ended()


def begin_capture(stream: Stream, mode: CaptureMode = CaptureMode.THREAD_LOCAL) -> None:
    """Starts recording the work queued on ``stream`` into a graph."""
    if stream.handle is None or int(stream.handle) == 0:
        raise ValueError("begin_capture: the legacy default stream cannot be captured; use Stream.create()")
    stream.device.activate()
    api = _driver.api()
    _driver.call("cuStreamBeginCapture", stream.handle, getattr(api.CUstreamCaptureMode, mode.value))
    _driver.capture_started()  # finalizers on this thread now wait for the end (see _driver.release)


def end_capture(stream: Stream) -> Graph:
    """Stops the capture begun on ``stream`` and returns the recorded graph."""
    try:
        return Graph(_driver.call("cuStreamEndCapture", stream.handle), stream.device)
    finally:
        _driver.capture_ended()


def is_capturing(stream: Stream) -> bool:
    """Whether ``stream`` is being captured now."""
    api = _driver.api()
    status = _driver.call("cuStreamIsCapturing", stream.handle)
    return bool(status == api.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_ACTIVE)


class Capture:
    """The result slot of `capture`: ``graph`` is set when the block exits."""

    graph: Graph | None = None


@contextmanager
def capture(stream: Stream, mode: CaptureMode = CaptureMode.THREAD_LOCAL) -> Iterator[Capture]:
    """Captures the work queued on ``stream`` inside the block.

    >>> with capture(stream) as recorded:
    ...     prepared.launch(stream, x)
    >>> graph_exec = recorded.graph.instantiate()

    If the block raises, the capture is ended and its graph discarded.
    """
    result = Capture()
    begin_capture(stream, mode)
    try:
        yield result
    except BaseException:
        try:
            end_capture(stream).close()
        except CudaError:
            pass  # the capture was invalidated; the original error matters
        raise
    result.graph = end_capture(stream)


class Graph:
    """A captured (not yet executable) CUDA graph; owned and destroyed with this object."""

    __slots__ = ("handle", "device", "_finalizer", "__weakref__")

    def __init__(self, handle: Any, device: Device) -> None:
        self.handle = handle
        self.device = device
        self._finalizer = weakref.finalize(self, _driver.release, _driver.api(), "cuGraphDestroy", handle)

    @property
    def node_count(self) -> int:
        """The number of nodes (kernels, copies, memsets, ...) in the graph."""
        nodes, count = _driver.call("cuGraphGetNodes", self.handle, 0)
        del nodes
        return int(count)

    def instantiate(self, *, upload_stream: Stream | None = None) -> GraphExec:
        """An executable graph; with ``upload_stream`` it is uploaded there ahead of launch."""
        self.device.activate()
        handle = _driver.call("cuGraphInstantiate", self.handle, 0)
        graph_exec = GraphExec(handle, self.device)
        if upload_stream is not None:
            graph_exec.upload(upload_stream)
        return graph_exec

    def close(self) -> None:
        self._finalizer()


class GraphExec:
    """An instantiated graph: `launch` replays it at the cost of one driver call."""

    __slots__ = ("handle", "device", "_finalizer", "_launch_fn", "__weakref__")

    def __init__(self, handle: Any, device: Device) -> None:
        self.handle = handle
        self.device = device
        self._finalizer = weakref.finalize(self, _driver.release, _driver.api(), "cuGraphExecDestroy", handle)
        self._launch_fn = _driver.api().cuGraphLaunch

    def launch(self, stream: Stream) -> None:
        """Queues one replay of the whole graph on ``stream``."""
        err = self._launch_fn(self.handle, stream.handle)[0]
        if err:
            _driver.raise_error(err, "cuGraphLaunch")

    def upload(self, stream: Stream) -> None:
        """Prepares the graph's resources on ``stream`` ahead of its first launch."""
        _driver.call("cuGraphUpload", self.handle, stream.handle)

    def update(self, graph: Graph) -> None:
        """Takes the parameters (kernel arguments, pointers) of ``graph``, which must
        have the same topology; raises `GraphUpdateError` otherwise."""
        api = _driver.api()
        err, info = api.cuGraphExecUpdate(self.handle, graph.handle)
        if err:
            reason = getattr(getattr(info, "result", None), "name", "unknown reason")
            raise GraphUpdateError(
                int(err),
                api.CUresult(int(err)).name,
                f"the new graph cannot update this executable graph: {reason}",
                "cuGraphExecUpdate",
            )

    def close(self) -> None:
        self._finalizer()
