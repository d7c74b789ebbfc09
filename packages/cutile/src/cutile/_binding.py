"""Call binding: what a call's arguments select and what a repeated call reuses.

`describe_call` turns arguments into a specialization and a grid (errors name the
parameter); `call_key` is what those depend on, cheaply, the key of a kernel's
`SignaturePlan`s; `ObjectBinding` is what a call's memory and layouts imply (the holds of
their byte ranges, accesses, packed GPU parameters), reused while later calls pass the
same objects, or new views of the same memory in the same layouts (`layout_key`);
`BindingShape` is what the bindings of calls in the same layouts over any memory share
(`shape_key`), from which a call over new memory makes its binding without checking
again what depends only on the layouts. The argument checks shared by the launch live
here too.
"""

from __future__ import annotations

import functools
import inspect
import math
import struct
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn

import cuda_async
from cutile._errors import LaunchError
from cutile._tensor import Partition, Storage, Tensor, overlapping
from cutile_compiler import dtypes as dt
from cutile_compiler import (
    MAX_DIVISIBILITY,
    CompileOptions,
    ConstantAnnotation,
    DType,
    Specialization,
    SpecializationError,
    TensorAnnotation,
    constant_key,
    numpy_dtype,
    specialize,
)

if TYPE_CHECKING:
    from cutile._entry import Kernel
    from cutile._gpu import LoadedKernel


class SignaturePlan:
    """What every call with one call key (`call_key`: dtypes, shapes, strides,
    alignment, constants) shares: the specialization, the grid, and the loaded
    kernel per compile options (filled by `cutile._gpu.prepare`, a shortcut past
    the kernel's ``_loaded_kernels``)."""

    __slots__ = ("spec", "grid", "loaded_by_options")

    def __init__(self, spec: Specialization, grid: tuple[int, int, int]) -> None:
        self.spec = spec
        self.grid = grid
        self.loaded_by_options: dict[tuple[CompileOptions, int], LoadedKernel] = {}  # by (options, device)


MISSING = object()  # an argument not given (the launch and the binding tell it apart from None)


def layout_key(kernel: Kernel, values: tuple[Any, ...]) -> tuple[Any, ...]:
    """What an `ObjectBinding` of a call with every parameter's value in order
    (``values``, `MISSING` where not given) depends on: per tensor or partition its
    storage (by identity: the binding holds it weakly and never matches once it is
    freed), offset, shape, strides, dtype and partition layout; per constant its type
    and value (`constant_key`); per run-time scalar its type. Two calls with equal keys
    differ only in their view objects and scalar values. (It may hold an unhashable
    constant: the caller's lookup then fails with TypeError.)"""
    key: list[Any] = []
    for value, constant in zip(values, kernel._constant_flags):
        kind = type(value)
        if kind is Partition:
            tensor = value._tensor
            key.append((Partition, id(tensor._storage), tensor.offset, tensor.shape, tensor.strides, tensor.dtype,
                        value.tile_shape, value.map_shape, value.blocks))
        elif kind is Tensor:
            key.append((Tensor, id(value._storage), value.offset, value.shape, value.strides, value.dtype))
        elif value is MISSING:
            key.append(MISSING)
        elif constant:
            key.append((kind, constant_key(value)))
        else:  # a run-time scalar: its type may select the code, its value never
            key.append(kind)
    return tuple(key)


def shape_key(kernel: Kernel, values: tuple[Any, ...]) -> tuple[Any, ...]:
    """`layout_key` without the memory: per tensor or partition, instead of its
    storage's identity, what a binding's checks and the specialization read of the
    storage (its kind, device, whether it is read-only or torch's, its base address
    modulo `MAX_DIVISIBILITY`) and which earlier tensor argument's storage it is, if
    any. Calls with equal keys differ only in their objects, their memory's addresses
    and their scalar values: the checks of kinds, strides, read-only memory,
    self-overlapping Mut partitions and devices, and the plan, come out the same."""
    key: list[Any] = []
    storages: list[Storage] = []
    for value, constant in zip(values, kernel._constant_flags):
        kind = type(value)
        if kind is Partition or kind is Tensor:
            tensor = value._tensor if kind is Partition else value
            storage = tensor._storage
            for shared, seen in enumerate(storages):
                if seen is storage:
                    break
            else:
                shared = len(storages)
                storages.append(storage)
            facts = (kind, shared, type(storage), storage.device, storage.readonly, storage.torch_ordered,
                     storage.base_address % MAX_DIVISIBILITY, tensor.offset, tensor.shape, tensor.strides, tensor.dtype)
            key.append(facts + (value.tile_shape, value.map_shape, value.blocks) if kind is Partition else facts)
        elif value is MISSING:
            key.append(MISSING)
        elif constant:
            key.append((kind, constant_key(value)))
        else:
            key.append(kind)
    return tuple(key)


