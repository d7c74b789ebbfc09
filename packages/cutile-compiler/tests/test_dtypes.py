"""The dtype table: each record's derived facts agree with cutile_ir's element types
and float formats, with numpy / ml_dtypes, and with DLPack as numpy speaks it."""

from __future__ import annotations

import pickle

import ml_dtypes
import numpy as np
import pytest

import cutile_ir as ir
from cutile_compiler import _dtypes as dt
from cutile_compiler._opdefs.elementwise import numpy_dtype

STORED_AS_ITSELF = [d for d in dt.ALL_DTYPES if d.stored_as is None]


@pytest.mark.parametrize("dtype", dt.ALL_DTYPES, ids=str)
def test_widths_and_float_formats_are_cutile_irs(dtype: dt.DType) -> None:
    assert dtype.ir_type in ir.SCALAR_TYPES
    assert dtype.ir_name == dtype.ir_type.name
    assert dtype.is_float == dtype.ir_type.is_float
    storage = dtype.stored_as or dtype
    assert dtype.bits == storage.ir_type.bitwidth
    if dtype.is_float:
        assert dtype.float_format is ir.FLOAT_FORMATS[dtype.ir_type.name]
        assert dtype.mantissa_bits == dtype.float_format.mantissa_bits + 1
        assert dtype.exponent_bits == dtype.float_format.exponent_bits
    else:
        assert (dtype.float_format, dtype.mantissa_bits, dtype.exponent_bits) == (None, 0, 0)


@pytest.mark.parametrize("dtype", dt.ALL_DTYPES, ids=str)
def test_storage_facts_are_numpys(dtype: dt.DType) -> None:
    stored = numpy_dtype(dtype)
    assert stored.name == dtype.numpy_name
    assert stored.itemsize == dtype.itemsize
    if dtype.is_float:
        info = ml_dtypes.finfo(stored)
        if dtype.stored_as is None:  # (tf32 is rounded in mma only; its memory is f32's)
            assert (info.nmant + 1, info.nexp) == (dtype.mantissa_bits, dtype.exponent_bits)
    elif dtype.is_bool:
        assert stored == np.bool_
    else:
        info = np.iinfo(stored)
        assert (info.bits, info.min < 0) == (dtype.bits, dtype.is_signed)
        assert (info.min, info.max) == (-(1 << (dtype.bits - 1)) if dtype.is_signed else 0,
                                        (1 << (dtype.bits - dtype.is_signed)) - 1)


def test_a_stored_as_dtype_shares_its_storages_names_and_codes() -> None:
    assert dt.tf32.stored_as is dt.f32
    assert (dt.tf32.numpy_name, dt.tf32.dlpack_code, dt.tf32.itemsize) == ("float32", dt.DLPackCode.FLOAT, 4)
    assert dt.tf32.ir_type is ir.TF32 and dt.tf32.mantissa_bits == 11
    assert dt.BY_NUMPY_NAME["float32"] is dt.f32
    assert set(dt.BY_NUMPY_NAME.values()) == set(STORED_AS_ITSELF)


def _dlpack_dtype_of(array: np.ndarray) -> tuple[int, int]:  # type: ignore[type-arg]
    """The (code, bits) numpy's own DLPack export gives ``array``."""
    import ctypes

    capsule = array.__dlpack__()
    get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
    get_pointer.restype, get_pointer.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    address = get_pointer(capsule, b"dltensor")
    # DLTensor: void* data; DLDevice device (2 int32); int32 ndim; DLDataType dtype (u8 code, u8 bits, u16 lanes)
    offset = ctypes.sizeof(ctypes.c_void_p) + 8 + 4
    code, bits = (ctypes.c_uint8 * 2).from_address(address + offset)
    return code, bits


@pytest.mark.parametrize("dtype", [d for d in STORED_AS_ITSELF if numpy_dtype(d).type.__module__ == "numpy"], ids=str)
def test_dlpack_codes_are_the_ones_numpy_exports(dtype: dt.DType) -> None:
    assert _dlpack_dtype_of(np.zeros(3, numpy_dtype(dtype))) == (dtype.dlpack_code, 8 * dtype.itemsize)


def test_dlpack_codes_name_one_dtype_each() -> None:
    keys = [(d.dlpack_code, d.itemsize) for d in STORED_AS_ITSELF]
    assert len(set(keys)) == len(keys)


@pytest.mark.parametrize("dtype", dt.ALL_DTYPES, ids=str)
def test_every_dtype_pickles_as_itself(dtype: dt.DType) -> None:
    assert pickle.loads(pickle.dumps(dtype)) is dtype
