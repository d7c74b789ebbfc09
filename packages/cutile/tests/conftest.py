"""cutile's tests run kernels on the CPU interpreter; a test module that sets
``BOTH_BACKENDS = True`` runs each of its tests on the GPU as well (those runs
are marked ``gpu``, so they are skipped where no GPU is present). A test marked
``gpu`` runs on the GPU only; one marked ``interpreter_only`` on the interpreter only.
`make_fake_gpu` runs the GPU backend on cuda_core's fake driver. A test that leaves a launch unrun (`cutile.LaunchNeverRunWarning`) fails, unless it
expects the warning (``pytest.warns``) or cancels the launch."""

from __future__ import annotations

import contextlib
import sys
import warnings
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

import cuda_async
import cutile
from cuda_core.testing import FakeDriver, use_fake_driver
from cutile import _backend, _gpu

sys.path.insert(0, str(Path(__file__).parent))  # for the shared helpers (located_errors, compiler_suite)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "backend" in metafunc.fixturenames:
        gpu = pytest.param("gpu", marks=pytest.mark.gpu)
        if metafunc.definition.get_closest_marker("gpu") is not None:
            params: list[object] = [gpu]  # a GPU-only test
        elif metafunc.definition.get_closest_marker("interpreter_only") is not None:
            params = ["interpreter"]
        else:
            params = ["interpreter"]
            if getattr(metafunc.module, "BOTH_BACKENDS", False):
                params.append(gpu)
        metafunc.parametrize("backend", params, indirect=True)


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> str:
    return str(getattr(request, "param", "interpreter"))


@pytest.fixture(autouse=True)
def selected_backend(backend: str) -> Iterator[str]:
    _backend.reset_for_tests(backend)
    yield backend
    _backend.reset_for_tests(None)


@pytest.fixture(autouse=True)
def no_launch_left_unrun() -> Iterator[None]:
    # Recorded here, not turned into errors: the warning comes from a finalizer,
    # where an error would only be printed. Other warnings go on to pytest.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", cutile.LaunchNeverRunWarning)
        yield
    unrun = [w for w in caught if issubclass(w.category, cutile.LaunchNeverRunWarning)]
    for w in caught:
        if w not in unrun:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)
    if unrun:
        pytest.fail(f"a launch was left unrun: {unrun[0].filename}:{unrun[0].lineno}: {unrun[0].message}")


FakeGpu = Callable[..., contextlib.AbstractContextManager[Any]]


@pytest.fixture
def make_fake_gpu() -> FakeGpu:
    """A factory of fake GPUs: ``with make_fake_gpu(driver, policy, kernels=...) as fake:``
    runs cutile's GPU backend on ``driver`` (a new `FakeDriver` by default) under the
    scheduling ``policy`` (one stream by default), and puts everything back after,
    clearing the caches of ``kernels`` before (a kernel loaded on the real GPU by an
    earlier test must not launch its handles through the fake) and after (their
    modules were loaded into the fake)."""

    @contextlib.contextmanager
    def fake_gpu(driver: FakeDriver | None = None, policy: cuda_async.SchedulingPolicy | None = None, *,
                 kernels: Iterable[cutile.Kernel] = ()) -> Iterator[Any]:
        saved_streams = dict(_gpu._streams)
        saved_pools, saved_multi_device = dict(_gpu._pools), _gpu._multi_device
        for kernel in kernels:
            kernel.clear_cache()
        with use_fake_driver(driver) as fake:
            _gpu._streams.clear()
            _gpu._pools.clear()
            _backend.reset_for_tests("gpu")
            try:
                with cuda_async.using_policy(policy or cuda_async.SingleStream(device=0)):
                    yield fake
            finally:
                for kernel in kernels:
                    kernel.clear_cache()
                _gpu._streams.clear()
                _gpu._streams.update(saved_streams)
                _gpu._pools.clear()
                _gpu._pools.update(saved_pools)
                _gpu._multi_device = saved_multi_device
                _backend.reset_for_tests("interpreter")

    return fake_gpu
