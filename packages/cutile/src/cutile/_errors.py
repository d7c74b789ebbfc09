"""The errors a cutile user may catch; `CutileError` is the base of them all."""

from __future__ import annotations

from cutile_compiler._errors import (
    CutileError,
    TileCompilerError,
    TileError,
    TileSyntaxError,
    TileTypeError,
)
from cutile_compiler._signature import SignatureError, SpecializationError


class OwnershipError(CutileError):
    """A tensor was used while another owner has it: consumed by ``partition()``,
    or held by a launch that has not completed."""


class LaunchError(CutileError, ValueError):
    """A launch's arguments or grid do not fit the kernel (checked before any GPU work)."""


__all__ = [
    "CutileError", "LaunchError", "OwnershipError", "SignatureError", "SpecializationError",
    "TileCompilerError", "TileError", "TileSyntaxError", "TileTypeError",
]
