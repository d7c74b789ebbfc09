"""The host-array protocols of `Tensor` both ways: DLPack (legacy and versioned
capsules, the read-only flag, bf16/float8 dtypes) and ``__array__``.

The producers here build their DLPack capsules with ctypes from the DLPack header's
values, as PyTorch does for a CPU bfloat16 or float8 tensor, so no framework is needed.
"""

from __future__ import annotations

import ctypes
import gc
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import cutile
from cutile import api
from cutile.core import Mut, Tensor, bf16, f32, f8e4m3fn, f8e5m2, load_tile_like

pytestmark = pytest.mark.interpreter_only  # host memory; the GPU side runs on a fake driver


@cutile.entry
def add(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]], y: Tensor[f32, [-1]]):
    z.store(load_tile_like(x, z) + load_tile_like(y, z))


@cutile.entry
def widen(z: Mut[Tensor[f32, ["B"]]], x: Tensor[bf16, [-1]]):
    z.store(load_tile_like(x, z).astype(f32) * 2)


# -- a DLPack producer written from the header (dlpack.h, DLPack 1.1) -----------------------------
K_DL_CPU = 1
K_DL_BFLOAT, K_DL_FLOAT8_E4M3FN, K_DL_FLOAT8_E5M2 = 4, 10, 12
READ_ONLY = 1 << 0


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32), ("dtype", DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    pass


class DLManagedTensorVersioned(ctypes.Structure):
    pass


LegacyDeleter = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor))
VersionedDeleter = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensorVersioned))
DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", LegacyDeleter)]
DLManagedTensorVersioned._fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32),
                                     ("manager_ctx", ctypes.c_void_p), ("deleter", VersionedDeleter),
                                     ("flags", ctypes.c_uint64), ("dl_tensor", DLTensor)]
_new_capsule = ctypes.pythonapi.PyCapsule_New
_new_capsule.restype, _new_capsule.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


