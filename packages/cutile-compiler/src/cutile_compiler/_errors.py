"""User-facing errors of the kernel compiler, with source locations.

Every error a user can see carries the location in their kernel
(``file:line:col``), the offending source line and a caret under the column,
formatted in one place (`SourceLocation.excerpt`). The `cutile` package
re-exports these classes; `CutileError` is the base of every error cutile raises
on purpose.
"""

from __future__ import annotations

import linecache
from dataclasses import dataclass


@dataclass(frozen=True)
class SourceLocation:
    """A position in a kernel's source file (1-based line, 0-based column)."""

    filename: str
    line: int
    column: int
    end_column: int | None = None
    function: str | None = None

    def __str__(self) -> str:
        return f"{self.filename}:{self.line}:{self.column + 1}"

    def excerpt(self) -> str:
        """The source line with a caret (or a run of carets) under the location."""
        text = linecache.getline(self.filename, self.line).rstrip("\n")
        if not text:
            return ""
        width = 1
        if self.end_column is not None and self.end_column > self.column:
            width = self.end_column - self.column
        return f"{text}\n{' ' * self.column}{'^' * width}"


class CutileError(Exception):
    """Base class of every error cutile raises on purpose."""


class TileError(CutileError):
    """An error in a kernel, pointing at its source."""

    def __init__(self, message: str, location: SourceLocation | None = None) -> None:
        self.message = message
        self.location = location
        super().__init__(self._format())

    def _format(self) -> str:
        if self.location is None:
            return self.message
        head = f"{self.location}: {self.message}"
        excerpt = self.location.excerpt()
        where = f" (in {self.location.function})" if self.location.function else ""
        return f"{head}{where}\n{excerpt}" if excerpt else head + where


class TileSyntaxError(TileError):
    """Python the kernel language does not support, or a misuse of its constructs."""


class TileTypeError(TileError):
    """Wrong dtypes, shapes or kinds of values in a kernel, or a safety rule broken."""


class TileCompilerError(TileError):
    """The toolchain failed to compile a kernel that passed the front end."""
