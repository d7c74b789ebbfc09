"""Attributes of Tile IR: enums, dense constants, assume predicates, hints, locations."""

from __future__ import annotations

import enum
import math
import struct
from fractions import Fraction
from dataclasses import dataclass, field
from typing import Mapping, Sequence, Union

from ._apfloat import _round_to_format
from ._errors import IRTypeError
from ._types import (
    BF16, F16, F32, F64, FLOAT_FORMATS, TF32, I1, I32, FloatFormat, PaddingValue, PointerType, ScalarType,
    TileType, Type,
)
from ._versions import V13_1, V13_4, Version


class _TextEnum(enum.IntEnum):
    """An enum whose members print as their MLIR keyword and may appear in a later version."""

    @property
    def text(self) -> str:
        return self.name.lower()

    @property
    def since(self) -> Version:
        return V13_1


class Signedness(_TextEnum):
    """How integer operands are interpreted (Tile IR integers are signless)."""

    UNSIGNED = 0
    SIGNED = 1


class IntegerOverflow(_TextEnum):
    """What the compiler may assume about integer overflow."""

    NONE = 0
    NSW = 1
    NUW = 2
    NW = 3

    @property
    def text(self) -> str:
        return {0: "none", 1: "no_signed_wrap", 2: "no_unsigned_wrap", 3: "no_wrap"}[int(self)]


class RoundingMode(_TextEnum):
    """Rounding of floating-point results and conversions."""

    NEAREST_EVEN = 0
    ZERO = 1
    NEGATIVE_INF = 2
    POSITIVE_INF = 3
    APPROX = 4
    FULL = 5
    NEAREST_INT_TO_ZERO = 6
    NEAREST_AWAY = 7

    @property
    def since(self) -> Version:
        return V13_4 if self is RoundingMode.NEAREST_AWAY else V13_1


class ComparisonOrdering(_TextEnum):
    """Whether a float comparison with a NaN is false (ordered) or true (unordered)."""

    UNORDERED = 0
    ORDERED = 1


class ComparisonPredicate(_TextEnum):
    """The relation a comparison tests."""

    EQUAL = 0
    NOT_EQUAL = 1
    LESS_THAN = 2
    LESS_THAN_OR_EQUAL = 3
    GREATER_THAN = 4
    GREATER_THAN_OR_EQUAL = 5


class AtomicRMWMode(_TextEnum):
    """The modification of an atomic read-modify-write."""

    AND = 0
    OR = 1
    XOR = 2
    ADD = 3
    ADDF = 4
    MAX = 5
    MIN = 6
    UMAX = 7
    UMIN = 8
    XCHG = 9


class MemoryScope(_TextEnum):
    """Who may access a location concurrently."""

    TL_BLK = 0
    DEVICE = 1
    SYS = 2


class MemoryOrdering(_TextEnum):
    """Memory ordering semantics of a load, store or atomic."""

    WEAK = 0
    RELAXED = 1
    ACQUIRE = 2
    RELEASE = 3
    ACQ_REL = 4


class SymbolVisibility(_TextEnum):
    """Visibility of a global."""

    PUBLIC = 0
    PRIVATE = 1


ENUM_TYPES: tuple[type[_TextEnum], ...] = (
    Signedness, IntegerOverflow, RoundingMode, ComparisonOrdering, ComparisonPredicate,
    AtomicRMWMode, MemoryScope, MemoryOrdering, SymbolVisibility,
)

# ---------------------------------------------------------------------------------------
# Scalar encoding of element values (dense constants).



