"""The README's vector-add example runs, and its kernel compiles with tileiras."""

from __future__ import annotations

import os
import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_example_builds_writes_and_compiles(toolchain, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    code = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)[0]
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        exec(compile(code, str(README), "exec"), {})
    finally:
        os.chdir(cwd)
    text = capsys.readouterr().out
    path = tmp_path / "vadd.tileirbc"
    dis = toolchain.disasm(path)
    assert dis.returncode == 0 and dis.stdout == text.rstrip("\n") + "\n"
    res = toolchain.compile(path, "sm_90")
    assert res.returncode == 0, res.stderr


def test_cli_prints_like_tileirdisasm(toolchain, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    from cutile_ir import write_bytecode
    from cutile_ir.__main__ import main
    from cutile_ir._catalog import every_op_module
    from cutile_ir import V13_4

    path = tmp_path / "c.tileirbc"
    path.write_bytes(write_bytecode(every_op_module(V13_4), V13_4))
    assert main([str(path), "--verify"]) == 0
    assert capsys.readouterr().out == toolchain.disasm(path).stdout
    bad = tmp_path / "bad.tileirbc"
    bad.write_bytes(b"not bytecode")
    assert main([str(bad)]) == 1
    assert "bad magic number" in capsys.readouterr().err
