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

from cuda_core.testing import FakeDriver, use_fake_driver

sys.path.insert(0, str(Path(__file__).parent))  # for cuda_async_testkit


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
    """Swaps the CUDA driver for `cuda_core.testing.FakeDriver` for one test; restores
    everything after (cuda_async's event pool and poller included)."""
    from cuda_async import _future

    saved_pool = dict(_future._event_pool)
    _future._event_pool.clear()
    with use_fake_driver() as fake:
        try:
            yield fake
        finally:
            fake.finish_events()
            deadline = time.monotonic() + 5
            while _future.poller.pending and time.monotonic() < deadline:
                time.sleep(0.001)
            _future._event_pool.clear()
            _future._event_pool.update(saved_pool)
