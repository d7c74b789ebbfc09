"""The `OpDef` base class, the `Op` enum that keys it, the registry, and the
interpreter's view of execution."""

from __future__ import annotations

import enum
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from cutile_compiler._errors import ArgumentError, ArgumentTypeError
from cutile_compiler._ir import Block, Operation
from cutile_compiler._types import KType, TileType

if TYPE_CHECKING:
    from cutile_compiler._lowering import Lowering


class RuleError(Exception):
    """A typing rule was broken; the message is for the user."""


def check_index(types: Sequence[KType], rank: int, op: str) -> None:
    """The rule of a tile index (loads, stores and tile atomics of a partition,
    ``extract``): one integer scalar per axis of the rank-``rank`` grid of tiles."""
    if len(types) != rank:
        raise RuleError(f"{op}: the index needs {rank} coordinate(s), got {len(types)}")
    for position, index in enumerate(types):
        if not (isinstance(index, TileType) and index.is_scalar and index.dtype.is_integer):
            raise RuleError(f"{op}: index coordinate {position} must be an integer scalar, got {index}")


@dataclass
class Terminator:
    """How a nested block ended when interpreted: ``yield``, ``break``,
    ``continue`` or ``return``, with the values it passed on."""

    kind: str
    values: list[Any]


class IntegerDivisionByZero(ZeroDivisionError):
    """Raised by the numpy meaning of integer ``//`` or ``%`` when a divisor element
    is zero (float division gives IEEE inf/nan instead). ``lanes`` says where (a
    bool array of the result's shape); ``result`` holds what every lane computes,
    zero where the divisor is. The interpreter reports it at the op once such a lane
    is used (a select may discard it first); lanes of padding (past a tensor's end
    or masked off) do not count."""

    def __init__(self, symbol: str, lanes: Any, result: Any) -> None:
        super().__init__(f"integer division by zero in '{symbol}'")
        self.symbol = symbol
        self.lanes = lanes
        self.result = result


class Escape(Exception):
    """Raised by the numpy meaning of an ``if`` or ``for`` to carry a ``break``,
    ``continue`` or ``return`` of a nested block outwards; the interpreter running a
    kernel body catches the ``return`` that reaches it."""

    def __init__(self, terminator: Terminator) -> None:
        super().__init__(terminator.kind)
        self.terminator = terminator


class EvalContext(Protocol):
    """What an op's numpy meaning may ask of the interpreter running it."""

    block_id: tuple[int, int, int]
    grid: tuple[int, int, int]

    def run_block(self, block: Block, args: Sequence[Any]) -> Terminator:
        """Runs a nested block with its arguments bound; returns how it ended."""
        ...

    def load(self, op: Operation, tensor: Any, index: tuple[int, ...], tile_shape: tuple[int, ...], padding: str) -> Any:
        """Reads the tile at ``index`` of ``tensor`` split into ``tile_shape`` tiles,
        padding elements past the tensor's end."""
        ...

    def load_at(self, op: Operation, tensor: Any, start: tuple[int, ...], shape: tuple[int, ...], padding: str) -> Any:
        """Reads the tile of ``shape`` whose first element is at element coordinates
        ``start`` (negative allowed), padding every element outside the tensor."""
        ...

    def store(self, op: Operation, tensor: Any, index: tuple[int, ...], tile_shape: tuple[int, ...], value: Any) -> None:
        """Writes the in-bounds part of tile ``value`` at ``index`` (checked for races)."""
        ...

    def tensor_shape(self, tensor: Any) -> tuple[int, ...]:
        ...

    def emit_print(self, op: Operation, text: str) -> None:
        """Writes what a ``print`` op printed (the text ends with its own newline)."""
        ...

    def runtime_error(self, op: Operation, message: str) -> Exception:
        """The exception for a kernel failing at ``op`` (an assert, an index out of
        bounds); it names the block and the op's source line."""
        ...

    def gather(self, op: Operation, tensor: Any, indices: Sequence[Any], mask: Any) -> Any:
        """The elements of ``tensor`` at ``indices`` (one integer array per axis, all of
        the result's shape) where ``mask`` holds (None: everywhere); other elements
        are zero. An unmasked index out of bounds is a `runtime_error`."""
        ...

    def scatter(self, op: Operation, tensor: Any, indices: Sequence[Any], value: Any, mask: Any) -> None:
        """Writes ``value`` at ``indices`` where ``mask`` holds (checked for bounds and races)."""
        ...

    def atomic(self, op: Operation, tensor: Any, indices: Sequence[Any], mask: Any,
               update: Any) -> Any:
        """Applies ``update(old, position) -> new`` element by element, in row-major
        order, at ``indices`` where ``mask`` holds; returns the old values (zero where
        masked). Bounds are checked; atomics are not races."""
        ...

    def schedule_item(self, op: Operation, counts: tuple[int, ...], starts: tuple[int, ...],
                      tile: tuple[int, ...]) -> None:
        """Records that this block's share of a mapped partition's schedule (op
        ``schedule_item``, on the sub-grid of ``counts`` tiles from ``starts``) reached
        ``tile``: the interpreter checks that every tile is reached equally often."""
        ...


