#!/usr/bin/env python3
"""GEMV (M <= 16) and split-K matmul of cutile_kernels against copy bandwidth and cuBLAS, in one run.

- ``small_m_matmul``: for M in {1, 16} and the LLM shapes (N, K) in {(4096, 4096),
  (11008, 4096), (4096, 11008), (14336, 4096), (151936, 2560)}, bf16, y = x @ W.T with
  the weight W stored [N, K] and passed as ``W.T``: the GB/s of weight read (weight
  bytes / time) against the bandwidth of a device-to-device copy of the weight (bytes
  read + written / time, cuda_core ``DeviceMemory.copy_from``), and against torch
  ``F.linear`` (cuBLAS) where torch is installed. Target (issue 15): >= 0.90x of copy.
- ``split_k_matmul``: small M·N, large K, bf16: TFLOP/s against ``torch.matmul``.

Every result is checked against numpy (float32 on the host, from the same bf16
inputs) before it is timed; a WRONG row makes the exit status 1. Times are medians of
`cutile.bench.do_bench` over the returned launch/op (device time between CUDA events,
L2 flushed before each rep). ``--sweep`` also times a set of other configs per shape
(and prints the best), ``--tune SECONDS`` runs a `cutile.tune.search` per shape over
the module's space (pruned for the shape, with that budget) and prints the winners as
JSON. ``--smoke`` runs tiny shapes on the CPU interpreter (results checked, wall clock).

    scripts/on_gpu_machine.sh python3 scripts/bench_gemv.py [--sweep] [--tune 120]
"""

import argparse
import json
import math
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

GEMV_SHAPES = [(4096, 4096), (11008, 4096), (4096, 11008), (14336, 4096), (151936, 2560)]
SPLIT_K_SHAPES = [(256, 256, 16384), (128, 512, 16384), (512, 512, 8192), (64, 1024, 32768)]
SMOKE_GEMV_SHAPES = [(67, 300), (40, 130)]
SMOKE_SPLIT_K_SHAPES = [(40, 67, 300)]
# Merged over each shape's default config; those prune_for drops at a shape are left out there.
SWEEP_GEMV: list[dict[str, Any]] = (
    [{"method": "dot", "tile_m": 1, "tile_n": n, "tile_k": k, "split_k": 1} for n, k in ((8, 1024), (16, 256), (16, 512))]
    + [{"method": "dot", "tile_m": 1, "tile_n": 8, "tile_k": 512, **h}
       for h in ({"num_worker_warps": 8}, {"occupancy": 2}, {"latency": 4}, {"latency": 8})]
    + [{"method": "dot", "tile_m": 2, "tile_n": 8, "tile_k": 512, "split_k": 1}]
    + [{"method": "mma_t", "tile_m": m, "tile_n": n, "tile_k": k, "split_k": s}
       for m in (8, 16) for n, k in ((64, 256), (128, 128)) for s in (1, 2, 4)]
    + [{"method": "mma_t", "tile_m": 16, "tile_n": 64, "tile_k": 256, **h}
       for h in ({"num_worker_warps": 8}, {"occupancy": 2}, {"latency": 4})])
