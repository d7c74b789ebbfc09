"""Matrix multiply-accumulate on tiles (tensor cores on the GPU)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

import cutile_ir as ir
from cutile_compiler import _dtypes as dt
from cutile_compiler._ir import Operation
from cutile_compiler._opdefs._base import EvalContext, Op, OpDef, RuleError, register
from cutile_compiler._opdefs.elementwise import numpy_dtype, tile_operand
from cutile_compiler._types import KType

if TYPE_CHECKING:
    from cutile_compiler._lowering import Lowering

# (input dtype, accumulator dtype) pairs the tensor cores take.
MMA_TYPES: frozenset[tuple[dt.DType, dt.DType]] = frozenset({
    (dt.f16, dt.f16), (dt.f16, dt.f32), (dt.bf16, dt.f32), (dt.tf32, dt.f32), (dt.f32, dt.f32),
    (dt.f64, dt.f64), (dt.f8e4m3fn, dt.f32), (dt.f8e5m2, dt.f32), (dt.f8e4m3fn, dt.f16),
    (dt.f8e5m2, dt.f16), (dt.i8, dt.i32), (dt.u8, dt.i32),
})


def _round_to_tf32(values: Any) -> Any:
    """float32 values with their mantissa rounded to tf32's 10 bits (nearest, ties away)."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounded = (bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)
    return rounded.view(np.float32)


