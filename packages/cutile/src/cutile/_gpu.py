"""The GPU backend: tensors in device memory, kernels compiled to cubins and
launched through cuda_core."""

from __future__ import annotations

import ctypes
import math
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from cuda_core import PARAM_CTYPES, Device, DeviceBuffer, DeviceMemory, LaunchConfig, Module, PreparedLaunch, Stream
import cuda_async
from cuda_async import ensure_not_capturing, is_capturing
from cutile import _native, _torch_streams
from cutile._device import current_device, ordinal_of
from cutile._errors import GraphCaptureError, LaunchError
from cutile._tensor import Partition, Storage, Tensor, numpy_dtype, strided_view
from cutile_compiler import DEFAULT_OPTIONS, CompiledKernel, CompileOptions
from cutile_compiler import dtypes as dt

if TYPE_CHECKING:
    from cutile._binding import ObjectBinding, SignaturePlan
    from cutile._entry import Kernel
    from cutile_compiler import AbiArg


class DeviceStorage(Storage):
    """A device allocation (stream-ordered, from the default memory pool)."""

    def __init__(self, buffer: DeviceBuffer) -> None:
        super().__init__(buffer.nbytes, f"cuda:{buffer.device.ordinal}", buffer.ptr)
        self.buffer = buffer

    def device_memory(self) -> Any:
        return self.buffer


_streams: dict[int, Stream] = {}
# Each device's stream pool, for launches on a device other than the default
# policy's and inside `cutile.device` blocks (made on first use).
_pools: dict[int, cuda_async.RoundRobin] = {}
_pools_lock = threading.Lock()
# Whether a device other than 0 was used: the native launch path serves only
# device 0's launches on the default policy, so it is turned off from then on.
_multi_device = False


def default_stream(ordinal: int = 0) -> Stream:
    """The stream cutile's synchronous operations use on device ``ordinal`` (one per device)."""
    stream = _streams.get(ordinal)
    if stream is None:
        stream = _streams[ordinal] = Stream.create(ordinal)
    return stream


def device_policy(ordinal: int) -> cuda_async.RoundRobin:
    """Device ``ordinal``'s stream pool (a `cuda_async.RoundRobin` of 4 streams there)."""
    pool = _pools.get(ordinal)
    if pool is None:
        with _pools_lock:
            pool = _pools.get(ordinal)
            if pool is None:
                pool = _pools[ordinal] = cuda_async.RoundRobin(4, device=ordinal)
    return pool


def note_device_used(ordinal: int) -> None:
    """Records that device ``ordinal`` is used; the first device other than 0 turns the
    native launch path off (its C code takes the default policy's stream, which only
    the Python path checks against the tensors' device)."""
    global _multi_device
    if ordinal != 0 and not _multi_device:
        _multi_device = True
        _native.disable_for_devices()


def policy_for(ordinal: int) -> cuda_async.SchedulingPolicy | None:
    """The policy a synchronous launch on device ``ordinal`` must run under, or None
    when the default policy serves that device: outside a `cutile.device` block of
    another device, device 0 keeps the default policy (the user's, if set)."""
    if ordinal == current_device():
        return None
    return device_policy(ordinal)


def _allocate(dtype: dt.DType, shape: tuple[int, ...], ordinal: int) -> tuple[Tensor, DeviceBuffer, Stream]:
    ensure_not_capturing("creating a tensor (an allocation)")
    note_device_used(ordinal)
    stream = default_stream(ordinal)
    buffer = DeviceBuffer.allocate(max(math.prod(shape) * dtype.itemsize, 1), stream=stream)
    return Tensor(DeviceStorage(buffer), dtype, shape), buffer, stream


