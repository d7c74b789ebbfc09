"""Kernels and launches: ``@cutile.entry``, ``@cutile.function``, and the lazy
`Launch` an entry's call returns.

A launch checks everything before any work: argument kinds, dtypes, ranks and
static dims (naming the parameter), ownership (nothing consumed, nothing held by
another pending launch, no memory passed twice where one copy is written), and
the grid (inferred from the Mut partitions, which must agree).
"""

from __future__ import annotations

import dataclasses
import contextlib
import functools
import inspect
import weakref
from collections.abc import Callable, Generator, Iterator, Mapping
from typing import Any, TypeVar, overload

import cuda_async
from cutile import _backend
from cutile._errors import GraphCaptureError, LaunchError, OwnershipError
from cutile._tensor import Partition, Storage, Tensor, _Hold, overlapping, overlaps_itself
from cutile_compiler._builtins import DeviceFunction
from cutile_compiler import _dtypes as dt
from cutile_compiler._dtypes import DType
from cutile_compiler._frontend import build_kernel_ir
from cutile_compiler._hints import HintError, KernelHints
from cutile_compiler._cache import LRUCache
from cutile_compiler._ir import KernelIR
from cutile_compiler._pipeline import CompiledKernel, compile_kernel
from cutile_compiler._toolchain import CompileOptions
from cutile_compiler._signature import (
    MAX_DIVISIBILITY,
    ConstantAnnotation,
    KernelSignature,
    SignatureError,
    Specialization,
    SpecializationError,
    TensorAnnotation,
    parse_signature,
    specialize,
)

_F = TypeVar("_F", bound=Callable[..., Any])
_CACHE_SIZE = 256  # specializations kept per kernel


class Kernel:
    """A ``@cutile.entry`` function. Calling it returns a lazy `Launch`."""

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
        self.signature: KernelSignature = parse_signature(function)
        self._python_signature = inspect.signature(function)
        self._scalar_params = {p.name: p.annotation for p in self.signature.parameters
                               if isinstance(p.annotation, DType)}
        self._constant_params = frozenset(p.name for p in self.signature.parameters if p.is_constant)
        # Per-kernel caches, bounded: a long-running program that meets many shapes
        # keeps the most recent specializations.
        self._ir: LRUCache[Specialization, KernelIR] = LRUCache(_CACHE_SIZE)
        self._compiled: LRUCache[tuple[Specialization, str, CompileOptions], CompiledKernel] = LRUCache(_CACHE_SIZE)
        self._loaded: LRUCache[tuple[Specialization, CompileOptions], Any] = LRUCache(_CACHE_SIZE)  # GPU launchers
        # Call signature (dtypes, shapes, constants; see _call_key) -> (specialization, grid):
        # a repeated call skips binding the signature again.
        self._calls: LRUCache[tuple[Any, ...], tuple[Specialization, tuple[int, int, int]]] = LRUCache(4 * _CACHE_SIZE)

    def __repr__(self) -> str:
        return f"<cutile kernel {self.name}{' (unsafe)' if self.unsafe else ''}>"

    def __call__(self, *args: Any, **kwargs: Any) -> Launch:
        try:
            bound = self._python_signature.bind_partial(*args, **kwargs)
        except TypeError as exc:
            raise LaunchError(f"{self.name}: {exc}") from None
        arguments = dict(bound.arguments)
        for name, dtype in self._scalar_params.items():
            if name in arguments:
                arguments[name] = _scalar_value(self.name, name, dtype, arguments[name])
        return Launch(self, arguments)

    def kernel_ir(self, spec: Specialization) -> KernelIR:
        """The typed IR for one specialization (built once, then cached)."""
        ir = self._ir.get(spec)
        if ir is None:
            ir = build_kernel_ir(self.function, self.signature, spec, unsafe=self.unsafe)
            self._ir.put(spec, ir)
        return ir

    def compiled(self, spec: Specialization, arch: str, options: CompileOptions | None = None) -> CompiledKernel:
        """The cubin for one specialization and architecture (compiled once per process,
        and cached on disk across processes)."""
        opts = options or CompileOptions()
        if self.hints:  # the entry's hints, under those of the launch
            opts = dataclasses.replace(opts, hints=self.hints.merged(opts.hints))
        key = (spec, arch, opts)
        found = self._compiled.get(key)
        if found is None:
            found = compile_kernel(self.function, self.signature, spec, arch, unsafe=self.unsafe,
                                   options=opts, kernel_ir=self.kernel_ir(spec))
            self._compiled.put(key, found)
        return found


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