def check_overlaps(kernel: str, ranges: list[tuple[str, Storage, int, int, bool]]) -> None:
    """Refuses memory passed twice where one copy is written (``ranges``: each tensor
    argument's parameter, storage, byte range in it and whether it is written)."""
    for i, (a, storage_a, start_a, end_a, writes_a) in enumerate(ranges):
        for b, storage_b, start_b, end_b, writes_b in ranges[i + 1:]:
            # By absolute address: two storages may wrap the same memory
            # (an array imported twice through DLPack, say).
            if (writes_a or writes_b) and overlapping(
                    storage_a.device, storage_a.base_address + start_a, storage_a.base_address + end_a,
                    storage_b.device, storage_b.base_address + start_b, storage_b.base_address + end_b):
                written = a if writes_a else b
                raise LaunchError(
                    f"{kernel}: parameters '{a}' and '{b}' share memory and '{written}' is written; "
                    "pass distinct tensors")


class ObjectBinding:
    """What one call's tensor arguments imply, computed once and reused by later calls
    that pass the very same objects (and constants: `matches`), or other view objects
    over the same storages in the same layouts (the kernel's bindings by `layout_key`):
    the holds of their checked byte ranges (`cuda_async.ClaimPlan`), the resources the
    op reads and writes, the plan, and the packed GPU parameters.

    Objects and storages are remembered by weak reference: a binding never keeps a
    tensor or its memory alive, and once one of its storages is freed it is ``dead``
    (its references to the memory dropped) and matches no call again. What can change
    between calls (an object consumed, a pending launch holding the memory, ops in
    flight) is still checked on every call.
    """

    __slots__ = ("checks", "tensor_positions", "claim_plan", "run_holds", "accesses", "plan",
                 "loaded", "packed", "scalar_slots", "results", "fast", "device", "torch_ordered", "torch_only",
                 "storages", "dead", "unarmed", "home", "__weakref__")

    # The kinds of ``checks`` (the C side's CHECK_* codes, which test_native_codes.py holds equal)
    _TENSOR, _CONSTANT, _SCALAR = range(3)
    _NO_ACCESSES = cuda_async.AccessSet()

    def __init__(self, kernel: Kernel, arguments: dict[str, Any] | tuple[Any, ...],
                 ranges: list[tuple[str, Storage, int, int, bool]], shape: BindingShape | None = None) -> None:
        """The binding of a call with ``arguments`` (by name, or every parameter's value
        in order), whose tensor arguments' byte ranges ``ranges`` are checked. With
        ``shape``, the binding of another call in the same layouts (`shape_key`): what
        depends only on them is taken from it."""
        if shape is not None:
            self.device: int | None = shape.device
            self.torch_ordered, self.torch_only = shape.torch_ordered, shape.torch_only
        else:
            # The device the launch runs on: its tensors' (None: none on a GPU, the current
            # device's); tensors of several devices are refused here, before any work.
            found: dict[int, list[str]] = {}
            for param, storage, _, _, _ in ranges:
                if storage.device.startswith("cuda:"):
                    found.setdefault(int(storage.device[5:]), []).append(param)
            if len(found) > 1:
                from cutile._gpu import mixed_devices

                raise mixed_devices(kernel.name, found)
            self.device = next(iter(found)) if found else None
            # Torch's memory among the tensors (its launches follow torch's stream order),
            # and whether all of them are (what a torch graph capture may record).
            self.torch_ordered = any(storage.torch_ordered for _, storage, _, _, _ in ranges)
            self.torch_only = bool(ranges) and all(storage.torch_ordered for _, storage, _, _, _ in ranges)
        # Per parameter in order: a tensor by its object (weakly: a dead object only stops
        # matching by identity, its memory may live on), a constant by type and value, a
        # run-time scalar by its type (which may select the code; its value never does).
        values = arguments if type(arguments) is tuple else tuple(
            arguments.get(name, MISSING) for name in kernel._param_names)  # type: ignore[union-attr]
        self.checks: tuple[tuple[Any, ...], ...] = tuple((0, weakref.ref(value)) if kind == 0 else
                                                         (1, type(value), value) if kind == 1 else (2, type(value))
                                                         for value, kind in zip(values, kernel._param_kinds))
        # Where they are among every parameter's value in order (a call's positional
        # arguments, which a call with the binding's objects keeps as they are), and what
        # a run returns from those values: the tensor arguments, one as itself, several
        # as a tuple (the kernel's tensor parameters, all of them: the same for every binding).
        self.tensor_positions = kernel._tensor_positions
        self.results: Callable[[tuple[Any, ...]], Any] = kernel._results_of
        # The holds of the tensor arguments' bytes in cuda_async's ledger: pending from
        # the call (the claim, the native path's too), then the running op's.
        description = kernel._launch_description
        labels = kernel._hold_labels
        spans = []
        for param, storage, start, end, mutable in ranges:
            low, high = storage.base_address + start, storage.base_address + end
            resource = storage.resource
            spans.append((resource, storage.device, low, high, mutable, labels[param][0]))
        if shape is not None:  # the same domains, accesses and labels: only the ranges differ
            self.claim_plan = shape.claim_plan.over([(span[2], span[3]) for span in spans])
        else:
            self.claim_plan = cuda_async.ClaimPlan(
                (domain, low, high, mutable, label, labels[param][1], resource.name)
                for (resource, domain, low, high, mutable, label), (param, *_) in zip(spans, ranges))
        # A synchronous run's holds while its memory is idle: the same spans, running,
        # owned by a job kept for it (`cuda_async.begin_idle_run`; the native path's too).
        self.run_holds = self.claim_plan.owned_by(cuda_async.Job(description))
        writes = tuple(span[0] for span in spans if span[4])
        reads = tuple(span[0] for span in spans if not span[4])
        self.accesses = cuda_async.AccessSet(reads, writes, spans=tuple(spans))
        self.plan: SignaturePlan | None = None  # set by the first Launch.plan() without an explicit grid
        self.loaded: LoadedKernel | None = None  # the loaded kernel ``packed`` was packed for
        self.packed: tuple[Any, ...] = ()
        # (parameter slot, position among the values, dtype) of each scalar: refilled on every call
        self.scalar_slots: list[tuple[int, int, DType]] = []
        # Its native binding (`cutile._native.arm`, once it launched), which refers back
        # to it weakly; ``unarmed``: prepared for one (plan, loaded kernel, packed
        # parameters) but left to its next call (made in a batch, where a launch over new
        # memory does not run in C: arming pays only if it is called again).
        self.fast: Any = None
        self.unarmed = False
        # The storages, weakly: when one is freed (its address free for reuse) the
        # binding dies, and tells the kernel's bindings (``home``: their queue of dead
        # ones, and its key there), which drop it at their next change. The callback
        # holds the binding weakly: a binding is in no reference cycle, so one dropped
        # is freed at once, not by the garbage collector.
        self.dead = False
        self.home: tuple[Any, Any] | None = None
        forget = functools.partial(ObjectBinding._storage_freed, weakref.ref(self))
        self.storages = tuple(weakref.ref(storage, forget) for _, storage, _, _, _ in ranges)

    @staticmethod
    def _storage_freed(binding: weakref.ref[ObjectBinding], _dead: Any) -> None:
        found = binding()
        if found is not None:
            found._forget()

    def _forget(self) -> None:
        # One of the storages is gone, so the binding can never match again: drop what
        # refers to memory (resources) so that the memory can be freed.
        # (It may run while the interpreter shuts down, when module globals are gone:
        # it uses only what the class holds.)
        if self.dead:
            return
        self.dead = True
        self.accesses = self._NO_ACCESSES
        self.loaded = None
        self.packed = ()
        self.unarmed = False
        fast, self.fast = self.fast, None
        if fast is not None:
            fast.disarm()
        home = self.home
        if home is not None:
            home[0].append((home[1], self))

    def matches(self, args: tuple[Any, ...]) -> bool:
        """Whether ``args`` are this binding's tensor objects and constants (floats
        only as the same object: 0.0 and -0.0 are equal but compile differently)."""
        for check, value in zip(self.checks, args):
            kind = check[0]
            if kind == 0:  # a tensor (kinds 0/1/2: tensor, constant, scalar, as the C side's CHECK_* codes)
                target = check[1]()
                if target is None or target is not value:  # a dead reference must not match None
                    return False
            elif type(value) is not check[1]:
                return False
            elif kind == 1 and value is not check[2] and (type(value) is float or value != check[2]):
                return False
        return True


