"""The GPU backend: tensors in device memory, kernels compiled to cubins and
launched through cuda_core."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from cuda_core import DeviceBuffer, Stream
from cutile._errors import LaunchError
from cutile._tensor import Storage, Tensor, numpy_dtype
from cutile_compiler import _dtypes as dt
from cutile_compiler._signature import Specialization

if TYPE_CHECKING:
    from cutile._kernel import Launch


class DeviceStorage(Storage):
    """A device allocation (stream-ordered, from the default memory pool)."""

    def __init__(self, buffer: DeviceBuffer) -> None:
        super().__init__(buffer.nbytes, f"cuda:{buffer.device.ordinal}")
        self.buffer = buffer


_streams: dict[int, Stream] = {}


def default_stream() -> Stream:
    """The stream cutile's synchronous operations use (one per device)."""
    stream = _streams.get(0)
    if stream is None:
        stream = _streams[0] = Stream.create(0)
    return stream


def upload(flat: np.ndarray[Any, Any], dtype: dt.DType, shape: tuple[int, ...]) -> Tensor:
    """A device tensor holding a copy of the host array ``flat`` (contiguous)."""
    stream = default_stream()
    buffer = DeviceBuffer.allocate(max(flat.nbytes, 1), stream=stream)
    if flat.nbytes:
        buffer.copy_from_host(flat, stream=stream)
    stream.synchronize()
    return Tensor(DeviceStorage(buffer), dtype, shape)


def device_to_numpy(tensor: Tensor) -> np.ndarray[Any, Any]:
    """A host copy of a device tensor's values."""
    storage = tensor._storage
    assert isinstance(storage, DeviceStorage)
    itemsize = tensor.dtype.itemsize
    start, end = tensor.byte_range()
    raw = np.empty(end - start, dtype=np.uint8)
    if end > start:
        storage.buffer.copy_to_host(raw, offset=start, stream=default_stream())
        default_stream().synchronize()
    base = start // itemsize
    flat = raw.view(numpy_dtype(tensor.dtype))
    view = np.lib.stride_tricks.as_strided(
        flat[tensor.offset - base:], tensor.shape, tuple(s * itemsize for s in tensor.strides))
    return np.array(view, copy=True)


def run_launch(launch: Launch, spec: Specialization, grid: tuple[int, int, int]) -> None:
    """Compiles (or finds in the cache) and launches on the GPU."""
    raise LaunchError(
        f"{launch.kernel.name}: the GPU code generator is not built yet; run with CUTILE_BACKEND=interpreter")
