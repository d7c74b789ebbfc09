"""Many additions awaited concurrently from asyncio tasks.

Each ``await add(...)`` queues the launch and yields to the event loop until the
GPU is done (on the interpreter, it runs eagerly). Run: ``python examples/async_add.py``.
"""

import asyncio
import sys

import numpy as np

import cutile
from cutile import api
from cutile.core import Mut, Tensor, f32, load_tile_like


@cutile.entry
def add(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]], y: Tensor[f32, [-1]]) -> None:
    z.store(load_tile_like(x, z) + load_tile_like(y, z))


async def one(task: int, n: int) -> bool:
    rng = np.random.default_rng(task)
    xs, ys = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    z = api.empty([n], dtype=f32).partition([1024])
    z, _, _ = await add(z, api.from_numpy(xs), api.from_numpy(ys))
    return bool(np.array_equal(z.to_numpy(), xs + ys))


async def main() -> int:
    tasks, n = 16, 200_000
    results = await asyncio.gather(*(one(t, n) for t in range(tasks)))
    ok = all(results)
    print(f"async_add: {tasks} tasks each awaited z = x + y over {n} floats on the {cutile.backend()} backend: "
          f"{'OK' if ok else 'WRONG'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
