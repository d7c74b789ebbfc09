#!/usr/bin/env python3
"""GEMV (M <= 16) kernels of cutile_kernels against copy bandwidth and cuBLAS, for both weight layouts; sweeps and writes their records.

- Cases: M in {1, 16} x (N, K) in {(4096, 4096), (11008, 4096), (4096, 11008), (14336,
  4096), (151936, 2560)} x the weight's layout: ``nk`` (stored [N, K], passed as
  ``w.T``: ``F.linear``'s layout) and ``kn`` (stored [K, N] row-major: ``x @ w``), bf16
  (``--dtype`` adds f16 or f32). The figure is the GB/s of weight read (weight bytes /
  time) as a fraction of a device-to-device copy of the weight (bytes read + written /
  time, cuda_core ``DeviceMemory.copy_from``). Target (issue 15): >= 0.90x.
- The table: ``cutile_kernels.matmul.launch`` (the config its record or default picks
  for the call) against cuBLAS (torch ``F.linear`` for nk, ``torch.matmul`` for kn).
- ``--sweep``: first, per case, every candidate config of `_gemv.SPACE` the bandwidth
  arithmetic leaves (tiles whose contiguous axis takes 16-byte vectors, splits of K
  for one to four blocks per SM, the hints), compiled ahead in ``--jobs`` threads, each
  checked then timed: one line per config with its fraction of copy. Per record bucket
  (`_gemv.gemv_bucket`) the winner is the config of the best geometric mean over the
  bucket's cases (no new shape is swept past ``--sweep-seconds``, so that the whole
  run stays within five minutes). ``--write`` merges the winners into
  ``records/<arch>/gemv.json`` after every shape (a run stopped by a time limit keeps
  the buckets it finished; the package's file, to commit; ``--records-dir``
  elsewhere), and the table is then made with the new record (matmul's choices
  forgotten and asked again).
- ``--tune SECONDS``: a `cutile.tune.search` per case over the whole space (pruned for
  the case) with that budget; its winners printed as JSON.
- ``--splitk``: also the split-K table (small M·N, large K: TFLOP/s against torch).
- ``--shapes NxK ...``: the weights' shapes instead of the five above (a model's, to
  sweep and record the buckets its projections fall in); ``--rows M ...``: the rows of
  the cases instead of 1 and 16.

Every result is checked against float64 at sampled columns before it is timed; a WRONG
row makes the exit status 1. Times are medians of `cutile.bench.do_bench` over the
returned launch/op (device time between CUDA events, L2 flushed before each rep;
``--flush clean`` leaves it clean, as a decode step's GEMV after other reads finds it).
``--smoke`` runs tiny shapes on the CPU interpreter (results checked, wall clock;
``--write`` then goes to a temporary folder).

    scripts/on_gpu_machine.sh python3 scripts/bench_gemv.py --sweep --write
"""

import argparse
import functools
import json
import math
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

GEMV_SHAPES = [(4096, 4096), (11008, 4096), (4096, 11008), (14336, 4096), (151936, 2560)]
SPLIT_K_SHAPES = [(256, 256, 16384), (128, 512, 16384), (512, 512, 8192), (64, 1024, 32768)]
SMOKE_GEMV_SHAPES = [(67, 300), (40, 130)]
SMOKE_SPLIT_K_SHAPES = [(40, 67, 300)]
TARGET = 0.90

