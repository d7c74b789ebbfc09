"""Compile time: the front end, and a kernel's first launch cold, warm from disk and warm in memory.

Usage: uv run --frozen python scripts/bench_compile.py [--repeat R]

For the suite's tiled GEMM (128x128x64 f16) and causal flash attention (64x64,
D=128, f16) kernels:

- times each stage of a cold compile of one specialization, tileiras excluded:
  the front end (source capture, names, types, SSA: the typed kernel IR), the
  lowering to a cutile_ir module, and the bytecode writer. Prints the median and
  best of R runs in milliseconds, and the target (50 ms for the whole path);
- times a first launch in a new process (GPU backend on
  cuda_core.testing.FakeDriver, so no GPU is needed), from the call to the
  driver's module load, that is cutile's own time before the driver: cold (an
  empty cache folder: front end, lowering, tileiras), warm from disk (a second
  new process: the warm-start manifest and the cached cubin) and warm in memory
  (the same process compiling it again). The target for warm from disk is 20 ms.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import cutile_ir as ir

from cutile_compiler import _dtypes as dt
from cutile_compiler import _source
from cutile_compiler import TensorSpec, build_kernel_ir, lower_kernel, parse_signature, specialize

TARGET_MS = 50.0
WARM_TARGET_MS = 20.0
ROOT = Path(__file__).resolve().parents[1]


def load_suite() -> Any:
    path = ROOT / "packages" / "cutile-compiler" / "tests" / "suite_kernels.py"
    spec = importlib.util.spec_from_file_location("cutile_suite_kernels", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["cutile_suite_kernels"] = module
    spec.loader.exec_module(module)
    return module


def cases(suite: Any) -> list[tuple[str, Any, dict[str, Any]]]:
    f16, f32 = dt.f16, dt.f32
    return [
        ("gemm 128x128x64 f16", suite.gemm, {
            "z": TensorSpec(f32, (4096, 4096), (128, 128)), "x": TensorSpec(f16, (4096, 4096)),
            "y": TensorSpec(f16, (4096, 4096)), "BK": 64}),
        ("attention 64x64 D=128 f16", suite.attention, {
            "o": TensorSpec(f32, (32, 4096, 128), (1, 64, 128)), "q": TensorSpec(f16, (32, 4096, 128)),
            "k": TensorSpec(f16, (32, 4096, 128)), "v": TensorSpec(f16, (32, 4096, 128)), "scale": 0.125,
            "BN": 64}),
    ]


def forget_sources() -> None:
    """Drops the cache of parsed kernel sources, so each run parses again (cold)."""
    _source._cache.clear()


def once(function: Any, arguments: dict[str, Any]) -> tuple[float, float, float]:
    forget_sources()
    start = time.perf_counter()
    signature = parse_signature(function)
    spec = specialize(signature, function.__name__, arguments)
    kernel = build_kernel_ir(function, signature, spec)
    typed = time.perf_counter()
    module = lower_kernel(kernel, "13.3", "sm_90")
    lowered = time.perf_counter()
    ir.write_bytecode(module, "13.3")
    written = time.perf_counter()
    return (typed - start) * 1e3, (lowered - typed) * 1e3, (written - lowered) * 1e3


#: per kernel: the launch's arguments, as (shape, dtype name, tile or None) for tensors, else the value;
#: a dict: the arguments passed by name
LAUNCHES: dict[str, list[Any]] = {  # (the tiles of the table above, smaller tensors: the fake driver's are host memory)
    "gemm": [((512, 512), "f32", (128, 128)), ((512, 512), "f16", None), ((512, 512), "f16", None), {"BK": 64}],
    "attention": [((2, 512, 128), "f32", (1, 64, 128)), ((2, 512, 128), "f16", None),
                  ((2, 512, 128), "f16", None), ((2, 512, 128), "f16", None), 0.125, {"BN": 64}],
}


def first_launch(kernel_name: str) -> dict[str, Any]:
    """In this (new) process: one launch of a suite kernel on the fake driver; the ms
    from the call to the driver's module load, whether it started warm, and the ms
    of compiling it again in process."""
    os.environ["CUTILE_BACKEND"] = "gpu"
    import cuda_async
    import cutile
    from cuda_core.testing import SUCCESS, FakeDriver, use_fake_driver
    from cutile import _gpu, api

    suite = load_suite()
    function, unsafe, hints = suite.SUITE[kernel_name]
    kernel = cutile.entry(unsafe=unsafe, hints=hints)(function)
    fake = FakeDriver()
    free = lambda *_: (SUCCESS,)  # noqa: E731
    fake.cuLaunchKernel = free  # type: ignore[method-assign]
    fake.cuStreamSynchronize = free  # type: ignore[method-assign]
    loaded_at: list[float] = []
    load = fake.cuModuleLoadData
    plan: list[Any] = []

    def timed_load(image: bytes) -> Any:
        loaded_at.append(time.perf_counter())
        compiled = kernel.compiled(plan[0].spec, "sm_90")  # (in memory by now) for the fake's parameter table
        fake.kernels[compiled.name] = _gpu.fake_param_layout(compiled.abi)
        return load(image)

    fake.cuModuleLoadData = timed_load  # type: ignore[method-assign]
    with use_fake_driver(fake), cuda_async.using_policy(cuda_async.SingleStream()):
        arguments: list[Any] = []
        named: dict[str, Any] = {}
        for item in LAUNCHES[kernel_name]:
            if isinstance(item, dict):
                named.update(item)
            elif isinstance(item, tuple):
                shape, dtype, tile = item
                tensor = api.empty(list(shape), dtype=getattr(cutile.core, dtype))
                arguments.append(tensor.partition(list(tile)) if tile is not None else tensor)
            else:
                arguments.append(item)
        start = time.perf_counter()
        launch = kernel(*arguments, **named)
        plan.append(launch.plan())
        launch.sync()
        compiled = kernel.compiled(plan[0].spec, "sm_90")
        again = time.perf_counter()
        kernel.compiled(plan[0].spec, "sm_90")
        memory = time.perf_counter() - again
        del launch, arguments
    return {"before_driver_ms": (loaded_at[0] - start) * 1e3, "warm": compiled.warm, "memory_ms": memory * 1e3}


def warm_start_table() -> bool:
    """Cold, warm-from-disk and warm-in-memory first launches of the suite kernels, each
    in new processes sharing a fresh cache folder; whether warm-from-disk is on target."""
    print(f"\nfirst launch in a new process, ms in cutile before the driver (fake driver; "
          f"target {WARM_TARGET_MS:.0f} ms warm from disk)")
    header = f"{'kernel':<28}{'cold':>12}{'warm (disk)':>14}{'warm (memory)':>16}  ok"
    print(header)
    print("-" * len(header))
    ok = True
    for name in LAUNCHES:
        with tempfile.TemporaryDirectory(prefix="cutile-bench-cache-") as cache:
            env = {**os.environ, "CUTILE_CACHE_DIR": cache, "CUTILE_CACHE": "1"}
            runs = []
            for _ in range(2):
                done = subprocess.run([sys.executable, __file__, "--first-launch", name], capture_output=True,
                                      text=True, env=env, timeout=600)
                if done.returncode != 0:
                    print(done.stdout + done.stderr, file=sys.stderr)
                    return False
                runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
        cold, warm = runs
        good = warm["warm"] and not cold["warm"] and warm["before_driver_ms"] <= WARM_TARGET_MS
        ok = ok and good
        print(f"{name:<28}{cold['before_driver_ms']:>12.1f}{warm['before_driver_ms']:>14.1f}"
              f"{warm['memory_ms']:>16.3f}  {'yes' if good else 'NO'}{'' if warm['warm'] else ' (no warm start)'}")
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--first-launch", metavar="KERNEL", help=argparse.SUPPRESS)  # (the new process's part)
    options = parser.parse_args()
    if options.first_launch:
        print(json.dumps(first_launch(options.first_launch)))
        return 0
    suite = load_suite()
    print(f"front-end compile time, ms (median / best of {options.repeat}; target {TARGET_MS:.0f} ms in total)")
    header = f"{'kernel':<28}{'front end':>14}{'lowering':>14}{'bytecode':>14}{'total':>14}  ok"
    print(header)
    print("-" * len(header))
    ok = True
    for name, function, arguments in cases(suite):
        once(function, arguments)  # imports and first-use caches out of the way
        runs = [once(function, arguments) for _ in range(options.repeat)]
        columns = [[r[i] for r in runs] for i in range(3)] + [[sum(r) for r in runs]]
        cells = "".join(f"{statistics.median(c):>8.1f} /{min(c):>4.1f}" for c in columns)
        total = statistics.median(columns[3])
        ok = ok and total <= TARGET_MS
        print(f"{name:<28}{cells}  {'yes' if total <= TARGET_MS else 'NO'}")
    ok = warm_start_table() and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
