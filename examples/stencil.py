"""Stencils as safe kernels: every block reads its neighbours' elements.

Run: ``python examples/stencil.py``. A 1-D 5-point stencil (the fourth difference,
``x[i-2] - 4 x[i-1] + 6 x[i] - 4 x[i+1] + x[i+2]``) and the 2-D 5-point stencil (the
discrete Laplacian). Each reads the read-only input with element-offset loads,
``x.load(at=(i - 1, j), shape=(BM, BN))``: the tile whose first element is at those
coordinates, read at run-time offsets that may be negative or run past the end; the
elements outside the tensor read as the padding (zero here), so the edges need no
special case. Reading can never race, so no ``unsafe=True`` is needed; the output is
stored only at the block's own tile. The shapes are odd, so edge tiles are partial.
"""

import sys

import numpy as np

import cutile
import cutile.core as ct
from cutile import api
from cutile.core import Constant, Mut, Tensor, f32


@cutile.entry
def fourth_difference(y: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]], B: Constant[int]) -> None:
    i = ct.bid(0) * B
    near = x.load(at=(i - 1,), shape=(B,)) + x.load(at=(i + 1,), shape=(B,))
    far = x.load(at=(i - 2,), shape=(B,)) + x.load(at=(i + 2,), shape=(B,))
    y.store(far - 4.0 * near + 6.0 * x.load(at=(i,), shape=(B,)))


@cutile.entry
def laplacian(y: Mut[Tensor[f32, ["BM", "BN"]]], x: Tensor[f32, [-1, -1]], BM: Constant[int], BN: Constant[int]) -> None:
    i, j = ct.bid(0) * BM, ct.bid(1) * BN
    vertical = x.load(at=(i - 1, j), shape=(BM, BN)) + x.load(at=(i + 1, j), shape=(BM, BN))
    horizontal = x.load(at=(i, j - 1), shape=(BM, BN)) + x.load(at=(i, j + 1), shape=(BM, BN))
    y.store(4.0 * x.load(at=(i, j), shape=(BM, BN)) - vertical - horizontal)


def main() -> int:
    rng = np.random.default_rng(5)
    line = rng.standard_normal(1001).astype(np.float32)
    y, _ = fourth_difference(api.empty([1001]).partition([512]), api.from_numpy(line)).sync()
    p = np.pad(line.astype(np.float64), 2)
    expected_1d = p[:-4] + p[4:] - 4 * (p[1:-3] + p[3:-1]) + 6 * p[2:-2]
    error_1d = float(np.max(np.abs(y.to_numpy() - expected_1d)))

    grid = rng.standard_normal((300, 500)).astype(np.float32)
    z, _ = laplacian(api.empty([300, 500]).partition([32, 128]), api.from_numpy(grid)).sync()
    q = np.pad(grid.astype(np.float64), 1)
    expected_2d = 4 * q[1:-1, 1:-1] - q[:-2, 1:-1] - q[2:, 1:-1] - q[1:-1, :-2] - q[1:-1, 2:]
    error_2d = float(np.max(np.abs(z.to_numpy() - expected_2d)))

    ok = error_1d < 1e-4 and error_2d < 1e-4
    print(f"stencils on the {cutile.backend()} backend: 1-D 5-point over 1001 elements (max error {error_1d:.1e}), "
          f"2-D 5-point over 300x500 (max error {error_2d:.1e}): {'OK' if ok else 'WRONG'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
