"""Shared by the host-path tests: cutile's GPU backend on cuda_core's fake driver, and
the parameter layout of a launch's kernel told to the fake."""

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import cuda_async
from cuda_core.testing import FakeDriver, use_fake_driver
from cutile import _backend, _gpu


@contextmanager
def fake_gpu(*caches: Any) -> Iterator[FakeDriver]:
    """The GPU backend on a fake driver under a one-stream policy, ``caches`` (the
    kernel factories' ``functools.cache``) emptied before and after: kernels loaded into
    the fake must not reach another backend."""
    def clear_all() -> None:
        for cache in caches:
            cache.cache_clear()

    saved = dict(_gpu._streams)
    clear_all()
    with use_fake_driver() as driver:
        _gpu._streams.clear()
        _backend.reset_for_tests("gpu")
        try:
            with cuda_async.using_policy(cuda_async.SingleStream()):
                yield driver
        finally:
            clear_all()
            _gpu._streams.clear()
            _gpu._streams.update(saved)
            _backend.reset_for_tests(None)


def register_layout(fake: FakeDriver, launch: Any) -> Any:
    """Gives the fake the parameter layout of ``launch``'s kernel (as its cubin declares
    it) and gives the compiled kernel; the launch is left to the caller."""
    compiled = launch.kernel.compiled(launch.plan().spec, "sm_90")
    fake.kernels[compiled.name] = _gpu.fake_param_layout(compiled.abi)
    return compiled
