"""User-facing errors of the kernel compiler, with source locations.

Every error a user can see carries the location in their kernel
(``file:line:col``), the offending source line and a caret under the column,
formatted in one place (`SourceLocation.excerpt`). The `cutile` package
re-exports these classes; `CutileError` is the base of every error cutile raises
on purpose (the table of them all is in the cutile package's README).
"""

from __future__ import annotations

import linecache
from dataclasses import dataclass
from typing import Self


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

    def placed(self, context: str, location: SourceLocation | None) -> Self:
        """This error with ``context`` (e.g. ``"kernel add"``) before its message, at
        ``location`` unless it has one: how the layer that knows the kernel completes
        an error raised below it, keeping its class and attributes."""
        self.message = f"{context}: {self.message}"
        if self.location is None:
            self.location = location
        self.args = (self._format(),)
        return self


class TileSyntaxError(TileError):
    """Python the kernel language does not support, or a misuse of its constructs."""


class TileTypeError(TileError):
    """Wrong dtypes, shapes or kinds of values in a kernel, or a safety rule broken."""


class TileCompilerError(TileError):
    """A kernel the front end accepted could not be compiled: tileiras is missing or
    cannot target the GPU, or it failed. The base of the toolchain's errors
    (`cutile_compiler._toolchain`: `ToolchainError`, `ArchError`, `TileirasError`,
    `TileirasTimeoutError`)."""