def allocate(dtype: dt.DType, shape: tuple[int, ...], ordinal: int = 0) -> Tensor:
    """A tensor of ``shape`` on device ``ordinal``, its memory not written, usable
    from any stream (a pool allocation on cutile's stream, waited for). Inside a
    `cutile.torch.custom_op`, or while torch captures its current stream, the memory
    is torch's instead (its caching allocator, ordered on its stream)."""
    if _torch_streams.queue_only() or (_torch_streams.torch_cuda_in_use() and _torch_streams.is_capturing(
            _torch_streams.current_stream(ordinal))):
        from cutile._interop import ForeignDeviceStorage

        note_device_used(ordinal)
        nbytes = math.prod(shape) * dtype.itemsize
        address, owner = _torch_streams.allocate_from_torch(nbytes, ordinal)
        return Tensor(ForeignDeviceStorage(address, max(nbytes, 1), ordinal, owner, torch_ordered=True), dtype, shape)
    tensor, _, stream = _allocate(dtype, shape, ordinal)
    stream.synchronize()
    return tensor


def upload(flat: np.ndarray[Any, Any], dtype: dt.DType, shape: tuple[int, ...], ordinal: int = 0) -> Tensor:
    """A tensor on device ``ordinal`` holding a copy of the host array ``flat``
    (contiguous, of ``dtype``'s numpy type, ``shape``'s element count)."""
    tensor, buffer, stream = _allocate(dtype, shape, ordinal)
    if flat.nbytes:
        buffer.copy_from_host(flat.view(np.uint8), stream=stream)
    stream.synchronize()
    return tensor


def storage_ordinal(storage: Storage) -> int:
    """The ordinal of a device storage's device (refused for host memory)."""
    ordinal = ordinal_of(storage.device)
    if ordinal is None:
        raise LaunchError(f"memory on {storage.device} is not device memory")
    return ordinal


def device_memory(storage: Storage) -> DeviceMemory:
    """The cuda_core memory of a device storage (ours or another library's): its
    `Storage.device_memory`, refused for host memory."""
    memory: DeviceMemory | None = storage.device_memory()
    if memory is None:
        raise LaunchError(f"memory on {storage.device} is not device memory")
    return memory


def device_to_numpy(tensor: Tensor) -> np.ndarray[Any, Any]:
    """A host copy of a device tensor's values, copied on cutile's own stream.

    For cutile's allocations that no other library was handed, cuda_async knows the
    writers: the caller's access check passed, so no op holding the memory is still
    running, and the last write recorded on it (an op whose holds ended before its
    work did: a future dropped unwaited) is waited for; work queued on the pool's
    streams over other memory goes on. Other memory (imported, or shared through
    DLPack or the CUDA array interface) may have been written on any stream, which the
    host cannot name: the device is synchronized first.
    """
    storage = tensor._storage
    ordinal = storage_ordinal(storage)
    if storage.shared or not isinstance(storage, DeviceStorage):
        Device(ordinal).synchronize()
    elif storage._resource is not None:  # (None: no op ever used the memory)
        storage._resource.wait_for_last_write()
    itemsize = tensor.dtype.itemsize
    start, end = tensor.byte_range()
    raw = np.empty(end - start, dtype=np.uint8)
    if end > start:
        stream = default_stream(ordinal)
        device_memory(tensor._storage).copy_to_host(raw, offset=start, stream=stream)
        stream.synchronize()
    base = start // itemsize
    flat = raw.view(numpy_dtype(tensor.dtype))[tensor.offset - base:]
    return np.array(strided_view(flat, tensor.shape, tensor.strides), copy=True)


def _int_param_type(size: int, signed: bool) -> str:
    """cuda_core's C integer type of ``size`` bytes (``"i32"``, ``"u8"``...)."""
    return f"{'i' if signed else 'u'}{8 * size}"


# The float dtypes C has a type for (float, double).
_C_FLOATS = {dt.f32: "f32", dt.f64: "f64"}


