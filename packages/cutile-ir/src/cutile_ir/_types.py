"""The types of Tile IR: element types, pointers, tiles, views, tokens and function types.

Every type is an immutable, hashable dataclass; ``str(t)`` gives its MLIR spelling as
``tileirdisasm`` prints it inside an op (``tile<4x8xf32>``), ``t.mlir()`` the
fully qualified one (``!cuda_tile.tile<4x8xf32>``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Union

from ._errors import IRTypeError
from ._versions import V13_1, V13_2, V13_3, V13_4, Version

#: Dynamic extent of a tensor view's shape or stride (stored as INT64_MIN in bytecode).
DYNAMIC: None = None


class PaddingValue(enum.IntEnum):
    """Value read for out-of-bounds elements of a view."""

    ZERO = 0
    NEG_ZERO = 1
    NAN = 2
    POS_INF = 3
    NEG_INF = 4

    @property
    def text(self) -> str:
        # the MLIR keyword is the lower-case name, the rule of the attribute enums (_attributes._TextEnum)
        return self.name.lower()


class Type:
    """Base class of every Tile IR type."""

    __slots__ = ()

    def mlir(self) -> str:
        """The fully qualified MLIR spelling (``!cuda_tile.…`` for dialect types)."""
        return "!cuda_tile." + str(self)

    @property
    def since(self) -> Version:
        """The first bytecode version that can encode this type (parts included)."""
        return V13_1


@dataclass(frozen=True, slots=True)
class ScalarType(Type):
    """An element type: an integer (signless) or floating-point type of fixed width."""

    name: str
    bitwidth: int
    is_float: bool
    tag: int
    first: Version

    def __str__(self) -> str:
        return self.name

    def mlir(self) -> str:
        return self.name

    @property
    def since(self) -> Version:
        return self.first

    @property
    def is_int(self) -> bool:
        return not self.is_float

    @property
    def nbytes(self) -> int:
        """Bytes per element in a dense constant (sub-byte types take a byte; tf32 three)."""
        return (self.bitwidth + 7) // 8

    def __repr__(self) -> str:
        return self.name.upper() if self.name != "bf16" else "BF16"


I1 = ScalarType("i1", 1, False, 0, V13_1)
I4 = ScalarType("i4", 4, False, 22, V13_3)
I8 = ScalarType("i8", 8, False, 1, V13_1)
I16 = ScalarType("i16", 16, False, 2, V13_1)
I32 = ScalarType("i32", 32, False, 3, V13_1)
I64 = ScalarType("i64", 64, False, 4, V13_1)
F16 = ScalarType("f16", 16, True, 5, V13_1)
BF16 = ScalarType("bf16", 16, True, 6, V13_1)
F32 = ScalarType("f32", 32, True, 7, V13_1)
TF32 = ScalarType("tf32", 19, True, 8, V13_1)
F64 = ScalarType("f64", 64, True, 9, V13_1)
F8E4M3FN = ScalarType("f8E4M3FN", 8, True, 10, V13_1)
F8E5M2 = ScalarType("f8E5M2", 8, True, 11, V13_1)
F8E8M0FNU = ScalarType("f8E8M0FNU", 8, True, 18, V13_2)
F4E2M1FN = ScalarType("f4E2M1FN", 4, True, 19, V13_3)
F8E5M3FNU = ScalarType("f8E5M3FNU", 8, True, 130, V13_4)

#: Every element type, in bytecode tag order.
SCALAR_TYPES: tuple[ScalarType, ...] = (
    I1, I8, I16, I32, I64, F16, BF16, F32, TF32, F64, F8E4M3FN, F8E5M2,
    F8E8M0FNU, F4E2M1FN, I4, F8E5M3FNU,
)
SCALAR_BY_TAG: dict[int, ScalarType] = {t.tag: t for t in SCALAR_TYPES}


@dataclass(frozen=True, slots=True)
class FloatFormat:
    """The bit fields of a float element type. The one description of each format: the
    decimal printer (``_apfloat``) reads its precision and minimum exponent, the element
    codec (``_attributes``) the bit fields of the small formats."""

    exponent_bits: int
    mantissa_bits: int  # stored fraction bits, without the hidden bit
    bias: int
    has_inf: bool
    signed: bool = True

    @property
    def width(self) -> int:
        """Bits of one value (sign, exponent, mantissa): the ScalarType's bitwidth."""
        return int(self.signed) + self.exponent_bits + self.mantissa_bits

    @property
    def precision(self) -> int:
        """Significand bits including the hidden bit (APFloat's ``precision``)."""
        return self.mantissa_bits + 1

    @property
    def min_exponent(self) -> int:
        """Exponent of the smallest normal value (APFloat's ``minExponent``). Without
        mantissa bits there are no subnormals, so exponent field 0 is itself a normal
        value (f8E8M0FNU: 2**-127)."""
        return -self.bias if self.mantissa_bits == 0 else 1 - self.bias


