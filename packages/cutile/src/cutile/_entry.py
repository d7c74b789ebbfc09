"""Entries: ``@cutile.entry`` (`Kernel`, whose call makes a `cutile.Launch`),
``@cutile.function``, and `compile` (ahead of time, without a launch).

A kernel holds its per-kernel caches: the compiler's (typed IR, compiled
kernels), the loaded kernels by specialization, the signature plans by call key,
and the last call's `ObjectBinding` (ARCHITECTURE.md names each layer).
"""

from __future__ import annotations

import collections
import functools
import inspect
import operator
import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Generic, Protocol, overload

from cutile._binding import (
    MISSING,
    BindingShape,
    ObjectBinding,
    SignaturePlan,
    call_key,
    describe_call,
    layout_key,
    scalar_value,
    shape_key,
)
from cutile import _gpu
from cutile._errors import ArgumentTypeError, LaunchError
from cutile._launch import Launch
from cutile._native import launch_bound
import cuda_async
from cutile_compiler import (
    CompiledKernel,
    CompileOptions,
    DeviceFunction,
    DType,
    HintError,
    KernelHints,
    KernelSignature,
    LRUCache,
    parse_arch,
    SignatureError,
    Specialization,
    TensorAnnotation,
    parse_signature,
)

if TYPE_CHECKING:
    # Defaults (PEP 696) keep a bare ``Kernel`` meaning ``Kernel[..., Any]``.
    from typing_extensions import ParamSpec, TypeVar

    from cutile._gpu import LoadedKernel
    from cutile_compiler import KernelIR

    _P = ParamSpec("_P", default=...)
    _R = TypeVar("_R", default=Any)
else:
    from typing import ParamSpec, TypeVar

    _P = ParamSpec("_P")
    _R = TypeVar("_R")
_Q = ParamSpec("_Q")
_CACHE_SIZE = 256  # specializations kept per kernel
# Object bindings kept per kernel (by layout key: the memory and layouts of a call; a
# model's layers each pass their own weights: a decode step calls one GEMV kernel over
# a few hundred), and binding shapes (by shape key: the layouts alone).
_BINDINGS = 1024
_SHAPES = 256


