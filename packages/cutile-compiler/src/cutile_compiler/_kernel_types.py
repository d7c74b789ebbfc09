"""What a kernel's parameters are inside its body, as type checkers see them.

A kernel's annotations (``Tensor[f32, ["B"]]``, ``Mut[...]``, a dtype) are read
by the compiler, not by Python; they are not valid static types. cutile's mypy
plugin (``plugins = cutile.mypy_plugin``) turns them into these classes, so that
a kernel body type-checks: a read-only tensor parameter is a `TensorView`, a
``Mut`` one a `MutTensorView`, a run-time scalar a `ScalarParam`, and
``Constant[int]`` the int itself. No object of these classes exists; the
compiler lowers each use (`cutile_compiler._builtins.methods` holds what each
method does, and a test checks that the two list the same methods and
parameters). Tiles, what the DSL functions return, are ``Any``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Generic, Protocol, TypeVar

from cutile_compiler._dtypes import DType

#: the Python type a run-time scalar parameter takes on the host (int, float or bool)
HostScalar = TypeVar("HostScalar", int, float, bool, covariant=True)


class PartitionView(Protocol):
    """A tensor split into tiles inside a kernel (``x.partition(shape)``): tiles are
    read and (in unsafe kernels) written by their tile index."""

    @property
    def tile_shape(self) -> tuple[int, ...]:
        """The shape of each tile."""

    @property
    def dtype(self) -> DType:
        """The element type."""

    def load(self, index: Any, latency: int | None = None, allow_tma: bool | None = None) -> Any:
        """The tile at ``index`` (a tile index per axis); past the end reads the padding."""

    def store(self, index: Any, value: Any) -> None:
        """Writes ``value`` as the tile at ``index`` (unsafe kernels only)."""

    def num_tiles(self, axis: int) -> Any:
        """How many tiles the partition has along ``axis`` (a partial last tile counts)."""

    def atomic_add(self, index: Any, value: Any, scope: Any = "device") -> None:
        """Adds ``value`` to the tile at ``index``, atomically per element (unsafe kernels only)."""

    def atomic_max(self, index: Any, value: Any, scope: Any = "device") -> None:
        """Atomic element-wise maximum into the tile at ``index`` (unsafe kernels only)."""

    def atomic_min(self, index: Any, value: Any, scope: Any = "device") -> None:
        """Atomic element-wise minimum into the tile at ``index`` (unsafe kernels only)."""

    def atomic_and(self, index: Any, value: Any, scope: Any = "device") -> None:
        """Atomic bitwise and into the tile at ``index`` (unsafe kernels only)."""

    def atomic_or(self, index: Any, value: Any, scope: Any = "device") -> None:
        """Atomic bitwise or into the tile at ``index`` (unsafe kernels only)."""

    def atomic_xor(self, index: Any, value: Any, scope: Any = "device") -> None:
        """Atomic bitwise xor into the tile at ``index`` (unsafe kernels only)."""


class TensorView(Protocol):
    """A read-only tensor parameter (``x: Tensor[f32, [-1]]``) inside a kernel."""

    @property
    def shape(self) -> tuple[Any, ...]:
        """The extents: an int where the annotation fixes it, else a run-time value."""

    @property
    def dtype(self) -> DType:
        """The element type."""

    @property
    def ndim(self) -> int:
        """The rank."""

    def load(self, index: Any = None, shape: Any = None, padding: Any = "zero", latency: int | None = None,
             allow_tma: bool | None = None, at: Any = None) -> Any:
        """The tile of ``shape`` at tile index ``index``, or whose first element is at
        the element coordinates ``at`` (read-only tensors); elements outside the
        tensor read as ``padding``. (A shape is needed: only a Mut tensor has a tile
        of its own.)"""

    def partition(self, shape: Any, padding: Any = "zero") -> PartitionView:
        """The tensor split into tiles of ``shape``."""


class MutTensorView(TensorView, Protocol):
    """A ``Mut`` tensor parameter inside a kernel: each block reads and writes its own
    tile of it (``load()`` without an index, ``store``, the atomics); or, passed as a
    mapped partition (``partition(tile).map(...)``), the tiles its schedule gives the
    block (``for idx in z.tiles():``, ``z.load(idx)``, ``z.store(tile, idx)``)."""

    def store(self, value: Any, index: Any = None) -> None:
        """Writes ``value`` (a tile of the tile shape, or a scalar) as this block's tile;
        for a mapped partition, as its tile at ``index``, an index of its schedule."""

    def tiles(self) -> Iterator[Any]:
        """A mapped partition's schedule: ``for idx in z.tiles():`` walks the tile
        indices this block stores (each tile is one block's)."""

    def tiles_with(self, *others: MutTensorView) -> Iterator[Any]:
        """This mapped partition's schedule, whose indices the stores of ``others``
        (mapped partitions of the same tile shape, map and tile grid) accept too."""

    def tiles_within(self, ranges: Any, *others: MutTensorView) -> Iterator[Any]:
        """The schedule of a sub-grid of this mapped partition: one ``(start, count)``
        of tiles, or None (the whole axis), per axis; the stores of ``others`` (as
        `tiles_with`'s) accept its indices too."""

    def num_tiles(self, axis: int) -> Any:
        """How many tiles this tensor's partition has along ``axis`` (a partial last
        tile counts)."""

    def atomic_add(self, value: Any, order: Any = "relaxed", scope: Any = "device") -> Any:
        """Adds ``value`` to this block's tile atomically per element; returns the old values."""

    def atomic_max(self, value: Any, order: Any = "relaxed", scope: Any = "device") -> Any:
        """Atomic element-wise maximum into this block's tile; returns the old values."""

    def atomic_min(self, value: Any, order: Any = "relaxed", scope: Any = "device") -> Any:
        """Atomic element-wise minimum into this block's tile; returns the old values."""

    def atomic_and(self, value: Any, order: Any = "relaxed", scope: Any = "device") -> Any:
        """Atomic bitwise and into this block's tile; returns the old values."""

    def atomic_or(self, value: Any, order: Any = "relaxed", scope: Any = "device") -> Any:
        """Atomic bitwise or into this block's tile; returns the old values."""

    def atomic_xor(self, value: Any, order: Any = "relaxed", scope: Any = "device") -> Any:
        """Atomic bitwise xor into this block's tile; returns the old values."""

    def atomic_xchg(self, value: Any, order: Any = "relaxed", scope: Any = "device") -> Any:
        """Atomically replaces this block's tile by ``value``; returns the old values."""

    def atomic_cas(self, expected: Any, value: Any, order: Any = "relaxed", scope: Any = "device") -> Any:
        """Compare-and-swap per element of this block's tile; returns the old values."""


class ScalarParam(Protocol, Generic[HostScalar]):
    """A run-time scalar parameter (``alpha: f32``) inside a kernel: a 0-d tile, so
    arithmetic with it makes tiles (``Any``). The type argument is the Python type
    the host passes for it (int, float or bool)."""

    @property
    def dtype(self) -> DType:
        """The element type."""

    def astype(self, dtype: DType) -> Any:
        """The value converted to ``dtype``."""

    def __add__(self, other: Any) -> Any: ...
    def __radd__(self, other: Any) -> Any: ...
    def __sub__(self, other: Any) -> Any: ...
    def __rsub__(self, other: Any) -> Any: ...
    def __mul__(self, other: Any) -> Any: ...
    def __rmul__(self, other: Any) -> Any: ...
    def __truediv__(self, other: Any) -> Any: ...
    def __rtruediv__(self, other: Any) -> Any: ...
    def __floordiv__(self, other: Any) -> Any: ...
    def __rfloordiv__(self, other: Any) -> Any: ...
    def __mod__(self, other: Any) -> Any: ...
    def __rmod__(self, other: Any) -> Any: ...
    def __pow__(self, other: Any) -> Any: ...
    def __rpow__(self, other: Any) -> Any: ...
    def __and__(self, other: Any) -> Any: ...
    def __rand__(self, other: Any) -> Any: ...
    def __or__(self, other: Any) -> Any: ...
    def __ror__(self, other: Any) -> Any: ...
    def __xor__(self, other: Any) -> Any: ...
    def __rxor__(self, other: Any) -> Any: ...
    def __lshift__(self, other: Any) -> Any: ...
    def __rlshift__(self, other: Any) -> Any: ...
    def __rshift__(self, other: Any) -> Any: ...
    def __rrshift__(self, other: Any) -> Any: ...
    def __lt__(self, other: Any) -> Any: ...
    def __le__(self, other: Any) -> Any: ...
    def __gt__(self, other: Any) -> Any: ...
    def __ge__(self, other: Any) -> Any: ...
    def __eq__(self, other: object) -> Any: ...
    def __ne__(self, other: object) -> Any: ...
    def __neg__(self) -> Any: ...
    def __pos__(self) -> Any: ...
    def __invert__(self) -> Any: ...
    def __abs__(self) -> Any: ...
