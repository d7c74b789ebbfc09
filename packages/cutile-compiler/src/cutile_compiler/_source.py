"""Capturing a Python function's source as an AST with locations in its file."""

from __future__ import annotations

import ast
import inspect
import linecache
import textwrap
from dataclasses import dataclass
from typing import Any

from cutile_compiler._errors import SourceLocation, TileSyntaxError


@dataclass(frozen=True)
class FunctionSource:
    """A function's parsed definition and how to map AST positions to its file."""

    function: Any
    tree: ast.FunctionDef
    filename: str
    first_line: int  # line of the source's first line in the file
    indent: int  # columns removed by dedent

    def location(self, node: ast.AST) -> SourceLocation:
        line = getattr(node, "lineno", 1) + self.first_line - 1
        column = getattr(node, "col_offset", 0) + self.indent
        end_line = getattr(node, "end_lineno", None)
        end_col = getattr(node, "end_col_offset", None)
        end_column = end_col + self.indent if end_col is not None and end_line == node.lineno else None  # type: ignore[attr-defined]
        return SourceLocation(self.filename, line, column, end_column, self.tree.name)


_cache: dict[Any, FunctionSource] = {}


def capture(function: Any) -> FunctionSource:
    """The parsed source of ``function`` (cached per code object and file: code
    objects compare equal across files when their code and first line agree)."""
    code = getattr(function, "__code__", None)
    key = (code, getattr(code, "co_filename", None))
    cached = _cache.get(key)
    if cached is not None:
        return cached
    name = getattr(function, "__qualname__", repr(function))
    if getattr(function, "__name__", "") == "<lambda>":
        source = _capture_lambda(function)
        _cache[key] = source
        return source
    try:
        lines, first_line = inspect.getsourcelines(function)
        filename = inspect.getsourcefile(function) or "<unknown>"
    except (OSError, TypeError) as exc:
        raise TileSyntaxError(
            f"cannot read the source of {name} ({exc}); kernels must be defined in a file, not typed at a prompt or built with exec"
        ) from None
    text = "".join(lines)
    dedented = textwrap.dedent(text)
    indent = len(lines[0]) - len(lines[0].lstrip()) if lines else 0
    module = ast.parse(dedented, filename=filename)
    definition = module.body[0]
    if not isinstance(definition, ast.FunctionDef):
        raise TileSyntaxError(f"{name} is not a plain function definition (async functions and lambdas are not kernels)")
    source = FunctionSource(function, definition, filename, first_line, indent)
    if code is not None:
        _cache[key] = source
    return source


def _capture_lambda(function: Any) -> FunctionSource:
    """A lambda's body as a one-statement function definition, found by parsing its
    whole file (a lambda's source lines alone are rarely valid Python)."""
    code = function.__code__
    filename = inspect.getsourcefile(function) or "<unknown>"
    lines = linecache.getlines(filename)
    if not lines:
        raise TileSyntaxError(f"cannot read the source of a lambda defined in {filename}")
    module = ast.parse("".join(lines), filename=filename)
    params = list(code.co_varnames[: code.co_argcount])
    candidates = [
        node for node in ast.walk(module)
        if isinstance(node, ast.Lambda) and node.lineno == code.co_firstlineno
        and [a.arg for a in node.args.args] == params
    ]
    if len(candidates) > 1:
        # Several lambdas on one line: the code object's instruction positions
        # (Python 3.11+) fall inside the body of the right one.
        positions = {(line, col) for line, _, col, _ in code.co_positions() if line is not None and col is not None}

        def contains(node: ast.Lambda) -> bool:
            body = node.body
            start = (body.lineno, body.col_offset)
            end = (body.end_lineno or body.lineno, body.end_col_offset or 0)
            return any(start <= p < end for p in positions)

        candidates = [node for node in candidates if contains(node)]
    if len(candidates) != 1:
        raise TileSyntaxError(
            f"{filename}:{code.co_firstlineno}: cannot tell which lambda on this line is called from the kernel; "
            "give it its own line or make it a def"
        )
    found = candidates[0]
    body = ast.Return(value=found.body)
    ast.copy_location(body, found.body)
    definition = ast.FunctionDef(name="<lambda>", args=found.args, body=[body], decorator_list=[], returns=None)
    # Only the two new nodes need locations (ast.fix_missing_locations would recurse
    # through the whole body: a RecursionError for a long sum in a lambda).
    ast.copy_location(definition, found)
    return FunctionSource(function, definition, filename, 1, 0)
