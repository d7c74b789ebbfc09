#!/usr/bin/env python3
"""Host cost per op of cuda_async's execution forms on a chain of small kernels.

Prints a table (µs per kernel, median of interleaved repeats) for a 1-thread
kernel that adds one to a counter, all on one stream:
  - raw cuda_core: PreparedLaunch x N, one stream synchronize (the reference)
  - a chain of N ops (op.then(op)...) run with .sync() / with await
  - N separate ops, each run with .sync() / each awaited
  - N separate ops, each .sync() inside one cuda_async.batch() (one wait at the end)
  - a CUDA graph of the N-kernel chain: graph.launch().sync() per kernel
    (wall clock to completion) and the host time of the launch call alone
Targets (issue "cuda-async"): graph replay <= 1 µs per kernel; await <= 2x the
cost of sync. The counter is checked at the end. Needs a GPU.

Usage: uv run --frozen python scripts/bench_async.py [--kernels 1000] [--repeats 9]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import struct
import sys
import time
from collections.abc import Callable

import cuda_core as cc

import cuda_async as ca

from cuda_core.testing import PTX as _SAMPLE_PTX  # noqa: E402

PTX = _SAMPLE_PTX.encode()  # its `inc` kernel


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", type=int, default=1000, help="length of the chain (default 1000)")
    parser.add_argument("--repeats", type=int, default=9, help="interleaved repeats (median taken)")
    args = parser.parse_args()
    if not cc.is_available():
        print("bench_async: needs an NVIDIA GPU", file=sys.stderr)
        return 2
    n: int = args.kernels
    device = cc.Device(0)
    stream = cc.Stream.create(device)
    policy = ca.SingleStream(stream)
    function = cc.Module.load(PTX).get_function("inc")
    memory = cc.DeviceBuffer.allocate(4)
    memory.memset(0)
    device.synchronize()
    counter = ca.Resource("counter", memory=memory, layout=("u32", 1))
    prepared = cc.PreparedLaunch(function, cc.LaunchConfig(1, 1), ["ptr"])
    prepared[0] = memory
    expected = 0

    def enqueue(s: cc.Stream | None) -> None:
        prepared.launch(s)

    op = ca.DeviceOp.from_fn(enqueue, writes=[counter], name="inc")
    chain: ca.DeviceOp[None] = op
    for _ in range(n - 1):
        chain = chain.then(op)
    graph = chain.graph(name=f"{n} incs", policy=policy)
    assert graph.node_count == n
    loop = asyncio.new_event_loop()

    def raw() -> int:
        for _ in range(n):
            prepared.launch(stream)
        stream.synchronize()
        return n

    def chain_sync() -> int:
        chain.sync(policy)
        return n

    def chain_await() -> int:
        async def run() -> None:
            await chain.schedule(policy)

        loop.run_until_complete(run())
        return n

    def each_sync() -> int:
        for _ in range(n):
            op.sync(policy)
        return n

    def each_await() -> int:
        async def run() -> None:
            for _ in range(n):
                await op.schedule(policy)

        loop.run_until_complete(run())
        return n

    def each_in_batch() -> int:
        with ca.batch("bench", policy=policy):
            for _ in range(n):
                op.sync()
        return n

    def graph_replay() -> int:
        graph.launch().sync(policy)
        return n

    host_only: list[float] = []

    def graph_host() -> int:
        start = time.perf_counter()
        future = graph.launch().schedule(policy)
        host_only.append((time.perf_counter() - start) / n * 1e6)
        future.result()
        return n

    rows: list[tuple[str, Callable[[], int]]] = [
        ("raw cuda_core: PreparedLaunch x N + synchronize", raw),
        ("chain of N ops, .sync()", chain_sync),
        ("chain of N ops, await", chain_await),
        ("N separate ops, each .sync()", each_sync),
        ("N separate ops, each awaited", each_await),
        ("N separate ops, each .sync() in one batch()", each_in_batch),
        ("graph replay of the chain, .sync() (wall clock)", graph_replay),
        ("graph replay, launch call alone (host)", graph_host),
    ]
    for _, body in rows:  # warm-up (module JIT, pools, poller thread)
        expected += body()
    host_only.clear()
    samples: dict[str, list[float]] = {name: [] for name, _ in rows}
    for _ in range(args.repeats):
        for name, body in rows:
            stream.synchronize()
            start = time.perf_counter()
            expected += body()
            samples[name].append((time.perf_counter() - start) / n * 1e6)
    samples[rows[-1][0]] = host_only
    loop.close()
    device.synchronize()
    got = struct.unpack("<I", memory.to_bytes())[0]
    if got != expected % (1 << 32):
        print(f"bench_async: the counter is {got}, expected {expected}: the ops did not all run", file=sys.stderr)
        return 1

    median = {name: statistics.median(values) for name, values in samples.items()}
    reference = median[rows[0][0]]
    print(f"cuda_async host cost, chain of {n} one-thread kernels on one stream, "
          f"median of {args.repeats} interleaved repeats ({device.name}, Python {sys.version.split()[0]})")
    print()
    print("| variant | µs per kernel | vs raw |")
    print("|---|---|---|")
    for name, _ in rows:
        print(f"| {name} | {median[name]:.2f} | {median[name] / reference:.2f}x |")
    print()
    graph_us = median["graph replay of the chain, .sync() (wall clock)"]
    chain_ratio = median["chain of N ops, await"] / median["chain of N ops, .sync()"]
    each_ratio = median["N separate ops, each awaited"] / median["N separate ops, each .sync()"]
    checks = [
        (f"graph replay <= 1 µs per kernel: {graph_us:.2f} µs", graph_us <= 1.0),
        (f"await <= 2x sync, chain of {n}: {chain_ratio:.2f}x", chain_ratio <= 2.0),
        (f"await <= 2x sync, separate ops: {each_ratio:.2f}x", each_ratio <= 2.0),
    ]
    for text, ok in checks:
        print(f"{'met ' if ok else 'MISSED'} {text}")
    return 0  # a missed target is reported, not an error (the numbers vary run to run)


if __name__ == "__main__":
    sys.exit(main())
