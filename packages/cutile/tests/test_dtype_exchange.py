"""Every dtype through DLPack and ``__cuda_array_interface__``: the codes and typestrs
derived from the dtype table, checked against numpy and against each other."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from cutile import api
from cutile._tensor import numpy_dtype
from cutile_compiler import _dtypes as dt

RNG = np.random.default_rng(13)


def _values(dtype: dt.DType, n: int) -> np.ndarray[Any, Any]:
    """Random values of ``dtype`` (as numpy stores it), odd length."""
    if dtype.is_bool:
        return RNG.integers(0, 2, n).astype(bool)
    if dtype.is_integer:
        info = np.iinfo(numpy_dtype(dtype))
        return RNG.integers(int(info.min), int(info.max), n, endpoint=True, dtype=numpy_dtype(dtype))
    return RNG.standard_normal(n).astype(numpy_dtype(dtype))


class _Holder:
    """Another library handing back the capsule cutile gave it."""

    def __init__(self, device: tuple[int, int], capsule: Any) -> None:
        self.device, self.capsule = device, capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.device

    def __dlpack__(self, **_: Any) -> Any:
        return self.capsule


@pytest.mark.parametrize("versioned", [False, True], ids=["legacy", "versioned"])
@pytest.mark.parametrize("dtype", dt.ALL_DTYPES, ids=str)
def test_every_dtype_goes_out_and_back_through_dlpack(dtype: dt.DType, versioned: bool) -> None:
    values = _values(dtype, 37)
    tensor = api.from_numpy(values, dtype)
    capsule = tensor.__dlpack__(max_version=(1, 1) if versioned else None)
    back = api.from_dlpack(_Holder(tensor.__dlpack_device__(), capsule))
    assert back.dtype is (dtype.stored_as or dtype)  # tf32 goes out as the f32 that stores it
    np.testing.assert_array_equal(back.to_numpy().view(np.uint8), values.view(np.uint8))
    if numpy_dtype(dtype).type.__module__ == "numpy":  # numpy reads DLPack's codes itself
        read = np.from_dlpack(tensor)
        assert read.dtype == numpy_dtype(dtype)
        np.testing.assert_array_equal(read, values)


class _Interface:
    """Another library handing back the ``__cuda_array_interface__`` cutile gave it."""

    def __init__(self, interface: dict[str, Any]) -> None:
        self.__cuda_array_interface__ = interface


@pytest.mark.parametrize("dtype", dt.ALL_DTYPES, ids=str)
def test_every_dtype_has_an_array_interface_typestr(dtype: dt.DType, make_fake_gpu: Any) -> None:
    with make_fake_gpu():
        tensor = api.from_numpy(_values(dtype, 5), dtype)
        interface = tensor.__cuda_array_interface__
        typestr = interface["typestr"]
        assert np.dtype(typestr).itemsize == dtype.itemsize
        if numpy_dtype(dtype).type.__module__ == "numpy":  # numpy's own typestr (tf32: f32's)
            assert typestr == numpy_dtype(dtype).str
            back = api.from_dlpack(_Interface(interface))
            assert back.dtype is (dtype.stored_as or dtype) and back.address() == tensor.address()
        else:  # no letter in the interface for ml_dtypes' types: raw bytes, which import as no dtype
            assert typestr == ("|V1" if dtype.itemsize == 1 else "<V2")
        del tensor
