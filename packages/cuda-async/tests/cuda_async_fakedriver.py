"""A fake CUDA driver for cuda_async's stream and event logic on machines without a GPU.

Follows the pattern of cuda_core's own test driver (copied, not imported): a
module-like object swapped in with ``cuda_core._driver.use_driver``. It keeps
no memory; it logs every stream-ordered call as ``(call, stream, detail)`` so
that tests can check which stream each op ran on and which event waits were
enqueued. Events complete when recorded unless ``hold_events`` is set; then
`finish_events` completes them (from any thread).
"""

from __future__ import annotations

import itertools
import threading
from collections import Counter
from typing import Any

from cuda.bindings import driver as real_driver

SUCCESS = real_driver.CUresult.CUDA_SUCCESS
R = real_driver.CUresult


class FakeDriver:
    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.log: list[tuple[str, int, Any]] = []
        self.events: dict[int, dict[str, Any]] = {}
        self.live_streams: set[int] = set()
        self.hold_events = False
        self.waited_events: list[int] = []
        self.capturing: dict[int, list[tuple[str, Any]]] = {}
        self.graphs: dict[int, list[tuple[str, Any]]] = {}
        self.execs: dict[int, list[tuple[str, Any]]] = {}
        self._handles = itertools.count(0x1000)
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:  # enums and structs come from the real module
        if name.startswith("cu") and not name.startswith("cuuint"):
            raise AttributeError(f"FakeDriver has no {name}")
        return getattr(real_driver, name)

    def _count(self, name: str) -> None:
        with self._lock:
            self.calls[name] += 1

    def enqueue(self, call: str, stream: Any, detail: Any = None) -> None:
        """Logs a stream-ordered call (also used by the tests' fake kernels)."""
        handle = int(stream)
        with self._lock:
            if handle in self.capturing:
                self.capturing[handle].append((call, detail))
            else:
                self.log.append((call, handle, detail))

    def finish_events(self) -> None:
        with self._lock:
            for event in self.events.values():
                event["done"] = True

    # -- init / devices ----------------------------------------------------------
    def cuInit(self, flags: int) -> tuple[Any]:
        return (SUCCESS,)

    def cuGetErrorString(self, err: Any) -> tuple[Any, bytes]:
        return (SUCCESS, f"fake message for {R(int(err)).name}".encode())

    def cuDeviceGetCount(self) -> tuple[Any, int]:
        return (SUCCESS, 1)

    def cuDeviceGet(self, ordinal: int) -> tuple[Any, int]:
        return (SUCCESS, ordinal)

    def cuDevicePrimaryCtxRetain(self, dev: int) -> tuple[Any, int]:
        return (SUCCESS, 0xC0 + dev)

    def cuDevicePrimaryCtxRelease(self, dev: int) -> tuple[Any]:
        return (SUCCESS,)

    def cuCtxSetCurrent(self, ctx: Any) -> tuple[Any]:
        return (SUCCESS,)

    def cuCtxGetStreamPriorityRange(self) -> tuple[Any, int, int]:
        return (SUCCESS, 0, -5)

    # -- streams -----------------------------------------------------------------
    def cuStreamCreateWithPriority(self, flags: int, priority: int) -> tuple[Any, Any]:
        handle = next(self._handles)
        self.live_streams.add(handle)
        return (SUCCESS, real_driver.CUstream(handle))

    def cuStreamDestroy(self, stream: Any) -> tuple[Any]:
        self.live_streams.discard(int(stream))
        return (SUCCESS,)

    def cuStreamSynchronize(self, stream: Any) -> tuple[Any]:
        self._count("cuStreamSynchronize")
        with self._lock:
            self.log.append(("synchronize", int(stream), None))
            for event in self.events.values():
                if event["stream"] == int(stream):
                    event["done"] = True
        return (SUCCESS,)

    def cuStreamWaitEvent(self, stream: Any, event: Any, flags: int) -> tuple[Any]:
        self._count("cuStreamWaitEvent")
        self.waited_events.append(int(event))
        self.enqueue("wait", stream, self.events[int(event)]["stream"])
        return (SUCCESS,)

    # -- events ------------------------------------------------------------------
    def cuEventCreate(self, flags: int) -> tuple[Any, Any]:
        self._count("cuEventCreate")
        handle = next(self._handles)
        self.events[handle] = {"stream": None, "done": True}
        return (SUCCESS, real_driver.CUevent(handle))

    def cuEventDestroy(self, event: Any) -> tuple[Any]:
        self.events.pop(int(event), None)
        return (SUCCESS,)

    def cuEventRecord(self, event: Any, stream: Any) -> tuple[Any]:
        self._count("cuEventRecord")
        with self._lock:
            self.events[int(event)] = {"stream": int(stream), "done": not self.hold_events}
        self.enqueue("record", stream, int(event))
        return (SUCCESS,)

    def cuEventQuery(self, event: Any) -> tuple[Any]:
        self._count("cuEventQuery")
        return (SUCCESS if self.events[int(event)]["done"] else R.CUDA_ERROR_NOT_READY,)

    def cuEventSynchronize(self, event: Any) -> tuple[Any]:
        self._count("cuEventSynchronize")
        with self._lock:
            self.events[int(event)]["done"] = True
        return (SUCCESS,)

    # -- graphs ------------------------------------------------------------------
    def cuStreamBeginCapture(self, stream: Any, mode: Any) -> tuple[Any]:
        with self._lock:
            self.capturing[int(stream)] = []
        return (SUCCESS,)

    def cuStreamEndCapture(self, stream: Any) -> tuple[Any, Any]:
        handle = next(self._handles)
        with self._lock:
            self.graphs[handle] = self.capturing.pop(int(stream))
        return (SUCCESS, real_driver.CUgraph(handle))

    def cuGraphGetNodes(self, graph: Any, count: int) -> tuple[Any, Any, int]:
        return (SUCCESS, None, len(self.graphs[int(graph)]))

    def cuGraphDestroy(self, graph: Any) -> tuple[Any]:
        return (SUCCESS,)

    def cuGraphInstantiate(self, graph: Any, flags: int) -> tuple[Any, Any]:
        handle = next(self._handles)
        self.execs[handle] = list(self.graphs[int(graph)])
        return (SUCCESS, real_driver.CUgraphExec(handle))

    def cuGraphUpload(self, graph_exec: Any, stream: Any) -> tuple[Any]:
        return (SUCCESS,)

    def cuGraphLaunch(self, graph_exec: Any, stream: Any) -> tuple[Any]:
        self._count("cuGraphLaunch")
        self.enqueue("graph", stream, list(self.execs[int(graph_exec)]))
        return (SUCCESS,)

    def cuGraphExecDestroy(self, graph_exec: Any) -> tuple[Any]:
        return (SUCCESS,)
