#!/usr/bin/env python3
"""Cost of ``import cutile`` in a new process, warm (its files already read once and
their bytecode cached, as an installed package's is).

Target (issue "A package people can install and live with", import cost): at most
0.3 s on the CI machine. Runs one warm-up process, then ``--processes`` new ones,
each timing its own ``import cutile`` (the interpreter's start-up excluded), and
prints the median next to the target and next to ``import numpy`` alone (the floor
cutile cannot go below). Each process also reports what the import must not do:
import ``cuda.bindings``, torch or the compiler's front end (the modules
``tests/test_import_cost.py`` lists), or load a native extension where no GPU needs it.

The processes write and read their bytecode under a temporary folder
(``PYTHONPYCACHEPREFIX``; ``PYTHONDONTWRITEBYTECODE`` dropped): without bytecode
every process compiles every module's source again, which is a cold start however
often it runs. ``--no-bytecode`` measures that instead.

``--native VALUE`` sets ``CUDA_CORE_NATIVE`` for the processes (default: unset, a
user's default). ``--importtime N`` prints the N largest self costs of one
``python -X importtime -c "import cutile"``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

TARGET_S = 0.3

#: what ``import cutile`` leaves to first use (as tests/test_import_cost.py's DEFERRED)
DEFERRED = (
    "cutile_compiler._builtins", "cutile_compiler._opdefs", "cutile_compiler._frontend", "cutile_compiler._lowering",
    "cutile_compiler._pipeline", "cutile_ir._builder", "cutile_ir._ops", "cuda.bindings", "torch",
)

_PROBE = """
import json, sys, time
start = time.perf_counter()
import {module}
elapsed = time.perf_counter() - start
print(json.dumps({{"seconds": elapsed, "bindings": "cuda.bindings.driver" in sys.modules,
                  "deferred": sorted(d for d in {deferred!r} if d in sys.modules),
                  "native": sorted(m for m in sys.modules if m.endswith(("_native_batch", "_native_launch")))}}))
"""


def _run(module: str, env: dict[str, str]) -> dict[str, object]:
    done = subprocess.run([sys.executable, "-c", _PROBE.format(module=module, deferred=DEFERRED)], env=env, capture_output=True,
                          text=True, timeout=300)
    if done.returncode != 0:
        raise SystemExit(f"bench_import: `import {module}` failed:\n{done.stderr}")
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _times(module: str, env: dict[str, str], processes: int) -> tuple[list[float], dict[str, object]]:
    """The import times of ``processes`` new processes (after one warm-up), sorted, and
    the last one's report."""
    _run(module, env)  # warm-up: files read, bytecode written
    runs = [_run(module, env) for _ in range(processes)]
    return sorted(float(str(r["seconds"])) for r in runs), runs[-1]


def _spread(times: list[float]) -> str:
    # (the median decides; the range shows how much the machine's load moved it)
    return f"{statistics.median(times):.3f} s (range {times[0]:.3f}-{times[-1]:.3f})"


def _largest_self_costs(env: dict[str, str], count: int) -> list[tuple[int, str]]:
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", "import cutile"], env=env, capture_output=True,
                          text=True, timeout=300)
    costs = []
    for line in done.stderr.splitlines():
        parts = line.removeprefix("import time:").split("|")
        if len(parts) == 3 and parts[0].strip().isdigit():
            costs.append((int(parts[0]), parts[2].strip()))
    return sorted(costs, reverse=True)[:count]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=7, help="new processes timed (default 7)")
    parser.add_argument("--native", default=None, help="CUDA_CORE_NATIVE for the processes (default: unset)")
    parser.add_argument("--importtime", type=int, default=0, metavar="N", help="print the N largest self costs")
    parser.add_argument("--no-bytecode", action="store_true", help="no bytecode cache: every process compiles")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench_import_pycache_") as pycache:
        env = dict(os.environ)
        env.pop("CUDA_CORE_NATIVE", None)
        if args.native is not None:
            env["CUDA_CORE_NATIVE"] = args.native
        if args.no_bytecode:
            env["PYTHONDONTWRITEBYTECODE"] = "1"
        else:
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            env["PYTHONPYCACHEPREFIX"] = pycache
        return _report(args, env)


def _report(args: argparse.Namespace, env: dict[str, str]) -> int:
    numpy_times, _ = _times("numpy", env, args.processes)
    cutile_times, last = _times("cutile", env, args.processes)
    verdict = "met" if statistics.median(cutile_times) <= TARGET_S else "NOT met"
    print(f"CUDA_CORE_NATIVE={env.get('CUDA_CORE_NATIVE', '(unset)')}, "
          f"CUTILE_BACKEND={env.get('CUTILE_BACKEND', '(unset)')}, "
          f"bytecode {'not cached' if args.no_bytecode else 'cached'}, median of {args.processes} new processes:")
    print(f"  import numpy:  {_spread(numpy_times)}, the floor")
    print(f"  import cutile: {_spread(cutile_times)}, target <= {TARGET_S} s: {verdict}")
    print(f"  cuda.bindings imported: {last['bindings']}; native extensions loaded: {last['native'] or 'none'}; "
          f"deferred modules imported: {last['deferred'] or 'none'}")
    if args.importtime:
        print("largest self costs of `import cutile` (-X importtime, us):")
        for micros, name in _largest_self_costs(env, args.importtime):
            print(f"  {micros:8d}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