class Mma(OpDef):
    """``mma(a, b, acc)``: acc + a @ b, for (M, K) x (K, N) tiles or batches of them.

    The products of low-precision inputs are exact in the accumulator; the
    interpreter sums them in float64 and rounds once to the accumulator dtype.
    """

    def infer(self, operand_types: Sequence[KType], attrs: dict[str, Any]) -> tuple[KType, ...]:
        a, b, acc = (tile_operand(operand_types, i, "mma") for i in range(3))
        if a.dtype is not b.dtype:  # Tile IR's mmaf/mmai take one input type (fp8 kinds do not mix)
            raise RuleError(f"mma: a and b must have the same dtype, got {a.dtype} and {b.dtype}")
        if (a.dtype, acc.dtype) not in MMA_TYPES:
            accepted = ", ".join(sorted(f"{i}->{o}" for i, o in MMA_TYPES))
            raise RuleError(f"mma: inputs {a.dtype} with accumulator {acc.dtype} are not supported (supported: {accepted})")
        if not (a.rank == b.rank == acc.rank and a.rank in (2, 3)):
            raise RuleError(f"mma: a, b and acc must all be 2-D (or 3-D batches), got {a}, {b}, {acc}")
        *batch_a, m, k = a.shape
        *batch_b, k2, n = b.shape
        *batch_c, m2, n2 = acc.shape
        if k != k2 or m != m2 or n != n2 or not batch_a == batch_b == batch_c:
            raise RuleError(
                f"mma: shapes do not chain: a {list(a.shape)} @ b {list(b.shape)} + acc {list(acc.shape)}"
            )
        return (acc,)

    def evaluate(self, ctx: EvalContext, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        a, b, acc = args
        input_type = op.operands[0].type
        if getattr(input_type, "dtype", None) is dt.tf32:
            a, b = _round_to_tf32(a), _round_to_tf32(b)
        if a.dtype.kind in "iu":
            product = np.matmul(a.astype(np.int64), b.astype(np.int64)) + acc
        else:
            product = np.matmul(a.astype(np.float64), b.astype(np.float64)) + acc.astype(np.float64)
        acc_type = op.results[0].type
        with np.errstate(all="ignore"):
            return (product.astype(numpy_dtype(acc_type.dtype)),)  # type: ignore[attr-defined]

    def lower(self, ctx: Lowering, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        a_type = op.operands[0].type
        b_type = op.operands[1].type
        if a_type.dtype.is_integer:  # type: ignore[attr-defined]
            lhs = a_type.dtype.signedness  # type: ignore[attr-defined]
            rhs = b_type.dtype.signedness  # type: ignore[attr-defined]
            return (ctx.builder.mmai(*args, signedness_lhs=lhs, signedness_rhs=rhs),)
        return (ctx.builder.mmaf(*args),)


#: Block-scaled MMA (Tile IR ``mmaf_scaled``, sm_100+): element dtype -> scale dtype ->
#: the block sizes B it takes (B elements along K share one scale); the accumulator is f32
MMA_SCALED_TYPES: dict[dt.DType, dict[dt.DType, tuple[int, ...]]] = {
    dt.f8e4m3fn: {dt.f8e8m0fnu: (32,)},
    dt.f8e5m2: {dt.f8e8m0fnu: (32,)},
    dt.f4e2m1fn: {dt.f8e8m0fnu: (16, 32), dt.f8e4m3fn: (16,)},
}
#: the first SM with block-scaled MMA
MMA_SCALED_MIN_SM = 100


def _decoded(values: Any) -> Any:
    """Float64 values of an fp8/fp4 array (ml_dtypes decodes each format exactly)."""
    return np.asarray(values).astype(np.float64)


class MmaScaled(OpDef):
    """``mma_scaled(x, y, acc, x_scale, y_scale)``: acc + (x * x_scale) @ (y * y_scale),
    each scale shared by a block of B consecutive elements along K (x_scale is
    (M, K / B), y_scale (K / B, N)), for 2-D tiles or 3-D batches.

    The interpreter decodes every element and scale exactly, multiplies and sums in
    float64 and rounds once to f32 (the tensor cores sum in f32 in an order of theirs).
    """

    def infer(self, operand_types: Sequence[KType], attrs: dict[str, Any]) -> tuple[KType, ...]:
        x, y, acc, x_scale, y_scale = (tile_operand(operand_types, i, "mma_scaled") for i in range(5))
        names = ("x", "y", "acc", "x_scale", "y_scale")
        tiles = (x, y, acc, x_scale, y_scale)
        for name, tile in zip(names, tiles):
            if tile.rank != x.rank or tile.rank not in (2, 3):
                raise RuleError(f"mma_scaled: x, y, acc and the scales must all be 2-D (or 3-D batches of one "
                                f"batch shape), got {name} {tile}")
        if x.dtype is not y.dtype:
            raise RuleError(f"mma_scaled: x and y must have the same dtype, got {x.dtype} and {y.dtype}")
        if x.dtype not in MMA_SCALED_TYPES:
            raise RuleError(f"mma_scaled: x and y must be {', '.join(map(str, MMA_SCALED_TYPES))}, got {x.dtype}")
        if x_scale.dtype is not y_scale.dtype:
            raise RuleError(f"mma_scaled: x_scale and y_scale must have the same dtype, got {x_scale.dtype} and "
                            f"{y_scale.dtype}")
        sizes = MMA_SCALED_TYPES[x.dtype].get(x_scale.dtype)
        if sizes is None:
            raise RuleError(f"mma_scaled: {x.dtype} elements take scales of "
                            f"{', '.join(map(str, MMA_SCALED_TYPES[x.dtype]))}, got {x_scale.dtype}")
        if acc.dtype is not dt.f32:
            raise RuleError(f"mma_scaled: the accumulator must be f32, got {acc.dtype}")
        *batch, m, k = x.shape
        *batch_y, k2, n = y.shape
        if k != k2 or tuple(acc.shape) != (*batch, m, n) or batch != batch_y:
            raise RuleError(f"mma_scaled: shapes do not chain: x {list(x.shape)} @ y {list(y.shape)} + acc "
                            f"{list(acc.shape)}")
        for name, scale, expected, k_axis in (("x_scale", x_scale, x.shape, -1), ("y_scale", y_scale, y.shape, -2)):
            blocks = scale.shape[k_axis]
            outside = [d for i, d in enumerate(scale.shape) if i != scale.rank + k_axis]
            if outside != [d for i, d in enumerate(expected) if i != len(expected) + k_axis] \
                    or k % blocks or k // blocks not in sizes:
                raise RuleError(f"mma_scaled: {name} {list(scale.shape)} must match its operand "
                                f"{list(expected)} but along K, where K / {name}'s extent is the block size B, one of "
                                f"{', '.join(map(str, sizes))} for {x.dtype} with {x_scale.dtype} scales")
        return (acc,)

    def evaluate(self, ctx: EvalContext, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        x, y, acc, x_scale, y_scale = args
        k = x.shape[-1]
        scaled_x = _decoded(x) * np.repeat(_decoded(x_scale), k // x_scale.shape[-1], axis=-1)
        scaled_y = _decoded(y) * np.repeat(_decoded(y_scale), k // y_scale.shape[-2], axis=-2)
        with np.errstate(all="ignore"):
            product = np.matmul(scaled_x, scaled_y) + acc.astype(np.float64)
            return (product.astype(np.float32),)

    def lower(self, ctx: Lowering, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        if ctx.arch is not None and ir.parse_arch(ctx.arch).sm < MMA_SCALED_MIN_SM:
            raise ctx.error(op, f"mma_scaled needs sm_{MMA_SCALED_MIN_SM} or newer (block-scaled MMA); {ctx.arch} "
                                f"has no such instruction: use mma on scaled f16/bf16/fp8 tiles there")
        if ctx.version < ir.V13_3:
            raise ctx.error(op, f"mma_scaled needs Tile IR bytecode 13.3 or newer; this compile writes {ctx.version}")
        x, y, acc, x_scale, y_scale = args
        return (ctx.builder.mmaf_scaled(x, y, acc, x_scale, y_scale),)


class MatmulOp(Op):
    """Matrix multiply-accumulate."""

    MMA = Mma()
    MMA_SCALED = MmaScaled()


register(MatmulOp)
