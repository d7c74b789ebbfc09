"""Tensors, partitions and the ownership rules that make launches race-free.

A `Tensor` is a strided view of a `Storage` (host memory for the interpreter,
device memory for the GPU). Ownership is tracked at two levels:

- per object: ``t.partition(shape)`` consumes ``t`` (every later use of that
  object raises `OwnershipError`) and returns a `Partition`; ``p.unpartition()``
  consumes the partition and returns a new tensor;
- per memory: a launch *holds* the byte ranges of its arguments in cuda_async's
  ledger, for writing (Mut parameters) or reading, from the call until its work
  completes (pending, then running); a held range cannot be written by anything
  else, and a range held for writing cannot be read by anything else.
"""

from __future__ import annotations

import dataclasses
import math
import weakref
from typing import Any, NamedTuple

import ml_dtypes  # noqa: F401  (registers bfloat16 and float8 with numpy)
import numpy as np

from cuda_async import Resource, check_access, ensure_not_capturing
from cutile._errors import ArgumentError, ArgumentTypeError, InteropError, LaunchError, OwnershipError, TensorIndexError
from cutile_compiler import dtypes as dt
from cutile_compiler import TensorAnnotation, TensorSpec, is_power_of_two, make_tensor_annotation, tile_shape_problem
from cutile_compiler import numpy_dtype as numpy_dtype  # one definition, re-exported


def dtype_of(value: Any) -> dt.DType:
    """A cutile dtype from a DType, a numpy dtype or a name."""
    if isinstance(value, dt.DType):
        return value
    if isinstance(value, str):
        return dt.lookup(value)
    try:
        name = np.dtype(value).name
    except TypeError:
        raise ArgumentTypeError(f"dtype: expected a cutile dtype (f32, bf16, ...) or a numpy dtype, got {value!r}") from None
    found = dt.BY_NUMPY_NAME.get(name)
    if found is None:
        raise ArgumentTypeError(f"dtype: numpy dtype {name} has no cutile equivalent")
    return found


def strided_view(flat: np.ndarray[Any, Any], shape: tuple[int, ...], strides: tuple[int, ...]) -> np.ndarray[Any, Any]:
    """The view of ``shape`` and ``strides`` (in elements) over a flat array from its
    first element, writable where ``flat`` is. Built on unsigned integers of the same
    width and reinterpreted: numpy's as_strided cannot rebuild some ml_dtypes dtypes
    (float8_e5m2's '<f1')."""
    itemsize = flat.dtype.itemsize
    bits = flat.view(np.dtype(f"u{itemsize}")) if itemsize in (1, 2, 4, 8) else flat
    view = np.lib.stride_tricks.as_strided(bits, shape, tuple(s * itemsize for s in strides))
    return view.view(flat.dtype)


