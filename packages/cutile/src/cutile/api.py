"""Tensor constructors, numpy style: ``api.zeros([1024], dtype=f32)``.

Tensors are made where kernels run: in host memory for the CPU interpreter, in
device memory on the GPU backend.
"""

from __future__ import annotations

import itertools
import math

import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

import cuda_async
from cutile import _backend, _fill
from cutile._device import checked as _checked_device
from cutile._device import ordinal_of
from cutile._errors import ArgumentError, ArgumentTypeError, LaunchError
from cutile._tensor import HostStorage, Tensor, checked_tile_shape, dtype_of, numpy_dtype
from cutile_compiler import dtypes as dt
from cutile_compiler import TensorSpec

ShapeLike = int | Sequence[int]

_seed_lock = threading.Lock()
_stream_counter = itertools.count()
_DEFAULT_SEED = 0x5EED


def _shape(shape: ShapeLike, what: str) -> tuple[int, ...]:
    dims = (shape,) if isinstance(shape, int) else tuple(shape)
    for d in dims:
        if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 0:
            raise ArgumentError(f"{what}: shape must be non-negative ints, got {list(dims)}")
    return tuple(int(d) for d in dims)


DeviceLike = int | str | None  # an ordinal, "cuda:N", or None: the current device (`cutile.device`)


def _from_host(array: np.ndarray[Any, Any], dtype: dt.DType, *, initialized: bool = True, device: int = 0) -> Tensor:
    flat = np.ascontiguousarray(array, dtype=numpy_dtype(dtype)).reshape(-1)
    if _backend.current() == "interpreter":
        cuda_async.ensure_not_capturing("creating a tensor from host data (an upload)")  # as on the GPU
        return Tensor(HostStorage(flat.copy(), initialized=initialized), dtype, array.shape)
    from cutile._gpu import upload

    return upload(flat, dtype, tuple(array.shape), device)


def _allocate(shape: tuple[int, ...], dtype: dt.DType, device: int = 0) -> Tensor:
    """A tensor whose memory is allocated where kernels run (on the GPU, on device
    ``device``), not yet written; on the GPU usable from any stream when this returns."""
    if _backend.current() == "interpreter":
        cuda_async.ensure_not_capturing("creating a tensor (an allocation)")  # as on the GPU
        flat = np.empty(max(1, math.prod(shape)), dtype=numpy_dtype(dtype))
        return Tensor(HostStorage(flat), dtype, shape)
    from cutile._gpu import allocate

    return allocate(dtype, shape, device)


def _device_of(tensor: Tensor) -> int:
    """The ordinal of the device a tensor lives on (host memory: 0, the interpreter's)."""
    return ordinal_of(tensor.device) or 0


def _made_by_kernel(dtype: dt.DType) -> bool:
    # bool tensors are made on the host: a bool kernel parameter has no portable layout
    return dtype is not dt.bool_


def zeros(shape: ShapeLike, dtype: Any = dt.f32, *, device: DeviceLike = None) -> Tensor:
    """A tensor of zeros (filled by a tile kernel where the tensor lives)."""
    return full(shape, 0, dtype, device=_checked_device(device, "zeros"))


def ones(shape: ShapeLike, dtype: Any = dt.f32, *, device: DeviceLike = None) -> Tensor:
    """A tensor of ones (filled by a tile kernel where the tensor lives)."""
    return full(shape, 1, dtype, device=_checked_device(device, "ones"))


def full(shape: ShapeLike, value: bool | int | float, dtype: Any = dt.f32, *, device: DeviceLike = None) -> Tensor:
    """A tensor filled with ``value`` (by a tile kernel where the tensor lives)."""
    tensor, fill_value = _full_target(shape, value, dtype, _checked_device(device, "full"))
    if fill_value is not None:
        _fill.run("fill", tensor, value=fill_value)
    return tensor


def _full_target(shape: ShapeLike, value: bool | int | float, dtype: Any,
                 device: int) -> tuple[Tensor, bool | int | float | None]:
    """What `full` and `ops.full` fill: (allocated tensor, value to fill it with), or
    (finished host-made tensor, None) for dtypes a kernel does not make."""
    from cutile._binding import scalar_value

    kind = dtype_of(dtype)
    dims = _shape(shape, "full")
    if kind.is_integer and isinstance(value, float):
        if not value.is_integer():
            raise ArgumentError(f"full: {value!r} is not a {kind} value")
        value = int(value)
    try:  # the launch's rule: no overflow to inf, bools 0/1; refused as an argument, not a launch
        value = scalar_value("full", "value", kind, value)
    except LaunchError as exc:
        raise ArgumentError(str(exc)) from None
    if not _made_by_kernel(kind):
        return _from_host(np.full(dims, value, dtype=numpy_dtype(kind)), kind, device=device), None
    return _allocate(dims, kind, device), value