class Launch:
    """One pending launch of a kernel; it holds its tensor arguments until it runs.

    ``.sync()`` runs it and returns the tensor arguments (in signature order);
    ``.grid(x, y, z)`` sets the grid when no Mut tensor decides it.
    """

    def __init__(self, kernel: Kernel, arguments: dict[str, Any]) -> None:
        self.kernel = kernel
        self.arguments = arguments
        self._explicit_grid: tuple[int, int, int] | None = None
        self._options = CompileOptions()
        self._op: cuda_async.DeviceOp[Any] | None = None
        self._done = False
        self._tensor_names: list[str] = []
        holds: list[tuple[Storage, _Hold]] = []
        self._check_and_hold(holds)
        self._holds = holds
        self._release = weakref.finalize(self, _release_holds, holds)

    @property
    def description(self) -> str:
        return f"launch of {self.kernel.name}"

    def _check_and_hold(self, holds: list[tuple[Storage, _Hold]]) -> None:
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
        for param, storage, start, end, writes in ranges:
            storage.check_available(start, end, writes, f"{name}: parameter '{param}'")
        for param, storage, start, end, writes in ranges:
            holds.append((storage, storage.hold(start, end, writes, f"{self.description} (parameter '{param}')")))

    def _argument_ranges(self, *, live: bool = True) -> list[tuple[str, Storage, int, int, bool]]:
        """(parameter, storage, byte range, written) of each tensor argument, after
        checking its kind and (with ``live``) that the objects are not consumed."""
        name = self.kernel.name
        ranges: list[tuple[str, Storage, int, int, bool]] = []
        names: list[str] = []
        for p in self.kernel.signature.parameters:
            annotation = p.annotation
            if not isinstance(annotation, TensorAnnotation):
                continue
            if p.name not in self.arguments:
                raise LaunchError(f"{name}: missing tensor argument '{p.name}'")
            value = self.arguments[p.name]
            if annotation.mutable:
                if isinstance(value, Tensor):
                    raise LaunchError(
                        f"{name}: parameter '{p.name}' is Mut[...]: pass it partitioned, e.g. "
                        f"{p.name}.partition({[d if isinstance(d, int) and d > 0 else 128 for d in annotation.dims]})")
                if not isinstance(value, Partition):
                    raise LaunchError(f"{name}: parameter '{p.name}' expects a partitioned tensor, got {type(value).__name__}")
                tensor = value._live(f"{name}: parameter '{p.name}'") if live else value._tensor
                if tensor._storage.readonly:
                    raise LaunchError(f"{name}: parameter '{p.name}' is Mut[...] but its memory is read-only")
                if overlaps_itself(tensor.shape, tensor.strides):
                    raise LaunchError(
                        f"{name}: parameter '{p.name}' is Mut[...] but its strides {list(tensor.strides)} make "
                        "elements share memory (blocks would race); pass a copy (api.copy)")
            else:
                if isinstance(value, Partition):
                    raise LaunchError(
                        f"{name}: parameter '{p.name}' is read-only: pass the tensor, not a partition (unpartition() gives it back)")
                if not isinstance(value, Tensor):
                    raise LaunchError(f"{name}: parameter '{p.name}' expects a tensor, got {type(value).__name__}")
                if live:
                    value._live(f"{name}: parameter '{p.name}'")
                tensor = value
            start, end = tensor.byte_range()
            ranges.append((p.name, tensor._storage, start, end, annotation.mutable))
            names.append(p.name)
        self._tensor_names = names
        return ranges

    def grid(self, x: int, y: int = 1, z: int = 1) -> Launch:
        """Sets the grid explicitly (checked against the Mut partitions, if any)."""
        dims = (x, y, z)
        if not all(isinstance(d, int) and not isinstance(d, bool) and d >= 1 for d in dims):
            raise LaunchError(f"{self.kernel.name}: grid dims must be positive ints, got {list(dims)}")
        self._explicit_grid = dims
        return self

    def compile_options(self, *, opt_level: int = 3, lineinfo: bool = False,
                        hints: Mapping[str, Any] | None = None) -> Launch:
        """tileiras options for this launch (part of the compile cache key); ``hints``
        as for `entry`, over the entry's own."""
        try:
            parsed = KernelHints.parse(hints, f"{self.kernel.name}.compile_options: hints")
        except HintError as exc:
            raise LaunchError(str(exc)) from None
        self._options = CompileOptions(opt_level=opt_level, lineinfo=lineinfo, hints=parsed)
        return self

    def compile(self) -> Launch:
        """Compiles now (a warm-up); the launch stays pending."""
        spec, _ = self.specialization()
        if _backend.current() == "interpreter":
            self.kernel.kernel_ir(spec)
        else:
            from cutile._gpu import prepare

            prepare(self.kernel, spec, self._options)
        return self

    def _tensor_of(self, value: Any) -> Tensor:
        tensor: Tensor = value._tensor if isinstance(value, Partition) else value
        return tensor

    def specialization(self) -> tuple[Specialization, tuple[int, int, int]]:
        """The compile-time view of the arguments, and the launch grid."""
        key = _call_key(self.kernel, self.arguments, self._explicit_grid)
        found = self.kernel._calls.get(key) if key is not None else None
        if found is None:
            found = describe_call(self.kernel, self.arguments, self._explicit_grid)
            if key is not None:
                self.kernel._calls.put(key, found)
        return found

    # -- running: a Launch is a cuda_async DeviceOp ----------------------------------
    @property
    def op(self) -> cuda_async.DeviceOp[Any]:
        """This launch as a `cuda_async.DeviceOp`: it reads the storages of the
        read-only tensors and writes those of the Mut ones, and returns the tensor
        arguments. Combine it with ``then``, ``map``, `cutile.zip`, ``shared``..."""
        if self._op is None:
            reads: list[Any] = []
            writes: list[Any] = []
            mutable = {p.name for p in self.kernel.signature.mutable}
            for name in self._tensor_names:
                resource = self._tensor_of(self.arguments[name])._storage.resource
                (writes if name in mutable else reads).append(resource)
            self._op = cuda_async.DeviceOp.from_fn(self._execute, reads=reads, writes=writes,
                                                   name=self.description)
        return self._op

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
        spec, grid = self.specialization()
        if 0 in grid:
            self._done = True
            self._release()
            results = tuple(self.arguments[n] for n in self._tensor_names)
            return results[0] if len(results) == 1 else results  # nothing to compute
        values = {n: (self._tensor_of(v) if n in self._tensor_names else v) for n, v in self.arguments.items()}
        self._done = True
        self._release()  # the running op's own holds (cuda_async) take over from here
        if _backend.current() == "interpreter":
            from cutile._interpreter import Interpreter

            mutable = {p.name for p in self.kernel.signature.mutable}
            Interpreter(self.kernel.kernel_ir(spec), grid).run(values, mutable)
        else:
            from cutile._gpu import default_stream, enqueue

            target = default_stream() if stream is None else stream
            enqueue(self.kernel, spec, grid, values, self._options, target)
            if stream is None:
                target.synchronize()
        results = tuple(self.arguments[n] for n in self._tensor_names)
        return results[0] if len(results) == 1 else results

    def sync(self) -> Any:
        """Runs the launch to completion and returns its tensor arguments.

        One tensor argument is returned as itself; several as a tuple.
        """
        if self._done:
            raise OwnershipError(f"{self.description} has already run; its tensors were handed back")
        try:
            return _translated(lambda: self.op.sync())
        finally:
            self._done = True
            self._release()

    def sync_on(self, stream: Any) -> Any:
        """Runs the launch on ``stream`` (a `cuda_core.Stream`, or None for the host)
        and waits for it."""
        return _translated(lambda: self.op.sync_on(stream))

    def schedule(self, policy: Any = None) -> cuda_async.DeviceFuture[Any]:
        """Queues the launch without waiting; the future's ``result()`` (or ``await``)
        gives the tensors back."""
        return _translated(lambda: self.op.schedule(policy))  # type: ignore[no-any-return]

    def then(self, next_op: Any) -> cuda_async.DeviceOp[Any]:
        """The launch, then ``next_op`` (an op, a launch, or a function of the result
        that returns one), on the same stream."""
        if isinstance(next_op, Launch):
            return self.op.then(next_op.op)
        if isinstance(next_op, cuda_async.DeviceOp):
            return self.op.then(next_op)
        build = next_op
        return self.op.then(lambda result: _as_op(build(result)))

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
        return Graph(_translated(lambda: self.op.graph(name=name or self.description)))

    def __await__(self) -> Generator[Any, None, Any]:
        return _translated_await(self.op)

