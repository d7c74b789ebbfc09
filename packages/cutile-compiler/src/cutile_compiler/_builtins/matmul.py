"""The DSL functions of matrix products: mma and matmul."""

from __future__ import annotations

import ast
from typing import Any, TYPE_CHECKING

from cutile_compiler import _dtypes as dt
from cutile_compiler._builtins._base import _tile, builtin
from cutile_compiler._ir import Value
from cutile_compiler._opdefs import MatmulOp

if TYPE_CHECKING:
    from cutile_compiler._frontend import FrontEnd


@builtin
def mma(fe: FrontEnd, node: ast.Call, a: Any, b: Any, acc: Any) -> Value:
    """acc + a @ b on the tensor cores: (M, K) x (K, N) + (M, N), or batches of them."""
    x, y, z = (_tile(fe, v, node, f"mma's {n}") for v, n in ((a, "a"), (b, "b"), (acc, "acc")))
    return fe.op(MatmulOp.MMA, [x, y, z], node=node).result


@builtin
def matmul(fe: FrontEnd, node: ast.Call, a: Any, b: Any) -> Value:
    """a @ b, accumulated in f32 (f64 for f64 inputs, i32 for 8-bit integers)."""
    x, y = _tile(fe, a, node, "matmul's a"), _tile(fe, b, node, "matmul's b")
    in_type = x.type.dtype  # type: ignore[attr-defined]
    acc_dtype = dt.f64 if in_type is dt.f64 else dt.i32 if in_type.is_integer else dt.f32
    shape = x.type.shape[:-1] + y.type.shape[-1:]  # type: ignore[attr-defined]
    zero = fe.constant(0, acc_dtype, shape, node)
    return fe.op(MatmulOp.MMA, [x, y, zero], node=node).result
