"""The block's place in the grid: ``block_id`` and ``num_blocks`` per axis; and the grid's
place among the kernels of a stream: the grid-dependency wait and launch signal of a
programmatic dependent launch."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

import cutile_ir as ir

from cutile_compiler import _dtypes as dt
from cutile_compiler._ir import Operation
from cutile_compiler._opdefs._base import EvalContext, Op, OpDef, RuleError, register
from cutile_compiler._types import KType, TileType

if TYPE_CHECKING:
    from cutile_compiler._lowering import Lowering


class _GridQuery(OpDef):
    has_effects = True  # depends on which block runs it

    def infer(self, operand_types: Sequence[KType], attrs: dict[str, Any]) -> tuple[KType, ...]:
        if attrs.get("axis") not in (0, 1, 2):
            raise RuleError(f"{self.name}: axis must be 0, 1 or 2, got {attrs.get('axis')}")
        return (TileType(dt.i32),)


class BlockId(_GridQuery):
    def evaluate(self, ctx: EvalContext, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        return (np.asarray(ctx.block_id[op.attrs["axis"]], dtype=np.int32),)

    def lower(self, ctx: Lowering, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        if ctx.block_ids is None:  # block ids are made at the top of the kernel: one query serves all
            ctx.block_ids = ctx.builder.get_tile_block_id()
        return (ctx.block_ids[op.attrs["axis"]],)


class NumBlocks(_GridQuery):
    def evaluate(self, ctx: EvalContext, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        return (np.asarray(ctx.grid[op.attrs["axis"]], dtype=np.int32),)

    def lower(self, ctx: Lowering, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        return (ctx.builder.get_num_tile_blocks()[op.attrs["axis"]],)


class _GridDependency(OpDef):
    has_effects = True

    def infer(self, operand_types: Sequence[KType], attrs: dict[str, Any]) -> tuple[KType, ...]:
        return ()

    def evaluate(self, ctx: EvalContext, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        return ()  # the interpreter runs launches one after another: nothing is pending


class GridDependencyWait(_GridDependency):
    """``grid_dependency_control_wait()``: waits until the kernels this one was launched
    as a programmatic dependent of have finished and their writes are visible; on the
    GPU an acquire: every memory access after it takes its token (`Lowering.acquire`)."""

    def lower(self, ctx: Lowering, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        ctx.require_version(op.location, ir.V13_4, "grid_dependency_control_wait()")
        ctx.acquire(lambda token: ctx.builder.gdc_wait_tko(token))
        return ()


class GridDependencyLaunchDependents(_GridDependency):
    """``grid_dependency_control_launch_dependents()``: lets the kernel launched as this
    one's programmatic dependent start (it still waits for this one's end before it
    reads), after this block's earlier memory accesses."""

    def lower(self, ctx: Lowering, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        ctx.require_version(op.location, ir.V13_4, "grid_dependency_control_launch_dependents()")
        ctx.builder.gdc_launch_dependents_tko(ctx.all_tokens())
        return ()


class GridOp(Op):
    """The block's place in the grid, and the grid's among a stream's kernels."""

    BLOCK_ID = BlockId()
    NUM_BLOCKS = NumBlocks()
    DEPENDENCY_WAIT = GridDependencyWait()
    LAUNCH_DEPENDENTS = GridDependencyLaunchDependents()


register(GridOp)