class Kernel(Generic[_P, _R]):
    """A ``@cutile.entry`` function. Calling it returns a lazy `Launch`.

    To a type checker it is ``Kernel[P, R]``: ``P`` the parameters of a launch and
    ``R`` what its ``.sync()`` returns. Without cutile's mypy plugin ``P`` is the
    function's own parameters and ``R`` is ``Any``; with it (``plugins =
    cutile.mypy_plugin``), ``P`` says what a launch takes (a `Tensor`, a
    `Partition` for a ``Mut`` tensor, numbers) and ``R`` the tensors it gives back.

    Once the native module is loaded (`cutile._native`), its C function is the
    class's call slot: a call with the last call's objects is answered in C; any
    other goes to ``_call``. ``_native_binding`` (a slot, which that C reads) is the
    kernel's native binding, or None.
    """

    __slots__ = ("_native_binding", "__dict__", "__weakref__")

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
        # ... and every one may be passed by keyword too: a call `_values_in_order` takes
        # binds as inspect would bind it.
        self._keywords_bind = all(p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
                                  for p in self._python_signature.parameters.values())
        self._tensor_params = tuple((p.name, p.annotation.mutable) for p in self.signature.parameters
                                    if isinstance(p.annotation, TensorAnnotation))
        self._mutable_names = frozenset(name for name, mutable in self._tensor_params if mutable)
        # How a hold of each tensor parameter is named in others' messages, and in its own.
        self._hold_labels = {name: (f"{self._launch_description} (parameter '{name}')", f"{self.name}: parameter '{name}'")
                             for name, _ in self._tensor_params}
        self._scalar_params = {p.name: p.annotation for p in self.signature.parameters
                               if isinstance(p.annotation, DType)}
        self._constant_params = frozenset(p.name for p in self.signature.parameters if p.is_constant)
        self._constant_flags = tuple(name in self._constant_params for name in self._param_names)
        # Per parameter in order: 0 a tensor, 1 a constant, 2 a run-time scalar (`ObjectBinding.checks`);
        # where the tensors are among them, and what a run returns of those values.
        tensor_names = {name for name, _ in self._tensor_params}
        self._param_kinds = tuple(0 if name in tensor_names else 1 if name in self._constant_params else 2
                                  for name in self._param_names)
        self._tensor_positions = tuple(self._param_names.index(name) for name, _ in self._tensor_params)
        self._results_of: Callable[[tuple[Any, ...]], Any] = (
            operator.itemgetter(*self._tensor_positions) if self._tensor_positions else (lambda values: ()))
        self._scalar_positions = tuple((self._param_names.index(name), name, dtype)
                                       for name, dtype in self._scalar_params.items())
        # Per-kernel caches, bounded: a long-running program that meets many shapes
        # keeps the most recent specializations (ARCHITECTURE.md lists the layers).
        # The compiler: (spec) -> typed IR, (spec, arch, options) -> compiled kernel. Its
        # module (the pipeline and the warm start) loads with the first kernel, not with
        # cutile; the front end and the lowering load with the first compile that needs them.
        from cutile_compiler import KernelCompiler

        self._compiler: KernelCompiler = KernelCompiler(function, self.signature, unsafe=unsafe, hints=self.hints,
                                                        cache_size=_CACHE_SIZE)
        # (spec, options, device ordinal) -> the compiled kernel loaded on the GPU (`_gpu.LoadedKernel`).
        self._loaded_kernels: LRUCache[tuple[Specialization, CompileOptions, int], LoadedKernel] = LRUCache(_CACHE_SIZE)
        # Call key (dtypes, shapes, strides, alignment, constants; see `call_key`) ->
        # its plan (spec, grid, loaded kernel): a call with another key's arguments
        # skips describing them and finding the loaded kernel again.
        self._plans: LRUCache[tuple[Any, ...], SignaturePlan] = LRUCache(4 * _CACHE_SIZE)
        # Layout key (storages, offsets, shapes, strides, dtypes, partition layouts,
        # constants, scalar types; see `layout_key`) -> what a call with them implies: a
        # call with new view objects over the same memory (a ``.T``, a reshape, a new
        # partition per call) skips every check and computation that depends only on them.
        self._bindings: LRUCache[tuple[Any, ...], ObjectBinding] = LRUCache(_BINDINGS)
        # (key, binding) of the bindings whose memory was freed since (queued by the
        # bindings; dropped from ``_bindings`` at its next change).
        self._dead_bindings: collections.deque[tuple[tuple[Any, ...], ObjectBinding]] = collections.deque()
        # Shape key (the layout key without the memory; see `shape_key`) -> what the
        # bindings of such calls share: a call with new memory in the layouts of an
        # earlier call (a step's fresh intermediates) makes its binding from it.
        self._shapes: LRUCache[tuple[Any, ...], BindingShape] = LRUCache(_SHAPES)
        # The last new call's binding, matched by its objects' identity (cheaper than a
        # key): a loop that passes the same objects again.
        # (Its C copy, once it has launched on the GPU, is ``_native_binding``.)
        self._object_binding: ObjectBinding | None = None
        self._native_binding: Any = None
        self._warned_never_run = False  # a launch freed unrun warns once per kernel

    def __repr__(self) -> str:
        return f"<cutile kernel {self.name}{' (unsafe)' if self.unsafe else ''}>"

    if TYPE_CHECKING:
        def __call__(self, *args: _P.args, **kwargs: _P.kwargs) -> Launch[_R]: ...
    else:
        def __call__(self, *args, **kwargs):
            # (Once the native module is loaded, its C function is the call slot instead.)
            launch = self._call(*args, **kwargs)
            caller = sys._getframe(1)  # where the launch is made (for the warning if it never runs)
            launch._site_code, launch._site_lasti = caller.f_code, caller.f_lasti
            return launch

    def _call(self, *args: Any, **kwargs: Any) -> Launch[Any]:
        plain = not kwargs and len(args) == len(self._param_names) and self._plain_positional
        # Every parameter's value in order (constants by keyword and inferred ones left
        # out, a GEMM's ``BK=64``, are `MISSING`); None: a call the slow path must see.
        values = args if plain else self._values_in_order(args, kwargs)
        key = None
        if values is not None:
            binding = self._object_binding
            if binding is not None and binding.matches(values):  # the last new call's very objects
                if binding.unarmed and _gpu.arm_prepared(self, binding):  # called again: worth arming
                    launch = launch_bound(self, binding, values)
                    if launch is not None:
                        return launch  # type: ignore[no-any-return]
                return Launch(self, None, binding, self._checked_scalars(values) if self._scalar_positions else values)
            key = layout_key(self, values)
            try:
                binding = self._bindings.get(key)
            except TypeError:  # an unhashable constant: the slow path sees it
                key = binding = None
            if binding is not None and not binding.dead:  # new objects over the same memory and layouts
                if binding.unarmed:  # called again: worth arming
                    _gpu.arm_prepared(self, binding)
                launch = launch_bound(self, binding, values)
                if launch is not None:
                    return launch  # type: ignore[no-any-return]
                return Launch(self, None, binding, self._checked_scalars(values) if self._scalar_positions else values)
            if key is not None:
                shape = self._shapes.get(shape_key(self, values))
                if shape is not None:  # new memory in the layouts of an earlier call
                    return self._call_in_shape(shape, key, values)
        if plain:
            arguments = dict(zip(self._param_names, args))
        elif values is not None and self._keywords_bind:  # (what bind_partial gives such a call)
            arguments = {name: value for name, value in zip(self._param_names, values) if value is not MISSING}
        else:
            try:
                bound = self._python_signature.bind_partial(*args, **kwargs)
            except TypeError as exc:
                raise LaunchError(f"{self.name}: {exc}") from None
            arguments = dict(bound.arguments)
        for name, dtype in self._scalar_params.items():
            if name in arguments:
                arguments[name] = scalar_value(self.name, name, dtype, arguments[name])
        launch = Launch(self, arguments)
        binding = launch._binding
        if key is not None:
            assert values is not None
            self._keep(key, binding)
            # (Its kernel loaded already: the run may be C's. In a batch a launch over new
            # memory runs in Python: its binding is armed if it is called again.)
            if _gpu.arm_at_call(self, binding, arguments, arm=cuda_async.current_batch() is None):
                launch._attach(binding, tuple(arguments.get(name, MISSING) for name in self._param_names))
            if binding.loaded is not None:  # prepared: later calls in its layouts over other memory start here
                self._shapes.put(shape_key(self, values), BindingShape(self, binding, values))
        return launch

    def _call_in_shape(self, shape: BindingShape, key: tuple[Any, ...], values: tuple[Any, ...]) -> Launch[Any]:
        """The launch of a call with every parameter's value in order (``values``, of
        layout key ``key``) over memory no binding holds, in the layouts of ``shape``."""
        if self._scalar_positions:
            values = self._checked_scalars(values)
        binding = shape.bind(self, values)  # (checks what depends on the memory)
        self._keep(key, binding)
        self._object_binding = binding
        self._native_binding = None  # (the previous binding's)
        arguments = {name: value for name, value in zip(self._param_names, values) if value is not MISSING}
        if _gpu.arm_at_call(self, binding, arguments, arm=cuda_async.current_batch() is None, plan=shape.plan):
            launch = launch_bound(self, binding, values)
            if launch is not None:
                return launch  # type: ignore[no-any-return]
        return Launch(self, None, binding, values)

    def _keep(self, key: tuple[Any, ...], binding: ObjectBinding) -> None:
        """Keeps a new binding under its layout key, after dropping the bindings whose
        memory was freed (they match nothing, and would crowd out live ones)."""
        dead = self._dead_bindings
        bindings = self._bindings
        while dead:
            old_key, old = dead.popleft()
            if bindings.get(old_key) is old:
                bindings.pop(old_key)
        bindings.put(key, binding)
        binding.home = (dead, key)

    def _checked_scalars(self, args: tuple[Any, ...]) -> tuple[Any, ...]:
        """Every parameter's value in order (`MISSING` for an inferred constant left
        out), its scalars checked and converted."""
        values = list(args)
        for position, name, dtype in self._scalar_positions:
            values[position] = scalar_value(self.name, name, dtype, values[position])
        return tuple(values)

    def _positional_arguments(self, args: tuple[Any, ...]) -> dict[str, Any]:
        """Every argument by name, from a call that passed all of them by position,
        its scalars checked and converted."""
        arguments = {name: value for name, value in zip(self._param_names, args) if value is not MISSING}
        for name, dtype in self._scalar_params.items():
            arguments[name] = scalar_value(self.name, name, dtype, arguments[name])
        return arguments

    def _values_in_order(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...] | None:
        """Every parameter's value in signature order (`MISSING` where not given), for a
        call of plain positional arguments first and keywords after; None for any other
        call (too many arguments, an unknown or repeated name: the slow path says which)."""
        names = self._param_names
        if not self._plain_positional or len(args) > len(names):
            return None
        rest = names[len(args):]
        if not all(name in rest for name in kwargs):
            return None
        return args + tuple(kwargs.get(name, MISSING) for name in rest)

    def plan_for(self, arguments: dict[str, Any], explicit_grid: tuple[int, int, int] | None = None) -> SignaturePlan:
        """The plan of a call with these arguments (cached per call signature)."""
        key = call_key(self, arguments, explicit_grid)
        plan = self._plans.get(key) if key is not None else None
        if plan is None:
            plan = SignaturePlan(*describe_call(self, arguments, explicit_grid))
            if key is not None:
                self._plans.put(key, plan)
        return plan

    def clear_cache(self) -> None:
        """Forgets this kernel's compiled and loaded code, its signature plans and bindings in this
        process (the disk cache stays); the next launch compiles or loads again."""
        self._compiler.clear()
        self._loaded_kernels = LRUCache(_CACHE_SIZE)
        self._plans = LRUCache(4 * _CACHE_SIZE)
        self._bindings = LRUCache(_BINDINGS)
        self._dead_bindings = collections.deque()
        self._shapes = LRUCache(_SHAPES)
        self._object_binding = None
        self._native_binding = None

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


class KernelDecorator(Protocol):
    """What ``cutile.entry(unsafe=..., hints=...)`` returns: applied to a function, the kernel."""

    def __call__(self, function: Callable[_Q, Any], /) -> Kernel[_Q, Any]: ...


@overload
def entry(function: Callable[_Q, Any], /) -> Kernel[_Q, Any]: ...
@overload
def entry(*, unsafe: bool = False, hints: Mapping[str, Any] | None = None) -> KernelDecorator: ...


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

