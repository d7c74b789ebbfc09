#!/usr/bin/env python3
"""Element-wise kernels on the GPU: cutile against torch, Triton and NVIDIA's
cuTile Python, measured in one run on one GPU.

- z = x + y and z = a * x + y over 2^28 elements, fp32 and bf16, as a fraction of
  the device-to-device copy bandwidth measured in the same run (bytes read + written);
- host cost per launch of a 1024-element add.

Device times are `cutile.bench.do_bench`'s: the median of ``--repeats`` reps on
cutile's stream, the L2 flushed before each, the host's enqueueing outside the interval.

Kernels are defined in a factory, so this file keeps annotations evaluated at
definition (no `from __future__ import annotations`).

Targets (issue "cutile: tensors, partitions, ..."): >= 97% of copy bandwidth;
launch overhead <= cuTile Python's. Needs a GPU, torch and triton; cuTile Python
(package cuda-tile) is optional.
"""



import argparse
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from _bench_common import torch_copy

try:  # NVIDIA's cuTile Python: an optional benchmark peer, never a dependency
    import cuda.tile as ct
except ImportError as exc:
    ct = None
    CT_MISSING = str(exc)

if ct is not None:
    @ct.kernel  # type: ignore[untyped-decorator]
    def ct_add(x, y, z, tile: ct.Constant[int]):  # type: ignore[no-untyped-def]
        bid = ct.bid(0)
        ct.store(z, index=(bid,), tile=ct.load(x, index=(bid,), shape=(tile,)) + ct.load(y, index=(bid,), shape=(tile,)))

    @ct.kernel  # type: ignore[untyped-decorator]
    def ct_saxpy(x, y, z, a, tile: ct.Constant[int]):  # type: ignore[no-untyped-def]
        bid = ct.bid(0)
        result = a * ct.load(x, index=(bid,), shape=(tile,)) + ct.load(y, index=(bid,), shape=(tile,))
        ct.store(z, index=(bid,), tile=result.astype(z.dtype))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log2n", type=int, default=28)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--launch-repeats", type=int, default=7)
    parser.add_argument("--launch-only", action="store_true", help="only the host cost per launch")
    args = parser.parse_args()

    import torch

    import cutile
    from cutile import _gpu, api, bench
    from cutile.core import Mut, Tensor, bf16, f32, load_tile_like

    if cutile.backend() != "gpu":
        print("bench_elementwise.py needs a GPU", file=sys.stderr)
        return 2
    import triton
    import triton.language as tl

    if ct is None:
        print(f"(cuTile Python not available: {CT_MISSING})")

    stream = _gpu.default_stream()
    torch_stream = torch.cuda.ExternalStream(int(stream.handle))
    n = 1 << args.log2n

    def device_time_ms(enqueue: Callable[[], Any]) -> float:
        return bench.do_bench(enqueue, warmup=3, reps=args.repeats).median_ms

    # (the mypy plugin reads literal dtypes only: hence the kernels' `type: ignore[misc]`)
    def make_kernels(dtype: Any) -> tuple[Any, Any]:
        @cutile.entry
        def add(z: Mut[Tensor[dtype, ["B"]]],  # type: ignore[misc, name-defined]
                x: Tensor[dtype, [-1]], y: Tensor[dtype, [-1]]) -> None:  # type: ignore[misc]
            z.store(load_tile_like(x, z) + load_tile_like(y, z))

        @cutile.entry
        def saxpy(z: Mut[Tensor[dtype, ["B"]]],  # type: ignore[misc, name-defined]
                  x: Tensor[dtype, [-1]], y: Tensor[dtype, [-1]], a: dtype) -> None:  # type: ignore[misc]
            z.store(a * load_tile_like(x, z) + load_tile_like(y, z))

        return add, saxpy

    @triton.jit  # type: ignore[untyped-decorator]
    def triton_add(x_ptr, y_ptr, z_ptr, n, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        tl.store(z_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask), mask=mask)

    @triton.jit  # type: ignore[untyped-decorator]
    def triton_saxpy(x_ptr, y_ptr, z_ptr, a, n, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        x = tl.load(x_ptr + offsets, mask=mask)
        tl.store(z_ptr + offsets, (a * x + tl.load(y_ptr + offsets, mask=mask)).to(x.dtype), mask=mask)

    rows: list[tuple[str, str, str, float]] = []
    with torch.cuda.stream(torch_stream):
        copy_gbs = 2 * n * 4 / device_time_ms(torch_copy(torch, 2 * n * 4)) / 1e6  # an fp32 tensor of n
        for dtype, torch_dtype in () if args.launch_only else ((f32, torch.float32), (bf16, torch.bfloat16)):
            add, saxpy = make_kernels(dtype)
            itemsize = torch.tensor([], dtype=torch_dtype).element_size()
            moved = 3 * n * itemsize
            xt = torch.randn(n, device="cuda").to(torch_dtype)
            yt = torch.randn(n, device="cuda").to(torch_dtype)
            zt = torch.full((n,), float("nan"), device="cuda", dtype=torch_dtype)
            a = 1.75
            torch.cuda.synchronize()
            expected_add = (xt.float() + yt.float()).to(torch_dtype)
            expected_saxpy = (a * xt.float() + yt.float()).to(torch_dtype)
            x, y = api.from_dlpack(xt), api.from_dlpack(yt)

            def record(workload: str, peer: str, ms: float, check: Any, expected: Any) -> None:
                torch.cuda.synchronize()
                # bf16 kernels may round after each operation (as cutile's do, in bf16
                # arithmetic); the reference rounds once: allow a few bf16 ulps.
                tolerance = 3e-2 if torch_dtype == torch.bfloat16 else 1e-5
                ok = torch.allclose(check.float(), expected.float(), rtol=tolerance, atol=tolerance)
                gbs = moved / ms / 1e6
                rows.append((f"{workload} {dtype}", peer, f"{gbs:8.0f} GB/s  {gbs / copy_gbs:6.1%}" + ("" if ok else "  WRONG"), gbs))

            record("add", "torch", device_time_ms(lambda: torch.add(xt, yt, out=zt)), zt, expected_add)
            record("saxpy", "torch", device_time_ms(lambda: torch.add(yt, xt, alpha=a, out=zt)), zt, expected_saxpy)
            for block in (1024, 4096):
                grid = (triton.cdiv(n, block),)
                zt.fill_(float("nan"))
                record("add", f"triton {block}", device_time_ms(lambda: triton_add[grid](xt, yt, zt, n, BLOCK=block)), zt, expected_add)
                zt.fill_(float("nan"))
                record("saxpy", f"triton {block}", device_time_ms(lambda: triton_saxpy[grid](xt, yt, zt, a, n, BLOCK=block)), zt, expected_saxpy)
            if ct is not None:
                for tile in (1024, 4096):
                    grid3 = (n // tile, 1, 1)
                    zt.fill_(float("nan"))
                    record("add", f"cuTile Python {tile}", device_time_ms(
                        lambda: ct.launch(torch_stream, grid3, ct_add, (xt, yt, zt, tile))), zt, expected_add)
                    zt.fill_(float("nan"))
                    record("saxpy", f"cuTile Python {tile}", device_time_ms(
                        lambda: ct.launch(torch_stream, grid3, ct_saxpy, (xt, yt, zt, a, tile))), zt, expected_saxpy)
            for tile in (1024, 4096):
                zt.fill_(float("nan"))
                z = api.from_dlpack(zt).partition([tile])
                for kernel, extra, workload, expected in ((add, {}, "add", expected_add), (saxpy, {"a": a}, "saxpy", expected_saxpy)):
                    launch = kernel(z, x, y, **extra)
                    plan = launch.plan()
                    values = {"z": z._tensor, "x": x, "y": y, **extra}
                    launch.sync()  # compile and load once
                    ms = device_time_ms(lambda: _gpu.enqueue(kernel, plan, values, launch._options, stream))
                    record(workload, f"cutile {tile}", ms, zt, expected)
                    zt.fill_(float("nan"))
                z.unpartition()
            del xt, yt, zt, x, y

    # Host cost per launch, 1024 elements, a host loop of launches; the loops are
    # interleaved in each repeat so that drifts of the machine's speed hit all alike.
    count = 5000
    small = {"x": torch.randn(1024, device="cuda"), "y": torch.randn(1024, device="cuda"), "z": torch.empty(1024, device="cuda")}

    with torch.cuda.stream(torch_stream):
        add32, _ = make_kernels(f32)
        # cutile's arms launch on cutile's own memory: a launch on torch memory runs on
        # torch's current stream through the Python path (its ordering with torch's work)
        xs, ys = api.randn([1024], seed=1), api.randn([1024], seed=2)
        zs = api.empty([1024], dtype=f32).partition([1024])

        def cutile_sync(k: int) -> None:
            nonlocal zs
            for _ in range(k):
                zs, _x, _y = add32(zs, xs, ys).sync()

        def cutile_batch(k: int) -> None:
            nonlocal zs
            with cutile.batch():
                for _ in range(k):
                    zs, _x, _y = add32(zs, xs, ys).sync()

        def cutile_enqueue(k: int) -> None:
            launch = add32(zs, xs, ys)
            plan = launch.plan()
            launch.sync()
            values = {"z": zs._tensor, "x": xs, "y": ys}
            options = launch._options
            for _ in range(k):
                _gpu.enqueue(add32, plan, values, options, stream)

        def ct_launch(k: int) -> None:
            args3 = (small["x"], small["y"], small["z"], 1024)
            for _ in range(k):
                ct.launch(torch_stream, (1, 1, 1), ct_add, args3)

        def ct_launch_sync(k: int) -> None:
            args3 = (small["x"], small["y"], small["z"], 1024)
            for _ in range(k):
                ct.launch(torch_stream, (1, 1, 1), ct_add, args3)
                torch_stream.synchronize()

        loops: list[tuple[str, Callable[[int], object]]] = [
            ("cutile: in cutile.batch(), add(z, x, y).sync()", cutile_batch),
            ("cutile: add(z, x, y).sync() (launch + wait)", cutile_sync),
            ("cutile: prepared enqueue (no checks; floor)", cutile_enqueue),
            ("torch.add(out=)", lambda k: [torch.add(small["x"], small["y"], out=small["z"]) for _ in range(k)]),
            ("triton add[grid](...)", lambda k: [triton_add[(1,)](small["x"], small["y"], small["z"], 1024, BLOCK=1024) for _ in range(k)]),
        ]
        if ct is not None:
            loops += [("cuTile Python: ct.launch", ct_launch),
                      ("cuTile Python: ct.launch + stream sync", ct_launch_sync)]
        for _, loop in loops:
            loop(200)  # warm-up
        samples: dict[str, list[float]] = {name: [] for name, _ in loops}
        for _ in range(args.launch_repeats):
            for name, loop in loops:
                torch.cuda.synchronize()
                start = time.perf_counter()
                loop(count)
                torch.cuda.synchronize()  # the batch's end waits too: count it for every peer
                samples[name].append((time.perf_counter() - start) / count * 1e6)
        overhead = [(name, statistics.median(samples[name])) for name, _ in loops]

    device = torch.cuda.get_device_name()
    print(f"\nElement-wise bandwidth, n = 2^{args.log2n}, {device}; device-to-device copy ceiling "
          f"{copy_gbs:.0f} GB/s (torch copy_, bytes read + written)")
    print(f"{'workload':<14}{'peer':<22}{'bandwidth, fraction of copy'}")
    for workload, peer, text, _ in rows:
        print(f"{workload:<14}{peer:<22}{text}")
    print(f"\nHost cost per launch (1024-element add, loop of {count}, median of {args.launch_repeats} interleaved)")
    for name, us in overhead:
        print(f"{name:<50}{us:8.2f} µs")
    by_name = dict(overhead)
    if ct is not None:
        for ours, theirs in (("cutile: in cutile.batch(), add(z, x, y).sync()", "cuTile Python: ct.launch"),
                             ("cutile: add(z, x, y).sync() (launch + wait)", "cuTile Python: ct.launch + stream sync")):
            ratio = by_name[ours] / by_name[theirs]
            print(f"{ours} vs {theirs}: {ratio:.2f}x (target <= 1): {'met' if ratio <= 1 else 'NOT met'}")
    best = {w: max(g for ww, p, _, g in rows if ww == w and p.startswith('cutile')) for w, *_ in rows}
    for workload, gbs in best.items():
        print(f"best cutile {workload}: {gbs / copy_gbs:.1%} of copy (target 97%): {'met' if gbs >= 0.97 * copy_gbs else 'NOT met'}")
    wrong = [f"{workload} {peer}" for workload, peer, text, _ in rows if text.endswith("WRONG")]
    if wrong:  # a missed target is a report; a wrong result is a failure
        print(f"WRONG results: {', '.join(wrong)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
