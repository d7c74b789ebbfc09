"""Launches: the lazy `Launch` a kernel's call returns, `LaunchNeverRunWarning`,
and `run_plan`, which runs a call on the interpreter or queues it on the GPU.

A launch checks everything before any work: argument kinds, dtypes, ranks and
static dims (naming the parameter), ownership (nothing consumed, nothing held by
another pending launch, no memory passed twice where one copy is written), and
the grid (inferred from the Mut partitions, which must agree).
"""

from __future__ import annotations

import dataclasses
import sys
import warnings
from collections.abc import Callable, Generator, Mapping
from typing import TYPE_CHECKING, Any, Generic

import cuda_async
import cuda_core
from cutile import _backend, _gpu, _torch_streams
from cutile._binding import (
    MISSING,
    ObjectBinding,
    SignaturePlan,
    check_overlaps,
    check_strides,
    wrong_mut_argument,
    wrong_read_argument,
)
from cutile._errors import CutileError, GraphCaptureError, LaunchError, OwnershipError
from cutile._graphs import Graph, dependent
from cutile._interop import _order_after
from cutile import _native
from cutile._tensor import Partition, Storage, Tensor, overlaps_itself
from cutile_compiler import DEFAULT_OPTIONS, CompileOptions, HintError, KernelHints, Specialization

if TYPE_CHECKING:
    from typing_extensions import TypeVar  # (its default keeps a bare ``Launch`` meaning ``Launch[Any]``)

    from cutile._entry import Kernel

    _R = TypeVar("_R", default=Any)
else:
    from typing import TypeVar

    _R = TypeVar("_R")
_T = TypeVar("_T")


