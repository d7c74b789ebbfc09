#!/usr/bin/env python3
"""Safe schedules against their unsafe twins and the peers, in one run on one GPU.

- GEMM, M = N = K = 8192 (default), fp16 and bf16 in and out, fp32 accumulate: the safe
  persistent kernel on a mapped partition (``map([G, 1], blocks=SMs)``, grouped order)
  against its unsafe twin (the same tile shape, hints, grid and tile order, computed by
  the kernel and stored through ``z.partition``) and cuBLAS (``torch.matmul``), for each
  config tried;
- row softmax and LayerNorm, 16384 x 8192 fp32: the safe chunked two-pass kernels on an
  owned axis (``map([1, OWNED], blocks=n)``) against their unsafe twins and torch, as a
  fraction of the device-to-device copy bandwidth measured in the same run.

Each safe/unsafe pair is timed alternately, ``--repeats`` times, and the ratio reported is
the median of the paired ratios (unsafe time / safe time: above 1.00 the safe kernel is
faster). Device times are `cutile.bench`'s (``do_bench_paired`` for the pairs, ``do_bench``
for the peers and the copy): medians, on cutile's stream, the L2 flushed before each rep.
Targets (issue "Safe and fast together"): every safe kernel within 1% of its twin; the
safe GEMM at least 1.00x cuBLAS in fp16 and bf16 with its best config.

Needs a GPU and torch (a benchmark peer, never a dependency). On the GPU machine:
``scripts/on_gpu_machine.sh python3 scripts/bench_schedules.py``. Kernels are defined in
factories, so this file keeps annotations evaluated at definition (no
``from __future__ import annotations``).
"""

import argparse
import sys
from collections.abc import Callable
from typing import Any

from _bench_common import torch_copy

#: GEMM configs: (BM, BN, BK, group, hints). The 2026-12-01 H200 anchors: 128x256x64 with 8
#: worker warps and group 16 was the best unsafe persistent config (1.015x cuBLAS).
GEMM_CONFIGS: list[tuple[int, int, int, int, dict[str, Any]]] = [
    (128, 256, 64, 16, {"occupancy": 1, "sm_90": {"num_worker_warps": 8}}),
    (128, 256, 32, 8, {"occupancy": 1, "sm_90": {"num_worker_warps": 8}}),
    (256, 128, 64, 16, {"occupancy": 1, "sm_90": {"num_worker_warps": 8}}),
    (128, 128, 64, 16, {"occupancy": 1}),
]
#: Row-kernel configs: (column chunk, blocks per SM, hints).
ROW_CONFIGS: list[tuple[int, int, dict[str, Any]]] = [
    (1024, 4, {"occupancy": 4}),
    (2048, 2, {"occupancy": 2}),
    (1024, 8, {"occupancy": 8}),
]