def _bits_from_float(value: float, t: ScalarType) -> int:
    """The bits of ``value`` rounded to ``t`` (nearest, ties to even), as a bit pattern."""
    if t is F32:
        try:
            return int.from_bytes(struct.pack("<f", value), "little")
        except OverflowError:
            return 0x7F800000 | (0x80000000 if value < 0 else 0)
    if t is F64:
        return int.from_bytes(struct.pack("<d", value), "little")
    if t is F16:
        try:
            return int.from_bytes(struct.pack("<e", value), "little")
        except OverflowError:
            return 0x7C00 | (0x8000 if value < 0 else 0)
    if t is BF16 or t is TF32:
        shift = 16 if t is BF16 else 13
        width = 32 - shift
        if math.isnan(value):
            return 0x7FC00000 >> shift
        sign = (1 << (width - 1)) if math.copysign(1.0, value) < 0 else 0
        if math.isinf(value):
            return sign | (0x7F800000 >> shift)
        fmt = FLOAT_FORMATS[t.name]
        r = float(_round_to_format(Fraction(value), fmt.precision, fmt.min_exponent))
        if abs(r) >= 2.0 ** 128:
            return sign | (0x7F800000 >> shift)
        return (int.from_bytes(struct.pack("<f", r), "little") >> shift) | sign
    if t.name in _MINIFLOATS:
        return _minifloat_bits(value, t)
    raise IRTypeError(f"cannot convert a Python float to {t}")


#: The small float formats (8 bits or fewer): converted from their bit fields and through
#: a sorted table of all their values, where struct has no format for them.
_MINIFLOATS: dict[str, FloatFormat] = {name: f for name, f in FLOAT_FORMATS.items() if f.width <= 8}


def _minifloat(bits: int, t: ScalarType) -> float:
    f = _MINIFLOATS[t.name]
    e_bits, m_bits, bias, has_inf, signed = f.exponent_bits, f.mantissa_bits, f.bias, f.has_inf, f.signed
    sign = -1.0 if signed and (bits >> (e_bits + m_bits)) & 1 else 1.0
    e = (bits >> m_bits) & ((1 << e_bits) - 1)
    m = bits & ((1 << m_bits) - 1)
    top = (1 << e_bits) - 1
    if t.name == "f8E8M0FNU":
        return math.nan if e == 0xFF else 2.0 ** (e - bias)
    if has_inf and e == top:
        return sign * math.inf if m == 0 else math.nan
    if not has_inf and e == top and m == (1 << m_bits) - 1 and t.name != "f4E2M1FN":
        return math.nan
    if e == 0:
        return sign * (m / (1 << m_bits)) * 2.0 ** (1 - bias)
    return sign * (1 + m / (1 << m_bits)) * 2.0 ** (e - bias)


_MINI_TABLES: dict[str, dict[float, int]] = {}  # finite value -> bits (+0.0 for zero), per format


def _minifloat_bits(value: float, t: ScalarType) -> int:
    """``value`` rounded to a small float format as IEEE rounds (to nearest, ties to
    even, with an unbounded exponent), then overflowing to inf, or refused where the
    format has none."""
    f = _MINIFLOATS[t.name]
    nbits = f.width
    table = _MINI_TABLES.get(t.name)
    if table is None:
        table = {}
        for b in range(1 << nbits):
            if math.isfinite(_minifloat(b, t)):
                table.setdefault(_minifloat(b, t), b)  # +0.0 (bits 0) before -0.0
        _MINI_TABLES[t.name] = table
    if math.isnan(value):
        nans = [b for b in range(1 << nbits) if math.isnan(_minifloat(b, t))]
        if not nans:
            raise IRTypeError(f"{t} has no NaN")
        return max(b for b in nans if not b >> (nbits - 1)) if f.signed else nans[0]
    lo, hi = min(table), max(table)
    if value < 0 and not f.signed:
        raise IRTypeError(f"{value!r} is out of the range of {t} ([{lo}, {hi}])")
    rounded = value if math.isinf(value) else float(_round_to_format(Fraction(value), f.precision, f.min_exponent))
    if abs(rounded) > hi:
        if f.has_inf:
            return ((1 << (nbits - 1)) if value < 0 else 0) | (((1 << f.exponent_bits) - 1) << f.mantissa_bits)
        raise IRTypeError(f"{value!r} is out of the range of {t} ([{lo}, {hi}])")
    if rounded == 0 and f.signed and math.copysign(1.0, value) < 0:
        return 1 << (nbits - 1)
    return table[rounded]


