"""Zero-copy exchange with PyTorch, CuPy, JAX and numpy: DLPack and the CUDA
Array Interface, both ways.

Imported arrays keep their producer alive for as long as any cutile tensor
uses the memory; exported capsules keep the cutile tensor's storage alive until
the consumer releases them.
"""

from __future__ import annotations

import atexit
import ctypes
import threading
from typing import TYPE_CHECKING, Any

import numpy as np

from cutile import _backend
from cuda_core import CudaError
from cutile._errors import CutileError, InteropError
from cutile._tensor import HostStorage, Storage, Tensor, _contiguous_strides, dtype_of, numpy_dtype, strided_view
from cutile._torch_streams import dlpack_consumer_stream, is_torch_object
from cutile_compiler import dtypes as dt

if TYPE_CHECKING:
    from cuda_core import Stream

KDL_CPU, KDL_CUDA, KDL_CUDA_HOST, KDL_CUDA_MANAGED = 1, 2, 3, 13


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _DLManagedTensor(ctypes.Structure):
    """DLPack's legacy (pre-1.0) capsule payload, named "dltensor"."""


_Deleter = ctypes.CFUNCTYPE(None, ctypes.POINTER(_DLManagedTensor))
_DLManagedTensor._fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _Deleter)]


class _DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class _DLManagedTensorVersioned(ctypes.Structure):
    """DLPack 1.x's capsule payload, named "dltensor_versioned": it carries a version
    and flags (read-only, is-copied) the legacy one cannot express."""


_VersionedDeleter = ctypes.CFUNCTYPE(None, ctypes.POINTER(_DLManagedTensorVersioned))
_DLManagedTensorVersioned._fields_ = [
    ("version", _DLPackVersion),
    ("manager_ctx", ctypes.c_void_p),
    ("deleter", _VersionedDeleter),
    ("flags", ctypes.c_uint64),
    ("dl_tensor", _DLTensor),
]

_DLPACK_VERSION = (1, 1)  # the newest this module reads and writes (1.1 numbers the float8 dtypes)
_FLAG_READ_ONLY = 1 << 0
_LEGACY, _VERSIONED = b"dltensor", b"dltensor_versioned"

_pythonapi = ctypes.pythonapi
_pythonapi.PyCapsule_GetPointer.restype = ctypes.c_void_p
_pythonapi.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_pythonapi.PyCapsule_IsValid.restype = ctypes.c_int
_pythonapi.PyCapsule_IsValid.argtypes = [ctypes.py_object, ctypes.c_char_p]
_pythonapi.PyCapsule_SetName.restype = ctypes.c_int
_pythonapi.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]
_pythonapi.PyCapsule_New.restype = ctypes.py_object
_pythonapi.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
# The capsule destructor runs while the capsule is being freed: it must look at it
# through a raw pointer, never through a new Python reference.
_capsule_is_valid_raw = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_IsValid", ctypes.pythonapi))
_capsule_pointer_raw = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi))

# The DLPack (code, bits) of each dtype, from its record; a stored-as dtype (tf32)
# goes out as its storage and comes back as it.
_DL_OF: dict[dt.DType, tuple[int, int]] = {d: (int(d.dlpack_code), 8 * d.itemsize) for d in dt.ALL_DTYPES}
_DL_CODES: dict[tuple[int, int], dt.DType] = {_DL_OF[d]: d for d in dt.ALL_DTYPES if d.stored_as is None}


def _typestr(dtype: dt.DType) -> str:
    """``__cuda_array_interface__``'s typestr: numpy's for the types numpy has (tf32: f32's),
    raw bytes (``V``) for bf16 and the fp8 types, which the interface has no letter for."""
    numpy_type = numpy_dtype(dtype)
    if numpy_type.type.__module__ == "numpy":
        return numpy_type.str
    return f"{'|' if dtype.itemsize == 1 else '<'}V{dtype.itemsize}"


_TYPESTR_OF: dict[dt.DType, str] = {d: _typestr(d) for d in dt.ALL_DTYPES}
# Imported by typestr without its byte order; raw bytes name no dtype.
_TYPESTR: dict[str, dt.DType] = {
    _TYPESTR_OF[d][1:]: d for d in dt.ALL_DTYPES if d.stored_as is None and "V" not in _TYPESTR_OF[d]}


