"""The operations of the typed kernel IR, each defined once.

An `OpDef` holds, side by side:
- ``infer``: the typing rule (operand types and attributes to result types),
  used when the front end creates the op; it raises `RuleError` with a message
  for the user, which the front end turns into a located `TileTypeError`;
- ``evaluate``: the numpy meaning, run by the CPU interpreter;
- ``lower``: the Tile IR it becomes on the GPU path.

Each family (one module each) declares its ops once, as the members of an `Op`
enum whose values are their `OpDef`s, and registers the enum: `OPS` holds every
op by its key, and the front end creates ops by their keys.
"""

from __future__ import annotations

from cutile_compiler._opdefs._base import (
    OPS, Escape, EvalContext, IntegerDivisionByZero, Op, OpDef, RuleError, Terminator, register, registered,
    unregister)
from cutile_compiler._opdefs import control, debug, elementwise, grid, matmul, memory, pointer, reduction, shape
from cutile_compiler._opdefs import schedule
from cutile_compiler._opdefs.control import ControlOp
from cutile_compiler._opdefs.debug import DebugOp
from cutile_compiler._opdefs.elementwise import ElementwiseOp
from cutile_compiler._opdefs.grid import GridOp
from cutile_compiler._opdefs.matmul import MatmulOp
from cutile_compiler._opdefs.memory import MemoryOp
from cutile_compiler._opdefs.pointer import PointerOp
from cutile_compiler._opdefs.reduction import ReductionOp
from cutile_compiler._opdefs.schedule import ScheduleOp
from cutile_compiler._opdefs.shape import ShapeOp

__all__ = ["OPS", "Escape", "EvalContext", "IntegerDivisionByZero", "Op", "OpDef", "RuleError", "Terminator", "register",
           "registered", "unregister", "ControlOp", "DebugOp", "ElementwiseOp", "GridOp", "MatmulOp", "MemoryOp",
           "PointerOp", "ReductionOp", "ScheduleOp", "ShapeOp",
           "control", "debug", "elementwise", "grid", "matmul", "memory", "pointer", "reduction", "schedule", "shape"]
