"""cutile-kernels' packaging: its exports exist and its dependencies are exactly its layers."""

import re
import tomllib
from pathlib import Path

import cutile_kernels

DEPENDENCIES = set("cutile".split())


def test_every_export_is_a_documented_function_with_a_launch_form() -> None:
    assert cutile_kernels.__all__
    for name in cutile_kernels.__all__:
        function = getattr(cutile_kernels, name)
        assert callable(function) and function.__doc__ and callable(function.launch), name


def test_distribution_declares_exactly_its_layers() -> None:
    project = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]
    requires = project["dependencies"]
    names = {re.split(r"[<>=!~ ;\[]", r, maxsplit=1)[0].lower().replace("_", "-") for r in requires}
    assert names == DEPENDENCIES