class BindingShape:
    """What the bindings of calls in one layout over any memory share (one `shape_key`):
    made from the first such call's binding once that is prepared for the GPU (its
    plan and loaded kernel found), it makes the binding of a later call over other
    memory checking only what depends on the memory (objects consumed, memory passed
    twice where one copy is written): every check of a fresh binding that depends on
    the layouts alone (argument kinds, strides, read-only memory, Mut partitions whose
    elements share memory, devices, the specialization) came out the same for it."""

    __slots__ = ("tensors", "claim_plan", "device", "torch_ordered", "torch_only", "plan")

    def __init__(self, kernel: Kernel, binding: ObjectBinding, values: tuple[Any, ...]) -> None:
        assert binding.plan is not None
        # Per tensor parameter: its name, position among the values, byte range in its
        # storage, and whether it is written (a Mut partition).
        tensors = []
        for (param, mutable), position in zip(kernel._tensor_params, kernel._tensor_positions):
            value = values[position]
            start, end = (value._tensor if mutable else value).byte_range()
            tensors.append((param, position, start, end, mutable))
        self.tensors = tuple(tensors)
        self.claim_plan: cuda_async.ClaimPlan = binding.claim_plan  # (its domains, accesses and labels)
        self.device: int | None = binding.device
        self.torch_ordered: bool = binding.torch_ordered
        self.torch_only: bool = binding.torch_only
        self.plan: SignaturePlan = binding.plan

    def bind(self, kernel: Kernel, values: tuple[Any, ...]) -> ObjectBinding:
        """The binding of a call with every parameter's value in order (``values``, its
        scalars checked) whose `shape_key` is this one's, its plan this one's."""
        name = kernel.name
        ranges: list[tuple[str, Storage, int, int, bool]] = []
        for param, position, start, end, mutable in self.tensors:
            value = values[position]
            if value._consumed_by is not None:
                value._live(f"{name}: parameter '{param}'")  # raises, naming the consumer
            ranges.append((param, (value._tensor if mutable else value)._storage, start, end, mutable))
        check_overlaps(name, ranges)
        binding = ObjectBinding(kernel, values, ranges, self)
        binding.plan = self.plan
        return binding