def overlaps_itself(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """Whether two different indices of a strided view reach the same element."""
    dims = sorted((abs(stride), extent) for extent, stride in zip(shape, strides) if extent > 1)
    reach = 0  # the largest offset the inner dims reach
    for stride, extent in dims:
        if stride <= reach:
            return True
        reach += stride * (extent - 1)
    return False


def overlapping(a_device: str, a_start: int, a_end: int, b_device: str, b_start: int, b_end: int) -> bool:
    return a_device == b_device and a_start < b_end and b_start < a_end


class Storage:
    """Memory behind tensors, and the `cuda_async.Resource` through which ops own
    it. Who holds which bytes (pending launches, running ops) is cuda_async's
    ledger's: by device and absolute address, so that two storages over the same
    memory (one array imported twice through DLPack, say) see each other's holds."""

    # Memory torch owns (imported from a torch tensor, or allocated through torch
    # inside a `cutile.torch.custom_op`): launches on it follow torch's stream order.
    torch_ordered = False
    # Memory handed to another library (a DLPack capsule, the CUDA array interface): it
    # may write it on streams the ledger does not see.
    shared = False
    # Memory another library owns (imported): it may write it likewise.
    foreign = False
    # Made read-only for good by `Tensor.freeze` (after its writes completed): nothing
    # writes it any more, so a dependent launch may read it before its wait.
    frozen = False

    def __init__(self, nbytes: int, device: str, base_address: int = 0) -> None:
        self.nbytes = nbytes
        self.device = device
        self.base_address = base_address  # of byte 0 (host or device); fixed for the storage's life
        self.readonly = False  # set for imported read-only memory: never a kernel's output
        self._resource: StorageResource | None = None

    @property
    def resource(self) -> StorageResource:
        """This storage as cuda_async sees it (made on first use)."""
        if self._resource is None:
            self._resource = StorageResource(self)
        return self._resource

    def device_memory(self) -> Any:
        """The cuda_core memory behind a device storage (None for host memory)."""
        return None

    def check_host_access(self, start: int, end: int, writes: bool, user: str) -> None:
        """Raises `OwnershipError` if the host may not touch ``[start, end)`` now:
        a pending launch or a running op holds it."""
        check_access(self.device, self.base_address + start, self.base_address + end, writes, user)

    def check_not_pending(self, start: int, end: int, writes: bool, user: str) -> None:
        """Raises `OwnershipError` if a pending launch (one made, not yet run) holds
        ``[start, end)`` in a conflicting way; running ops are no conflict here."""
        check_access(self.device, self.base_address + start, self.base_address + end, writes, user,
                     _running_is_no_conflict)


def _running_is_no_conflict(job: Any) -> bool:
    return True


class StorageLayout(NamedTuple):
    """A storage as a CUDA graph copies it (whole): its size and device."""

    nbytes: int
    device: str

    def __str__(self) -> str:
        return f"{self.nbytes} bytes on {self.device}"


class StorageResource(Resource):
    """A storage as a `cuda_async.Resource`: ops that read or write tensors hold it,
    and a CUDA graph's inputs are replaced by copying storages of the same layout.

    It refers to its storage weakly (the storage owns it): a strong reference both
    ways would be a cycle, and the memory of every tensor ever launched would wait
    for the garbage collector. What the memory is made of stays alive through the
    resource itself: ``memory`` (device) or the host arrays, so that an op, a job or
    a graph holding the resource keeps the memory valid."""

    __slots__ = ("_storage", "_host")

    def __init__(self, storage: Storage) -> None:
        super().__init__(f"tensor memory on {storage.device}", memory=storage.device_memory(),
                         layout=StorageLayout(storage.nbytes, storage.device),
                         span=(storage.device, storage.base_address, storage.base_address + storage.nbytes))
        self._storage = weakref.ref(storage)
        self._host: tuple[np.ndarray[Any, Any], np.ndarray[Any, Any] | None] | None = (
            (storage.array, storage.initialized) if isinstance(storage, HostStorage) else None)

    @property
    def storage(self) -> Storage:
        storage = self._storage()
        if storage is None:
            raise OwnershipError(f"{self.name}: the tensor memory is gone")
        return storage

    def copy_from(self, source: Resource, stream: Any) -> None:
        if not isinstance(source, StorageResource):
            raise ArgumentTypeError(f"cannot copy {source.name} into {self.name}")
        if self.memory is not None and source.memory is not None:
            self.memory.copy_from(source.memory, stream=stream)
        elif self._host is not None and source._host is not None and self._host[0].nbytes == source._host[0].nbytes:
            array, initialized = self._host
            np.copyto(array.view(np.uint8), source._host[0].view(np.uint8))
            if initialized is not None:
                initialized[...] = True
        else:
            raise ArgumentTypeError(f"cannot copy {source.name} into {self.name} (different kinds or sizes of memory)")


class HostStorage(Storage):
    """A flat numpy array: the interpreter's memory. ``initialized`` tracks which
    elements were ever written (for the interpreter's checked mode)."""

    def __init__(self, array: np.ndarray[Any, Any], *, initialized: bool = True) -> None:
        super().__init__(array.nbytes, "cpu", int(array.ctypes.data))
        self.array = array
        self.initialized: np.ndarray[Any, Any] | None = None if initialized else np.zeros(array.shape, dtype=bool)


@dataclasses.dataclass(frozen=True)
class TensorLayout:
    """What a kernel assumes of a tensor argument's memory: dtype, shape, strides and
    offset (in elements) in its storage, and the device. A CUDA graph's input is
    replaced only by a tensor of an equal layout (the graph reads the memory so)."""

    dtype: dt.DType
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int
    device: str

    def __str__(self) -> str:
        offset = f", offset {self.offset}" if self.offset else ""
        return f"{self.dtype}{list(self.shape)} (strides {list(self.strides)}{offset}) on {self.device}"


class Owned:
    """The base of `Tensor` and `Partition`: who consumed the object (None while it
    may be used), a slot the native launch path reads (`cutile._native`)."""

    __slots__ = ("_consumed_by",)
    _consumed_by: str | None

    @property
    def consumed_by(self) -> str | None:
        """What consumed this object (``partition()``, a launch that took it), or None
        while it may still be used."""
        return self._consumed_by


class Tensor(Owned):
    """An n-dimensional array on the interpreter's host memory or a GPU.

    As an annotation, ``Tensor[f32, [-1, "K"]]`` describes a kernel parameter.
    """

    __slots__ = ("_storage", "dtype", "shape", "strides", "offset", "_byte_range", "__weakref__")

    def __init__(self, storage: Storage, dtype: dt.DType, shape: tuple[int, ...],
                 strides: tuple[int, ...] | None = None, offset: int = 0) -> None:
        self._storage = storage
        self.dtype = dtype
        self.shape = tuple(int(s) for s in shape)
        self.strides = strides if strides is not None else _contiguous_strides(self.shape)
        self.offset = offset
        self._consumed_by: str | None = None
        self._byte_range: tuple[int, int] | None = None  # a view never changes: computed once

    def __class_getitem__(cls, item: Any) -> TensorAnnotation:
        return make_tensor_annotation(item)

    # -- ownership -----------------------------------------------------------
    def _live(self, use: str) -> Storage:
        if self._consumed_by is not None:
            raise OwnershipError(f"{use}: this tensor object was consumed by {self._consumed_by}; use the object that call returned")
        return self._storage

    def _consume(self, by: str) -> None:
        self._live(by)
        self._consumed_by = by

    def byte_range(self) -> tuple[int, int]:
        """The smallest [start, end) byte range of the storage this view touches."""
        found = self._byte_range
        if found is None:
            itemsize = self.dtype.itemsize
            if self.size == 0:
                found = (self.offset * itemsize, self.offset * itemsize)
            else:
                low = high = self.offset
                for extent, stride in zip(self.shape, self.strides):
                    if stride >= 0:
                        high += (extent - 1) * stride
                    else:
                        low += (extent - 1) * stride
                found = (low * itemsize, (high + 1) * itemsize)
            self._byte_range = found
        return found

    # -- properties -----------------------------------------------------------
    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def device(self) -> str:
        return self._storage.device

    @property
    def is_contiguous(self) -> bool:
        return self.strides == _contiguous_strides(self.shape)

    def address(self) -> int:
        """The address of element 0 in bytes (device or host memory)."""
        return self._storage.base_address + self.offset * self.dtype.itemsize

    def layout(self) -> TensorLayout:
        """How this view lays its elements over its storage (see `TensorLayout`)."""
        return TensorLayout(self.dtype, self.shape, self.strides, self.offset, self.device)

    def spec(self, tile_shape: tuple[int, ...] | None = None, map_shape: tuple[int, ...] | None = None) -> TensorSpec:
        """What a compile needs to know of this tensor: dtype, shape, and the
        divisibility and contiguity facts that let tileiras vectorize."""
        return TensorSpec.describe(self.dtype, self.shape, self.strides, self.address(), tile_shape, map_shape)

    def __repr__(self) -> str:
        state = f", consumed by {self._consumed_by}" if self._consumed_by else ""
        return f"Tensor(shape={list(self.shape)}, dtype={self.dtype}, device={self.device}{state})"

    # -- data -------------------------------------------------------------------
    def _host_access(self, writes: bool, user: str) -> Storage:
        """This tensor's storage, after checking that the object is live and that no
        pending launch or running op holds its memory against ``user``'s access."""
        storage = self._live(user)
        start, end = self.byte_range()
        storage.check_host_access(start, end, writes, user)
        return storage

    def host_view(self) -> np.ndarray[Any, Any]:
        """The numpy view of this tensor's host memory (interpreter storage only);
        refused while a pending launch or a running op holds the tensor for writing, and
        for frozen memory (`freeze`: nothing writes it)."""
        if self._host_access(True, "host_view()").frozen:
            raise InteropError("host_view(): the tensor's memory is frozen (read-only for good); read it with "
                               "to_numpy()")
        return self._raw_host_view()

    def _raw_host_view(self) -> np.ndarray[Any, Any]:
        """The writable numpy view, without ownership checks (for the interpreter
        running a launch)."""
        storage = self._storage
        if not isinstance(storage, HostStorage):
            raise InteropError("host_view(): the tensor lives on a GPU; use to_numpy()")
        return strided_view(storage.array[self.offset:], self.shape, self.strides)

    def to_numpy(self) -> np.ndarray[Any, Any]:
        """A copy of the tensor's values as a numpy array (bf16/fp8 as ml_dtypes)."""
        storage = self._host_access(False, "to_numpy()")
        if isinstance(storage, HostStorage):
            return np.array(self._raw_host_view(), copy=True)
        ensure_not_capturing("to_numpy() (reading a tensor back to the host)")
        from cutile._gpu import device_to_numpy

        return device_to_numpy(self)

    def freeze(self) -> Tensor:
        """Makes the tensor's memory read-only for good and returns the tensor: its
        whole storage (every view of it), after the writes queued on it have completed.
        From then on no launch may write it (a ``Mut`` argument over it is refused) and
        it is shared with other libraries read-only. What a kernel reads before its
        ``grid_dependency_control_wait()`` in a dependent launch must be frozen: nothing
        can be writing it while the kernel before still runs (a model's weights, say).
        Refused while a pending launch or a running op writes it, and for memory another
        library owns or was handed (it may write it on streams cutile does not see)."""
        storage = self._host_access(False, "freeze()")
        if storage.foreign or storage.shared:
            whose = "another library owns" if storage.foreign else "was handed to another library (DLPack or the CUDA array interface)"
            raise InteropError(f"freeze(): the tensor's memory {whose}, which may still write it; freeze a copy "
                               "(api.copy) made before sharing it")
        if storage.device != "cpu" and storage._resource is not None:
            storage._resource.wait_for_last_write()  # (a write whose holds ended before its work did)
        storage.readonly = storage.frozen = True
        return self

    def to(self, device: int | str) -> Tensor:
        """A contiguous copy of the tensor on ``device`` (an ordinal or ``"cuda:N"``;
        always a new tensor, even on the tensor's own device)."""
        from cutile import api

        return api.copy(self, device=device)

    # -- views ------------------------------------------------------------------
    def _view(self, shape: tuple[int, ...], strides: tuple[int, ...], offset: int) -> Tensor:
        if self._consumed_by is not None:
            self._live("a view")  # raises, naming the consumer
        return _made_view(self._storage, self.dtype, shape, strides, offset)

    def __getitem__(self, key: Any) -> Tensor:
        """A view by basic indexing: ints, slices (any step) and ``...``; no copy."""
        if key is Ellipsis:  # the whole tensor (a new object, the usual way to make one)
            return self._view(self.shape, self.strides, self.offset)
        items = key if isinstance(key, tuple) else (key,)
        if sum(item is Ellipsis for item in items) > 1:
            raise TensorIndexError("an index can only have a single ellipsis ('...')")
        if Ellipsis in items:
            at = items.index(Ellipsis)
            fill = self.ndim - (len(items) - 1)
            items = items[:at] + (slice(None),) * fill + items[at + 1:]
        if len(items) > self.ndim:
            raise TensorIndexError(f"too many indices: {len(items)} for a rank-{self.ndim} tensor")
        items = items + (slice(None),) * (self.ndim - len(items))
        shape: list[int] = []
        strides: list[int] = []
        offset = self.offset
        for axis, (item, extent, stride) in enumerate(zip(items, self.shape, self.strides)):
            if isinstance(item, slice):
                start, stop, step = item.indices(extent)
                count = len(range(start, stop, step))
                offset += start * stride if count else 0
                shape.append(count)
                strides.append(stride * step)
            elif isinstance(item, (int, np.integer)) and not isinstance(item, bool):
                index = int(item)
                if not -extent <= index < extent:
                    raise TensorIndexError(f"index {index} is out of bounds for axis {axis} with size {extent}")
                offset += (index % extent) * stride
            else:
                raise TensorIndexError(f"tensors are indexed with ints, slices and '...', got {type(item).__name__}")
        return self._view(tuple(shape), tuple(strides), offset)

    def reshape(self, *shape: Any) -> Tensor:
        """A view with another shape (the tensor must be contiguous; one dim may be -1)."""
        if all(type(d) is int and d >= 0 for d in shape) and math.prod(shape) == self.size and self.is_contiguous:
            return self._view(shape, _contiguous_strides(shape), self.offset)  # (the usual case: dims given whole)
        dims = list(shape[0] if len(shape) == 1 and isinstance(shape[0], (list, tuple)) else shape)
        if dims.count(-1) > 1:
            raise ArgumentError("reshape: only one dimension can be -1")
        known = math.prod(d for d in dims if d != -1)
        if -1 in dims:
            if known == 0 or self.size % known:
                raise ArgumentError(f"reshape: cannot reshape {list(self.shape)} into {dims}")
            dims[dims.index(-1)] = self.size // known
        if math.prod(dims) != self.size:
            raise ArgumentError(f"reshape: cannot reshape {list(self.shape)} ({self.size} elements) into {dims}")
        if not self.is_contiguous:
            raise ArgumentError("reshape: the tensor is not contiguous; copy it first (api.copy(t))")
        new_shape = tuple(int(d) for d in dims)
        return self._view(new_shape, _contiguous_strides(new_shape), self.offset)

    def permute(self, *axes: Any) -> Tensor:
        """A view with the dimensions reordered: result dim i is this tensor's dim axes[i]."""
        order = tuple(axes[0] if len(axes) == 1 and isinstance(axes[0], (list, tuple)) else axes)
        if order == _IDENTITY[:len(order)] and len(order) == len(self.shape):  # (a new view, as is)
            return self._view(self.shape, self.strides, self.offset)
        if sorted(order) != list(range(self.ndim)):
            raise ArgumentError(f"permute: {list(order)} is not a permutation of {self.ndim} dims")
        return self._view(tuple(self.shape[a] for a in order), tuple(self.strides[a] for a in order), self.offset)

    def transpose(self, a: int = 0, b: int = 1) -> Tensor:
        """A view with dims a and b swapped."""
        order = list(range(self.ndim))
        order[a], order[b] = order[b], order[a]
        return self.permute(order)

    @property
    def T(self) -> Tensor:  # noqa: N802 - numpy's name
        """All dims reversed (the transpose of a matrix)."""
        return self._view(self.shape[::-1], self.strides[::-1], self.offset)

    def broadcast_to(self, *shape: Any) -> Tensor:
        """A view of ``shape`` repeating this tensor as numpy broadcasts (new leading
        dims and dims of extent 1 get stride 0); no copy. Kernels may read it; a Mut
        parameter refuses it (its elements share memory)."""
        dims = tuple(shape[0] if len(shape) == 1 and isinstance(shape[0], (list, tuple)) else shape)
        if any(isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 0 for d in dims) \
                or len(dims) < self.ndim:
            raise ArgumentError(f"broadcast_to: cannot broadcast {list(self.shape)} to {list(dims)}")
        lead = len(dims) - self.ndim
        strides = [0] * lead
        for extent, stride, target in zip(self.shape, self.strides, dims[lead:]):
            if extent == target:
                strides.append(stride)
            elif extent == 1:
                strides.append(0)
            else:
                raise ArgumentError(f"broadcast_to: cannot broadcast {list(self.shape)} to {list(dims)}")
        return self._view(tuple(int(d) for d in dims), tuple(strides), self.offset)

    # -- interop ----------------------------------------------------------------
    def __dlpack__(self, stream: int | None = None, *, max_version: tuple[int, int] | None = None,
                   dl_device: tuple[int, int] | None = None, copy: bool | None = None) -> Any:
        """A DLPack capsule sharing this tensor's memory (versioned, with the read-only
        flag, for consumers that pass ``max_version``); see `cutile._interop.to_dlpack`."""
        from cutile._interop import to_dlpack

        return to_dlpack(self, stream, max_version=max_version, dl_device=dl_device, copy=copy)

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray[Any, Any]:
        """``np.asarray(t)``: a host tensor's values (a copy; ``copy=False`` gives the
        shared view, as `host_view` does). A GPU tensor is refused: `to_numpy` copies
        it to the host explicitly."""
        if not isinstance(self._storage, HostStorage):
            self._live("np.asarray()")
            raise InteropError("np.asarray(): the tensor lives on a GPU; copy it to the host with to_numpy()")
        if copy is False:
            shared = self._host_access(not self._storage.readonly, "np.asarray(copy=False)")
            view = self._raw_host_view()
            if shared.readonly:
                view.flags.writeable = False
            if dtype is not None and np.dtype(dtype) != view.dtype:
                raise InteropError(f"np.asarray(copy=False): the tensor holds {view.dtype}, not {np.dtype(dtype)}; "
                                   "converting needs a copy")
            return view
        values = self.to_numpy()
        return values if dtype is None else values.astype(dtype, copy=False)

    def __dlpack_device__(self) -> tuple[int, int]:
        from cutile._interop import dlpack_device

        return dlpack_device(self)

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        from cutile._interop import cuda_array_interface

        return cuda_array_interface(self)

    def partition(self, tile_shape: Any) -> Partition:
        """This tensor split into tiles of ``tile_shape`` for a kernel's Mut parameter.

        Consumes this object (use the partition, and ``unpartition()`` to get the
        tensor back). Tile dims must be powers of two; the last tile along an axis
        may be partial (masked on store, padded on load).
        """
        shape = checked_tile_shape(tile_shape, self.shape)
        self._consume("partition()")
        return Partition(_made_view(self._storage, self.dtype, self.shape, self.strides, self.offset), shape,
                         _from_tensor=True)


class Partition(Owned):
    """A tensor split into equal tiles, each owned by one block of a launch; or, once
    mapped (`map`), reached by a schedule that ``blocks`` blocks share."""

    __slots__ = ("_tensor", "tile_shape", "map_shape", "blocks", "__weakref__")

    def __init__(self, tensor: Tensor, tile_shape: tuple[int, ...], *, _from_tensor: bool = False,
                 _map: tuple[tuple[int, ...], int] | None = None) -> None:
        if not _from_tensor:
            raise ArgumentTypeError("partitions are made by Tensor.partition(tile_shape), which consumes the tensor")
        self._tensor = tensor
        self.tile_shape = tile_shape
        self._consumed_by: str | None = None
        #: a mapped partition's group size per axis (0: owned) and block count; None: one tile per block
        self.map_shape: tuple[int, ...] | None = _map[0] if _map is not None else None
        self.blocks: int | None = _map[1] if _map is not None else None

    def map(self, map_shape: Any, blocks: int | None = None) -> Partition:
        """This partition with a schedule (consumes this object): the tile grid stays
        this partition's, ``map_shape`` groups its tiles per axis (``[8, 1]``: groups of
        8 tile rows, the grouped order of GEMMs; ``cutile.OWNED``: each schedule item
        owns the axis whole) and ``blocks`` blocks share the items (the launch grid is
        ``(blocks, 1, 1)``; default: the device's SM count, or the streamed tile count
        when smaller). In the kernel, ``for idx in z.tiles():`` walks a block's items
        and ``z.store(tile, idx)`` stores at them."""
        from cutile._schedule import checked_map

        tensor = self._live("map()")
        if self.map_shape is not None:
            raise LaunchError("map(): this partition is already mapped; unpartition() and partition it again")
        mapped = checked_map(map_shape, blocks, tensor.shape, self.tile_shape, tensor.device)
        start, end = tensor.byte_range()
        tensor._storage.check_not_pending(start, end, True, "map()")  # as unpartition(): not while a launch holds it
        self._consumed_by = "map()"
        return Partition(tensor, self.tile_shape, _from_tensor=True, _map=mapped)

    def _live(self, use: str) -> Tensor:
        if self._consumed_by is not None:
            raise OwnershipError(f"{use}: this partition was consumed by {self._consumed_by}")
        return self._tensor

    @property
    def shape(self) -> tuple[int, ...]:
        return self._tensor.shape

    @property
    def dtype(self) -> dt.DType:
        return self._tensor.dtype

    @property
    def grid(self) -> tuple[int, ...]:
        """Tiles along each axis (for a partition that is not mapped, the launch grid it implies)."""
        return tuple(-(-s // t) for s, t in zip(self._tensor.shape, self.tile_shape))

    @property
    def launch_grid(self) -> tuple[int, ...]:
        """The launch grid it implies: its tile grid, or ``(blocks,)`` once mapped."""
        return self.grid if self.blocks is None else (self.blocks,)

    def unpartition(self) -> Tensor:
        """The whole tensor back (consumes this partition)."""
        tensor = self._live("unpartition()")
        start, end = tensor.byte_range()
        tensor._storage.check_not_pending(start, end, True, "unpartition()")
        self._consumed_by = "unpartition()"
        return Tensor(tensor._storage, tensor.dtype, tensor.shape, tensor.strides, tensor.offset)

    def to_numpy(self) -> np.ndarray[Any, Any]:
        """A copy of the whole tensor's values."""
        return self._live("to_numpy()").to_numpy()

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray[Any, Any]:
        """``np.asarray(p)``: the whole tensor's values, as for `Tensor.__array__`."""
        return self._live("np.asarray()").__array__(dtype, copy)

    def __repr__(self) -> str:
        t = self._tensor
        mapped = ""
        if self.map_shape is not None:
            from cutile._schedule import map_text

            mapped = f", map={map_text(self.map_shape)}, blocks={self.blocks}"
        return (f"Partition(shape={list(t.shape)}, tile={list(self.tile_shape)}{mapped}, dtype={t.dtype}, "
                f"device={t.device})")


def checked_tile_shape(tile_shape: Any, shape: tuple[int, ...]) -> tuple[int, ...]:
    """``tile_shape`` as a partition of a tensor of ``shape`` takes it: one tile dim
    per tensor dim (at most 3: one per grid axis), each a positive power of two
    (the language's tile rule, `tile_shape_problem`: at most 2**24 elements too). `Tensor.partition` and
    `api.meta(...).partition` both check here; a `LaunchError` names the argument."""
    items = tuple(tile_shape) if isinstance(tile_shape, (list, tuple)) else (tile_shape,)
    plain = all(type(extent) is int for extent in items)  # (True == 1 and hashes alike: ints only)
    key = (items, len(shape))
    if plain and key in _CHECKED_TILES:
        return items
    if len(items) != len(shape):
        raise LaunchError(f"partition(tile_shape={list(items)}): a rank-{len(shape)} tensor (shape {list(shape)}) "
                          f"needs {len(shape)} tile dims, got {len(items)}")
    dims: list[int] = []
    for extent in items:
        if isinstance(extent, (bool, np.bool_)) or not isinstance(extent, (int, np.integer)) \
                or not is_power_of_two(int(extent)):
            raise LaunchError(f"partition(tile_shape={list(items)}): tile dims must be positive powers of two, "
                              f"got {extent!r}")
        dims.append(int(extent))
    problem = tile_shape_problem(tuple(dims))
    if problem is not None:
        raise LaunchError(f"partition(tile_shape={list(items)}): {problem}")
    if len(shape) > 3:
        raise LaunchError(f"partition(tile_shape={list(items)}): at most 3 dims (one per grid axis), "
                          f"the tensor has {len(shape)}")
    if plain and len(_CHECKED_TILES) < 4096:
        _CHECKED_TILES.add(key)
    return tuple(dims)


# (tile shape of ints, rank) that passed `checked_tile_shape`: what it checks depends on nothing else
_CHECKED_TILES: set[tuple[tuple[int, ...], int]] = set()


_IDENTITY = tuple(range(32))


def _made_view(storage: Storage, dtype: dt.DType, shape: tuple[int, ...], strides: tuple[int, ...],
               offset: int) -> Tensor:
    """`Tensor` over ``storage`` from a shape, strides and offset already checked and
    made of ints (a view of a tensor): without the constructor's conversions."""
    view = Tensor.__new__(Tensor)
    view._storage = storage
    view.dtype = dtype
    view.shape = shape
    view.strides = strides
    view.offset = offset
    view._consumed_by = None
    view._byte_range = None
    return view


def _contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    found = _CONTIGUOUS.get(shape)
    if found is None:
        if len(_CONTIGUOUS) >= 4096:
            _CONTIGUOUS.clear()
        found = _CONTIGUOUS[shape] = _strides_of(shape)
    return found


_CONTIGUOUS: dict[tuple[int, ...], tuple[int, ...]] = {}  # shape -> its row-major strides (shapes recur)


def _strides_of(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides = []
    step = 1
    for extent in reversed(shape):
        strides.append(step)
        step *= max(extent, 1)
    return tuple(reversed(strides))
