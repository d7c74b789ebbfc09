"""What the host-cost benchmarks share: a fake driver on which launches, waits and
events cost nothing, so what they time is cutile's host work."""

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import cuda_async
from cuda_core._native import EntryPoints
from cuda_core.testing import SUCCESS, FakeDriver, use_fake_driver
from cutile import _gpu, _native


@contextmanager
def free_fake_driver() -> Iterator[FakeDriver]:
    """The GPU backend on a `FakeDriver` whose stream-ordered calls do nothing (the
    native path's C stand-ins too), under a one-stream policy."""
    fake = FakeDriver()
    free = lambda *_: (SUCCESS,)  # noqa: E731
    fake.cuLaunchKernel = free  # type: ignore[method-assign]
    fake.cuStreamSynchronize = free  # type: ignore[method-assign]
    fake.cuEventRecord = free  # type: ignore[method-assign]
    fake.cuCtxSetCurrent = free  # type: ignore[method-assign]
    if _native.load() is not None:  # the native path (loaded now, not at the first launch) calls C stand-ins that do nothing
        null = EntryPoints(*_native.module.null_entry_points())
        fake.native_entry_points = lambda: null  # type: ignore[method-assign]
    with use_fake_driver(fake), cuda_async.using_policy(cuda_async.SingleStream()):
        yield fake


def register(fake: FakeDriver, launch: Any) -> None:
    """Compiles the launch's kernel for sm_90, tells the fake driver its parameters and
    cancels the launch (made only for this)."""
    compiled = launch.kernel.compiled(launch.plan().spec, "sm_90")
    fake.kernels[compiled.name] = _gpu.fake_param_layout(compiled.abi)
    launch.cancel()


def per_call_us(modes: dict[str, Callable[[int], None]], calls: int, repeats: int, clock: str) -> dict[str, list[float]]:
    """Each mode's µs per call: ``repeats`` samples of ``calls`` calls, the modes in turn
    within a repeat (so that a drift of the machine's speed touches them all alike), on
    the ``"wall"`` or the process's ``"cpu"`` clock."""
    timer = time.process_time if clock == "cpu" else time.perf_counter
    samples: dict[str, list[float]] = {name: [] for name in modes}
    for _ in range(repeats):
        for name, body in modes.items():
            start = timer()
            body(calls)
            samples[name].append((timer() - start) / calls * 1e6)
    return samples
