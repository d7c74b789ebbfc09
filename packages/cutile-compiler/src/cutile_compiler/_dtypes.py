"""Element types of the kernel language and their promotion rules.

A `DType` is the object users write in annotations and constructors (``f32``,
``bf16``...). Unsigned integers exist here although Tile IR integers are
signless: signedness picks the op flavour (``divi`` signed or unsigned, ``exti``
sign- or zero-extend...) at lowering time.

The records below are the one table of per-dtype facts: each names its kind, its
Tile IR element type (whose width and float format `cutile_ir` owns and the
record reads), its numpy / ml_dtypes name and its DLPack type code; everything
else (bits, bytes per element, significand and exponent bits, the numpy dtype,
the C type a launch packs a scalar as, the DLPack and array-interface type
descriptions) is derived from them where it is used.

Promotion (documented in ARCHITECTURE.md): two tiles of different dtypes
combine only when one converts to the other without loss; Python numbers are
"weak" and take the tile's dtype (an int into an int or float tile, a float
into a float tile; a float into an int tile is an error).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

import cutile_ir as ir

from cutile_compiler._errors import ArgumentError

Kind = Literal["bool", "int", "uint", "float"]


class DLPackCode(enum.IntEnum):
    """DLPack's ``DLDataTypeCode`` (dlpack.h, 1.1) for the dtypes cutile exchanges."""

    INT = 0
    UINT = 1
    FLOAT = 2
    BFLOAT = 4
    BOOL = 6
    FLOAT8_E4M3FN = 10
    FLOAT8_E5M2 = 12
    FLOAT8_E8M0FNU = 14
    FLOAT4_E2M1FN = 17