SWEEP_SPLIT_K: list[dict[str, Any]] = [
    {"tile_m": m, "tile_n": n, "tile_k": k, "split_k": s, "method": "mma"}
    for m, n, k in ((64, 64, 64), (128, 128, 64), (128, 64, 64), (64, 64, 128)) for s in (4, 8, 16, 32)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU interpreter (results checked)")
    parser.add_argument("--reps", type=int, default=50)
    parser.add_argument("--sweep", action="store_true", help="also time other configs per shape")
    parser.add_argument("--tune", type=float, default=0.0, metavar="SECONDS",
                        help="search each shape's config space for this many seconds")
    parser.add_argument("--only", choices=["gemv", "splitk"], help="run one of the two tables")
    args = parser.parse_args(argv)

    import os

    if args.smoke:
        os.environ["CUTILE_BACKEND"] = "interpreter"
    import cutile
    from cutile import api, bench, tune
    from cutile.core import bf16, f32
    from cutile_kernels import _gemv, _splitk

    on_gpu = cutile.backend() == "gpu"
    if not on_gpu and not args.smoke:
        print("bench_gemv.py needs a GPU (--smoke runs tiny shapes on the interpreter)", file=sys.stderr)
        return 2
    reps = args.reps if on_gpu else 2
    try:  # an optional peer, never a dependency
        import torch
        import torch.nn.functional as F  # noqa: N812 - torch's name
    except ImportError:
        torch = None
    peer = torch is not None and on_gpu and torch.cuda.is_available()

    def median_ms(fn: Callable[[], Any], stream: Any = None) -> float:
        return bench.do_bench(fn, warmup=5 if on_gpu else 1, reps=reps, stream=stream).median_ms

    copy_stream: Any = None
    if on_gpu:
        import cuda_core

        copy_stream = cuda_core.Stream.create()

    def copy_ms(nbytes: int) -> float:
        """One device-to-device copy of nbytes (cuda_core), or NaN on the interpreter."""
        if not on_gpu:
            return math.nan
        import cuda_core

        source = cuda_core.DeviceBuffer.allocate(nbytes, stream=copy_stream)
        target = cuda_core.DeviceBuffer.allocate(nbytes, stream=copy_stream)
        try:
            return median_ms(lambda: target.copy_from(source, stream=copy_stream), stream=copy_stream)
        finally:
            copy_stream.synchronize()
            source.close()
            target.close()

    def host_values(t: Any) -> Any:
        return np.asarray(t.to_numpy(), dtype=np.float32)

    def check(out: Any, expected: Any) -> bool:
        got = host_values(out)
        scale = float(np.abs(expected).max()) or 1.0
        return bool(np.isfinite(got).all() and np.abs(got - expected).max() <= 2e-2 * scale)

    wrong = 0
    seed = 0

    def timed_config(run: Callable[[Any], Any], out: Any, expected: Any, config: dict[str, Any]) -> tuple[float, bool]:
        """(median ms, correct) of one config: checked first, then timed on the returned op."""
        run(config).sync()
        correct = check(out, expected)
        return (median_ms(lambda: run(config)) if correct else math.nan), correct

    def tuned(name: str, space: Any, prune: Any, run: Callable[[Any], Any], out: Any, expected: Any) -> Any:
        def setup(config: tune.Config) -> Any:
            return lambda: run(dict(config))

        result = tune.search(space, setup, reference=lambda _: check(out, expected), prune=prune,
                             budget=args.tune, reps=max(5, reps // 2), paired_reps=max(5, reps // 2))
        print(f"  tuned {name}: {json.dumps(result.best)} "
              f"({sum(t.status == 'ok' for t in result.trials)} configs timed)")
        return dict(result.best)

    # -- GEMV -------------------------------------------------------------------------------------
    if args.only in (None, "gemv"):
        print(f"small_m_matmul (bf16, y = x @ W.T) on the {cutile.backend()} backend; "
              f"{'median of %d reps, L2 flushed' % reps if on_gpu else 'results checked only (wall clock)'}")
        print(f"{'M':>3} {'N':>7} {'K':>6}  {'copy GB/s':>9}  {'cutile GB/s':>11} {'of copy':>7}  "
              f"{'cuBLAS GB/s':>11} {'of copy':>7}  {'cutile/cuBLAS':>13}  config")
        worst = math.inf
        for n, k in (SMOKE_GEMV_SHAPES if args.smoke else GEMV_SHAPES):
            weight = api.randn([n, k], dtype=bf16, seed=seed)
            seed += 1
            weight_bytes = n * k * 2
            copy_gbs = 2 * weight_bytes / copy_ms(weight_bytes) / 1e6
            w_host = host_values(weight)
            for m in (1, 16):
                x = api.randn([m, k], dtype=bf16, seed=seed)
                seed += 1
                expected = host_values(x) @ w_host.T
                out = api.full([m, n], np.nan, dtype=bf16)

                def run(config: Any, x: Any = x, weight: Any = weight, out: Any = out) -> Any:
                    return _gemv.small_m_matmul(x, weight.T, out, config=config)

                configs = [_gemv.default_config(m, n, k, bf16)]
                if args.sweep:
                    keep = _gemv.prune_for(m, n, k)
                    configs += [c for c in ({**configs[0], **s} for s in SWEEP_GEMV) if keep(c) and c != configs[0]]
                if args.tune:
                    configs.append(tuned(f"M={m} N={n} K={k}", _gemv.space(bf16), _gemv.prune_for(m, n, k),
                                         run, out, expected))
                results = []
                for config in configs:
                    ms, correct = timed_config(run, out, expected, config)
                    wrong += not correct
                    results.append((ms if correct else math.inf, correct, config))
                best_ms, best_ok, best_config = min(results, key=lambda r: r[0])
                ours = weight_bytes / best_ms / 1e6 if best_ok else math.nan
                peer_gbs = math.nan
                if peer:
                    xt, wt = torch.from_dlpack(x), torch.from_dlpack(weight)
                    peer_gbs = weight_bytes / median_ms(lambda: F.linear(xt, wt)) / 1e6
                if on_gpu:
                    worst = min(worst, ours / copy_gbs)
                label = "" if best_ok else "  WRONG"
                print(f"{m:3d} {n:7d} {k:6d}  {copy_gbs:9.0f}  {ours:11.0f} {ours / copy_gbs:7.2f}  "
                      f"{peer_gbs:11.0f} {peer_gbs / copy_gbs:7.2f}  {ours / peer_gbs:13.2f}  "
                      f"{json.dumps(best_config)}{label}")
                if args.sweep and on_gpu:
                    for ms, correct, config in sorted(results, key=lambda r: r[0])[:3]:
                        print(f"      {weight_bytes / ms / 1e6:8.0f} GB/s  {json.dumps(config)}"
                              + ("" if correct else "  WRONG"))
            del weight, w_host
        if on_gpu:
            print(f"worst GEMV row: {worst:.2f}x of copy bandwidth (target >= 0.90x)")

    # -- split-K ----------------------------------------------------------------------------------
    if args.only in (None, "splitk"):
        print(f"\nsplit_k_matmul (bf16, out = a @ W.T, W stored [N, K]) on the {cutile.backend()} backend")
        print(f"{'M':>5} {'N':>5} {'K':>6}  {'cutile TFLOP/s':>14}  {'torch TFLOP/s':>13}  {'cutile/torch':>12}  config")
        for m, n, k in (SMOKE_SPLIT_K_SHAPES if args.smoke else SPLIT_K_SHAPES):
            a = api.randn([m, k], dtype=bf16, seed=seed)
            weight = api.randn([n, k], dtype=bf16, seed=seed + 1)
            seed += 2
            expected = host_values(a) @ host_values(weight).T
            out = api.full([m, n], np.nan, dtype=f32)

            def run_split(config: Any, a: Any = a, weight: Any = weight, out: Any = out) -> Any:
                return _splitk.split_k_matmul(a, weight.T, out, config=config)

            configs = [_splitk.default_config(m, n, k, bf16)]
            if args.sweep:
                keep_split = _splitk.prune_for(m, n, k)
                configs += [c for c in ({**configs[0], **s} for s in SWEEP_SPLIT_K) if keep_split(c) and c != configs[0]]
            if args.tune:
                configs.append(tuned(f"M={m} N={n} K={k}", _splitk.space(bf16), _splitk.prune_for(m, n, k), run_split,
                                     out, expected))
            results = []
            for config in configs:
                ms, correct = timed_config(run_split, out, expected, config)
                wrong += not correct
                results.append((ms if correct else math.inf, correct, config))
            best_ms, best_ok, best_config = min(results, key=lambda r: r[0])
            flops = 2 * m * n * k
            ours = flops / best_ms / 1e9 if best_ok else math.nan
            peer_tflops = math.nan
            if peer:
                at, wt = torch.from_dlpack(a), torch.from_dlpack(weight)
                peer_tflops = flops / median_ms(lambda: torch.matmul(at, wt.T)) / 1e9
            print(f"{m:5d} {n:5d} {k:6d}  {ours:14.1f}  {peer_tflops:13.1f}  {ours / peer_tflops:12.2f}  "
                  f"{json.dumps(best_config)}" + ("" if best_ok else "  WRONG"))

    print("results: " + ("OK" if not wrong else f"WRONG ({wrong} configs)"))
    return 0 if not wrong else 1


if __name__ == "__main__":
    sys.exit(main())
