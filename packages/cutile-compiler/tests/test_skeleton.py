"""cutile-compiler is a skeleton until its issue fills it; these checks pin its packaging."""

import re
import tomllib
from pathlib import Path

import cutile_compiler

DEPENDENCIES = set("cutile-ir numpy".split())


def test_skeleton_exports_no_placeholder_api() -> None:
    assert cutile_compiler.__all__ == []
    assert cutile_compiler.__doc__ and "Not built yet" in cutile_compiler.__doc__


def test_distribution_declares_exactly_its_layers() -> None:
    project = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]
    requires = project["dependencies"]
    names = {re.split(r"[<>=!~ ;\[]", r, maxsplit=1)[0].lower().replace("_", "-") for r in requires}
    assert names == DEPENDENCIES