def _scalar_value(kernel: str, param: str, dtype: DType, value: Any) -> bool | int | float:
    """A scalar argument as a Python number, checked against its parameter's dtype."""
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
        if not dt.fits(number, dtype) and not dtype.is_bool:
            raise LaunchError(f"{kernel}: parameter '{param}' is a {dtype} scalar; {number} does not fit")
        return number
    if not isinstance(value, numbers.Real):
        raise LaunchError(f"{kernel}: parameter '{param}' is a {dtype} scalar, got {value!r}")
    return float(value)


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
            key.append((name, kind, value) if name in kernel._constant_params else (name, kind))
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
                if tensor.ndim and tensor.shape[-1] > 1 and tensor.strides[-1] != 1:
                    # The entry ABI fixes the innermost stride at 1 (both backends agree).
                    raise LaunchError(
                        f"{name}: parameter '{p.name}' has an innermost stride of {tensor.strides[-1]}; kernels "
                        "take tensors whose last dimension is contiguous (copy it first: api.copy)")
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
        raise TypeError(f"cutile.compile: expected a @cutile.entry kernel, got {type(kernel).__name__}")
    try:
        bound = kernel._python_signature.bind_partial(*args, **kwargs)
    except TypeError as exc:
        raise LaunchError(f"{kernel.name}: {exc}") from None
    # The grid does not enter a compile; a kernel without Mut tensors needs none here.
    grid = None if kernel.signature.mutable else (1, 1, 1)
    spec, _ = describe_call(kernel, dict(bound.arguments), grid)
    return kernel.compiled(spec, arch, CompileOptions(opt_level=opt_level))