# Candidate tiles (method, tile_m, tile_n, tile_k) per (layout, M class): the contiguous
# axis of each weight tile holds 128 bytes to 2 KiB of a row (16-byte vectors on every
# lane), and a K step moves 8-64 KiB.
TILES: dict[tuple[bool, int], list[tuple[str, int, int, int]]] = {
    (True, 1): [("dot", 1, 16, 512), ("dot", 1, 8, 1024), ("dot", 1, 32, 256), ("dot", 1, 8, 512),
                ("sum", 1, 32, 512), ("sum", 1, 64, 256), ("sum", 1, 16, 1024), ("sum", 1, 64, 512),
                ("mma_t", 8, 64, 256), ("mma_t", 8, 128, 128)],
    (True, 16): [("mma_t", 16, 64, 256), ("mma_t", 16, 128, 128), ("mma_t", 16, 128, 256), ("mma_t", 16, 64, 512),
                 ("mma_t", 16, 256, 64)],
    (False, 1): [("dot", 1, 256, 32), ("dot", 1, 512, 16), ("dot", 1, 128, 64), ("dot", 1, 64, 128),
                 ("dot", 1, 32, 256), ("sum", 1, 256, 64), ("sum", 1, 512, 32), ("sum", 1, 128, 128),
                 ("sum", 1, 256, 128), ("mma_t", 8, 128, 128), ("mma_t", 8, 64, 256), ("mma_t", 8, 256, 64)],
    (False, 16): [("mma_t", 16, 64, 256), ("mma_t", 16, 128, 128), ("mma_t", 16, 128, 256), ("mma_t", 16, 256, 128),
                  ("mma_t", 16, 64, 128), ("mma_t", 16, 256, 64)],
}
HINTS: list[dict[str, int]] = [{"num_worker_warps": 4, "occupancy": 1, "latency": 0},
                               {"num_worker_warps": 8, "occupancy": 1, "latency": 0},
                               {"num_worker_warps": 4, "occupancy": 2, "latency": 0},
                               {"num_worker_warps": 4, "occupancy": 1, "latency": 3}]


def space_value(values: tuple[Any, ...], wanted: int) -> int:
    """The space's value nearest ``wanted`` (the splits of a config are the space's)."""
    return int(min(values, key=lambda v: (abs(int(v) - wanted), v)))


def candidates(gemv: Any, weight_nk: bool, m: int, n: int, k: int, itemsize: int) -> list[dict[str, Any]]:
    """The sweep's configs for a case (made from the first shape of its bucket, so that
    every case of a bucket times the same ones): each tile with its default split, twice
    it, or one slice; the default hints on every tile, the others on the default split
    of each."""
    keep = gemv.prune_for(m, n, k, weight_nk=weight_nk, itemsize=itemsize)
    splits_allowed = gemv.SPACE.params["split_k"]
    found: dict[str, dict[str, Any]] = {}
    for method, tile_m, tile_n, tile_k in TILES[(weight_nk, 1 if m == 1 else 16)]:
        auto = gemv._splits(n, k, tile_n, tile_k)
        for splits in sorted({1, auto, 2 * auto}):
            for hints in (HINTS if splits == auto else HINTS[:1]):
                config = {"method": method, "tile_m": tile_m, "tile_n": tile_n, "tile_k": tile_k,
                          "split_k": space_value(splits_allowed, splits), **hints}
                if keep(config):
                    found.setdefault(json.dumps(config, sort_keys=True), config)
    return list(found.values())


