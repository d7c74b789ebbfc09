"""CUDA graphs: capture ops once, replay them at the cost of one driver call.

`DeviceOp.graph` captures one op; `graph_scope` records every op run (``sync``,
``sync_on``, ``schedule``) on the thread inside a ``with`` block into one graph.
Capture queues the work on a private capture stream where the driver records it
instead of running it; `CudaGraph.launch` is itself a `DeviceOp` that replays it
and holds the graph's resources like any other op. On the host (a host policy),
capture runs the ops once and replay runs their leaves again.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager, nullcontext
from typing import Any, Generic, TypeVar

import cuda_core

from cuda_async import _batch, _capture
from cuda_async._capture import CaptureState
from cuda_async._errors import raised
from cuda_async._op import DeviceOp, FnOp, record
from cuda_async._policy import SchedulingPolicy, default_policy
from cuda_async._resource import Access, AccessSet, Resource, ResourceView

T = TypeVar("T")


class CudaGraph(Generic[T]):
    """A captured, instantiated graph and the resources its work touches.

    Attributes:
        name: for messages.
        result: the captured op's result (for a `graph_scope`, the list of the
            results of the recorded ops); `launch` returns it.
        stream: the capture stream, where `launch` replays by default (None on the host).
    """

    def __init__(
        self,
        name: str,
        result: T,
        state: CaptureState,
        executable: cuda_core.GraphExec | None,
        node_count: int,
    ) -> None:
        self.name = name
        self.result = result
        self.stream = state.stream
        self._executable = executable
        self._leaves = list(state.leaves)
        self._accesses = dict(state.accesses)
        self._views = dict(state.views)
        self._node_count = node_count
        self._pending: dict[Resource, Resource] = {}
        self._closed = False
        self.launches = 0
        # What a replay without updates reads and writes, merged once (a decode step's
        # graph holds hundreds of resources; `launch` is its per-replay host cost).
        self._replay_accesses: AccessSet | None = None

    def __repr__(self) -> str:
        where = "host" if self._executable is None else f"{self._node_count} nodes"
        return f"<CudaGraph {self.name!r} ({where})>"

    @property
    def is_host(self) -> bool:
        """Whether this is a host graph (replayed eagerly, no driver)."""
        return self._executable is None

    @property
    def node_count(self) -> int:
        """Nodes of the device graph (kernels, copies, ...); on the host, leaf ops recorded."""
        return self._node_count

    @property
    def resources(self) -> list[Resource]:
        """Every resource the captured work reads or writes, in order of first use."""
        return list(self._accesses)

    @property
    def inputs(self) -> list[Resource]:
        """The resources the captured work only reads, in order of first use:
        what `update` takes positionally."""
        return [r for r, access in self._accesses.items() if access is Access.READ]

    @property
    def outputs(self) -> list[Resource]:
        """The resources the captured work writes, in order of first use."""
        return [r for r, access in self._accesses.items() if access is Access.WRITE]

    @property
    def input_views(self) -> list[ResourceView]:
        """How the captured work uses each of `inputs` (same order): the
        `ResourceView` of the first op that used it, with its layout and label."""
        return [self.view_of(r) for r in self.inputs]

    def view_of(self, resource: Resource) -> ResourceView:
        """How the captured work uses ``resource`` (the first op's view of it, or the
        resource's own layout when that op gave none)."""
        return self._views.get(resource) or ResourceView.of(resource)

    def update(self, *new_inputs: Resource | ResourceView | None,
               replace: Mapping[Resource, Resource | ResourceView] | None = None) -> None:
        """Gives the next `launch` new inputs: their contents are copied into the
        captured resources, in stream order, just before the replay.

        Positional arguments replace `inputs` in order (None keeps one); ``replace``
        maps any captured resource to its new contents. A new input is a resource
        or a `ResourceView` (a resource with the layout its contents have); its
        layout must equal the captured one's (`view_of`), and its resource's the
        captured resource's (the whole memory is copied). `GraphUpdateError`
        otherwise, naming the captured input by its label and both layouts.
        """
        inputs = self.inputs
        if len(new_inputs) > len(inputs):
            raise raised.graph_update(
                f"graph {self.name!r}: update takes at most {len(inputs)} input(s), got {len(new_inputs)}"
            )
        pairs: list[tuple[str, Resource, Resource | ResourceView]] = [
            (f"input {index}", old, new) for index, (old, new) in enumerate(zip(inputs, new_inputs)) if new is not None
        ]
        pairs.extend(("", old, new) for old, new in (replace or {}).items())
        staged: dict[Resource, Resource] = {}
        for where, old, new in pairs:
            if isinstance(new, ResourceView):
                view = new
            elif isinstance(new, Resource):
                view = ResourceView.of(new)
            else:
                raise raised.graph_update(
                    f"graph {self.name!r}: update takes Resource or ResourceView objects, got {type(new).__name__}")
            if old not in self._accesses:
                raise raised.graph_update(
                    f"graph {self.name!r}: {getattr(old, 'name', old)!s} is not used by the captured work")
            captured = self.view_of(old)
            subject = f"{where} ({captured.label})" if where else captured.label
            if view.layout != captured.layout:
                raise raised.graph_update(
                    f"graph {self.name!r}: {subject} was captured as {captured.layout}; {view.label} is "
                    f"{view.layout}: a graph input is replaced only by one of the same layout"
                )
            if view.resource.layout != old.layout:
                raise raised.graph_update(
                    f"graph {self.name!r}: {subject}: {view.label} has the captured layout "
                    f"{captured.layout}, but its memory ({view.resource.layout}) differs from the captured "
                    f"memory ({old.layout}); an update copies the whole memory"
                )
            if view.resource is not old:
                staged[old] = view.resource
        self._pending.update(staged)

    def launch(self) -> DeviceOp[T]:
        """An op that replays the graph (after copying in the inputs given to `update`).

        Like any op it is run with ``sync()``, ``sync_on(stream)``, ``await`` or
        ``schedule()``; it reads and writes the captured resources, so it waits for
        and excludes other ops on them.
        """
        if self._closed:
            raise ValueError(f"graph {self.name!r} has been closed")
        updates = list(self._pending.items())
        self._pending.clear()
        accesses = self._replay_accesses if not updates else None
        if accesses is None:
            reads = [r for r, a in self._accesses.items() if a is Access.READ and r not in dict(updates)]
            reads += [new for _, new in updates]
            writes = [r for r, a in self._accesses.items() if a is Access.WRITE] + [old for old, _ in updates]
            accesses = AccessSet(tuple(reads), tuple(writes))
            if not updates:
                self._replay_accesses = accesses

        def replay(stream: cuda_core.Stream | None) -> T:
            for old, new in updates:
                old.copy_from(new, stream)
            if self._executable is None:
                for leaf in self._leaves:
                    leaf.fn(None)
            else:
                if stream is None:
                    raise ValueError(
                        f"graph {self.name!r} is a device graph: launch it on a stream, not on the host"
                    )
                self._executable.launch(stream)
            self.launches += 1
            return self.result

        return FnOp.from_accesses(replay, accesses, name=f"replay of {self.name}")

    def close(self) -> None:
        """Destroys the executable graph; later `launch` calls are refused."""
        self._closed = True
        self._leaves = []
        if self._executable is not None:
            self._executable.close()


class GraphScope:
    """The recorder of a `graph_scope` block; `graph` is set when the block exits."""

    def __init__(self, state: CaptureState) -> None:
        self._state = state
        self._graph: CudaGraph[list[Any]] | None = None

    @property
    def graph(self) -> CudaGraph[list[Any]]:
        """The graph (after the ``with`` block)."""
        if self._graph is None:
            raise raised.graph_capture(f"graph {self._state.name!r}: the capture has not finished")
        return self._graph

    def record(self, op: DeviceOp[T]) -> T:
        """Records ``op`` into the graph; same as ``op.sync()`` inside the block."""
        if _capture.current() is not self._state:
            raise raised.graph_capture(f"graph {self._state.name!r}: record is only valid inside its with block")
        return record(self._state, op)


@contextmanager
def graph_scope(name: str = "graph", *, policy: SchedulingPolicy | None = None) -> Iterator[GraphScope]:
    """Records the ops run on this thread inside the block into one `CudaGraph`.

    >>> with graph_scope("step") as scope:
    ...     y = norm(x).sync()          # recorded, not run: returns without waiting
    ...     z = matvec(w, y).sync()
    >>> scope.graph.launch().sync()     # runs both

    The graph's device is that of ``policy``'s next stream (default policy); with
    a host policy the graph is a host graph. Inside the block nothing may wait for
    the device and nothing may allocate (`GraphCaptureError`).
    """
    if _batch.current() is not None:
        raise raised.graph_capture(
            f"cannot capture graph {name!r} inside the batch {_batch.current().name!r} "  # type: ignore[union-attr]
            "(a batch runs its ops, a capture records them): capture before or after the batch")
    first = (policy if policy is not None else default_policy()).next_stream()
    stream = None if first is None else cuda_core.Stream.create(first.device)
    state = CaptureState(name, stream)
    _capture.push(state)
    scope = GraphScope(state)
    try:
        # cuda_core.capture ends the capture (and drops its graph) if the block raises.
        recording = (cuda_core.capture(stream, cuda_core.CaptureMode.THREAD_LOCAL) if stream is not None
                     else nullcontext(cuda_core.Capture()))
        block_done = False
        try:
            with recording as recorded:
                yield scope
                block_done = True  # from here, a failure is the end of the capture's
        except cuda_core.CudaError as exc:
            if not block_done:
                raise
            raise raised.graph_capture(
                f"the capture of graph {name!r} failed: {exc} (something in the block waited for "
                "the device, allocated synchronously, or used another stream outside the capture)"
            ) from exc
        executable: cuda_core.GraphExec | None = None
        node_count = len(state.leaves)
        if recorded.graph is not None:
            node_count = recorded.graph.node_count
            executable = recorded.graph.instantiate(upload_stream=stream)
            recorded.graph.close()
    finally:
        _capture.pop()
    scope._graph = CudaGraph(name, list(state.results), state, executable, node_count)