#: The format of every float element type, by name.
FLOAT_FORMATS: dict[str, FloatFormat] = {
    "f16": FloatFormat(5, 10, 15, True),
    "bf16": FloatFormat(8, 7, 127, True),
    "f32": FloatFormat(8, 23, 127, True),
    "tf32": FloatFormat(8, 10, 127, True),
    "f64": FloatFormat(11, 52, 1023, True),
    "f8E4M3FN": FloatFormat(4, 3, 7, False),
    "f8E5M2": FloatFormat(5, 2, 15, True),
    "f8E8M0FNU": FloatFormat(8, 0, 127, False, signed=False),
    "f4E2M1FN": FloatFormat(2, 1, 1, False),
    "f8E5M3FNU": FloatFormat(5, 3, 15, False, signed=False),
}
assert {t.name: t.bitwidth for t in SCALAR_TYPES if t.is_float} == {n: f.width for n, f in FLOAT_FORMATS.items()}


#: The pointer attributes of bytecode 13.4 (``ptr<f32, <none>>``); tileiras 13.4 knows only "none".
PTR_ATTRS = ("none",)


def _check_ptr_attr(a: str | None) -> None:
    if a is not None and a not in PTR_ATTRS:
        raise IRTypeError(f"unknown pointer attribute {a!r}; known: {', '.join(PTR_ATTRS)}")


@dataclass(frozen=True, slots=True)
class PointerType(Type):
    """A pointer to global memory holding elements of ``pointee`` (``attr``: 13.4's pointer attribute)."""

    pointee: ScalarType
    attr: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.pointee, ScalarType):
            raise IRTypeError(f"pointer pointee must be an element type, found {self.pointee!r}")
        _check_ptr_attr(self.attr)

    def __str__(self) -> str:
        if self.attr is not None:
            return f"ptr<{self.pointee}, <{self.attr}>>"
        return f"ptr<{self.pointee}>"

    @property
    def since(self) -> Version:
        return max(self.pointee.since, V13_4) if self.attr is not None else self.pointee.since


Element = Union[ScalarType, PointerType]


def _dims(shape: tuple[int, ...]) -> str:
    return "".join(f"{d}x" for d in shape)


def _check_tile_shape(what: str, shape: tuple[int, ...]) -> tuple[int, ...]:
    shape = tuple(int(d) for d in shape)
    if any(d <= 0 for d in shape):
        raise IRTypeError(f"{what} dimensions must be positive, found {list(shape)}")
    return shape


@dataclass(frozen=True, slots=True)
class TileType(Type):
    """An immutable multi-dimensional array of ``element`` values; rank 0 is a scalar."""

    shape: tuple[int, ...]
    element: Element

    def __post_init__(self) -> None:
        if not isinstance(self.element, (ScalarType, PointerType)):
            raise IRTypeError(f"tile element must be an element or pointer type, found {self.element!r}")
        object.__setattr__(self, "shape", _check_tile_shape("tile", self.shape))

    def __str__(self) -> str:
        return f"tile<{_dims(self.shape)}{self.element}>"

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def since(self) -> Version:
        return self.element.since


