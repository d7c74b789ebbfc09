"""Types of values in the typed kernel IR.

- `TileType`: an immutable array value living in registers, with a static shape
  (rank 0 is a scalar).
- `TensorType`: a kernel parameter in global memory: dtype, shape (static ints,
  or None for a dimension known only at run time), whether the kernel may write
  it, and for a writable tensor the shape of the tile each block owns.
- `PartitionType`: a tensor viewed as a grid of equal tiles.
"""

from __future__ import annotations

from dataclasses import dataclass

from cutile_compiler._dtypes import DType


class KType:
    """Base of the kernel IR's value types."""

    __slots__ = ()


@dataclass(frozen=True)
class TileType(KType):
    """The type of a tile: its dtype and static shape (``()``: a scalar)."""

    dtype: DType
    shape: tuple[int, ...] = ()

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def is_scalar(self) -> bool:
        return not self.shape

    @property
    def size(self) -> int:
        count = 1
        for extent in self.shape:
            count *= extent
        return count

    def with_dtype(self, dtype: DType) -> TileType:
        return TileType(dtype, self.shape)

    def with_shape(self, shape: tuple[int, ...]) -> TileType:
        return TileType(self.dtype, shape)

    def __str__(self) -> str:
        if not self.shape:
            return str(self.dtype)
        return f"tile<{'x'.join(map(str, self.shape))}x{self.dtype}>"


@dataclass(frozen=True)
class TensorType(KType):
    dtype: DType
    shape: tuple[int | None, ...]
    mutable: bool = False
    tile_shape: tuple[int, ...] | None = None  # the block's own tile, for Mut tensors
    #: a mapped partition's schedule: per axis its group size, 0 for an owned axis (see `_mapped`)
    map_shape: tuple[int, ...] | None = None

    @property
    def rank(self) -> int:
        return len(self.shape)

    def __str__(self) -> str:
        dims = "x".join("?" if d is None else str(d) for d in self.shape)
        kind = "mut " if self.mutable else ""
        tile = f", tile {list(self.tile_shape)}" if self.tile_shape else ""
        mapped = f", map {list(self.map_shape)}" if self.map_shape is not None else ""
        return f"{kind}tensor<{dims}x{self.dtype}{tile}{mapped}>"


@dataclass(frozen=True)
class PartitionType(KType):
    tensor: TensorType
    tile_shape: tuple[int, ...]
    padding: str = "zero"

    @property
    def tile(self) -> TileType:
        return TileType(self.tensor.dtype, self.tile_shape)

    def __str__(self) -> str:
        return f"partition<{self.tensor}, tile {list(self.tile_shape)}>"


def broadcast_shapes(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...] | None:
    """numpy broadcasting of two static shapes; None if they do not broadcast."""
    result: list[int] = []
    for index in range(max(len(a), len(b))):
        da = a[len(a) - 1 - index] if index < len(a) else 1
        db = b[len(b) - 1 - index] if index < len(b) else 1
        if da != db and da != 1 and db != 1:
            return None
        result.append(max(da, db))
    return tuple(reversed(result))


def is_power_of_two(value: int) -> bool:
    """Whether ``value`` is 1, 2, 4, 8...: the sizes a tile dimension may have."""
    return value > 0 and value & (value - 1) == 0


#: The most elements one tile may hold (tileiras refuses larger tiles).
MAX_TILE_ELEMENTS = 1 << 24


def tile_shape_problem(shape: tuple[int, ...]) -> str | None:
    """What makes ``shape`` an invalid tile shape (None when it is valid): the rule of
    every tile, partition tile and block tile. Dimensions are positive powers of two
    and a tile holds at most `MAX_TILE_ELEMENTS` elements."""
    if not all(is_power_of_two(d) for d in shape):
        return f"tile dimensions must be powers of two, got {list(shape)}"
    count = 1
    for extent in shape:
        count *= extent
    if count > MAX_TILE_ELEMENTS:
        return f"a tile holds at most 2**24 = {MAX_TILE_ELEMENTS} elements, {list(shape)} has {count}"
    return None
