"""Debugging and compiler hints: ``print``, run-time ``assert`` and ``assume``.

- ``print {format}`` formats scalars and tiles with a C printf-style format (as
  Tile IR's ``print_tko`` does): a tile prints as ``[a, b, ...]`` (nested per
  dimension), each element with the value's conversion.
- ``assert {message}`` fails the kernel when any element of a bool tile is false:
  on the GPU through Tile IR's ``assert`` (the message and the failing index go
  to the device's output and the launch fails); on the interpreter with a
  `KernelRuntimeError` naming the block and the source line.
- ``assume {predicate}`` passes a value through with a fact the compiler may use
  (divisibility, bounds); the interpreter checks the fact and fails loudly when it
  does not hold, where the GPU would silently miscompile.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

import cutile_ir as ir

from cutile_compiler import _dtypes as dt
from cutile_compiler._ir import Operation
from cutile_compiler._opdefs._base import EvalContext, Op, OpDef, RuleError, register
from cutile_compiler._types import KType, TileType, is_power_of_two

if TYPE_CHECKING:
    from cutile_compiler._lowering import Lowering

#: The token chain that keeps a kernel's prints in program order.
PRINT_RESOURCE = "print"

# %[flags][width][.precision]conversion; length modifiers are the compiler's business.
_SPEC = re.compile(r"%(?P<flags>[-+ #0]*)(?P<width>[0-9]+)?(?P<precision>\.[0-9]+)?(?P<conv>[a-zA-Z%])")
INT_CONVERSIONS = frozenset("diuoxXc")
FLOAT_CONVERSIONS = frozenset("eEfFgG")


@dataclass(frozen=True)
class FormatSpec:
    """One conversion of a print format: ``%`` flags width precision conversion."""

    flags: str
    width: str
    precision: str
    conversion: str

    def c_spec(self, dtype: dt.DType) -> str:
        """The C printf conversion for a value of ``dtype`` (``ll`` for 64-bit integers)."""
        length = "ll" if dtype.is_integer and dtype.bits == 64 and self.conversion != "c" else ""
        return f"%{self.flags}{self.width}{self.precision}{length}{self.conversion}"

    def python_spec(self) -> str:
        return f"%{self.flags}{self.width}{self.precision}{self.conversion}"


def parse_format(text: str) -> list[str | FormatSpec]:
    """Splits a print format into literal text and conversions; raises `RuleError`
    for a conversion Tile IR's print does not take."""
    parts: list[str | FormatSpec] = []
    position = 0
    literal = ""
    while position < len(text):
        if text[position] != "%":
            literal += text[position]
            position += 1
            continue
        match = _SPEC.match(text, position)
        if match is None:
            raise RuleError(f"print: a lone '%' at position {position} of the format; write %% for a percent sign")
        if match.group("conv") == "%":
            if match.group(0) != "%%":
                raise RuleError(f"print: malformed conversion {match.group(0)!r}")
            literal += "%"
        else:
            conversion = match.group("conv")
            if conversion not in INT_CONVERSIONS and conversion not in FLOAT_CONVERSIONS:
                raise RuleError(
                    f"print: conversion {match.group(0)!r} is not supported (use one of %d %i %u %o %x %X %c for "
                    "integers, %e %E %f %F %g %G for floats; no length modifiers, no %s)")
            if literal:
                parts.append(literal)
                literal = ""
            parts.append(FormatSpec(match.group("flags"), match.group("width") or "",
                                    match.group("precision") or "", conversion))
        position = match.end()
    if literal:
        parts.append(literal)
    return parts


def _format_element(spec: FormatSpec, dtype: dt.DType, value: Any) -> str:
    if spec.conversion in FLOAT_CONVERSIONS:
        return spec.python_spec() % float(value)
    number = int(value)
    if spec.conversion in "uoxX" and number < 0:
        number += 1 << dtype.bits  # C reads the bits as unsigned
    if spec.conversion == "c":
        return spec.python_spec().replace("c", "s") % chr(number & 0xFF)
    return spec.python_spec() % number


def format_value(spec: FormatSpec, dtype: dt.DType, value: Any) -> str:
    """A scalar as its conversion prints it; a tile as ``[a, b, ...]``, nested per axis."""
    array = np.asarray(value)
    if array.ndim == 0:
        return _format_element(spec, dtype, array[()])
    return "[" + ", ".join(format_value(spec, dtype, item) for item in array) + "]"


