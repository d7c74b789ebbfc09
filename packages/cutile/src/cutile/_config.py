"""The environment variables the runtime reads, declared like the compiler's
(`cutile_compiler.config`): one typed `Knob` each, read at call time, errors that
name the variable. `KNOBS` is every variable of cutile, the compiler's first, in
the order the README lists them; `knobs_markdown()` renders that table."""

from __future__ import annotations

from typing import Any

from cutile_compiler.config import KNOBS as COMPILER_KNOBS
from cutile_compiler.config import ConfigError, Knob, choice, const, parse_bool
from cutile_compiler.config import knobs_markdown as _render

__all__ = ["BACKEND", "CHECKED", "KNOBS", "TUNE", "ConfigError", "knobs_markdown"]

BACKEND: Knob[str] = Knob(
    "CUTILE_BACKEND", "gpu|interpreter|auto", choice("auto", "gpu", "interpreter"), const("auto"), "auto",
    "Where kernels run: the GPU, the numpy interpreter, or auto (GPU when one is present).",
)
CHECKED: Knob[bool] = Knob(
    "CUTILE_CHECKED", "bool", parse_bool, const(False), "0",
    "1 makes the interpreter check reads of memory nothing wrote (slower).",
)

TUNE: Knob[bool] = Knob(
    "CUTILE_TUNE", "bool", parse_bool, const(False), "0",
    "1 makes a `cutile.tune.Tuner` search a shape it has no winner for (on first use) instead of using its default.",
)

RUNTIME_KNOBS: tuple[Knob[Any], ...] = (BACKEND, CHECKED, TUNE)
KNOBS: tuple[Knob[Any], ...] = COMPILER_KNOBS + RUNTIME_KNOBS


def knobs_markdown() -> str:
    """The README's table of every variable cutile reads."""
    return _render(KNOBS)
