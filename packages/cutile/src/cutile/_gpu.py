"""The GPU backend: tensors in device memory, kernels compiled to cubins and
launched through cuda_core."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from cuda_core import Device, DeviceBuffer, DeviceMemory, DeviceView, LaunchConfig, Module, PreparedLaunch, Stream
from cuda_async import ensure_not_capturing, is_capturing
from cutile._errors import GraphCaptureError, LaunchError
from cutile._tensor import Storage, Tensor, numpy_dtype
from cutile_compiler import _dtypes as dt
from cutile_compiler._lowering import AbiArg
from cutile_compiler._pipeline import CompiledKernel
from cutile_compiler._signature import Specialization
from cutile_compiler._toolchain import CompileOptions

if TYPE_CHECKING:
    from cutile._kernel import Kernel


class DeviceStorage(Storage):
    """A device allocation (stream-ordered, from the default memory pool)."""

    def __init__(self, buffer: DeviceBuffer) -> None:
        super().__init__(buffer.nbytes, f"cuda:{buffer.device.ordinal}", buffer.ptr)
        self.buffer = buffer

    @property
    def pointer(self) -> int:
        """The allocation's device address."""
        return self.buffer.ptr

    def device_memory(self) -> Any:
        return self.buffer


_streams: dict[int, Stream] = {}


def default_stream() -> Stream:
    """The stream cutile's synchronous operations use (one per device)."""
    stream = _streams.get(0)
    if stream is None:
        stream = _streams[0] = Stream.create(0)
    return stream


def upload(flat: np.ndarray[Any, Any], dtype: dt.DType, shape: tuple[int, ...]) -> Tensor:
    """A device tensor holding a copy of the host array ``flat`` (contiguous)."""
    ensure_not_capturing("creating a tensor (an allocation)")
    stream = default_stream()
    buffer = DeviceBuffer.allocate(max(flat.nbytes, 1), stream=stream)
    if flat.nbytes:
        buffer.copy_from_host(flat.view(np.uint8), stream=stream)
    stream.synchronize()
    return Tensor(DeviceStorage(buffer), dtype, shape)


def allocate(dtype: dt.DType, shape: tuple[int, ...]) -> Tensor:
    """A device tensor of ``shape``, its memory not written, usable from any stream
    (a pool allocation on cutile's stream, waited for)."""
    ensure_not_capturing("creating a tensor (an allocation)")
    count = 1
    for extent in shape:
        count *= extent
    stream = default_stream()
    buffer = DeviceBuffer.allocate(max(count * dtype.itemsize, 1), stream=stream)
    stream.synchronize()
    return Tensor(DeviceStorage(buffer), dtype, shape)


def device_memory(storage: Storage) -> DeviceMemory:
    """The cuda_core view of a device storage (ours or another library's)."""
    if isinstance(storage, DeviceStorage):
        return storage.buffer
    pointer = getattr(storage, "pointer", None)
    if pointer is None:
        raise LaunchError(f"memory on {storage.device} is not device memory")
    return DeviceView.from_pointer(int(pointer), storage.nbytes, owner=storage)


def device_to_numpy(tensor: Tensor) -> np.ndarray[Any, Any]:
    """A host copy of a device tensor's values.

    The device is synchronized first: the last writer may have run on any stream
    of a scheduling policy, and the host cannot name it.
    """
    Device(0).synchronize()
    itemsize = tensor.dtype.itemsize
    start, end = tensor.byte_range()
    raw = np.empty(end - start, dtype=np.uint8)
    if end > start:
        device_memory(tensor._storage).copy_to_host(raw, offset=start, stream=default_stream())
        default_stream().synchronize()
    base = start // itemsize
    flat = raw.view(numpy_dtype(tensor.dtype))
    view = np.lib.stride_tricks.as_strided(
        flat[tensor.offset - base:], tensor.shape, tuple(s * itemsize for s in tensor.strides))
    return np.array(view, copy=True)


# C type of each kernel parameter, by cutile dtype (16-bit floats travel as raw bytes).
_PARAM_TYPES = {
    "bool": "u8", "i8": "i8", "i16": "i16", "i32": "i32", "i64": "i64", "u8": "u8", "u16": "u16",
    "u32": "u32", "u64": "u64", "f32": "f32", "f64": "f64", "tf32": "f32",
    "f16": "bytes2", "bf16": "bytes2", "f8e4m3fn": "bytes1", "f8e5m2": "bytes1",
}
_MAX_GRID = (1 << 24) - 1  # tileiras's block-id arithmetic is exact up to 2^24 - 1 per axis
_I32_MAX = (1 << 31) - 1


