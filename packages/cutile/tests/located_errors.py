"""What the tests of located errors share: the line of a marked statement in a kernel's
source, and the check that a kernel is refused there, with a caret, on both paths."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import pytest

import cutile
from cutile_compiler._errors import TileTypeError


def line_of(function: Any, marker: str) -> int:
    """The source line of ``function`` (a kernel or a plain function) holding ``marker``."""
    lines, start = inspect.getsourcelines(function.function if hasattr(function, "function") else function)
    for offset, text in enumerate(lines):
        if marker in text:
            return start + offset
    raise AssertionError(marker)


def refused_on_both_paths(kernel: Any, make_args: Callable[[], list[Any]], marker: str, message: str,
                          **constants: Any) -> None:
    """``kernel`` is refused with ``message`` at the line marked ``marker``, with a
    caret, by ``cutile.compile`` for sm_90 and by the interpreter alike."""
    for path in ("compile for sm_90", "interpreter"):
        args = make_args()
        with pytest.raises(TileTypeError) as info:
            if path == "interpreter":
                kernel(*args, **constants).sync()
            else:
                cutile.compile(kernel, *args, arch="sm_90", **constants)
        error = info.value
        assert message in error.message, (path, error.message)
        assert error.location is not None and error.location.line == line_of(kernel, marker), (path, str(error))
        assert str(error).splitlines()[-1].strip().startswith("^"), (path, str(error))
