"""cutile's tests run kernels on the CPU interpreter; a test module that sets
``BOTH_BACKENDS = True`` runs each of its tests on the GPU as well (those runs
are marked ``gpu``, so they are skipped where no GPU is present). A test marked
``gpu`` runs on the GPU only; one marked ``interpreter_only`` on the interpreter only."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cutile import _backend


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
