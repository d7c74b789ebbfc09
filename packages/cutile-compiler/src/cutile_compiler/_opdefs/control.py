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
from typing import TYPE_CHECKING, Any

import numpy as np

import cutile_ir as ir

from cutile_compiler._ir import Block, Operation
from cutile_compiler._lowering import tile_type
from cutile_compiler._opdefs._base import Escape, EvalContext, Op, OpDef, RuleError, register
from cutile_compiler._types import KType, TileType

if TYPE_CHECKING:
    from cutile_compiler._lowering import Lowering, TokenChain


class For(OpDef):
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
            ended = ctx.run_block(op.regions[0], [np.asarray(index, dtype=iv_dtype), *carried])
            if ended.kind == "return":
                raise Escape(ended)
            carried = ended.values
        return carried

    def lower(self, ctx: Lowering, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        return _lower_for(self, ctx, op, args)


class If(OpDef):
    def infer(self, operand_types: Sequence[KType], attrs: dict[str, Any]) -> tuple[KType, ...]:
        cond = operand_types[0]
        if not (isinstance(cond, TileType) and cond.is_scalar and cond.dtype.kind == "bool"):
            raise RuleError(f"if: the condition must be a bool scalar, got {cond}")
        result_types: tuple[KType, ...] = attrs.get("result_types", ())
        return result_types

    def evaluate(self, ctx: EvalContext, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        ended = ctx.run_block(op.regions[0 if bool(args[0]) else 1], [])
        if ended.kind != "yield":
            raise Escape(ended)
        return ended.values

    def lower(self, ctx: Lowering, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        return _lower_if(self, ctx, op, args)


class Loop(OpDef):
    def infer(self, operand_types: Sequence[KType], attrs: dict[str, Any]) -> tuple[KType, ...]:
        result_types: tuple[KType, ...] = attrs.get("result_types", ())
        return result_types

    def evaluate(self, ctx: EvalContext, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        carried = list(args)
        while True:
            try:
                ended = ctx.run_block(op.regions[0], carried)
            except Escape as escape:
                ended = escape.terminator
            if ended.kind == "continue":
                carried = ended.values
            elif ended.kind == "break":
                return ended.values
            else:
                raise Escape(ended)

    def lower(self, ctx: Lowering, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        return _lower_loop(self, ctx, op, args)


class _Terminator(OpDef):
    is_terminator = True

    def infer(self, operand_types: Sequence[KType], attrs: dict[str, Any]) -> tuple[KType, ...]:
        return ()

    def evaluate(self, ctx: EvalContext, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        raise AssertionError(f"{self.name} is handled by the interpreter's block runner")


class Yield(_Terminator):
    def lower(self, ctx: Lowering, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        kind, touched = ctx.regions[-1]
        values = list(args) + ctx.token_values(touched)
        if kind == "for":
            ctx.builder.continue_(values)  # a Tile IR for body ends in continue
        else:
            ctx.builder.yield_(values)
        return ()


class Continue(_Terminator):
    def lower(self, ctx: Lowering, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        ctx.builder.continue_(_loop_exit_values(ctx, args))
        return ()


class Break(_Terminator):
    def lower(self, ctx: Lowering, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        ctx.builder.break_(_loop_exit_values(ctx, args))
        return ()


class Return(_Terminator):
    def lower(self, ctx: Lowering, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        ctx.builder.return_()
        return ()


class ControlOp(Op):
    """The structured control-flow ops and their terminators."""

    FOR = For()
    IF = If()
    LOOP = Loop()
    YIELD = Yield()
    CONTINUE = Continue()
    BREAK = Break()
    RETURN = Return()


register(ControlOp)

__all__ = ["ControlOp", "RuleError"]


# -- lowering to Tile IR -------------------------------------------------------------------
def _bind_region(ctx: Lowering, block: Block, values: Sequence[Any], touched: Sequence[TokenChain]) -> None:
    """Binds a region's arguments: the IR block's, then the threaded tokens."""
    count = len(block.args)
    for ours, theirs in zip(block.args, values[:count]):
        ctx.values[ours] = theirs
    ctx.set_tokens(touched, values[count:])


def _lower_region(ctx: Lowering, kind: str, block: Block, ir_args: Sequence[Any],
                  touched: Sequence[TokenChain]) -> None:
    with ctx.region_tokens():
        _bind_region(ctx, block, ir_args, touched)
        ctx.regions.append((kind, list(touched)))
        try:
            ctx.lower_block(block)
        finally:
            ctx.regions.pop()


def _result_types(ctx: Lowering, op: Operation, touched: Sequence[TokenChain]) -> list[Any]:
    return [tile_type(r.type) for r in op.results] + [ir.TOKEN] * len(touched)


def _finish(ctx: Lowering, op: Operation, results: Sequence[Any], touched: Sequence[TokenChain]) -> Sequence[Any]:
    count = len(op.results)
    ctx.set_tokens(touched, results[count:])
    return list(results[:count])


def _lower_for(self: For, ctx: Lowering, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
    touched = ctx.touched(op)
    inits = list(args[3:]) + ctx.token_values(touched)
    with ctx.builder.for_(args[0], args[1], args[2], inits) as loop:
        _lower_region(ctx, "for", op.regions[0], loop.args, touched)
    return _finish(ctx, op, loop.results, touched)


def _lower_if(self: If, ctx: Lowering, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
    touched = ctx.touched(op)
    with ctx.builder.if_(args[0], _result_types(ctx, op, touched)) as branches:
        with branches.then():
            _lower_region(ctx, "if", op.regions[0], [], touched)
        with branches.else_():
            _lower_region(ctx, "if", op.regions[1], [], touched)
    return _finish(ctx, op, branches.results, touched)


def _lower_loop(self: Loop, ctx: Lowering, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
    touched = ctx.touched(op)
    inits = list(args) + ctx.token_values(touched)
    with ctx.builder.loop(inits, _result_types(ctx, op, touched)) as loop:
        _lower_region(ctx, "loop", op.regions[0], loop.args, touched)
    return _finish(ctx, op, loop.results, touched)


def _enclosing(ctx: Lowering, kinds: tuple[str, ...]) -> tuple[str, list[TokenChain]]:
    for kind, touched in reversed(ctx.regions):
        if kind in kinds:
            return kind, touched
    raise AssertionError(f"no enclosing {kinds}")


def _loop_exit_values(ctx: Lowering, args: Sequence[Any]) -> list[Any]:
    """What a break or continue passes on: its values and the enclosing loop's tokens."""
    _, touched = _enclosing(ctx, ("loop",))
    return list(args) + ctx.token_values(touched)