def _float_from_bits(bits: int, t: ScalarType) -> float:
    """The value of any bit pattern of ``t``; bits above its width (a tf32 stored in three
    bytes, a f4 in one) are ignored, as MLIR ignores them."""
    bits &= (1 << t.bitwidth) - 1
    if t.name in _MINIFLOATS:
        return _minifloat(bits, t)
    if t is TF32:
        return float(struct.unpack("<f", (bits << 13).to_bytes(4, "little"))[0])
    if t is F32:
        return float(struct.unpack("<f", bits.to_bytes(4, "little"))[0])
    if t is F64:
        return float(struct.unpack("<d", bits.to_bytes(8, "little"))[0])
    if t is F16:
        return float(struct.unpack("<e", bits.to_bytes(2, "little"))[0])
    if t is BF16:
        return float(struct.unpack("<f", (bits << 16).to_bytes(4, "little"))[0])
    raise IRTypeError(f"no Python float view of {t}")


def encode_element(value: int | float | bool, t: ScalarType) -> bytes:
    """Little-endian bytes of one element of type ``t`` (ints wrap to the width)."""
    n = t.nbytes
    if t.is_float:
        if isinstance(value, int) and not isinstance(value, bool) and t.bitwidth <= 8:
            return (value & 0xFF).to_bytes(1, "little")  # small floats also take raw bit patterns
        bits = _bits_from_float(float(value), t)
        return bits.to_bytes(n, "little")
    if t is I1:
        return b"\xff" if value else b"\x00"
    v = int(value)
    mask = (1 << (8 * n)) - 1
    return (v & mask).to_bytes(n, "little")


def decode_element(data: bytes, t: ScalarType) -> int | float:
    """Inverse of :func:`encode_element` (signed view for integers). Any bytes decode: the
    bits above the type's width are ignored (an i1 is its bit 0)."""
    w = t.bitwidth
    bits = int.from_bytes(data, "little") & ((1 << w) - 1)
    if t.is_float:
        return _float_from_bits(bits, t)
    if t is I1:
        return bits
    return bits - (1 << w) if bits >> (w - 1) else bits


def _i1_packed_size(numel: int) -> int:
    """Bytes of an i1 constant stored one bit per element (element i is bit i % 8 of byte i // 8)."""
    return (numel + 7) // 8


