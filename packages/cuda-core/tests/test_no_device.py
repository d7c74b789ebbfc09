"""Without a driver or a GPU, importing works and the first use explains itself."""

from __future__ import annotations

import subprocess
import sys

import pytest
from typing import Any

import cuda_core as cc
from cuda_core import _driver




def test_missing_driver_library_raises_no_device_error(fake_driver: Any) -> None:
    fake_driver.init_exception = RuntimeError('"cuda" is an NVIDIA driver library and can only be found via system search')
    with pytest.raises(cc.CudaNoDeviceError) as info:
        cc.Device(0)
    assert "no NVIDIA driver was found on this machine" in str(info.value)
    assert info.value.call == "cuInit"
    # The failure is remembered: later uses raise the same error without retrying.
    with pytest.raises(cc.CudaNoDeviceError):
        cc.device_count()
    assert fake_driver.calls["cuInit"] == 1


def test_driver_without_devices_says_so(fake_driver: Any) -> None:
    fake_driver.devices = 0
    assert cc.is_available() is False
    with pytest.raises(cc.CudaNoDeviceError, match="sees no GPU"):
        cc.Device(0)


def test_is_available_never_raises_for_a_missing_driver(fake_driver: Any) -> None:
    fake_driver.init_exception = RuntimeError("libcuda.so.1: cannot open shared object file")
    assert cc.is_available() is False


def test_unavailable_reason_says_why_in_plain_words(fake_driver: Any) -> None:
    assert cc.unavailable_reason() is None  # the fake has one GPU
    from cuda_core.testing import FakeDriver, use_fake_driver

    with use_fake_driver(FakeDriver(devices=0)):  # cuInit fails: CUDA_ERROR_NO_DEVICE
        assert cc.unavailable_reason() == (
            "the NVIDIA driver is installed but sees no GPU (is CUDA_VISIBLE_DEVICES empty, or the device busy "
            "or absent?)")
        assert cc.is_available() is False


def test_unavailable_reason_without_a_driver_is_the_first_sentence(fake_driver: Any) -> None:
    fake_driver.init_exception = RuntimeError("libcuda.so.1: cannot open shared object file")
    assert cc.unavailable_reason() == "no NVIDIA driver was found on this machine, so no GPU can be used"


def test_device_ordinal_out_of_range(fake_driver: Any) -> None:
    with pytest.raises(cc.CudaInvalidValueError, match="ordinal 3 is out of range: 1 device"):
        cc.Device(3)
    with pytest.raises(TypeError, match="ordinal must be an int"):
        cc.Device("0")  # type: ignore[arg-type]


def test_import_touches_no_driver() -> None:
    # A fresh interpreter: importing cuda_core must not load libcuda or call cuInit.
    code = "import cuda_core, sys; from cuda_core import _driver; print(_driver._initialized)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_device_properties_through_the_driver(fake_driver: Any) -> None:
    device = cc.Device(0)
    assert device is cc.Device(0)
    assert device.name == "Fake H200"
    assert device.compute_capability == (9, 0)
    assert device.sm_name == "sm_90"
    assert device.sm_count == 132
    assert device.pci_bus_id == "0000:3B:00.0"
    assert device.attribute("max_threads_per_block") == 1024
    with pytest.raises(ValueError, match="did you mean"):
        device.attribute("MULTIPROCESOR_COUNT")


def test_primary_context_is_retained_once_and_made_current_once_per_thread(fake_driver: Any) -> None:
    import threading

    device = cc.Device(0)
    for _ in range(3):
        device.activate()
    assert fake_driver.calls["cuDevicePrimaryCtxRetain"] == 1
    assert fake_driver.calls["cuCtxSetCurrent"] == 1
    thread = threading.Thread(target=device.activate)
    thread.start()
    thread.join()
    assert fake_driver.calls["cuDevicePrimaryCtxRetain"] == 1
    assert fake_driver.calls["cuCtxSetCurrent"] == 2


def test_exit_hooks_release_contexts_then_finalizers_do_nothing(fake_driver: Any) -> None:
    device = cc.Device(0)
    buffer = cc.DeviceBuffer.allocate(64)
    hooks = list(_driver._exit_hooks)
    try:
        _driver.shutting_down = True
        for hook in reversed(hooks):
            hook()
        assert fake_driver.calls["cuDevicePrimaryCtxRelease"] == 1
        assert device._context is None
        buffer.close()  # after shutdown: no driver call
        assert fake_driver.calls["cuMemFree"] == 0
    finally:
        _driver.shutting_down = False
        device._context = None


def test_the_remembered_failure_keeps_no_caller_alive(fake_driver: Any) -> None:
    import gc
    import weakref

    fake_driver.init_exception = RuntimeError("libcuda.so.1: cannot open shared object file")

    class Argument:
        """Stands for a large array the first call that meets the missing driver holds."""

    def first_use() -> weakref.ref[Argument]:
        argument = Argument()
        with pytest.raises(cc.CudaNoDeviceError):
            cc.Device(0)
        return weakref.ref(argument)

    held = first_use()
    gc.collect()
    assert held() is None
    assert _driver._init_failure is not None and _driver._init_failure.__traceback__ is None
    with pytest.raises(cc.CudaNoDeviceError, match="no NVIDIA driver was found"):
        cc.device_count()
