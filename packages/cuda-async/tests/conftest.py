"""Fixtures of cuda_async's tests.

Tests not marked ``gpu`` run in host mode (`HostPolicy`), so they behave the
same on a machine with a GPU; `fake_driver` swaps in `FakeDriver` to check
stream and event logic without one.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import cuda_async as ca

sys.path.insert(0, str(Path(__file__).parent))  # for cuda_async_testkit and the fake driver

from cuda_async_fakedriver import FakeDriver  # noqa: E402


@pytest.fixture(autouse=True)
def host_mode(request: pytest.FixtureRequest) -> Iterator[None]:
    """CPU tests run every op eagerly on the host, whatever the machine has."""
    ca.set_default_policy(None)
    if "gpu" in request.keywords:
        yield
        return
    with ca.using_policy(ca.HostPolicy()):
        yield


@pytest.fixture
def fake_driver() -> Iterator[FakeDriver]:
    """Swaps the CUDA driver for `FakeDriver` for one test; restores everything after."""
    import gc

    from cuda_core import _device, _driver

    from cuda_async import _future

    fake = FakeDriver()
    previous = _driver.use_driver(fake)
    saved_devices = dict(_device.Device._instances)
    _device.Device._instances.clear()
    _device._tls.__dict__.clear()
    saved_hooks = list(_driver._exit_hooks)
    _driver._exit_hooks.clear()
    saved_pool = dict(_future._event_pool)
    _future._event_pool.clear()
    try:
        yield fake
    finally:
        fake.finish_events()
        deadline = time.monotonic() + 5
        while _future.poller.pending and time.monotonic() < deadline:
            time.sleep(0.001)
        gc.collect()
        _future._event_pool.clear()
        _future._event_pool.update(saved_pool)
        _driver.use_driver(previous)
        _device.Device._instances.clear()
        _device.Device._instances.update(saved_devices)
        _device._tls.__dict__.clear()
        _driver._exit_hooks[:] = saved_hooks