def _param_type(arg: AbiArg, size: int, kernel: str) -> str:
    """The C type to pack an entry argument as, at the size the cubin declares
    (small integer scalars may be widened by tileiras)."""
    if arg.kind == "pointer":
        wanted = "ptr"
    elif arg.kind in ("dim", "stride"):
        wanted = "i32"
    else:
        assert arg.dtype is not None
        wanted = _PARAM_TYPES[arg.dtype.name]
        if arg.dtype.is_integer or arg.dtype is dt.bool_:
            signed = arg.dtype.is_signed
            wanted = {1: "i8", 2: "i16", 4: "i32", 8: "i64"}.get(size, wanted)
            if not signed:
                wanted = "u" + wanted[1:]
    natural = {"ptr": 8, "i8": 1, "u8": 1, "i16": 2, "u16": 2, "i32": 4, "u32": 4, "i64": 8, "u64": 8,
               "f32": 4, "f64": 8, "bytes1": 1, "bytes2": 2}[wanted]
    if natural != size:
        raise LaunchError(f"{kernel}: parameter {arg.param} ({arg.kind}) is {size} bytes in the cubin, "
                          f"cutile packs {natural} (a cutile bug: please report it)")
    return wanted


class _Loaded:
    """A compiled kernel loaded on the device, with its prepared launch."""

    def __init__(self, compiled: CompiledKernel) -> None:
        self.compiled = compiled
        self.function = Module.load(compiled.cubin).get_function(compiled.name)
        if is_capturing():
            # Counting the parameters may take a failing driver query, which would
            # invalidate the capture: look only at those cutile packs.
            count = len(compiled.abi)
            sizes = [self.function.param_info(i)[1] for i in range(count)]
        else:
            sizes = [size for _, size in self.function.param_layout]
        if len(sizes) != len(compiled.abi):
            raise LaunchError(
                f"{compiled.name}: the cubin declares {len(sizes)} parameters, cutile packs {len(compiled.abi)} "
                "(a cutile bug: please report it)")
        types = [_param_type(arg, size, compiled.name) for arg, size in zip(compiled.abi, sizes)]
        self.prepared = PreparedLaunch(self.function, LaunchConfig((1, 1, 1), (1, 1, 1)), types)


def prepare(kernel: Kernel, spec: Specialization, options: CompileOptions) -> _Loaded:
    """The loaded kernel for ``spec``: compiled (or found in a cache) and loaded once."""
    key = (spec, options)
    loaded = kernel._loaded.get(key)
    if loaded is None:
        if is_capturing():
            raise GraphCaptureError(
                f"{kernel.name} is launched inside a CUDA graph capture before it was ever compiled and "
                "loaded for these argument shapes; loading a module cannot be captured. Warm it up first: "
                "run it once, or call .compile() on the launch, before the graph scope")
        device = Device(0)
        loaded = _Loaded(kernel.compiled(spec, device.sm_name, options))
        kernel._loaded.put(key, loaded)
    return loaded


def _scalar_argument(value: Any, dtype: dt.DType) -> Any:
    if dtype.name in ("f16", "bf16", "f8e4m3fn", "f8e5m2"):
        return np.asarray(value, dtype=numpy_dtype(dtype)).tobytes()
    if dtype is dt.bool_:
        return int(bool(value))
    return value


def enqueue(kernel: Kernel, spec: Specialization, grid: tuple[int, int, int], arguments: dict[str, Any],
            options: CompileOptions, stream: Stream) -> None:
    """Queues the launch on ``stream`` without waiting (ownership is the caller's job)."""
    if any(d > _MAX_GRID for d in grid):
        raise LaunchError(f"{kernel.name}: grid {list(grid)} exceeds {_MAX_GRID} blocks along an axis")
    loaded = prepare(kernel, spec, options)
    values: list[Any] = []
    for arg in loaded.compiled.abi:
        value = arguments[arg.param]
        if arg.kind == "pointer":
            storage = value._storage
            if storage.device == "cpu":
                raise LaunchError(f"{kernel.name}: parameter '{arg.param}' lives in host memory, not on the GPU")
            values.append(storage.base_address + value.offset * value.dtype.itemsize)
        elif arg.kind in ("dim", "stride"):
            number = value.shape[arg.axis] if arg.kind == "dim" else value.strides[arg.axis]
            if not -_I32_MAX <= number <= _I32_MAX:
                raise LaunchError(f"{kernel.name}: parameter '{arg.param}' has a {arg.kind} of {number}, beyond i32")
            values.append(number)
        else:
            assert arg.dtype is not None
            values.append(_scalar_argument(value, arg.dtype))
    prepared = loaded.prepared
    if prepared.config.grid != grid:
        prepared.set_grid(grid)
    prepared.launch(stream, *values)