class ForeignDeviceStorage(Storage):
    """Device memory owned by another library; ``owner`` keeps it alive."""

    foreign = True

    def __init__(self, pointer: int, nbytes: int, device: int, owner: Any, *, torch_ordered: bool = False) -> None:
        super().__init__(nbytes, f"cuda:{device}", pointer)
        self.owner = owner
        self.torch_ordered = torch_ordered

    def device_memory(self) -> Any:
        from cuda_core import DeviceView

        # The producer keeps the memory alive (not this storage: the view is kept by the
        # storage's resource, and a reference back would make a cycle).
        return DeviceView.from_pointer(self.base_address, self.nbytes, owner=self.owner)


def _strides_in_elements(byte_strides: tuple[int, ...], itemsize: int, what: str) -> tuple[int, ...]:
    if any(s % itemsize for s in byte_strides):
        raise InteropError(f"{what}: strides {byte_strides} are not multiples of the item size {itemsize}")
    return tuple(s // itemsize for s in byte_strides)


# Memory of no one, under the views whose span `_byte_span` measures.
_UNPLACED = Storage(0, "unplaced")


def _byte_span(dtype: dt.DType, shape: tuple[int, ...], strides: tuple[int, ...]) -> tuple[int, int]:
    """The [start, end) bytes, from its element 0, that a strided view touches
    (`Tensor.byte_range` of the view before it has its storage)."""
    return Tensor(_UNPLACED, dtype, shape, strides).byte_range()


def _device_tensor(pointer: int, device: int, dtype: dt.DType, shape: tuple[int, ...],
                   strides: tuple[int, ...], owner: Any, readonly: bool = False, torch_ordered: bool = False) -> Tensor:
    if _backend.current() != "gpu":
        raise InteropError(
            "the array lives on a GPU but cutile runs kernels on the CPU interpreter here; "
            "copy it to the host first (e.g. api.from_numpy(x.cpu().numpy()))")
    from cutile._gpu import note_device_used

    note_device_used(device)
    start, end = _byte_span(dtype, shape, strides)
    storage = ForeignDeviceStorage(pointer + start, end - start, device, owner, torch_ordered=torch_ordered)
    storage.readonly = readonly
    return Tensor(storage, dtype, shape, strides, -start // dtype.itemsize)


def _host_tensor(array: np.ndarray[Any, Any], dtype: dt.DType) -> Tensor:
    """A tensor over a numpy array's memory (read-only when the array is)."""
    _check_host_backend()
    itemsize = array.itemsize
    strides = _strides_in_elements(array.strides, itemsize, "from_dlpack")
    start, end = _byte_span(dtype, tuple(array.shape), strides)
    if start:
        raise InteropError("from_dlpack: arrays with negative strides are not supported")
    # A flat view of the memory the array spans (starting at its first element);
    # it refers to the array, which keeps the producer alive.
    count = end // itemsize
    flat = strided_view(array, (count,), (1,)) if count else np.empty(0, array.dtype)
    storage = HostStorage(flat)
    storage.readonly = not array.flags.writeable
    return Tensor(storage, dtype, tuple(array.shape), strides, 0)


def _host_memory_tensor(pointer: int, dtype: dt.DType, shape: tuple[int, ...], strides: tuple[int, ...],
                        owner: Any, readonly: bool) -> Tensor:
    """A tensor over host memory another library owns (a DLPack import): a numpy
    array of ``dtype`` (ml_dtypes for bf16 and float8) spanning it keeps ``owner`` alive."""
    _check_host_backend()
    start, end = _byte_span(dtype, shape, strides)
    if start:
        raise InteropError("from_dlpack: arrays with negative strides are not supported")
    element = numpy_dtype(dtype)
    if end:
        memory = (ctypes.c_char * end).from_address(pointer)
        memory.owner = owner  # type: ignore[attr-defined]  # the array's base holds the producer
        flat = np.frombuffer(memoryview(memory), np.uint8).view(element)
    else:
        flat = np.empty(0, element)
    if readonly:
        flat.flags.writeable = False
    storage = HostStorage(flat)
    storage.readonly = readonly
    return Tensor(storage, dtype, shape, strides, 0)


def _check_host_backend() -> None:
    if _backend.current() != "interpreter":
        raise InteropError(
            "the array lives in host memory but cutile runs kernels on the GPU here; "
            "use api.from_numpy(array) to copy it to the device")


def from_dlpack(obj: Any, *, keep_producer: bool = True) -> Tensor:
    """A cutile tensor sharing the memory of a PyTorch, CuPy, JAX or numpy array.

    No copy is made; the producer stays alive as long as the tensor (or any view or
    partition of it) does. The array must live where cutile runs kernels: on the
    GPU for the GPU backend, in host memory for the interpreter. Read-only memory
    (a read-only numpy array, a DLPack 1.x capsule flagged read-only, a JAX array)
    comes in as a tensor kernels may read but never write.

    ``keep_producer=False`` (DLPack producers only): the tensor holds the capsule's
    managed tensor, which keeps the memory alive, but not the producer object itself,
    so a cache of imports keyed weakly by the producer does not keep it alive.
    """
    if isinstance(obj, np.ndarray):  # its own memory, read-only flag and ml_dtypes dtypes as they are
        return _host_tensor(obj, _dtype_of_array(obj))
    # DLPack first: it names dtypes exactly (the CUDA Array Interface spells
    # bfloat16 as an anonymous 2-byte type) and orders streams on request.
    if hasattr(obj, "__dlpack__"):
        try:
            device_type, device_id = obj.__dlpack_device__() if hasattr(obj, "__dlpack_device__") else (KDL_CPU, 0)
        except (ValueError, RuntimeError) as exc:  # e.g. torch's meta tensors: no device DLPack names
            raise InteropError(f"from_dlpack: the {type(obj).__name__} cannot say where its memory lives "
                               f"(__dlpack_device__): {exc}") from None
        cuda = device_type in (KDL_CUDA, KDL_CUDA_MANAGED)
        torch_ordered = cuda and is_torch_object(obj)
        stream = _consumer_stream_handle(int(device_id)) if cuda else None
        if torch_ordered:
            stream = dlpack_consumer_stream(int(device_id), stream)
        tensor = _from_capsule(_request_capsule(obj, stream), obj if keep_producer else None, torch_ordered)
        if _immutable_producer(obj):  # JAX may not flag its exports read-only
            tensor._storage.readonly = True
        return tensor
    interface = getattr(obj, "__cuda_array_interface__", None)
    if isinstance(interface, dict):
        return _from_cuda_array_interface(obj, interface)
    raise InteropError(
        f"from_dlpack: {type(obj).__name__} supports neither __dlpack__ nor __cuda_array_interface__")


def _request_capsule(obj: Any, stream: int | None) -> Any:
    """``obj``'s DLPack capsule: a versioned one where the producer speaks DLPack 1.x
    (it can say the memory is read-only), else a legacy one."""
    what = type(obj).__name__
    try:
        try:
            return obj.__dlpack__(stream=stream, max_version=_DLPACK_VERSION)
        except TypeError:  # a producer older than DLPack 1.0 takes no max_version
            try:
                return obj.__dlpack__(stream=stream)
            except TypeError:
                return obj.__dlpack__()
    except (CutileError, CudaError):
        raise  # (a cutile tensor's own export: e.g. a fault of a kernel that wrote it, met waiting for it)
    except (BufferError, ValueError, RuntimeError) as exc:  # the protocol's "cannot export" (BufferError),
        # and what some producers raise instead
        raise InteropError(f"from_dlpack: the {what} cannot share its memory through DLPack: {exc}") from None


def _immutable_producer(obj: Any) -> bool:
    """Arrays whose library promises they never change (JAX's), though their
    DLPack export may not say so: kernels may read them, never write them."""
    return type(obj).__module__.split(".", 1)[0] in ("jax", "jaxlib")


def _dtype_of_array(array: np.ndarray[Any, Any]) -> dt.DType:
    try:
        return dtype_of(array.dtype)
    except TypeError:
        raise InteropError(f"from_dlpack: dtype {array.dtype} has no cutile equivalent") from None


def _order_after(first: Stream, then: Stream) -> None:
    """Makes the work queued on ``then`` from now on wait for the work queued on
    ``first`` so far (no host blocking)."""
    from cuda_core import Event

    event = Event.create(timing=False)
    event.record(first)
    then.wait(event)


def _consumer_stream_handle(ordinal: int) -> int | None:
    """cutile's stream on the producer's device, which the producer orders its work before."""
    if _backend.current() != "gpu":
        return None
    from cutile._gpu import default_stream

    return int(default_stream(ordinal).handle)


def _from_cuda_array_interface(obj: Any, interface: dict[str, Any]) -> Tensor:
    typestr = str(interface["typestr"])
    dtype = _TYPESTR.get(typestr[1:])
    if dtype is None:
        raise InteropError(f"from_dlpack: __cuda_array_interface__ typestr {typestr!r} has no cutile dtype")
    shape = tuple(int(s) for s in interface["shape"])
    pointer, readonly = interface["data"]
    byte_strides = interface.get("strides")
    strides = _contiguous_strides(shape) if byte_strides is None else _strides_in_elements(
        tuple(int(s) for s in byte_strides), dtype.itemsize, "from_dlpack")
    # The CUDA Array Interface names no device: the memory is taken to be on cutile's
    # current device, so an array of device N is imported inside `cutile.device(N)`.
    from cutile._device import current_device

    device = current_device()
    producer_stream = interface.get("stream")
    if producer_stream not in (None, 0) and _backend.current() == "gpu":
        # Version 3 of the interface: work on the producer's stream must finish
        # before ours uses the memory. (The driver takes the legacy and per-thread
        # default streams, handles 1 and 2, as they are.)
        from cuda_core import Stream

        from cutile._gpu import default_stream

        _order_after(Stream.wrap(int(producer_stream), device), default_stream(device))
    return _device_tensor(int(pointer), device, dtype, shape, strides, obj, bool(readonly))




def _from_capsule(capsule: Any, producer: Any, torch_ordered: bool = False) -> Tensor:
    """A tensor over the memory a DLPack capsule (legacy or versioned) describes;
    the capsule is marked used and its deleter runs when cutile is done with it."""
    if _pythonapi.PyCapsule_IsValid(capsule, _VERSIONED):
        versioned = ctypes.cast(_pythonapi.PyCapsule_GetPointer(capsule, _VERSIONED),
                                ctypes.POINTER(_DLManagedTensorVersioned))
        _pythonapi.PyCapsule_SetName(capsule, b"used_dltensor_versioned")
        owner = _ManagedOwner(versioned, producer)
        version = versioned.contents.version
        if version.major != _DLPACK_VERSION[0]:  # a layout this code cannot read (the owner releases it)
            raise InteropError(f"from_dlpack: DLPack version {version.major}.{version.minor} is not supported; "
                               f"cutile reads {_DLPACK_VERSION[0]}.x")
        tensor, readonly = versioned.contents.dl_tensor, bool(versioned.contents.flags & _FLAG_READ_ONLY)
    elif _pythonapi.PyCapsule_IsValid(capsule, _LEGACY):
        legacy = ctypes.cast(_pythonapi.PyCapsule_GetPointer(capsule, _LEGACY), ctypes.POINTER(_DLManagedTensor))
        _pythonapi.PyCapsule_SetName(capsule, b"used_dltensor")
        owner = _ManagedOwner(legacy, producer)
        tensor, readonly = legacy.contents.dl_tensor, False
    else:
        raise InteropError("from_dlpack: __dlpack__ returned no unused DLPack capsule (was it already consumed?)")
    key = (tensor.dtype.code, tensor.dtype.bits)
    dtype = _DL_CODES.get(key)
    if dtype is None or tensor.dtype.lanes != 1:
        raise InteropError(f"from_dlpack: DLPack dtype code {key[0]}, {key[1]} bits, {tensor.dtype.lanes} lane(s) "
                           "has no cutile dtype")
    shape = tuple(tensor.shape[i] for i in range(tensor.ndim))
    strides = _contiguous_strides(shape) if not tensor.strides else tuple(tensor.strides[i] for i in range(tensor.ndim))
    pointer = (tensor.data or 0) + tensor.byte_offset
    device_type = tensor.device.device_type
    if device_type in (KDL_CPU, KDL_CUDA_HOST):
        return _host_memory_tensor(pointer, dtype, shape, strides, owner, readonly)
    if device_type in (KDL_CUDA, KDL_CUDA_MANAGED):
        return _device_tensor(pointer, tensor.device.device_id, dtype, shape, strides, owner, readonly, torch_ordered)
    raise InteropError(f"from_dlpack: unsupported DLPack device type {device_type}")


class _ManagedOwner:
    """Calls the producer's DLPack deleter when the last cutile user goes away."""

    def __init__(self, managed: Any, producer: Any) -> None:
        self.managed = managed
        self.producer = producer

    def __del__(self) -> None:
        deleter = self.managed.contents.deleter
        if deleter:
            deleter(self.managed)


# -- export -------------------------------------------------------------------------------------
# What an exported capsule refers to (the managed struct first), by the struct's address,
# alive until the consumer calls its deleter (or the capsule dies unconsumed).
# Reentrant: the garbage collector may run a deleter (of an import whose memory an export
# kept) in the middle of any code, this module's included.
_exports_lock = threading.RLock()
_exports: dict[int, tuple[Any, ...]] = {}


def _release_export_impl(managed: Any) -> None:
    with _exports_lock:
        kept = _exports.pop(ctypes.addressof(managed.contents), None)
    del kept  # outside the lock: it may be the last reference to an import, whose deleter takes it


_release_export = _Deleter(_release_export_impl)
_release_versioned_export = _VersionedDeleter(_release_export_impl)


# A C function with no effect, callable at any time (even after Python has shut
# down): Py_IsInitialized takes no arguments, and C ignores the extra one.
_NATIVE_NO_OP = ctypes.cast(ctypes.pythonapi.Py_IsInitialized, _Deleter)
_NATIVE_VERSIONED_NO_OP = ctypes.cast(ctypes.pythonapi.Py_IsInitialized, _VersionedDeleter)


@atexit.register
def _detach_exports() -> None:
    # A consumer may free what it imported only after the interpreter is gone (JAX
    # frees its arrays then, and calls the deleter without checking it for NULL):
    # our deleter is Python code and must not run at that point. The process is
    # ending, so the memory needs no release: point the deleters at a native no-op.
    with _exports_lock:
        for kept in _exports.values():
            versioned = isinstance(kept[0], _DLManagedTensorVersioned)
            kept[0].deleter = _NATIVE_VERSIONED_NO_OP if versioned else _NATIVE_NO_OP
            for part in kept:  # never freed: the consumer may read them after Python is gone
                ctypes.pythonapi.Py_IncRef(ctypes.py_object(part))


_CapsuleDestructor = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


def _capsule_destructor_impl(capsule_address: int) -> None:
    for name in (_VERSIONED, _LEGACY):
        if _capsule_is_valid_raw(capsule_address, name):  # never consumed: release it ourselves
            managed = _capsule_pointer_raw(capsule_address, name)
            with _exports_lock:
                kept = _exports.pop(managed, None)
            del kept


_capsule_destructor = _CapsuleDestructor(_capsule_destructor_impl)


def to_dlpack(tensor: Tensor, stream: int | None = None, *, max_version: tuple[int, int] | None = None,
              dl_device: tuple[int, int] | None = None, copy: bool | None = None) -> Any:
    """A DLPack capsule sharing ``tensor``'s memory (``Tensor.__dlpack__``), host or device.

    A consumer that passes ``max_version`` (1, x) gets a versioned capsule, flagged
    read-only when the tensor's memory is; one that does not gets a legacy capsule,
    which cannot say read-only, so read-only tensors are refused to it.
    """
    readonly = tensor._storage.readonly
    storage = tensor._host_access(not readonly, "__dlpack__ (sharing the tensor)")
    device_type, device_id = dlpack_device(tensor)
    if copy:
        raise InteropError("__dlpack__: copy=True asks for a copy, but cutile shares its memory; "
                           "copy first (api.copy(t), or to_numpy() for a numpy array)")
    if dl_device is not None and tuple(dl_device) != (device_type, device_id):
        raise InteropError(f"__dlpack__: the tensor lives on DLPack device {(device_type, device_id)}, "
                           f"not {tuple(dl_device)}; cutile exports memory where it is")
    versioned = max_version is not None and max_version[0] >= _DLPACK_VERSION[0]
    if readonly and not versioned:
        raise InteropError("__dlpack__: the tensor's memory is read-only and the consumer asked for a legacy "
                           "(pre-1.0) DLPack capsule, which cannot say so; use a consumer that speaks "
                           "DLPack 1.x (numpy >= 2.1) or to_numpy() for a copy")
    if storage.torch_ordered:
        # Its writers ran on torch's current stream (or were joined to it): the
        # consumer's stream waits for that stream, as DLPack asks of a producer
        # (None: the consumer's is the legacy default stream; -1: it asks for no wait).
        if stream != -1:
            _order_after_torch(device_id, 1 if stream is None else stream)
    elif not isinstance(storage, HostStorage):
        _wait_for_writers(storage, device_id)
        if stream not in (None, -1):
            # The consumer will use its stream (1 and 2 are the legacy and per-thread
            # default streams, handles the driver takes as they are): make it wait for cutile's work.
            from cuda_core import Stream

            from cutile._gpu import default_stream

            _order_after(default_stream(device_id), Stream.wrap(stream, device_id))
    shape = (ctypes.c_int64 * max(tensor.ndim, 1))(*tensor.shape)
    strides = (ctypes.c_int64 * max(tensor.ndim, 1))(*tensor.strides)
    code, bits = _DL_OF[tensor.dtype]
    described = _DLTensor(tensor.address(), _DLDevice(device_type, device_id), tensor.ndim,
                          _DLDataType(code, bits, 1), shape, strides, 0)
    managed: _DLManagedTensor | _DLManagedTensorVersioned
    if versioned:
        assert max_version is not None
        minor = _DLPACK_VERSION[1] if max_version[0] > _DLPACK_VERSION[0] else min(max_version[1], _DLPACK_VERSION[1])
        managed = _DLManagedTensorVersioned(_DLPackVersion(_DLPACK_VERSION[0], minor), None,
                                            _release_versioned_export, _FLAG_READ_ONLY if readonly else 0, described)
        name = _VERSIONED
    else:
        managed = _DLManagedTensor(described, None, _release_export)
        name = _LEGACY
    address = ctypes.addressof(managed)
    kept = (managed, shape, strides, tensor)
    with _exports_lock:
        _exports[address] = kept  # alive until the consumer's deleter
    return _pythonapi.PyCapsule_New(address, name, ctypes.cast(_capsule_destructor, ctypes.c_void_p))


def _order_after_torch(ordinal: int, consumer: int) -> None:
    """Makes ``consumer`` (a DLPack stream number: 1 and 2 are the legacy and
    per-thread default streams) wait for torch's current stream, unless it is it."""
    from cuda_core import Stream

    from cutile._torch_streams import current_stream

    producer = current_stream(ordinal)
    handle = int(producer.handle)
    if handle == consumer or (handle == 0 and consumer == 1):
        return
    _order_after(producer, Stream.wrap(consumer, ordinal))


def _wait_for_writers(storage: Storage, ordinal: int) -> None:
    """The tensor's last writer may have run on any stream of its device's pool: wait
    for that device before another library takes the memory (from now on marked
    shared: that library may write it on its own streams)."""
    from cuda_core import Device

    storage.shared = True
    Device(ordinal).synchronize()


def dlpack_device(tensor: Tensor) -> tuple[int, int]:
    device = tensor.device
    if device.startswith("cuda:"):
        return (KDL_CUDA, int(device.split(":")[1]))
    return (KDL_CPU, 0)


def cuda_array_interface(tensor: Tensor) -> dict[str, Any]:
    """``__cuda_array_interface__`` (version 3) of a GPU tensor."""
    if tensor.device == "cpu":
        raise AttributeError("__cuda_array_interface__: the tensor lives in host memory (interpreter backend)")
    readonly = tensor._storage.readonly
    storage = tensor._host_access(not readonly, "__cuda_array_interface__ (sharing the tensor)")
    _wait_for_writers(storage, dlpack_device(tensor)[1])
    typestr = _TYPESTR_OF[tensor.dtype]
    itemsize = tensor.dtype.itemsize
    contiguous = tensor.is_contiguous
    return {
        "shape": tuple(tensor.shape),
        "typestr": typestr,
        "data": (tensor.address(), readonly),
        "strides": None if contiguous else tuple(s * itemsize for s in tensor.strides),
        "version": 3,
        "stream": None,  # the device was synchronized above: no work on the memory is pending
    }
