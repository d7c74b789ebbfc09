"""Bytecode versions of Tile IR that this package reads and writes."""

from __future__ import annotations

from typing import NamedTuple

from ._errors import VersionError


class Version(NamedTuple):
    """A Tile IR bytecode version (major, minor); ordered, printable as ``13.3``."""

    major: int
    minor: int

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}"

    @staticmethod
    def parse(text: str | Version | tuple[int, int]) -> Version:
        """Accept ``"13.3"``, ``(13, 3)`` or a Version; reject unsupported versions."""
        if isinstance(text, Version):
            v = text
        elif isinstance(text, tuple):
            v = Version(int(text[0]), int(text[1]))
        else:
            parts = text.strip().split(".")
            if len(parts) < 2 or not all(p.isdigit() for p in parts[:2]):
                raise VersionError(f"cannot parse bytecode version {text!r}; expected e.g. '13.3'")
            v = Version(int(parts[0]), int(parts[1]))
        if v not in SUPPORTED_VERSIONS:
            raise VersionError(
                f"unsupported bytecode version {v}; supported: "
                + ", ".join(str(s) for s in SUPPORTED_VERSIONS)
            )
        return v


V13_1 = Version(13, 1)
V13_2 = Version(13, 2)
V13_3 = Version(13, 3)
V13_4 = Version(13, 4)

#: Every version the writer and the reader support, oldest first.
SUPPORTED_VERSIONS: tuple[Version, ...] = (V13_1, V13_2, V13_3, V13_4)
#: The version written when none is asked for.
DEFAULT_VERSION = V13_3
