"""Module lifetime and kernel argument packing, against the fake driver."""

from __future__ import annotations

import gc
import struct
from typing import Any

import pytest

import cuda_core as cc

CUBIN = b"\x7fELF" + bytes(60)


def test_module_stays_loaded_while_a_function_is_referenced(fake_driver: Any) -> None:
    function = cc.Module.load(CUBIN).get_function("axpy")
    gc.collect()
    assert len(fake_driver.live_handles["module"]) == 1
    assert function.module.get_function("axpy") is function
    del function
    gc.collect()
    assert fake_driver.live_handles["module"] == set()


def test_module_image_kinds_and_errors(fake_driver: Any, tmp_path: Any) -> None:
    assert cc.Module.load(b".version 8.0\n.target sm_90\n").kind == "ptx"
    (tmp_path / "k.cubin").write_bytes(CUBIN)
    assert cc.Module.load_file(tmp_path / "k.cubin").kind == "cubin"
    with pytest.raises(ValueError, match="neither a cubin"):
        cc.Module.load(b"\x00\x01garbage")
    with pytest.raises(ValueError, match="image is empty"):
        cc.Module.load(b"")
    with pytest.raises(cc.CudaInvalidValueError, match="no kernel named 'nope'"):
        cc.Module.load(CUBIN).get_function("nope")
    fake_driver.fail_next["cuModuleLoadData"] = fake_driver.CUresult.CUDA_ERROR_INVALID_IMAGE
    with pytest.raises(cc.CudaError, match=r"cubin image of 64 bytes for sm_90"):
        cc.Module.load(CUBIN)


def test_launch_packs_each_parameter_at_its_declared_size(fake_driver: Any) -> None:
    function = cc.Module.load(CUBIN).get_function("axpy")
    with cc.DeviceBuffer.allocate(64) as y, cc.DeviceBuffer.allocate(64) as x:
        cc.launch(function, cc.LaunchConfig(grid=(4, 2), block=128), y, x, 2.5, 1000)
        record = fake_driver.launches[-1]
        assert record["grid"] == (4, 2, 1) and record["block"] == (128, 1, 1)
        assert record["params"] == [
            struct.pack("<Q", y.ptr),
            struct.pack("<Q", x.ptr),
            struct.pack("<f", 2.5),
            struct.pack("<i", 1000),
        ]


def test_prepared_launch_rewrites_only_changed_values(fake_driver: Any) -> None:
    function = cc.Module.load(CUBIN).get_function("axpy")
    prepared = cc.PreparedLaunch(function, cc.LaunchConfig(8, 256), ["ptr", "ptr", "f32", "u32"])
    with cc.DeviceBuffer.allocate(64) as y, cc.DeviceBuffer.allocate(64) as x:
        prepared.launch(None, y, x, 1.0, 7)
        writes = []
        original = prepared._write

        def counting_write(index: int, value: Any) -> None:
            writes.append(index)
            original(index, value)

        prepared._write = counting_write  # type: ignore[method-assign]
        prepared.launch(None, y, x, 1.0, 7)  # identical objects: nothing rewritten
        assert writes == []
        prepared.launch(None, y, x, 3.0, 7)
        assert writes == [2]
        prepared[3] = 2**32 - 1
        prepared.launch()
        assert fake_driver.launches[-1]["params"][2:] == [struct.pack("<f", 3.0), struct.pack("<I", 2**32 - 1)]
        assert len(fake_driver.launches) == 4


def test_launch_values_passes_the_same_tuple_again_without_comparing(fake_driver: Any) -> None:
    function = cc.Module.load(CUBIN).get_function("axpy")
    prepared = cc.PreparedLaunch(function, cc.LaunchConfig(8, 256), ["ptr", "ptr", "f32", "u32"])
    with cc.DeviceBuffer.allocate(64) as y, cc.DeviceBuffer.allocate(64) as x:
        values = (y, x, 1.0, 7)
        writes = []
        original = prepared._write

        def counting_write(index: int, value: Any) -> None:
            writes.append(index)
            original(index, value)

        prepared._write = counting_write  # type: ignore[method-assign]
        prepared.launch_values(None, values)
        assert writes == [0, 1, 2, 3]
        prepared.launch_values(None, values)  # the very tuple: nothing compared, nothing rewritten
        assert writes == [0, 1, 2, 3]
        prepared.launch_values(None, (y, x, 2.0, 7))  # another tuple: compared, the float rewritten
        assert writes == [0, 1, 2, 3, 2]
        prepared.launch_values(None, values)  # the first tuple again: its values are written back
        assert writes[5:] == [2]
        prepared[3] = 9  # a write between launches: the next tuple is compared again
        prepared.launch_values(None, values)
        assert writes[6:] == [3, 3]
        params = [launch["params"][2:] for launch in fake_driver.launches]
        assert params == [[struct.pack("<f", v), struct.pack("<I", 7)] for v in (1.0, 1.0, 2.0, 1.0, 1.0)]
        with pytest.raises(ValueError, match="4 argument\\(s\\) expected, got 1"):
            prepared.launch_values(None, (y,))


