"""cutile-kernels' packaging: its dependencies, and every export a documented callable."""

import re
import tomllib
from pathlib import Path

import cutile_kernels

DEPENDENCIES = set("cutile".split())


def test_every_export_is_a_documented_callable() -> None:
    assert cutile_kernels.__all__
    for name in cutile_kernels.__all__:
        exported = getattr(cutile_kernels, name)
        assert callable(exported) and exported.__doc__, name


def test_distribution_declares_exactly_its_layers() -> None:
    project = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]
    requires = project["dependencies"]
    names = {re.split(r"[<>=!~ ;\[]", r, maxsplit=1)[0].lower().replace("_", "-") for r in requires}
    assert names == DEPENDENCIES
