"""The CPU interpreter: runs a kernel's typed IR on numpy, block by block.

It executes the compiler's IR (not the Python source), each op through its
numpy meaning in ``cutile_compiler._opdefs``, whole tiles at a time. It checks
what a GPU cannot: two blocks writing one element (possible only in unsafe
kernels) and, in checked mode (``CUTILE_CHECKED=1``), reads of elements nothing
ever wrote.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np

from cutile._errors import CutileError
from cutile._tensor import HostStorage, Tensor
from cutile_compiler import _config
from cutile_compiler._errors import SourceLocation
from cutile_compiler._ir import Block, KernelIR, Operation, Value
from cutile_compiler._opdefs import Terminator
from cutile_compiler._opdefs.control import _Escape
from cutile_compiler._opdefs.elementwise import numpy_dtype
from cutile_compiler._types import TileType

_PADDING_VALUES = {"zero": 0.0, "neg_zero": -0.0, "nan": float("nan"), "pos_inf": float("inf"), "neg_inf": float("-inf")}


class KernelRuntimeError(CutileError, RuntimeError):
    """A kernel did something invalid while the interpreter ran it (a race between
    blocks, a read of memory nothing wrote, a failed assert)."""

    def __init__(self, message: str, location: SourceLocation | None) -> None:
        where = f"{location}: " if location else ""
        excerpt = location.excerpt() if location else ""
        super().__init__(f"{where}{message}" + (f"\n{excerpt}" if excerpt else ""))
        self.location = location


class _TensorState:
    """A tensor argument during one launch: its numpy view and the check maps."""

    def __init__(self, name: str, tensor: Tensor, mutable: bool, checked: bool) -> None:
        self.name = name
        self.view = tensor.host_view()
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
        self.writer: np.ndarray[Any, Any] | None = np.full(tensor.shape, -1, dtype=np.int64) if mutable else None


def is_checked() -> bool:
    return _config.CHECKED.get()


class Interpreter:
    """Runs one launch of a kernel over its grid."""

    def __init__(self, kernel: KernelIR, grid: tuple[int, int, int]) -> None:
        self.kernel = kernel
        self.grid = grid
        self.block_id: tuple[int, int, int] = (0, 0, 0)
        self.env: dict[Value, Any] = {}

    def run(self, arguments: dict[str, Any], mutable: set[str]) -> None:
        checked = is_checked()
        params: dict[Value, Any] = {}
        for param in self.kernel.params:
            value = arguments[param.name]
            if param.kind == "tensor":
                params[param.value] = _TensorState(param.name, value, param.name in mutable, checked)
            else:
                assert isinstance(param.value.type, TileType)
                params[param.value] = np.asarray(value, dtype=numpy_dtype(param.value.type.dtype))
        gx, gy, gz = self.grid
        for z, y, x in itertools.product(range(gz), range(gy), range(gx)):
            self.block_id = (x, y, z)
            self.env = dict(params)
            try:
                self.run_block(self.kernel.body, [])
            except _Escape as escape:
                if escape.terminator.kind != "return":
                    raise
            except (IndexError, ValueError, ZeroDivisionError) as exc:
                raise KernelRuntimeError(f"in block {self.block_id}: {exc}", self.kernel.location) from None

    # -- EvalContext -------------------------------------------------------------
    def run_block(self, block: Block, args: Sequence[Any]) -> Terminator:
        env = self.env
        for value, arg in zip(block.args, args):
            env[value] = arg
        for op in block.ops:
            operands = [env[v] for v in op.operands]
            if op.opdef.is_terminator:
                return Terminator(op.name, operands)
            results = op.opdef.evaluate(self, op, operands)
            for result, value in zip(op.results, results):
                env[result] = value
        return Terminator("yield", [])

    def _slices(self, state: _TensorState, index: tuple[int, ...], tile_shape: tuple[int, ...]) -> tuple[tuple[slice, ...], tuple[slice, ...]]:
        """(slices into the tensor, slices into the tile) of the in-bounds part."""
        tensor_slices, tile_slices = [], []
        for axis, (i, size) in enumerate(zip(index, tile_shape)):
            start = i * size
            extent = state.view.shape[axis]
            stop = min(start + size, extent)
            if start >= extent or i < 0:
                start = stop = 0 if i < 0 else extent
            tensor_slices.append(slice(start, stop))
            tile_slices.append(slice(0, max(0, stop - start)))
        return tuple(tensor_slices), tuple(tile_slices)

    def load(self, op: Operation, tensor: Any, index: tuple[int, ...], tile_shape: tuple[int, ...], padding: str) -> Any:
        state: _TensorState = tensor
        source, target = self._slices(state, index, tile_shape)
        result_type = op.results[0].type
        assert isinstance(result_type, TileType)
        np_type = numpy_dtype(result_type.dtype)
        fill = _PADDING_VALUES[padding]
        if np_type.kind in "iub":
            fill = 0.0
        tile = np.full(tile_shape, fill, dtype=np_type)
        if state.check_reads and state.initialized is not None:
            written = state.initialized[source]
            if not written.all():
                missing = tuple(int(c[0]) + s.start for c, s in zip(np.nonzero(~written), source))
                raise KernelRuntimeError(
                    f"block {self.block_id} reads element {list(missing)} of '{state.name}', which nothing has written "
                    "(checked mode)", op.location)
        tile[target] = state.view[source]
        return tile

    def store(self, op: Operation, tensor: Any, index: tuple[int, ...], tile_shape: tuple[int, ...], value: Any) -> None:
        state: _TensorState = tensor
        target, source = self._slices(state, index, tile_shape)
        if state.writer is not None:
            linear = self.block_id[0] + self.grid[0] * (self.block_id[1] + self.grid[1] * self.block_id[2])
            previous = state.writer[target]
            clash = (previous != -1) & (previous != linear)
            if clash.any():
                first = tuple(int(c[0]) + s.start for c, s in zip(np.nonzero(clash), target))
                other = int(previous[tuple(c - s.start for c, s in zip(first, target))])
                ox = other % self.grid[0]
                oy = (other // self.grid[0]) % self.grid[1]
                oz = other // (self.grid[0] * self.grid[1])
                raise KernelRuntimeError(
                    f"race: blocks {(ox, oy, oz)} and {self.block_id} both write element {list(first)} of "
                    f"'{state.name}'", op.location)
            state.writer[target] = linear
        state.view[target] = value[source]
        if state.initialized is not None:
            state.initialized[target] = True

    def tensor_shape(self, tensor: Any) -> tuple[int, ...]:
        state: _TensorState = tensor
        return tuple(state.view.shape)

    def emit_print(self, op: Operation, text: str) -> None:
        print(f"[block {self.block_id}] {text}")