def _natural_param_type(dtype: dt.DType) -> str:
    """The C type (cuda_core's name, or raw ``bytesN``) a scalar of ``dtype`` is packed
    as: bool and integers as the C integer of their size and signedness, f32 and f64
    (and tf32, stored as f32) as C's float and double, the other floats (f16, bf16,
    the fp8 types) as their raw bytes."""
    storage = dtype.stored_as or dtype
    if not storage.is_float:
        return _int_param_type(storage.itemsize, storage.is_signed)
    return _C_FLOATS.get(storage, f"bytes{storage.itemsize}")


# The one map from cutile dtypes to the C types of cuda_core's launches (and the
# native path's codes for them, `_native._SCALAR_CODES`).
_PARAM_TYPES: dict[dt.DType, str] = {d: _natural_param_type(d) for d in dt.ALL_DTYPES}
# Dtypes whose scalars are packed as their raw bytes (converted through numpy per call).
_RAW_SCALARS = frozenset(d for d, name in _PARAM_TYPES.items() if name.startswith("bytes"))


def _type_size(name: str) -> int:
    """Bytes of a parameter packed as ``name`` (cuda_core's C types, or raw ``bytesN``)."""
    return int(name[5:]) if name.startswith("bytes") else ctypes.sizeof(PARAM_CTYPES[name])


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
        wanted = _PARAM_TYPES[arg.dtype]
        widened = _int_param_type(size, arg.dtype.is_signed)
        if not arg.dtype.is_float and widened in PARAM_CTYPES:  # bool and integers
            wanted = widened
    natural = _type_size(wanted)
    if natural != size:
        raise LaunchError(f"{kernel}: parameter '{arg.param}' ({arg.kind}) is {size} bytes in the cubin, "
                          f"cutile packs {natural} (a cutile bug: please report it)")
    return wanted


