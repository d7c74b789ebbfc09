"""The compile-time DSL functions: static_assert, static_range, and the items of
ranges unrolled at compile time."""

from __future__ import annotations

import ast
from collections.abc import Sequence
from typing import Any, TYPE_CHECKING

from cutile_compiler._builtins._base import builtin, DSL_FUNCTIONS
from cutile_compiler._errors import bounded_repr
from cutile_compiler._ir import Value

if TYPE_CHECKING:
    from cutile_compiler._frontend import FrontEnd


@builtin
def static_assert(fe: FrontEnd, node: ast.Call, condition: Any, message: Any = "") -> None:
    """Fails compilation when a compile-time condition is false."""
    if isinstance(condition, Value):
        raise fe.type_error("static_assert needs a compile-time condition (constants and shapes only)", node)
    if not condition:
        said = message if isinstance(message, str) else bounded_repr(message)
        raise fe.type_error(f"static_assert failed{': ' + said if message else ''}", node)
    return None


class _StaticRange:
    """``for i in static_range(stop)`` or ``static_range(start, stop[, step])``: a loop
    over compile-time int bounds, unrolled at compile time (each iteration is a copy
    of the body, so ``i`` is a compile-time int)."""

    __name__ = __qualname__ = "static_range"
    __module__ = "cutile_compiler.language"

    def __init__(self) -> None:
        DSL_FUNCTIONS[self.__name__] = self

    def __call__(self, *bounds: int) -> range:
        return range(*bounds)

    def __repr__(self) -> str:
        return "<cutile static_range>"


static_range = _StaticRange()

#: The most items a compile-time range may have (each is a copy of a loop body, or
#: of a tuple's item, made by the compiler).
MAX_STATIC_ITEMS = 1 << 16


def static_items(fe: FrontEnd, node: ast.AST, name: str, bounds: Sequence[Any]) -> tuple[int, ...]:
    """The items of ``range(*bounds)`` at compile time (``name`` is the function the
    kernel called): bounds that Python's range refuses (a zero step, floats...) and
    ranges of more than `MAX_STATIC_ITEMS` are `TileTypeError`s at ``node``."""
    def spelled() -> str:
        return f"{name}({', '.join(bounded_repr(b) for b in bounds)})"

    if not 1 <= len(bounds) <= 3:
        raise fe.type_error(f"{name}() takes 1 to 3 arguments, got {len(bounds)}", node)
    if not all(isinstance(b, int) and not isinstance(b, bool) for b in bounds):
        raise fe.type_error(f"{spelled()}: {name}() needs compile-time int bounds", node)
    items: range = fe.fold(range, bounds, spelled, node)
    if len(items) > MAX_STATIC_ITEMS:
        raise fe.type_error(f"{spelled()} has {len(items)} items; a compile-time range has at most "
                            f"{MAX_STATIC_ITEMS} (use range(...) with a run-time loop)", node)
    return tuple(items)