def _translated(action: Callable[[], Any]) -> Any:
    """Runs ``action``; cuda_async's OwnershipError and GraphCaptureError become cutile's."""
    try:
        return action()
    except cuda_async.OwnershipError as exc:
        if isinstance(exc, OwnershipError):
            raise
        raise OwnershipError(str(exc)) from None
    except cuda_async.GraphCaptureError as exc:
        if isinstance(exc, GraphCaptureError):
            raise
        raise GraphCaptureError(str(exc)) from None


def _translated_await(op: cuda_async.DeviceOp[Any]) -> Generator[Any, None, Any]:
    try:
        return (yield from op.__await__())
    except cuda_async.OwnershipError as exc:
        if isinstance(exc, OwnershipError):
            raise
        raise OwnershipError(str(exc)) from None


def _as_op(item: Any) -> cuda_async.DeviceOp[Any]:
    op: cuda_async.DeviceOp[Any] = item.op if isinstance(item, Launch) else item
    return op


def zip_launches(*items: Any) -> cuda_async.DeviceOp[Any]:
    """Several launches (or ops) as one op whose result is the tuple of theirs; they
    may run on different streams."""
    return cuda_async.zip(*(_as_op(item) for item in items))


def _resource_of(tensor: Any) -> Any:
    if isinstance(tensor, Partition):
        tensor = tensor._tensor
    if not isinstance(tensor, Tensor):
        raise TypeError(f"expected a tensor, got {type(tensor).__name__}")
    return tensor._storage.resource


class Graph:
    """A captured CUDA graph of launches: ``launch()`` replays it (an op to sync or
    await); ``update(...)`` gives the next replay new input tensors of the same size."""

    def __init__(self, graph: cuda_async.CudaGraph[Any]) -> None:
        self._graph = graph

    @property
    def result(self) -> Any:
        return self._graph.result

    @property
    def node_count(self) -> int:
        return self._graph.node_count

    def launch(self) -> cuda_async.DeviceOp[Any]:
        """An op replaying the graph (after copying in the inputs given to `update`)."""
        return self._graph.launch()

    def update(self, *new_inputs: Any, replace: dict[Any, Any] | None = None) -> None:
        """New contents for the graph's read-only inputs, in order of first use
        (None keeps one), or ``replace={old_tensor: new_tensor}``."""
        self._graph.update(*(None if t is None else _resource_of(t) for t in new_inputs),  # type: ignore[arg-type]
                           replace={_resource_of(a): _resource_of(b) for a, b in (replace or {}).items()})

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


def _release_holds(holds: list[tuple[Storage, _Hold]]) -> None:
    for storage, hold in holds:
        storage.release(hold)
    holds.clear()
