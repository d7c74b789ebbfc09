"""The quick start: z = x + y with each block adding its own 128-element tile.

Run: ``./scripts/run_main.sh`` or ``python examples/add.py``. Runs on the GPU
where one is present, else on the CPU interpreter (which says so), and checks
the result against numpy.
"""

import sys

import numpy as np

import cutile
from cutile import api
from cutile.core import Mut, Tensor, f32, load_tile_like


@cutile.entry
def add(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]], y: Tensor[f32, [-1]]) -> None:
    tx = load_tile_like(x, z)
    ty = load_tile_like(y, z)
    z.store(tx + ty)


def main() -> int:
    x = api.ones([1024], dtype=f32)
    y = api.ones([1024], dtype=f32)
    z = api.zeros([1024], dtype=f32).partition([128])
    z, x, y = add(z, x, y).sync()      # grid (8, 1, 1) inferred from the partition
    ok = bool(np.array_equal(z.to_numpy(), np.full(1024, 2.0, np.float32)))

    # A size that does not divide by the tile: the last block's tile is masked.
    n = 100_003
    xs = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    ys = np.random.default_rng(1).standard_normal(n).astype(np.float32)
    z2 = api.full([n], np.nan, dtype=f32).partition([1024])
    z2, _, _ = add(z2, api.from_numpy(xs), api.from_numpy(ys)).sync()
    ok &= bool(np.array_equal(z2.to_numpy(), xs + ys))

    print(f"add: z = x + y over 1024 and {n} elements on the {cutile.backend()} backend: "
          f"{'OK, matches numpy' if ok else 'WRONG'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
