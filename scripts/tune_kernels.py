#!/usr/bin/env python3
"""Searches the configs of cutile_kernels' GEMM (and its split-K kernels) over the
benchmark's shapes and writes their `cutile.tune` records (the arch it runs on).

    python scripts/tune_kernels.py gemm [--dtype f16 bf16 ...] [--shapes 8192x8192x8192 ...]
        [--quick] [--budget S] [--jobs J] [--write] [--records-dir DIR] [--log-dir DIR] [--smoke]
    python scripts/tune_kernels.py splitk [--layout kn nk] [--shapes 128x4096x4096 ...]
        [--budget S] [--jobs J] [--write] [--records-dir DIR] [--log-dir DIR] [--smoke]

On the GPU (the H200: sm_90) it compiles every config of cutile_kernels.GEMM_SPACE that
the prune keeps for a shape (``--jobs`` tileiras processes at once), times each one
gated for correctness, re-measures the best two head to head, and with ``--write``
merges the winners into ``<records-dir>/<arch>/matmul_<dtype>.json`` (default: the
package's records folder, to commit; a record of another provenance is replaced).
Configs that a shape cuts to the same tiles are tried once. ``--quick`` keeps only the
configs that win on sm_90 in the measured runs (8 worker warps, 128x128 to 128x256
tiles, the dtype's usual K tiles; tiles of 64x64 elements and up, with 4 warps below 128x256, where 128x128 tiles
would leave SMs idle): about twenty configs a shape, forty for the short ones. ``--budget`` bounds each
shape's search in seconds; ``--log-dir`` keeps JSONL trial logs, so a run cut short
resumes where it stopped. ``--smoke`` searches a tiny space on tiny shapes with few
reps: how CI runs the script end to end on the interpreter (write to a temporary folder).

``splitk`` searches `cutile_kernels._splitk_tuning.SPACE` (pruned for each shape) for
the shapes matmul sends to split-K (few output tiles, a long K: by default those of the
benchmark's), with the weight stored as given (``kn``: b is [K, N]) or as a linear
layer's (``nk``: b is the transposed view of an [N, K] matrix), 2-byte operands (f16
and bf16 share the record's winners), and merges the winners into
``<records-dir>/<arch>/split_k.json``. A shape's search stops at ``--budget`` seconds
(default 120; configs tried in the space's fixed shuffled order).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cutile import tune
from cutile.core import f16, f32, f8e4m3fn, f8e5m2

from cutile_kernels import _configs, _matmul, _splitk_tuning, _tuning
from cutile_kernels._operands import dtype_named

Shape = tuple[int, int, int]
SQUARES = [(s, s, s) for s in (1024, 2048, 4096, 8192, 16384)]
LLM = [(m, n, k) for m in (128, 2048, 8192)
       for n, k in ((4096, 4096), (11008, 4096), (4096, 11008), (14336, 4096), (151936, 2560))]
ODD = [(3000, 5000, 1000), (8191, 8191, 8191)]
# (m <= 16 and the split-K shapes go to other kernels by their shape, `_matmul._choose_path`: not the tiled
# GEMM's record)
GEMM_SHAPES = [shape for shape in SQUARES + LLM + ODD
               if _matmul._choose_path(shape[0], shape[1], shape[2], 2, f16, f32, False, None,
                                       compare_records=False) == "tiled"]
SMOKE_SHAPES = [(40, 24, 20), (70, 16, 33)]
# and the shapes the split-K family computes because its record's winner measured faster
# than the tiled GEMM's (`_matmul._faster_recorded`): searched by both, so that a search
# that replaces a stale split-K record keeps their buckets
RECORD_CHOSEN_SPLIT_K = [(1024, 1024, 1024)]
SPLIT_K_SHAPES = [shape for shape in SQUARES + LLM + ODD
                  if _matmul._choose_path(shape[0], shape[1], shape[2], 2, f16, f32, False, None,
                                          compare_records=False) == "split_k"] + RECORD_CHOSEN_SPLIT_K
SMOKE_SPLIT_K_SHAPES = [(40, 24, 300)]


def by_bucket(shapes: list[Shape]) -> list[Shape]:
    """One shape per bucket (the first): a bucket holds one winner."""
    seen: dict[str, Shape] = {}
    for shape in shapes:
        seen.setdefault(_configs.gemm_bucket(shape), shape)
    return list(seen.values())


def parse_shape(text: str) -> Shape:
    try:
        m, n, k = (int(part) for part in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"a shape is MxNxK, got {text!r}") from None
    return m, n, k


#: SMs of the H200: a shape with fewer 128x128 output tiles than this leaves SMs idle with them
H200_SMS = 132


def quick(dtype: Any, shape: Shape) -> Callable[[dict[str, Any]], bool]:
    """The prune of ``--quick``: the configs that win on sm_90 in the measured runs."""
    # fp8: K tiles of 64 and 128 (tileiras spills the 128-wide ones' accumulators on sm_90
    # in every shape tried; 64 wide, 128x128 tiles compile without spills); f16/bf16: 32
    # and 64 (128x256x32 beat 128x256x64 at 8192^3, 1.005-1.016x cuBLAS against 0.975)
    tile_ks = (32,) if dtype == f32 else (64, 128) if dtype in (f8e4m3fn, f8e5m2) else (32, 64)
    m, n, _ = shape
    # Short outputs (M = 128 x 4096: 32 tiles of 128x128 for 132 SMs) need smaller tiles to
    # fill the device: 64x64 and up, with 4 worker warps below 128x256 (H200_SMS: tuning runs on the H200).
    few_tiles = -(-m // 128) * -(-n // 128) < H200_SMS
    smallest = 64 * 64 if few_tiles else 128 * 128

    def keep(config: dict[str, Any]) -> bool:
        area = int(config["tile_m"]) * int(config["tile_n"])
        warps_ok = config["num_worker_warps"] == 8 or (few_tiles and area < 128 * 256)
        return _configs.prune(config) and warps_ok and config["tile_k"] in tile_ks \
            and smallest <= area <= 128 * 256 and config["occupancy"] == 1
    return keep


def for_shape(keep: Callable[[dict[str, Any]], bool], shape: Shape) -> Callable[[dict[str, Any]], bool]:
    """``keep``, and each config the shape cuts to the same tiles tried once."""
    seen: set[str] = set()

    def prune(config: dict[str, Any]) -> bool:
        if not keep(config):
            return False
        fitted = json.dumps(_configs.fit_to_problem(config, *shape), sort_keys=True)
        if fitted in seen:
            return False
        seen.add(fitted)
        return True
    return prune


def tune_gemm(args: argparse.Namespace) -> int:
    space = _configs.SMOKE_SPACE if args.smoke else _configs.SPACE
    shapes = by_bucket(args.shapes or (SMOKE_SHAPES if args.smoke else GEMM_SHAPES))
    options: dict[str, Any] = {"warmup": 1, "reps": 2, "paired_reps": 2} if args.smoke else {}
    if args.budget is not None:
        options["budget"] = args.budget
    records_dir = Path(args.records_dir) if args.records_dir else None
    for name in args.dtype:
        dtype = dtype_named(name, "tune_kernels.py", "--dtype")
        tuner = _configs.tuner(dtype, space=space, records_dir=records_dir)
        path = _configs.record_path(tuner.provenance.arch, dtype, records_dir)
        record = tune.Record(tuner.provenance)
        if args.write and path.exists():
            try:
                record = tune.Record.load(path, tuner.provenance)  # merged into: runs add buckets
            except tune.TuneError as exc:
                print(f"replacing {path}: {exc}")
        for shape in shapes:
            keep = quick(dtype, shape) if args.quick else _configs.prune
            started = time.monotonic()
            if args.jobs > 0:
                configs = [c for c in space.configs() if for_shape(keep, shape)(c)]
                arch = tuner.provenance.arch if tuner.provenance.arch != "interpreter" else "sm_90"  # (a CI check)
                compiled = _tuning.precompile(dtype, shape, configs, arch, args.jobs)
                print(f"  {shape}: compiled {compiled} of {len(configs)} configs in "
                      f"{time.monotonic() - started:.0f} s", flush=True)
            bucket = _configs.gemm_bucket(shape)
            log = Path(args.log_dir) / f"{tuner.name}_{bucket}.jsonl" if args.log_dir else None
            result = tuner.tune(shape, prune=for_shape(keep, shape), log=log, **options)
            record.winners[bucket] = tune.Winner(result.best, result.best_ms)
            valid = sum(t.status == "ok" for t in result.trials)
            flops = 2.0 * shape[0] * shape[1] * shape[2] / (result.best_ms * 1e-3) / 1e12
            print(f"{tuner.name} {bucket} {shape}: {result.best} {result.best_ms:.4g} ms ({flops:.1f} TFLOP/s), "
                  f"{valid} configs timed of {len(result.trials)}, {time.monotonic() - started:.0f} s"
                  f"{', budget reached' if result.out_of_budget else ''}", flush=True)
            if args.write:  # saved per shape: a run stopped later keeps what it found
                record.save(path)
        if args.write:
            tune.Record.load(path, tuner.provenance)  # it loads back, verified
            print(f"wrote {path} ({len(record.winners)} buckets)")
        else:
            print(f"(not written: --write saves {path})")
    return 0


def tune_split_k(args: argparse.Namespace) -> int:
    shapes = args.shapes or (SMOKE_SPLIT_K_SHAPES if args.smoke else SPLIT_K_SHAPES)
    options: dict[str, Any] = {"warmup": 1, "reps": 2, "paired_reps": 2} if args.smoke else {}
    options["budget"] = args.budget if args.budget is not None else 120.0
    records_dir = Path(args.records_dir) if args.records_dir else None
    tuner = _splitk_tuning.tuner(records_dir=records_dir)
    path = tuner.record_path
    assert path is not None
    record = tune.Record(tuner.provenance)
    if args.write and path.exists():
        try:
            record = tune.Record.load(path, tuner.provenance)  # merged into: runs add buckets
        except tune.TuneError as exc:
            print(f"replacing {path}: {exc}")
    for layout in args.layout:
        for m, n, k in shapes:
            shape = (m, n, k, 2, int(layout == "nk"))
            keep = _splitk_tuning.prune_for(m, n, k, 2)
            configs = [c for c in _splitk_tuning.SPACE.configs() if keep(c)]
            started = time.monotonic()
            if args.jobs > 0 and configs:
                arch = tuner.provenance.arch if tuner.provenance.arch != "interpreter" else "sm_90"  # (a CI check)
                compiled = _splitk_tuning.precompile(shape, configs, arch, args.jobs)
                print(f"  {shape}: compiled {compiled} of {len(configs)} configs in "
                      f"{time.monotonic() - started:.0f} s", flush=True)
            bucket = _splitk_tuning.split_k_bucket(shape)
            log = Path(args.log_dir) / f"{tuner.name}_{bucket}.jsonl" if args.log_dir else None
            result = tuner.tune(shape, prune=keep, log=log, **options)
            record.winners[bucket] = tune.Winner(result.best, result.best_ms)
            valid = sum(t.status == "ok" for t in result.trials)
            flops = 2.0 * m * n * k / (result.best_ms * 1e-3) / 1e12
            print(f"{tuner.name} {bucket} {shape}: {result.best} {result.best_ms:.4g} ms ({flops:.1f} TFLOP/s), "
                  f"{valid} configs timed of {len(result.trials)}, {time.monotonic() - started:.0f} s"
                  f"{', budget reached' if result.out_of_budget else ''}", flush=True)
            if args.write:  # saved per shape: a run stopped later keeps what it found
                record.save(path)
    if args.write:
        tune.Record.load(path, tuner.provenance)  # it loads back, verified
        print(f"wrote {path} ({len(record.winners)} buckets)")
    else:
        print(f"(not written: --write saves {path})")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kernel", choices=["gemm", "splitk"])
    parser.add_argument("--dtype", nargs="+", default=["f16", "bf16", "f32", "f8e4m3fn", "f8e5m2"])
    parser.add_argument("--shapes", nargs="+", type=parse_shape, help="MxNxK (default: the benchmark's shapes)")
    parser.add_argument("--quick", action="store_true", help="only the configs that win on sm_90")
    parser.add_argument("--budget", type=float, help="seconds per shape's search")
    parser.add_argument("--jobs", type=int, default=8, help="tileiras compiles at once before a search (0: none)")
    parser.add_argument("--write", action="store_true", help="save the records")
    parser.add_argument("--records-dir", help="where records go (default: the package's records folder)")
    parser.add_argument("--log-dir", help="keep resumable trial logs here")
    parser.add_argument("--layout", nargs="+", choices=["kn", "nk"], default=["kn", "nk"],
                        help="splitk: the weight's layouts to search")
    parser.add_argument("--smoke", action="store_true", help="a tiny space and shapes (CI, interpreter)")
    args = parser.parse_args()
    if args.smoke:
        args.jobs = 0 if args.jobs == 8 else args.jobs
    return tune_split_k(args) if args.kernel == "splitk" else tune_gemm(args)


if __name__ == "__main__":
    sys.exit(main())