def check_strides(kernel: str, param: str, tensor: Tensor) -> None:
    # Tile IR's tensor views address memory upward from their base: a reversed view
    # would read outside it. Both backends refuse alike.
    for extent, stride in zip(tensor.shape, tensor.strides):
        if stride < 0 and extent > 1:
            raise LaunchError(
                f"{kernel}: parameter '{param}' has a negative stride {list(tensor.strides)}; kernels take views "
                "whose strides are not negative (pass a copy: api.copy)")


def wrong_mut_argument(kernel: Kernel, param: str, value: Any) -> None:
    name = kernel.name
    if value is MISSING:
        raise LaunchError(f"{name}: missing tensor argument '{param}'")
    if isinstance(value, Tensor):
        dims = next(p.annotation.dims for p in kernel.signature.parameters if p.name == param)  # type: ignore[union-attr]
        raise LaunchError(
            f"{name}: parameter '{param}' is Mut[...]: pass it partitioned, e.g. "
            f"{param}.partition({[d if isinstance(d, int) and d > 0 else 128 for d in dims]})")
    raise LaunchError(f"{name}: parameter '{param}' expects a partitioned tensor, got {type(value).__name__}")


def wrong_read_argument(kernel: Kernel, param: str, value: Any) -> None:
    name = kernel.name
    if value is MISSING:
        raise LaunchError(f"{name}: missing tensor argument '{param}'")
    if isinstance(value, Partition):
        raise LaunchError(
            f"{name}: parameter '{param}' is read-only: pass the tensor, not a partition (unpartition() gives it back)")
    raise LaunchError(f"{name}: parameter '{param}' expects a tensor, got {type(value).__name__}")


