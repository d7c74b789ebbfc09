#!/usr/bin/env python3
"""Searches the configs of cutile_kernels' GEMM over the issue's shapes and writes its
`cutile.tune` records (one file per dtype, for the arch it runs on).

    python scripts/tune_kernels.py gemm [--dtype f16 bf16 ...] [--budget S] [--write]
                                        [--records-dir DIR] [--smoke]

On the GPU (the H200: sm_90) it times every config of cutile_kernels.GEMM_SPACE that
the prune keeps, per shape bucket, each gated for correctness, the best two head to
head, and with ``--write`` saves ``<records-dir>/<arch>/matmul_<dtype>.json`` (default:
the package's own records folder, to commit). ``--budget`` bounds each shape's search
in seconds. ``--smoke`` searches a tiny space on tiny shapes with few reps: how CI runs
the script end to end on the interpreter (write it to a temporary folder).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from cutile import tune

from cutile_kernels import _configs
from cutile_kernels._operands import dtype_named

SQUARES = [(s, s, s) for s in (1024, 2048, 4096, 8192, 16384)]
LLM = [(m, n, k) for m in (16, 128, 2048, 8192)
       for n, k in ((4096, 4096), (11008, 4096), (4096, 11008), (14336, 4096), (151936, 2560))]
ODD = [(3000, 5000, 1000), (8191, 8191, 8191)]
GEMM_SHAPES = SQUARES + LLM + ODD  # m 1 falls in m 16's bucket
SMOKE_SHAPES = [(40, 24, 20), (70, 16, 33)]


def by_bucket(shapes: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """One shape per bucket (the first): a bucket holds one winner."""
    seen: dict[str, tuple[int, int, int]] = {}
    for shape in shapes:
        seen.setdefault(_configs.gemm_bucket(shape), shape)
    return list(seen.values())


def tune_gemm(args: argparse.Namespace) -> int:
    space = _configs.SMOKE_SPACE if args.smoke else _configs.SPACE
    shapes = by_bucket(SMOKE_SHAPES if args.smoke else GEMM_SHAPES)
    options: dict[str, Any] = {"warmup": 1, "reps": 2, "paired_reps": 2} if args.smoke else {}
    if args.budget is not None:
        options["budget"] = args.budget
    records_dir = Path(args.records_dir) if args.records_dir else None
    for name in args.dtype:
        dtype = dtype_named(name, "tune_kernels.py", "--dtype")
        tuner = _configs.tuner(dtype, space=space, records_dir=records_dir)
        record = tune.Record(tuner.provenance)
        for shape in shapes:
            started = time.monotonic()
            result = tuner.tune(shape, **options)
            bucket = _configs.gemm_bucket(shape)
            record.winners[bucket] = tune.Winner(result.best, result.best_ms)
            valid = sum(t.status == "ok" for t in result.trials)
            flops = 2.0 * shape[0] * shape[1] * shape[2] / (result.best_ms * 1e-3) / 1e12
            print(f"{tuner.name} {bucket} {shape}: {result.best} {result.best_ms:.4g} ms ({flops:.1f} TFLOP/s), "
                  f"{valid}/{len(result.trials)} configs valid, {time.monotonic() - started:.0f} s"
                  f"{', budget reached' if result.out_of_budget else ''}", flush=True)
        path = _configs.record_path(tuner.provenance.arch, dtype, records_dir)
        if args.write:
            record.save(path)
            tune.Record.load(path, tuner.provenance)  # it loads back, verified
            print(f"wrote {path}")
        else:
            print(f"(not written: --write saves {path})")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kernel", choices=["gemm"])
    parser.add_argument("--dtype", nargs="+", default=["f16", "bf16", "f32", "f8e4m3fn", "f8e5m2"])
    parser.add_argument("--budget", type=float, help="seconds per shape's search")
    parser.add_argument("--write", action="store_true", help="save the records")
    parser.add_argument("--records-dir", help="where records go (default: the package's records folder)")
    parser.add_argument("--smoke", action="store_true", help="a tiny space and shapes (CI, interpreter)")
    args = parser.parse_args()
    return tune_gemm(args)


if __name__ == "__main__":
    sys.exit(main())
