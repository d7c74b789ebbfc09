"""The DSL functions for debugging: printf (and Python's print), assume."""

from __future__ import annotations

import ast
from collections.abc import Sequence
from typing import Any, TYPE_CHECKING

from cutile_compiler._builtins._base import _static_int, _tile, builtin
from cutile_compiler._ir import Value
from cutile_compiler._opdefs import DebugOp
from cutile_compiler._opdefs._base import RuleError

if TYPE_CHECKING:
    from cutile_compiler._frontend import FrontEnd


def _print(fe: FrontEnd, node: ast.Call, args: Sequence[Any], kwargs: dict[str, Any], end: str) -> None:
    from cutile_compiler._opdefs.debug import parse_format

    unknown = sorted(set(kwargs) - {"end"})
    if unknown:
        raise fe.type_error(f"print() in a kernel takes only end= as a keyword, got {', '.join(unknown)}", node)
    end = kwargs.get("end", end)
    if not isinstance(end, str):
        raise fe.type_error(f"print()'s end must be a constant string, got {fe.describe(end)}", node)
    if not args or not isinstance(args[0], str):
        raise fe.type_error(
            "print() in a kernel takes a constant format string first, then the values it formats, e.g. "
            'print("x = %f, i = %d", x, i)', node)
    try:
        parts = parse_format(args[0] + end.replace("%", "%%"))
    except RuleError as exc:
        raise fe.type_error(str(exc), node) from None
    values = [fe.to_tile(v, node, what=f"print's value {i + 1}") for i, v in enumerate(args[1:])]
    fe.op(DebugOp.PRINT, values, {"parts": tuple(parts)}, node=node)
    return None


@builtin
def printf(fe: FrontEnd, node: ast.Call, format: Any, *values: Any) -> None:
    """Prints ``format`` (C printf conversions %d %i %u %o %x %X %c %e %E %f %F %g %G,
    with flags, width and precision) with ``values`` (scalars or tiles; a tile prints
    as ``[a, b, ...]``), without adding a newline. Python's ``print(format, *values)``
    does the same and ends the line."""
    return _print(fe, node, [format, *values], {}, "")


@builtin
def assume(fe: FrontEnd, node: ast.Call, x: Any, div_by: Any = None, lower: Any = None, upper: Any = None) -> Value:
    """x, with facts the compiler may rely on: every element is a multiple of
    ``div_by`` (a power of two) and lies in [lower, upper]. Wrong facts make wrong
    GPU code; the interpreter checks them."""
    value = _tile(fe, x, node, "assume's value")
    attrs: dict[str, Any] = {}
    for name, fact in (("div_by", div_by), ("lower", lower), ("upper", upper)):
        if fact is not None:
            attrs[name] = _static_int(fe, fact, node, f"assume's {name}")
    return fe.op(DebugOp.ASSUME, [value], attrs, node=node).result
