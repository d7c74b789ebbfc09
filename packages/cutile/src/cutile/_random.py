"""Counter-based random numbers for kernels: a hash of (element index, seed), so
values need no state and are the same on every backend and for any tile size."""

from __future__ import annotations

from typing import Any

from cutile_compiler import DeviceFunction
from cutile_compiler.language import f32


@DeviceFunction
def _hash(index: Any, seed: Any) -> Any:
    """The murmur3 finalizer of index * golden ^ seed, on u32 tiles."""
    h = index * 0x9E3779B1 ^ seed
    h = h ^ (h >> 16)
    h = h * 0x85EBCA6B
    h = h ^ (h >> 13)
    h = h * 0xC2B2AE35
    return h ^ (h >> 16)


@DeviceFunction
def uniform(index: Any, seed: Any) -> Any:
    """Uniform f32 values in [0, 1) with 24 random bits, from u32 tiles of element
    indices and a u32 seed (``cutile.core.uniform``: what `api.rand` draws)."""
    return (_hash(index, seed) >> 8).astype(f32) * (1.0 / (1 << 24))
