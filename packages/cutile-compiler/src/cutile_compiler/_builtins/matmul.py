"""The DSL functions of matrix products: mma, matmul (and ``@``) and mma_scaled."""

from __future__ import annotations

import ast
import math
from typing import Any, TYPE_CHECKING

from cutile_compiler import _dtypes as dt
from cutile_compiler._builtins._base import _tile, builtin
from cutile_compiler._ir import Value
from cutile_compiler._opdefs import MatmulOp, ShapeOp
from cutile_compiler._types import broadcast_shapes

if TYPE_CHECKING:
    from cutile_compiler._frontend import FrontEnd


def _batched(fe: FrontEnd, node: ast.AST, operands: list[Value], shapes: list[tuple[int, ...]]) -> list[Value]:
    """``operands`` broadcast to ``shapes`` (their batch dimensions) and, past one batch
    dimension, flattened to one (Tile IR's mma takes 2-D tiles or 3-D batches)."""
    result = []
    for value, shape in zip(operands, shapes):
        value = fe.broadcast_to(value, shape, node)
        if len(shape) > 3:
            value = fe.op(ShapeOp.RESHAPE, [value], {"shape": (math.prod(shape[:-2]), *shape[-2:])}, node=node).result
        result.append(value)
    return result


def _batch_shape(fe: FrontEnd, node: ast.AST, what: str, *tiles: Value) -> tuple[int, ...]:
    batches = [t.type.shape[:-2] for t in tiles]  # type: ignore[attr-defined]
    merged: tuple[int, ...] = ()
    for batch in batches:
        found = broadcast_shapes(merged, batch)
        if found is None:
            raise fe.type_error(f"{what}: the batch dimensions {', '.join(str(list(b)) for b in batches)} do not "
                                f"broadcast together", node)
        merged = found
    return merged


def _matrix(fe: FrontEnd, value: Value, what: str, node: ast.AST) -> Value:
    if value.type.rank < 2:  # type: ignore[attr-defined]
        raise fe.type_error(f"{what} must be a matrix (2-D) or a batch of them, got {value.type}", node)
    return value


def _mma(fe: FrontEnd, node: ast.AST, a: Value, b: Value, acc: Value) -> Value:
    """acc + a @ b with a's and b's batch dimensions broadcast to acc's."""
    batch: tuple[int, ...] = acc.type.shape[:-2]  # type: ignore[attr-defined]
    a_shape: tuple[int, ...] = a.type.shape  # type: ignore[attr-defined]
    b_shape: tuple[int, ...] = b.type.shape  # type: ignore[attr-defined]
    acc_shape: tuple[int, ...] = acc.type.shape  # type: ignore[attr-defined]
    if a.type.rank == b.type.rank == acc.type.rank and a_shape[:-2] == b_shape[:-2] == batch and len(batch) <= 1:  # type: ignore[attr-defined]
        return fe.op(MatmulOp.MMA, [a, b, acc], node=node).result  # (the op's own rule checks the rest)
    x, y, z = _batched(fe, node, [a, b, acc], [batch + a_shape[-2:], batch + b_shape[-2:], acc_shape])
    result = fe.op(MatmulOp.MMA, [x, y, z], node=node).result
    if len(batch) > 1:
        result = fe.op(ShapeOp.RESHAPE, [result], {"shape": acc_shape}, node=node).result
    return result


@builtin
def mma(fe: FrontEnd, node: ast.Call, a: Any, b: Any, acc: Any) -> Value:
    """acc + a @ b on the tensor cores: (M, K) x (K, N) + (M, N), or batches of them (a's
    and b's batch dimensions broadcast to acc's)."""
    x, y, z = (_matrix(fe, _tile(fe, v, node, f"mma's {n}"), f"mma's {n}", node)
               for v, n in ((a, "a"), (b, "b"), (acc, "acc")))
    if _batch_shape(fe, node, "mma", x, y, z) != z.type.shape[:-2]:  # type: ignore[attr-defined]
        raise fe.type_error(f"mma: the batch dimensions of a {list(x.type.shape)} and b {list(y.type.shape)} do not "  # type: ignore[attr-defined]
                            f"broadcast to acc's {list(z.type.shape)}", node)  # type: ignore[attr-defined]
    return _mma(fe, node, x, y, z)


def matmul_tiles(fe: FrontEnd, node: ast.AST, a: Any, b: Any) -> Value:
    """a @ b (`matmul` and the ``@`` operator)."""
    x = _matrix(fe, _tile(fe, a, node, "matmul's a"), "matmul's a", node)
    y = _matrix(fe, _tile(fe, b, node, "matmul's b"), "matmul's b", node)
    in_type = x.type.dtype  # type: ignore[attr-defined]
    acc_dtype = dt.f64 if in_type is dt.f64 else dt.i32 if in_type.is_integer else dt.f32
    batch = _batch_shape(fe, node, "matmul", x, y)
    shape = batch + x.type.shape[-2:-1] + y.type.shape[-1:]  # type: ignore[attr-defined]
    zero = fe.constant(0, acc_dtype, shape, node)
    return _mma(fe, node, x, y, zero)


@builtin
def matmul(fe: FrontEnd, node: ast.Call, a: Any, b: Any) -> Value:
    """a @ b, accumulated in f32 (f64 for f64 inputs, i32 for 8-bit integers); batch
    dimensions broadcast (``[1, M, K] @ [B, K, N]``). ``a @ b`` is the same."""
    return matmul_tiles(fe, node, a, b)


@builtin
def mma_scaled(fe: FrontEnd, node: ast.Call, x: Any, x_scale: Any, y: Any, y_scale: Any, acc: Any) -> Value:
    """acc + (x * x_scale) @ (y * y_scale), block-scaled on the tensor cores (sm_100+):
    x (M, K) and y (K, N) of f8e4m3fn, f8e5m2 or f4e2m1fn, x_scale (M, K / B) and
    y_scale (K / B, N) of f8e8m0fnu (or f8e4m3fn for f4e2m1fn), each scale shared by B
    consecutive elements along K (B = 32 for fp8; 16 or 32 for fp4 with f8e8m0fnu
    scales, 16 with f8e4m3fn ones), acc (M, N) f32; or 3-D batches of these."""
    names = ("x", "x_scale", "y", "y_scale", "acc")
    a, a_scale, b, b_scale, c = (_tile(fe, v, node, f"mma_scaled's {n}") for n, v in zip(names, (x, x_scale, y, y_scale, acc)))
    return fe.op(MatmulOp.MMA_SCALED, [a, b, c, a_scale, b_scale], node=node).result
