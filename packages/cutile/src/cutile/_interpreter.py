"""The CPU interpreter: runs a kernel's typed IR on numpy, block by block.

It executes the compiler's IR (not the Python source), each op through its
numpy meaning (its `OpDef`'s ``evaluate``), whole tiles at a time. It checks
what a GPU cannot: races between blocks (possible only in unsafe kernels: two
blocks writing one element, or one reading what another writes), integer
division by zero, that the schedules of mapped partitions reached every tile of
their grids equally often (once, for a loop run once per block), and, in checked
mode (``CUTILE_CHECKED=1``), reads of elements nothing ever wrote.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Sequence, Set as AbstractSet
from typing import Any

import numpy as np

from cutile._errors import KernelRuntimeError
from cutile._tensor import HostStorage, Tensor, numpy_dtype
from cutile import _config
from cutile_compiler import (
    Block,
    Escape,
    IntegerDivisionByZero,
    KernelIR,
    Operation,
    Select,
    Terminator,
    TileType,
    Value,
)

_PADDING_VALUES = {"zero": 0.0, "neg_zero": -0.0, "nan": float("nan"), "pos_inf": float("inf"), "neg_inf": float("-inf")}


#: Kinds of access to an element: bits of `_TensorState.accesses`, below the block that touched it first.
READ, WRITE, ATOMIC = 1, 2, 4
_KIND_BITS = 3  # the block (linear id + 1; 0: untouched) sits above the kind bits
#: per kind of access, the kinds by another block it races with. Why keeping the first
#: block suffices: if a later block B's access conflicts with an earlier block A's while
#: the first block F (F < A) does not conflict with it, then A's access conflicted with
#: F's (a write with anything; a read by A after F's atomic; an atomic by A after F's
#: read) and was reported when A ran.
_CONFLICTS = {READ: WRITE | ATOMIC, WRITE: READ | WRITE | ATOMIC, ATOMIC: READ | WRITE}
_VERBS = {READ: "reads {}", WRITE: "writes {}", ATOMIC: "updates {} atomically"}

class _TensorState:
    """A tensor argument during one launch: its numpy view and the check maps."""

    def __init__(self, name: str, tensor: Tensor, mutable: bool, checked: bool, blocks: int) -> None:
        self.name = name
        self.view = tensor._raw_host_view()
        storage = tensor._storage
        assert isinstance(storage, HostStorage)
        # Which elements were ever written; kept up to date whenever the storage
        # tracks it, read-checked only in checked mode.
        self.initialized: np.ndarray[Any, Any] | None = None
        self.check_reads = checked
        if storage.initialized is not None:
            self.initialized = np.lib.stride_tricks.as_strided(
                storage.initialized[tensor.offset:], tensor.shape,
                tuple(s * storage.initialized.itemsize for s in tensor.strides))
        # Per element of a writable tensor, the first block that touched it and how
        # that block has touched it since (`_record`); 0: untouched. np.zeros maps
        # pages lazily, so a big tensor costs only what the kernel touches.
        code = np.int32 if (blocks + 1) << _KIND_BITS <= np.iinfo(np.int32).max else np.int64
        self.accesses: np.ndarray[Any, Any] | None = np.zeros(tensor.shape, dtype=code) if mutable else None


def is_checked() -> bool:
    return _config.CHECKED.get()


class Interpreter:
    """Runs one launch of a kernel over its grid."""

    def __init__(self, kernel: KernelIR, grid: tuple[int, int, int]) -> None:
        self.kernel = kernel
        self.grid = grid
        self.block_id: tuple[int, int, int] = (0, 0, 0)
        self.env: dict[Value, Any] = {}
        # Lanes of the running block's values that hold no value of the kernel's,
        # followed through element-wise ops (`_follow_lanes`). Padding lanes lie past
        # a tensor's end or are masked off: a division by zero there is not the
        # kernel's. Undefined lanes are results of an integer division by zero: free
        # while element-wise ops carry them and a select may discard them
        # (``where(b != 0, a // b, 0)``), the kernel's error once anything else uses
        # them (a store, a reduction, a branch), reported at the division.
        self.padding: dict[Value, np.ndarray[Any, Any]] = {}
        self.undefined: dict[Value, tuple[np.ndarray[Any, Any], Operation, str]] = {}
        # Per schedule loop (its ``schedule_item`` op) and sub-grid (counts, starts):
        # how often the blocks reached each tile (`schedule_item`, `_check_schedules`).
        self.schedules: dict[tuple[Operation, tuple[int, ...], tuple[int, ...]], dict[tuple[int, ...], int]] = {}

    def run(self, arguments: dict[str, Any], mutable: AbstractSet[str]) -> None:
        checked = is_checked()
        params: dict[Value, Any] = {}
        for param in self.kernel.params:
            value = arguments[param.name]
            if param.kind == "tensor":
                params[param.value] = _TensorState(param.name, value, param.name in mutable, checked,
                                                   self.grid[0] * self.grid[1] * self.grid[2])
            else:
                assert isinstance(param.value.type, TileType)
                params[param.value] = np.asarray(value, dtype=numpy_dtype(param.value.type.dtype))
        gx, gy, gz = self.grid
        for z, y, x in itertools.product(range(gz), range(gy), range(gx)):
            self.block_id = (x, y, z)
            self.env = dict(params)
            self.padding = {}
            self.undefined = {}
            try:
                self.run_block(self.kernel.body, [])
            except Escape as escape:  # (run_block reports a failing op at its own line)
                if escape.terminator.kind != "return":
                    raise
        self._check_schedules()

    def schedule_item(self, op: Operation, counts: tuple[int, ...], starts: tuple[int, ...],
                      tile: tuple[int, ...]) -> None:
        reached = self.schedules.setdefault((op, counts, starts), {})
        reached[tile] = reached.get(tile, 0) + 1

    def _check_schedules(self) -> None:
        """Every tile of a schedule's sub-grid was reached equally often by the launch
        (once per run of the loop in each block), and nothing outside it: what makes
        a mapped partition's stores cover its tiles, each tile by one block."""
        for (op, counts, starts), reached in self.schedules.items():
            names = " and ".join(f"'{n}'" for n in op.attrs["tensors"])
            outside = [t for t in reached if not all(s <= c < s + n for c, s, n in zip(t, starts, counts))]
            if outside:
                raise KernelRuntimeError(
                    f"the schedule of {names} reached tile {list(outside[0])}, outside its grid of {list(counts)} "
                    f"tiles from {list(starts)}", op.location)
            times = next(iter(reached.values()))
            for tile in itertools.product(*(range(s, s + n) for s, n in zip(starts, counts))):
                if reached.get(tile, 0) != times:
                    raise KernelRuntimeError(
                        f"the schedule of {names} reached tile {list(tile)} {reached.get(tile, 0)} time(s) and "
                        f"others {times}, on a grid of {list(counts)} tiles from {list(starts)} with "
                        f"{self.grid[0]} blocks: it does not cover every tile equally", op.location)

    # -- EvalContext -------------------------------------------------------------
    def run_block(self, block: Block, args: Sequence[Any]) -> Terminator:
        env = self.env
        padding, undefined = self.padding, self.undefined
        for value, arg in zip(block.args, args):
            env[value] = arg
            if padding or undefined:
                padding.pop(value, None)
                undefined.pop(value, None)
        for op in block.ops:
            lanewise = op.opdef.lanewise
            if undefined and not lanewise:
                for value in op.operands:
                    if value in undefined:
                        raise self._undefined_error(undefined[value])
            operands = [env[v] for v in op.operands]
            if op.opdef.is_terminator:
                return Terminator(op.name, operands)
            fresh = None
            try:
                results = op.opdef.evaluate(self, op, operands)
            except IntegerDivisionByZero as exc:
                results, fresh = self._division_by_zero(op, exc)
            except (IndexError, ValueError, ZeroDivisionError) as exc:
                # Reported at the op that failed, not at the kernel's definition.
                raise KernelRuntimeError(f"in block {self.block_id}: {exc}", op.location) from None
            for result, value in zip(op.results, results):
                env[result] = value
            if lanewise and (padding or undefined or fresh):
                self._follow_lanes(op, fresh)
        return Terminator("yield", [])

    def _follow_lanes(self, op: Operation, fresh: tuple[np.ndarray[Any, Any], Operation, str] | None) -> None:
        """The padding and undefined lanes of an element-wise op's result: those of its
        operands (for a select, of the side each lane takes), and ``fresh`` ones of its own."""
        result = op.results[0]
        shape = np.shape(self.env[result])
        lanes = None
        for operand in op.operands:
            marked = self.padding.get(operand)
            if marked is not None and marked.shape == shape:
                lanes = marked if lanes is None else lanes | marked
        if lanes is None:
            self.padding.pop(result, None)
        else:
            self.padding[result] = lanes
        undefined, origin = (None, None) if fresh is None else (fresh[0], fresh)
        takes_first = np.broadcast_to(np.asarray(self.env[op.operands[0]], dtype=bool), shape) \
            if isinstance(op.opdef, Select) else None
        for position, operand in enumerate(op.operands):
            entry = self.undefined.get(operand)
            if entry is None:
                continue
            if entry[0].shape != shape:
                raise self._undefined_error(entry)
            marked = entry[0]
            if takes_first is not None and position:
                marked = marked & (takes_first if position == 1 else ~takes_first)
            undefined = marked if undefined is None else undefined | marked
            origin = origin or entry
        if undefined is not None and origin is not None and undefined.any():
            self.undefined[result] = (undefined, origin[1], origin[2])
        elif self.undefined:
            self.undefined.pop(result, None)

    def _undefined_error(self, entry: tuple[np.ndarray[Any, Any], Operation, str]) -> Exception:
        return self.runtime_error(entry[1], entry[2])

    def _mark_padding(self, op: Operation, lanes: np.ndarray[Any, Any]) -> None:
        if lanes.any():
            self.padding[op.results[0]] = lanes
        elif self.padding:
            self.padding.pop(op.results[0], None)

    def _division_by_zero(self, op: Operation, exc: IntegerDivisionByZero
                          ) -> tuple[Sequence[Any], tuple[np.ndarray[Any, Any], Operation, str] | None]:
        """The result of an integer division with zero divisors, and its undefined
        lanes (those outside the divisor's padding) with the error they make when used."""
        marked = self.padding.get(op.operands[1])
        real = exc.lanes if marked is None or marked.shape != exc.lanes.shape else exc.lanes & ~marked
        if not real.any():
            return (exc.result,), None
        where = [int(i) for i in np.unravel_index(int(np.argmax(real)), real.shape)]
        element = f" at element {where} of the tile" if where else ""
        return (exc.result,), (real, op, f"integer division by zero in '{exc.symbol}': the divisor is 0{element}")

    def _slices(self, state: _TensorState, start: tuple[int, ...], shape: tuple[int, ...]) -> tuple[tuple[slice, ...], tuple[slice, ...]]:
        """(slices into the tensor, slices into the tile) of the in-bounds part of the
        tile of ``shape`` whose first element is at element coordinates ``start``."""
        tensor_slices, tile_slices = [], []
        for axis, (first, size) in enumerate(zip(start, shape)):
            extent = state.view.shape[axis]
            low, high = min(max(first, 0), extent), min(max(first + size, 0), extent)
            tensor_slices.append(slice(low, high))
            tile_slices.append(slice(low - first, low - first + (high - low)))
        return tuple(tensor_slices), tuple(tile_slices)

    def load(self, op: Operation, tensor: Any, index: tuple[int, ...], tile_shape: tuple[int, ...], padding: str) -> Any:
        return self.load_at(op, tensor, tuple(i * size for i, size in zip(index, tile_shape)), tile_shape, padding)

    def load_at(self, op: Operation, tensor: Any, start: tuple[int, ...], shape: tuple[int, ...], padding: str) -> Any:
        state: _TensorState = tensor
        source, target = self._slices(state, start, shape)
        result_type = op.results[0].type
        assert isinstance(result_type, TileType)
        np_type = numpy_dtype(result_type.dtype)
        fill = _PADDING_VALUES[padding]
        if np_type.kind in "iub":
            fill = 0.0
        tile = np.full(shape, fill, dtype=np_type)
        if state.check_reads and state.initialized is not None:
            written = state.initialized[source]
            if not written.all():
                missing = tuple(int(c[0]) + s.start for c, s in zip(np.nonzero(~written), source))
                raise KernelRuntimeError(
                    f"block {self.block_id} reads element {list(missing)} of '{state.name}', which nothing has written "
                    "(checked mode)", op.location)
        self._record(op, state, source, READ)
        tile[target] = state.view[source]
        if tile[target].size != tile.size:  # part of the tile lies outside the tensor
            lanes = np.ones(shape, dtype=bool)
            lanes[target] = False
            self._mark_padding(op, lanes)
        elif self.padding:
            self.padding.pop(op.results[0], None)
        return tile

    def store(self, op: Operation, tensor: Any, index: tuple[int, ...], tile_shape: tuple[int, ...], value: Any) -> None:
        state: _TensorState = tensor
        target, source = self._slices(state, tuple(i * size for i, size in zip(index, tile_shape)), tile_shape)
        tiles = [-(-extent // size) for extent, size in zip(state.view.shape, tile_shape)]
        if any(not 0 <= i < count for i, count in zip(index, tiles)):
            # The GPU would drop such a store silently (it masks every element).
            raise KernelRuntimeError(
                f"block {self.block_id} stores at tile index {list(index)} of '{state.name}', outside its "
                f"{tiles} tiles", op.location)
        self._record(op, state, target, WRITE)
        state.view[target] = value[source]
        if state.initialized is not None:
            state.initialized[target] = True

    def tensor_shape(self, tensor: Any) -> tuple[int, ...]:
        state: _TensorState = tensor
        return tuple(state.view.shape)

    def emit_print(self, op: Operation, text: str) -> None:
        # A one-block grid prints exactly what the GPU's printf prints; with more
        # blocks each line says which block printed it (the interpreter runs them in turn).
        if self.grid != (1, 1, 1):
            prefix = f"[block {self.block_id}] "
            text = "".join(prefix + line for line in text.splitlines(keepends=True))
        sys.stdout.write(text)

    def _positions(self, op: Operation, state: _TensorState, indices: Sequence[Any], mask: Any,
                   what: str) -> tuple[tuple[Any, ...], Any]:
        """The (index arrays, selection) of the unmasked elements, bounds checked."""
        arrays = [np.asarray(i).astype(np.int64) for i in indices]
        selected = np.ones(arrays[0].shape, dtype=bool) if mask is None else np.asarray(mask, dtype=bool)
        for axis, index in enumerate(arrays):
            extent = state.view.shape[axis]
            bad = selected & ((index < 0) | (index >= extent))
            if bad.any():
                where = tuple(int(c[0]) for c in np.nonzero(bad))
                element = [int(a[where]) for a in arrays]
                raise self.runtime_error(
                    op, f"{what} of '{state.name}' at index {element} is out of bounds for shape "
                        f"{list(state.view.shape)} (element {list(where)} of the index tiles)")
        return tuple(a[selected] for a in arrays), selected

    def gather(self, op: Operation, tensor: Any, indices: Sequence[Any], mask: Any) -> Any:
        state: _TensorState = tensor
        chosen, selected = self._positions(op, state, indices, mask, "gather")
        if state.check_reads and state.initialized is not None and not state.initialized[chosen].all():
            missing = [int(c[np.argmin(state.initialized[chosen])]) for c in chosen]
            raise KernelRuntimeError(
                f"block {self.block_id} reads element {missing} of '{state.name}', which nothing has written "
                "(checked mode)", op.location)
        self._record(op, state, chosen, READ)
        result = np.zeros(selected.shape, dtype=state.view.dtype)
        result[selected] = state.view[chosen]
        self._mark_padding(op, ~selected)
        return result

    def _linear(self, block: tuple[int, int, int]) -> int:
        return block[0] + self.grid[0] * (block[1] + self.grid[1] * block[2])

    def _block(self, linear: int) -> tuple[int, int, int]:
        gx, gy = self.grid[0], self.grid[1]
        return (linear % gx, (linear // gx) % gy, linear // (gx * gy))

    def _record(self, op: Operation, state: _TensorState, where: tuple[Any, ...], kind: int) -> None:
        """Records this block's access (`READ`, `WRITE` or `ATOMIC`) of the elements
        ``where`` (slices or index arrays) of a writable tensor and raises on a race
        with another block: a write and any other access, or a plain read and an
        atomic update. Accesses within one block, reads by several blocks and atomic
        updates by several blocks are free.

        Blocks run one after another, so per element it is enough to keep the first
        block that touched it and the kinds of its accesses: any later block's access
        that conflicts with an earlier block's either conflicts with the first one's or
        was already reported (see the comment at `_CONFLICTS`)."""
        accesses = state.accesses
        if accesses is None:
            return
        me = self._linear(self.block_id) + 1
        mine = (me << _KIND_BITS) | kind
        codes = accesses[where]  # a view for slices, a copy for index arrays
        # The first toucher is never a later block, so "another block" is 0 < first < me.
        foreign = (codes != 0) & (codes < (me << _KIND_BITS))
        if not foreign.any():  # the usual case: untouched, or this block's own
            codes |= mine
            accesses[where] = codes
            return
        clash = foreign & ((codes & _CONFLICTS[kind]) != 0)
        if clash.any():
            at = int(np.argmax(clash.ravel()))
            if all(isinstance(part, slice) for part in where):
                local = np.unravel_index(at, clash.shape)
                element = [int(part.start or 0) + int(i) for part, i in zip(where, local)]
            else:
                element = [int(np.asarray(part).ravel()[at]) for part in where]
            other = self._block(int(codes.ravel()[at] >> _KIND_BITS) - 1)
            theirs = int(codes.ravel()[at]) & _CONFLICTS[kind]
            their_kind = next(k for k in (WRITE, ATOMIC, READ) if theirs & k)
            if kind == their_kind == WRITE:
                what = f"blocks {other} and {self.block_id} both write element {element} of '{state.name}'"
            else:
                what = (f"block {other} " + _VERBS[their_kind].format(f"element {element} of '{state.name}'")
                        + f" and block {self.block_id} " + _VERBS[kind].format("it"))
            raise KernelRuntimeError(f"race: {what} (blocks run in no fixed order on a GPU)", op.location)
        # Elements another block touched first stay its; the others become or stay this block's.
        accesses[where] = np.where(foreign, codes, codes | mine)

    def scatter(self, op: Operation, tensor: Any, indices: Sequence[Any], value: Any, mask: Any) -> None:
        state: _TensorState = tensor
        chosen, selected = self._positions(op, state, indices, mask, "scatter")
        self._record(op, state, chosen, WRITE)
        state.view[chosen] = np.asarray(value)[selected]
        if state.initialized is not None:
            state.initialized[chosen] = True

    def atomic(self, op: Operation, tensor: Any, indices: Sequence[Any], mask: Any, update: Any) -> Any:
        state: _TensorState = tensor
        chosen, selected = self._positions(op, state, indices, mask, "atomic update")
        self._record(op, state, chosen, ATOMIC)
        old = np.zeros(selected.shape, dtype=state.view.dtype)
        flat_old = old.reshape(-1)
        positions = np.flatnonzero(selected)
        view = state.view
        for number, position in enumerate(positions):
            element = tuple(int(c[number]) for c in chosen)
            previous = view[element]
            flat_old[position] = previous
            view[element] = update(previous, int(position))
        if state.initialized is not None:
            state.initialized[chosen] = True
        return old

    def runtime_error(self, op: Operation, message: str) -> Exception:
        return KernelRuntimeError(f"in block {self.block_id}: {message}", op.location)
