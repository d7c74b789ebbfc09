"""Type constraints named in the op table: a predicate and a phrase for error messages."""

from __future__ import annotations

from typing import Callable

from ._types import (
    BF16, F16, F32, F4E2M1FN, F64, F8E4M3FN, F8E5M2, F8E8M0FNU, I1, I32, I4, I64, I8, TF32, GatherScatterViewType, PartitionViewType, PointerType, ScalarType,
    StridedViewType, TensorViewType, TiledView, TileType, TokenType, Type,
)


def _tile_of(pred: Callable[[object], bool]) -> Callable[[Type], bool]:
    return lambda t: isinstance(t, TileType) and pred(t.element)


def _scalar_of(pred: Callable[[object], bool]) -> Callable[[Type], bool]:
    return lambda t: isinstance(t, TileType) and t.rank == 0 and pred(t.element)


def _is_float(e: object) -> bool:
    return isinstance(e, ScalarType) and e.is_float


def _is_int(e: object) -> bool:
    return isinstance(e, ScalarType) and e.is_int


CONSTRAINTS: dict[str, tuple[Callable[[Type], bool], str]] = {
    "any": (lambda t: True, "any type"),
    "tile": (lambda t: isinstance(t, TileType), "a tile"),
    "number_tile": (_tile_of(lambda e: isinstance(e, ScalarType) and e != I4), "a tile of numbers"),
    "float_tile": (_tile_of(_is_float), "a tile of floats"),
    "int_tile": (_tile_of(lambda e: _is_int(e) and e != I4), "a tile of integers"),
    "int4_tile": (_tile_of(_is_int), "a tile of integers (i4 included)"),
    "base_float_tile": (_tile_of(lambda e: e in (F16, BF16, F32, F64)), "a tile of f16, bf16, f32 or f64"),
    "mma_operand": (_tile_of(lambda e: e in (F16, BF16, F32, F64, TF32, F8E4M3FN, F8E5M2)),
                    "a tile of f16, bf16, f32, f64, tf32, f8E4M3FN or f8E5M2"),
    "mma_result": (_tile_of(lambda e: e in (F16, F32, F64)), "a tile of f16, f32 or f64"),
    "mma_scaled_operand": (_tile_of(lambda e: e in (F8E4M3FN, F8E5M2, F4E2M1FN)),
                           "a tile of f8E4M3FN, f8E5M2 or f4E2M1FN"),
    "mma_scale": (_tile_of(lambda e: e in (F8E4M3FN, F8E8M0FNU)), "a tile of f8E4M3FN or f8E8M0FNU"),
    "f32_tile": (_tile_of(lambda e: e == F32), "a tile of f32"),
    "number4_tile": (_tile_of(lambda e: isinstance(e, ScalarType)), "a tile of numbers"),
    "i1_tile": (_tile_of(lambda e: e == I1), "a tile of i1"),
    "i8_tile": (_tile_of(lambda e: e == I8), "a tile of i8"),
    "i32_tile": (_tile_of(lambda e: e == I32), "a tile of i32"),
    "i64_tile": (_tile_of(lambda e: e == I64), "a tile of i64"),
    "ptr_tile": (_tile_of(lambda e: isinstance(e, PointerType)), "a tile of pointers"),
    "scalar_int": (_scalar_of(_is_int), "a rank-0 integer tile"),
    "scalar_i32": (_scalar_of(lambda e: e == I32), "a rank-0 i32 tile (tile<i32>)"),
    "scalar_i1": (_scalar_of(lambda e: e == I1), "a rank-0 i1 tile (tile<i1>)"),
    "scalar_ptr": (_scalar_of(lambda e: isinstance(e, PointerType)), "a rank-0 pointer tile (tile<ptr<T>>)"),
    "token": (lambda t: isinstance(t, TokenType), "a token"),
    "tensor_view": (lambda t: isinstance(t, TensorViewType), "a tensor_view"),
    "view": (lambda t: isinstance(t, TiledView), "a partition, strided or gather/scatter view"),
    "partition_view": (lambda t: isinstance(t, PartitionViewType), "a partition_view"),
    "strided_view": (lambda t: isinstance(t, StridedViewType), "a strided_view"),
    "gather_view": (lambda t: isinstance(t, GatherScatterViewType), "a gather_scatter_view"),
}


def satisfies(constraint: str, t: Type) -> bool:
    return CONSTRAINTS[constraint][0](t)


def describe(constraint: str) -> str:
    return CONSTRAINTS[constraint][1]
