"""Every failing driver call becomes a CudaError subclass naming the call."""

from __future__ import annotations

import pytest
from cuda.bindings import driver as real_driver

import cuda_core as cc
from cuda_core import _driver
from cuda_core._errors import error_class, make_error

R = real_driver.CUresult


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (R.CUDA_ERROR_OUT_OF_MEMORY, cc.CudaOutOfMemoryError),
        (R.CUDA_ERROR_INVALID_VALUE, cc.CudaInvalidValueError),
        (R.CUDA_ERROR_INVALID_HANDLE, cc.CudaInvalidValueError),
        (R.CUDA_ERROR_INVALID_DEVICE, cc.CudaInvalidValueError),
        (R.CUDA_ERROR_NO_DEVICE, cc.CudaNoDeviceError),
        (R.CUDA_ERROR_DEVICE_UNAVAILABLE, cc.CudaNoDeviceError),
        (R.CUDA_ERROR_NOT_INITIALIZED, cc.CudaNoDeviceError),
        (R.CUDA_ERROR_LAUNCH_FAILED, cc.CudaLaunchError),
        (R.CUDA_ERROR_ILLEGAL_ADDRESS, cc.CudaLaunchError),
        (R.CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, cc.CudaLaunchError),
        (R.CUDA_ERROR_NOT_FOUND, cc.CudaError),
    ],
)
def test_result_codes_map_to_the_expected_class(code: R, expected: type[cc.CudaError]) -> None:
    assert error_class(int(code)) is expected
    error = make_error(int(code), code.name, None, "cuSomething")
    assert type(error) is expected
    assert isinstance(error, cc.CudaError)
    assert error.name == code.name and error.call == "cuSomething"
    assert str(error).startswith(f"cuSomething failed: {code.name} (")


def test_out_of_memory_is_also_a_memory_error_and_invalid_value_a_value_error() -> None:
    assert issubclass(cc.CudaOutOfMemoryError, MemoryError)
    assert issubclass(cc.CudaInvalidValueError, ValueError)


def test_driver_message_is_used_when_available(fake_driver: object) -> None:
    with pytest.raises(cc.CudaOutOfMemoryError) as info:
        _driver.raise_error(R.CUDA_ERROR_OUT_OF_MEMORY, "cuMemAlloc")
    assert info.value.message == "fake message for CUDA_ERROR_OUT_OF_MEMORY"
    assert info.value.code == 2


def test_call_raises_with_the_call_name(fake_driver: object) -> None:
    with pytest.raises(cc.CudaOutOfMemoryError, match=r"cuMemAlloc failed: CUDA_ERROR_OUT_OF_MEMORY"):
        cc.DeviceBuffer.allocate(1 << 41)


def test_unknown_code_still_gets_a_name_and_a_message() -> None:
    error = make_error(12345, "CUDA_ERROR_12345", None, "cuX")
    assert type(error) is cc.CudaError
    assert error.message == "no description available"
