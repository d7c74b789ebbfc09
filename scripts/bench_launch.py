#!/usr/bin/env python3
"""Host cost of a kernel launch through cuda_core, against raw cuda-bindings.

Prints a table (µs per launch, median of several loops) for an empty kernel with
three parameters (pointer, u32, f32):
  - cuda_core PreparedLaunch (no arguments, and with the same argument objects)
  - raw cuda-bindings cuLaunchKernel with a pre-packed void** array
  - raw cuda-bindings cuLaunchKernel with (values, types) tuples
  - the driver's cuLaunchKernel called through ctypes (no cuda-bindings wrapper),
    to show how much of a launch's host cost is the Python binding itself
  - CUDA graph replay of 1000 captured launches, per kernel
Targets (issue "Workspace, CI, and cuda-core"): prepared within 10% of raw
pre-packed; graph replay <= 1 µs per kernel. Needs a GPU.
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import sys
import time
from collections.abc import Callable

import cuda_core as cc

PTX = b"""
.version 8.0
.target sm_90
.address_size 64
.visible .entry empty(.param .u64 p0, .param .u32 p1, .param .f32 p2)
{
    ret;
}
"""


def per_launch_us(
    loops: list[Callable[[int], None]], count: int, repeats: int, stream: cc.Stream
) -> list[float]:
    """Per loop, the median over ``repeats`` of the host time of ``loop(count)``
    divided by ``count``. The loops are interleaved in each repeat, so that a
    drift of the machine's speed affects them alike."""
    for loop in loops:
        loop(min(count, 500))  # warm-up
    samples: list[list[float]] = [[] for _ in loops]
    for _ in range(repeats):
        for index, loop in enumerate(loops):
            stream.synchronize()
            start = time.perf_counter()
            loop(count)
            samples[index].append((time.perf_counter() - start) / count * 1e6)
    stream.synchronize()
    return [statistics.median(values) for values in samples]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--launches", type=int, default=5000)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--graph-kernels", type=int, default=1000)
    parser.add_argument("--graph-replays", type=int, default=50)
    args = parser.parse_args()

    if not cc.is_available():
        print("bench_launch.py needs an NVIDIA GPU; none is usable here.", file=sys.stderr)
        return 2
    from cuda.bindings import driver

    device = cc.Device(0)
    function = cc.Module.load(PTX).get_function("empty")
    stream = cc.Stream.create()
    buffer = cc.DeviceBuffer.allocate(256)
    config = cc.LaunchConfig(1, 32)
    prepared = cc.PreparedLaunch(function, config, ["ptr", "u32", "f32"])
    prepared.launch(stream, buffer, 7, 1.5)

    def prepared_bare(n: int) -> None:
        launch = prepared.launch
        for _ in range(n):
            launch(stream)

    def prepared_same_args(n: int) -> None:
        launch = prepared.launch
        for _ in range(n):
            launch(stream, buffer, 7, 1.5)

    # Raw cuda-bindings, arguments packed once by hand.
    values = (ctypes.c_uint64(buffer.ptr), ctypes.c_uint32(7), ctypes.c_float(1.5))
    pointers = (ctypes.c_void_p * 3)(*[ctypes.addressof(v) for v in values])
    packed = ctypes.addressof(pointers)
    handle, stream_handle = function.handle, stream.handle
    cu_launch = driver.cuLaunchKernel

    def raw_prepacked(n: int) -> None:
        for _ in range(n):
            err = cu_launch(handle, 1, 1, 1, 32, 1, 1, 0, stream_handle, packed, 0)[0]
            if err:
                raise RuntimeError(err)

    def raw_tuples(n: int) -> None:
        ptr = buffer.ptr
        for _ in range(n):
            err = cu_launch(
                handle, 1, 1, 1, 32, 1, 1, 0, stream_handle,
                ((ptr, 7, 1.5), (ctypes.c_void_p, ctypes.c_uint32, ctypes.c_float)), 0,
            )[0]
            if err:
                raise RuntimeError(err)

    # The same driver entry point without cuda-bindings' wrapper: ctypes on libcuda.
    libcuda = ctypes.CDLL("libcuda.so.1")
    c_launch = libcuda.cuLaunchKernel
    c_launch.restype = ctypes.c_int
    c_launch.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
    c_handle, c_stream = int(handle), int(stream_handle)

    def raw_ctypes(n: int) -> None:
        for _ in range(n):
            err = c_launch(c_handle, 1, 1, 1, 32, 1, 1, 0, c_stream, packed, None)
            if err:
                raise RuntimeError(err)

    variants = [
        ("cuda_core PreparedLaunch.launch(stream)", prepared_bare),
        ("cuda_core PreparedLaunch.launch(stream, *same args)", prepared_same_args),
        ("cuda-bindings cuLaunchKernel, pre-packed void**", raw_prepacked),
        ("cuda-bindings cuLaunchKernel, (values, types) tuples", raw_tuples),
        ("driver cuLaunchKernel through ctypes, pre-packed", raw_ctypes),
    ]
    timings = per_launch_us([loop for _, loop in variants], args.launches, args.repeats, stream)
    rows: list[tuple[str, float]] = [(name, value) for (name, _), value in zip(variants, timings)]

    # Graph replay: capture many launches once, replay, time end to end.
    with cc.capture(stream) as recorded:
        for _ in range(args.graph_kernels):
            prepared.launch(stream)
    assert recorded.graph is not None
    graph = recorded.graph.instantiate(upload_stream=stream)
    graph.launch(stream)
    stream.synchronize()
    start_event, end_event = cc.Event.create(), cc.Event.create()
    samples = []
    for _ in range(5):
        stream.synchronize()
        t0 = time.perf_counter()
        start_event.record(stream)
        for _ in range(args.graph_replays):
            graph.launch(stream)
        end_event.record(stream)
        end_event.synchronize()
        wall = time.perf_counter() - t0
        samples.append((wall, start_event.elapsed_ms(end_event) / 1e3))
    kernels = args.graph_replays * args.graph_kernels
    wall_us = statistics.median(s[0] for s in samples) / kernels * 1e6
    device_us = statistics.median(s[1] for s in samples) / kernels * 1e6
    rows.append((f"graph replay of {args.graph_kernels} kernels, wall clock per kernel", wall_us))
    rows.append((f"graph replay of {args.graph_kernels} kernels, device events per kernel", device_us))

    raw = rows[2][1]
    print(f"\nLaunch overhead on {device.name} ({device.sm_name}), cuda-bindings "
          f"{getattr(sys.modules.get('cuda.bindings'), '__version__', '?')}, Python {sys.version.split()[0]}")
    print(f"{'variant':<62} {'µs/launch':>10} {'vs raw pre-packed':>18}")
    for name, value in rows:
        print(f"{name:<62} {value:>10.2f} {value / raw:>17.2f}x")
    verdict_prepared = rows[0][1] <= 1.10 * raw
    verdict_graph = wall_us <= 1.0
    print(f"\nprepared launch within 10% of raw pre-packed: {'yes' if verdict_prepared else 'NO'}"
          f" ({rows[0][1] / raw:.3f}x)")
    print(f"graph replay <= 1 µs per kernel: {'yes' if verdict_graph else 'NO'} ({wall_us:.3f} µs)")
    buffer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