def _random_target(shape: ShapeLike, dtype: Any, seed: int | None, what: str,
                   device: DeviceLike) -> tuple[Tensor, int]:
    """What `rand`/`randn` and their op forms fill: (allocated tensor, 32-bit seed)."""
    element = dtype_of(dtype)
    if not element.is_float:
        raise ArgumentTypeError(f"{what}: random values need a floating-point dtype, got {element}")
    ordinal = _checked_device(device, what)
    return _allocate(_shape(shape, what), element, ordinal), _seed(seed)


def _filling_op(name: str, tensor: Tensor, fill: Callable[[Any], None]) -> cuda_async.DeviceOp[Tensor]:
    """An op that fills the already allocated ``tensor`` on its stream (at once on the
    interpreter) and returns it; it declares the write, so later ops on other streams
    wait for it."""

    def run(stream: Any) -> Tensor:
        fill(stream)
        return tensor

    return cuda_async.DeviceOp.from_fn(run, writes=[tensor._storage.resource], name=name)


class ops:  # noqa: N801 - a namespace, spelled like the module it mirrors
    """The constructors as `cuda_async.DeviceOp` objects, to compose with launches::

        op = api.ops.zeros([n]).then(lambda z: add(z.partition([128]), x, y))

    The memory is allocated when the op is made (so it can be captured in a CUDA
    graph); the fill runs on the op's stream when the op runs. Run one with
    ``sync()``, ``await``, ``schedule()`` or inside ``then``/``zip``.
    """

    @staticmethod
    def full(shape: ShapeLike, value: bool | int | float, dtype: Any = dt.f32, *,
             device: DeviceLike = None) -> cuda_async.DeviceOp[Tensor]:
        tensor, fill_value = _full_target(shape, value, dtype, _checked_device(device, "ops.full"))
        if fill_value is None:
            return cuda_async.value(tensor)
        return _filling_op(f"full({list(tensor.shape)}, {value!r}, {tensor.dtype})", tensor,
                           lambda stream: _fill.run("fill", tensor, stream, value=fill_value))

    @staticmethod
    def zeros(shape: ShapeLike, dtype: Any = dt.f32, *, device: DeviceLike = None) -> cuda_async.DeviceOp[Tensor]:
        return ops.full(shape, 0, dtype, device=_checked_device(device, "ops.zeros"))

    @staticmethod
    def ones(shape: ShapeLike, dtype: Any = dt.f32, *, device: DeviceLike = None) -> cuda_async.DeviceOp[Tensor]:
        return ops.full(shape, 1, dtype, device=_checked_device(device, "ops.ones"))

    @staticmethod
    def rand(shape: ShapeLike, dtype: Any = dt.f32, *, seed: int | None = None,
             device: DeviceLike = None) -> cuda_async.DeviceOp[Tensor]:
        return ops._random("uniform", shape, dtype, seed, "ops.rand", device)

    @staticmethod
    def randn(shape: ShapeLike, dtype: Any = dt.f32, *, seed: int | None = None,
              device: DeviceLike = None) -> cuda_async.DeviceOp[Tensor]:
        return ops._random("normal", shape, dtype, seed, "ops.randn", device)

    @staticmethod
    def _random(kind: str, shape: ShapeLike, dtype: Any, seed: int | None, what: str,
                device: DeviceLike) -> cuda_async.DeviceOp[Tensor]:
        # The seed is fixed when the op is made: every run gives the same values.
        tensor, chosen = _random_target(shape, dtype, seed, what, device)
        return _filling_op(f"{what}({list(tensor.shape)}, {tensor.dtype})", tensor,
                           lambda stream: _fill.run(kind, tensor, stream, seed=chosen))



def empty(shape: ShapeLike, dtype: Any = dt.f32, *, device: DeviceLike = None) -> Tensor:
    """A tensor whose values are unspecified (the interpreter fills it with NaN or
    0x5A bytes, and its checked mode reports reads of elements nothing has written;
    on the GPU the memory is left as it is)."""
    kind = dtype_of(dtype)
    dims = _shape(shape, "empty")
    ordinal = _checked_device(device, "empty")
    if _backend.current() == "gpu":
        return _allocate(dims, kind, ordinal)
    poison = np.full(dims, np.nan if kind.is_float else 0x5A, dtype=numpy_dtype(kind)) if kind is not dt.bool_ else np.zeros(dims, bool)
    return _from_host(poison, kind, initialized=False)


