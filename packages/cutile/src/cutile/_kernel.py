"""Kernels and launches: ``@cutile.entry``, ``@cutile.function``, and the lazy
`Launch` an entry's call returns.

A launch checks everything before any work: argument kinds, dtypes, ranks and
static dims (naming the parameter), ownership (nothing consumed, nothing held by
another pending launch, no memory passed twice where one copy is written), and
the grid (inferred from the Mut partitions, which must agree).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import math
import operator
import sys
import warnings
import weakref
from collections.abc import Callable, Generator, Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeVar, overload

import cuda_async
from cutile import _backend, _gpu
from cutile._native import KernelBase, LaunchBase, configure_never_run
from cutile._errors import ArgumentTypeError, CutileError, GraphUpdateError, LaunchError, OwnershipError
from cutile._tensor import Partition, Storage, Tensor, hold_all, hold_entries, overlapping, overlaps_itself, release_all
from cutile_compiler import dtypes as dt
from cutile_compiler import (
    DEFAULT_OPTIONS,
    MAX_DIVISIBILITY,
    CompiledKernel,
    CompileOptions,
    ConstantAnnotation,
    DeviceFunction,
    DType,
    HintError,
    KernelCompiler,
    KernelHints,
    KernelIR,
    KernelSignature,
    LRUCache,
    parse_arch,
    SignatureError,
    Specialization,
    SpecializationError,
    TensorAnnotation,
    constant_key,
    numpy_dtype,
    parse_signature,
    specialize,
)

_F = TypeVar("_F", bound=Callable[..., Any])
_CACHE_SIZE = 256  # specializations kept per kernel


class Kernel(KernelBase):
    """A ``@cutile.entry`` function. Calling it returns a lazy `Launch`.

    Its base is the native launch path's (`cutile._native`): a call with the
    last call's objects is answered in C; any other goes to ``_call``.
    """

    def __init__(self, function: Callable[..., Any], *, unsafe: bool = False,
                 hints: Mapping[str, Any] | None = None) -> None:
        functools.update_wrapper(self, function)
        self.function = function
        self.unsafe = unsafe
        try:
            self.hints = KernelHints.parse(hints, f"@cutile.entry of {function.__name__}: hints")
        except HintError as exc:
            raise SignatureError(str(exc)) from None
        self.name = function.__name__
        self._launch_description = f"launch of {self.name}"
        self.signature: KernelSignature = parse_signature(function)
        self._python_signature = inspect.signature(function)
        self._param_names = tuple(self._python_signature.parameters)
        # A call with every argument positional maps them without inspect's binding.
        self._plain_positional = all(p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
                                     for p in self._python_signature.parameters.values())
        self._tensor_params = tuple((p.name, p.annotation.mutable) for p in self.signature.parameters
                                    if isinstance(p.annotation, TensorAnnotation))
        self._mutable_names = frozenset(name for name, mutable in self._tensor_params if mutable)
        self._scalar_params = {p.name: p.annotation for p in self.signature.parameters
                               if isinstance(p.annotation, DType)}
        self._constant_params = frozenset(p.name for p in self.signature.parameters if p.is_constant)
        # Per-kernel caches, bounded: a long-running program that meets many shapes
        # keeps the most recent specializations. The compiler keeps the typed IR and
        # the compiled kernels; the runtime what it loaded and planned.
        self._compiler = KernelCompiler(function, self.signature, unsafe=unsafe, hints=self.hints,
                                        cache_size=_CACHE_SIZE)
        self._loaded: LRUCache[tuple[Specialization, CompileOptions], Any] = LRUCache(_CACHE_SIZE)  # GPU launchers
        # The last call's binding: a loop that passes the same objects again skips
        # every check and computation that depends only on them.
        self._binding: Binding | None = None
        # Call signature (dtypes, shapes, constants; see _call_key) -> its plan: a
        # repeated call skips describing the arguments and finding the launcher again.
        self._calls: LRUCache[tuple[Any, ...], CallPlan] = LRUCache(4 * _CACHE_SIZE)
        self._warned_never_run = False  # a launch freed unrun warns once per kernel

    def __repr__(self) -> str:
        return f"<cutile kernel {self.name}{' (unsafe)' if self.unsafe else ''}>"

    if TYPE_CHECKING:
        def __call__(self, *args: Any, **kwargs: Any) -> Launch: ...

    def _call(self, *args: Any, **kwargs: Any) -> Launch:
        if not kwargs and len(args) == len(self._param_names) and self._plain_positional:
            binding = self._binding
            if binding is not None and binding.matches(args):
                return Launch(self, self._positional_arguments(args), binding)
            arguments = dict(zip(self._param_names, args))
        else:
            try:
                bound = self._python_signature.bind_partial(*args, **kwargs)
            except TypeError as exc:
                raise LaunchError(f"{self.name}: {exc}") from None
            arguments = dict(bound.arguments)
        for name, dtype in self._scalar_params.items():
            if name in arguments:
                arguments[name] = _scalar_value(self.name, name, dtype, arguments[name])
        return Launch(self, arguments)

    def _positional_arguments(self, args: tuple[Any, ...]) -> dict[str, Any]:
        """Every argument by name, from a call that passed all of them by position,
        its scalars checked and converted."""
        arguments = dict(zip(self._param_names, args))
        for name, dtype in self._scalar_params.items():
            arguments[name] = _scalar_value(self.name, name, dtype, arguments[name])
        return arguments

    def plan_for(self, arguments: dict[str, Any], explicit_grid: tuple[int, int, int] | None = None) -> CallPlan:
        """The plan of a call with these arguments (cached per call signature)."""
        key = _call_key(self, arguments, explicit_grid)
        plan = self._calls.get(key) if key is not None else None
        if plan is None:
            plan = CallPlan(*describe_call(self, arguments, explicit_grid))
            if key is not None:
                self._calls.put(key, plan)
        return plan

    def clear_cache(self) -> None:
        """Forgets this kernel's compiled and loaded code and its call plans in this
        process (the disk cache stays); the next launch compiles or loads again."""
        self._compiler.clear()
        self._loaded = LRUCache(_CACHE_SIZE)
        self._calls = LRUCache(4 * _CACHE_SIZE)
        self._binding = None
        self._fast = None

    def kernel_ir(self, spec: Specialization) -> KernelIR:
        """The typed IR for one specialization (built once, then cached by the
        compiler while every global, closure variable and device function it read is
        unchanged)."""
        return self._compiler.kernel_ir(spec)

    def compiled(self, spec: Specialization, arch: str, options: CompileOptions | None = None) -> CompiledKernel:
        """The cubin for one specialization and architecture, under the entry's hints
        (compiled once per process while what it read is unchanged, see `kernel_ir`,
        and cached on disk across processes)."""
        return self._compiler.compile(spec, arch, options)


@overload
def entry(function: _F, /) -> Kernel: ...
@overload
def entry(*, unsafe: bool = False, hints: Mapping[str, Any] | None = None) -> Callable[[Callable[..., Any]], Kernel]: ...


def entry(function: Callable[..., Any] | None = None, /, *, unsafe: bool = False,
          hints: Mapping[str, Any] | None = None) -> Any:
    """Declares a kernel. ``@cutile.entry(unsafe=True)`` unlocks stores outside a
    block's own tiles, gathers, scatters and atomics at arbitrary indices (and the
    interpreter then checks them for bounds and races). ``hints`` are tileiras's
    optimization hints, general or per arch: ``{"sm_90": {"num_worker_warps": 8},
    "occupancy": 1}`` (names: num_ctas, occupancy, num_worker_warps)."""
    if function is None:
        return lambda f: Kernel(f, unsafe=unsafe, hints=hints)
    return Kernel(function, unsafe=unsafe, hints=hints)


def function(python_function: Callable[..., Any]) -> DeviceFunction:
    """Declares a device function: callable from kernels, inlined at each call."""
    return DeviceFunction(python_function)


class Launch(LaunchBase):
    """One pending launch of a kernel; it holds its tensor arguments until it runs.

    ``.sync()`` runs it and returns the tensor arguments (in signature order);
    ``.grid(x, y, z)`` sets the grid when no Mut tensor decides it.
    """

    def __init__(self, kernel: Kernel, arguments: dict[str, Any], binding: Binding | None = None) -> None:
        self.kernel = kernel
        self.arguments = arguments
        self._explicit_grid: tuple[int, int, int] | None = None
        self._options = DEFAULT_OPTIONS
        self._op: cuda_async.DeviceOp[Any] | None = None
        self._done = False
        if binding is None:
            self._tensor_names: list[str] = []
            ranges = self._checked_ranges()
            self._plan: CallPlan | None = None
            binding = Binding(kernel, arguments, ranges, self._tensor_names)
            kernel._binding = binding
            kernel._fast = None  # the native path's binding was the previous one's
        else:
            # The same objects as the binding's: only what can change since is checked.
            for param in binding.tensor_names:
                value = arguments[param]
                if value._consumed_by is not None:
                    value._live(f"{kernel.name}: parameter '{param}'")  # raises, naming the consumer
            ranges = binding.ranges
            self._tensor_names = binding.tensor_names
            self._plan = binding.plan
        self._binding = binding
        # A running op (a scheduled launch, a replay) that holds the memory refuses
        # the launch now, at the call, naming both parameters (not only at its sync).
        cuda_async.check_startable(binding.accesses, self.description)
        self._holds = hold_all(ranges, binding.hold_entries, kernel.name)
        # Until it runs, joins an op, or is cancelled; the kernel's call (the native
        # base's or the Python one) records where it was made.
        self._pending = True

    def _release(self) -> None:
        """Gives back the holds this launch took when it was made (once)."""
        if self._holds:
            release_all(self._holds, self._binding.devices)

    # A launch dropped without running holds nothing: its base gives the holds back
    # (`release_dropped`) when it is freed.

    if not TYPE_CHECKING:
        def __getattr__(self, name: str) -> Any:
            # Only a launch made by the native path lacks its attributes: the Python
            # code adopts it on first use, then carries on as for any launch.
            state = self._take_native()
            if state is None:
                raise AttributeError(f"'Launch' object has no attribute {name!r}")
            self._adopt(*state)
            return object.__getattribute__(self, name)

    def _adopt(self, binding: Binding, args: tuple[Any, ...], held: bool, done: bool) -> None:
        """Takes over a launch made by the native path (``kernel(*args)`` matched
        ``binding``): what `__init__` would have set."""
        kernel = self.kernel
        self._binding = binding
        self._holds = list(binding.hold_entries) if held else []
        self._done = done
        self._explicit_grid = None
        self._options = DEFAULT_OPTIONS
        self._op = None
        self._tensor_names = binding.tensor_names
        self._plan = binding.plan
        self.arguments = kernel._positional_arguments(args)

    @property
    def description(self) -> str:
        return self.kernel._launch_description

    def _checked_ranges(self) -> list[tuple[str, Storage, int, int, bool]]:
        """The tensor arguments' byte ranges, checked for kinds and for memory passed
        twice where one copy is written."""
        name = self.kernel.name
        ranges = self._argument_ranges()
        for i, (a, storage_a, start_a, end_a, writes_a) in enumerate(ranges):
            for b, storage_b, start_b, end_b, writes_b in ranges[i + 1:]:
                # By absolute address: two storages may wrap the same memory
                # (an array imported twice through DLPack, say).
                if (writes_a or writes_b) and overlapping(
                        storage_a.device, storage_a.base_address + start_a, storage_a.base_address + end_a,
                        storage_b.device, storage_b.base_address + start_b, storage_b.base_address + end_b):
                    written = a if writes_a else b
                    raise LaunchError(
                        f"{name}: parameters '{a}' and '{b}' share memory and '{written}' is written; "
                        "pass distinct tensors")
        return ranges

    def _argument_ranges(self, *, live: bool = True) -> list[tuple[str, Storage, int, int, bool]]:
        """(parameter, storage, byte range, written) of each tensor argument, after
        checking its kind and (with ``live``) that the objects are not consumed."""
        name = self.kernel.name
        arguments = self.arguments
        ranges: list[tuple[str, Storage, int, int, bool]] = []
        for param, mutable in self.kernel._tensor_params:
            value = arguments.get(param, _MISSING)
            kind = type(value)
            if mutable:
                if kind is not Partition:
                    _wrong_mut_argument(self.kernel, param, value)
                if live and value._consumed_by is not None:
                    value._live(f"{name}: parameter '{param}'")  # raises, naming the consumer
                tensor = value._tensor
                if tensor._storage.readonly:
                    raise LaunchError(f"{name}: parameter '{param}' is Mut[...] but its memory is read-only")
                if len(tensor.shape) > 1 or (tensor.shape and tensor.shape[0] > 1 and tensor.strides[0] == 0):
                    if overlaps_itself(tensor.shape, tensor.strides):
                        raise LaunchError(
                            f"{name}: parameter '{param}' is Mut[...] but its strides {list(tensor.strides)} make "
                            "elements share memory (blocks would race); pass a copy (api.copy)")
            else:
                if kind is not Tensor:
                    _wrong_read_argument(self.kernel, param, value)
                if live and value._consumed_by is not None:
                    value._live(f"{name}: parameter '{param}'")
                tensor = value
            _check_strides(name, param, tensor)
            start, end = tensor.byte_range()
            ranges.append((param, tensor._storage, start, end, mutable))
        self._tensor_names = [r[0] for r in ranges]
        return ranges

    def _take_over(self) -> None:
        """Adopts a launch made by the native path before changing what it runs
        (after this, ``sync`` is the Python path's)."""
        state = self._take_native()
        if state is not None:
            self._adopt(*state)

    def grid(self, x: int, y: int = 1, z: int = 1) -> Launch:
        """Sets the grid explicitly (checked against the Mut partitions, if any)."""
        self._take_over()
        dims = (x, y, z)
        if not all(isinstance(d, int) and not isinstance(d, bool) and d >= 1 for d in dims):
            self._pending = False  # the error is what the caller hears of this launch
            raise LaunchError(f"{self.kernel.name}: grid dims must be positive ints, got {list(dims)}")
        self._explicit_grid = dims
        self._plan = None
        return self

    def compile_options(self, *, opt_level: int = 3, lineinfo: bool = False,
                        hints: Mapping[str, Any] | None = None) -> Launch:
        """tileiras options for this launch (part of the compile cache key); ``hints``
        as for `entry`, over the entry's own."""
        self._take_over()
        try:
            parsed = KernelHints.parse(hints, f"{self.kernel.name}.compile_options: hints")
        except HintError as exc:
            self._pending = False
            raise LaunchError(str(exc)) from None
        self._options = CompileOptions(opt_level=opt_level, lineinfo=lineinfo, hints=parsed)
        self._plan = None
        return self

    def compile(self) -> Launch:
        """Compiles now (a warm-up); the launch stays pending: run it, or `cancel` it."""
        spec, _ = self.specialization()
        try:
            if _backend.current() == "interpreter":
                self.kernel.kernel_ir(spec)
            else:
                _gpu.prepare(self.kernel, self.plan(), self._options)
        except CutileError:
            self._pending = False
            raise
        return self

    def specialization(self) -> tuple[Specialization, tuple[int, int, int]]:
        """The compile-time view of the arguments, and the launch grid."""
        plan = self.plan()
        return plan.spec, plan.grid

    def plan(self) -> CallPlan:
        """The specialization and grid of this call, and (once run on the GPU) its
        loaded kernel: shared by every call with the same argument signature."""
        plan = self._plan
        if plan is None:
            try:
                plan = self._plan = self.kernel.plan_for(self.arguments, self._explicit_grid)
            except CutileError:
                self._pending = False  # the error is what the caller hears of this launch
                raise
            binding = self._binding
            if binding.plan is None and self._explicit_grid is None:
                binding.plan = plan
        return plan

    # -- running: a Launch is a cuda_async DeviceOp ----------------------------------
    @property
    def op(self) -> cuda_async.DeviceOp[Any]:
        """This launch as a `cuda_async.DeviceOp`: it reads the storages of the
        read-only tensors and writes those of the Mut ones, and returns the tensor
        arguments. Combine it with ``then``, ``map``, `cutile.zip`, ``shared``..."""
        self._pending = False  # the op decides whether it runs
        if self._op is None:
            self._op = cuda_async.FnOp.from_accesses(self._execute, self._binding.accesses, name=self.description,
                                                     views=self._graph_views)
        return self._op

    def _graph_views(self) -> list[cuda_async.ResourceView]:
        """How this launch uses its tensors' memory, by parameter (asked when it is
        captured into a graph: what `Graph.update` checks new inputs against)."""
        views = []
        for param, _ in self.kernel._tensor_params:
            value = self.arguments[param]
            tensor = value._tensor if type(value) is Partition else value
            views.append(cuda_async.ResourceView(tensor._storage.resource, tensor.layout(),
                                                 f"parameter '{param}' of {self.description}"))
        return views

    def __device_op__(self) -> cuda_async.DeviceOp[Any]:
        """How cuda_async's combinators see a launch (e.g. returned from ``then``)."""
        return self.op

    def _execute(self, stream: Any) -> Any:
        """Runs the launch: eagerly on the interpreter (``stream`` is then ignored),
        queued on ``stream`` on the GPU (None: on cutile's stream, waited for)."""
        if self._done:
            # A run after the first (a replayed host graph, an op run again): the
            # memory must still be free of conflicting pending launches. (The objects
            # may have been consumed since, e.g. unpartitioned: the memory is the same.)
            for param, storage, start, end, writes in self._argument_ranges(live=False):
                storage.check_available(start, end, writes, f"{self.kernel.name}: parameter '{param}'")
        plan = self.plan()
        arguments = self.arguments
        self._done = True
        self._release()  # the running op's own holds (cuda_async) take over from here
        self._op = None  # the op refers back to this launch: leave no cycle behind
        run_plan(self.kernel, plan, arguments, self._options, stream, self._binding)
        return self._binding.results(arguments)

    if TYPE_CHECKING:
        def sync(self) -> Any:
            """Runs the launch to completion and returns its tensor arguments.

            One tensor argument is returned as itself; several as a tuple.
            (The native base's ``sync`` runs a launch in a batch's steady state
            and hands every other case to `_sync_slow`.)
            """

    def _sync_slow(self) -> Any:
        self._pending = False
        if self._done:
            if self.__dict__.get("_cancelled"):
                raise OwnershipError(f"{self.description} was cancelled; it cannot run")
            raise OwnershipError(f"{self.description} has already run; its tensors were handed back")
        try:
            return self.op.sync()
        finally:
            self._done = True
            self._release()

    def cancel(self) -> None:
        """Drops the launch on purpose, without running it: its tensors' holds are
        given back now and it can no longer run. (A launch freed without having run,
        been scheduled or joined an op warns `LaunchNeverRunWarning`.)"""
        self._take_over()
        if self._done or self._op is not None:
            raise OwnershipError(f"{self.description} has run or is part of an op; it cannot be cancelled")
        self._pending = False
        self._done = True
        self._cancelled = True
        self._release()
        self._holds = []

    def sync_on(self, stream: Any) -> Any:
        """Runs the launch on ``stream`` (a `cuda_core.Stream`, or None for the host)
        and waits for it."""
        return self.op.sync_on(stream)

    def schedule(self, policy: Any = None) -> cuda_async.DeviceFuture[Any]:
        """Queues the launch without waiting; the future's ``result()`` (or ``await``)
        gives the tensors back."""
        return self.op.schedule(policy)

    def then(self, next_op: Any) -> cuda_async.DeviceOp[Any]:
        """The launch, then ``next_op`` (an op, a launch, or a function of the result
        that returns one), on the same stream."""
        return self.op.then(next_op)

    def map(self, function: Callable[[Any], Any]) -> cuda_async.DeviceOp[Any]:
        """The launch with a host function applied to its result."""
        return self.op.map(function)

    def shared(self) -> cuda_async.DeviceOp[Any]:
        """The launch as an op that runs once however many ops consume it."""
        return self.op.shared()

    def graph(self, name: str | None = None) -> Graph:
        """This launch captured into a CUDA graph (recorded, not run); the kernel is
        compiled and loaded first, outside the capture."""
        self.compile()
        return Graph(self.op.graph(name=name or self.description))

    def __await__(self) -> Generator[Any, None, Any]:
        return self.op.__await__()


class LaunchNeverRunWarning(RuntimeWarning):
    """A launch was freed without having run (like a coroutine never awaited): its
    outputs keep their old values. Run it (``.sync()``, ``.schedule()``, ``await``),
    make it part of an op (``then``, `cutile.zip`, ...), or drop it on purpose with
    ``.cancel()``. Warned once per kernel, at the line of the call that made it."""


def _warn_never_run(kernel: Any, code: Any, lasti: int, _sys: Any = sys, _warnings: Any = warnings) -> None:
    """Warns that a launch of ``kernel`` made at (``code``, ``lasti``) was freed while
    pending. It runs in the launch's finalizer, wherever the launch is freed: it
    touches nothing but its arguments (the modules it needs are bound as defaults,
    as module globals may be gone at exit, when it says nothing)."""
    if _sys.is_finalizing() or getattr(kernel, "_warned_never_run", True) is not False:
        return
    kernel._warned_never_run = True
    filename, line = "<unknown>", 0
    if code is not None:
        filename, line = code.co_filename, code.co_firstlineno
        for start, end, number in code.co_lines():
            if start <= lasti < end and number is not None:
                line = number
                break
    _warnings.warn_explicit(
        f"launch of {kernel.name} was never run: the call at {filename}:{line} made it, but it was freed "
        f"without .sync() (or .schedule(), await, joining an op), so its outputs keep their old values; "
        f".cancel() drops a launch on purpose", LaunchNeverRunWarning, filename, line)


configure_never_run(_warn_never_run)


def run_plan(kernel: Kernel, plan: CallPlan, arguments: dict[str, Any], options: CompileOptions,
             stream: Any, binding: Binding | None = None) -> None:
    """Runs ``kernel`` as ``plan`` says over ``arguments`` (partitions or tensors):
    at once on the interpreter (``stream`` is then ignored), queued on ``stream`` on
    the GPU (None: on cutile's stream, waited for). ``binding``: the arguments'
    binding, whose packed parameters a GPU launch with default options reuses."""
    if 0 in plan.grid:
        return  # nothing to compute
    if _backend.current() == "interpreter":
        from cutile._interpreter import Interpreter

        values = {n: (v._tensor if type(v) is Partition else v) for n, v in arguments.items()}
        Interpreter(kernel.kernel_ir(plan.spec), plan.grid).run(values, kernel._mutable_names)
        return
    target = _gpu.default_stream() if stream is None else stream
    if binding is not None and plan is binding.plan and options is DEFAULT_OPTIONS:
        _gpu.enqueue_bound(kernel, binding, arguments, target)
    else:
        values = {n: (v._tensor if type(v) is Partition else v) for n, v in arguments.items()}
        _gpu.enqueue(kernel, plan, values, options, target)
    if stream is None:
        target.synchronize()


class CallPlan:
    """What every call with one argument signature shares: the specialization, the
    grid, and the GPU launcher per compile options (filled by `cutile._gpu`)."""

    __slots__ = ("spec", "grid", "launchers")

    def __init__(self, spec: Specialization, grid: tuple[int, int, int]) -> None:
        self.spec = spec
        self.grid = grid
        self.launchers: dict[CompileOptions, Any] = {}


_MISSING = object()


class Binding:
    """What one call's tensor objects imply, computed once and reused while a loop
    passes the very same objects (and constants): their checked byte ranges, the
    resources the op reads and writes, the plan, and the packed GPU parameters.

    Objects are remembered by weak reference: a binding never keeps a tensor alive.
    What can change between calls (an object consumed, a pending launch holding the
    memory, ops in flight) is still checked on every call.
    """

    __slots__ = ("checks", "tensor_names", "ranges", "devices", "hold_entries", "accesses", "plan", "loaded",
                 "packed", "scalar_slots", "results", "fast")

    _TENSOR, _CONSTANT, _SCALAR = range(3)
    _NO_ACCESSES = cuda_async.AccessSet()

    def __init__(self, kernel: Kernel, arguments: dict[str, Any],
                 ranges: list[tuple[str, Storage, int, int, bool]], tensor_names: list[str]) -> None:
        checks: list[tuple[Any, ...]] = []
        tensors = set(tensor_names)
        for name in kernel._param_names:
            value = arguments.get(name, _MISSING)
            if name in tensors:
                checks.append((Binding._TENSOR, weakref.ref(value, self._forget)))
            elif name in kernel._constant_params:
                checks.append((Binding._CONSTANT, type(value), value))
            else:  # a run-time scalar: its type may select the code, its value never
                checks.append((Binding._SCALAR, type(value)))
        self.checks = tuple(checks)
        self.tensor_names = tensor_names
        # What a run returns: the tensor arguments, one as itself, several as a tuple.
        self.results: Callable[[dict[str, Any]], Any] = (
            operator.itemgetter(*tensor_names) if tensor_names else (lambda arguments: ()))
        self.ranges = ranges
        self.devices = [r[1].device for r in ranges]
        # The holds a launch of these objects takes (the native path appends these
        # very tuples too; holds are released by identity).
        self.hold_entries = hold_entries(ranges, kernel._launch_description)
        writes = [storage.resource for _, storage, _, _, mutable in ranges if mutable]
        reads = [storage.resource for _, storage, _, _, mutable in ranges if not mutable]
        # The op's holds and conflicts name the parameters, as the launch's own holds do.
        params: dict[Any, list[str]] = {}
        for param, storage, _, _, _ in ranges:
            params.setdefault(storage.resource, []).append(f"'{param}'")
        labels = {resource: f"{kernel._launch_description} (parameter {names[0]})" if len(names) == 1
                  else f"{kernel._launch_description} (parameters {', '.join(names[:-1])} and {names[-1]})"
                  for resource, names in params.items()}
        self.accesses = cuda_async.AccessSet(tuple(reads), tuple(writes), labels)
        self.plan: CallPlan | None = None  # set by the first Launch.plan() without an explicit grid
        self.loaded: Any = None  # the GPU launcher, with ``packed`` its parameters
        self.packed: list[Any] = []
        self.scalar_slots: list[tuple[int, str, DType]] = []  # refilled on every call
        self.fast: weakref.ref[Any] | None = None  # the kernel's native binding made from this one

    def _forget(self, _dead: Any) -> None:
        # One of the objects is gone, so the binding can never match again: drop what
        # refers to memory (storages, resources) so that the memory can be freed.
        # (It may run while the interpreter shuts down, when module globals are gone:
        # it uses only what the class holds.)
        self.ranges = []
        self.accesses = self._NO_ACCESSES
        self.loaded = None
        self.packed = []
        fast = self.fast() if self.fast is not None else None
        if fast is not None:
            fast.disarm()

    def matches(self, args: tuple[Any, ...]) -> bool:
        """Whether ``args`` are this binding's tensor objects and constants (floats
        only as the same object: 0.0 and -0.0 are equal but compile differently)."""
        for check, value in zip(self.checks, args):
            kind = check[0]
            if kind == 0:  # Binding._TENSOR (literals: this loop runs on every call)
                target = check[1]()
                if target is None or target is not value:  # a dead reference must not match None
                    return False
            elif type(value) is not check[1]:
                return False
            elif kind == 1 and value is not check[2] and (type(value) is float or value != check[2]):
                return False
        return True


def _check_strides(kernel: str, param: str, tensor: Tensor) -> None:
    # Tile IR's tensor views address memory upward from their base: a reversed view
    # would read outside it. Both backends refuse alike.
    for extent, stride in zip(tensor.shape, tensor.strides):
        if stride < 0 and extent > 1:
            raise LaunchError(
                f"{kernel}: parameter '{param}' has a negative stride {list(tensor.strides)}; kernels take views "
                "whose strides are not negative (pass a copy: api.copy)")


def _wrong_mut_argument(kernel: Kernel, param: str, value: Any) -> None:
    name = kernel.name
    if value is _MISSING:
        raise LaunchError(f"{name}: missing tensor argument '{param}'")
    if isinstance(value, Tensor):
        dims = next(p.annotation.dims for p in kernel.signature.parameters if p.name == param)  # type: ignore[union-attr]
        raise LaunchError(
            f"{name}: parameter '{param}' is Mut[...]: pass it partitioned, e.g. "
            f"{param}.partition({[d if isinstance(d, int) and d > 0 else 128 for d in dims]})")
    raise LaunchError(f"{name}: parameter '{param}' expects a partitioned tensor, got {type(value).__name__}")


def _wrong_read_argument(kernel: Kernel, param: str, value: Any) -> None:
    name = kernel.name
    if value is _MISSING:
        raise LaunchError(f"{name}: missing tensor argument '{param}'")
    if isinstance(value, Partition):
        raise LaunchError(
            f"{name}: parameter '{param}' is read-only: pass the tensor, not a partition (unpartition() gives it back)")
    raise LaunchError(f"{name}: parameter '{param}' expects a tensor, got {type(value).__name__}")


def _scalar_value(kernel: str, param: str, dtype: DType, value: Any) -> bool | int | float:
    """A scalar argument as a Python number, checked against its parameter's dtype:
    an integer out of its range, a bool other than 0/1, and a finite number that
    would overflow a float dtype (to inf, or NaN where the format has no inf) are
    refused; explicit inf and NaN pass, a finite value rounds to the nearest.
    Every backend's scalars pass through here (the native path refuses in C what
    this refuses, and leaves the error to this function)."""
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
        import ml_dtypes

        finfo: Any = ml_dtypes.finfo
        largest = float(finfo(numpy_dtype(dtype)).max)
        shown = repr(value) if len(repr(value)) <= 40 else f"{real:g}" if math.isfinite(real) else "an integer beyond f64"
        raise LaunchError(f"{kernel}: parameter '{param}' is a {dtype} scalar; {shown} overflows it "
                          f"(its largest finite value is {largest:g})")
    return real


def _fits_float(value: float, dtype: DType) -> bool:
    """Whether the finite ``value`` stays finite converted to float ``dtype``."""
    import numpy as np

    if not math.isfinite(value):
        return False
    if dtype is dt.f64:
        return True
    with np.errstate(over="ignore", invalid="ignore"):
        return bool(np.isfinite(np.asarray(value, dtype=np.float64).astype(numpy_dtype(dtype))))


def _call_key(kernel: Kernel, arguments: dict[str, Any], grid: tuple[int, int, int] | None) -> tuple[Any, ...] | None:
    """What the specialization and grid of a call depend on, cheaply; None when an
    argument is of a kind the full check must see (errors are reported there)."""
    key: list[Any] = [grid]
    for name, value in arguments.items():
        kind = type(value)
        if kind is Partition:
            tensor = value._tensor
            key.append((name, tensor.dtype, tensor.shape, tensor.strides, tensor.address() % MAX_DIVISIBILITY,
                        value.tile_shape))
        elif kind is Tensor:
            key.append((name, value.dtype, value.shape, value.strides, value.address() % MAX_DIVISIBILITY))
        elif kind in (int, float, bool):
            # Constants select the code; run-time scalars only their type does.
            key.append((name, kind, constant_key(value)) if name in kernel._constant_params else (name, kind))
        else:
            return None
    return tuple(key)


def describe_call(kernel: Kernel, arguments: dict[str, Any],
                  explicit_grid: tuple[int, int, int] | None = None) -> tuple[Specialization, tuple[int, int, int]]:
    """The specialization a call's arguments select, and its grid (inferred from the
    Mut partitions, or explicit). Tensors, partitions and `api.meta` placeholders
    are all accepted; errors name the parameter."""
    from cutile.api import MetaTensor

    name = kernel.name
    described: dict[str, Any] = {}
    partitions: list[tuple[str, tuple[int, ...]]] = []
    for p in kernel.signature.parameters:
        value = arguments.get(p.name, inspect.Parameter.empty)
        if isinstance(p.annotation, TensorAnnotation):
            if isinstance(value, (Partition, Tensor)):
                tensor = value._tensor if isinstance(value, Partition) else value
                _check_strides(name, p.name, tensor)
                if isinstance(value, Partition):
                    described[p.name] = tensor.spec(value.tile_shape)
                    partitions.append((p.name, value.grid))
                else:
                    described[p.name] = tensor.spec()
            elif isinstance(value, MetaTensor):
                described[p.name] = value.spec()
                if value.tile_shape is not None:
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
            described[p.name] = _scalar_value(name, p.name, p.annotation, value)
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
        if padded is not None and padded != explicit_grid and not kernel.unsafe:
            raise LaunchError(
                f"{name}: the explicit grid {list(explicit_grid)} disagrees with the grid "
                f"{list(padded)} of the Mut partitions")
        padded = explicit_grid
    if padded is None:
        raise LaunchError(f"{name}: no Mut tensor decides the grid; set it with .grid(x, y, z)")
    return spec, (padded[0], padded[1], padded[2])


def compile(kernel: Kernel, *args: Any, arch: str = "sm_90", opt_level: int = 3, **kwargs: Any) -> CompiledKernel:
    """Compiles ``kernel`` for ``arch`` without running it (ahead of time).

    Arguments are as for a launch: real tensors and partitions, or `api.meta`
    placeholders (``api.meta([1024], dtype=f32).partition([128])``), plus
    constants by keyword. Needs tileiras, not a GPU. The result has
    ``.bytecode``, ``.mlir`` and ``.cubin``.
    """
    if not isinstance(kernel, Kernel):
        raise ArgumentTypeError(f"cutile.compile: expected a @cutile.entry kernel, got {type(kernel).__name__}")
    parse_arch(arch)  # before the arguments are looked at, with or without a toolchain
    try:
        bound = kernel._python_signature.bind_partial(*args, **kwargs)
    except TypeError as exc:
        raise LaunchError(f"{kernel.name}: {exc}") from None
    # The grid does not enter a compile; a kernel without Mut tensors needs none here.
    grid = None if kernel.signature.mutable else (1, 1, 1)
    spec, _ = describe_call(kernel, dict(bound.arguments), grid)
    return kernel.compiled(spec, arch, CompileOptions(opt_level=opt_level))


def _graph_input(tensor: Any, what: str) -> cuda_async.ResourceView:
    """A tensor (or partition) given to `Graph.update`, as cuda_async compares it:
    its memory, with the layout the captured work would read it by."""
    if isinstance(tensor, Partition):
        tensor = tensor._tensor
    if not isinstance(tensor, Tensor):
        raise GraphUpdateError(f"Graph.update: {what} must be a tensor, got {type(tensor).__name__}")
    return cuda_async.ResourceView(tensor._storage.resource, tensor.layout(), "the tensor given for it")


class Graph:
    """A captured CUDA graph of launches: ``launch()`` replays it (an op to sync or
    await); ``update(...)`` gives the next replay new input tensors of the same
    layout; ``inputs`` lists what ``update`` takes, in order."""

    def __init__(self, graph: cuda_async.CudaGraph[Any]) -> None:
        self._graph = graph

    @property
    def result(self) -> Any:
        return self._graph.result

    @property
    def node_count(self) -> int:
        return self._graph.node_count

    @property
    def inputs(self) -> list[cuda_async.ResourceView]:
        """The graph's read-only inputs, in the order `update` takes them: each with
        its ``label`` (the parameter and launch that first read it) and ``layout``
        (a `TensorLayout`: dtype, shape, strides, device)."""
        return self._graph.input_views

    def launch(self) -> cuda_async.DeviceOp[Any]:
        """An op replaying the graph (after copying in the inputs given to `update`)."""
        return self._graph.launch()

    def update(self, *new_inputs: Any, replace: dict[Any, Any] | None = None) -> None:
        """New contents for the graph's read-only inputs, in the order of `inputs`
        (None keeps one), or ``replace={old_tensor: new_tensor}``. Each new tensor
        must have the layout of the one it replaces (`GraphUpdateError` otherwise,
        naming the parameter and both layouts); its values are copied in before
        the next replay."""
        given = [None if t is None else _graph_input(t, f"input {i}") for i, t in enumerate(new_inputs)]
        replaced = {_graph_input(old, "a key of replace").resource: _graph_input(new, "a value of replace")
                    for old, new in (replace or {}).items()}
        self._graph.update(*given, replace=replaced)

    def close(self) -> None:
        self._graph.close()


class GraphScope:
    """The recorder of `graph_scope`; ``graph`` is set when the block exits."""

    def __init__(self, scope: cuda_async.GraphScope) -> None:
        self._scope = scope

    @property
    def graph(self) -> Graph:
        return Graph(self._scope.graph)


@contextlib.contextmanager
def graph_scope(name: str = "graph") -> Iterator[GraphScope]:
    """Records the launches synced on this thread inside the block into one graph.

    >>> with cutile.graph_scope("step") as scope:
    ...     y = rms_norm(y, x, w).sync()     # recorded, returns without waiting
    >>> scope.graph.launch().sync()
    """
    with cuda_async.graph_scope(name) as scope:
        yield GraphScope(scope)


@contextlib.contextmanager
def batch(name: str = "batch", *, wait: bool = True) -> Iterator[cuda_async.Batch]:
    """Launches synced on this thread inside the block are enqueued in order on one
    stream, as one job, and return at once; the block's end waits for all of them.

    >>> with cutile.batch():
    ...     for _ in range(1000):
    ...         z, x, y = add(z, x, y).sync()   # no host wait per launch
    >>> z.to_numpy()                            # every launch has completed

    The stream orders the launches, so an output may feed the next launch at once.
    Until the block ends the batch holds every tensor it used: the host may not
    read what it writes (`OwnershipError`). With ``wait=False`` the end does not
    wait; ``batch.future`` completes (and frees the tensors) when the work is done.
    On the interpreter every launch runs at once, as always.
    """
    _backend.current()  # the backend's policy decides the batch's stream
    with cuda_async.batch(name, wait=wait) as active:
        yield active

