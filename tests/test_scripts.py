"""The scripts that need no GPU (benchmarks, the bytecode digests) run to completion (with small sizes): they
reach into internals, which would otherwise break them unnoticed. Their figures are
not checked here (timing is the scripts' job, not a test's)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("script, arguments, expected", [
    ("bench_ir.py", ["--ops", "2000", "--repeat", "1"], "read_ms="),
    ("bench_compile.py", ["--repeat", "1"], "gemm 128x128x64"),
    ("bench_host_launch.py", ["--launches", "200", "--repeats", "1"], "inside cutile.batch()"),
    ("bench_matmul_host.py", ["--calls", "50", "--repeats", "1"], "matmul(a, b, out=out)"),
    ("bench_llm_host.py", ["--layers", "1", "--steps", "2", "--prefills", "1", "--prompt", "16", "--context", "16",
                           "--repeats", "1"], "µs per launch"),
    ("bench_interpreter.py", [], "GEMM"),
    ("bench_import.py", ["--processes", "2", "--importtime", "3"], "import cutile: "),
    ("bytecode_digests.py", [], "suite add sm_90 13.3: "),
    ("bench_reads.py", ["--check-only", "--size", "45", "--vocab", "100", "--rows", "20", "--width", "64"],
     "results: OK"),
    ("bench_gemv.py", ["--smoke", "--sweep", "--write", "--tune", "2", "--splitk"], "results: OK"),
    ("bench_pointwise.py", ["--smoke"], "results: OK"),
    ("bench_decode.py", ["--smoke"], "results: OK"),
    ("bench_attention.py", ["--smoke"], "results: OK"),
    ("bench_llm.py", ["--smoke"], "results: OK"),
    ("bench_pointwise.py", ["--smoke", "--record", "--budget", "2", "--only", "argmax"],
     "searched cutile_kernels_argmax: 2 buckets (8x4096x32bit, 8x4096x16bit;"),  # f32's and bf16's
    # (its GEMMs' tileiras compiles take minutes on a CI machine: the suite compiles mapped_gemm)
    ("bench_schedules.py", ["--compile-only", "sm_90", "--configs", "1", "--only", "rows", "--rows", "64"],
     "compiled 4 kernels for sm_90"),
])
def test_a_cpu_benchmark_runs(script: str, arguments: list[str], expected: str) -> None:
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / script), *arguments], capture_output=True,
                          text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert expected in done.stdout, done.stdout
    assert "Traceback" not in done.stderr, done.stderr
    assert "LaunchNeverRunWarning" not in done.stderr, done.stderr
