"""Every environment variable the compiler reads, declared once in a typed table.

Each `Knob` has a name, a parser, a default and one line of documentation; code
reads a value with ``KNOB.get()``, which looks at the environment *at call time*
(so tests can monkeypatch it and a long-running program can change it), parses
it and raises `ConfigError` naming the variable when the value is malformed.
Nothing else in the compiler reads ``os.environ`` for a ``CUTILE_*`` setting; the
runtime (`cutile._config`) declares its own knobs with the same `Knob`.

`knobs_markdown()` renders a table of knobs for the README.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from cutile_compiler._errors import ArgumentError, CutileError

__all__ = [
    "CACHE",
    "CACHE_DIR",
    "CACHE_MAX_BYTES",
    "CUDA_TOOLKIT_PATH",
    "DUMP",
    "DUMP_DIR",
    "DUMP_STAGES",
    "JIT_TIMING",
    "KNOBS",
    "TILEIRAS",
    "TILEIRAS_TIMEOUT",
    "ConfigError",
    "Knob",
    "knobs_markdown",
    "parse_size",
]

T = TypeVar("T")


class ConfigError(CutileError, ValueError):
    """An environment variable holds a value cutile cannot use.

    Attributes:
        name: the variable, e.g. ``"CUTILE_CACHE_MAX_BYTES"``.
        value: the text it held.
    """

    def __init__(self, name: str, value: str, expected: str) -> None:
        self.name = name
        self.value = value
        super().__init__(f"environment variable {name}={value!r} is invalid: expected {expected}")


class _Invalid(Exception):
    """Raised by a parser; `Knob.get` turns it into a `ConfigError` naming the variable."""


@dataclass(frozen=True)
class Knob(Generic[T]):
    """One environment variable: its name, how to parse it, its default, what it does.

    Attributes:
        name: the variable's name.
        kind: the type in words, for the documentation table (``"bool"``, ``"path"``...).
        parse: turns the (stripped, non-empty) text into a value; raises on bad input.
        default: computes the value used when the variable is unset or empty.
        default_text: how the default reads in the documentation table.
        doc: one line saying what the variable does.
    """

    name: str
    kind: str
    parse: Callable[[str], T]
    default: Callable[[], T]
    default_text: str
    doc: str

    def raw(self, environ: Mapping[str, str] | None = None) -> str | None:
        """The variable's text, or None when it is unset or only whitespace."""
        env = os.environ if environ is None else environ
        text = env.get(self.name)
        if text is None or not text.strip():
            return None
        return text.strip()

    def get(self, environ: Mapping[str, str] | None = None) -> T:
        """The parsed value (the default when unset); `ConfigError` when malformed."""
        text = self.raw(environ)
        if text is None:
            return self.default()
        try:
            return self.parse(text)
        except _Invalid as exc:
            raise ConfigError(self.name, text, str(exc)) from None


# --- parsers -----------------------------------------------------------------------

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


def parse_bool(text: str) -> bool:
    """A boolean knob's parser: 1/true/yes/on or 0/false/no/off, any case."""
    low = text.lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    raise _Invalid("1 or 0 (also true/false, yes/no, on/off)")


def _parse_path(text: str) -> Path:
    return Path(text).expanduser()


_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "k": 1024,
    "kb": 1000,
    "kib": 1024,
    "m": 1024**2,
    "mb": 1000**2,
    "mib": 1024**2,
    "g": 1024**3,
    "gb": 1000**3,
    "gib": 1024**3,
    "t": 1024**4,
    "tb": 1000**4,
    "tib": 1024**4,
}
_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([a-zA-Z]*)")


def _parse_size(text: str) -> int:
    match = _SIZE.fullmatch(text.strip())
    unit = match.group(2).lower() if match else None
    if match is None or unit not in _SIZE_UNITS:
        raise _Invalid(_SIZE_EXPECTED)
    return int(float(match.group(1)) * _SIZE_UNITS[unit])


_SIZE_EXPECTED = "a size in bytes, e.g. 1073741824, 512MiB or 2G"


def parse_size(text: str, what: str = "size") -> int:
    """A size in bytes as ``CUTILE_CACHE_MAX_BYTES`` takes it (``1073741824``, ``512MiB``,
    ``2G``, ``1.5GB``; k/m/g/t are binary, kb/mb/gb/tb decimal); `ArgumentError` naming
    ``what`` when malformed."""
    try:
        return _parse_size(text)
    except _Invalid:
        raise ArgumentError(f"{what} {text!r} is invalid: expected {_SIZE_EXPECTED}") from None


def _parse_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise _Invalid("a number of seconds, e.g. 300 or 2.5") from None
    if not value > 0 or value == float("inf"):
        raise _Invalid("a positive, finite number of seconds")
    return value


def choice(*choices: str) -> Callable[[str], str]:
    """A parser accepting one of ``choices`` (any case; given back in lower case)."""
    def parse(text: str) -> str:
        low = text.lower()
        if low not in choices:
            raise _Invalid("one of " + ", ".join(choices))
        return low

    return parse