def gemm_kernels(dtype: Any, hints: dict[str, Any]) -> tuple[Any, Any]:
    import cutile
    from cutile.core import Constant, Mut, Tensor, bid, cdiv, f32, minimum, mma, num_blocks, zeros

    # (the mypy plugin reads literal dtypes only: hence the `type: ignore[misc]`)
    @cutile.entry(hints=hints)
    def safe_gemm(z: Mut[Tensor[dtype, ["BM", "BN"]]],  # type: ignore[misc, name-defined]
                  x: Tensor[dtype, [-1, "K"]], y: Tensor[dtype, ["K", -1]],  # type: ignore[misc, name-defined]
                  BM: Constant[int], BN: Constant[int], BK: Constant[int], K: Constant[int]) -> None:
        part_x = x.partition([BM, BK])
        part_y = y.partition([BK, BN])
        for idx in z.tiles():
            bm, bn = idx
            acc = zeros((BM, BN), f32)
            for k in range(cdiv(K, BK)):
                acc = mma(part_x.load([bm, k]), part_y.load([k, bn]), acc)
            z.store(acc.astype(dtype), idx)

    @cutile.entry(unsafe=True, hints=hints)
    def unsafe_gemm(z: Mut[Tensor[dtype, ["BM", "BN"]]],  # type: ignore[misc, name-defined]
                    x: Tensor[dtype, [-1, "K"]], y: Tensor[dtype, ["K", -1]],  # type: ignore[misc, name-defined]
                    BM: Constant[int], BN: Constant[int], BK: Constant[int], K: Constant[int],
                    GROUP: Constant[int]) -> None:
        part_x = x.partition([BM, BK])
        part_y = y.partition([BK, BN])
        part_z = z.partition([BM, BN])
        tiles_m = part_z.num_tiles(0)
        tiles_n = part_z.num_tiles(1)
        in_group = GROUP * tiles_n
        for tile in range(bid(0), tiles_m * tiles_n, num_blocks(0)):
            first_m = (tile // in_group) * GROUP
            group_m = minimum(tiles_m - first_m, GROUP)
            pm = first_m + (tile % in_group) % group_m
            pn = (tile % in_group) // group_m
            acc = zeros((BM, BN), f32)
            for k in range(cdiv(K, BK)):
                acc = mma(part_x.load([pm, k]), part_y.load([k, pn]), acc)
            part_z.store((pm, pn), acc.astype(dtype))

    return safe_gemm, unsafe_gemm


def row_kernels(hints: dict[str, Any]) -> dict[str, Any]:
    import cutile
    from cutile.core import (Constant, Mut, Tensor, bid, exp, f32, full, max, maximum, num_blocks, rsqrt, sum,
                             zeros)

    @cutile.entry(hints=hints)
    def safe_softmax(z: Mut[Tensor[f32, [1, "BN"]]], x: Tensor[f32, [-1, -1]], BN: Constant[int]) -> None:
        for idx in z.tiles():
            r, _ = idx
            row_max = full((1, 1), -float("inf"), f32)
            row_sum = zeros((1, 1), f32)
            for c in range(z.num_tiles(1)):
                t = x.load(index=(r, c), shape=(1, BN), padding="neg_inf")
                new_max = maximum(row_max, max(t, axis=1, keepdims=True))
                row_sum = row_sum * exp(row_max - new_max) + sum(exp(t - new_max), axis=1, keepdims=True)
                row_max = new_max
            for c in range(z.num_tiles(1)):
                t = x.load(index=(r, c), shape=(1, BN), padding="neg_inf")
                z.store(exp(t - row_max) / row_sum, (r, c))

    @cutile.entry(unsafe=True, hints=hints)
    def unsafe_softmax(z: Mut[Tensor[f32, [1, "BN"]]], x: Tensor[f32, [-1, -1]], BN: Constant[int]) -> None:
        part_z = z.partition([1, BN])
        for r in range(bid(0), part_z.num_tiles(0), num_blocks(0)):
            row_max = full((1, 1), -float("inf"), f32)
            row_sum = zeros((1, 1), f32)
            for c in range(part_z.num_tiles(1)):
                t = x.load(index=(r, c), shape=(1, BN), padding="neg_inf")
                new_max = maximum(row_max, max(t, axis=1, keepdims=True))
                row_sum = row_sum * exp(row_max - new_max) + sum(exp(t - new_max), axis=1, keepdims=True)
                row_max = new_max
            for c in range(part_z.num_tiles(1)):
                t = x.load(index=(r, c), shape=(1, BN), padding="neg_inf")
                part_z.store((r, c), exp(t - row_max) / row_sum)

    @cutile.entry(hints=hints)
    def safe_layernorm(z: Mut[Tensor[f32, [1, "BN"]]], x: Tensor[f32, [-1, -1]], w: Tensor[f32, [-1]],
                       b: Tensor[f32, [-1]], eps: f32, BN: Constant[int]) -> None:
        n = x.shape[1].astype(f32)
        for idx in z.tiles():
            r, _ = idx
            total = zeros((1, 1), f32)
            squares = zeros((1, 1), f32)
            for c in range(z.num_tiles(1)):
                t = x.load(index=(r, c), shape=(1, BN))
                total = total + sum(t, axis=1, keepdims=True)
                squares = squares + sum(t * t, axis=1, keepdims=True)
            mean = total / n
            scale = rsqrt(maximum(squares / n - mean * mean, 0.0) + eps)
            for c in range(z.num_tiles(1)):
                t = x.load(index=(r, c), shape=(1, BN))
                weight = w.load(index=(c,), shape=(BN,)).reshape((1, BN))
                bias = b.load(index=(c,), shape=(BN,)).reshape((1, BN))
                z.store((t - mean) * scale * weight + bias, (r, c))

    @cutile.entry(unsafe=True, hints=hints)
    def unsafe_layernorm(z: Mut[Tensor[f32, [1, "BN"]]], x: Tensor[f32, [-1, -1]], w: Tensor[f32, [-1]],
                         b: Tensor[f32, [-1]], eps: f32, BN: Constant[int]) -> None:
        n = x.shape[1].astype(f32)
        part_z = z.partition([1, BN])
        for r in range(bid(0), part_z.num_tiles(0), num_blocks(0)):
            total = zeros((1, 1), f32)
            squares = zeros((1, 1), f32)
            for c in range(part_z.num_tiles(1)):
                t = x.load(index=(r, c), shape=(1, BN))
                total = total + sum(t, axis=1, keepdims=True)
                squares = squares + sum(t * t, axis=1, keepdims=True)
            mean = total / n
            scale = rsqrt(maximum(squares / n - mean * mean, 0.0) + eps)
            for c in range(part_z.num_tiles(1)):
                t = x.load(index=(r, c), shape=(1, BN))
                weight = w.load(index=(c,), shape=(BN,)).reshape((1, BN))
                bias = b.load(index=(c,), shape=(BN,)).reshape((1, BN))
                part_z.store((r, c), (t - mean) * scale * weight + bias)

    return {"softmax": (safe_softmax, unsafe_softmax), "layernorm": (safe_layernorm, unsafe_layernorm)}


def compile_only(args: argparse.Namespace, gemm_configs: list[Any], row_configs: list[Any]) -> int:
    """Compiles each safe kernel and its twin for ``args.compile_only`` from placeholders."""
    import cutile
    from cutile import api
    from cutile.core import bf16, f16, f32

    blocks = 132
    count = 0
    if args.only in (None, "gemm"):
        n = args.size
        for dtype in (f16, bf16):
            for bm, bn, bk, group, hints in gemm_configs:
                safe, unsafe = gemm_kernels(dtype, hints)
                z = api.meta([n, n], dtype).partition([bm, bn])
                operands = (api.meta([n, n], dtype), api.meta([n, n], dtype))
                cutile.compile(safe, z.map([group, 1], blocks=blocks), *operands, BK=bk, arch=args.compile_only)
                cutile.compile(unsafe, z, *operands, BK=bk, GROUP=group, arch=args.compile_only)
                count += 2
    if args.only in (None, "rows"):
        shape = [args.rows, args.columns]
        for chunk, per_sm, hints in row_configs:
            for name, (safe, unsafe) in row_kernels(hints).items():
                extra = (api.meta([args.columns], f32), api.meta([args.columns], f32), 1e-5) \
                    if name == "layernorm" else ()
                z = api.meta(shape, f32).partition([1, chunk])
                mapped = z.map([1, cutile.OWNED], blocks=per_sm * blocks)
                cutile.compile(safe, mapped, api.meta(shape, f32), *extra, arch=args.compile_only)
                cutile.compile(unsafe, z, api.meta(shape, f32), *extra, arch=args.compile_only)
                count += 2
    print(f"compiled {count} kernels for {args.compile_only}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=8192, help="M = N = K of the GEMMs")
    parser.add_argument("--rows", type=int, default=16384)
    parser.add_argument("--columns", type=int, default=8192)
    parser.add_argument("--repeats", type=int, default=15, help="paired timings per safe/unsafe pair")
    parser.add_argument("--only", choices=("gemm", "rows"), help="run one part only")
    parser.add_argument("--configs", type=int, default=None, help="try only the first N configs of each part")
    parser.add_argument("--compile-only", metavar="ARCH", help="compile every kernel for ARCH (e.g. sm_90) from "
                        "placeholders and stop: no GPU, no torch (what CI runs)")
    args = parser.parse_args()
    gemm_configs, row_configs = GEMM_CONFIGS[:args.configs], ROW_CONFIGS[:args.configs]
    if args.compile_only:
        return compile_only(args, gemm_configs, row_configs)

    import torch

    import cutile
    from cutile import _gpu, api, bench
    from cutile.core import bf16, f16
    from cuda_core import Device

    if cutile.backend() != "gpu":
        print("bench_schedules.py needs a GPU", file=sys.stderr)
        return 2
    stream = _gpu.default_stream()
    torch_stream = torch.cuda.ExternalStream(int(stream.handle))
    sms = Device(0).sm_count

    def median_ms(enqueue: Callable[[], Any]) -> float:
        return bench.do_bench(enqueue, warmup=3, reps=args.repeats).median_ms

    def enqueuer(launch: Any) -> Callable[[], None]:
        """The launch's kernel enqueued again and again on the same arguments (compiled
        and loaded once by running the launch)."""
        kernel, plan = launch.kernel, launch.plan()
        values = {n: (v._tensor if isinstance(v, cutile.Partition) else v) for n, v in launch.arguments.items()}
        options = launch._options
        launch.sync()
        return lambda: _gpu.enqueue(kernel, plan, values, options, stream)

    def paired(safe: Callable[[], None], unsafe: Callable[[], None]) -> tuple[float, float, float]:
        """(safe ms, unsafe ms, median of unsafe/safe) over alternating timings."""
        result = bench.do_bench_paired(safe, unsafe, warmup=3, reps=args.repeats)
        return result.a.median_ms, result.b.median_ms, result.ratio

    print(f"device: {torch.cuda.get_device_name(0)} ({sms} SMs), torch {torch.__version__}")
    failures = 0
    with torch.cuda.stream(torch_stream):
        if args.only in (None, "gemm"):
            n = args.size
            flops = 2 * n ** 3
            print(f"\nGEMM {n}^3 (TFLOP/s; 'vs twin' = unsafe time / safe time, median of {args.repeats} pairs)")
            print(f"{'dtype':6} {'config':24} {'safe':>8} {'unsafe':>8} {'cuBLAS':>8} {'vs twin':>8} {'vs cuBLAS':>10}")
            for dtype, torch_dtype in ((f16, torch.float16), (bf16, torch.bfloat16)):
                xt = torch.randn(n, n, device="cuda").to(torch_dtype)
                yt = torch.randn(n, n, device="cuda").to(torch_dtype)
                zt = torch.empty(n, n, device="cuda", dtype=torch_dtype)
                torch.cuda.synchronize()
                expected = torch.matmul(xt, yt)
                cublas_ms = median_ms(lambda: torch.matmul(xt, yt, out=zt))
                x, y = api.from_dlpack(xt), api.from_dlpack(yt)
                best = 0.0
                for bm, bn, bk, group, hints in gemm_configs:
                    safe, unsafe = gemm_kernels(dtype, hints)
                    zt.fill_(float("nan"))
                    z_safe = api.from_dlpack(zt).partition([bm, bn]).map([group, 1], blocks=sms)
                    safe_run = enqueuer(safe(z_safe, x, y, BK=bk))
                    torch.cuda.synchronize()
                    ok = torch.allclose(zt.float(), expected.float(), rtol=2e-2, atol=2e-1)
                    z_unsafe = z_safe.unpartition().partition([bm, bn])
                    unsafe_run = enqueuer(unsafe(z_unsafe, x, y, BK=bk, GROUP=group).grid(sms))
                    safe_ms, unsafe_ms, vs_twin = paired(safe_run, unsafe_run)
                    torch.cuda.synchronize()  # the twin ran last: check its result too
                    ok = ok and torch.allclose(zt.float(), expected.float(), rtol=2e-2, atol=2e-1)
                    z_unsafe.unpartition()
                    safe_tf, unsafe_tf, cublas_tf = (flops / ms / 1e9 for ms in (safe_ms, unsafe_ms, cublas_ms))
                    best = max(best, cublas_ms / safe_ms)
                    config = f"{bm}x{bn}x{bk} g{group} " + ("nww8" if "sm_90" in hints else "occ1")
                    print(f"{dtype.name:6} {config:24} {safe_tf:8.0f} {unsafe_tf:8.0f} {cublas_tf:8.0f} "
                          f"{vs_twin:8.3f} {cublas_ms / safe_ms:9.3f}x" + ("" if ok else "  WRONG"))
                    failures += not ok
                print(f"{dtype.name:6} best safe config: {best:.3f}x cuBLAS "
                      f"({'meets' if best >= 1.0 else 'misses'} the 1.00x target)")
                del xt, yt, zt, x, y, expected

        if args.only in (None, "rows"):
            rows, columns = args.rows, args.columns
            moved = 2 * rows * columns * 4  # each kernel reads x and writes z once at best
            copy_ms = median_ms(torch_copy(torch, moved))
            copy_gbs = moved / copy_ms / 1e6
            print(f"\nrow kernels {rows}x{columns} f32 (fraction of copy bandwidth, {copy_gbs:.0f} GB/s; "
                  f"'vs twin' = unsafe time / safe time)")
            print(f"{'kernel':10} {'config':20} {'safe':>7} {'unsafe':>7} {'torch':>7} {'vs twin':>8} {'vs torch':>9}")
            xt = torch.randn(rows, columns, device="cuda")
            wt, bt = torch.randn(columns, device="cuda"), torch.randn(columns, device="cuda")
            zt = torch.empty_like(xt)
            torch.cuda.synchronize()
            references = {"softmax": torch.softmax(xt, dim=1),
                          "layernorm": torch.nn.functional.layer_norm(xt, (columns,), wt, bt, 1e-5)}
            torch_ms = {"softmax": median_ms(lambda: torch.softmax(xt, dim=1)),
                        "layernorm": median_ms(lambda: torch.nn.functional.layer_norm(xt, (columns,), wt, bt, 1e-5))}
            x, w, b = api.from_dlpack(xt), api.from_dlpack(wt), api.from_dlpack(bt)
            for chunk, per_sm, hints in row_configs:
                kernels = row_kernels(hints)
                for name, (safe, unsafe) in kernels.items():
                    extra = (w, b, 1e-5) if name == "layernorm" else ()
                    zt.fill_(float("nan"))
                    z_safe = api.from_dlpack(zt).partition([1, chunk]).map([1, cutile.OWNED], blocks=per_sm * sms)
                    safe_run = enqueuer(safe(z_safe, x, *extra))
                    torch.cuda.synchronize()
                    ok = torch.allclose(zt, references[name], rtol=1e-4, atol=1e-5)
                    z_unsafe = z_safe.unpartition().partition([1, chunk])
                    unsafe_run = enqueuer(unsafe(z_unsafe, x, *extra).grid(per_sm * sms))
                    safe_ms, unsafe_ms, vs_twin = paired(safe_run, unsafe_run)
                    torch.cuda.synchronize()
                    ok = ok and torch.allclose(zt, references[name], rtol=1e-4, atol=1e-5)
                    z_unsafe.unpartition()
                    config = f"{chunk} cols, {per_sm}/SM, occ{hints['occupancy']}"
                    print(f"{name:10} {config:20} {copy_ms / safe_ms:7.2f} {copy_ms / unsafe_ms:7.2f} "
                          f"{copy_ms / torch_ms[name]:7.2f} {vs_twin:8.3f} {torch_ms[name] / safe_ms:8.2f}x"
                          + ("" if ok else "  WRONG"))
                    failures += not ok
    print("\ntargets: each safe kernel within 1% of its twin (vs twin >= 0.99); safe GEMM >= 1.00x cuBLAS")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