@dataclass(frozen=True, eq=False, init=False)
class DType:
    """An element type. Compared by identity: there is one object per dtype."""

    name: str
    kind: Kind
    #: the Tile IR element type (integers are signless: u8 and i8 are both ``i8``)
    ir_type: ir.ScalarType
    #: numpy / ml_dtypes name, e.g. "bfloat16"
    numpy_name: str
    #: DLPack's type code (DLPack's bits are ``8 * itemsize``)
    dlpack_code: DLPackCode
    #: the dtype whose memory layout this one uses (tf32: f32), None for itself; in
    #: memory, on the host and in a launch's parameters the two are one type
    stored_as: DType | None
    #: bits of one value in memory (bool: 1, though stored in a byte; tf32: f32's 32)
    bits: int
    #: bytes per element in memory (bool is stored as one byte); a field, as launches read it often
    itemsize: int
    #: the float format (cutile_ir's), None for integers and bool
    float_format: ir.FloatFormat | None
    #: significand bits incl. the implicit one (floats; 0 otherwise)
    mantissa_bits: int
    #: exponent bits (floats; 0 otherwise)
    exponent_bits: int
    #: a storage or scale format without arithmetic (f8e8m0fnu, f4e2m1fn): converted with
    #: astype, moved, and read by mma_scaled; no element-wise math, no implicit promotion
    restricted: bool

    def __init__(self, name: str, kind: Kind, ir_type: ir.ScalarType, numpy_name: str | None = None,
                 dlpack_code: DLPackCode | None = None, *, stored_as: DType | None = None,
                 restricted: bool = False) -> None:
        # (the table below is the only caller: a record that breaks these is a cutile bug)
        assert (kind == "float") == ir_type.is_float, f"dtype {name}: kind {kind} but Tile IR type {ir_type}"
        if stored_as is not None:  # the storage facts are the storing dtype's
            numpy_name, dlpack_code = stored_as.numpy_name, stored_as.dlpack_code
        assert numpy_name is not None and dlpack_code is not None, f"dtype {name}: its storage facts, or stored_as"
        float_format = ir.FLOAT_FORMATS[ir_type.name] if ir_type.is_float else None
        bits = stored_as.bits if stored_as is not None else ir_type.bitwidth
        facts: dict[str, Any] = {
            "name": name, "kind": kind, "ir_type": ir_type, "numpy_name": numpy_name, "dlpack_code": dlpack_code,
            "stored_as": stored_as, "bits": bits, "itemsize": max(1, bits // 8), "float_format": float_format,
            "mantissa_bits": float_format.precision if float_format is not None else 0,
            "exponent_bits": float_format.exponent_bits if float_format is not None else 0,
            "restricted": restricted,
        }
        for key, value in facts.items():
            object.__setattr__(self, key, value)

    def __repr__(self) -> str:
        return self.name

    __str__ = __repr__

    @property
    def ir_name(self) -> str:
        """The Tile IR element type's name, e.g. ``"bf16"``, ``"i32"``."""
        return self.ir_type.name

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

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (lookup, (self.name,))  # unpickles as the one object of its name


_D = DLPackCode
bool_ = DType("bool", "bool", ir.I1, "bool", _D.BOOL)
i8 = DType("i8", "int", ir.I8, "int8", _D.INT)
i16 = DType("i16", "int", ir.I16, "int16", _D.INT)
i32 = DType("i32", "int", ir.I32, "int32", _D.INT)
i64 = DType("i64", "int", ir.I64, "int64", _D.INT)
u8 = DType("u8", "uint", ir.I8, "uint8", _D.UINT)
u16 = DType("u16", "uint", ir.I16, "uint16", _D.UINT)
u32 = DType("u32", "uint", ir.I32, "uint32", _D.UINT)
u64 = DType("u64", "uint", ir.I64, "uint64", _D.UINT)
f16 = DType("f16", "float", ir.F16, "float16", _D.FLOAT)
bf16 = DType("bf16", "float", ir.BF16, "bfloat16", _D.BFLOAT)
f32 = DType("f32", "float", ir.F32, "float32", _D.FLOAT)
f64 = DType("f64", "float", ir.F64, "float64", _D.FLOAT)
# tf32 is stored as f32 and selects the tensor cores' reduced-precision mode in mma.
tf32 = DType("tf32", "float", ir.TF32, stored_as=f32)
f8e4m3fn = DType("f8e4m3fn", "float", ir.F8E4M3FN, "float8_e4m3fn", _D.FLOAT8_E4M3FN)
f8e5m2 = DType("f8e5m2", "float", ir.F8E5M2, "float8_e5m2", _D.FLOAT8_E5M2)
# The block scales and 4-bit elements of mma_scaled (sm_100+): restricted formats.
f8e8m0fnu = DType("f8e8m0fnu", "float", ir.F8E8M0FNU, "float8_e8m0fnu", _D.FLOAT8_E8M0FNU, restricted=True)
f4e2m1fn = DType("f4e2m1fn", "float", ir.F4E2M1FN, "float4_e2m1fn", _D.FLOAT4_E2M1FN, restricted=True)
del _D

#: The dtypes of memory and tiles: tensors, launches and exchanges take each
ALL_DTYPES: tuple[DType, ...] = (
    bool_, i8, i16, i32, i64, u8, u16, u32, u64, f16, bf16, f32, f64, tf32, f8e4m3fn, f8e5m2, f8e8m0fnu,
)
#: The dtypes of tiles only: 4-bit values pack two to a byte in memory, which cutile's
#: tensors (one element per byte address) do not; kernels read them as u8 bytes and
#: ``unpack_from_bytes``
TILE_ONLY_DTYPES: tuple[DType, ...] = (f4e2m1fn,)
BY_NAME: dict[str, DType] = {d.name: d for d in (*ALL_DTYPES, *TILE_ONLY_DTYPES)}
BY_NAME.update({"bool_": bool_, "float16": f16, "bfloat16": bf16, "float32": f32, "float64": f64,
                "int8": i8, "int16": i16, "int32": i32, "int64": i64,
                "uint8": u8, "uint16": u16, "uint32": u32, "uint64": u64})
# A stored-as dtype shares its storage's names and codes, which name the storage.
BY_NUMPY_NAME: dict[str, DType] = {d.numpy_name: d for d in ALL_DTYPES if d.stored_as is None}


def lookup(name: str) -> DType:
    """The dtype called ``name`` (``"f32"``, ``"float32"``, ``"bfloat16"``...)."""
    try:
        return BY_NAME[name]
    except KeyError:
        raise ArgumentError(
            f"unknown dtype {name!r}; expected one of {', '.join(d.name for d in (*ALL_DTYPES, *TILE_ONLY_DTYPES))}"
        ) from None


def converts_losslessly(source: DType, target: DType) -> bool:
    """Whether every value of ``source`` is exactly representable in ``target``."""
    if source is target:
        return True
    if source.restricted or target.restricted:  # (converted explicitly, with astype)
        return False
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
    if partner.restricted:
        return None
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


def numpy_dtype(dtype: DType) -> np.dtype[Any]:
    """The numpy dtype storing ``dtype``. numpy knows bf16 and the fp8 formats once
    ml_dtypes is imported (cutile imports it; the compiler itself needs numpy's view of
    them only to evaluate tiles, and checks constants through cutile_ir's codec)."""
    try:
        return np.dtype(dtype.numpy_name)
    except TypeError:
        raise ArgumentError(f"numpy does not know {dtype.numpy_name!r}: import ml_dtypes before "
                            f"evaluating {dtype} tiles") from None
