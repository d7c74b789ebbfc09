"""Fixtures of cuda_async's tests.

Tests not marked ``gpu`` run in host mode (`HostPolicy`), so they behave the
same on a machine with a GPU; `fake_driver` (in test_streams.py's own module)
checks stream and event logic without one.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import cuda_async as ca

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
