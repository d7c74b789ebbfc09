"""Host-mode stand-ins for cutile's tensors and kernel launches, shared by the CPU tests.

`HostTensor` is a `Resource` whose storage is a Python list; `kernel` makes a
leaf op that runs a Python function over tensors eagerly (stream None), the way
cutile's interpreter backend plugs into cuda_async.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import cuda_core

import cuda_async as ca


T = TypeVar("T")


async def while_ticking(awaitable: Awaitable[T]) -> tuple[T, int]:
    """Awaits ``awaitable`` while another task counts event-loop turns (one per
    millisecond): (its result, the turns), to show the loop was never blocked."""
    stop = asyncio.Event()
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while not stop.is_set():
            ticks += 1
            await asyncio.sleep(0.001)

    task = asyncio.create_task(ticker())
    try:
        result = await awaitable
    finally:
        stop.set()
        await task
    return result, ticks


class HostTensor(ca.Resource):
    """A list of floats as a resource; its layout is ("f64", length)."""

    def __init__(self, name: str, values: Sequence[float]) -> None:
        super().__init__(name, layout=("f64", len(values)))
        self.data = [float(v) for v in values]

    def copy_from(self, source: ca.Resource, stream: cuda_core.Stream | None) -> None:
        assert stream is None and isinstance(source, HostTensor)
        self.data[:] = source.data


class Counter:
    """Counts calls of kernels, to check laziness and run-once semantics."""

    def __init__(self) -> None:
        self.calls: list[str] = []


def kernel(
    name: str,
    body: Callable[..., None],
    writes: Sequence[HostTensor],
    reads: Sequence[HostTensor] = (),
    counter: Counter | None = None,
    result: Any = None,
) -> ca.FnOp[Any]:
    """A leaf op that calls ``body(*writes, *reads)`` on the host and returns
    ``result`` (default: the tuple of writes then reads, like a cutile launch)."""
    out = tuple(writes) + tuple(reads) if result is None else result

    def run(stream: cuda_core.Stream | None) -> Any:
        assert stream is None, "host-mode kernels get no stream"
        if counter is not None:
            counter.calls.append(name)
        body(*writes, *reads)
        return out

    return ca.DeviceOp.from_fn(run, reads=reads, writes=writes, name=name)


def add(z: HostTensor, x: HostTensor, y: HostTensor, counter: Counter | None = None) -> ca.FnOp[Any]:
    """z = x + y."""

    def body(z: HostTensor, x: HostTensor, y: HostTensor) -> None:
        z.data[:] = [a + b for a, b in zip(x.data, y.data)]

    return kernel("launch of add", body, [z], [x, y], counter)


def scale(z: HostTensor, factor: float, counter: Counter | None = None) -> ca.FnOp[Any]:
    """z *= factor (reads and writes z)."""

    def body(z: HostTensor) -> None:
        z.data[:] = [factor * a for a in z.data]

    return kernel("launch of scale", body, [z], [], counter)