def _shape(text: str) -> tuple[int, int]:
    """``NxK`` as (N, K), both positive."""
    try:
        n, k = (int(part) for part in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected NxK (e.g. 4096x2560), got {text!r}") from None
    if n < 1 or k < 1:
        raise argparse.ArgumentTypeError(f"N and K must be positive, got {text!r}")
    return n, k


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU interpreter (results checked)")
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--flush", choices=["write", "clean"], default="write",
                        help="the L2 flush before each rep (cutile.bench's flush_l2): a memset, or the memset "
                             "then a read sweep leaving the L2 clean")
    parser.add_argument("--dtype", nargs="+", default=["bf16"], choices=["bf16", "f16", "f32"])
    parser.add_argument("--layout", nargs="+", default=["nk", "kn"], choices=["nk", "kn"])
    parser.add_argument("--sweep", action="store_true", help="time every candidate config per case first")
    parser.add_argument("--write", action="store_true", help="with --sweep: merge the winners into the record")
    parser.add_argument("--records-dir", help="where --write goes (default: the package's records folder)")
    parser.add_argument("--jobs", type=int, default=16, help="tileiras compiles at once before the sweep")
    parser.add_argument("--tune", type=float, default=0.0, metavar="SECONDS",
                        help="search each case's config space for this many seconds")
    parser.add_argument("--splitk", action="store_true", help="also the split-K table")
    parser.add_argument("--rows", nargs="+", type=int, default=[1, 16], choices=range(1, 17), metavar="M",
                        help="the activations' rows (M, 1 to 16) of each case (default: 1 and 16)")
    parser.add_argument("--shapes", nargs="+", metavar="NxK", type=_shape,
                        help="the weights' (N, K) instead of the default five (e.g. a model's: 19456x2560)")
    parser.add_argument("--sweep-seconds", type=float, default=210.0,
                        help="the sweep starts no new shape past this many seconds (the run's table follows)")
    args = parser.parse_args(argv)
    if args.write and not args.sweep:
        parser.error("--write saves the winners of --sweep: give both")

    import os

    if args.smoke:
        os.environ["CUTILE_BACKEND"] = "interpreter"
    import cutile
    from cutile import api, bench, tune
    from cutile.core import bf16, f16, f32
    from cutile_kernels import _gemv, _splitk, matmul

    started = time.monotonic()
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
    dtypes = {"bf16": bf16, "f16": f16, "f32": f32}

    def median_ms(fn: Callable[[], Any], stream: Any = None) -> float:
        return bench.do_bench(fn, warmup=3 if on_gpu else 1, reps=reps, stream=stream, flush_l2=args.flush).median_ms

    copy_stream: Any = None
    if on_gpu:
        import cuda_core

        copy_stream = cuda_core.Stream.create()

    def copy_gbs(nbytes: int) -> float:
        """The bandwidth of a device-to-device copy of nbytes (read + written), or NaN on the interpreter."""
        if not on_gpu:
            return math.nan
        import cuda_core

        source = cuda_core.DeviceBuffer.allocate(nbytes, stream=copy_stream)
        target = cuda_core.DeviceBuffer.allocate(nbytes, stream=copy_stream)
        try:
            return 2 * nbytes / median_ms(lambda: target.copy_from(source, stream=copy_stream), stream=copy_stream) / 1e6
        finally:
            copy_stream.synchronize()
            source.close()
            target.close()

    wrong = 0
    seed = 0
    layouts = [name == "nk" for name in args.layout]
    shapes = args.shapes or (SMOKE_GEMV_SHAPES if args.smoke else GEMV_SHAPES)

    class Case:
        """One (dtype, layout, M, N, K): its operands on the device, the host copies for the gate."""

        def __init__(self, dtype: Any, weight_nk: bool, m: int, n: int, k: int, stored: Any, host_w: Any,
                     copy: float) -> None:
            nonlocal seed
            self.dtype, self.weight_nk, self.m, self.n, self.k, self.copy = dtype, weight_nk, m, n, k, copy
            self.itemsize = 4 if dtype is f32 else 2
            self.stored, self.host_w = stored, host_w
            self.b = stored.T if weight_nk else stored
            self.x = api.randn([m, k], dtype=dtype, seed=seed)
            seed += 1
            self.host_x = self.x.to_numpy()
            self.out = api.full([m, n], np.nan, dtype=dtype)
            self.bucket = _gemv.gemv_bucket((m, n, k, self.itemsize, int(weight_nk)))
            self.name = f"{dtype} {'nk' if weight_nk else 'kn'} M={m} N={n} K={k}"

        def correct(self) -> bool:
            return _gemv.check_sampled(self.out, self.host_x, self.host_w, self.weight_nk)

        def run(self, config: dict[str, Any]) -> Any:
            return _gemv.small_m_matmul(self.x, self.b, self.out, config=config)

        def through_matmul(self) -> Any:
            return matmul.launch(self.x, self.b, out=self.out)

        def fraction(self, ms: float) -> float:
            return self.n * self.k * self.itemsize / ms / 1e6 / self.copy

    refusals: tuple[type[BaseException], ...] = (cutile.CutileError,)
    if on_gpu:
        import cuda_core

        refusals += (cuda_core.CudaLaunchError, cuda_core.CudaOutOfMemoryError)

    def timed(case: Case, run: Callable[[], Any]) -> tuple[float, str]:
        """(median ms, "ok" | "WRONG" | "INVALID" | "UNTIMED"): checked first (out
        poisoned), then timed on the returned launch/op. INVALID: a config the compiler or
        the driver refuses (as `cutile.tune.search` marks it), printed with the reason;
        UNTIMED: cutile.bench refused its reps twice (a rep waited for the device), printed."""
        case.out = api.full([case.m, case.n], np.nan, dtype=case.dtype)
        try:
            run().sync()
        except refusals as exc:
            print(f"      refused: {type(exc).__name__}: {exc}")
            return math.nan, "INVALID"
        if not case.correct():
            return math.nan, "WRONG"
        try:
            return median_ms(run), "ok"
        except cutile.BenchError as first:  # a rep that waited for the device once: measured again
            print(f"      bench refused a rep ({first}); measuring again")
            try:
                return median_ms(run), "ok"
            except cutile.BenchError as exc:
                print(f"      refused again: {exc}")
                return math.nan, "UNTIMED"

    def make_cases(dtype: Any, n: int, k: int) -> list[Case]:
        nonlocal seed
        weight_bytes = n * k * (4 if dtype is f32 else 2)
        copy = copy_gbs(weight_bytes)
        made = []
        for weight_nk in layouts:
            stored = api.randn([n, k] if weight_nk else [k, n], dtype=dtype, seed=seed)
            seed += 1
            host_w = stored.to_numpy()
            made += [Case(dtype, weight_nk, m, n, k, stored, host_w, copy) for m in args.rows]
        return made

    # -- the sweep ----------------------------------------------------------------------------------
    bucket_times: dict[str, dict[str, list[float]]] = {}  # bucket -> config key -> ms per case (NaN: wrong)
    bucket_configs: dict[str, list[dict[str, Any]]] = {}
    records_dir = args.records_dir or (tempfile.mkdtemp() if args.smoke else None)  # (smoke: never the package's)
    tuner = _gemv.tuner(records_dir=records_dir)
    how_timed = f"median of {reps} reps, L2 flushed ({args.flush})" if on_gpu else "results checked only, wall clock"
    if args.sweep:
        print(f"sweep of the GEMV configs on the {cutile.backend()} backend "
              f"({how_timed}); "
              "fraction of copy bandwidth per config")
        arch = tuner.provenance.arch if on_gpu else "sm_90"

        def settle(bucket_times: dict[str, dict[str, list[float]]], *, final: bool) -> None:
            """Each bucket's winner so far (the best geometric mean over its cases),
            merged into the record with ``--write``: after every shape, so that a run
            stopped by its time limit keeps the buckets it finished; printed at the end."""
            winners: dict[str, tuple[dict[str, Any], float]] = {}
            for bucket, times in bucket_times.items():
                scored = [(sum(math.log(t) for t in ms) / len(ms), key, ms[0]) for key, ms in times.items()
                          if all(math.isfinite(t) for t in ms)]
                if scored:
                    _, key, first_ms = min(scored)
                    winners[bucket] = (json.loads(key), first_ms)
                    if final:
                        print(f"  winner of {bucket}: {key}")
            if not args.write or not winners:
                return
            path = tuner.record_path
            assert path is not None
            record = tune.Record(tuner.provenance)
            if path.exists():
                try:
                    record = tune.Record.load(path, tuner.provenance)  # merged into: runs add buckets
                except tune.TuneError as exc:
                    print(f"replacing {path}: {exc}")
            for bucket, (config, ms) in winners.items():
                record.winners[bucket] = tune.Winner(config, ms)
            record.save(path)
            tune.Record.load(path, tuner.provenance)  # it loads back, verified
            print(f"wrote {path} ({len(record.winners)} buckets)" + ("; matmul's choices are asked again" if final
                                                                      else ""), flush=True)
            _gemv.use_records(path.parent.parent)

        for name in args.dtype:
            dtype = dtypes[name]
            for n, k in shapes:
                if time.monotonic() - started > args.sweep_seconds:
                    print(f"  N={n} K={k}: not swept (past --sweep-seconds {args.sweep_seconds:g})")
                    continue
                cases = make_cases(dtype, n, k)
                for case in cases:
                    if case.bucket not in bucket_configs:
                        found = candidates(_gemv, case.weight_nk, case.m, n, k, case.itemsize)
                        bucket_configs[case.bucket] = found[:3] if args.smoke else found  # (the interpreter is slow)
                # tileiras runs as a process per compile: threads overlap them (smoke: the first shape, for sm_90)
                if args.jobs > 0 and (on_gpu or (n, k) == shapes[0]):
                    t0 = time.monotonic()
                    jobs: list[tuple[Any, tuple[Any, ...], dict[str, int]]] = []
                    for case in cases:  # (the launches are made here, in one thread; compiled in several)
                        for config in bucket_configs[case.bucket]:
                            try:
                                jobs += _gemv.launches_of(case.x, case.b, case.out, config)
                            except cutile.CutileError as exc:
                                print(f"    {json.dumps(config)}: {exc}")

                    def compile_one(launch: tuple[Any, tuple[Any, ...], dict[str, int]]) -> bool:
                        kernel, arguments, constants = launch
                        try:
                            cutile.compile(kernel, *arguments, arch=arch, **constants)
                        except cutile.CutileError:
                            return False  # (timed below, where the error is printed)
                        return True

                    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
                        compiled = sum(pool.map(compile_one, jobs))
                    print(f"  N={n} K={k}: compiled {compiled} of {len(jobs)} kernels in "
                          f"{time.monotonic() - t0:.0f} s", flush=True)
                for case in cases:
                    print(f"  {case.name} (copy {case.copy:.0f} GB/s), bucket {case.bucket}:")
                    times = bucket_times.setdefault(case.bucket, {})
                    for config in bucket_configs[case.bucket]:
                        ms, status = timed(case, functools.partial(case.run, config))
                        wrong += status == "WRONG"
                        times.setdefault(json.dumps(config, sort_keys=True), []).append(ms)
                        figure = f"{case.fraction(ms):5.2f}" if on_gpu and status == "ok" else "  -  "
                        print(f"    {figure}  {json.dumps(config)}" + ("" if status == "ok" else f"  {status}"),
                              flush=True)
                settle(bucket_times, final=False)
        settle(bucket_times, final=True)

    # -- searches -----------------------------------------------------------------------------------
    if args.tune:
        for name in args.dtype:
            for n, k in shapes:
                for case in make_cases(dtypes[name], n, k):
                    keep = _gemv.prune_for(case.m, n, k, weight_nk=case.weight_nk, itemsize=case.itemsize)

                    def setup(config: tune.Config, case: Case = case) -> Any:
                        return lambda: case.run(dict(config))

                    try:
                        result = tune.search(_gemv.SPACE, setup, reference=lambda _, case=case: case.correct(),
                                             prune=keep, budget=args.tune, reps=max(5, reps // 2),
                                             paired_reps=max(5, reps // 2), flush_l2=args.flush)
                    except tune.TuneError:  # (its message lists every config tried)
                        print(f"  tuned {case.name}: no valid config within {args.tune:g} s")
                        continue
                    print(f"  tuned {case.name}: {json.dumps(result.best)} "
                          f"({sum(t.status == 'ok' for t in result.trials)} configs timed)")

    # -- the table: matmul's choice --------------------------------------------------------------
    print(f"\ncutile_kernels.matmul (M <= 16: the GEMV kernels) on the {cutile.backend()} backend; "
          "GB/s of weight read as a fraction of copy")
    print(f"{'dtype':>5} {'w':>2} {'M':>3} {'N':>7} {'K':>6}  {'copy GB/s':>9}  {'cutile':>6}  {'cuBLAS':>6}  "
          f"{'cutile/cuBLAS':>13}  config")
    worst = math.inf
    for name in args.dtype:
        for n, k in shapes:
            for case in make_cases(dtypes[name], n, k):
                config = _gemv.choose(case.m, n, k, case.dtype, weight_nk=case.weight_nk)
                ms, status = timed(case, case.through_matmul)
                ok = status == "ok"
                wrong += not ok  # (matmul's own choice must run)
                ours = case.fraction(ms) if ok and on_gpu else math.nan
                theirs = math.nan
                if peer:
                    xt, wt = torch.from_dlpack(case.x), torch.from_dlpack(case.stored)
                    theirs = case.fraction(median_ms(
                        (lambda: F.linear(xt, wt)) if case.weight_nk else (lambda: torch.matmul(xt, wt))))
                if on_gpu:
                    worst = min(worst, ours)
                print(f"{name:>5} {'nk' if case.weight_nk else 'kn':>2} {case.m:3d} {n:7d} {k:6d}  {case.copy:9.0f}  "
                      f"{ours:6.2f}  {theirs:6.2f}  {ours / theirs:13.2f}  {json.dumps(config)}"
                      + ("" if ok else f"  {status}"), flush=True)
    if on_gpu:
        print(f"worst GEMV row: {worst:.2f}x of copy bandwidth (target >= {TARGET:.2f}x)"
              f"{'' if worst >= TARGET else ' -- NOT MET'}")

    # -- split-K ------------------------------------------------------------------------------------
    if args.splitk:
        print(f"\nsplit_k_matmul (bf16, out = a @ W.T, W stored [N, K]) on the {cutile.backend()} backend")
        print(f"{'M':>5} {'N':>5} {'K':>6}  {'cutile TFLOP/s':>14}  {'torch TFLOP/s':>13}  {'cutile/torch':>12}  config")
        for m, n, k in (SMOKE_SPLIT_K_SHAPES if args.smoke else SPLIT_K_SHAPES):
            a = api.randn([m, k], dtype=bf16, seed=seed)
            weight = api.randn([n, k], dtype=bf16, seed=seed + 1)
            seed += 2
            expected = np.asarray(a.to_numpy(), np.float64) @ np.asarray(weight.to_numpy(), np.float64).T
            out = api.full([m, n], np.nan, dtype=f32)
            config = _splitk.default_config(m, n, k, bf16)
            _splitk.split_k_matmul(a, weight.T, out, config=config).sync()
            got = np.asarray(out.to_numpy(), np.float64)
            ok = bool(np.isfinite(got).all() and np.abs(got - expected).max() <= 2e-2 * max(1.0, np.abs(expected).max()))
            wrong += not ok
            ms = median_ms(lambda: _splitk.split_k_matmul(a, weight.T, out, config=config)) if ok else math.nan
            flops = 2 * m * n * k
            peer_tflops = math.nan
            if peer:
                at, wt = torch.from_dlpack(a), torch.from_dlpack(weight)
                peer_tflops = flops / median_ms(lambda: torch.matmul(at, wt.T)) / 1e9
            print(f"{m:5d} {n:5d} {k:6d}  {flops / ms / 1e9:14.1f}  {peer_tflops:13.1f}  "
                  f"{flops / ms / 1e9 / peer_tflops:12.2f}  {json.dumps(config)}" + ("" if ok else "  WRONG"))

    print(f"({time.monotonic() - started:.0f} s)")
    print("results: " + ("OK" if not wrong else f"WRONG ({wrong} configs)"))
    return 0 if not wrong else 1


if __name__ == "__main__":
    sys.exit(main())