DUMP_STAGES: tuple[str, ...] = ("ast", "ir", "mlir", "bytecode")
"""What `CUTILE_DUMP` can name, in pipeline order (``all`` means every one)."""


def _parse_dump(text: str) -> frozenset[str]:
    stages: set[str] = set()
    for item in text.split(","):
        word = item.strip().lower()
        if not word or word in ("0", "none"):
            continue
        if word == "all":
            stages.update(DUMP_STAGES)
        elif word in DUMP_STAGES:
            stages.add(word)
        else:
            raise _Invalid(f"a comma-separated list of {', '.join(DUMP_STAGES)} or all (unknown: {word!r})")
    return frozenset(stages)


def _default_cache_dir() -> Path:
    # Follow the XDG convention where the user has set it, like pip and Triton do.
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "cutile"


def const(value: T) -> Callable[[], T]:
    """A knob's default that is always ``value``."""
    return lambda: value


# --- the table ---------------------------------------------------------------------

TILEIRAS: Knob[Path | None] = Knob(
    "CUTILE_TILEIRAS", "path", _parse_path, const(None), "unset",
    "The tileiras executable to use; overrides every other way of finding it.",
)
CUDA_TOOLKIT_PATH: Knob[Path | None] = Knob(
    "CUDA_TOOLKIT_PATH", "path", _parse_path, const(None), "unset",
    "A CUDA toolkit folder; its bin/tileiras is used when CUTILE_TILEIRAS is unset.",
)
TILEIRAS_TIMEOUT: Knob[float] = Knob(
    "CUTILE_TILEIRAS_TIMEOUT", "seconds", _parse_seconds, const(300.0), "300",
    "How long one tileiras run may take before it is killed and reported.",
)
CACHE: Knob[bool] = Knob(
    "CUTILE_CACHE", "bool", parse_bool, const(True), "1",
    "0 turns the on-disk caches off (cubins and warm-start manifests: every new process compiles and runs tileiras).",
)
CACHE_DIR: Knob[Path] = Knob(
    "CUTILE_CACHE_DIR", "path", _parse_path, _default_cache_dir, "~/.cache/cutile",
    "Folder of the on-disk caches: cubins, warm-start manifests, toolchain probes ($XDG_CACHE_HOME/cutile when that is set).",
)
CACHE_MAX_BYTES: Knob[int] = Knob(
    "CUTILE_CACHE_MAX_BYTES", "size", _parse_size, const(1024**3), "1GiB",
    "Size cap of each on-disk cache folder (cubins, manifests, probes); least recently used entries go first (e.g. 512MiB).",
)
DUMP: Knob[frozenset[str]] = Knob(
    "CUTILE_DUMP", "list", _parse_dump, const(frozenset()), "unset",
    "Comma list of ast, ir, mlir, bytecode or all: write those stages to CUTILE_DUMP_DIR.",
)
DUMP_DIR: Knob[Path] = Knob(
    "CUTILE_DUMP_DIR", "path", _parse_path, lambda: Path.cwd() / "cutile_dump", "./cutile_dump",
    "Where CUTILE_DUMP writes its files.",
)
JIT_TIMING: Knob[bool] = Knob(
    "CUTILE_JIT_TIMING", "bool", parse_bool, const(False), "0",
    "1 logs, per compiled kernel, the front-end time (through bytecode) and the tileiras time, or the disk-cache time on a hit; and what changed (a global, a device function) when a kernel is compiled again (warnings of the cutile.compiler logger, see Notes on stderr).",
)
KNOBS: tuple[Knob[Any], ...] = (
    TILEIRAS,
    CUDA_TOOLKIT_PATH,
    TILEIRAS_TIMEOUT,
    CACHE,
    CACHE_DIR,
    CACHE_MAX_BYTES,
    DUMP,
    DUMP_DIR,
    JIT_TIMING,
)
"""Every variable the compiler reads, in the order the README lists them (the runtime,
`cutile`, declares its own the same way and builds the README table from both)."""

#: a direct read of a variable in source text: os.environ[...], os.environ.get(...), os.getenv(...)
_DIRECT_READ = re.compile(r"(environ(\.get)?\s*[\[(]|getenv\s*\()\s*[\"'](?P<name>\w+)[\"']")


def variables_read_in(source: str) -> list[str]:
    """The names of the environment variables ``source`` reads directly: the tests of
    each package check that only its table does."""
    return [match["name"] for match in _DIRECT_READ.finditer(source)]


def knobs_markdown(knobs: Iterable[Knob[Any]] = KNOBS) -> str:
    """The table of ``knobs`` as Markdown, for the README."""
    lines = ["| variable | type | default | meaning |", "|---|---|---|---|"]
    for knob in knobs:
        doc = knob.doc.replace("|", r"\|")
        kind = knob.kind.replace("|", r" \| ")
        lines.append(f"| `{knob.name}` | {kind} | `{knob.default_text}` | {doc} |")
    return "\n".join(lines) + "\n"
