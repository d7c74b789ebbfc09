"""cutile is a skeleton until its issue fills it; these checks pin its packaging."""

import re
import tomllib
from pathlib import Path

import cutile

DEPENDENCIES = set("cutile-cuda-core cutile-cuda-async cutile-ir cutile-compiler numpy ml-dtypes".split())


def test_skeleton_exports_no_placeholder_api() -> None:
    assert cutile.__all__ == []
    assert cutile.__doc__ and "Not built yet" in cutile.__doc__


def test_distribution_declares_exactly_its_layers() -> None:
    project = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]
    requires = project["dependencies"]
    names = {re.split(r"[<>=!~ ;\[]", r, maxsplit=1)[0].lower().replace("_", "-") for r in requires}
    assert names == DEPENDENCIES
