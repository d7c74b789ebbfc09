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


def bounded_repr(value: object) -> str:
    """``repr(value)`` for a message, short whatever the value: an int of more than
    128 bits is written by its size (``repr`` of a huge int is slow, and fails past
    Python's digit limit); tuples are written item by item; long texts are cut."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 128:
        digits = int(value.bit_length() * 0.30102999566398120) + 1  # log10(2); within one digit
        return f"<{'negative ' if value < 0 else ''}int of about {digits} digits>"
    if isinstance(value, tuple):
        items = [bounded_repr(v) for v in value[:16]] + (["..."] if len(value) > 16 else [])
        return "(" + ", ".join(items) + ("," if len(value) == 1 else "") + ")"
    try:
        text = repr(value)
    except Exception:  # a user object whose repr fails must not hide the real error
        return f"<{type(value).__name__}>"
    return text if len(text) <= 200 else text[:100] + "..." + text[-50:]


class CutileError(Exception):
    """Base class of every error cutile raises on purpose."""


class ArgumentError(CutileError, ValueError):
    """An argument of a cutile function or method (outside kernel code) has a value
    it cannot take: a shape, a step, an option, a cache size. The message names it."""


class ArgumentTypeError(CutileError, TypeError):
    """An argument of a cutile function or method (outside kernel code) is of a kind
    it cannot take: a dtype, a seed, a kernel. The message names it."""


class HostCallError(CutileError, RuntimeError):
    """A DSL function or device function was called outside a kernel."""


class TensorIndexError(CutileError, IndexError):
    """A host-side index of a tensor (``t[...]``) is malformed or out of bounds."""


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
    (`cutile_compiler._toolchain`: ``ToolchainError``, ``ArchError``, ``TileirasError``,
    ``TileirasTimeoutError``)."""
