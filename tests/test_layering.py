"""The packages are strictly stacked (the design contract, section 1; ARCHITECTURE.md's
table of layers): no import points up.

Every module of every package is parsed and each import is checked against the
table below; the standard library is always allowed.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# import name -> (source folder, top-level modules it may import besides the stdlib)
ALLOWED: dict[str, tuple[str, frozenset[str]]] = {
    "cuda_core": ("cuda-core", frozenset({"cuda"})),
    "cuda_async": ("cuda-async", frozenset({"cuda_core"})),
    "cutile_ir": ("cutile-ir", frozenset()),
    "cutile_compiler": ("cutile-compiler", frozenset({"cutile_ir", "numpy"})),
    "cutile": (
        "cutile",
        frozenset({"cuda_core", "cuda_async", "cutile_ir", "cutile_compiler", "numpy", "ml_dtypes"}),
    ),
    "cutile_kernels": ("cutile-kernels", frozenset({"cutile", "numpy"})),
}


def imported_top_levels(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_package_imports_only_layers_below(package: str) -> None:
    folder, allowed = ALLOWED[package]
    src = ROOT / "packages" / folder / "src" / package
    files = sorted(src.rglob("*.py"))
    assert files, f"{src} holds no Python module"
    permitted = allowed | {package} | set(sys.stdlib_module_names) | {"__future__"}
    bad = {
        f"{path.relative_to(ROOT)} imports {name}"
        for path in files
        for name in imported_top_levels(path)
        if name not in permitted
    }
    assert not bad, "upward or undeclared imports:\n" + "\n".join(sorted(bad))


def test_layering_checker_sees_violations(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("import os\nfrom cutile.core import f32\nimport numpy.linalg as la\n")
    assert imported_top_levels(module) == {"os", "cutile", "numpy"}