@dataclass(frozen=True, slots=True)
class DenseElements:
    """A dense constant of a tile type: raw little-endian element bytes, either one element
    (a splat) or every element in row-major order. i1 elements are packed one bit each
    (``(numel + 7) // 8`` bytes); a single byte for more than 8 elements is a splat of its
    bit 0. This is how Tile IR bytecode stores them and how ``tileirdisasm`` reads them."""

    type: TileType
    data: bytes

    def __post_init__(self) -> None:
        if not isinstance(self.type, TileType) or not isinstance(self.type.element, ScalarType):
            raise IRTypeError(f"dense constants need a tile of numbers, found {self.type}")
        n = self.type.element.nbytes
        full = _i1_packed_size(self.type.numel) if self.type.element == I1 else n * self.type.numel
        if len(self.data) not in (n, full):
            raise IRTypeError(
                f"dense constant of {self.type} needs {n} (splat) or {full} bytes, found {len(self.data)}"
            )

    @staticmethod
    def splat(t: TileType, value: int | float | bool) -> DenseElements:
        """Every element equal to ``value``."""
        el = t.element
        if not isinstance(el, ScalarType):
            raise IRTypeError(f"dense constants need a tile of numbers, found {t}")
        return DenseElements(t, encode_element(value, el))

    @staticmethod
    def from_values(t: TileType, values: Sequence[int | float | bool]) -> DenseElements:
        """Elements in row-major order (``len(values) == numel``); equal values make a splat."""
        el = t.element
        if not isinstance(el, ScalarType):
            raise IRTypeError(f"dense constants need a tile of numbers, found {t}")
        if len(values) != t.numel:
            raise IRTypeError(f"{t} needs {t.numel} values, found {len(values)}")
        enc = [encode_element(v, el) for v in values]
        if all(e == enc[0] for e in enc):
            return DenseElements(t, enc[0])
        if el == I1:
            packed = bytearray((len(values) + 7) // 8)
            for i, v in enumerate(values):
                if v:
                    packed[i // 8] |= 1 << (i % 8)
            return DenseElements(t, bytes(packed))
        return DenseElements(t, b"".join(enc))

    @property
    def is_splat(self) -> bool:
        """Every element holds the same bytes (the data may still list them all). This is
        MLIR's notion of a splat: such a constant prints as one value."""
        el = self.type.element
        assert isinstance(el, ScalarType)
        numel = self.type.numel
        if el == I1:
            if len(self.data) != _i1_packed_size(numel):
                return True
            all_ones = (1 << numel) - 1
            return (int.from_bytes(self.data, "little") & all_ones) in (0, all_ones)
        n = el.nbytes
        return self.data == self.data[:n] * (len(self.data) // n)

    def element_bytes(self, i: int) -> bytes:
        """The stored bytes of element ``i`` (row-major); an i1 element is one byte, 0 or 1."""
        el = self.type.element
        assert isinstance(el, ScalarType)
        if el == I1:
            if len(self.data) != _i1_packed_size(self.type.numel):
                return bytes([self.data[0] & 1])
            return bytes([(self.data[i // 8] >> (i % 8)) & 1])
        n = el.nbytes
        if len(self.data) == n:
            return self.data
        return self.data[i * n:(i + 1) * n]

    @property
    def stored_elements(self) -> int:
        """How many elements the data lists: 1 for a one-element splat, else ``numel``
        (bounded by the data's size, never by the type's)."""
        el = self.type.element
        assert isinstance(el, ScalarType)
        if el == I1:
            return self.type.numel if len(self.data) == _i1_packed_size(self.type.numel) else 1
        return len(self.data) // el.nbytes

    def values(self) -> list[int | float]:
        """Element values in row-major order (a splat expands to ``numel`` values)."""
        el = self.type.element
        assert isinstance(el, ScalarType)
        vals = [decode_element(self.element_bytes(i), el) for i in range(self.stored_elements)]
        if len(vals) == 1:
            return vals * self.type.numel
        return vals


# ---------------------------------------------------------------------------------------
# Self-contained ("tagged") attributes.


@dataclass(frozen=True, slots=True)
class IntegerAttr:
    """A typed integer (e.g. a reduce identity); kept as the signed value of its width."""

    type: ScalarType
    value: int

    def __post_init__(self) -> None:
        if not isinstance(self.type, ScalarType) or self.type.is_float:
            raise IRTypeError(f"an integer attribute needs an integer type, found {self.type}")
        w = self.type.bitwidth
        v = int(self.value) & ((1 << w) - 1)
        if w > 1 and v >> (w - 1):
            v -= 1 << w
        object.__setattr__(self, "value", v)


@dataclass(frozen=True, slots=True)
class FloatAttr:
    """A typed float, kept as its raw bits so that every value round-trips exactly."""

    type: ScalarType
    bits: int

    def __post_init__(self) -> None:
        if not isinstance(self.type, ScalarType) or not self.type.is_float:
            raise IRTypeError(f"a float attribute needs a float type, found {self.type}")

    @staticmethod
    def of(t: ScalarType, value: float) -> FloatAttr:
        return FloatAttr(t, _bits_from_float(value, t))

    @property
    def value(self) -> float:
        return _float_from_bits(self.bits, self.type)


@dataclass(frozen=True, slots=True)
class BoolAttr:
    """A boolean attribute (``true``/``false``)."""

    value: bool


@dataclass(frozen=True, slots=True)
class StringAttr:
    """A string attribute."""

    value: str


@dataclass(frozen=True, slots=True)
class TypeAttr:
    """An attribute holding a type."""

    value: Type


@dataclass(frozen=True, slots=True)
class ArrayAttr:
    """An array of attributes, printed ``[a, b]``."""

    values: tuple[Attribute, ...]


@dataclass(frozen=True, slots=True)
class DictAttr:
    """An ordered dictionary of named attributes."""

    items: tuple[tuple[str, Attribute], ...]

    def get(self, key: str) -> Attribute | None:
        for k, v in self.items:
            if k == key:
                return v
        return None


@dataclass(frozen=True, slots=True)
class DivBy:
    """assume predicate: values are divisible by ``divisor`` (optionally every/along a dim)."""

    divisor: int
    every: int | None = None
    along: int | None = None

    def __post_init__(self) -> None:
        if (self.every is None) != (self.along is None):
            raise IRTypeError(f"div_by: 'every' and 'along' go together, found every={self.every}, along={self.along}")
        if self.divisor <= 0 or self.divisor & (self.divisor - 1):
            raise IRTypeError(f"div_by: the divisor must be a positive power of two, found {self.divisor}")


@dataclass(frozen=True, slots=True)
class SameElements:
    """assume predicate: groups of ``values[d]`` consecutive elements along dim d are equal."""

    values: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Bounded:
    """assume predicate: lb <= value <= ub (either bound may be absent)."""

    lb: int | None = None
    ub: int | None = None


AssumePredicate = Union[DivBy, SameElements, Bounded]


#: Keys of optimization hints: entries take num_cta_in_cga, occupancy, num_worker_warps_per_cta;
#: loads and stores take latency and allow_tma.
HINT_KEYS = ("num_cta_in_cga", "occupancy", "allow_tma", "latency", "num_worker_warps_per_cta")


@dataclass(frozen=True, slots=True)
class OptimizationHints:
    """Per-architecture hints: ``{"sm_90": {"occupancy": 2}}``; ints become i32, bools bools."""

    per_arch: tuple[tuple[str, DictAttr], ...]

    @staticmethod
    def of(hints: Mapping[str, Mapping[str, int | bool]]) -> OptimizationHints:
        out = []
        for arch, d in hints.items():
            items: list[tuple[str, Attribute]] = []
            for k, v in d.items():
                if k not in HINT_KEYS:
                    raise IRTypeError(f"unknown optimization hint {k!r}; known: {', '.join(HINT_KEYS)}")
                items.append((k, BoolAttr(v) if isinstance(v, bool) else IntegerAttr(I32, int(v))))
            out.append((arch, DictAttr(tuple(items))))
        return OptimizationHints(tuple(out))


Attribute = Union[
    IntegerAttr, FloatAttr, BoolAttr, StringAttr, TypeAttr, ArrayAttr, DictAttr, DenseElements,
    DivBy, SameElements, Bounded, OptimizationHints,
]


@dataclass(frozen=True, slots=True)
class Location:
    """A source position (1-based line and column) within ``function`` of ``file``."""

    file: str
    line: int
    column: int = 0
    function: str | None = field(default=None, compare=False)

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"


__all__ = [
    "ArrayAttr", "AssumePredicate", "AtomicRMWMode", "Attribute", "BoolAttr", "Bounded",
    "ComparisonOrdering", "ComparisonPredicate", "DenseElements", "DictAttr", "DivBy", "FloatAttr",
    "IntegerAttr", "IntegerOverflow", "Location", "MemoryOrdering", "MemoryScope",
    "OptimizationHints", "PaddingValue", "PointerType", "RoundingMode", "SameElements",
    "Signedness", "StringAttr", "SymbolVisibility", "TypeAttr",
]
