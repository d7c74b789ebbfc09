"""Front-end compile time: kernel source to Tile IR bytecode, tileiras excluded.

Usage: uv run --frozen python scripts/bench_compile.py [--repeat R]

For the suite's tiled GEMM (128x128x64 f16) and causal flash attention (64x64,
D=128, f16) kernels, times each stage of a cold compile of one specialization:
the front end (source capture, names, types, SSA: the typed kernel IR), the
lowering to a cutile_ir module, and the bytecode writer. Prints the median and
best of R runs in milliseconds, and the target (50 ms for the whole path).
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import cutile_ir as ir

from cutile_compiler import _dtypes as dt
from cutile_compiler import _source
from cutile_compiler import TensorSpec, build_kernel_ir, lower_kernel, parse_signature, specialize

TARGET_MS = 50.0
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    options = parser.parse_args()
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
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
