"""saxpy: z = a * x + y, with ``a`` a run-time f32 scalar parameter.

Run: ``python examples/saxpy.py``. Checks against numpy on random data.
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
    n, a = 1_000_003, 2.5
    rng = np.random.default_rng(0)
    xs, ys = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    z = api.empty([n], dtype=f32).partition([1024])
    z, _, _ = saxpy(z, api.from_numpy(xs), api.from_numpy(ys), a).sync()
    expected = np.float32(a) * xs + ys
    error = float(np.max(np.abs(z.to_numpy() - expected)))
    ok = error <= 1e-6 * float(np.max(np.abs(expected)))
    print(f"saxpy: z = {a} * x + y over {n} floats on the {cutile.backend()} backend; "
          f"max error {error:.1e}: {'OK' if ok else 'WRONG'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
