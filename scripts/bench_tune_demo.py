#!/usr/bin/env python3
"""cutile.bench and cutile.tune on the GPU, end to end: one run that exercises what the
CI tests can only fake.

- do_bench of a cutile add with and without the L2 flush (flushed reps of a 2^24
  element add read from HBM), in both forms (a returned launch, and ``.sync()``);
- do_bench_paired of the cutile add against torch's (where torch is installed), on
  the same stream: the ratio and its spread;
- a cutile.tune search over the add's tile size with the correctness gate, its log,
  and the record it would commit, printed.

Kernels are defined in a factory, so this file keeps annotations evaluated at
definition (no `from __future__ import annotations`). Needs a GPU:

    scripts/on_gpu_machine.sh python3 scripts/bench_tune_demo.py [--record demo_add.json]
"""

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log2n", type=int, default=24)
    parser.add_argument("--reps", type=int, default=50)
    parser.add_argument("--record", type=Path, help="also save the tuning record (JSON) here")
    args = parser.parse_args()

    import numpy as np

    import cutile
    from cutile import api, bench, tune
    from cutile.core import Mut, Tensor, f32, load_tile_like

    if cutile.backend() != "gpu":
        print("bench_tune_demo.py needs a GPU", file=sys.stderr)
        return 2

    @cutile.entry
    def add(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]], y: Tensor[f32, [-1]]) -> None:
        z.store(load_tile_like(x, z) + load_tile_like(y, z))

    n = 1 << args.log2n
    rng = np.random.default_rng(0)
    xh, yh = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    x, y = api.from_numpy(xh), api.from_numpy(yh)
    z = api.zeros([n]).partition([1024])
    gbytes = 3 * 4 * n / 1e9

    for flush in (True, False):
        for form, fn in (("returned launch", lambda: add(z, x, y)), (".sync()", lambda: add(z, x, y).sync())):
            result = bench.do_bench(fn, reps=args.reps, flush_l2=flush)
            print(f"add 2^{args.log2n}, {form:15s} flush_l2={flush!s:5s}: {result}  "
                  f"({gbytes / (result.median_ms / 1e3):.0f} GB/s)")
    np.testing.assert_allclose(z.unpartition().to_numpy(), xh + yh)
    z = api.zeros([n]).partition([1024])

    try:
        import torch
    except ImportError:
        print("(torch not installed: no paired comparison)")
    else:
        xt, yt = torch.from_numpy(xh).cuda(), torch.from_numpy(yh).cuda()
        zt = torch.empty_like(xt)
        paired = bench.do_bench_paired(lambda: add(z, x, y), lambda: torch.add(xt, yt, out=zt), reps=args.reps)
        print(f"torch.add / cutile add: {paired}")

    def setup(config: tune.Config, shape: tuple[int, ...]) -> Any:
        tile = config["tile"]
        assert isinstance(tile, int)
        out = api.full([shape[0]], np.nan).partition([tile])
        return lambda: add(out, x, y)

    with tempfile.TemporaryDirectory() as folder:
        tuner = tune.Tuner("demo_add", tune.Space(tile=[128, 256, 512, 1024, 2048, 4096, 8192, 3000]), setup,
                           source=add, reference=lambda shape: xh.astype(np.float64) + yh,
                           search_options={"reps": 20, "log": Path(folder) / "trials.jsonl"})
        found = tuner.tune((n,))
        for trial in found.trials:
            print(f"  {trial.config}: {trial.status} {trial.median_ms or ''} {trial.reason}")
        print(f"winner {found.best} ({found.best_ms:.4g} ms); head to head: {found.paired}")
        record = tune.Record(tuner.provenance, {tuner.bucket((n,)): tune.Winner(found.best, found.best_ms)})
        print(record.to_json())
        if args.record is not None:
            record.save(args.record)
            tune.Record.load(args.record, tuner.provenance)  # verified as a tuner would load it
            print(f"record saved to {args.record}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
