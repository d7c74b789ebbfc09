"""The dtype table: every element type of the kernel language, by object and by name.

One `DType` object exists per dtype (compared by identity; it pickles as itself).
`ALL_DTYPES` lists those of memory and tiles, `TILE_ONLY_DTYPES` those of tiles only
(f4e2m1fn); `BY_NAME` finds one by its name or numpy spelling
(``"f32"``, ``"float32"``, ``"bool_"``), `BY_NUMPY_NAME` by numpy/ml_dtypes name,
and `lookup` does the former with an `ArgumentError` naming the choices.
`numpy_dtype` is the numpy dtype that stores one (bf16 and the fp8 types need
ml_dtypes imported); `fits` says whether an integer is representable in one;
`promote` and `converts_losslessly` are the promotion rules of ARCHITECTURE.md.
"""

from cutile_compiler._dtypes import (
    ALL_DTYPES,
    TILE_ONLY_DTYPES,
    BY_NAME,
    BY_NUMPY_NAME,
    DType,
    Kind,
    bf16,
    bool_,
    converts_losslessly,
    default_scalar_dtype,
    f8e4m3fn,
    f8e5m2,
    f8e8m0fnu,
    f4e2m1fn,
    f16,
    f32,
    f64,
    fits,
    i8,
    i16,
    i32,
    i64,
    lookup,
    promote,
    tf32,
    u8,
    u16,
    u32,
    u64,
)
from cutile_compiler._dtypes import numpy_dtype

__all__ = [
    "ALL_DTYPES", "TILE_ONLY_DTYPES", "BY_NAME", "BY_NUMPY_NAME", "DType", "Kind", "bf16", "bool_", "converts_losslessly",
    "default_scalar_dtype", "f8e4m3fn", "f8e5m2", "f8e8m0fnu", "f4e2m1fn", "f16", "f32", "f64", "fits", "i8", "i16", "i32", "i64",
    "lookup", "numpy_dtype", "promote", "tf32", "u8", "u16", "u32", "u64",
]
