"""Several saxpys at once: zipped launches are free to run on different streams of
the default pool, and one ``sync`` waits for all.

Run: ``python examples/async_saxpy.py``.
"""

import sys

import numpy as np

import cutile
from cutile import api
from cutile.core import Mut, Tensor, f32, load_tile_like


@cutile.entry
def saxpy(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]], y: Tensor[f32, [-1]], a: f32) -> None:
    z.store(a * load_tile_like(x, z) + load_tile_like(y, z))


def main() -> int:
    n, count = 300_001, 4
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal(n).astype(np.float32) for _ in range(count)]
    ys = [rng.standard_normal(n).astype(np.float32) for _ in range(count)]
    launches = [saxpy(api.empty([n], dtype=f32).partition([1024]), api.from_numpy(x), api.from_numpy(y), float(i + 1))
                for i, (x, y) in enumerate(zip(xs, ys))]
    results = cutile.zip(*launches).sync()
    ok = all(np.allclose(z.to_numpy(), np.float32(i + 1) * xs[i] + ys[i], rtol=1e-6, atol=1e-6)
             for i, (z, _, _) in enumerate(results))
    print(f"async_saxpy: {count} zipped saxpys over {n} floats on the {cutile.backend()} backend: "
          f"{'OK' if ok else 'WRONG'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