def _dyn(x: int | None) -> str:
    return "?" if x is None else str(x)


@dataclass(frozen=True, slots=True)
class TensorViewType(Type):
    """A view of global memory as a tensor; ``None`` marks a dynamic extent or stride."""

    element: ScalarType
    shape: tuple[int | None, ...]
    strides: tuple[int | None, ...]
    ptr_attr: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(self.shape))
        object.__setattr__(self, "strides", tuple(self.strides))
        _check_ptr_attr(self.ptr_attr)
        if len(self.shape) != len(self.strides):
            raise IRTypeError(
                f"tensor_view shape and strides must have the same rank, found {len(self.shape)} and {len(self.strides)}"
            )

    def __str__(self) -> str:
        shape = "x".join(_dyn(d) for d in self.shape)
        sep = "x" if self.shape else ""
        strides = ",".join(_dyn(s) for s in self.strides)
        attr = "" if self.ptr_attr is None else f", #cuda_tile.ptr_attr<{self.ptr_attr}>"
        if not self.shape:
            return f"tensor_view<{self.element}{attr}>"
        return f"tensor_view<{shape}{sep}{self.element}, strides=[{strides}]{attr}>"

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def since(self) -> Version:
        return max(self.element.since, V13_4) if self.ptr_attr is not None else self.element.since

    @property
    def num_dynamic_shape(self) -> int:
        return sum(1 for d in self.shape if d is None)

    @property
    def num_dynamic_strides(self) -> int:
        return sum(1 for s in self.strides if s is None)


def _dim_map_suffix(dm: tuple[int, ...]) -> str:
    if dm == tuple(range(len(dm))):
        return ""
    return ", dim_map=[" + ", ".join(str(d) for d in dm) + "]"


def _padding_suffix(p: PaddingValue | None) -> str:
    return "" if p is None else f", padding_value = {p.text}"


class TiledView(Type):
    """Base of the views that cut ``tensor_view`` into tiles of ``tile_shape`` (partition,
    strided, gather/scatter): one index per tile dimension, loads give a ``tile_type``."""

    __slots__ = ()
    tile_shape: tuple[int, ...]
    tensor_view: TensorViewType
    padding: PaddingValue | None

    def _init_tiles(self, what: str) -> None:
        object.__setattr__(self, "tile_shape", _check_tile_shape(f"{what} tile", self.tile_shape))

    def _tile_text(self) -> str:
        return "x".join(str(d) for d in self.tile_shape)

    @property
    def tile_type(self) -> TileType:
        return TileType(self.tile_shape, self.tensor_view.element)

    @property
    def index_rank(self) -> int:
        return len(self.tile_shape)


def _dim_map(dm: tuple[int, ...], rank: int) -> tuple[int, ...]:
    """``dm``, or the identity map when none is given."""
    return tuple(dm) if dm else tuple(range(rank))


@dataclass(frozen=True, slots=True)
class PartitionViewType(TiledView):
    """A tensor view cut into tiles of ``tile_shape``; ``dim_map`` maps tile dims to tensor dims."""

    tile_shape: tuple[int, ...]
    tensor_view: TensorViewType
    dim_map: tuple[int, ...] = ()
    padding: PaddingValue | None = None

    def __post_init__(self) -> None:
        self._init_tiles("partition_view")
        object.__setattr__(self, "dim_map", _dim_map(self.dim_map, len(self.tile_shape)))

    def __str__(self) -> str:
        return (f"partition_view<tile=({self._tile_text()}){_padding_suffix(self.padding)}, "
                f"{self.tensor_view}{_dim_map_suffix(self.dim_map)}>")

    @property
    def since(self) -> Version:
        return self.tensor_view.since


