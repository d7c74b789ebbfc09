"""What a compile read from outside the kernel's arguments, and whether it still holds.

The front end resolves module globals, closure variables and attributes of host
objects (``config.SCALE``) to their values at compile time, and inlines device
functions from their code. A compiled kernel is valid only while those reads
would give the same answers: `ExternalReads` records each one (where, what, the
value seen) and `ExternalReads.changed` re-reads them all, so that a cache
holding compiled code can tell that it must compile again.

Values are compared by identity, which is what makes the check cheap enough for
every launch (the native launch path runs the same loop in C over the same list,
``_native_launch.c``'s ``reads_current``). A number, string or tuple of those
rebound to an equal value (``SCALE = 2.0`` again) is not a change: the entry is
refreshed to the new object.

Kinds (shared with the C loop, which must agree): a name in a dict (a module's
globals or ``__dict__``) bound to the value seen or absent (a global name that
resolved to a builtin); a closure cell holding the value seen or empty; an
attribute of an object; a function's ``__code__``.
"""

from __future__ import annotations

import types
from typing import Any

NAME, NAME_ABSENT, CELL, CELL_EMPTY, ATTRIBUTE, CODE = range(6)

#: (kind, where, key, value): where is a dict, a cell, an object or a function; key
#: the name, the closure variable's, the attribute's or the function's; value the
#: object read (None when absent).
Entry = tuple[int, Any, str, Any]

_ABSENT = object()
_IMMUTABLE_SCALARS = (bool, int, float, complex, str, bytes, type(None))
# The language's own modules: their attributes are the DSL, not user state.
_LANGUAGE_PACKAGES = ("cutile", "cutile_compiler")


def _same_constant(a: Any, b: Any) -> bool:
    """Whether two immutable constants compile alike (floats by their bits)."""
    if type(a) is not type(b):
        return False
    if type(a) is float:
        return bool(a.hex() == b.hex())
    if isinstance(a, _IMMUTABLE_SCALARS):
        return bool(a == b)
    if type(a) is tuple:
        return len(a) == len(b) and all(_same_constant(x, y) for x, y in zip(a, b))
    return False


def _is_language_module(module: types.ModuleType) -> bool:
    name = getattr(module, "__name__", "")
    return isinstance(name, str) and name.split(".", 1)[0] in _LANGUAGE_PACKAGES


class ExternalReads:
    """The values one compile read from module globals, closure cells and host
    objects (each once), in the order first read."""

    __slots__ = ("entries", "_index")

    def __init__(self) -> None:
        #: Shared with the native launch path, which reads it on every launch.
        self.entries: list[Entry] = []
        self._index: dict[tuple[int, str], int] = {}

    def _record(self, kind: int, where: Any, key: str, value: Any) -> None:
        slot = (id(where), key)
        if slot not in self._index:
            self._index[slot] = len(self.entries)
            self.entries.append((kind, where, key, value))

    # -- recording, during a compile ---------------------------------------------------
    def global_name(self, namespace: dict[str, Any], name: str) -> Any:
        """``namespace[name]`` (a function's globals), recorded; `_ABSENT` if unbound."""
        value = namespace.get(name, _ABSENT)
        if value is _ABSENT:
            self._record(NAME_ABSENT, namespace, name, None)
        else:
            self._record(NAME, namespace, name, value)
        return value

    def cell(self, cell: types.CellType, name: str) -> Any:
        """The contents of the cell of closure variable ``name``, recorded; `_ABSENT`
        if the cell is empty."""
        try:
            value = cell.cell_contents
        except ValueError:
            self._record(CELL_EMPTY, cell, name, None)
            return _ABSENT
        self._record(CELL, cell, name, value)
        return value

    def attribute(self, owner: Any, name: str, value: Any) -> None:
        """Records that ``owner.name`` was ``value`` (attributes of the language's own
        modules are not recorded; a module's own names are recorded as names in its
        ``__dict__``, which is cheaper to read again)."""
        if isinstance(owner, types.ModuleType):
            if _is_language_module(owner):
                return
            namespace = vars(owner)
            if namespace.get(name, _ABSENT) is value:
                self._record(NAME, namespace, name, value)
                return
        self._record(ATTRIBUTE, owner, name, value)

    def code(self, function: Any) -> None:
        """Records the code of a function whose source the compile inlined (a hot
        reload, such as IPython's autoreload, replaces ``__code__`` in place)."""
        self._record(CODE, function, function.__qualname__, function.__code__)

    # -- checking, at a launch ---------------------------------------------------------
    def changed(self) -> str | None:
        """The first read that would now give another value ("global 'SCALE'"), or
        None when every one still gives what the compile saw."""
        # The common case, on every launch: each read gives the very object it gave.
        for kind, where, key, value in self.entries:
            if kind == NAME:
                if where.get(key, _ABSENT) is not value:
                    return self._reread()
            elif kind == NAME_ABSENT:
                if key in where:
                    return self._reread()
            elif kind == CODE:
                if where.__code__ is not value:
                    return self._reread()
            else:
                return self._reread()  # (cells and attributes: rarer, read there)
        return None

    def _reread(self) -> str | None:
        """`changed`, reading every kind of entry, and refreshing those rebound to an
        equal constant."""
        entries = self.entries
        for index, (kind, where, key, value) in enumerate(entries):
            if kind == NAME:
                current = where.get(key, _ABSENT)
            elif kind == NAME_ABSENT:
                if key not in where:
                    continue
                return f"global '{key}'"
            elif kind == CELL or kind == CELL_EMPTY:
                try:
                    current = where.cell_contents
                except ValueError:
                    current = _ABSENT
                if kind == CELL_EMPTY:
                    if current is _ABSENT:
                        continue
                    return f"closure variable '{key}'"
            elif kind == CODE:
                current = where.__code__
            else:
                current = getattr(where, key, _ABSENT)
            if current is value:
                continue
            if current is not _ABSENT and _same_constant(current, value):
                entries[index] = (kind, where, key, current)  # equal: later checks hit at once
                continue
            return _describe(kind, key)
        return None

    def __len__(self) -> int:
        return len(self.entries)

    def __repr__(self) -> str:
        return f"<ExternalReads of {len(self.entries)} values>"


def _describe(kind: int, key: str) -> str:
    if kind == NAME:
        return f"global '{key}'"
    if kind == CELL:
        return f"closure variable '{key}'"
    if kind == CODE:
        return f"the code of {key}"
    return f"attribute '{key}'"


ABSENT = _ABSENT
__all__ = ["ABSENT", "ExternalReads"]
