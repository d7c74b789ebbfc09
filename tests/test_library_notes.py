"""Library code says things through `logging`, under the ``cutile`` logger (see
ARCHITECTURE.md, "Notes and logging"): no module of the six packages writes to
stderr itself, except a command line (``__main__.py``), and every logger it makes is
``cutile`` or a child of it, so that one setting silences them all."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIBRARY = sorted(p for p in ROOT.glob("packages/*/src/**/*.py") if p.name != "__main__.py")
NATIVE = sorted(ROOT.glob("packages/*/src/**/*.c"))


def _where(path: Path, node: ast.AST) -> str:
    return f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 0)}"


def test_the_rule_sees_the_library() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in LIBRARY}
    assert "packages/cutile/src/cutile/_backend.py" in names and len(names) > 50


def test_no_library_module_writes_to_stderr() -> None:
    found = []
    for path in LIBRARY:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Attribute) and node.attr in ("stderr", "__stderr__") \
                    and isinstance(node.value, ast.Name) and node.value.id == "sys":
                found.append(_where(path, node))
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print":
                found.append(_where(path, node))  # stdout is the application's too
    assert found == [], "write through a logger under 'cutile' instead: " + ", ".join(found)


def test_no_native_source_writes_to_stderr() -> None:
    found = [f"{path.relative_to(ROOT)}:{text[:match.start()].count(chr(10)) + 1}"
             for path in NATIVE for text in [path.read_text()]
             for match in re.finditer(r"\bstderr\b|PySys_Write(Stderr|Stdout)|\bprintf\s*\(", text)]
    assert NATIVE and found == [], found


def test_every_logger_is_under_cutile() -> None:
    names = []
    for path in LIBRARY:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "getLogger":
                assert len(node.args) == 1 and isinstance(node.args[0], ast.Constant), \
                    f"{_where(path, node)}: a logger named by a literal"
                names.append((node.args[0].value, _where(path, node)))
    assert names, "the library's loggers were not found"
    assert [(n, at) for n, at in names if n != "cutile" and not str(n).startswith("cutile.")] == []
