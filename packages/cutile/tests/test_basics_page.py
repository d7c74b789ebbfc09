"""BASICS.md (the kernel language basics) is true: each of its examples runs as a
program of its own and checks its answer (on the interpreter; on the GPU too where one
is), and each error it quotes is the one cutile raises."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import cutile
from cutile import api
from cutile.core import Mut, Tensor, f32, load_tile_like

PAGE = Path(__file__).resolve().parents[1] / "BASICS.md"
EXAMPLES = re.findall(r"```python\n(.*?)```", PAGE.read_text(), re.S)


def test_the_page_has_its_three_examples() -> None:
    assert len(EXAMPLES) == 3
    assert all("assert " in code and "@cutile.entry" in code for code in EXAMPLES)


@pytest.mark.parametrize("where", ["interpreter", pytest.param("gpu", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("number", range(len(EXAMPLES)))
def test_an_example_runs_and_checks_its_answer(number: int, where: str, tmp_path: Path) -> None:
    program = tmp_path / f"basics_{number}.py"  # a file: kernels need their source
    program.write_text(EXAMPLES[number])
    env = dict(os.environ, CUTILE_BACKEND=where)
    done = subprocess.run([sys.executable, str(program)], capture_output=True, text=True, timeout=600, env=env,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr


@cutile.entry
def scale_rows(z: Mut[Tensor[f32, ["BM", "N"]]], x: Tensor[f32, [-1, "N"]], factor: f32):  # type: ignore[no-untyped-def]
    z.store(load_tile_like(x, z) * factor)


@cutile.entry
def two(z: Mut[Tensor[f32, ["B"]]], w: Mut[Tensor[f32, ["B"]]]):  # type: ignore[no-untyped-def]
    z.store(w.load())


@cutile.entry
def fixed(z: Mut[Tensor[f32, [16]]], x: Tensor[f32, [100]]):  # type: ignore[no-untyped-def]
    z.store(load_tile_like(x, z))


def _quoted(error: cutile.CutileError) -> None:
    message = str(error)
    text = " ".join(PAGE.read_text().split())
    assert message in text or message.split(": ", 1)[1] in text, message


def test_the_errors_it_quotes_are_cutile_s() -> None:
    with pytest.raises(cutile.LaunchError) as refused:
        scale_rows(api.zeros([100, 64], dtype=f32).partition([16, 32]), api.zeros([100, 64], dtype=f32), 0.5).sync()
    _quoted(refused.value)
    with pytest.raises(cutile.LaunchError) as refused:
        two(api.zeros([100]).partition([16]), api.zeros([200]).partition([16])).sync()
    _quoted(refused.value)
    with pytest.raises(cutile.LaunchError) as refused:
        fixed(api.zeros([100]).partition([16]), api.zeros([99])).sync()
    _quoted(refused.value)