def test_prepared_launch_checks_values(fake_driver: Any) -> None:
    function = cc.Module.load(CUBIN).get_function("axpy")
    prepared = cc.PreparedLaunch(function, cc.LaunchConfig(1, 32), ["ptr", "ptr", "f32", "i32"])
    with pytest.raises(TypeError, match="parameter 3 is i32: got float"):
        prepared[3] = 1.5
    with pytest.raises(ValueError, match=r"parameter 3 is i32: 4294967301 does not fit \(from -2147483648"):
        prepared[3] = 2**32 + 5  # ctypes would have packed 5
    with pytest.raises(ValueError, match="parameter 0 is ptr: -1 does not fit"):
        prepared[0] = -1
    prepared[3] = -(2**31)
    with pytest.raises(ValueError, match="4 argument\\(s\\) expected, got 1"):
        prepared.launch(None, 1)
    with pytest.raises(ValueError, match="unknown type 'i128'"):
        cc.PreparedLaunch(function, cc.LaunchConfig(1, 32), ["i128"])


def test_inferred_types_must_match_the_kernel(fake_driver: Any) -> None:
    function = cc.Module.load(CUBIN).get_function("axpy")
    with pytest.raises(ValueError, match="takes 4 parameter\\(s\\), 2 argument\\(s\\) given"):
        cc.launch(function, cc.LaunchConfig(1, 1), 1, 2)
    with pytest.raises(TypeError, match="argument 2 .*f64.* does not match the kernel's 4-byte parameter"):
        cc.launch(function, cc.LaunchConfig(1, 1), 0, 0, cc.KernelArg("f64", 1.0), 5)
    with pytest.raises(TypeError, match="argument 3 has unsupported type str"):
        cc.launch(function, cc.LaunchConfig(1, 1), 0, 0, 1.0, "5")  # type: ignore[arg-type]


def test_raw_bytes_parameters(fake_driver: Any) -> None:
    fake_driver.kernels["raw"] = [(0, 12)]
    function = cc.Module.load(CUBIN).get_function("raw")
    payload = struct.pack("<iii", 1, 2, 3)
    cc.launch(function, cc.LaunchConfig(1, 1), payload)
    assert fake_driver.launches[-1]["params"] == [payload]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"grid": 0, "block": 1}, "grid must be 1 to 3 positive ints"),
        ({"grid": (1, 2, 3, 4), "block": 1}, "grid must be 1 to 3"),
        ({"grid": 1, "block": (32, -1)}, "block must be"),
        ({"grid": 1, "block": 1, "shared_memory": -1}, "shared_memory must be >= 0"),
        ({"grid": (6, 1), "block": 1, "cluster": 4}, r"grid \(6, 1, 1\) is not a multiple of cluster \(4, 1, 1\)"),
    ],
)
def test_launch_config_validation(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        cc.LaunchConfig(**kwargs)


def test_launch_config_extended_only_with_an_attribute() -> None:
    assert not cc.LaunchConfig(4, 32).extended
    assert cc.LaunchConfig(4, 32, cluster=2).extended
    assert cc.LaunchConfig(4, 32, cooperative=True).extended
    assert cc.LaunchConfig(4, 32, dependent_launch=True).extended


def test_a_dependent_launch_sets_programmatic_stream_serialization(fake_driver: Any) -> None:
    function = cc.Module.load(CUBIN).get_function("axpy")
    stream = cc.Stream.create()
    prepared = cc.PreparedLaunch(function, cc.LaunchConfig(3, 32, dependent_launch=True), ["ptr", "ptr", "f32", "u32"])
    prepared.launch(stream, 0, 0, 1.0, 7)
    prepared.set_grid(5)  # the attribute stays with a new grid
    prepared.launch(stream)
    plain = cc.PreparedLaunch(function, cc.LaunchConfig(3, 32), ["ptr", "ptr", "f32", "u32"])
    plain.launch(stream, 0, 0, 1.0, 7)
    first, second, third = fake_driver.launches[-3:]
    assert first["attributes"] == second["attributes"] == ("PROGRAMMATIC_STREAM_SERIALIZATION",)
    assert (first["grid"], second["grid"], third["grid"]) == ((3, 1, 1), (5, 1, 1), (3, 1, 1))
    assert first["stream"] == int(stream.handle) and third["attributes"] == ()
    assert fake_driver.calls["cuLaunchKernelEx"] == 2 and fake_driver.calls["cuLaunchKernel"] == 1



@pytest.mark.parametrize("old_driver", [False, True])
def test_parameter_layout_from_the_driver(fake_driver: Any, old_driver: bool) -> None:
    fake_driver.without_param_count = old_driver
    function = cc.Module.load(CUBIN).get_function("axpy")
    assert function.param_layout == ((0, 8), (8, 8), (16, 4), (20, 4))
    assert cc.Module.load(CUBIN).get_function("empty").param_layout == ()


def test_prepared_launch_keeps_the_sign_of_zero(fake_driver: Any) -> None:
    function = cc.Module.load(CUBIN).get_function("axpy")
    prepared = cc.PreparedLaunch(function, cc.LaunchConfig(1, 32), ["ptr", "ptr", "f32", "u32"])
    prepared.launch(None, 0, 0, 0.0, 1)
    prepared.launch(None, 0, 0, -0.0, 1)
    assert fake_driver.launches[-1]["params"][2] == struct.pack("<f", -0.0)