def fake_param_layout(abi: Sequence[AbiArg]) -> list[tuple[int, int]]:
    """The (offset, size) of each entry parameter, as a cubin compiled from ``abi``
    declares them when tileiras widens nothing (the sizes `_param_type` accepts,
    each naturally aligned): what `cuda_core.testing.FakeDriver.kernels` wants, for
    tests and benchmarks of the GPU host path without a GPU."""
    layout: list[tuple[int, int]] = []
    offset = 0
    for arg in abi:
        if arg.kind == "pointer":
            size = _type_size("ptr")
        elif arg.kind in ("dim", "stride"):
            size = _type_size("i32")
        else:
            assert arg.dtype is not None
            size = _type_size(_PARAM_TYPES[arg.dtype])
        offset = -(-offset // size) * size
        layout.append((offset, size))
        offset += size
    return layout


_POINTER, _DIM, _STRIDE, _SCALAR = range(4)


class LoadedKernel:
    """A compiled kernel loaded on the device, with its prepared launch and the
    recipe that turns a call's arguments into the entry's parameters."""

    def __init__(self, compiled: CompiledKernel, ordinal: int = 0, *, dependent_launch: bool = False) -> None:
        self.compiled = compiled
        self.dependent_launch = dependent_launch  # compiled for, and launched as, a programmatic dependent
        # the tensors it reads before its wait, whose memory such a launch checks is frozen
        self.reads_before_wait = compiled.reads_before_wait if dependent_launch else ()
        self.reads = compiled.reads  # what the code was compiled from
        self.device = Device(ordinal)  # a module is loaded into one device's context
        self.function = Module.load(compiled.cubin, self.device).get_function(compiled.name)
        # Only the parameters cutile packs are asked about: probing past the last one
        # is a failing driver call (noise under compute-sanitizer, and it would
        # invalidate a stream capture).
        count = len(compiled.abi)
        declared = self.function.param_count
        if declared is not None and declared != count:
            raise LaunchError(
                f"{compiled.name}: the cubin declares {declared} parameters, cutile packs {count} "
                "(a cutile bug: please report it)")
        sizes = [self.function.param_info(i)[1] for i in range(count)]
        types = [_param_type(arg, size, compiled.name) for arg, size in zip(compiled.abi, sizes)]
        self._param_types = types
        self._per_thread = threading.local()
        self.recipe: list[tuple[str, int, int, dt.DType | None]] = []
        for arg in compiled.abi:
            code = {"pointer": _POINTER, "dim": _DIM, "stride": _STRIDE}.get(arg.kind, _SCALAR)
            self.recipe.append((arg.param, code, arg.axis if code in (_DIM, _STRIDE) else 0, arg.dtype))
        # What `cutile._native.arm` derives from the recipe, once (set there).
        self.native_layout: Any = None
        self.converts_scalars = any(
            code == _SCALAR and dtype is not None and (dtype in _RAW_SCALARS or dtype.is_bool)
            for _, code, _, dtype in self.recipe)

    @property
    def prepared(self) -> PreparedLaunch:
        """This thread's prepared launch (a prepared launch holds the last arguments
        it packed: threads launching the same kernel must not share one)."""
        prepared: PreparedLaunch | None = getattr(self._per_thread, "prepared", None)
        if prepared is None:
            config = LaunchConfig((1, 1, 1), (1, 1, 1), dependent_launch=self.dependent_launch)
            prepared = PreparedLaunch(self.function, config, self._param_types)
            self._per_thread.prepared = prepared
        return prepared

    def pack(self, kernel: str, arguments: dict[str, Any]) -> list[Any]:
        """The entry's parameter values for one call (tensors already unpartitioned)."""
        values: list[Any] = []
        for param, code, axis, dtype in self.recipe:
            value = arguments[param]
            if code == _POINTER:
                storage = value._storage
                if storage.device == "cpu":
                    raise LaunchError(f"{kernel}: parameter '{param}' lives in host memory, not on the GPU")
                values.append(storage.base_address + value.offset * value.dtype.itemsize)
            elif code == _SCALAR:
                values.append(_scalar_argument(value, dtype) if self.converts_scalars else value)  # type: ignore[arg-type]
            else:
                number = value.shape[axis] if code == _DIM else value.strides[axis]
                if not -_I32_MAX <= number <= _I32_MAX:
                    kind = "dim" if code == _DIM else "stride"
                    raise LaunchError(f"{kernel}: parameter '{param}' has a {kind} of {number}, beyond i32")
                values.append(number)
        return values


def prepare(kernel: Kernel, plan: SignaturePlan, options: CompileOptions, ordinal: int = 0) -> LoadedKernel:
    """The loaded kernel for ``plan``'s specialization on device ``ordinal``: compiled
    (or found in a cache) and loaded once per device, then remembered by the plan."""
    loaded: LoadedKernel | None = plan.loaded_by_options.get((options, ordinal))
    if loaded is not None and loaded.reads.changed() is None:
        return loaded
    key = (plan.spec, options, ordinal)
    loaded = kernel._loaded_kernels.get(key)
    changed = loaded.reads.changed() if loaded is not None else None  # (a global it read was rebound)
    if loaded is None or changed is not None:
        if is_capturing():
            when = ("before it was ever compiled and loaded for these argument shapes" if changed is None else
                    f"after {changed} changed, which compiles and loads it again")
            raise GraphCaptureError(
                f"{kernel.name} is launched inside a CUDA graph capture {when}; loading a module cannot be "
                "captured. Warm it up first: run it once, or call .compile() on the launch, before the graph scope")
        device = Device(ordinal)
        loaded = LoadedKernel(kernel.compiled(plan.spec, device.sm_name, options), ordinal,
                              dependent_launch=options.dependent_launch)
        kernel._loaded_kernels.put(key, loaded)
    plan.loaded_by_options[(options, ordinal)] = loaded
    return loaded


def launch_ordinal(kernel: str, arguments: dict[str, Any]) -> int:
    """The device a launch over ``arguments`` (tensors unpartitioned) runs on: its
    tensors' (one device, else refused naming the parameters), or the current one."""
    found: dict[int, list[str]] = {}
    for param, value in arguments.items():
        if isinstance(value, Tensor):
            ordinal = ordinal_of(value._storage.device)
            if ordinal is not None:
                found.setdefault(ordinal, []).append(param)
    if not found:
        return current_device()
    if len(found) > 1:
        raise mixed_devices(kernel, found)
    return next(iter(found))


def mixed_devices(kernel: str, found: dict[int, list[str]]) -> LaunchError:
    """The error of a launch whose tensors live on several devices."""
    listed = "; ".join(", ".join(f"'{p}'" for p in params) + f" on cuda:{ordinal}"
                       for ordinal, params in sorted(found.items()))
    return LaunchError(f"{kernel}: tensor arguments live on different devices ({listed}); a launch runs on one "
                       "device: move them there first (tensor.to(device))")


def _check_stream(kernel: str, loaded: LoadedKernel, stream: Stream) -> None:
    if stream.device is not loaded.device:
        raise LaunchError(
            f"{kernel}: its tensors are on cuda:{loaded.device.ordinal} but it was given a stream of "
            f"cuda:{stream.device.ordinal} (a scheduling policy or an op chain of another device); run it "
            f"under that device's policy: with cutile.device({loaded.device.ordinal}): ...")


def _scalar_argument(value: Any, dtype: dt.DType) -> Any:
    if dtype in _RAW_SCALARS:
        return np.asarray(value, dtype=numpy_dtype(dtype)).tobytes()
    if dtype.is_bool:
        return int(bool(value))
    return value


def _check_grid(kernel: Kernel, grid: tuple[int, int, int]) -> None:
    if grid[0] > _MAX_GRID or grid[1] > _MAX_GRID or grid[2] > _MAX_GRID:
        raise LaunchError(f"{kernel.name}: grid {list(grid)} exceeds {_MAX_GRID} blocks along an axis")


def _launch(loaded: LoadedKernel, grid: tuple[int, int, int], stream: Stream, values: list[Any]) -> None:
    """Launches on this thread's prepared launch (`set_grid` is free when the grid is unchanged)."""
    prepared = loaded.prepared
    prepared.set_grid(grid)
    prepared.launch(stream, *values)


def _bind_loaded(kernel: Kernel, binding: ObjectBinding, loaded: LoadedKernel, arguments: dict[str, Any]) -> None:
    """Makes ``loaded`` the kernel ``binding`` launches, with its parameters packed
    once from ``arguments`` (by name; a partition as its tensor) and the slots of the
    scalars each launch refills. Raises the packing's `CutileError` (nothing set)."""
    names = kernel._param_names
    binding.packed = tuple(loaded.pack(kernel.name, {n: (v._tensor if isinstance(v, Partition) else v)
                                                     for n, v in arguments.items()}))
    binding.scalar_slots = [(index, names.index(param), dtype) for index, (param, code, _, dtype) in enumerate(loaded.recipe)
                            if code == _SCALAR and dtype is not None]
    binding.loaded = loaded


def enqueue_bound(kernel: Kernel, binding: ObjectBinding, values: tuple[Any, ...], stream: Stream) -> None:
    """`enqueue` for a call whose tensors are its binding's (default options, no
    explicit grid), ``values`` every parameter's value in order: the parameters are
    packed once; only scalars are refilled."""
    loaded = binding.loaded
    plan = binding.plan
    assert plan is not None
    if loaded is None or loaded.reads.changed() is not None:
        _check_grid(kernel, plan.grid)
        ordinal = binding.device
        loaded = prepare(kernel, plan, DEFAULT_OPTIONS, current_device() if ordinal is None else ordinal)
        _bind_loaded(kernel, binding, loaded, dict(zip(kernel._param_names, values)))
        first = True
    else:
        first = False
    if stream.device is not loaded.device:
        _check_stream(kernel.name, loaded, stream)
    packed = binding.packed
    if binding.scalar_slots:
        refilled = list(packed)
        for index, position, dtype in binding.scalar_slots:
            value = values[position]
            refilled[index] = _scalar_argument(value, dtype) if loaded.converts_scalars else value
        packed = tuple(refilled)
    prepared = loaded.prepared
    prepared.set_grid(plan.grid)
    prepared.launch_values(stream, packed)  # the binding's very tuple again: nothing to compare
    if first and not _multi_device:  # it launched: later calls with it may take the native path
        _native.arm(kernel, binding, loaded, loaded.function.device.context_handle)


def arm_at_call(kernel: Kernel, binding: ObjectBinding, arguments: dict[str, Any], *, arm: bool = True,
                plan: SignaturePlan | None = None) -> bool:
    """Prepares a new ``binding`` (made by a call with ``arguments``, scalars converted)
    as its first launch would (its plan, loaded kernel and packed parameters) and arms
    its native binding, when that launch's kernel is already loaded (compiling and
    loading stay the run's) and it would run with default options: then the call's
    launch, like later calls over the same memory and layouts, may run in C. Whether it
    did; anything unusual (an error the run reports, another device in use, torch's
    memory) leaves the binding to its first run. Without ``arm`` the binding is only
    prepared (``binding.unarmed``: `arm_prepared` arms it); ``plan``: the call's, known."""
    if _multi_device or binding.torch_ordered or binding.plan is not plan:
        return False
    from cutile import _backend
    from cutile._errors import CutileError

    # (No native module yet: no launch has run on the GPU backend, so no kernel is
    # loaded; the first run's `_native.arm` loads it.)
    if _backend.current() != "gpu" or _native.module is None:
        return False

    if plan is None:
        try:
            plan = kernel.plan_for(arguments)
        except CutileError:
            return False  # (the run raises it, as without this)
    if 0 in plan.grid or max(plan.grid) > _MAX_GRID:
        return False
    ordinal = current_device() if binding.device is None else binding.device
    # (Were a global the compile read rebound since, the native sync would see it and
    # leave the run to the Python path, which compiles again.)
    loaded = plan.loaded_by_options.get((DEFAULT_OPTIONS, ordinal))
    if loaded is None:
        return False
    try:
        _bind_loaded(kernel, binding, loaded, arguments)
    except CutileError:
        return False
    binding.plan = plan
    if not arm:
        binding.unarmed = True
        return False
    return arm_prepared(kernel, binding)


def arm_prepared(kernel: Kernel, binding: ObjectBinding) -> bool:
    """Arms the native binding of a ``binding`` `arm_at_call` prepared without arming
    (once: whether it is armed)."""
    binding.unarmed = False
    loaded = binding.loaded
    if _multi_device or loaded is None:
        return False
    _native.arm(kernel, binding, loaded, loaded.function.device.context_handle)
    return binding.fast is not None


def check_reads_before_wait(kernel: str, params: Sequence[str], arguments: dict[str, Any]) -> None:
    """Refuses a dependent launch whose kernel reads, before its wait, a tensor
    (``params``: `CompiledKernel.reads_before_wait`) whose memory is not frozen."""
    for param in params:
        if not arguments[param]._storage.frozen:
            raise LaunchError(
                f"{kernel}: parameter '{param}' is read before grid_dependency_control_wait() in a dependent "
                "launch, while the kernel before it on the stream may still be writing it: its memory must be "
                "frozen (tensor.freeze()), or the read must come after the wait")


def enqueue(kernel: Kernel, plan: SignaturePlan, arguments: dict[str, Any], options: CompileOptions,
            stream: Stream) -> None:
    """Queues the launch on ``stream`` without waiting (ownership is the caller's job)."""
    _check_grid(kernel, plan.grid)
    loaded = prepare(kernel, plan, options, launch_ordinal(kernel.name, arguments))
    if stream.device is not loaded.device:
        _check_stream(kernel.name, loaded, stream)
    check_reads_before_wait(kernel.name, loaded.reads_before_wait, arguments)
    _launch(loaded, plan.grid, stream, loaded.pack(kernel.name, arguments))

