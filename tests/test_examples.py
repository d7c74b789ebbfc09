"""Every example runs as a user would run it and checks its own answer."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted(p.name for p in (ROOT / "examples").glob("*.py"))
# Examples that do not run kernels through a cutile backend (they say so otherwise).
NO_BACKEND = {"axpy_ptx.py", "aot.py"}


def run_example(name: str, backend: str | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if backend is not None:
        env["CUTILE_BACKEND"] = backend
    return subprocess.run(
        [sys.executable, str(ROOT / "examples" / name)], capture_output=True, text=True, timeout=600, env=env
    )


def readme_examples() -> set[str]:
    """The examples named (`name`, in backquotes) in README.md's "## Examples" section."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("\n## Examples\n", 1)[1].split("\n## ", 1)[0]
    return {f"{name}.py" for name in re.findall(r"`([a-z][a-z0-9_]*)`", section)}


def test_every_example_is_listed() -> None:
    # Both ways: each file in examples/ is in the README's list, and each listed one exists.
    assert readme_examples() == set(EXAMPLES)


@pytest.mark.parametrize("name", [e for e in EXAMPLES if e != "axpy_ptx.py"])
def test_example_runs_and_checks_its_answer(name: str, gpu_reason: str | None) -> None:
    result = run_example(name)
    assert result.returncode == 0, result.stdout + result.stderr
    if name == "interop.py" and "nothing was run" in result.stdout:  # a GPU without PyTorch
        pytest.skip("PyTorch is not installed here: the example exchanges GPU memory with it")
    assert "OK" in result.stdout and "WRONG" not in result.stdout
    assert "Traceback" not in result.stderr and "Exception ignored" not in result.stderr, result.stderr
    assert "LaunchNeverRunWarning" not in result.stderr, result.stderr  # no launch is left unrun
    if gpu_reason is not None and name not in NO_BACKEND:
        assert "interpreter backend" in result.stdout
        assert "running kernels on the CPU interpreter" in result.stderr


def test_axpy_ptx_runs_on_the_gpu_or_says_why_not(gpu_reason: str | None) -> None:
    result = run_example("axpy_ptx.py")
    assert result.returncode == 0, result.stdout + result.stderr
    if gpu_reason is None:
        assert "OK" in result.stdout and "WRONG" not in result.stdout
    else:
        assert "no GPU can be used here" in result.stdout and "nothing was run" in result.stdout


@pytest.mark.gpu
@pytest.mark.parametrize("name", [e for e in EXAMPLES if e not in NO_BACKEND])
def test_example_also_runs_on_the_interpreter_where_a_gpu_is(name: str) -> None:
    # Each run checks itself against numpy; the default run (above) was the GPU's,
    # so this adds the interpreter's on the same machine.
    result = run_example(name, "interpreter")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "interpreter backend" in result.stdout and "OK" in result.stdout
    assert "Traceback" not in result.stderr and "Exception ignored" not in result.stderr, result.stderr
