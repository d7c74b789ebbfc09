"""A reference evaluator, on numpy, of the Tile IR that element-offset loads lower to:
it runs a lowered kernel's module block by block, so tests check what the GPU would
compute (views, padding, masked pointer loads, the branches, the register splices)
on a machine without one. It knows the ops those kernels use and fails on any other;
a view indexed outside its index space (undefined in Tile IR) fails too.

Values: tiles are numpy arrays (rank 0 for scalars; integers held as int64 within
their width, i1 as bool), pointer tiles ``(buffer, element offsets)``, views dicts.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

import cutile_ir as ir
from cutile_compiler._lowering import kernel_abi
from cutile_compiler._ir import KernelIR

PADDING = {ir.PaddingValue.ZERO: 0.0, ir.PaddingValue.NEG_ZERO: -0.0, ir.PaddingValue.NAN: math.nan,
           ir.PaddingValue.POS_INF: math.inf, ir.PaddingValue.NEG_INF: -math.inf}
COMPARE = {ir.ComparisonPredicate.EQUAL: np.equal, ir.ComparisonPredicate.NOT_EQUAL: np.not_equal,
           ir.ComparisonPredicate.LESS_THAN: np.less, ir.ComparisonPredicate.LESS_THAN_OR_EQUAL: np.less_equal,
           ir.ComparisonPredicate.GREATER_THAN: np.greater,
           ir.ComparisonPredicate.GREATER_THAN_OR_EQUAL: np.greater_equal}
FLOAT = {"f16": np.float16, "bf16": np.float32, "f32": np.float32, "f64": np.float64}


class Unsupported(AssertionError):
    """An op (or form of one) this evaluator does not know."""


def _element(t: Any) -> Any:
    return t.element if isinstance(t, ir.TileType) else t


def _bits(t: Any) -> int:
    return int(_element(t).nbytes) * 8


def _wrap(values: Any, t: Any) -> np.ndarray:
    """Integers as the signed values of their width (two's complement)."""
    bits = _bits(t)
    v = np.asarray(values).astype(np.int64)
    if bits == 64:
        return v
    v = v & ((1 << bits) - 1)
    return np.where(v >= 1 << (bits - 1), v - (1 << bits), v).astype(np.int64)


def _unsigned(values: np.ndarray, t: Any) -> np.ndarray:
    """Integers read as unsigned values of their width."""
    bits = _bits(t)
    return np.asarray(values).astype(object) % (1 << 64) if bits == 64 else values & ((1 << bits) - 1)


class Evaluator:
    """Runs one kernel's Tile IR on numpy buffers (one per tensor parameter)."""

    def __init__(self, kernel: KernelIR, module: ir.Module, tensors: Mapping[str, np.ndarray],
                 scalars: Mapping[str, Any] | None = None) -> None:
        self.function = module.functions[0]
        self.buffers = {name: np.array(array).reshape(-1) for name, array in tensors.items()}
        self.shapes = {name: np.shape(array) for name, array in tensors.items()}
        self.abi = kernel_abi(kernel)
        self.scalars = dict(scalars or {})

    def run(self, grid: Sequence[int]) -> dict[str, np.ndarray]:
        for block in np.ndindex(*grid):
            self.block_id = tuple(block) + (0,) * (3 - len(block))
            values: dict[ir.Value, Any] = {}
            for arg, value in zip(self.function.args, self._arguments()):
                values[arg] = value
            self._block(self.function.body, values)
        return {name: self.buffers[name].reshape(shape) for name, shape in self.shapes.items()}

    def _arguments(self) -> list[Any]:
        result: list[Any] = []
        for arg in self.abi:
            if arg.kind == "pointer":
                result.append((arg.param, np.zeros((), np.int64)))
            elif arg.kind == "dim":
                result.append(np.asarray(self.shapes[arg.param][arg.axis], np.int64))
            elif arg.kind == "stride":
                shape = self.shapes[arg.param]
                result.append(np.asarray(math.prod(shape[arg.axis + 1:]), np.int64))
            else:
                result.append(np.asarray(self.scalars[arg.param]))
        return result

    def _block(self, block: ir.Block, values: dict[ir.Value, Any]) -> list[Any]:
        for op in block.ops:
            if op.name in ("yield", "return"):
                return [values[v] for v in op.operands]
            results = self._op(op, values)
            for value, result in zip(op.results, results):
                values[value] = result
        return []

    # -- ops ----------------------------------------------------------------------------------
    def _op(self, op: ir.Operation, values: dict[ir.Value, Any]) -> list[Any]:
        name = op.name
        args = [values[v] for v in op.operands]
        out = op.results[0].type if op.results else None
        if name in ("make_token", "join_tokens"):
            return [None]
        if name == "assume":
            return [args[0]]
        if name == "get_tile_block_id":
            return [np.asarray(b, np.int64) for b in self.block_id]
        if name == "constant":
            dense = op.attributes["value"]
            data = np.asarray(dense.values(), dtype=object)
            tile = np.broadcast_to(data.reshape(-1)[0] if data.size == 1 else data.reshape(out.shape), out.shape)
            return [self._typed(np.array(tile), out)]
        if name in ("addi", "subi", "muli"):
            a, b = args
            combined = a + b if name == "addi" else a - b if name == "subi" else a * b
            return [_wrap(combined, out)]
        if name == "divi":
            a, b = args
            if op.attributes["signedness"] is ir.Signedness.UNSIGNED:
                a, b = _unsigned(a, out), _unsigned(b, out)
                return [_wrap(a // b, out)]
            quotient = np.abs(a) // np.abs(b)
            return [_wrap(np.where((a < 0) != (b < 0), -quotient, quotient), out)]
        if name == "andi":
            return [args[0] & args[1]]
        if name == "cmpi":
            a, b = args
            if op.attributes["signedness"] is ir.Signedness.UNSIGNED:
                a, b = _unsigned(a, op.operands[0].type), _unsigned(b, op.operands[0].type)
            return [np.asarray(COMPARE[op.attributes["comparison_predicate"]](a, b), bool)]
        if name == "exti":
            source = op.operands[0].type
            value = args[0] if op.attributes["signedness"] is ir.Signedness.SIGNED else _unsigned(args[0], source)
            return [_wrap(value, out)]
        if name == "trunci":
            return [_wrap(args[0], out)]
        if name in ("addf", "subf", "mulf"):
            a, b = args
            return [self._typed(a + b if name == "addf" else a - b if name == "subf" else a * b, out)]
        if name == "iota":
            return [np.arange(out.shape[0], dtype=np.int64)]
        if name == "select":
            return [np.where(args[0], args[1], args[2])]
        if name in ("reshape", "broadcast"):
            reshaped = (lambda a: a.reshape(out.shape)) if name == "reshape" else \
                (lambda a: np.broadcast_to(a, out.shape).copy())
            if isinstance(args[0], tuple):  # a pointer tile
                return [(args[0][0], reshaped(args[0][1]))]
            return [reshaped(args[0])]
        if name == "offset":
            buffer, offsets = args[0]
            return [(buffer, offsets + args[1])]
        if name == "extract":
            source, indices = args[0], [int(i) for i in args[1:]]
            cut = tuple(slice(i * n, (i + 1) * n) for i, n in zip(indices, out.shape))
            assert all(s.stop <= d for s, d in zip(cut, source.shape)), f"extract outside the tile: {cut}"
            return [source[cut].copy()]
        if name == "cat":
            return [np.concatenate(args, axis=op.attributes["dim"])]
        if name == "if":
            taken = op.regions[0 if bool(args[0]) else 1]
            return self._block(taken.block, dict(values)) if taken.blocks else []
        if name == "make_tensor_view":
            return [self._tensor_view(op, values)]
        if name in ("make_partition_view", "make_strided_view"):
            tile = out.tile_shape
            steps = tile if name == "make_partition_view" else out.traversal_strides
            assert out.dim_map == tuple(range(len(tile))), "dim_map other than the identity"
            padding = PADDING[out.padding] if out.padding is not None else None
            return [dict(args[0], tile=tile, steps=steps, padding=padding)]
        if name == "load_view_tko":
            view, index = values[op.operand("view")], [int(values[v]) for v in op.group("index")]
            return [self._view_load(view, index, out), None]
        if name == "store_view_tko":
            tile, view = values[op.operand("tile")], values[op.operand("view")]
            self._view_store(view, [int(values[v]) for v in op.group("index")], tile)
            return [None]
        if name == "load_ptr_tko":
            return [self._pointer_load(op, values, out), None]
        raise Unsupported(f"the reference evaluator does not know {name}")

    def _typed(self, values: Any, t: Any) -> np.ndarray:
        element = _element(t)
        if element.name in FLOAT:
            return np.asarray(values, dtype=FLOAT[element.name])
        if element.name == "i1":
            return np.asarray(values, dtype=bool)
        return _wrap(values, t)

    def _tensor_view(self, op: ir.Operation, values: dict[ir.Value, Any]) -> dict[str, Any]:
        vtype = op.results[0].type
        buffer, base = values[op.operand("base")]
        dynamic_shape = iter(int(values[v]) for v in op.group("dynamicShape"))
        dynamic_strides = iter(int(values[v]) for v in op.group("dynamicStrides"))
        shape = [next(dynamic_shape) if d is None else d for d in vtype.shape]
        strides = [next(dynamic_strides) if s is None else s for s in vtype.strides]
        return {"buffer": buffer, "base": int(base), "shape": shape, "strides": strides,
                "element": vtype.element}

    def _view_elements(self, view: dict[str, Any], index: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """(flat offsets, inside-the-tensor mask) of the tile at ``index``."""
        starts = []
        for i, step, dim in zip(index, view["steps"], view["shape"]):
            start = i * step
            # Tile IR: a view is indexed only inside its index space
            assert 0 <= start < dim, f"view index {list(index)} outside the index space of {view['shape']}"
            starts.append(start)
        grids = np.meshgrid(*[np.arange(n) + s for n, s in zip(view["tile"], starts)], indexing="ij")
        inside = np.ones(view["tile"], bool)
        offsets = np.full(view["tile"], view["base"], np.int64)
        for grid, dim, stride in zip(grids, view["shape"], view["strides"]):
            inside &= grid < dim
            offsets += grid * stride
        return offsets, inside

    def _view_load(self, view: dict[str, Any], index: Sequence[int], out: Any) -> np.ndarray:
        offsets, inside = self._view_elements(view, index)
        data = self.buffers[view["buffer"]]
        fill = view["padding"] if view["padding"] is not None else 0
        picked = data[np.where(inside, offsets, 0)]
        return np.where(inside, picked, np.asarray(fill).astype(data.dtype)).astype(data.dtype)

    def _view_store(self, view: dict[str, Any], index: Sequence[int], tile: np.ndarray) -> None:
        offsets, inside = self._view_elements(view, index)
        data = self.buffers[view["buffer"]]
        data[offsets[inside]] = np.asarray(tile)[inside].astype(data.dtype)

    def _pointer_load(self, op: ir.Operation, values: dict[ir.Value, Any], out: Any) -> np.ndarray:
        buffer, offsets = values[op.operand("source")]
        mask_value = op.operand("mask")
        mask = np.ones(out.shape, bool) if mask_value is None else values[mask_value]
        padding_value = op.operand("paddingValue")
        data = self.buffers[buffer]
        fill = np.zeros(out.shape, data.dtype) if padding_value is None else values[padding_value]
        assert np.all((offsets[mask] >= 0) & (offsets[mask] < data.size)), "a masked-in pointer outside the buffer"
        return np.where(mask, data[np.where(mask, offsets, 0)], fill).astype(data.dtype)


def evaluate(kernel: KernelIR, module: ir.Module, grid: Sequence[int], tensors: Mapping[str, np.ndarray],
             scalars: Mapping[str, Any] | None = None) -> dict[str, np.ndarray]:
    """Every tensor after running ``module`` (lowered from ``kernel``) over ``grid``."""
    return Evaluator(kernel, module, tensors, scalars).run(grid)