def arange(start: int | float, stop: int | float | None = None, step: int | float = 1, dtype: Any = None, *,
           device: DeviceLike = None) -> Tensor:
    """Evenly spaced values in [start, stop), like numpy.arange (made by a tile kernel)."""
    ordinal = _checked_device(device, "arange")
    if stop is None:
        start, stop = 0, start
    if step == 0:
        raise ArgumentError("arange: step must not be zero")
    count = max(0, math.ceil((stop - start) / step))
    floats = any(isinstance(v, float) for v in (start, stop, step))
    kind = dtype_of(dtype) if dtype is not None else (dt.f32 if floats else dt.i32)
    if not _made_by_kernel(kind) or (kind.is_integer and floats):
        return _from_host(np.arange(start, stop, step).astype(numpy_dtype(kind)), kind, device=ordinal)
    tensor = _allocate((count,), kind, ordinal)
    _fill.run("arange", tensor, start=start, step=step)
    return tensor


def linspace(start: float, stop: float, num: int, dtype: Any = dt.f32, *, device: DeviceLike = None) -> Tensor:
    """``num`` evenly spaced values from start to stop inclusive."""
    kind = dtype_of(dtype)
    return _from_host(np.linspace(start, stop, num), kind, device=_checked_device(device, "linspace"))


def eye(n: int, m: int | None = None, dtype: Any = dt.f32, *, device: DeviceLike = None) -> Tensor:
    """The identity matrix (ones on the diagonal)."""
    kind = dtype_of(dtype)
    return _from_host(np.eye(n, m), kind, device=_checked_device(device, "eye"))


def _seed(seed: int | None) -> int:
    """A 32-bit seed: the given one, or the next of a process-wide counter."""
    if seed is None:
        with _seed_lock:
            return (_DEFAULT_SEED + 0x9E3779B9 * next(_stream_counter)) & 0xFFFFFFFF
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ArgumentTypeError(f"seed must be an int, got {type(seed).__name__}")
    return seed & 0xFFFFFFFF


def _random(kind: str, shape: ShapeLike, dtype: Any, seed: int | None, what: str, device: DeviceLike) -> Tensor:
    tensor, chosen = _random_target(shape, dtype, seed, what, device)
    _fill.run(kind, tensor, seed=chosen)
    return tensor


def rand(shape: ShapeLike, dtype: Any = dt.f32, *, seed: int | None = None, device: DeviceLike = None) -> Tensor:
    """Uniform random values in [0, 1), from a counter-based hash of (index, seed):
    the same values on every backend for the same seed."""
    return _random("uniform", shape, dtype, seed, "rand", device)


def randn(shape: ShapeLike, dtype: Any = dt.f32, *, seed: int | None = None, device: DeviceLike = None) -> Tensor:
    """Standard normal random values (Box-Muller on two counter-based uniforms);
    the same values on every backend for the same seed."""
    return _random("normal", shape, dtype, seed, "randn", device)


def from_numpy(array: Any, dtype: Any = None, *, device: DeviceLike = None) -> Tensor:
    """A tensor holding a copy of ``array`` (optionally converted to ``dtype``)."""
    ordinal = _checked_device(device, "from_numpy")
    host = np.asarray(array)
    kind = dtype_of(dtype) if dtype is not None else dtype_of(host.dtype)
    return _from_host(host, kind, device=ordinal)


# The _like constructors make their tensor on ``tensor``'s device unless told otherwise.
def zeros_like(tensor: Tensor, dtype: Any = None, *, device: DeviceLike = None) -> Tensor:
    return zeros(tensor.shape, dtype if dtype is not None else tensor.dtype,
                 device=_device_of(tensor) if device is None else device)


def ones_like(tensor: Tensor, dtype: Any = None, *, device: DeviceLike = None) -> Tensor:
    return ones(tensor.shape, dtype if dtype is not None else tensor.dtype,
                device=_device_of(tensor) if device is None else device)


def full_like(tensor: Tensor, value: bool | int | float, dtype: Any = None, *, device: DeviceLike = None) -> Tensor:
    return full(tensor.shape, value, dtype if dtype is not None else tensor.dtype,
                device=_device_of(tensor) if device is None else device)


def empty_like(tensor: Tensor, dtype: Any = None, *, device: DeviceLike = None) -> Tensor:
    return empty(tensor.shape, dtype if dtype is not None else tensor.dtype,
                 device=_device_of(tensor) if device is None else device)


def rand_like(tensor: Tensor, *, seed: int | None = None, device: DeviceLike = None) -> Tensor:
    return rand(tensor.shape, tensor.dtype, seed=seed, device=_device_of(tensor) if device is None else device)


def randn_like(tensor: Tensor, *, seed: int | None = None, device: DeviceLike = None) -> Tensor:
    return randn(tensor.shape, tensor.dtype, seed=seed, device=_device_of(tensor) if device is None else device)


