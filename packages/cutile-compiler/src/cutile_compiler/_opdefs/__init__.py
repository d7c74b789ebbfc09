"""The operations of the typed kernel IR, each defined once.

An `OpDef` holds, side by side:
- ``infer``: the typing rule (operand types and attributes to result types),
  used when the front end creates the op; it raises `RuleError` with a message
  for the user, which the front end turns into a located `TileTypeError`;
- ``evaluate``: the numpy meaning, run by the CPU interpreter;
- ``lower``: the Tile IR it becomes on the GPU path.

Ops are registered by name in `OPS`; one module per family.
"""

from __future__ import annotations

from cutile_compiler._opdefs._base import (
    OPS, Escape, EvalContext, IntegerDivisionByZero, OpDef, RuleError, Terminator, register)
from cutile_compiler._opdefs import control, debug, elementwise, grid, matmul, memory, pointer, reduction, shape
from cutile_compiler._opdefs import schedule

__all__ = ["OPS", "Escape", "EvalContext", "IntegerDivisionByZero", "OpDef", "RuleError", "Terminator", "register",
           "control", "debug", "elementwise", "grid", "matmul", "memory", "pointer", "reduction", "schedule", "shape"]
