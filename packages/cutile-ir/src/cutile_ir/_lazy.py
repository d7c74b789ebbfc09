"""Package exports imported on first use (PEP 562).

A package's ``__init__`` declares its public names once, as ``from .m import x``
imports under ``if TYPE_CHECKING:`` (what mypy and IDEs read). `lazy_exports` reads
that block back from the ``__init__``'s source, and the package's ``__getattr__``
(`exported`) imports a name's module the first time the name is asked for, so that
importing the package costs only the modules its user touches.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path
from typing import Any


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def lazy_exports(package: str, init_file: str) -> dict[str, tuple[str, str]]:
    """Each name imported under ``if TYPE_CHECKING:`` in ``init_file`` (the
    ``__init__`` of ``package``): the absolute name of its module and its name there."""
    tree = ast.parse(Path(init_file).read_text(encoding="utf-8"), filename=init_file)
    exports: dict[str, tuple[str, str]] = {}
    for node in tree.body:
        if not (isinstance(node, ast.If) and _is_type_checking(node.test)):
            continue
        for statement in node.body:
            if not isinstance(statement, ast.ImportFrom):
                continue
            module = statement.module or ""
            if statement.level:
                module = f"{package}.{module}" if module else package
            for alias in statement.names:
                exports[alias.asname or alias.name] = (module, alias.name)
    return exports


def exported(namespace: dict[str, Any], exports: dict[str, tuple[str, str]], name: str) -> Any:
    """The package's attribute ``name`` (its ``__getattr__``): imported from its module
    and kept in the package's ``namespace``, so that later reads are plain lookups."""
    try:
        module, attribute = exports[name]
    except KeyError:
        raise AttributeError(f"module {namespace['__name__']!r} has no attribute {name!r}") from None
    # (``__import__``, not importlib's: ``-X importtime`` then shows the module's own cost)
    if module == namespace["__name__"]:  # a submodule of the package (``from . import m``)
        __import__(f"{module}.{attribute}")
        value = sys.modules[f"{module}.{attribute}"]
    else:
        __import__(module)
        value = getattr(sys.modules[module], attribute)
    namespace[name] = value
    return value
