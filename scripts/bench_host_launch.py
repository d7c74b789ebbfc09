#!/usr/bin/env python3
"""The host-side cost of a cutile launch on the GPU backend, without a GPU.

Runs the GPU backend against cuda_core.testing.FakeDriver with its launch,
synchronization and event calls made free (the native launch path calls C
stand-ins that do nothing), so that what is timed is cutile's own work: argument
checks, ownership, the specialization, packing, cuda_async's bookkeeping. Prints µs per launch of a 1024-element add for:
  - add(z, x, y).sync() in a loop
  - the same loop inside cutile.batch()
  - a chain of launches (op.then(...)) synced once
Needs tileiras (it compiles the kernel for sm_90), not a GPU. The real launch adds
the driver's own cost (about 4 µs through cuda-bindings on the H200's host; see
bench_launch.py) and, for .sync(), the wait for the kernel.

Usage: uv run --frozen python scripts/bench_host_launch.py [--launches 20000] [--profile MODE]
"""

import argparse
import cProfile
import os
import pstats
import statistics
import sys
from collections.abc import Callable
from typing import Any

os.environ.setdefault("CUTILE_BACKEND", "gpu")
os.environ.setdefault("CUDA_CORE_NATIVE", "1")  # (the fake driver's launches take the native path too)

from _host_bench import free_fake_driver, per_call_us, register  # noqa: E402
import cutile  # noqa: E402
from cuda_core.testing import FakeDriver  # noqa: E402
from cutile import _native, api  # noqa: E402
from cutile.core import Mut, Tensor, f32, load_tile_like  # noqa: E402


# (annotations evaluated at definition: this file has no `from __future__ import annotations`)
@cutile.entry
def add(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]], y: Tensor[f32, [-1]]) -> None:
    z.store(load_tile_like(x, z) + load_tile_like(y, z))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--launches", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--profile", choices=["sync", "batch", "chain"], help="print a cProfile of one mode")
    parser.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                        help="cpu: the process's CPU time (steadier on a shared machine)")
    args = parser.parse_args()

    with free_fake_driver() as fake:
        _run(fake, args)  # its tensors die inside the block, while the fake driver is in place
        add.clear_cache()
    return 0


def _run(fake: FakeDriver, args: argparse.Namespace) -> None:
    x, y = api.empty([1024], dtype=f32), api.empty([1024], dtype=f32)
    z = api.empty([1024], dtype=f32).partition([1024])
    register(fake, add(z, x, y))
    state: dict[str, Any] = {"z": z}

    def loop_sync(n: int) -> None:
        z = state["z"]
        for _ in range(n):
            z, _x, _y = add(z, x, y).sync()
        state["z"] = z

    def loop_batch(n: int) -> None:
        z = state["z"]
        with cutile.batch():
            for _ in range(n):
                z, _x, _y = add(z, x, y).sync()
        state["z"] = z

    def chain(n: int) -> None:
        op = add(state["z"], x, y).op
        for _ in range(n - 1):
            op = op.then(lambda r: add(*r).op)
        state["z"] = op.sync()[0]

    modes: dict[str, Callable[[int], None]] = {"sync": loop_sync, "batch": loop_batch, "chain": chain}
    for body in modes.values():
        body(200)  # warm-up
    if args.profile:
        profiler = cProfile.Profile()
        profiler.runcall(modes[args.profile], args.launches)
        pstats.Stats(profiler).sort_stats("tottime").print_stats(25)
        return
    samples = per_call_us(modes, args.launches, args.repeats, args.clock)
    path = "native launch path" if _native.module is not None else f"Python launch path: {_native.unavailable_reason()}"
    print(f"cutile host cost per launch without a GPU (fake driver; Python {sys.version.split()[0]}; {path}), "
          f"{args.clock} clock, median (min) of {args.repeats} x {args.launches} launches")
    labels = {"sync": "add(z, x, y).sync() in a loop", "batch": "the same inside cutile.batch()",
              "chain": "a chain of launches, one .sync()"}
    for name, values in samples.items():
        print(f"  {labels[name]:<40} {statistics.median(values):7.2f} µs ({min(values):.2f})")


if __name__ == "__main__":
    sys.exit(main())
