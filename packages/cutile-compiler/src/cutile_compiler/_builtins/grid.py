"""The DSL functions of the launch grid: block ids and block counts."""

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