class OpDef:
    """One operation of the kernel IR. Subclasses override ``infer`` and ``evaluate``
    (and ``lower`` for the GPU path); an instance is declared as a member of an `Op`
    enum, which gives it its ``key`` and ``name``."""

    #: the op's member of its family's `Op` enum (set when the family is registered)
    key: Op
    #: the op's name in the kernel IR: its key's name in lower case (set with ``key``)
    name: str = ""
    #: ops whose results depend on more than their operands (loads, block ids)
    #: or that act on memory; never folded or removed
    has_effects: bool = False
    #: ops ending a block (yield, break, continue, return)
    is_terminator: bool = False
    #: ops whose result lanes are computed from the same lanes of their operands
    #: (elementwise arithmetic, select, casts): the interpreter follows padding through them
    lanewise: bool = False
    #: how messages name the op when its DSL spelling differs from ``name`` ("astype")
    _spelled: str = ""
    #: the ``rounding=`` modes the op accepts (nearest_even, the default, among them);
    #: empty: it takes no rounding mode
    rounding_modes: tuple[str, ...] = ()
    #: whether the op accepts ``flush_to_zero=`` (f32 subnormals as zero)
    flush_to_zero: bool = False

    @property
    def spelled(self) -> str:
        """How messages name the op."""
        return self._spelled or self.name

    def infer(self, operand_types: Sequence[KType], attrs: dict[str, Any]) -> tuple[KType, ...]:
        raise NotImplementedError(self.name)

    def static_value(self, attrs: dict[str, Any]) -> bool | int | float | None:
        """The value every element of the op's result has, known at compile time
        (a splat constant), or None: what later ops' `check_static` see."""
        return None

    def check_static(self, operand_types: Sequence[KType], static_values: Sequence[Any],
                     attrs: dict[str, Any]) -> None:
        """Checks the operands known at compile time (``static_values[i]`` is operand
        i's value when it is a splat constant, else None); raises `RuleError`. Both
        backends get the same verdict, as the front end asks before either runs."""

    def evaluate(self, ctx: EvalContext, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        raise NotImplementedError(self.name)

    def ordered_resource(self, op: Operation) -> Any:
        """What memory the op reads or writes through a token chain on the GPU: a
        tensor or partition `Value`, a string naming another chain (prints), or None."""
        return None

    def lower(self, ctx: Lowering, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        """Emits the op's Tile IR through the lowering context ``ctx``; returns
        the Tile IR values of its results."""
        raise ctx.error(op, f"{self.name} cannot be compiled for the GPU yet")

    def __repr__(self) -> str:
        return f"<OpDef {self.name}>"


class MemoryAccess(OpDef):
    """An op that reads or writes global memory through its first operand (a tensor
    or a partition): it has effects, and on the GPU it is ordered by that operand's
    token chain."""

    has_effects = True

    def ordered_resource(self, op: Operation) -> Any:
        return op.operands[0]


class Op(enum.Enum):
    """The key of an op of the kernel IR. Each family declares its ops once, as the
    members of a subclass of `Op` whose values are their definitions::

        class GridOp(Op):
            BLOCK_ID = BlockId()
            NUM_BLOCKS = NumBlocks()

        register(GridOp)

    The front end creates an op by its key (``fe.op(GridOp.BLOCK_ID, ...)``), and
    every table of ops is keyed by it, never by a name string."""

    _value_: OpDef

    @property
    def definition(self) -> OpDef:
        """The op's `OpDef`."""
        return self._value_


#: Every registered op's definition by its key, in the order the families register.
OPS: dict[Op, OpDef] = {}
_NAMES: dict[str, Op] = {}


def register(family: type[Op]) -> None:
    """Adds the ops of ``family`` to `OPS`, giving each definition its key and name
    (the member's name in lower case, unique among all ops: the IR listing shows it)."""
    if not (isinstance(family, type) and issubclass(family, Op)):  # an OpDef alone has no key
        raise ArgumentTypeError(f"register: family must be a subclass of Op whose members are OpDefs, got "
                                f"{family!r}")
    taken = [key.name.lower() for key in family
             if key in OPS or key.name.lower() in _NAMES or getattr(key.definition, "key", None) is not None]
    if taken:  # checked before any is added, so that a refused family leaves nothing behind
        raise ArgumentError(f"register: {family.__name__}: ops {', '.join(taken)} are defined already")
    for key in family:
        opdef = key.definition
        opdef.key, opdef.name = key, key.name.lower()
        OPS[key] = opdef
        _NAMES[opdef.name] = key


def unregister(family: type[Op]) -> None:
    """Removes the ops of ``family`` from `OPS` (a family registered for a while)."""
    for key in family:
        if OPS.pop(key, None) is not None:
            del _NAMES[key.name.lower()]
            del key.definition.key


@contextmanager
def registered(family: type[Op]) -> Iterator[type[Op]]:
    """``family``'s ops registered inside the block, removed after it."""
    register(family)
    try:
        yield family
    finally:
        unregister(family)
