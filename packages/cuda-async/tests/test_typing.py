"""Op results are statically typed: mypy --strict accepts typecheck/check_result_types.py."""

from __future__ import annotations

from pathlib import Path

import pytest


def test_results_are_statically_typed() -> None:
    api = pytest.importorskip("mypy.api")
    path = Path(__file__).parent / "typecheck" / "check_result_types.py"
    out, err, status = api.run(["--strict", "--no-incremental", "--python-version", "3.11", str(path)])
    assert status == 0, out + err
