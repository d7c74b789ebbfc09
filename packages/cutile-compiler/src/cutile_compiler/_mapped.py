"""Mapped partitions in the front end: the schedule loop and the proof of its stores.

A Mut parameter passed as ``t.partition(tile).map(map_shape, blocks=n)`` has no
tile of the block's own (the launch runs ``n`` blocks, not one per tile). Its tiles
are reached through its schedule:

    for idx in z.tiles():          # this block's items: b, b + n, b + 2n, ...
        bm, bn = idx               # tile coordinates, for loads of other tensors
        z.store(tile, idx)         # accepted: idx was minted by z's schedule

The loop is a ``for`` over item numbers ``range(bid(0), prod(counts), num_blocks(0))``
whose body starts with ``schedule_item`` (`_opdefs.schedule`), a bijection from item
numbers onto tiles. Blocks take disjoint item numbers, so they store disjoint tiles:
that is the whole proof, and it is made here, at compile time, by provenance. A
store into a mapped partition accepts

- an index minted by a schedule loop of that partition (``tiles()``, or
  ``tiles_with``/``tiles_within``), unchanged: ``z.store(tile, idx)``;
- a tuple whose streamed entries are the unchanged components of one minted index,
  each on its own axis, and whose owned entries (axes mapped to ``OWNED``, which each
  item owns whole) are proven in range: the variable of a ``range(z.num_tiles(axis))``
  loop (from a constant start >= 0, constant step), or a constant below the axis'
  tile count (known at compile time: a Mut tensor's shape is part of the
  specialization).

Anything else (an index with arithmetic on it, an index minted for another
partition, a store outside a schedule loop, an unproven owned entry) is a
`TileTypeError` at the index, naming the rule. Nothing is checked at run time for
minted indices; stores still mask at the tensor's edges. ``tiles_within`` ranges must be the same
for every block (they decide which item is which tile), so they are built from
parameters, shapes, constants and loads of read-only tensors, never from block ids
or loop variables; they are checked against the grid at compile time when constant,
else by run-time asserts.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cutile_compiler import _dtypes as dt
from cutile_compiler._errors import TileTypeError
from cutile_compiler._ir import Value
from cutile_compiler._opdefs import DebugOp, ElementwiseOp, GridOp, MemoryOp
from cutile_compiler._opdefs.schedule import ScheduleOp
from cutile_compiler._signature import OWNED_AXIS
from cutile_compiler._types import PartitionType, TensorType, TileType

if TYPE_CHECKING:
    from cutile_compiler._frontend import FrontEnd

_I32 = TileType(dt.i32)


@dataclass(eq=False)
class Mint:
    """One schedule loop's minting of indices: the mapped tensors its indices address,
    and its sub-grid (`Space`: which block an item's tile goes to depends on it)."""

    tensors: tuple[Value, ...]
    space: tuple[Any, ...] = ()
    line: int = 0

    def accepts(self, tensor: Value) -> bool:
        return any(t is tensor for t in self.tensors)

    @property
    def names(self) -> str:
        return " and ".join(f"'{t.name}'" for t in self.tensors)


class MintedIndex(tuple[Any, ...]):
    """The index a schedule loop yields: a tuple of tile coordinates (i32 values on
    streamed axes, 0 on owned ones) that remembers its `Mint`."""

    mint: Mint

    def __new__(cls, coordinates: Sequence[Any], mint: Mint) -> MintedIndex:
        index = super().__new__(cls, coordinates)
        index.mint = mint
        return index


@dataclass
class TileSchedule:
    """What ``z.tiles()`` (and ``tiles_with``, ``tiles_within``) give ``for``: the mapped
    tensors (the first one's grid is iterated) and the sub-range per axis (None:
    the whole axis)."""

    tensors: tuple[Value, ...]
    ranges: tuple[tuple[Any, Any] | None, ...]
    node: ast.AST

    @property
    def __name__(self) -> str:  # how the front end describes it
        return f"the schedule of '{self.tensors[0].name}'"


@dataclass
class MappedState:
    """The front end's record of minted indices and range proofs, by `Value.id`."""

    #: a component of a minted index -> (its mint, its axis)
    components: dict[int, tuple[Mint, int]] = field(default_factory=dict)
    #: ``z.num_tiles(axis)`` of a mapped tensor -> (the tensor, the axis)
    tile_counts: dict[int, tuple[Value, int]] = field(default_factory=dict)
    #: the variable of a ``range(z.num_tiles(axis))`` loop -> (the tensor, the axis)
    in_range: dict[int, tuple[Value, int]] = field(default_factory=dict)
    #: the mapped tensors of the schedule loops around the statement being visited
    active: list[tuple[Value, ...]] = field(default_factory=list)
    #: where those loops sit in the front end's stack of loop contexts
    levels: list[int] = field(default_factory=list)
    #: per mapped tensor (by id), the mint whose sub-grid its stores and loads use first
    claims: dict[int, Mint] = field(default_factory=dict)

    def claim(self, fe: FrontEnd, tensor: Value, mint: Mint, where: ast.AST) -> None:
        """Refuses indices of one tensor minted by schedules of different sub-grids: they
        give a tile to different blocks (two blocks could write it, or one read it while
        another writes it)."""
        first = self.claims.setdefault(tensor.id, mint)
        if first.space != mint.space:
            raise fe.type_error(
                f"'{tensor.name}' is accessed at indices of two schedules with different sub-grids (the loop at "
                f"line {first.line} and the one at line {mint.line}); each gives a tile to a different block, so "
                f"two blocks could touch one tile. Access a partition through schedules of one sub-grid", where)

    def check_break(self, fe: FrontEnd, node: ast.AST) -> None:
        """Refuses a ``break`` out of a schedule loop (a break of a loop inside it is free)."""
        if self.levels and self.levels[-1] == len(fe.loops) - 1:
            raise fe.syntax_error(
                "a schedule loop cannot break: its items are the partition's tiles, and leaving early would leave "
                "some unwritten; use continue to skip an item", node)

    def note_range_index(self, fe: FrontEnd, index: Value, start: Any, stop: Any, step: Any) -> None:
        """Records a range loop's variable as proven in range of an axis' tiles when the
        loop is ``range(start, z.num_tiles(axis), step)`` with constant start >= 0 and step >= 1."""
        if not isinstance(stop, Value) or stop.id not in self.tile_counts:
            return
        if _plain_int(start) and start >= 0 and _plain_int(step) and step >= 1:
            self.in_range[index.id] = self.tile_counts[stop.id]


def _plain_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# -- facts about a mapped tensor ---------------------------------------------------------------
def _mapped_tensor(fe: FrontEnd, value: Any, node: ast.AST, what: str) -> Value:
    """``value`` as a mapped Mut tensor parameter, else a `TileTypeError` saying what it is."""
    if not (isinstance(value, Value) and isinstance(value.type, TensorType)):
        raise fe.type_error(f"{what} must be a mapped Mut tensor parameter, got {fe.describe(value)}", node)
    ttype = value.type
    if ttype.map_shape is None:
        kind = "a Mut tensor partitioned one tile per block" if ttype.mutable else "a read-only tensor"
        raise fe.type_error(
            f"{what}: '{value.name}' is {kind}, not a mapped partition; schedules belong to Mut parameters "
            f"passed as t.partition(tile).map(map_shape, blocks=n)", node)
    if all(m == OWNED_AXIS for m in ttype.map_shape):  # (the host refuses such a map; a hand-made spec may not)
        raise fe.type_error(f"{what}: the map of '{value.name}' owns every axis; a schedule streams at least one",
                            node)
    return value


def static_tile_counts(fe: FrontEnd, tensor: Value) -> tuple[int, ...]:
    """Tiles per axis of a Mut tensor, from its specialization (which holds its shape)."""
    ttype = tensor.type
    assert isinstance(ttype, TensorType) and ttype.tile_shape is not None
    spec = dict(fe.spec.tensors)[tensor.name or ""]
    return tuple(-(-extent // tile) for extent, tile in zip(spec.shape, ttype.tile_shape))


def _map_text(map_shape: tuple[int, ...]) -> str:
    return "[" + ", ".join("OWNED" if m == OWNED_AXIS else str(m) for m in map_shape) + "]"


def no_own_tile(fe: FrontEnd, tensor: Value) -> TileTypeError:
    """The error for a mapped tensor used as if a block owned one tile of it."""
    return fe.type_error(
        f"'{tensor.name}' is a mapped partition: its blocks own no tile by block id, they iterate its schedule. "
        f"Write `for idx in {tensor.name}.tiles():` and use idx: {tensor.name}.store(tile, idx), "
        f"{tensor.name}.load(idx), x.load(index=idx, shape=...) for other tensors")


# -- the methods of a mapped tensor ------------------------------------------------------------
def tensor_tiles(fe: FrontEnd, node: ast.Call, tensor: Value) -> TileSchedule:
    """``z.tiles()``: this block's share of z's schedule, for a ``for`` loop."""
    z = _mapped_tensor(fe, tensor, node, "tiles()")
    return TileSchedule((z,), (None,) * z.type.rank, node)  # type: ignore[attr-defined]


def tensor_tiles_with(fe: FrontEnd, node: ast.Call, tensor: Value, *others: Any) -> TileSchedule:
    """``z.tiles_with(w, ...)``: z's schedule, whose indices w's stores accept too (w has
    z's tile shape, map shape and tile grid)."""
    z = _mapped_tensor(fe, tensor, node, "tiles_with()")
    if not others:
        raise fe.type_error("tiles_with() takes the other mapped partitions whose stores share the indices, "
                            "e.g. z.tiles_with(w)", node)
    return TileSchedule(_partners(fe, node, z, others, "tiles_with()", 0), (None,) * z.type.rank, node)  # type: ignore[attr-defined]


def _partners(fe: FrontEnd, node: ast.Call, z: Value, others: Sequence[Any], what: str,
              first: int) -> tuple[Value, ...]:
    """z and the mapped partitions sharing its schedule (``others``, the call's arguments
    from position ``first``): each of z's tile shape, map shape and tile grid."""
    partners = [z]
    zt = z.type
    assert isinstance(zt, TensorType) and zt.tile_shape is not None and zt.map_shape is not None
    for position, other in enumerate(others, first):
        where = node.args[position] if position < len(node.args) else node
        w = _mapped_tensor(fe, other, where, f"{what}'s argument")
        if any(w is p for p in partners):
            raise fe.type_error(f"{what}: '{w.name}' is passed twice", where)
        wt = w.type
        assert isinstance(wt, TensorType) and wt.tile_shape is not None and wt.map_shape is not None
        if wt.tile_shape != zt.tile_shape or wt.map_shape != zt.map_shape:
            raise fe.type_error(
                f"{what}: '{z.name}' has tile {list(zt.tile_shape)} and map {_map_text(zt.map_shape)}, "
                f"'{w.name}' tile {list(wt.tile_shape)} and map {_map_text(wt.map_shape)}; partitions sharing a "
                "schedule need equal tile and map shapes", where)
        z_grid, w_grid = static_tile_counts(fe, z), static_tile_counts(fe, w)
        if z_grid != w_grid:
            raise fe.type_error(
                f"{what}: this launch passes '{z.name}' with a {'x'.join(map(str, z_grid))} tile grid and "
                f"'{w.name}' with {'x'.join(map(str, w_grid))}; partitions sharing a schedule need equal grids", where)
        partners.append(w)
    return tuple(partners)


def tensor_tiles_within(fe: FrontEnd, node: ast.Call, tensor: Value, ranges: Any, *others: Any) -> TileSchedule:
    """``z.tiles_within(ranges, w, ...)``: the schedule of a sub-grid, one ``(start,
    count)`` of tiles per axis (``None``: the whole axis; an owned axis takes only None).
    Starts and counts may be run-time values, the same for every block. The stores of
    ``others`` (as `tensor_tiles_with`'s) accept its indices too."""
    z = _mapped_tensor(fe, tensor, node, "tiles_within()")
    zt = z.type
    assert isinstance(zt, TensorType) and zt.map_shape is not None
    where = node.args[0] if node.args else node
    if not isinstance(ranges, tuple) or len(ranges) != zt.rank:
        raise fe.type_error(f"tiles_within(): ranges are one (start, count) or None per axis of '{z.name}' "
                            f"({zt.rank}), got {fe.describe(ranges)}", where)
    grid = static_tile_counts(fe, z)
    checked: list[tuple[Any, Any] | None] = []
    for axis, entry in enumerate(ranges):
        if entry is None:
            checked.append(None)
            continue
        if zt.map_shape[axis] == OWNED_AXIS:
            raise fe.type_error(f"tiles_within(): axis {axis} of '{z.name}' is OWNED (each item owns it whole); "
                                "its range must be None", where)
        if not (isinstance(entry, tuple) and len(entry) == 2):
            raise fe.type_error(f"tiles_within(): the range of axis {axis} must be (start, count) or None, got "
                                f"{fe.describe(entry)}", where)
        bounds: list[Value | int] = []
        for part, value in zip(("start", "count"), entry):
            if isinstance(value, Value):
                vtype = value.type
                if not (isinstance(vtype, TileType) and vtype.is_scalar and vtype.dtype.is_integer
                        and vtype.dtype.bits <= 32):
                    raise fe.type_error(f"tiles_within(): the {part} of axis {axis} must be an integer scalar of "
                                        f"at most 32 bits, got {vtype}", where)
                if not is_uniform(fe, value):
                    raise fe.type_error(
                        f"tiles_within(): the {part} of axis {axis} may differ between blocks (it depends on a block "
                        "id, a loop variable, a branch or a written tensor); every block must iterate the same "
                        "sub-grid, so build it from parameters, shapes, constants and read-only tensors", where)
                bounds.append(value if vtype.dtype is dt.i32 else fe.cast(value, dt.i32, where))
            elif _plain_int(value):
                bounds.append(value)
            else:
                raise fe.type_error(f"tiles_within(): the {part} of axis {axis} must be an int, got "
                                    f"{fe.describe(value)}", where)
        start, count = bounds
        if isinstance(start, int) and start < 0 or isinstance(count, int) and count < 0:
            raise fe.type_error(f"tiles_within(): axis {axis} has a negative start or count ({start}, {count})", where)
        if isinstance(start, int) and isinstance(count, int) and start + count > grid[axis]:
            raise fe.type_error(f"tiles_within(): the range [{start}, {start + count}) of axis {axis} passes the "
                                f"{grid[axis]} tiles of '{z.name}' in this launch", where)
        checked.append((start, count))
    return TileSchedule(_partners(fe, node, z, others, "tiles_within()", 1), tuple(checked), node)


def tensor_num_tiles(fe: FrontEnd, node: ast.Call, tensor: Value, axis: Any) -> Value:
    """``z.num_tiles(axis)``: how many tiles a Mut tensor has along ``axis``; the bound of
    a ``range`` whose variable proves an owned axis' entries in range."""
    from cutile_compiler._builtins._base import _static_int

    ttype = tensor.type
    assert isinstance(ttype, TensorType)
    if ttype.tile_shape is None:
        raise fe.type_error(f"num_tiles(): '{tensor.name}' is read-only (not partitioned); count the tiles of a "
                            f"partition of it: {tensor.name}.partition(shape).num_tiles(axis)", node)
    which = _static_int(fe, axis, node, "axis")
    if not 0 <= which < ttype.rank:
        raise fe.type_error(f"num_tiles(): axis {which} is out of range for rank-{ttype.rank} '{tensor.name}'", node)
    count: Value = fe.op(MemoryOp.NUM_TILES, [fe.own_partition(tensor, node)], {"axis": which}, node=node).result
    if ttype.map_shape is not None:
        fe.mapped.tile_counts[count.id] = (tensor, which)
    return count


def mapped_store(fe: FrontEnd, node: ast.Call, tensor: Value, value: Any, index: Any) -> None:
    """``z.store(tile, index)`` into a mapped partition (index checked by `checked_index`)."""
    from cutile_compiler._builtins.pointer import _own_values

    if index is None:
        raise _outside(fe, tensor, "store", _argument(node, 1, "index") or node,
                       f"a store into mapped partition '{tensor.name}' takes an index of its schedule: "
                       f"{tensor.name}.store(tile, idx) inside `for idx in {tensor.name}.tiles():`")
    coordinates = checked_index(fe, node, tensor, index, "store", _argument(node, 1, "index") or node)
    (tile,) = _own_values(fe, node, tensor, [(value, "value")], "store")
    fe.op(MemoryOp.TILE_STORE, [fe.own_partition(tensor, node), *coordinates, tile], node=node)


def mapped_load(fe: FrontEnd, node: ast.Call, tensor: Value, index: Any, attrs: dict[str, Any]) -> Value:
    """``z.load(index)`` of a mapped partition: its tile at an index its stores accept."""
    where = _argument(node, 0, "index") or node
    if index is None:
        raise _outside(fe, tensor, "load", where, f"a load of mapped partition '{tensor.name}' takes an index "
                       f"of its schedule: {tensor.name}.load(idx) inside `for idx in {tensor.name}.tiles():`")
    coordinates = checked_index(fe, node, tensor, index, "load", where)
    result: Value = fe.op(MemoryOp.TILE_LOAD, [fe.own_partition(tensor, node), *coordinates], attrs, node=node).result
    return result


def _argument(node: ast.Call, position: int, keyword: str) -> ast.AST | None:
    """The node of a call's argument (for the caret of an error about it)."""
    if position < len(node.args):
        return node.args[position]
    return next((k.value for k in node.keywords if k.arg == keyword), None)


def _outside(fe: FrontEnd, tensor: Value, verb: str, where: ast.AST, message: str) -> TileTypeError:
    inside = any(any(t is tensor for t in tensors) for tensors in fe.mapped.active)
    context = "" if inside else f" (this {verb} is outside every schedule loop of '{tensor.name}')"
    return fe.type_error(message + context, where)


def checked_index(fe: FrontEnd, node: ast.Call, tensor: Value, index: Any, verb: str,
                  where: ast.AST) -> list[Value]:
    """The coordinates of ``index`` for a store (or load) of mapped ``tensor``, after
    proving that this block owns that tile (see the module's docstring); else a
    `TileTypeError` at ``where`` naming the rule the index breaks."""
    ttype = tensor.type
    assert isinstance(ttype, TensorType) and ttype.map_shape is not None and ttype.tile_shape is not None
    name = tensor.name
    state = fe.mapped
    if isinstance(index, MintedIndex):
        if not index.mint.accepts(tensor):
            raise fe.type_error(
                f"{name}.{verb}: this index was minted by the schedule of {index.mint.names}, not of '{name}': "
                f"another partition's schedule proves nothing about '{name}'. Iterate both with "
                f"{index.mint.tensors[0].name}.tiles_with({name})", where)
        state.claim(fe, tensor, index.mint, where)
        return [_coordinate(fe, c, where) for c in index]
    if not isinstance(index, tuple) or len(index) != ttype.rank:
        raise _outside(fe, tensor, verb, where,
                       f"{name}.{verb}: the index must be one minted by `for idx in {name}.tiles():` (or a tuple "
                       f"of {ttype.rank} entries built from one), got {fe.describe(index)}")
    mints: list[Mint] = []
    for axis, entry in enumerate(index):
        owned = ttype.map_shape[axis] == OWNED_AXIS
        component = state.components.get(entry.id) if isinstance(entry, Value) else None
        if component is not None:
            mint, minted_axis = component
            if not mint.accepts(tensor):
                raise fe.type_error(
                    f"{name}.{verb}: entry {axis} of the index comes from the schedule of {mint.names}, not of "
                    f"'{name}'; iterate both with {mint.tensors[0].name}.tiles_with({name})", where)
            if minted_axis != axis:
                raise fe.type_error(
                    f"{name}.{verb}: entry {axis} of the index is coordinate {minted_axis} of a minted index; each "
                    "streamed entry must stay on its own axis", where)
            if not owned:
                mints.append(mint)
            continue
        if owned:
            _check_owned_entry(fe, tensor, axis, entry, verb, where)
            continue
        if isinstance(entry, Value) and _derived_from_minted(fe, entry):
            raise fe.type_error(
                f"{name}.{verb}: entry {axis} of the index is computed from a minted index (arithmetic on it); "
                "only the coordinates as the schedule minted them prove that this block owns the tile", where)
        raise _outside(fe, tensor, verb, where,
                       f"{name}.{verb}: entry {axis} of the index ({fe.describe(entry)}) was not minted by the "
                       f"schedule of '{name}'; axis {axis} is streamed, so its entry must come from "
                       f"`for idx in {name}.tiles():`")
    if len({id(m) for m in mints}) > 1:
        raise fe.type_error(
            f"{name}.{verb}: the streamed entries of the index come from different minted indices (different loops "
            "or iterations); a tile is proven this block's only as one index of one schedule item", where)
    if mints:
        state.claim(fe, tensor, mints[0], where)
    return [_coordinate(fe, entry, where) for entry in index]


def _coordinate(fe: FrontEnd, entry: Any, where: ast.AST) -> Value:
    if isinstance(entry, Value):
        return entry
    return fe.constant(entry, dt.i32, node=where)


def _check_owned_entry(fe: FrontEnd, tensor: Value, axis: int, entry: Any, verb: str, where: ast.AST) -> None:
    name = tensor.name
    if _plain_int(entry):
        count = static_tile_counts(fe, tensor)[axis]
        if not 0 <= entry < count:
            raise fe.type_error(f"{name}.{verb}: entry {axis} of the index (owned axis) is {entry}, outside the "
                                f"{count} tiles of '{name}' along axis {axis} in this launch", where)
        return
    if isinstance(entry, Value):
        proof = fe.mapped.in_range.get(entry.id)
        if proof is not None and proof[0] is tensor and proof[1] == axis:
            return
        if proof is not None:
            raise fe.type_error(
                f"{name}.{verb}: entry {axis} of the index (owned axis) is the variable of a loop over "
                f"{proof[0].name}.num_tiles({proof[1]}), not over {name}.num_tiles({axis})", where)
    raise fe.type_error(
        f"{name}.{verb}: entry {axis} of the index is on an owned axis and must be proven in range: the variable "
        f"of `for c in range({name}.num_tiles({axis})):` or a constant int below the tile count; got "
        f"{fe.describe(entry)}", where)


def _derived_from_minted(fe: FrontEnd, value: Value) -> bool:
    """Whether ``value`` is computed (through any ops) from a minted coordinate."""
    pending, seen = [value], set[int]()
    while pending and len(seen) < 256:
        current = pending.pop()
        if current.id in seen:
            continue
        seen.add(current.id)
        if current.id in fe.mapped.components:
            return True
        producer = fe.producers.get(current.id)
        if producer is not None:
            pending.extend(producer.operands)
    return False


def is_uniform(fe: FrontEnd, value: Value) -> bool:
    """Whether ``value`` is the same in every block of a launch: made from parameters,
    constants, shapes, block counts and read-only memory, never from block ids,
    loop variables, branch results or tensors the kernel writes."""
    params = {v.id for v in fe.body.args}
    pending, seen = [value], set[int]()
    while pending:
        current = pending.pop()
        if current.id in seen:
            continue
        seen.add(current.id)
        if current.id in params:
            continue
        producer = fe.producers.get(current.id)
        if producer is None or producer.regions or producer.opdef.key in (GridOp.BLOCK_ID, ScheduleOp.SCHEDULE_ITEM):
            return False  # a block argument (loop variable), a branch's result, the block's place
        if producer.opdef.has_effects and producer.opdef.key is not GridOp.NUM_BLOCKS:
            resource = producer.opdef.ordered_resource(producer)
            rtype = resource.type if isinstance(resource, Value) else None
            tensor = rtype.tensor if isinstance(rtype, PartitionType) else rtype
            if not (isinstance(tensor, TensorType) and not tensor.mutable):
                return False
        pending.extend(producer.operands)
    return True


# -- the loop -------------------------------------------------------------------------------------
def mapped_loop(fe: FrontEnd, node: ast.For, schedule: TileSchedule) -> str:
    """``for idx in z.tiles():`` as the loop over this block's schedule items."""
    from cutile_compiler._frontend import _has_loop_exit

    if node.orelse:
        raise fe.syntax_error("for ... else is not supported inside a kernel", node)
    z = schedule.tensors[0]
    ztype = z.type
    assert isinstance(ztype, TensorType) and ztype.map_shape is not None
    streamed = [axis for axis, m in enumerate(ztype.map_shape) if m != OWNED_AXIS]
    part = fe.own_partition(z, node)
    counts: list[Value] = []
    starts: list[Value] = []
    for axis in streamed:
        entry = schedule.ranges[axis]
        grid = fe.op(MemoryOp.NUM_TILES, [part], {"axis": axis}, node=node).result
        if entry is None:
            counts.append(grid)
            starts.append(fe.constant(0, dt.i32, node=node))
            continue
        start, count = (v if isinstance(v, Value) else fe.constant(v, dt.i32, node=schedule.node) for v in entry)
        if not all(_plain_int(v) for v in entry):  # constant ranges were checked at compile time
            _assert_range(fe, schedule.node, axis, start, count, grid)
        counts.append(count)
        starts.append(start)
    total = counts[0]
    for count in counts[1:]:
        total = fe.op(ElementwiseOp.MUL, [total, count], node=node).result
    first = fe.block_id(0)
    step = fe.op(GridOp.NUM_BLOCKS, [], {"axis": 0}, node=node).result
    groups = tuple(ztype.map_shape[axis] for axis in streamed)
    names = tuple(t.name or "" for t in schedule.tensors)
    # What decides which block gets which tile, besides the map and the block count: the
    # sub-grid (the whole grid, or tiles_within's starts and counts, the same values or ints).
    space = tuple(None if entry is None else tuple(v.id if isinstance(v, Value) else ("int", v) for v in entry)
                  for entry in schedule.ranges)
    line = fe.location(node).line

    def enter(item: Value) -> None:
        coordinates = fe.op(ScheduleOp.SCHEDULE_ITEM, [item, *counts, *starts], {"groups": groups, "tensors": names},
                            node=node).results
        mint = Mint(schedule.tensors, space, line)
        minted: list[Any] = []
        streamed_coordinates = iter(coordinates)
        for axis in range(ztype.rank):
            if axis in streamed:
                coordinate = next(streamed_coordinates)
                fe.mapped.components[coordinate.id] = (mint, axis)
                minted.append(coordinate)
            else:
                minted.append(0)  # the item owns the axis: its first tile
        fe.assign(node.target, MintedIndex(minted, mint), node)

    build = fe.range_as_loop if _has_loop_exit(node.body) else fe.range_as_for
    fe.mapped.active.append(schedule.tensors)
    fe.mapped.levels.append(len(fe.loops))  # the loop context build pushes
    try:
        return fe.settle_loop_types(node, lambda: build(node, first, total, step, dt.i32, enter))
    finally:
        fe.mapped.active.pop()
        fe.mapped.levels.pop()


def _assert_range(fe: FrontEnd, node: ast.AST, axis: int, start: Value, count: Value, grid: Value) -> None:
    """Run-time checks of a ``tiles_within`` range: start >= 0, count >= 0 and
    start <= grid - count (the subtraction cannot wrap: both are non-negative)."""
    zero = fe.constant(0, dt.i32, node=node)
    start_ok = fe.op(ElementwiseOp.GE, [start, zero], node=node).result
    count_ok = fe.op(ElementwiseOp.GE, [count, zero], node=node).result
    room = fe.op(ElementwiseOp.SUB, [grid, count], node=node).result
    checks = (
        (start_ok, f"tiles_within: the start of axis {axis} is negative"),
        (count_ok, f"tiles_within: the count of axis {axis} is negative"),
        (fe.op(ElementwiseOp.LE, [start, room], node=node).result,
         f"tiles_within: the range of axis {axis} passes the tile grid"),
    )
    for condition, message in checks:
        fe.op(DebugOp.ASSERT, [condition], {"message": message}, node=node)


__all__ = ["MappedState", "Mint", "MintedIndex", "TileSchedule", "checked_index", "is_uniform", "mapped_load",
           "mapped_loop", "mapped_store", "no_own_tile", "static_tile_counts", "tensor_num_tiles", "tensor_tiles",
           "tensor_tiles_with", "tensor_tiles_within"]
