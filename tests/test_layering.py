"""The packages are strictly stacked (the design contract, section 1; ARCHITECTURE.md's
table of layers): no import points up, and no package reaches into another's privates.

Every module of every package is parsed and each import is checked against the
table below; the standard library is always allowed. A package uses another only
through its public surface: no ``_``-prefixed module or name of another package
is imported (``from pkg._x import y``, ``import pkg._x``, ``from pkg import _x``,
``importlib.import_module("pkg._x")``) or reached as an attribute of one of its
modules (``pkg._x``, ``alias._y`` where ``alias`` is a module of ``pkg``). Tests
may import privates; the rule is for library code.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Mapping
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


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _package_folders() -> dict[str, Path]:
    return {name: ROOT / "packages" / folder / "src" / name for name, (folder, _) in ALLOWED.items()}


def _is_module(dotted: str, packages: Mapping[str, Path]) -> bool:
    """Whether ``dotted`` names a module or package of the workspace (by its files)."""
    top, *rest = dotted.split(".")
    if top not in packages:
        return False
    path = packages[top].joinpath(*rest)
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def private_uses(path: Path, package: str, packages: Mapping[str, Path]) -> list[str]:
    """Each use in ``path`` (a module of ``package``) of a private module or name of
    another of ``packages``, as "line N: what"."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[str] = []

    def foreign(dotted: str) -> bool:
        top = dotted.split(".")[0]
        return top in packages and top != package

    def check_dotted(dotted: str, line: int, how: str) -> None:
        if foreign(dotted) and any(_is_private(part) for part in dotted.split(".")[1:]):
            found.append(f"line {line}: {how} {dotted}")

    modules: dict[str, str] = {}  # local name -> the foreign module it is bound to
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                check_dotted(alias.name, node.lineno, "import")
                if foreign(alias.name):
                    if alias.asname:
                        modules[alias.asname] = alias.name
                    else:
                        modules[alias.name.split(".")[0]] = alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and foreign(node.module):
            check_dotted(node.module, node.lineno, "from")
            for alias in node.names:
                if _is_private(alias.name):
                    found.append(f"line {node.lineno}: from {node.module} import {alias.name}")
                elif _is_module(f"{node.module}.{alias.name}", packages):
                    modules[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)
              and (isinstance(node.func, ast.Attribute) and node.func.attr == "import_module"
                   or isinstance(node.func, ast.Name) and node.func.id in ("import_module", "__import__"))):
            check_dotted(node.args[0].value, node.lineno, "import_module")
    for node in ast.walk(tree):
        # The outermost attribute chain rooted at a foreign module's name: walk it while
        # each step is a module; a private step is a violation.
        if isinstance(node, ast.Attribute):
            chain: list[str] = []
            inner: ast.expr = node
            while isinstance(inner, ast.Attribute):
                chain.append(inner.attr)
                inner = inner.value
            if not isinstance(inner, ast.Name) or inner.id not in modules:
                continue
            current = modules[inner.id]
            for attr in reversed(chain):
                if _is_private(attr):
                    found.append(f"line {node.lineno}: attribute {current}.{attr}")
                    break
                current = f"{current}.{attr}"
                if not _is_module(current, packages):
                    break
    return sorted(set(found), key=lambda use: (int(use.split(":")[0].split()[1]), use))


# Modules a package may import only for type checkers (inside ``if TYPE_CHECKING:``),
# and the one module that mypy itself loads (cutile's plugin imports mypy).
TYPING_ONLY = frozenset({"typing_extensions"})
# modules that may import one more package each: cutile's mypy plugin, and `cutile.torch`,
# the optional PyTorch integration (the rest of cutile finds torch in sys.modules only)
EXTRA_IMPORTS = {"packages/cutile/src/cutile/mypy_plugin.py": frozenset({"mypy"}),
                "packages/cutile/src/cutile/torch.py": frozenset({"torch"})}


def _type_checking_blocks(tree: ast.AST) -> set[int]:
    """The ids of the import nodes inside ``if TYPE_CHECKING:`` blocks."""
    inside: set[int] = set()
    for node in ast.walk(tree):
        test = node.test if isinstance(node, ast.If) else None
        if isinstance(test, ast.Name) and test.id == "TYPE_CHECKING" or \
                isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING":
            for statement in node.body:  # type: ignore[attr-defined]
                inside.update(id(child) for child in ast.walk(statement))
    return inside


def imported_top_levels(path: Path) -> set[str]:
    """The top-level modules ``path`` imports (those in TYPING_ONLY only where it
    imports them at run time, outside ``if TYPE_CHECKING:``)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    typing_only = _type_checking_blocks(tree)
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found = {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found = {node.module.split(".")[0]}
        else:
            continue
        names.update(found - TYPING_ONLY if id(node) in typing_only else found)
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
        if name not in permitted | EXTRA_IMPORTS.get(str(path.relative_to(ROOT)), frozenset())
    }
    assert not bad, "upward or undeclared imports:\n" + "\n".join(sorted(bad))


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_package_uses_only_the_public_surface_of_others(package: str) -> None:
    packages = _package_folders()
    files = sorted(packages[package].rglob("*.py"))
    assert files
    bad = [f"{path.relative_to(ROOT)} {use}" for path in files for use in private_uses(path, package, packages)]
    assert not bad, "uses of another package's private modules or names:\n" + "\n".join(bad)


def test_privacy_checker_sees_every_form(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "import importlib\n"
        "import cutile_compiler\n"
        "import cuda_async as ca\n"
        "from cutile_compiler import language, dtypes as dt\n"
        "from cutile_compiler._dtypes import f32\n"           # 5: a private module
        "import cutile_compiler._types\n"                      # 6
        "import cuda_core._driver as drv\n"                    # 7
        "from cutile_compiler import _config, TensorSpec\n"    # 8: a private name
        "x = cutile_compiler._dtypes.f32\n"                    # 9: attribute of the package
        "y = ca._native.rlock()\n"                             # 10: attribute of an alias
        "z = language._builtins\n"                             # 11: attribute of a submodule
        "w = dt.f32, dt.f32.name, TensorSpec._private\n"       # public: not reported
        "v = importlib.import_module('cuda_async._resource')\n"  # 13
        "from cutile_ir import _ops\n"                         # 14
        "from cutile import _tensor\n"                         # own package: allowed
    )
    uses = private_uses(module, "cutile", _package_folders())
    assert [use.split(":")[0] for use in uses] == [
        "line 5", "line 6", "line 7", "line 8", "line 9", "line 10", "line 11", "line 13", "line 14"]
    assert "line 9: attribute cutile_compiler._dtypes" in uses


def test_layering_checker_sees_violations(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("import os\nfrom cutile.core import f32\nimport numpy.linalg as la\n")
    assert imported_top_levels(module) == {"os", "cutile", "numpy"}


def test_a_typing_only_import_counts_only_at_run_time(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from typing_extensions import TypeVar\n"
                      "    import numpy\nimport typing_extensions\n")
    assert imported_top_levels(module) == {"typing", "numpy", "typing_extensions"}
    module.write_text("import typing\nif typing.TYPE_CHECKING:\n    import typing_extensions\n")
    assert imported_top_levels(module) == {"typing"}
