"""cutile's tests run kernels on the CPU interpreter unless marked gpu."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cutile import _backend


@pytest.fixture(autouse=True)
def interpreter_backend(request: pytest.FixtureRequest) -> Iterator[None]:
    if "gpu" in request.keywords:
        _backend.reset_for_tests("gpu")
    else:
        _backend.reset_for_tests("interpreter")
    yield
    _backend.reset_for_tests(None)
