"""Row softmax: one block per row, the row loaded padded with -inf past its end.

Run: ``python examples/softmax.py``. N need not be a power of two: the tile is the
next power of two, padded on load (-inf adds nothing to max or to the sum of exp)
and masked on store.
"""

import sys

import numpy as np

import cutile
import cutile.core as ct
from cutile import api
from cutile.core import Constant, Mut, Tensor, f32


@cutile.entry
def softmax(z: Mut[Tensor[f32, [1, "BN"]]], x: Tensor[f32, [-1, -1]], BN: Constant[int]) -> None:
    row, _, _ = ct.get_tile_block_id()
    values = ct.load(x, index=(row, 0), shape=(1, BN), padding="neg_inf")
    shifted = values - ct.max(values, axis=1, keepdims=True)
    e = ct.exp(shifted)
    z.store(e / ct.sum(e, axis=1, keepdims=True))


def main() -> int:
    m, n = 300, 1000
    xs = np.random.default_rng(1).standard_normal((m, n)).astype(np.float32) * 4
    block = 1 << (n - 1).bit_length()
    z = api.empty([m, n], dtype=f32).partition([1, block])
    z, _ = softmax(z, api.from_numpy(xs)).sync()
    shifted = xs.astype(np.float64) - xs.max(axis=1, keepdims=True)
    expected = np.exp(shifted) / np.exp(shifted).sum(axis=1, keepdims=True)
    error = float(np.max(np.abs(z.to_numpy() - expected)))
    ok = error < 1e-6
    print(f"softmax: {m} rows of {n} (tiles of {block}) on the {cutile.backend()} backend; "
          f"max error {error:.1e}: {'OK' if ok else 'WRONG'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