class CpuProducer:
    """Host memory (``raw``, a numpy array of the right byte width) exported under a
    DLPack dtype code, as a legacy capsule (a producer older than DLPack 1.0: no
    ``max_version``) or a versioned one (optionally flagged read-only)."""

    def __init__(self, raw: np.ndarray[Any, Any], code: int, bits: int, *, versioned: bool,
                 readonly: bool = False) -> None:
        self.raw, self.code, self.bits, self.versioned, self.readonly = raw, code, bits, versioned, readonly
        self.deleted = 0
        self._kept: list[Any] = []

    def __dlpack_device__(self) -> tuple[int, int]:
        return (K_DL_CPU, 0)

    def __dlpack__(self, stream: int | None = None, **protocol: Any) -> Any:
        if protocol and not self.versioned:
            raise TypeError("__dlpack__() got an unexpected keyword argument 'max_version'")
        assert stream is None
        item = self.raw.itemsize
        shape = (ctypes.c_int64 * self.raw.ndim)(*self.raw.shape)
        strides = (ctypes.c_int64 * self.raw.ndim)(*(s // item for s in self.raw.strides))
        tensor = DLTensor(self.raw.ctypes.data, DLDevice(K_DL_CPU, 0), self.raw.ndim,
                          DLDataType(self.code, self.bits, 1), shape, strides, 0)

        def release(_: Any) -> None:
            self.deleted += 1

        managed: Any
        if self.versioned:
            assert protocol["max_version"][0] == 1
            deleter: Any = VersionedDeleter(release)
            managed = DLManagedTensorVersioned(1, 1, None, deleter, READ_ONLY if self.readonly else 0, tensor)
            name = b"dltensor_versioned"
        else:
            deleter = LegacyDeleter(release)
            managed = DLManagedTensor(tensor, None, deleter)
            name = b"dltensor"
        self._kept += [shape, strides, managed, deleter]
        return _new_capsule(ctypes.addressof(managed), name, None)


def _random(shape: tuple[int, ...], seed: int) -> np.ndarray[Any, Any]:
    return np.random.default_rng(seed).standard_normal(shape)


# -- exports: numpy consumes cutile tensors -------------------------------------------------------
def test_numpy_imports_a_tensor_writable_and_it_comes_back_as_a_mut_output() -> None:
    n = 1000  # not a multiple of the tile
    x, y = _random((n,), 1).astype(np.float32), _random((n,), 2).astype(np.float32)
    out = api.zeros([n])
    shared = np.from_dlpack(out)  # a versioned capsule: numpy >= 2.1 asks for DLPack 1.x
    assert shared.flags.writeable and np.shares_memory(shared, out.host_view())
    shared[:3] = 5.0
    assert out.to_numpy()[:3].tolist() == [5.0, 5.0, 5.0]
    z = api.from_dlpack(shared).partition([128])  # the same memory, back as a kernel's output
    z, _, _ = add(z, api.from_numpy(x), api.from_numpy(y)).sync()
    np.testing.assert_allclose(shared.astype(np.float64), x.astype(np.float64) + y, rtol=1e-6)
    np.testing.assert_array_equal(out.to_numpy(), shared)


def test_a_read_only_source_stays_read_only_through_every_exchange() -> None:
    values = _random((300,), 3).astype(np.float32)
    values.flags.writeable = False
    tensor = api.from_dlpack(values)
    again = api.from_dlpack(tensor)  # through cutile's own versioned capsule (it raised BufferError)
    np.testing.assert_array_equal(again.to_numpy(), values)
    assert np.shares_memory(again.host_view(), values)
    back = np.from_dlpack(again)
    assert not back.flags.writeable and np.shares_memory(back, values)
    with pytest.raises(cutile.InteropError, match="read-only.*legacy.*DLPack 1.x"):
        again.__dlpack__()  # a legacy capsule cannot say read-only: refused, not handed out writable
    z, _, _ = add(api.zeros([300]).partition([128]), again, api.ones([300])).sync()  # reading it is fine
    for source in (tensor, again, api.from_dlpack(back)):
        with pytest.raises(cutile.LaunchError, match="add: parameter 'z' is Mut.*read-only"):
            add(source.partition([128]), api.ones([300]), api.ones([300]))
    np.testing.assert_allclose(z.to_numpy(), values.astype(np.float64) + 1, rtol=1e-6)


def test_a_legacy_consumer_gets_a_legacy_capsule_of_a_writable_tensor() -> None:
    tensor = api.from_numpy(_random((5, 7), 4).astype(np.float32))
    capsule = tensor.__dlpack__()
    assert "dltensor" in repr(capsule) and "versioned" not in repr(capsule)
    versioned = tensor.__dlpack__(max_version=(1, 0))
    assert "dltensor_versioned" in repr(versioned)
    with pytest.raises(cutile.InteropError, match="copy=True"):
        tensor.__dlpack__(max_version=(1, 0), copy=True)
    with pytest.raises(cutile.InteropError, match=r"lives on DLPack device \(1, 0\)"):
        tensor.__dlpack__(max_version=(1, 0), dl_device=(2, 0))


def test_np_asarray_gives_a_host_tensors_values() -> None:
    values = _random((6, 10), 5).astype(np.float32)
    tensor = api.from_numpy(values)
    copied = np.asarray(tensor)
    assert copied.dtype == np.float32 and copied.shape == (6, 10)  # (it was a 0-d object array)
    np.testing.assert_array_equal(copied, values)
    np.testing.assert_array_equal(np.asarray(tensor[1:5, ::3], dtype=np.float64), values[1:5, ::3].astype(np.float64))
    view = np.asarray(tensor, copy=False)
    view[0, 0] = 42.0
    assert tensor.to_numpy()[0, 0] == 42.0
    frozen = values.copy()
    frozen.flags.writeable = False
    assert not np.asarray(api.from_dlpack(frozen), copy=False).flags.writeable
    with pytest.raises(cutile.InteropError, match="needs a copy"):
        np.asarray(tensor, dtype=np.float64, copy=False)
    z = tensor.partition([2, 2])
    with pytest.raises(cutile.OwnershipError, match="consumed by partition"):
        np.asarray(tensor)
    expected = values.copy()
    expected[0, 0] = 42.0
    np.testing.assert_array_equal(np.asarray(z), expected)  # a partition gives the whole tensor's values


# -- imports: bf16 and float8 through ml_dtypes (PyTorch's CPU exports) ----------------------------
@pytest.mark.parametrize("versioned", [False, True], ids=["legacy", "versioned"])
@pytest.mark.parametrize("dtype,code,numpy_type", [
    (bf16, K_DL_BFLOAT, ml_dtypes.bfloat16),
    (f8e4m3fn, K_DL_FLOAT8_E4M3FN, ml_dtypes.float8_e4m3fn),
    (f8e5m2, K_DL_FLOAT8_E5M2, ml_dtypes.float8_e5m2),
], ids=["bf16", "f8e4m3fn", "f8e5m2"])
def test_bf16_and_float8_host_arrays_come_in_without_a_copy(dtype: Any, code: int, numpy_type: Any,
                                                           versioned: bool) -> None:
    values = _random((3, 37), 6).astype(numpy_type)
    raw = values.view(np.uint16 if dtype is bf16 else np.uint8)
    producer = CpuProducer(raw, code, 8 * raw.itemsize, versioned=versioned)
    tensor = api.from_dlpack(producer)  # (numpy: "Unsupported dtype in DLTensor")
    assert tensor.dtype == dtype and tensor.shape == (3, 37)
    np.testing.assert_array_equal(tensor.to_numpy().view(raw.dtype), raw)
    raw[1, 2] = raw[0, 0]  # shared memory, not a copy
    assert tensor.to_numpy()[1, 2] == values[0, 0]
    assert producer.deleted == 0
    del tensor
    gc.collect()
    assert producer.deleted == 1  # the producer's deleter ran once cutile let go


def test_a_bf16_import_feeds_a_kernel() -> None:
    n = 777
    values = _random((n,), 7).astype(ml_dtypes.bfloat16)
    producer = CpuProducer(values.view(np.uint16), K_DL_BFLOAT, 16, versioned=True, readonly=True)
    x = api.from_dlpack(producer)
    z, _ = widen(api.zeros([n]).partition([256]), x).sync()
    np.testing.assert_allclose(z.to_numpy(), values.astype(np.float64) * 2, rtol=1e-6)
    with pytest.raises(cutile.LaunchError, match="widen: parameter 'z' is Mut.*read-only"):
        widen(api.from_dlpack(CpuProducer(np.zeros(n, np.float32), 2, 32, versioned=True, readonly=True))
              .partition([256]), x)


def test_import_failures_are_cutile_errors() -> None:
    producer = CpuProducer(np.zeros(4, np.uint32), 5, 64, versioned=True)  # complex64: no cutile dtype
    with pytest.raises(cutile.InteropError, match="DLPack dtype code 5, 64 bits"):
        api.from_dlpack(producer)


def test_numpy_arrays_of_ml_dtypes_come_in_directly() -> None:
    values = _random((64,), 8).astype(ml_dtypes.bfloat16)  # numpy's own DLPack export refuses bfloat16
    tensor = api.from_dlpack(values)
    assert tensor.dtype == bf16 and np.shares_memory(tensor.host_view(), values)


# -- the GPU backend's side, on a fake driver ------------------------------------------------------
def test_device_tensors_share_through_versioned_capsules_with_the_read_only_flag(make_fake_gpu: Any) -> None:
    with make_fake_gpu():
        tensor = api.from_numpy(_random((40,), 9).astype(np.float32))
        capsule = tensor.__dlpack__(max_version=(1, 1))
        assert "dltensor_versioned" in repr(capsule)

        class Holder:  # another library handing back the capsule it was given
            def __init__(self, capsule: Any, device: tuple[int, int]) -> None:
                self.capsule, self.device = capsule, device

            def __dlpack_device__(self) -> tuple[int, int]:
                return self.device

            def __dlpack__(self, **_: Any) -> Any:
                return self.capsule

        again = api.from_dlpack(Holder(capsule, tensor.__dlpack_device__()))
        assert again.address() == tensor.address() and not again._storage.readonly
        again._storage.readonly = True  # as if it came from a read-only producer
        frozen = api.from_dlpack(Holder(again.__dlpack__(max_version=(1, 1)), again.__dlpack_device__()))
        assert frozen._storage.readonly and frozen.address() == tensor.address()
        assert frozen.__cuda_array_interface__["data"] == (tensor.address(), True)
        with pytest.raises(cutile.InteropError, match="read-only.*legacy"):
            frozen.__dlpack__()
        with pytest.raises(cutile.InteropError, match=r"lives on a GPU; copy it to the host with to_numpy\(\)"):
            np.asarray(tensor)
        del capsule, again, frozen, tensor
        gc.collect()


class _SelfContainedProducer:
    """A producer whose capsule keeps its memory alive by itself (as torch's does): the
    export of a cutile tensor, which lives until the consumer calls the deleter."""

    def __init__(self, values: np.ndarray[Any, Any]) -> None:
        self.inner = api.from_numpy(values)

    def __dlpack__(self, stream: int | None = None, max_version: tuple[int, int] | None = None) -> Any:
        return self.inner.__dlpack__(max_version=max_version)

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.inner.__dlpack_device__()


@pytest.mark.parametrize("keep", [True, False])
def test_keep_producer_false_lets_the_producer_go_and_keeps_the_memory(keep: bool) -> None:
    import gc
    import weakref

    values = np.arange(6, dtype=np.float32)
    producer = _SelfContainedProducer(values)
    tensor = api.from_dlpack(producer, keep_producer=keep)
    watched = weakref.ref(producer)
    del producer
    gc.collect()
    assert (watched() is not None) == keep
    np.testing.assert_array_equal(tensor.to_numpy(), values)


def test_keep_producer_must_be_a_bool() -> None:
    with pytest.raises(cutile.ArgumentTypeError, match="keep_producer must be a bool, got int"):
        api.from_dlpack(np.zeros(3, np.float32), keep_producer=1)  # type: ignore[arg-type]


@pytest.mark.parametrize(("where", "error"), [
    ("__dlpack__", BufferError),  # the protocol's "cannot export" (read-only memory to a legacy capsule, say)
    ("__dlpack__", ValueError), ("__dlpack__", RuntimeError),
    ("__dlpack_device__", ValueError), ("__dlpack_device__", RuntimeError),
])
def test_a_producer_failing_to_export_gives_an_interop_error(where: str, error: type[Exception]) -> None:
    class Failing:
        def __dlpack_device__(self) -> tuple[int, int]:
            if where == "__dlpack_device__":
                raise error("Unknown device type meta for Dlpack")
            return (K_DL_CPU, 0)

        def __dlpack__(self, **_: Any) -> Any:
            raise error("Can't export tensors with the conjugate bit set")

    shared = "share its memory through DLPack" if where == "__dlpack__" else "say where its memory lives"
    with pytest.raises(cutile.InteropError, match=f"Failing cannot {shared}.*(meta|conjugate)"):
        api.from_dlpack(Failing())


def test_a_cutile_error_of_the_producer_passes_through_as_it_is() -> None:
    class Faulted:  # (as a cutile tensor's export raises a fault of the kernel that wrote it)
        def __dlpack_device__(self) -> tuple[int, int]:
            return (K_DL_CPU, 0)

        def __dlpack__(self, **_: Any) -> Any:
            raise cutile.KernelRuntimeError("the kernel that wrote it faulted", None)

    with pytest.raises(cutile.KernelRuntimeError, match="faulted"):
        api.from_dlpack(Faulted())
