"""Matrix multiply-accumulate on tiles (tensor cores on the GPU)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

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


class MatmulOp(Op):
    """Matrix multiply-accumulate."""

    MMA = Mma()


register(MatmulOp)