def copy(tensor: Tensor, *, device: DeviceLike = None) -> Tensor:
    """A new contiguous tensor with the same values, on ``device`` (default: the
    tensor's own); device to device on the GPU when the source is contiguous (across
    devices through the driver's peer copy)."""
    ordinal = _device_of(tensor) if device is None else _checked_device(device, "copy")
    if _backend.current() == "gpu" and tensor.is_contiguous and tensor.size and ordinal_of(tensor.device) is not None:
        from cutile._gpu import default_stream, device_memory

        storage = tensor._host_access(False, "copy()")
        start, end = tensor.byte_range()
        source = _device_of(tensor)
        result = _allocate(tensor.shape, tensor.dtype, ordinal)
        target = device_memory(result._storage)
        if source != ordinal:  # the source's last writer may be on any stream of its device
            from cuda_core import Device

            Device(source).synchronize()
        stream = default_stream(ordinal)
        if storage.torch_ordered and source == ordinal:  # torch's memory: after torch's work on it
            from cutile._interop import _order_after
            from cutile._torch_streams import current_stream

            _order_after(current_stream(source), stream)
        target.copy_from(device_memory(storage), end - start, src_offset=start, stream=stream)
        stream.synchronize()
        return result
    return from_numpy(tensor.to_numpy(), tensor.dtype, device=ordinal)


def astype(tensor: Tensor, dtype: Any) -> Tensor:
    """A new tensor with the values converted to ``dtype`` (by a tile kernel where the
    tensor lives, when it is contiguous; floats to ints truncate toward zero)."""
    kind = dtype_of(dtype)
    ordinal = _device_of(tensor)
    if tensor.is_contiguous and _made_by_kernel(kind) and _made_by_kernel(tensor.dtype):
        result = _allocate(tensor.shape, kind, ordinal)
        _fill.cast(tensor, result)
        return result
    return from_numpy(tensor.to_numpy(), kind, device=ordinal)


class MetaTensor:
    """A shape and dtype with no storage: for ``cutile.compile`` without data."""

    def __init__(self, shape: tuple[int, ...], dtype: dt.DType, tile_shape: tuple[int, ...] | None = None,
                 map_shape: tuple[int, ...] | None = None, blocks: int | None = None) -> None:
        self.shape = shape
        self.dtype = dtype
        self.tile_shape = tile_shape
        self.map_shape = map_shape
        self.blocks = blocks

    def partition(self, tile_shape: ShapeLike) -> MetaTensor:
        return MetaTensor(self.shape, self.dtype, checked_tile_shape(tile_shape, self.shape))

    def map(self, map_shape: Any, blocks: int | None = None) -> MetaTensor:
        """A placeholder of a mapped partition (see `Partition.map`; ``blocks=None``
        takes the interpreter's default, as no device is known)."""
        from cutile._schedule import checked_map

        if self.tile_shape is None or self.map_shape is not None:
            raise LaunchError("map(): only a partition that is not mapped yet can be mapped: meta(...).partition(tile).map(...)")
        dims, count = checked_map(map_shape, blocks, self.shape, self.tile_shape, "cpu")
        return MetaTensor(self.shape, self.dtype, self.tile_shape, dims, count)

    def spec(self) -> TensorSpec:
        return TensorSpec(self.dtype, self.shape, self.tile_shape, map_shape=self.map_shape)

    def __repr__(self) -> str:
        tile = f", tile={list(self.tile_shape)}" if self.tile_shape else ""
        if self.map_shape is not None:
            from cutile._schedule import map_text

            tile += f", map={map_text(self.map_shape)}, blocks={self.blocks}"
        return f"meta(shape={list(self.shape)}, dtype={self.dtype}{tile})"


def meta(shape: ShapeLike, dtype: Any = dt.f32) -> MetaTensor:
    """A placeholder tensor (shape and dtype only) for ahead-of-time compilation."""
    return MetaTensor(_shape(shape, "meta"), dtype_of(dtype))


clone = copy


def from_dlpack(array: Any, *, keep_producer: bool = True) -> Tensor:
    """A tensor sharing the memory of a PyTorch, CuPy, JAX or numpy array (no copy).

    The producer stays alive as long as the tensor does. The array must live where
    kernels run: on the GPU for the GPU backend, in host memory for the interpreter.
    ``keep_producer=False``: for a DLPack producer the tensor keeps the memory alive
    (through the capsule's deleter) but not the producer object, so a cache of
    imports keyed weakly by the producer lets the producer go.
    """
    from cutile._interop import from_dlpack as _from_dlpack

    if not isinstance(keep_producer, bool):
        raise ArgumentTypeError(f"from_dlpack: keep_producer must be a bool, got {type(keep_producer).__name__}")
    return _from_dlpack(array, keep_producer=keep_producer)

