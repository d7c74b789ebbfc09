"""CUDA graphs and batches of launches: `Graph`, `GraphScope`, `graph_scope`,
`batch` (cuda_async's, seen through cutile's tensors)."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Any

import cuda_async
from cutile import _backend
from cutile._errors import ArgumentTypeError, GraphUpdateError
from cutile._tensor import Partition, StorageResource, Tensor


def _graph_input(tensor: Any, what: str) -> cuda_async.ResourceView:
    """A tensor (or partition) given to `Graph.update`, as cuda_async compares it:
    its memory, with the layout the captured work would read it by."""
    if isinstance(tensor, Partition):
        tensor = tensor._tensor
    if not isinstance(tensor, Tensor):
        raise GraphUpdateError(f"Graph.update: {what} must be a tensor, got {type(tensor).__name__}")
    return cuda_async.ResourceView(tensor._storage.resource, tensor.layout(), "the tensor given for it")


class Graph:
    """A captured CUDA graph of launches: ``launch()`` replays it (an op to sync or
    await); ``update(...)`` gives the next replay new input tensors of the same
    layout; ``inputs`` lists what ``update`` takes, in order."""

    def __init__(self, graph: cuda_async.CudaGraph[Any]) -> None:
        self._graph = graph

    @property
    def result(self) -> Any:
        return self._graph.result

    @property
    def node_count(self) -> int:
        return self._graph.node_count

    @property
    def inputs(self) -> list[cuda_async.ResourceView]:
        """The graph's read-only inputs, in the order `update` takes them: each with
        its ``label`` (the parameter and launch that first read it) and ``layout``
        (a `TensorLayout`: dtype, shape, strides, device)."""
        return self._graph.input_views

    def launch(self) -> cuda_async.DeviceOp[Any]:
        """An op replaying the graph (after copying in the inputs given to `update`)."""
        return self._graph.launch()

    def update(self, *new_inputs: Any, replace: dict[Any, Any] | None = None) -> None:
        """New contents for the graph's read-only inputs, in the order of `inputs`
        (None keeps one), or ``replace={old_tensor: new_tensor}``. Each new tensor
        must have the layout of the one it replaces (`GraphUpdateError` otherwise,
        naming the parameter and both layouts); its values are copied in before
        the next replay."""
        given = [None if t is None else _graph_input(t, f"input {i}") for i, t in enumerate(new_inputs)]
        replaced = {_graph_input(old, "a key of replace").resource: _graph_input(new, "a value of replace")
                    for old, new in (replace or {}).items()}
        inputs = self._graph.input_views
        targets = [(view.resource, view.label) for view, new in zip(inputs, given) if new is not None]
        targets += [(resource, "a key of replace") for resource in replaced]
        for resource, label in targets:
            if isinstance(resource, StorageResource) and resource.storage.frozen:
                raise GraphUpdateError(f"Graph.update: {label} is frozen memory (Tensor.freeze), which nothing may "
                                       "write; its replays read it as it is")
        self._graph.update(*given, replace=replaced)

    def close(self) -> None:
        self._graph.close()


class GraphScope:
    """The recorder of `graph_scope`; ``graph`` is set when the block exits."""

    def __init__(self, scope: cuda_async.GraphScope) -> None:
        self._scope = scope

    @property
    def graph(self) -> Graph:
        return Graph(self._scope.graph)


@contextlib.contextmanager
def graph_scope(name: str = "graph") -> Iterator[GraphScope]:
    """Records the launches synced on this thread inside the block into one graph.

    >>> with cutile.graph_scope("step") as scope:
    ...     y = rms_norm(y, x, w).sync()     # recorded, returns without waiting
    >>> scope.graph.launch().sync()
    """
    with cuda_async.graph_scope(name) as scope:
        yield GraphScope(scope)


@contextlib.contextmanager
def batch(name: str = "batch", *, wait: bool = True,
          after: cuda_async.Batch | None = None) -> Iterator[cuda_async.Batch]:
    """Launches synced on this thread inside the block are enqueued in order on one
    stream, as one job, and return at once; the block's end waits for all of them.

    >>> with cutile.batch():
    ...     for _ in range(1000):
    ...         z, x, y = add(z, x, y).sync()   # no host wait per launch
    >>> z.to_numpy()                            # every launch has completed

    The stream orders the launches, so an output may feed the next launch at once.
    Until the block ends the batch holds every tensor it used: the host may not
    read what it writes (`OwnershipError`). With ``wait=False`` the end does not
    wait; ``batch.future`` completes (and frees the tensors) when the work is done.
    With ``after`` (a batch that ended with ``wait=False``) the launches continue
    that batch's stream: they may use what it still holds (its outputs) at once, so
    the host queues this batch while the device runs that one; wait for its future
    before reading what it wrote.
    On the interpreter every launch runs at once.

    >>> with cutile.batch("layer 0", wait=False) as first:
    ...     h = layer(h)
    >>> with cutile.batch("layer 1", wait=False, after=first) as second:
    ...     h = layer(h)                            # reads layer 0's output at once
    >>> first.future.result()                       # layer 0 done: its tensors are free
    """
    if after is not None and not isinstance(after, cuda_async.Batch):
        raise ArgumentTypeError(f"batch(): parameter 'after' must be a batch (what `with cutile.batch(..., "
                                f"wait=False) as b` gives), got {type(after).__name__}")
    _backend.current()  # the backend's policy decides the batch's stream
    with cuda_async.batch(name, wait=wait, after=after) as active:
        yield active


#: whether launches run now are programmatic dependent launches (`dependent_launches`)
dependent: contextvars.ContextVar[bool] = contextvars.ContextVar("cutile_dependent_launches", default=False)


@contextlib.contextmanager
def dependent_launches(enabled: bool = True) -> Iterator[None]:
    """Launches run inside the block on the GPU are programmatic dependent launches:
    each may start while the kernel before it on its stream finishes, and waits for
    that kernel at its start, before any memory access, so the two overlap by the gap
    between them and the predecessor's last blocks, never in what they touch.

    >>> with cutile.dependent_launches(), cutile.graph_scope("step") as scope:
    ...     h = layer(h)                      # the graph keeps the launches' dependent edges

    It pays where launches queue back to back: in a `batch`, a `graph_scope` (the
    replayed graph keeps it), a chain of ops. Each kernel is compiled once more for it
    (`CompileOptions.dependent_launch`: its start lets its own dependents start, then
    waits): warm a graph's kernels up inside the block before the capture. A kernel
    that places ``grid_dependency_control_wait()`` itself may compute before it and
    read there only tensors whose memory is frozen (`Tensor.freeze`; another access
    before it is refused when it compiles so, an unfrozen tensor when it launches).
    Launches inside run on the Python launch path; with ``enabled=False`` the block
    turns it off again. On the interpreter, which runs launches one after another, it
    changes nothing but those checks."""
    if not isinstance(enabled, bool):
        raise ArgumentTypeError(f"dependent_launches(): parameter 'enabled' must be a bool, got {enabled!r}")
    token = dependent.set(enabled)
    try:
        if enabled:
            with cuda_async.python_path_only():  # the native path launches each kernel as compiled plainly
                yield
        else:
            yield
    finally:
        dependent.reset(token)
