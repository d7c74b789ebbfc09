#!/usr/bin/env python3
"""The host cost of examples/llm's eager Qwen3 decode step and prefill, without a GPU.

Runs the model (Qwen3-0.6B's shapes, ``--layers`` layers, a small vocabulary, zero
weights) on the GPU backend against cuda_core.testing.FakeDriver with launches, waits
and events made free (as scripts/bench_matmul_host.py does), and device allocations
too, so what is timed is host work: cutile_kernels' per-call work, the launches' checks
and bindings, cuda_async's ledger. Prints µs per eager decode step (one token over a
``--context``-position cache) and per prefill of a ``--prompt``-token prompt, and µs
per kernel launch of each (``--profile``: a cProfile of one sample instead).
Needs tileiras (it compiles the kernels for sm_90), not a GPU.

Usage: uv run --frozen python scripts/bench_llm_host.py [--layers 4] [--steps 20] [--prefills 5]
    [--prompt 512] [--context 512] [--repeats 3] [--clock cpu] [--profile decode|prefill] [--sort tottime]
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import io
import itertools
import os
import pstats
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

os.environ.setdefault("CUTILE_BACKEND", "gpu")
os.environ.setdefault("CUDA_CORE_NATIVE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # (examples/)

import numpy as np  # noqa: E402
from _host_bench import free_fake_driver, per_call_us  # noqa: E402
from cuda_core.testing import SUCCESS, FakeDriver  # noqa: E402
from cutile import _gpu, _native, api  # noqa: E402
from cutile.core import bf16  # noqa: E402

from examples.llm.model import PRESETS, KVCache, Qwen3Model, Qwen3Weights  # noqa: E402


@contextmanager
def registering_kernels(fake: FakeDriver) -> Iterator[None]:
    """Tells ``fake`` the parameters of every kernel loaded meanwhile (the library
    compiles its kernels as the model first calls them)."""
    original = _gpu.LoadedKernel.__init__

    def init(self: _gpu.LoadedKernel, compiled: Any, ordinal: int = 0, *, dependent_launch: bool = False) -> None:
        fake.kernels[compiled.name] = _gpu.fake_param_layout(compiled.abi)
        original(self, compiled, ordinal, dependent_launch=dependent_launch)

    _gpu.LoadedKernel.__init__ = init  # type: ignore[method-assign]
    try:
        yield
    finally:
        _gpu.LoadedKernel.__init__ = original  # type: ignore[method-assign]


class LaunchCounter:
    """Counts the kernel launches of a run: the Python path's driver calls and the
    native path's (`cutile._native`'s counters: its runs, and its launches for ops)."""

    def __init__(self, fake: FakeDriver) -> None:
        self.python = 0

        def launch(*_: Any) -> tuple[int]:
            self.python += 1
            return (SUCCESS,)

        fake.cuLaunchKernel = launch  # type: ignore[method-assign, assignment]

    def total(self) -> int:
        native = int(_native.module.stats()[1]) + int(_native.module.enqueued()) if _native.module is not None else 0
        return self.python + native


def free_allocations(fake: FakeDriver) -> None:
    """Makes ``fake``'s device allocations cost what a stream-ordered pool's do (next to
    nothing), not a fresh host buffer each: every allocation is a view of one shared
    zeroed buffer (what is timed never reads the values back), at addresses far apart so
    that views' alignments stay those of a real allocator's."""
    addresses = itertools.count(0x100000000000, 1 << 32)
    shared = [bytearray(1 << 20)]

    def allocate(nbytes: int) -> int:
        if nbytes > len(shared[0]):
            shared[0] = bytearray(max(nbytes, 2 * len(shared[0])))
        address = next(addresses)
        fake.memory[address] = memoryview(shared[0])[:nbytes]  # type: ignore[assignment]
        return address

    fake._alloc = allocate  # type: ignore[method-assign]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--steps", type=int, default=20, help="decode steps per sample")
    parser.add_argument("--prefills", type=int, default=5, help="prefills per sample")
    parser.add_argument("--prompt", type=int, default=512, help="prefill prompt length")
    parser.add_argument("--context", type=int, default=512, help="cached positions of a decode step")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--clock", choices=["wall", "cpu"], default="cpu")
    parser.add_argument("--profile", choices=["decode", "prefill"], help="print a cProfile of one sample instead")
    parser.add_argument("--sort", default="tottime", help="the profile's order (pstats: tottime, cumulative, ...)")
    parser.add_argument("--callees", help="with --profile: print what the functions matching this pattern call")
    args = parser.parse_args()
    with free_fake_driver() as fake:
        _run(fake, args)
    return 0


def _run(fake: FakeDriver, args: argparse.Namespace) -> None:
    free_allocations(fake)
    config = dataclasses.replace(PRESETS["qwen3-0.6b"], num_hidden_layers=args.layers, vocab_size=4096)
    counter = LaunchCounter(fake)
    with registering_kernels(fake):
        weights = Qwen3Weights.from_named(config, {name: api.zeros(list(shape), bf16)
                                                   for name, shape in config.weight_shapes().items()})
        model = Qwen3Model(config, weights)
        prompt = list(range(1, args.prompt + 1))
        cache = KVCache.allocate(config, 1, max(args.prompt, args.context) + 8)
        ids = api.from_numpy(np.array([5], dtype=np.int64))

        def decode(count: int) -> None:
            for _ in range(count):
                cache.lengths = [args.context]
                model.decode_step(ids, cache)

        def prefill(count: int) -> None:
            for _ in range(count):
                model.prefill([prompt], cache)

        modes: dict[str, Callable[[int], None]] = {"decode": decode, "prefill": prefill}
        launches = {}
        for name, body in modes.items():
            body(1)  # compiles and loads every kernel, and warms the caches
            before = counter.total()
            body(1)
            launches[name] = counter.total() - before
    if args.profile:
        profile = cProfile.Profile()
        profile.enable()
        modes[args.profile](args.steps if args.profile == "decode" else args.prefills)
        profile.disable()
        text = io.StringIO()
        stats = pstats.Stats(profile, stream=text).sort_stats(args.sort)
        stats.print_callees(args.callees) if args.callees else stats.print_stats(60)
        print(text.getvalue())
        return
    counts = {"decode": args.steps, "prefill": args.prefills}
    samples: dict[str, list[float]] = {name: [] for name in modes}
    for _ in range(args.repeats):  # the modes in turn within a repeat, as per_call_us does
        for name, body in modes.items():
            samples[name] += per_call_us({name: body}, counts[name], 1, args.clock)[name]
    path = "native launch path" if _native.module is not None else "Python launch path"
    print(f"examples/llm host cost, fake driver ({path}, Python {sys.version.split()[0]}), {args.clock} clock, "
          f"best of {args.repeats}; Qwen3-0.6B shapes, {args.layers} layers, vocabulary {config.vocab_size}")
    labels = {"decode": f"decode step (context {args.context})", "prefill": f"prefill ({args.prompt} tokens)"}
    for name, values in samples.items():
        best = min(values)
        print(f"  {labels[name]:<28} {best:10.1f} µs  {launches[name]:4d} launches  "
              f"{best / max(launches[name], 1):7.1f} µs per launch")


if __name__ == "__main__":
    sys.exit(main())
