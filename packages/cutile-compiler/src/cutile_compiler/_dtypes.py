"""Element types of the kernel language and their promotion rules.

A `DType` is the object users write in annotations and constructors (``f32``,
``bf16``...). Unsigned integers exist here although Tile IR integers are
signless: signedness picks the op flavour (``divi`` signed or unsigned, ``exti``
sign- or zero-extend...) at lowering time.

Promotion (documented in ARCHITECTURE.md): two tiles of different dtypes
combine only when one converts to the other without loss; Python numbers are
"weak" and take the tile's dtype (an int into an int or float tile, a float
into a float tile; a float into an int tile is an error).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from cutile_compiler._errors import ArgumentError

Kind = Literal["bool", "int", "uint", "float"]


@dataclass(frozen=True, eq=False)
class DType:
    """An element type. Compared by identity: there is one object per dtype."""

    name: str
    bits: int
    kind: Kind
    numpy_name: str  # numpy / ml_dtypes name, e.g. "bfloat16"
    ir_name: str  # Tile IR element type, e.g. "bf16", "i32"
    mantissa_bits: int = 0  # significand bits incl. the implicit one (floats)
    exponent_bits: int = 0
    #: bytes per element in memory (bool is stored as one byte); a field, as launches read it often
    itemsize: int = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "itemsize", max(1, self.bits // 8))

    def __repr__(self) -> str:
        return self.name

    __str__ = __repr__

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    @property
    def is_integer(self) -> bool:
        return self.kind in ("int", "uint")

    @property
    def is_signed(self) -> bool:
        return self.kind == "int"

    @property
    def signedness(self) -> str:
        """How Tile IR's integer ops read this type: ``"signed"`` or ``"unsigned"``."""
        return "signed" if self.is_signed else "unsigned"

    @property
    def is_bool(self) -> bool:
        return self.kind == "bool"

    def __reduce__(self) -> str:
        return self.name  # pickles as the module-level singleton


bool_ = DType("bool", 1, "bool", "bool", "i1")
i8 = DType("i8", 8, "int", "int8", "i8")
i16 = DType("i16", 16, "int", "int16", "i16")
i32 = DType("i32", 32, "int", "int32", "i32")
i64 = DType("i64", 64, "int", "int64", "i64")
u8 = DType("u8", 8, "uint", "uint8", "i8")
u16 = DType("u16", 16, "uint", "uint16", "i16")
u32 = DType("u32", 32, "uint", "uint32", "i32")
u64 = DType("u64", 64, "uint", "uint64", "i64")
f16 = DType("f16", 16, "float", "float16", "f16", 11, 5)
bf16 = DType("bf16", 16, "float", "bfloat16", "bf16", 8, 8)
f32 = DType("f32", 32, "float", "float32", "f32", 24, 8)
f64 = DType("f64", 64, "float", "float64", "f64", 53, 11)
# tf32 is stored as f32 and selects the tensor cores' reduced-precision mode in mma.
tf32 = DType("tf32", 32, "float", "float32", "tf32", 11, 8)
f8e4m3fn = DType("f8e4m3fn", 8, "float", "float8_e4m3fn", "f8E4M3FN", 4, 4)
f8e5m2 = DType("f8e5m2", 8, "float", "float8_e5m2", "f8E5M2", 3, 5)

ALL_DTYPES: tuple[DType, ...] = (
    bool_, i8, i16, i32, i64, u8, u16, u32, u64, f16, bf16, f32, f64, tf32, f8e4m3fn, f8e5m2,
)
BY_NAME: dict[str, DType] = {d.name: d for d in ALL_DTYPES}
BY_NAME.update({"bool_": bool_, "float16": f16, "bfloat16": bf16, "float32": f32, "float64": f64,
                "int8": i8, "int16": i16, "int32": i32, "int64": i64,
                "uint8": u8, "uint16": u16, "uint32": u32, "uint64": u64})
BY_NUMPY_NAME: dict[str, DType] = {d.numpy_name: d for d in ALL_DTYPES if d is not tf32}


def lookup(name: str) -> DType:
    """The dtype called ``name`` (``"f32"``, ``"float32"``, ``"bfloat16"``...)."""
    try:
        return BY_NAME[name]
    except KeyError:
        raise ArgumentError(
            f"unknown dtype {name!r}; expected one of {', '.join(d.name for d in ALL_DTYPES)}"
        ) from None


def converts_losslessly(source: DType, target: DType) -> bool:
    """Whether every value of ``source`` is exactly representable in ``target``."""
    if source is target:
        return True
    if source is bool_:
        return True
    if target is bool_ or target is tf32 or source is tf32:
        return False
    if source.is_integer and target.is_integer:
        if source.is_signed == target.is_signed:
            return target.bits >= source.bits
        return not source.is_signed and target.is_signed and target.bits > source.bits
    if source.is_integer and target.is_float:
        value_bits = source.bits - (1 if source.is_signed else 0)
        return target.mantissa_bits >= value_bits
    if source.is_float and target.is_float:
        return (
            target.mantissa_bits >= source.mantissa_bits
            and target.exponent_bits >= source.exponent_bits
        )
    return False


def promote(a: DType, b: DType) -> DType | None:
    """The common dtype of two tiles, or None when neither converts losslessly."""
    if a is b:
        return a
    if converts_losslessly(a, b):
        return b
    if converts_losslessly(b, a):
        return a
    return None


def weak_scalar_dtype(value: bool | int | float, partner: DType) -> DType | None:
    """The dtype a Python number takes next to a tile of ``partner`` (None: not allowed)."""
    if isinstance(value, bool):
        return partner
    if isinstance(value, int):
        return partner if (partner.is_integer or partner.is_float) else None
    return partner if partner.is_float else None


def default_scalar_dtype(value: bool | int | float) -> DType:
    """The dtype of a Python number standing alone: bool, i32 (i64 if it needs it) or f32."""
    if isinstance(value, bool):
        return bool_
    if isinstance(value, int):
        return i32 if -(2**31) <= value < 2**31 else i64
    return f32


def fits(value: int, dtype: DType) -> bool:
    """Whether integer ``value`` is representable in integer ``dtype``."""
    if dtype.is_signed:
        return -(1 << (dtype.bits - 1)) <= value < (1 << (dtype.bits - 1))
    return 0 <= value < (1 << dtype.bits)
