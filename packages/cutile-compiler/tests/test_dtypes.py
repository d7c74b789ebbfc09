"""The dtype table: each record's derived facts agree with cutile_ir's element types
and float formats, with numpy / ml_dtypes, and with DLPack as numpy speaks it."""

from __future__ import annotations

import pickle
from typing import Any

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


def test_a_bf16_constant_compiles_in_a_process_that_never_imported_ml_dtypes(tmp_path: Any) -> None:
    """The front end checks a constant's range through cutile_ir's element codec, not
    numpy's view of bf16 (which needs ml_dtypes: the compiler alone raised a raw
    RuntimeError there)."""
    import subprocess
    import sys

    script = (
        "import sys\n"
        "import cutile_compiler as cc\n"
        "from cutile_compiler import dtypes as dt\n"
        "import cutile_compiler.language as L\n"
        "from cutile_compiler.language import Mut, Tensor, bf16\n"
        "assert 'ml_dtypes' not in sys.modules\n"
        "def k(z: Mut[Tensor[bf16, ['B']]]):\n"
        "    z.store(L.full((64,), 1.5, bf16))\n"
        "sig = cc.parse_signature(k)\n"
        "spec = cc.specialize(sig, 'k', {'z': cc.TensorSpec(dt.bf16, (64,), (64,))})\n"
        "cc.build_kernel_ir(k, sig, spec)\n"
        "assert 'ml_dtypes' not in sys.modules\n"
        "print('compiled')\n"
    )
    (tmp_path / "kernel.py").write_text(script)  # (the front end reads the kernel's source from its file)
    done = subprocess.run([sys.executable, str(tmp_path / "kernel.py")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "compiled", done.stderr


@pytest.mark.parametrize("dtype", [d for d in dt.ALL_DTYPES if d.is_float], ids=str)
def test_the_constant_range_check_agrees_with_numpy(dtype: dt.DType) -> None:
    """cutile_ir's codec and the bit fields give what ml_dtypes' numpy types give."""
    from cutile_compiler._opdefs.shape import largest_finite, stored_float

    if dtype is dt.tf32:
        assert largest_finite(dtype) == (2 - 2.0 ** -10) * 2.0 ** 127
        return
    kind = np.dtype(dtype.numpy_name)
    assert largest_finite(dtype) == float(ml_dtypes.finfo(kind).max)
    rng = np.random.default_rng(5)
    top = largest_finite(dtype)
    for value in [*(float(u) * top * 1.1 if abs(u) < 0.9 else float(u) * top for u in rng.uniform(-1, 1, 50)), top]:
        with np.errstate(over="ignore", invalid="ignore"):
            expected = float(np.asarray(value, dtype=kind))
        got = stored_float(float(value), dtype)
        assert got == expected or (not np.isfinite(got) and not np.isfinite(expected)), (value, got, expected)
