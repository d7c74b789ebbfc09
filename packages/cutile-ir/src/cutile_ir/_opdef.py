"""The record of one Tile IR operation (:class:`OpDef`) and of its parts.

The table of records is :mod:`._ops`; builder, verifier, printer, bytecode writer and
reader walk the records, so everything that is particular to one op is a field here:
operand groups, attributes, results, type constraints, printed syntax, an extra
verification rule, the minimum SM, the element types it accepts and its region rules;
the first SM of each element type (`ELEMENT_MIN_SM`) is here too.
The fields that are functions point at code in the verifier or the printer.

Printing formats use a small MLIR-like syntax: ```lit``` a literal, ``$x`` an operand or
attribute, ``type($x)`` its type(s), ``(...)?`` a group printed only when its anchor
(marked ``^``) is present, ``%name($x)`` a custom directive of the printer, ``attr-dict``
nothing (all attributes have a place). A function in place of the format prints the op
itself (a method of the printer).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Callable, Union

from ._types import F4E2M1FN, F8E4M3FN, F8E5M2, F8E5M3FNU, F8E8M0FNU
from ._versions import V13_1, Version

if TYPE_CHECKING:
    from ._ir import Operation
    from ._printer import Printer
    from ._types import ScalarType, Type

#: An extra verification rule: (op, its types by group name) -> problems. It runs once the
#: op's shape and the table's constraints hold.
Checker = Callable[["Operation", "dict[str, list[Type]]"], "list[str]"]
#: A custom printer: a method of the printer, (printer, op, indent) -> None.
CustomPrinter = Callable[["Printer", "Operation", int], None]
#: How an op names result ``index`` in MLIR text (see ``OpDef.asm_name``).
AsmNamer = Callable[["Operation", int], Union[str, None]]


class Arity(enum.Enum):
    """How many values an operand group takes: exactly one, zero or one, or any number."""

    ONE = "one"
    OPTIONAL = "optional"
    VARIADIC = "variadic"


@dataclass(frozen=True)
class OperandDef:
    """An operand group: its name, type constraint, arity and first version."""

    name: str
    constraint: str
    arity: Arity = Arity.ONE
    since: Version = V13_1


class AttrKind(enum.Enum):
    """How an attribute is encoded in bytecode (and printed)."""

    ENUM = "enum"            # varint enum value
    INT = "int"              # varint integer
    BOOL = "bool"            # one byte
    UNIT = "unit"            # presence only (a flag bit)
    STR = "str"              # string-table index
    SYMREF = "symref"        # string-table index, printed @name
    I32_ARRAY = "i32array"   # varint count + i32 LE each
    BOOL_ARRAY = "boolarray" # varint count + one byte each
    DENSE = "dense"          # constant-table index
    HINTS = "hints"          # untagged dictionary arch -> dictionary
    PREDICATE = "predicate"  # self-contained (tagged) assume predicate
    ATTR_ARRAY = "attrarray" # varint count + self-contained attributes


@dataclass(frozen=True)
class AttrDef:
    """An attribute: kind, enum class, optional (a flag bit), default, first version."""

    name: str
    kind: AttrKind
    enum: type[enum.IntEnum] | None = None
    optional: bool = False
    default: Any = None
    since: Version = V13_1
    #: BOOL_ARRAY only: the operand group it has one entry per (bytecode spells the default
    #: ``()``, no entry set, as one False per value of that group).
    per_operand: str | None = None

    @property
    def in_flags(self) -> bool:
        return self.optional or self.kind is AttrKind.UNIT


@dataclass(frozen=True)
class ResultDef:
    """A result group; ``infer`` says how the builder derives its type when not given."""

    name: str
    constraint: str
    variadic: bool = False
    since: Version = V13_1
    infer: str | None = None


@dataclass(frozen=True)
class RegionRule:
    """What the regions of an op hold and how they end; the verifier checks by it and the
    printer names block arguments by it."""

    #: The types the block of region ``index`` takes: (op, index) -> types.
    block_args: Callable[["Operation", int], "list[Type]"]
    #: What must end each region, as the verifier's message says it.
    ends_with: str
    #: The problem with ``last``, the terminator ending a region of ``op``, or None.
    end_problem: Callable[["Operation", "Operation"], "str | None"]
    #: For a loop: (terminator name, the types it carries given the loop op) for each
    #: terminator that may end an iteration of this loop, from its body or an ``if`` in it.
    loop_exits: tuple[tuple[str, Callable[["Operation"], "list[Type]"]], ...] = ()
    #: Terminators that, ending a region of this op, act on the enclosing loop instead.
    passes_to_loop: tuple[str, ...] = ()
    #: Whether region ``index`` of ``op`` may have no block: (op, index) -> bool.
    may_be_empty: Callable[["Operation", int], bool] | None = None
    #: Only pure ops (and terminators) may appear in the body.
    pure_body: bool = False
    #: The printer's names for a block's arguments, given their count (None: numbered).
    arg_names: Callable[[int], "list[str | None]"] | None = None

    def exit_types(self, terminator: str) -> Callable[["Operation"], "list[Type]"] | None:
        """What terminator ``terminator`` carries out of this loop (None: it may not end it)."""
        for name, types in self.loop_exits:
            if name == terminator:
                return types
        return None


#: The first sm_XY that has each element type, in whatever op's operands or results
#: (types absent here work on every target); an op's `ElementRule.min_sm` adds the
#: pairs of its own that are newer still (bf16 atomic addf).
ELEMENT_MIN_SM: dict["ScalarType", int] = {F8E4M3FN: 89, F8E5M2: 89, F8E8M0FNU: 100, F4E2M1FN: 100, F8E5M3FNU: 100}


@dataclass(frozen=True)
class ElementRule:
    """The element types an op accepts in one operand group, chosen by the value of one of
    its enum attributes (``by_attr``; None: one set for the op)."""

    operand: str
    by_attr: str | None
    #: (attribute value, or None, -> the element types it accepts), one pair per value.
    accepts: tuple[tuple[Any, "frozenset[ScalarType]"], ...]
    #: (attribute value, element type, the first sm_XY that has it) for pairs newer than the op.
    min_sm: tuple[tuple[Any, "ScalarType", int], ...] = ()

    def min_sm_of(self, value: Any, element: Any) -> int | None:
        """The first sm_XY with ``element`` in mode ``value`` (None: wherever the op is)."""
        for v, el, sm in self.min_sm:
            if v == value and el == element:
                return sm
        return None

    def elements(self, value: Any = None) -> "frozenset[ScalarType] | None":
        """The element types accepted for attribute value ``value`` (None: not listed)."""
        for v, els in self.accepts:
            if v == value:
                return els
        return None


@dataclass(frozen=True)
class OpDef:
    """One Tile IR operation."""

    name: str
    opcode: int
    since: Version
    operands: tuple[OperandDef, ...] = ()
    attrs: tuple[AttrDef, ...] = ()
    results: tuple[ResultDef, ...] = ()
    regions: tuple[str, ...] = ()
    segmented: bool = False
    terminator: bool = False
    parents: tuple[str, ...] = ()
    same: tuple[tuple[str, ...], ...] = ()
    pure: bool = False  # ODS "Pure": free of memory effects and speculatable (allowed in reduce/scan)
    structural: bool = False
    #: The printed syntax: a format (see the module docstring) or a custom printer.
    fmt: str | CustomPrinter = ""
    #: The name the op gives its first result in MLIR text (cuda-tile's getAsmResultNames);
    #: "" when the op has the interface but names nothing; a function when the name
    #: depends on the op (a constant's value, an assume's operand).
    asm_name: str | AsmNamer | None = None
    #: A terminator the printer leaves out when it carries nothing and ends a region.
    elided_when_empty: bool = False
    #: A verification rule beyond the table's constraints (shapes, counts, attribute values).
    check: Checker | None = None
    #: The first sm_XY that has the op (None: every target).
    min_sm: int | None = None
    #: The element types the op accepts, by the value of one attribute (e.g. atomic modes).
    elements: ElementRule | None = None
    #: Its regions' rules (None: the verifier checks no block arguments or terminator types).
    region_rule: RegionRule | None = None

    def __post_init__(self) -> None:
        # a field is never older than its op: lift every "since" to at least the op's
        v = self.since
        object.__setattr__(self, "operands", tuple(o if o.since >= v else replace(o, since=v) for o in self.operands))
        object.__setattr__(self, "attrs", tuple(a if a.since >= v else replace(a, since=v) for a in self.attrs))
        object.__setattr__(self, "results", tuple(r if r.since >= v else replace(r, since=v) for r in self.results))

    # -- derived facts -------------------------------------------------------------
    @property
    def variadic(self) -> bool:
        """Bytecode writes a result count when any operand or result group is variadic."""
        return any(o.arity is Arity.VARIADIC for o in self.operands) or any(r.variadic for r in self.results)

    def flag_fields(self) -> list[tuple[str, Version, bool]]:
        """(name, since, is_attr) of flag-carried fields in bit order (version, attrs first)."""
        items: list[tuple[Version, int, int, str]] = []
        for i, a in enumerate(self.attrs):
            if a.in_flags:
                items.append((a.since, 0, i, a.name))
        if self.segmented:
            for i, o in enumerate(self.operands):
                if o.arity is Arity.OPTIONAL:
                    items.append((o.since, 1, i, o.name))
        items.sort()
        return [(n, v, k == 0) for v, k, _, n in items]

    def has_flags(self, version: Version) -> bool:
        f = self.flag_fields()
        return bool(f) and version >= min(v for _, v, _ in f)

    def operand(self, name: str) -> OperandDef:
        for o in self.operands:
            if o.name == name:
                return o
        raise KeyError(name)

    def attr(self, name: str) -> AttrDef | None:
        for a in self.attrs:
            if a.name == name:
                return a
        return None

    @property
    def count_all_operands(self) -> bool:
        """Non-segmented ops with an optional or variadic group write one total count."""
        return not self.segmented and any(o.arity is not Arity.ONE for o in self.operands)


ONE, OPT, VAR = Arity.ONE, Arity.OPTIONAL, Arity.VARIADIC
K = AttrKind


def O(name: str, c: str = "tile", arity: Arity = ONE, since: Version = V13_1) -> OperandDef:
    return OperandDef(name, c, arity, since)


def A(name: str, kind: AttrKind, enum_: type[enum.IntEnum] | None = None, *, optional: bool = False,
      default: Any = None, since: Version = V13_1, per_operand: str | None = None) -> AttrDef:
    return AttrDef(name, kind, enum_, optional, default, since, per_operand)


def R(name: str, c: str = "tile", *, variadic: bool = False, since: Version = V13_1,
      infer: str | None = None) -> ResultDef:
    return ResultDef(name, c, variadic, since, infer)
