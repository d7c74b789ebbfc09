"""Fixtures for cuda_core's tests.

`fake_driver` swaps cuda.bindings.driver for `cuda_core.testing.FakeDriver`, a
small in-process stand-in that keeps device memory in host bytearrays and records
every call, so that argument packing, error mapping and resource lifetimes are
tested on machines without a GPU. Its enums are the real ones from cuda-bindings.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cuda_core.testing import FakeDriver, use_fake_driver

__all__ = ["fake_driver"]


@pytest.fixture
def fake_driver() -> Iterator[FakeDriver]:
    with use_fake_driver() as fake:
        yield fake
