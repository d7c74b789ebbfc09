"""Structured control flow: ``for``, ``if``, ``loop`` and their terminators.

- ``for(lb, ub, step, *init)``: one region with arguments (iv, *carried); the
  body ends in ``yield(*carried)``; results are the last carried values.
- ``if(cond)``: two regions (then, else), each ending in ``yield(*results)``.
- ``loop(*init)``: one region with arguments (*carried), ended by
  ``continue(*carried)`` or left by ``break(*results)``: Python's ``while``,
  and any loop with ``break``.
- ``return()`` ends the kernel early.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from cutile_compiler._ir import Operation
from cutile_compiler._opdefs._base import EvalContext, OpDef, RuleError, Terminator, register
from cutile_compiler._types import KType, TileType


class _Escape(Exception):
    """Raised through nested ``if``s to carry a break/continue/return outwards."""

    def __init__(self, terminator: Terminator) -> None:
        self.terminator = terminator


def _run(ctx: EvalContext, op: Operation, region: int, args: Sequence[Any]) -> Terminator:
    ended = ctx.run_block(op.regions[region], args)
    return ended


class For(OpDef):
    name = "for"

    def infer(self, operand_types: Sequence[KType], attrs: dict[str, Any]) -> tuple[KType, ...]:
        bounds = operand_types[:3]
        for position, bound in zip(("start", "stop", "step"), bounds):
            if not (isinstance(bound, TileType) and bound.is_scalar and bound.dtype.is_integer):
                raise RuleError(f"range: {position} must be an integer scalar, got {bound}")
        if len({b for b in bounds}) != 1:
            raise RuleError(f"range: start, stop and step must have one dtype, got {', '.join(map(str, bounds))}")
        return tuple(operand_types[3:])

    def evaluate(self, ctx: EvalContext, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        start, stop, step = (int(a) for a in args[:3])
        if step <= 0:
            raise ValueError(f"range: step must be positive, got {step}")
        carried = list(args[3:])
        iv_dtype = args[0].dtype
        for index in range(start, stop, step):
            ended = _run(ctx, op, 0, [np.asarray(index, dtype=iv_dtype), *carried])
            if ended.kind == "return":
                raise _Escape(ended)
            carried = ended.values
        return carried


class If(OpDef):
    name = "if"

    def infer(self, operand_types: Sequence[KType], attrs: dict[str, Any]) -> tuple[KType, ...]:
        cond = operand_types[0]
        if not (isinstance(cond, TileType) and cond.is_scalar and cond.dtype.kind == "bool"):
            raise RuleError(f"if: the condition must be a bool scalar, got {cond}")
        result_types: tuple[KType, ...] = attrs.get("result_types", ())
        return result_types

    def evaluate(self, ctx: EvalContext, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        ended = _run(ctx, op, 0 if bool(args[0]) else 1, [])
        if ended.kind != "yield":
            raise _Escape(ended)
        return ended.values


class Loop(OpDef):
    name = "loop"

    def infer(self, operand_types: Sequence[KType], attrs: dict[str, Any]) -> tuple[KType, ...]:
        result_types: tuple[KType, ...] = attrs.get("result_types", ())
        return result_types

    def evaluate(self, ctx: EvalContext, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        carried = list(args)
        while True:
            try:
                ended = _run(ctx, op, 0, carried)
            except _Escape as escape:
                ended = escape.terminator
            if ended.kind == "continue":
                carried = ended.values
            elif ended.kind == "break":
                return ended.values
            else:
                raise _Escape(ended)


class _Terminator(OpDef):
    is_terminator = True

    def infer(self, operand_types: Sequence[KType], attrs: dict[str, Any]) -> tuple[KType, ...]:
        return ()

    def evaluate(self, ctx: EvalContext, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        raise AssertionError(f"{self.name} is handled by the interpreter's block runner")


class Yield(_Terminator):
    name = "yield"


class Continue(_Terminator):
    name = "continue"


class Break(_Terminator):
    name = "break"


class Return(_Terminator):
    name = "return"


FOR = register(For())
IF = register(If())
LOOP = register(Loop())
YIELD = register(Yield())
CONTINUE = register(Continue())
BREAK = register(Break())
RETURN = register(Return())

__all__ = ["FOR", "IF", "LOOP", "YIELD", "CONTINUE", "BREAK", "RETURN", "RuleError", "_Escape"]
