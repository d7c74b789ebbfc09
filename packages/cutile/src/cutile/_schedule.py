"""Mapped partitions on the host: ``t.partition(tile).map(map_shape, blocks=n)``.

A map attaches a schedule to a written partition: the tile grid stays the
partition's, ``map_shape`` groups its tiles (``[8, 1]``: groups of 8 tile rows, the
grouped order of GEMMs; `OWNED` for an axis each schedule item owns whole) and
``blocks`` is the launch's grid, ``(blocks, 1, 1)``. Inside the kernel, ``for idx in
z.tiles():`` walks block ``b``'s items ``b, b + blocks, ...`` and ``z.store(tile, idx)``
accepts only minted indices (see cutile_compiler's ``_mapped``). Everything here is
checked before any launch, and errors name the argument.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cutile._errors import LaunchError
from cutile_compiler import OWNED_AXIS


class _Owned:
    """The `OWNED` marker of a map shape."""

    _instance: _Owned | None = None

    def __new__(cls) -> _Owned:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "cutile.OWNED"

    def __reduce__(self) -> str:
        return "OWNED"


#: In a map shape, an axis that each schedule item owns whole: the kernel walks its
#: tiles itself (``for c in range(z.num_tiles(axis))``), e.g. one item per row with
#: ``t.partition([1, 1024]).map([1, cutile.OWNED], blocks=rows)``.
OWNED = _Owned()

#: Blocks a mapped partition runs on the interpreter when ``blocks`` is not given (fewer
#: when it has fewer streamed tiles): several, so each block's share has several items.
INTERPRETER_BLOCKS = 4
#: Schedule items are counted in i32 on the GPU.
MAX_STREAMED_TILES = 2**31 - 1


def checked_map(map_shape: Any, blocks: Any, shape: tuple[int, ...], tile_shape: tuple[int, ...],
                device: str) -> tuple[tuple[int, ...], int]:
    """The map shape (`OWNED` as `OWNED_AXIS`) and block count of ``map(map_shape,
    blocks)`` on a partition of ``shape`` into ``tile_shape`` tiles; a `LaunchError`
    naming the argument otherwise. ``blocks=None`` is the device's SM count (the
    interpreter's `INTERPRETER_BLOCKS`), or the streamed tile count when smaller."""
    items = tuple(map_shape) if isinstance(map_shape, (list, tuple)) else (map_shape,)
    # A map of ints (and OWNED) with a given block count: what it checks depends on the
    # arguments alone, so a result is remembered (the usual calls repeat them).
    key = (items, blocks, shape, tile_shape) if type(blocks) is int and all(
        type(m) is int or m is OWNED for m in items) else None
    found = _CHECKED_MAPS.get(key) if key is not None else None
    if found is not None:
        return found
    found = _checked_map(items, blocks, shape, tile_shape, device)
    if key is not None and len(_CHECKED_MAPS) < 4096:
        _CHECKED_MAPS[key] = found
    return found


_CHECKED_MAPS: dict[tuple[Any, ...], tuple[tuple[int, ...], int]] = {}


def _checked_map(items: tuple[Any, ...], blocks: Any, shape: tuple[int, ...], tile_shape: tuple[int, ...],
                 device: str) -> tuple[tuple[int, ...], int]:
    spelled = "[" + ", ".join("OWNED" if m is OWNED else repr(m) for m in items) + "]"
    where = f"map(map_shape={spelled})"
    if len(items) != len(tile_shape):
        raise LaunchError(f"{where}: a rank-{len(tile_shape)} partition needs {len(tile_shape)} map dims, "
                          f"got {len(items)}")
    dims: list[int] = []
    for axis, extent in enumerate(items):
        if extent is OWNED:
            dims.append(OWNED_AXIS)
            continue
        if isinstance(extent, (bool, np.bool_)) or not isinstance(extent, (int, np.integer)) or int(extent) < 1:
            raise LaunchError(f"{where}: map dims are positive ints (a group size) or cutile.OWNED, got {extent!r} "
                              f"for axis {axis}")
        dims.append(int(extent))
    streamed = [axis for axis, m in enumerate(dims) if m != OWNED_AXIS]
    if not streamed:
        raise LaunchError(f"{where}: every axis is OWNED; at least one axis must be streamed (a group size)")
    for axis in streamed[:-2]:
        if dims[axis] != 1:
            raise LaunchError(f"{where}: only the last two streamed axes are grouped; axis {axis} must be 1, "
                              f"got {dims[axis]}")
    grid = tuple(-(-s // t) for s, t in zip(shape, tile_shape))
    if any(count == 0 for count in grid):
        raise LaunchError(f"{where}: the partition has no tiles along axis {grid.index(0)} (shape {list(shape)}); "
                          "a mapped partition needs at least one tile per axis")
    streamed_tiles = 1
    for axis in streamed:
        streamed_tiles *= grid[axis]
    if streamed_tiles > MAX_STREAMED_TILES:
        raise LaunchError(f"{where}: {streamed_tiles} streamed tiles; a schedule counts at most "
                          f"{MAX_STREAMED_TILES} (use larger tiles)")
    if blocks is None:
        available = INTERPRETER_BLOCKS if device == "cpu" else _sm_count(device)
        return tuple(dims), min(available, streamed_tiles)
    if isinstance(blocks, (bool, np.bool_)) or not isinstance(blocks, (int, np.integer)) or int(blocks) < 1:
        raise LaunchError(f"map(blocks={blocks!r}): blocks is the number of blocks the launch runs, an int >= 1")
    if int(blocks) > MAX_STREAMED_TILES:
        raise LaunchError(f"map(blocks={int(blocks)}): at most {MAX_STREAMED_TILES} blocks")
    return tuple(dims), int(blocks)


def _sm_count(device: str) -> int:
    import cuda_core

    ordinal = int(device.split(":")[1]) if ":" in device else 0
    count: int = cuda_core.Device(ordinal).sm_count
    return count


def map_text(map_shape: tuple[int, ...]) -> str:
    """A map shape as the user wrote it (`OWNED` by name)."""
    return "[" + ", ".join("OWNED" if m == OWNED_AXIS else str(m) for m in map_shape) + "]"


__all__ = ["INTERPRETER_BLOCKS", "OWNED", "checked_map", "map_text"]