def scalar_value(kernel: str, param: str, dtype: DType, value: Any) -> bool | int | float:
    """A scalar argument as a Python number, checked against its parameter's dtype:
    an integer out of its range, a bool other than 0/1, and a finite number that
    would overflow a float dtype (to inf, or NaN where the format has no inf) are
    refused; explicit inf and NaN pass, a finite value rounds to the nearest.
    Every backend's scalars pass through here (the native path refuses in C what
    this refuses, and leaves the error to this function)."""
    kind = type(value)
    if kind is float and dtype.is_float:  # the usual cases, without the general checks below
        real: float = value
        if math.isfinite(real) and not _fits_float(real, dtype):
            _float_overflow(kernel, param, dtype, value, real)
        return real
    if kind is int and dtype.is_integer:
        number: int = value
        if not dt.fits(number, dtype):
            raise LaunchError(f"{kernel}: parameter '{param}' is a {dtype} scalar; {number} does not fit")
        return number
    import numbers

    import numpy as np

    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, bool):
        return value
    if dtype.is_integer or dtype.is_bool:
        if not isinstance(value, numbers.Integral):
            raise LaunchError(f"{kernel}: parameter '{param}' is a {dtype} scalar, got {value!r}")
        number = int(value)
        if dtype.is_bool and number not in (0, 1):
            raise LaunchError(f"{kernel}: parameter '{param}' is a bool scalar; {number} is neither 0 nor 1 "
                              "(pass True or False)")
        if not dtype.is_bool and not dt.fits(number, dtype):
            raise LaunchError(f"{kernel}: parameter '{param}' is a {dtype} scalar; {number} does not fit")
        return number
    if not isinstance(value, numbers.Real):
        raise LaunchError(f"{kernel}: parameter '{param}' is a {dtype} scalar, got {value!r}")
    given: Any = value
    try:
        real = float(given)
    except OverflowError:  # an int beyond f64
        real = math.inf
        finite = True
    else:  # (a value wider than f64, np.longdouble say, may have become inf here)
        finite = math.isfinite(real) or bool(np.isfinite(given))
    if finite and not _fits_float(real, dtype):
        _float_overflow(kernel, param, dtype, value, real)
    return real


def _float_overflow(kernel: str, param: str, dtype: DType, value: Any, real: float) -> NoReturn:
    import ml_dtypes

    finfo: Any = ml_dtypes.finfo
    largest = float(finfo(numpy_dtype(dtype)).max)
    shown = repr(value) if len(repr(value)) <= 40 else f"{real:g}" if math.isfinite(real) else "an integer beyond f64"
    raise LaunchError(f"{kernel}: parameter '{param}' is a {dtype} scalar; {shown} overflows it "
                      f"(its largest finite value is {largest:g})")


_F32 = struct.Struct("<f")


def _fits_float(value: float, dtype: DType) -> bool:
    """Whether the finite ``value`` stays finite converted to float ``dtype``."""
    import numpy as np

    if not math.isfinite(value):
        return False
    if dtype is dt.f64:
        return True
    if dtype is dt.f32:  # (struct rounds to nearest as numpy's cast does, and refuses an overflow)
        try:
            _F32.pack(value)
        except OverflowError:
            return False
        return True
    with np.errstate(over="ignore", invalid="ignore"):
        return bool(np.isfinite(np.asarray(value, dtype=np.float64).astype(numpy_dtype(dtype))))


def call_key(kernel: Kernel, arguments: dict[str, Any], grid: tuple[int, int, int] | None) -> tuple[Any, ...] | None:
    """What the specialization and grid of a call depend on, cheaply; None when an
    argument is of a kind the full check must see (errors are reported there)."""
    key: list[Any] = [grid]
    for name, value in arguments.items():
        kind = type(value)
        if kind is Partition:
            tensor = value._tensor
            key.append((name, tensor.dtype, tensor.shape, tensor.strides, tensor.address() % MAX_DIVISIBILITY,
                        value.tile_shape, value.map_shape, value.blocks))
        elif kind is Tensor:
            key.append((name, value.dtype, value.shape, value.strides, value.address() % MAX_DIVISIBILITY))
        elif kind in (int, float, bool):
            # Constants select the code; run-time scalars only their type does.
            key.append((name, kind, constant_key(value)) if name in kernel._constant_params else (name, kind))
        else:
            return None
    return tuple(key)


