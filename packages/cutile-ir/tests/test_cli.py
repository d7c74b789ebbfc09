"""``python -m cutile_ir``: argparse refuses unknown flags (exit 2, one line), ``--version``
prints the package's version, each unreadable or invalid file is one line on stderr
(exit 1), and the files it can read print as MLIR text (the agreement with tileirdisasm
is test_readme.py's)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import cutile_ir
from cutile_ir import V13_4, print_module, read_bytecode, write_bytecode
from cutile_ir.__main__ import main
from cutile_ir._catalog import every_op_module


@pytest.fixture
def bytecode_file(tmp_path: Path) -> Path:
    path = tmp_path / "every_op.tileirbc"
    path.write_bytes(write_bytecode(every_op_module(V13_4), V13_4))
    return path


def test_version_is_the_distribution_s(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"cutile_ir {cutile_ir.__version__}\n"
    assert cutile_ir.__version__[0].isdigit() and cutile_ir.__version__ != "0+unknown"


@pytest.mark.parametrize("argv, complaint", [
    (["--bogus", "x.tileirbc"], "unrecognized arguments: --bogus"),
    (["--verif", "x.tileirbc"], "unrecognized arguments: --verif"),
    ([], "the following arguments are required: FILE"),
])
def test_usage_errors_are_one_line_and_exit_2(argv: list[str], complaint: str,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1 and complaint in lines[0] and lines[0].startswith("python -m cutile_ir: error:")


def test_prints_verifies_and_reports_each_bad_file(bytecode_file: Path, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(bytecode_file), "--verify"]) == 0
    text = capsys.readouterr().out
    assert text == print_module(read_bytecode(bytecode_file.read_bytes())) and "entry @" in text

    bad, missing = tmp_path / "bad.tileirbc", tmp_path / "missing.tileirbc"
    bad.write_bytes(b"not bytecode")
    assert main([str(bad), str(bytecode_file), str(missing)]) == 1
    captured = capsys.readouterr()
    assert captured.out == text  # the good file between the two bad ones still prints
    errors = captured.err.splitlines()
    assert len(errors) == 2
    assert errors[0].startswith(f"{bad}: error:") and "bad magic number" in errors[0]
    assert errors[1].startswith(f"{missing}: error:") and "No such file" in errors[1]


def test_bytecode_version_prints_each_file_s(bytecode_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--bytecode-version", str(bytecode_file)]) == 0
    assert capsys.readouterr().out == f"{bytecode_file}: 13.4\n"


def test_runs_as_a_module(bytecode_file: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "cutile_ir", "--version"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == f"cutile_ir {cutile_ir.__version__}"
    done = subprocess.run([sys.executable, "-m", "cutile_ir", "--nope", str(bytecode_file)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1 and "--nope" in done.stderr
