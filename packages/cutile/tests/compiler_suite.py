"""The compiler's suite of kernels (cutile-compiler/tests/suite_kernels.py), as cutile's
tests run it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import cutile

PATH = Path(__file__).resolve().parents[2] / "cutile-compiler" / "tests" / "suite_kernels.py"


def load_suite() -> ModuleType:
    """The suite's module, executed anew (its kernels are this caller's own objects)."""
    spec = importlib.util.spec_from_file_location("cutile_suite_kernels", PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("cutile_suite_kernels", module)
    spec.loader.exec_module(module)
    return module


def entries(suite: dict[str, tuple[Any, bool, Any]]) -> dict[str, Any]:
    """Each kernel of ``suite`` (name -> function, unsafe, hints) as a cutile entry."""
    return {name: cutile.entry(unsafe=unsafe, hints=hints)(function) for name, (function, unsafe, hints) in suite.items()}
