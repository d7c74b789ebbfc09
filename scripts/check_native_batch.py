"""A batch loop on the native launch path, checked against numpy: 200 launches with
changing scalars. BENCHMARKS.md's memcheck figure comes from running it under
compute-sanitizer on the GPU machine:
  compute-sanitizer --tool memcheck python3 scripts/check_native_batch.py
Exits 1 when the result is wrong."""
import sys

import numpy as np
import cutile
from cutile import _native, api
from cutile.core import Mut, Tensor, f32, i32, load_tile_like


@cutile.entry
def axpb(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]], a: f32, b: i32) -> None:
    z.store(a * load_tile_like(x, z) + load_tile_like(z, z) + b.astype(f32))


x_host = np.random.default_rng(0).standard_normal(1000).astype(np.float32)
x = api.from_numpy(x_host)
z = api.zeros([1000], dtype=f32).partition([128])
expected = np.zeros(1000, np.float64)
before = _native.load().stats() if _native.load() is not None else None  # (loaded now: it loads at the first launch)
z, x = axpb(z, x, 0.5, 1).sync()
expected += 0.5 * x_host + 1
with cutile.batch():
    for i in range(200):
        z, x = axpb(z, x, float(i % 7), i % 3).sync()
        expected += (i % 7) * x_host.astype(np.float64) + (i % 3)
got = z.unpartition().to_numpy()
err = np.max(np.abs(got - expected) / (1 + np.abs(expected)))
print("native:", _native.module is not None, "stats before/after:", before, _native.module.stats() if _native.module else None)
print("max rel err", err, "OK" if err < 1e-4 else "WRONG")
sys.exit(0 if err < 1e-4 else 1)
