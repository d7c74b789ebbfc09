"""cutile-cuda-async is a skeleton until its issue fills it; these checks pin its packaging."""

import importlib.metadata
import re

import cuda_async

DEPENDENCIES = set("cutile-cuda-core".split())


def test_skeleton_exports_no_placeholder_api() -> None:
    assert cuda_async.__all__ == []
    assert cuda_async.__doc__ and "Not built yet" in cuda_async.__doc__


def test_distribution_declares_exactly_its_layers() -> None:
    requires = importlib.metadata.requires("cutile-cuda-async") or []
    names = {re.split(r"[<>=!~ ;\[]", r, maxsplit=1)[0].lower().replace("_", "-") for r in requires}
    assert names == DEPENDENCIES
