"""cutile's tests run kernels on the CPU interpreter; a test module that sets
``BOTH_BACKENDS = True`` runs each of its tests on the GPU as well (those runs
are marked ``gpu``, so they are skipped where no GPU is present)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cutile import _backend


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "backend" in metafunc.fixturenames:
        params = ["interpreter"]
        if getattr(metafunc.module, "BOTH_BACKENDS", False):
            params.append(pytest.param("gpu", marks=pytest.mark.gpu))
        metafunc.parametrize("backend", params, indirect=True)


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> str:
    return str(getattr(request, "param", "interpreter"))


@pytest.fixture(autouse=True)
def selected_backend(backend: str) -> Iterator[str]:
    _backend.reset_for_tests(backend)
    yield backend
    _backend.reset_for_tests(None)