class Launch(Generic[_R]):
    """One pending launch of a kernel; it holds its tensor arguments until it runs.

    ``.sync()`` runs it and returns the tensor arguments (in signature order);
    ``.grid(x, y, z)`` sets the grid when no Mut tensor decides it.

    The native path makes launches too, setting the slots below (the fields its C
    reads and writes); what it does not set has a class default here, so such a
    launch is complete as made. Once the native module is loaded, ``sync`` and the
    finalizer are its C functions (`cutile._native`).
    To a type checker it is ``Launch[R]``, ``R`` what ``.sync()`` returns (see `Kernel`).
    """

    # kernel, binding; the native binding while the native sync may run the launch;
    # every parameter's value in order (a launch made or attached there); run (or
    # cancelled); the claim of its pending holds until its op takes them; made but
    # neither run nor handed to an op (freed so, it warns); where it was made.
    __slots__ = ("kernel", "_binding", "_fast", "_args", "_done", "_claim", "_pending", "_site_code", "_site_lasti",
                 "__dict__", "__weakref__")

    _explicit_grid: tuple[int, int, int] | None = None
    _options: CompileOptions = DEFAULT_OPTIONS
    _op: cuda_async.DeviceOp[Any] | None = None
    _plan: SignaturePlan | None = None  # None: the binding's, unless the grid is explicit
    _cancelled = False

    def __init__(self, kernel: Kernel, arguments: dict[str, Any] | None, binding: ObjectBinding | None = None,
                 values: tuple[Any, ...] | None = None) -> None:
        """A launch of ``kernel`` over ``arguments`` (by name), or, with ``binding``
        (the kernel's last call's objects), over ``values``: every parameter's value
        in order, scalars checked (the arguments by name are made on first use)."""
        self.kernel = kernel
        if binding is None:
            assert arguments is not None
            self._arguments = arguments
            ranges = self._checked_ranges()
            binding = ObjectBinding(kernel, arguments, ranges)
            kernel._object_binding = binding
            kernel._native_binding = None  # the native path's binding was the previous one's
        else:
            assert values is not None
            self._values = values
            # The same objects as the binding's: only what can change since is checked.
            for position in binding.tensor_positions:
                value = values[position]
                if value._consumed_by is not None:  # raises, naming the consumer
                    value._live(f"{kernel.name}: parameter '{kernel._param_names[position]}'")
        self._binding = binding
        # The tensors' bytes are held from here (a conflict with another launch, or
        # with a running op such as a scheduled launch or a replay, refuses the call
        # now, naming both parameters) until the launch's op takes them over.
        plan = binding.claim_plan
        cuda_async.claim(plan)
        self._claim: cuda_async.ClaimPlan | None = plan
        self._fast: Any = None
        self._args: Any = None  # (a tuple where set)
        self._done = False
        # Until it runs, joins an op, or is cancelled; the kernel's call (C's or
        # Python's) records where it was made.
        self._pending = True
        self._site_code: Any = None
        self._site_lasti = -1

    def _hand_over_claim(self) -> cuda_async.ClaimPlan | None:
        """The launch's pending holds, for its op's job to take over (once)."""
        claim, self._claim = self._claim, None
        return claim

    def _release(self) -> None:
        """Gives back the holds this launch took when it was made, if its op has not
        taken them over."""
        claim = self._claim
        if claim is not None:
            self._claim = None
            claim.release()

    def __del__(self) -> None:
        # A launch dropped without running holds nothing: it gives the claim back
        # (queued), and one freed while pending warns. (The native module puts its C
        # finalizer in place of this.)
        try:
            claim, pending = self._claim, self._pending
        except AttributeError:  # (its __init__ raised before it claimed anything)
            return
        if claim is not None:
            claim.drop()
        if pending:
            warn_never_run(self.kernel, self._site_code, self._site_lasti)

    def sync(self) -> _R:
        """Runs the launch to completion and returns its tensor arguments.

        One tensor argument is returned as itself; several as a tuple.
        (Once the native module is loaded, its C method stands in for this one: it
        runs a launch in a batch's steady state or on idle memory and hands every
        other case to `_sync_slow`.)
        """
        return self._sync_slow()  # type: ignore[no-any-return]

    def _attach(self, binding: ObjectBinding, values: tuple[Any, ...]) -> None:
        """Lets the native sync run the launch, made by the Python path over
        ``binding``'s claim, now armed (`cutile._gpu.arm_at_call`): every parameter's
        value in order is ``values``. Nothing changes once it has run or changed."""
        if self._fast is None and self._claim is binding.claim_plan and not self._done:
            self._fast, self._args = binding.fast, values

    def _detach(self) -> None:
        """Leaves the launch to the Python path (what it runs changes)."""
        self._fast = None

    @property
    def arguments(self) -> dict[str, Any]:
        """The call's arguments by parameter name."""
        state = self.__dict__
        found: dict[str, Any] | None = state.get("_arguments")
        if found is None:
            values = state.get("_values")
            if values is not None:  # made with the binding's objects: every value in order
                found = {name: value for name, value in zip(self.kernel._param_names, values) if value is not MISSING}
            else:  # made by the native path: its positional arguments
                found = self.kernel._positional_arguments(self._args)
            self._arguments = found
        return found

    def _values_in_order(self) -> tuple[Any, ...]:
        """Every parameter's value in order (`MISSING` where not given)."""
        values: tuple[Any, ...] | None = self.__dict__.get("_values")
        if values is None and self._args is not None:
            # Made in C (or attached there): every value in order, the scalars of the
            # binding's types and checked in C (what their conversion gives back as is).
            values = self._values = self._args
        if values is None:
            arguments = self.arguments
            values = self._values = tuple(arguments.get(name, MISSING) for name in self.kernel._param_names)
        return values

    @property
    def description(self) -> str:
        return self.kernel._launch_description

    def _checked_ranges(self) -> list[tuple[str, Storage, int, int, bool]]:
        """The tensor arguments' byte ranges, checked for kinds and for memory passed
        twice where one copy is written."""
        ranges = self._argument_ranges()
        check_overlaps(self.kernel.name, ranges)
        return ranges

    def _argument_ranges(self, *, live: bool = True) -> list[tuple[str, Storage, int, int, bool]]:
        """(parameter, storage, byte range, written) of each tensor argument, after
        checking its kind and (with ``live``) that the objects are not consumed."""
        name = self.kernel.name
        arguments = self.arguments
        ranges: list[tuple[str, Storage, int, int, bool]] = []
        for param, mutable in self.kernel._tensor_params:
            value = arguments.get(param, MISSING)
            kind = type(value)
            if mutable:
                if kind is not Partition:
                    wrong_mut_argument(self.kernel, param, value)
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
                    wrong_read_argument(self.kernel, param, value)
                if live and value._consumed_by is not None:
                    value._live(f"{name}: parameter '{param}'")
                tensor = value
            check_strides(name, param, tensor)
            start, end = tensor.byte_range()
            ranges.append((param, tensor._storage, start, end, mutable))
        return ranges

    def grid(self, x: int, y: int = 1, z: int = 1) -> Launch[_R]:
        """Sets the grid explicitly (checked against the Mut partitions, if any)."""
        self._detach()  # what it runs changes: the Python path runs it
        dims = (x, y, z)
        if not all(isinstance(d, int) and not isinstance(d, bool) and d >= 1 for d in dims):
            self._pending = False  # the error is what the caller hears of this launch
            raise LaunchError(f"{self.kernel.name}: grid dims must be positive ints, got {list(dims)}")
        self._explicit_grid = dims
        self._plan = None
        return self

    def compile_options(self, *, opt_level: int = 3, lineinfo: bool = False,
                        hints: Mapping[str, Any] | None = None, dependent_launch: bool = False) -> Launch[_R]:
        """tileiras options for this launch (part of the compile cache key); ``hints``
        as for `entry`, over the entry's own; ``dependent_launch``: this launch alone
        as `cutile.dependent_launches` makes every launch in its block."""
        self._detach()  # what it runs changes: the Python path runs it
        try:
            parsed = KernelHints.parse(hints, f"{self.kernel.name}.compile_options: hints")
            if not isinstance(dependent_launch, bool):
                raise LaunchError(f"{self.kernel.name}.compile_options: parameter 'dependent_launch' must be a bool, "
                                  f"got {dependent_launch!r}")
        except (HintError, LaunchError) as exc:
            self._pending = False
            raise LaunchError(str(exc)) from None
        self._options = CompileOptions(opt_level=opt_level, lineinfo=lineinfo, hints=parsed,
                                       dependent_launch=dependent_launch)
        self._plan = None
        return self

    def _options_now(self) -> CompileOptions:
        """The launch's options, for a programmatic dependent launch inside a
        `cutile.dependent_launches` block."""
        options = self._options
        if options.dependent_launch or not dependent.get():
            return options
        found = _DEPENDENT_OPTIONS.get(options)
        if found is None:
            found = _DEPENDENT_OPTIONS[options] = dataclasses.replace(options, dependent_launch=True)
        return found

    def compile(self) -> Launch[_R]:
        """Compiles now (a warm-up); the launch stays pending: run it, or `cancel` it."""
        spec, _ = self.specialization()
        try:
            if _backend.current() == "interpreter":
                self.kernel.kernel_ir(spec)
            else:
                _gpu.prepare(self.kernel, self.plan(), self._options_now())
        except CutileError:
            self._pending = False
            raise
        return self

    def specialization(self) -> tuple[Specialization, tuple[int, int, int]]:
        """The compile-time view of the arguments, and the launch grid."""
        plan = self.plan()
        return plan.spec, plan.grid

    def plan(self) -> SignaturePlan:
        """The specialization and grid of this call, and (once run on the GPU) its
        loaded kernel: shared by every call with the same argument signature."""
        plan = self._plan
        if plan is None and self._explicit_grid is None:
            plan = self._binding.plan
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
    def op(self) -> cuda_async.DeviceOp[_R]:
        """This launch as a `cuda_async.DeviceOp`: it reads the storages of the
        read-only tensors and writes those of the Mut ones, and returns the tensor
        arguments. Combine it with ``then``, ``map``, `cutile.zip`, ``shared``..."""
        self._pending = False  # the op decides whether it runs
        if self._op is None:
            self._op = cuda_async.FnOp.from_accesses(
                self._execute, self._binding.accesses, name=self.kernel._launch_description,
                views=self._graph_views, claim_from=self._hand_over_claim)
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

    def __device_op__(self) -> cuda_async.DeviceOp[_R]:
        """How cuda_async's combinators see a launch (e.g. returned from ``then``)."""
        return self.op

    def _execute(self, stream: Any) -> Any:
        """Runs the launch: eagerly on the interpreter (``stream`` is then ignored),
        queued on ``stream`` on the GPU (None: on cutile's stream, waited for)."""
        plan = self.plan()
        values = self._values_in_order()
        self._done = True
        self._op = None  # the op refers back to this launch: leave no cycle behind
        binding = self._binding
        torch_stream = None
        if binding.torch_ordered and stream is not None and binding.device is not None and not cuda_async.is_capturing():
            # On a stream other than torch's current one (a batch's, a policy's): it
            # waits for torch's work on the inputs, and torch's stream for the kernel.
            torch_stream = _torch_streams.current_stream(binding.device)
            if int(torch_stream.handle) == int(stream.handle):
                torch_stream = None
            else:
                _order_after(torch_stream, stream)
        options = self._options_now()
        if (stream is not None and plan is binding.plan and options is DEFAULT_OPTIONS
                and 0 not in plan.grid and _backend.current() == "gpu"):
            fast = binding.fast  # an op's launch: queued in C when its binding is armed (for this device)
            loaded = binding.loaded
            if fast is None or loaded is None or stream.device is not loaded.device or not _native.module.enqueue(
                    fast, values, int(stream.handle)):
                _gpu.enqueue_bound(self.kernel, binding, values, stream)  # (run_plan's case, without names)
        else:
            run_plan(self.kernel, plan, self.arguments, options, stream, binding)
        if torch_stream is not None:
            _order_after(stream, torch_stream)
        return binding.results(values)

    def _sync_slow(self) -> Any:
        ordinal = self._binding.device
        if ordinal is not None and self._binding.torch_ordered:
            return self._sync_torch_ordered(ordinal)
        if ordinal is not None:  # on a GPU: on its tensors' device's streams
            policy = _gpu.policy_for(ordinal)
            if policy is not None:
                with cuda_async.using_policy(policy):
                    return self._sync_here()
        return self._sync_here()

    def _sync_torch_ordered(self, ordinal: int) -> Any:
        """A launch on torch's memory: on torch's current stream (see `_torch_streams`)."""
        if cuda_async.is_capturing():  # cutile's own graph records it on its capture stream
            return self._sync_here()
        stream = _torch_streams.current_stream(ordinal)
        capturing = _torch_streams.is_capturing(stream)
        if capturing or (_torch_streams.queue_only() and self._binding.torch_only):
            return self._queue_on_torch_stream(stream, capturing)
        policy = _torch_streams.single_stream_policy(stream)
        if _torch_streams.queue_only():
            # Queued, not waited for: the dropped future keeps cutile's own memory
            # alive until the device is done, and later ops wait for it.
            self.schedule(policy)
            return self._binding.results(self._values_in_order())
        with cuda_async.using_policy(policy):
            return self._sync_here()

    def _queue_on_torch_stream(self, stream: cuda_core.Stream, capturing: bool) -> Any:
        """Queues the launch on torch's ``stream`` (into the CUDA graph torch captures
        there, when ``capturing``) and nothing else: no event, no wait, no job for
        cuda_async's poller to query (none is legal during a capture). The memory is
        torch's, ordered by its stream and kept alive by its allocator, so the holds
        end here."""
        self._pending = False
        if self._done:
            return self._sync_here()  # (raises: run or cancelled)
        if capturing and not self._binding.torch_only:
            self._done = True
            self._release()
            others = [param for param, _ in self.kernel._tensor_params
                      if not _storage_of(self.arguments[param]).torch_ordered]
            raise GraphCaptureError(
                f"{self.description}: torch is capturing its current stream into a CUDA graph, and a launch "
                f"recorded there may only use torch's memory; parameter(s) {', '.join(repr(p) for p in others)} "
                "hold cutile's (make them with torch, or inside a cutile.torch.custom_op)")
        try:
            return self._execute(stream)
        finally:
            self._done = True
            self._release()

    def _sync_here(self) -> Any:
        self._pending = False
        if self._done:
            if self._cancelled:
                raise OwnershipError(f"{self.description} was cancelled; it cannot run")
            raise OwnershipError(f"{self.description} has already run; its tensors were handed back")
        claim = self._claim
        if claim is not None and self._op is None:
            # The usual states of a loop of launches, run without an op object as
            # cuda_async's C API runs them natively: a batch's steady state, or a
            # synchronous run whose memory is idle (the run's holds replace the claim).
            accesses = self._binding.accesses
            active = cuda_async.begin_batch_step(accesses, claim)
            if active is not None:
                self._claim = None
                try:
                    result = self._execute(active.stream)
                finally:
                    self._done = True
                active.commit_step(accesses)
                return result
            run = self._binding.run_holds
            stream = cuda_async.begin_idle_run(accesses, claim, run)
            if stream is not None:
                self._claim = None
                return self._run_idle(stream, run)
        try:
            return self.op.sync()
        finally:
            self._done = True
            self._release()

    def _run_idle(self, stream: cuda_core.Stream, run: cuda_async.ClaimPlan) -> Any:
        """Runs the launch on ``stream`` and waits for it, holding ``run``'s holds
        (`cuda_async.begin_idle_run`): what the job of ``self.op.sync()`` would do."""
        ran = False
        try:
            result = self._execute(stream)
            ran = True
            stream.synchronize()
            return result
        except BaseException:
            if not ran:  # as a failed job: wait for what was enqueued, the first error wins
                try:
                    stream.synchronize()
                except cuda_core.CudaError:
                    pass
            raise
        finally:
            self._done = True
            cuda_async.end_idle_run(run, stream, ran=ran)

    def cancel(self) -> None:
        """Drops the launch on purpose, without running it: its tensors' holds are
        given back now and it can no longer run. (A launch freed without having run,
        been scheduled or joined an op warns `LaunchNeverRunWarning`.)"""
        self._detach()
        if self._done or self._op is not None:
            raise OwnershipError(f"{self.description} has run or is part of an op; it cannot be cancelled")
        self._pending = False
        self._done = True
        self._cancelled = True
        self._release()

    def sync_on(self, stream: Any) -> _R:
        """Runs the launch on ``stream`` (a `cuda_core.Stream`, or None for the host)
        and waits for it."""
        return self.op.sync_on(stream)

    def schedule(self, policy: Any = None) -> cuda_async.DeviceFuture[_R]:
        """Queues the launch without waiting; the future's ``result()`` (or ``await``)
        gives the tensors back. Without ``policy``, a launch on another device than
        the current one runs on its tensors' device's stream pool."""
        ordinal = self._binding.device
        if policy is None and ordinal is not None and self._binding.torch_ordered:
            stream = _torch_streams.current_stream(ordinal)
            if _torch_streams.is_capturing(stream):
                self._pending = False
                self._release()
                raise GraphCaptureError(
                    f"{self.description}: .schedule() while torch captures its current stream; use .sync(), "
                    "which records the launch into torch's graph")
            policy = _torch_streams.single_stream_policy(stream)
        if policy is None and ordinal is not None:
            policy = _gpu.policy_for(ordinal)
        return self.op.schedule(policy)

    def then(self, next_op: Callable[[_R], cuda_async.DeviceOp[_T] | cuda_async.PresentsDeviceOp[_T]]
             | cuda_async.DeviceOp[_T] | cuda_async.PresentsDeviceOp[_T]) -> cuda_async.DeviceOp[_T]:
        """The launch, then ``next_op`` (an op, a launch, or a function of the result
        that returns one), on the same stream."""
        return self.op.then(next_op)

    def map(self, function: Callable[[_R], _T]) -> cuda_async.DeviceOp[_T]:
        """The launch with a host function applied to its result."""
        return self.op.map(function)

    def shared(self) -> cuda_async.DeviceOp[_R]:
        """The launch as an op that runs once however many ops consume it."""
        return self.op.shared()

    def graph(self, name: str | None = None) -> Graph:
        """This launch captured into a CUDA graph (recorded, not run); the kernel is
        compiled and loaded first, outside the capture."""
        self.compile()
        return Graph(self.op.graph(name=name or self.description))

    def __await__(self) -> Generator[Any, None, _R]:
        return self.op.__await__()


