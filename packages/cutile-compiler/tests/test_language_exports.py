"""What static tools read off `cutile_compiler.language` (the imports and bindings under
``TYPE_CHECKING``) agrees with the DSL functions the registry exports at run time."""

import ast
from pathlib import Path

from cutile_compiler import language
from cutile_compiler._builtins import DSL_FUNCTIONS


def _names_bound_for_type_checkers() -> set[str]:
    tree = ast.parse(Path(language.__file__).read_text())
    block = next(node for node in tree.body if isinstance(node, ast.If)
                 and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING")
    names: set[str] = set()
    for node in ast.walk(block):
        if isinstance(node, ast.ImportFrom):
            names.update(alias.asname or alias.name for alias in node.names)
        elif isinstance(node, ast.Assign):
            names.update(target.id for target in node.targets if isinstance(target, ast.Name))
    # (sum_, max_, min_ and pow_ are imported to be bound as sum, max, min and pow)
    return {name for name in names if not name.startswith("_") and not name.endswith("_")}


def test_the_type_checking_bindings_are_the_registrys_functions() -> None:
    assert _names_bound_for_type_checkers() == set(DSL_FUNCTIONS)
    assert set(DSL_FUNCTIONS) <= set(language.__all__)
