"""Dropout with a counter-based random number generator inside the kernel.

Each element's random number is a hash of (seed, its index), so the mask is the
same on any backend, for any tile size, and needs no state. Kept elements are
scaled by 1 / (1 - p).

Run: ``python examples/dropout.py``.
"""

import sys

import numpy as np

import cutile
import cutile.core as ct
from cutile import api
from cutile.core import Constant, Mut, Tensor, f32, u32, uniform  # uniform: api.rand's random numbers


@cutile.entry
def dropout(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]], seed: u32, P: Constant[float], B: Constant[int]) -> None:
    block, _, _ = ct.get_tile_block_id()
    index = ct.arange(B, u32) + block.astype(u32) * B
    keep = uniform(index, seed) >= P
    z.store(ct.where(keep, ct.load_tile_like(x, z) * (1.0 / (1.0 - P)), 0.0))


def reference_uniform(index: np.ndarray, seed: int) -> np.ndarray:
    """cutile.core.uniform written again in numpy: the independent check of the mask."""
    h = (index * np.uint32(0x9E3779B1)) ^ np.uint32(seed)
    h ^= h >> np.uint32(16)
    h *= np.uint32(0x85EBCA6B)
    h ^= h >> np.uint32(13)
    h *= np.uint32(0xC2B2AE35)
    h ^= h >> np.uint32(16)
    return (h >> np.uint32(8)).astype(np.float32) * np.float32(1.0 / (1 << 24))


def main() -> int:
    n, p, seed = 100_000, 0.3, 1234
    xs = np.random.default_rng(4).standard_normal(n).astype(np.float32)
    z = api.empty([n], dtype=f32).partition([1024])
    z, _ = dropout(z, api.from_numpy(xs), seed, P=p).sync()
    keep = reference_uniform(np.arange(n, dtype=np.uint32), seed) >= np.float32(p)
    expected = np.where(keep, xs * np.float32(1.0 / (1.0 - p)), np.float32(0))
    got = z.to_numpy()
    ok = bool(np.allclose(got, expected, rtol=1e-6, atol=0)) and abs(1 - keep.mean() - p) < 0.01
    print(f"dropout: p = {p} over {n} floats on the {cutile.backend()} backend; kept {keep.mean():.3f} "
          f"of the elements, mask identical to numpy's: {'OK' if ok else 'WRONG'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
