"""The launch machinery's modules (`_entry`, `_launch`, `_binding`, `_graphs`,
`_gpu`, `_native`): no import cycle at module level, and every public name where
users import it."""

from __future__ import annotations

import ast
from pathlib import Path

import cutile

SOURCE = Path(cutile.__file__).parent


def _module_level_imports(path: Path) -> set[str]:
    """The cutile modules ``path`` imports when it is imported (not inside a function
    or an ``if TYPE_CHECKING:`` block)."""
    found: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.If):
                if not (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"):
                    visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)
                for handler in node.handlers:
                    visit(handler.body)
            elif isinstance(node, ast.ImportFrom) and node.module:
                if node.module == "cutile":
                    found.update(f"cutile.{alias.name}" for alias in node.names
                                 if (SOURCE / f"{alias.name}.py").is_file())
                elif node.module.startswith("cutile."):
                    found.add(node.module)
            elif isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names if alias.name.startswith("cutile."))

    visit(ast.parse(path.read_text()).body)
    return found


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the path, 2: done

    def walk(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                return path + [node, target]
            if target not in state and (found := walk(target, path + [node])) is not None:
                return found
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := walk(start, [])) is not None:
            return found
    return None


def test_no_cutile_module_imports_in_a_cycle_at_module_level() -> None:
    graph = {f"cutile.{p.stem}": _module_level_imports(p) for p in SOURCE.glob("*.py") if p.stem != "__init__"}
    assert {"cutile._entry", "cutile._launch", "cutile._binding", "cutile._graphs"} <= set(graph)
    assert "cutile._binding" in graph["cutile._launch"] and "cutile._launch" in graph["cutile._entry"]
    assert _cycle(graph) is None, f"module-level import cycle: {' -> '.join(_cycle(graph) or [])}"


def test_the_cycle_check_finds_a_cycle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_public_names_are_where_users_import_them() -> None:
    from cutile import _binding, _entry, _graphs, _launch

    homes = {"Kernel": _entry, "entry": _entry, "function": _entry, "compile": _entry,
             "Launch": _launch, "LaunchNeverRunWarning": _launch,
             "Graph": _graphs, "GraphScope": _graphs, "graph_scope": _graphs, "batch": _graphs}
    for name, module in homes.items():
        assert name in cutile.__all__ and getattr(cutile, name) is getattr(module, name), name
    assert cutile.Launch.__module__ == "cutile._launch" and cutile.Kernel.__module__ == "cutile._entry"
    assert callable(_binding.describe_call) and callable(_binding.scalar_value)
