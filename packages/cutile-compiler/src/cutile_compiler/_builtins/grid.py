"""The DSL functions of the launch grid: block ids and block counts; the grid-dependency
wait and launch signal of a programmatic dependent launch."""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from cutile_compiler._builtins._base import _static_int, builtin
from cutile_compiler._ir import Value
from cutile_compiler._opdefs import GridOp

if TYPE_CHECKING:
    from cutile_compiler._frontend import FrontEnd


@builtin
def get_tile_block_id(fe: FrontEnd, node: ast.Call) -> tuple[Value, Value, Value]:
    """This block's coordinates in the grid, as three i32 scalars."""
    return (fe.block_id(0), fe.block_id(1), fe.block_id(2))


@builtin
def get_num_tile_blocks(fe: FrontEnd, node: ast.Call) -> tuple[Value, Value, Value]:
    """The grid's extent along each axis, as three i32 scalars."""
    return tuple(fe.op(GridOp.NUM_BLOCKS, [], {"axis": a}, node=node).result for a in range(3))  # type: ignore[return-value]


@builtin
def bid(fe: FrontEnd, node: ast.Call, axis: int) -> Value:
    """This block's coordinate along ``axis`` (0, 1 or 2)."""
    return fe.block_id(_static_int(fe, axis, node, "axis"))


@builtin
def num_blocks(fe: FrontEnd, node: ast.Call, axis: int) -> Value:
    """The grid's extent along ``axis``."""
    return fe.op(GridOp.NUM_BLOCKS, [], {"axis": _static_int(fe, axis, node, "axis")}, node=node).result


def _top_level(fe: FrontEnd, node: ast.Call, name: str) -> None:
    if fe.block is not fe.body:
        raise fe.syntax_error(f"{name}() must be at the kernel's top level, not inside a loop or an if", node)


@builtin
def grid_dependency_control_wait(fe: FrontEnd, node: ast.Call) -> None:
    """Waits until the kernels this one was launched as a programmatic dependent of
    (the one before it on its stream) have finished and their writes are visible:
    every memory access after it is ordered after it. Without such a launch there is
    nothing to wait for. At the kernel's top level."""
    _top_level(fe, node, "grid_dependency_control_wait")
    fe.op(GridOp.DEPENDENCY_WAIT, [], {}, node=node)


@builtin
def grid_dependency_control_launch_dependents(fe: FrontEnd, node: ast.Call) -> None:
    """Lets the kernel launched as this one's programmatic dependent begin (once every
    block has signalled or ended); the dependent still waits for this kernel's end
    before it reads (`grid_dependency_control_wait`). At the kernel's top level."""
    _top_level(fe, node, "grid_dependency_control_launch_dependents")
    fe.op(GridOp.LAUNCH_DEPENDENTS, [], {}, node=node)
