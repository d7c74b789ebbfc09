"""scripts/bench_norms.py runs to completion on the interpreter (``--smoke``): every
kernel's result checked, and a `cutile.tune` search writing a record the library loads."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "scripts" / "bench_norms.py"


def run(*arguments: str) -> str:
    done = subprocess.run([sys.executable, str(SCRIPT), "--smoke", *arguments], capture_output=True, text=True,
                          timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert "LaunchNeverRunWarning" not in done.stderr, done.stderr
    return done.stdout


def test_every_kernel_is_checked_and_timed() -> None:
    out = run()
    assert "results: OK" in out
    for kernel in ("softmax", "log_softmax", "rms_norm", "add_rms_norm", "layer_norm", "layer_norm_backward"):
        for dtype in ("f32", "bf16"):
            assert any(line.split()[:2] == [kernel, dtype] and line.rstrip().endswith("ok")
                       for line in out.splitlines()), (kernel, dtype, out)


def test_tune_prints_winners_and_writes_records(tmp_path: Path) -> None:
    out = run("--tune", "--kernels", "softmax,add_rms_norm", "--dtypes", "f32", "--record-dir", str(tmp_path))
    assert "tune softmax f32 4x20000: winner {" in out and "tune add_rms_norm f32 37x300: winner {" in out
    (path,) = tmp_path.glob("*/softmax.json")  # records/<arch>/<name>.json, as the package keeps them
    record = json.loads(path.read_text())
    assert record["provenance"]["kernel"] == "softmax" and record["provenance"]["arch"] == path.parent.name
    assert set(record["winners"]) == {"64x512x32bit", "4x32768x32bit"}
    assert "results: OK" in out
