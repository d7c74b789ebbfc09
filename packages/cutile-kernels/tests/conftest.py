"""cutile-kernels' tests run the kernels on the CPU interpreter, also where a GPU is
present; tests marked ``gpu`` run on the GPU (and are skipped where there is none).
`cutile_kernels_testkit` (the row kernels) and `matmul_testkit` (GEMV and split-K) hold
their shared inputs, references and checks; `host_path_testkit` the host-path tests'
fake GPU."""

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from cutile import _backend

sys.path.insert(0, str(Path(__file__).parent))  # for the testkit modules


@pytest.fixture(autouse=True)
def selected_backend(request: pytest.FixtureRequest) -> Iterator[str]:
    backend = "gpu" if request.node.get_closest_marker("gpu") is not None else "interpreter"
    _backend.reset_for_tests(backend)
    yield backend
    _backend.reset_for_tests(None)