class Print(OpDef):
    """``print(*values) {parts}``: prints the format's literal parts and values."""

    has_effects = True

    def infer(self, operand_types: Sequence[KType], attrs: dict[str, Any]) -> tuple[KType, ...]:
        specs = [p for p in attrs["parts"] if isinstance(p, FormatSpec)]
        if len(specs) != len(operand_types):
            raise RuleError(f"print: the format has {len(specs)} conversion(s) but {len(operand_types)} value(s) "
                            "were given")
        for position, (spec, kind) in enumerate(zip(specs, operand_types)):
            if not isinstance(kind, TileType):
                raise RuleError(f"print: value {position + 1} must be a tile or scalar, got {kind}")
            is_int = kind.dtype.is_integer or kind.dtype.is_bool
            if spec.conversion in INT_CONVERSIONS and not is_int:
                raise RuleError(f"print: conversion %{spec.conversion} needs an integer or bool value, value "
                                f"{position + 1} is {kind}; use %f, %e or %g")
            if spec.conversion in FLOAT_CONVERSIONS and is_int:
                raise RuleError(f"print: conversion %{spec.conversion} needs a floating-point value, value "
                                f"{position + 1} is {kind}; use %d")
        return ()

    def evaluate(self, ctx: EvalContext, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        pieces: list[str] = []
        values = iter(zip(args, op.operands))
        for part in op.attrs["parts"]:
            if isinstance(part, str):
                pieces.append(part)
            else:
                array, value = next(values)
                assert isinstance(value.type, TileType)
                pieces.append(format_value(part, value.type.dtype, array))
        ctx.emit_print(op, "".join(pieces))
        return ()

    def lower(self, ctx: Lowering, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        text = c_format(op)
        ctx.token_out(op, ctx.builder.print_tko(list(args), ctx.token_in(op), str=text))
        return ()

    def ordered_resource(self, op: Operation) -> Any:
        return PRINT_RESOURCE


def c_format(op: Operation) -> str:
    """The C format string of a print op (values' length modifiers filled in)."""
    pieces: list[str] = []
    operands = iter(op.operands)
    for part in op.attrs["parts"]:
        if isinstance(part, str):
            pieces.append(part.replace("%", "%%"))
        else:
            kind = next(operands).type
            assert isinstance(kind, TileType)
            pieces.append(part.c_spec(kind.dtype))
    return "".join(pieces)


class Assert(OpDef):
    """``assert(cond) {message}``: the kernel fails where an element of ``cond`` is false."""

    has_effects = True

    def infer(self, operand_types: Sequence[KType], attrs: dict[str, Any]) -> tuple[KType, ...]:
        (cond,) = operand_types
        if not (isinstance(cond, TileType) and cond.dtype is dt.bool_):
            raise RuleError(f"assert: the condition must be a bool scalar or tile (a comparison), got {cond}")
        return ()

    def evaluate(self, ctx: EvalContext, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        cond = np.asarray(args[0])
        if not cond.all():
            message = op.attrs.get("message") or "assertion failed"
            where = ""
            if cond.ndim:
                first = tuple(int(i[0]) for i in np.nonzero(~cond))
                where = f" (element {list(first)} of the condition is false)"
            raise ctx.runtime_error(op, f"assert failed: {message}{where}")
        return ()

    def lower(self, ctx: Lowering, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        ctx.builder.assert_(args[0], message=op.attrs.get("message") or "assertion failed")
        return ()


class Assume(OpDef):
    """``assume(x) {div_by?, lower?, upper?}``: x, with facts the compiler may rely on.

    ``div_by`` (a power of two) says every element is a multiple of it; ``lower``
    and ``upper`` bound the values (inclusive). Integer values only.
    """

    def infer(self, operand_types: Sequence[KType], attrs: dict[str, Any]) -> tuple[KType, ...]:
        (value,) = operand_types
        if not (isinstance(value, TileType) and value.dtype.is_integer):
            raise RuleError(f"assume: facts are stated about integer values, got {value}")
        divisor = attrs.get("div_by")
        if divisor is not None and not is_power_of_two(divisor):
            raise RuleError(f"assume: div_by must be a positive power of two, got {divisor}")
        lower, upper = attrs.get("lower"), attrs.get("upper")
        if lower is not None and upper is not None and lower > upper:
            raise RuleError(f"assume: the bounds are empty (lower {lower} > upper {upper})")
        if divisor is None and lower is None and upper is None:
            raise RuleError("assume: state at least one fact (div_by=, lower= or upper=)")
        return (value,)

    def evaluate(self, ctx: EvalContext, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        value = np.asarray(args[0])
        wide = value.astype(np.int64)
        divisor, lower, upper = op.attrs.get("div_by"), op.attrs.get("lower"), op.attrs.get("upper")
        broken = ""
        if divisor is not None and np.any(wide % divisor):
            broken = f"a value is not divisible by {divisor}"
        elif lower is not None and np.any(wide < lower):
            broken = f"a value is below {lower}"
        elif upper is not None and np.any(wide > upper):
            broken = f"a value is above {upper}"
        if broken:
            raise ctx.runtime_error(op, f"assume does not hold: {broken} (got {value.tolist()})")
        return (args[0],)

    def lower(self, ctx: Lowering, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        value = args[0]
        divisor, lower, upper = op.attrs.get("div_by"), op.attrs.get("lower"), op.attrs.get("upper")
        if divisor is not None:
            value = ctx.builder.assume(value, predicate=ir.DivBy(divisor))
        if lower is not None or upper is not None:
            value = ctx.builder.assume(value, predicate=ir.Bounded(lower, upper))
        return (value,)


class DebugOp(Op):
    """Printing, assertions and assumptions."""

    PRINT = Print()
    ASSERT = Assert()
    ASSUME = Assume()


register(DebugOp)