@dataclass(frozen=True, slots=True)
class StridedViewType(TiledView):
    """Tiles of ``tile_shape`` taken every ``traversal_strides`` elements of a tensor view (13.3+)."""

    tile_shape: tuple[int, ...]
    traversal_strides: tuple[int, ...]
    tensor_view: TensorViewType
    dim_map: tuple[int, ...] = ()
    padding: PaddingValue | None = None

    def __post_init__(self) -> None:
        self._init_tiles("strided_view")
        object.__setattr__(self, "traversal_strides", tuple(self.traversal_strides))
        object.__setattr__(self, "dim_map", _dim_map(self.dim_map, len(self.tile_shape)))

    def __str__(self) -> str:
        tr = ",".join(str(d) for d in self.traversal_strides)
        return (f"strided_view<tile=({self._tile_text()}), traversal_strides=[{tr}]{_padding_suffix(self.padding)}, "
                f"{self.tensor_view}{_dim_map_suffix(self.dim_map)}>")

    @property
    def since(self) -> Version:
        return max(V13_3, self.tensor_view.since)


@dataclass(frozen=True, slots=True)
class GatherScatterViewType(TiledView):
    """A view whose ``sparse_dim`` is indexed by a tile of indices (13.3+)."""

    tile_shape: tuple[int, ...]
    tensor_view: TensorViewType
    sparse_dim: int = 0
    padding: PaddingValue | None = None

    def __post_init__(self) -> None:
        self._init_tiles("gather_scatter_view")

    def __str__(self) -> str:
        return (f"gather_scatter_view<tile=({self._tile_text()}){_padding_suffix(self.padding)}, {self.tensor_view}, "
                f"sparse_dim={self.sparse_dim}>")

    @property
    def since(self) -> Version:
        return max(V13_3, self.tensor_view.since)


@dataclass(frozen=True, slots=True)
class TokenType(Type):
    """An ordering token: memory ops take one and return one."""

    def __str__(self) -> str:
        return "token"


TOKEN = TokenType()


@dataclass(frozen=True, slots=True)
class FunctionType(Type):
    """The signature of a function or kernel entry."""

    inputs: tuple[Type, ...]
    results: tuple[Type, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "inputs", tuple(self.inputs))
        object.__setattr__(self, "results", tuple(self.results))

    def __str__(self) -> str:
        ins = ", ".join(t.mlir() for t in self.inputs)
        outs = ", ".join(t.mlir() for t in self.results)
        return f"({ins}) -> ({outs})"

    def mlir(self) -> str:
        return str(self)

    @property
    def since(self) -> Version:
        return max([V13_1, *(t.since for t in self.inputs), *(t.since for t in self.results)])


def tile(shape: tuple[int, ...] | list[int] | int, element: Element) -> TileType:
    """Shorthand: ``tile((128,), F32)``; ``tile((), I32)`` is a scalar tile."""
    if isinstance(shape, int):
        shape = (shape,)
    return TileType(tuple(shape), element)


def scalar(element: Element) -> TileType:
    """A rank-0 tile of ``element``."""
    return TileType((), element)


def ptr(pointee: ScalarType) -> PointerType:
    """Shorthand for ``PointerType(pointee)``."""
    return PointerType(pointee)


def is_pow2(n: int) -> bool:
    return n > 0 and (n & (n - 1)) == 0


__all__ = [
    "BF16", "DYNAMIC", "F16", "F32", "F4E2M1FN", "F64", "F8E4M3FN", "F8E5M2", "F8E5M3FNU",
    "F8E8M0FNU", "FunctionType", "GatherScatterViewType", "I1", "I16", "I32", "I4", "I64", "I8",
    "PaddingValue", "PartitionViewType", "PointerType", "SCALAR_TYPES", "ScalarType",
    "StridedViewType", "TF32", "TOKEN", "TensorViewType", "TileType", "TokenType", "Type",
    "V13_4",
]
