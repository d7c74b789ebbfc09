"""The error family of cutile_ir: every error names what it is about and, when known, where."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._attributes import Location


class IRError(Exception):
    """Base of every error raised by cutile_ir."""

    def __init__(self, message: str, *, op: str | None = None, loc: Location | None = None) -> None:
        self.message = message
        self.op = op
        self.loc = loc
        super().__init__(self._format())

    def _format(self) -> str:
        parts = []
        if self.loc is not None and self.loc.file:
            parts.append(f"{self.loc}: ")
        if self.op is not None:
            parts.append(f"'{self.op}': ")
        parts.append(self.message)
        return "".join(parts)


class IRTypeError(IRError):
    """An operand, attribute or result of the wrong type, found while building."""


class VerificationError(IRError):
    """A module that breaks a rule of Tile IR (types, dominance, regions, entries, shapes)."""


class VersionError(IRError):
    """A feature used with a bytecode version that lacks it, or an unsupported version."""


class BytecodeError(IRError):
    """Malformed or unreadable bytecode."""


class ArchError(IRError, ValueError):
    """A GPU architecture name that is not the plain ``sm_XY`` form, or one Tile IR
    does not target (`parse_arch`)."""