# Launch options -> the same with dependent_launch (made once per distinct options:
# few, the defaults and the hints of the library's configs).
_DEPENDENT_OPTIONS: dict[CompileOptions, CompileOptions] = {}


def _storage_of(value: Any) -> Storage:
    return (value._tensor if type(value) is Partition else value)._storage


class LaunchNeverRunWarning(RuntimeWarning):
    """A launch was freed without having run (like a coroutine never awaited): its
    outputs keep their old values. Run it (``.sync()``, ``.schedule()``, ``await``),
    make it part of an op (``then``, `cutile.zip`, ...), or drop it on purpose with
    ``.cancel()``. Warned once per kernel, at the line of the call that made it."""


def warn_never_run(kernel: Any, code: Any, lasti: int, _sys: Any = sys, _warnings: Any = warnings) -> None:
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




def run_plan(kernel: Kernel, plan: SignaturePlan, arguments: dict[str, Any], options: CompileOptions,
             stream: Any, binding: ObjectBinding | None = None) -> None:
    """Runs ``kernel`` as ``plan`` says over ``arguments`` (partitions or tensors):
    at once on the interpreter (``stream`` is then ignored), queued on ``stream`` on
    the GPU (None: on cutile's stream, waited for). ``binding``: the arguments'
    binding, whose packed parameters a GPU launch with default options reuses."""
    if 0 in plan.grid:
        return  # nothing to compute
    if _backend.current() == "interpreter":
        from cutile._interpreter import Interpreter

        values = {n: (v._tensor if type(v) is Partition else v) for n, v in arguments.items()}
        kernel_ir = kernel.kernel_ir(plan.spec)
        if options.dependent_launch:  # (run one after another, but refused as on the GPU)
            from cutile_compiler import reads_before_wait  # (the lowering: loaded at first use)

            _gpu.check_reads_before_wait(kernel.name, reads_before_wait(kernel_ir), values)
        Interpreter(kernel_ir, plan.grid).run(values, kernel._mutable_names)
        return
    if stream is None:
        ordinal = binding.device if binding is not None else None
        if ordinal is None:
            ordinal = _gpu.launch_ordinal(kernel.name, {n: (v._tensor if type(v) is Partition else v)
                                                        for n, v in arguments.items()})
        target = _gpu.default_stream(ordinal)
    else:
        target = stream
    if binding is not None and plan is binding.plan and options is DEFAULT_OPTIONS:
        _gpu.enqueue_bound(kernel, binding, tuple(arguments.get(name, MISSING) for name in kernel._param_names), target)
    else:
        values = {n: (v._tensor if type(v) is Partition else v) for n, v in arguments.items()}
        _gpu.enqueue(kernel, plan, values, options, target)
    if stream is None:
        target.synchronize()