def _is_mapped(value: Any) -> bool:
    return getattr(value, "blocks", None) is not None  # a mapped Partition or api.meta placeholder


def describe_call(kernel: Kernel, arguments: dict[str, Any],
                  explicit_grid: tuple[int, int, int] | None = None) -> tuple[Specialization, tuple[int, int, int]]:
    """The specialization a call's arguments select, and its grid (inferred from the
    Mut partitions, or explicit). Tensors, partitions and `api.meta` placeholders
    are all accepted; errors name the parameter."""
    from cutile.api import MetaTensor  # (cutile.api imports this module through _fill and _entry)

    name = kernel.name
    described: dict[str, Any] = {}
    partitions: list[tuple[str, tuple[int, ...]]] = []
    for p in kernel.signature.parameters:
        value = arguments.get(p.name, inspect.Parameter.empty)
        if isinstance(p.annotation, TensorAnnotation):
            if isinstance(value, (Partition, Tensor)):
                tensor = value._tensor if isinstance(value, Partition) else value
                check_strides(name, p.name, tensor)
                if isinstance(value, Partition):
                    described[p.name] = tensor.spec(value.tile_shape, value.map_shape)
                    partitions.append((p.name, value.launch_grid))
                else:
                    described[p.name] = tensor.spec()
            elif isinstance(value, MetaTensor):
                described[p.name] = value.spec()
                if value.blocks is not None:
                    partitions.append((p.name, (value.blocks,)))
                elif value.tile_shape is not None:
                    partitions.append((p.name, tuple(-(-s // t) for s, t in zip(value.shape, value.tile_shape))))
            elif value is inspect.Parameter.empty:
                raise LaunchError(f"{name}: missing tensor argument '{p.name}'")
            else:
                raise LaunchError(f"{name}: parameter '{p.name}' expects a tensor, got {type(value).__name__}")
        elif isinstance(p.annotation, ConstantAnnotation):
            if value is not inspect.Parameter.empty:
                described[p.name] = value
        elif isinstance(p.annotation, DType):
            if value is inspect.Parameter.empty:
                raise LaunchError(f"{name}: missing scalar argument '{p.name}'")
            described[p.name] = scalar_value(name, p.name, p.annotation, value)
    try:
        spec = specialize(kernel.signature, name, described)
    except SpecializationError as exc:
        raise LaunchError(str(exc)) from None
    grid: tuple[int, ...] | None = None
    for param, tiles in partitions:
        if grid is None:
            grid = tiles
        elif grid != tiles:
            raise LaunchError(
                f"{name}: the Mut partitions disagree on the grid: '{partitions[0][0]}' has "
                f"{list(partitions[0][1])} tiles, '{param}' {list(tiles)}")
    padded = None if grid is None else (tuple(grid) + (1, 1, 1))[:3]
    if explicit_grid is not None:
        # An unsafe kernel may run on another grid than its partitions' (a persistent
        # kernel loops over the tiles itself); the interpreter still checks its stores.
        mapped = [param for param, tiles in partitions if len(tiles) == 1 and _is_mapped(arguments.get(param))]
        if mapped and padded != explicit_grid:  # its schedule's proof counts on (blocks, 1, 1) blocks
            raise LaunchError(
                f"{name}: the explicit grid {list(explicit_grid)} disagrees with the grid {list(padded or ())} of "
                f"the mapped partition '{mapped[0]}' (its map's blocks), even in an unsafe kernel")
        if padded is not None and padded != explicit_grid and not kernel.unsafe:
            raise LaunchError(
                f"{name}: the explicit grid {list(explicit_grid)} disagrees with the grid "
                f"{list(padded)} of the Mut partitions")
        padded = explicit_grid
    if padded is None:
        raise LaunchError(f"{name}: no Mut tensor decides the grid; set it with .grid(x, y, z)")
    return spec, (padded[0], padded[1], padded[2])


