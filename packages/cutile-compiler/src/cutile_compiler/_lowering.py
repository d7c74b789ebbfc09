"""Lowering: the typed kernel IR to a Tile IR module (``cutile_ir``).

Each op's own ``lower`` method (in ``_opdefs``) emits its Tile IR; this module
holds what they share: the entry's parameter layout (`KernelABI`), value and
type mapping, source locations, and memory tokens.

Memory ordering in Tile IR is by tokens. A safe kernel's tensors cannot alias
(launches refuse it), so accesses to different tensors need no ordering, and
read-only tensors are never written: their loads take no token. Each writable
tensor gets one token chain, threaded through loops and ifs that touch it, so
that its loads and stores stay in program order while everything else is free
to overlap.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import cutile_ir as ir

from cutile_compiler import _dtypes as dt
from cutile_compiler._compiled import AbiArg as AbiArg  # (the entry ABI this module computes)
from cutile_compiler._errors import SourceLocation, TileCompilerError
from cutile_compiler._hints import KernelHints
from cutile_compiler._ir import Block, KernelIR, Operation, Value
from cutile_compiler._toolchain import parse_arch
from cutile_compiler._types import KType, TensorType, TileType

_T = TypeVar("_T")


def element_type(dtype: dt.DType) -> ir.ScalarType:
    return dtype.ir_type


def tile_type(ktype: KType) -> ir.TileType:
    if not isinstance(ktype, TileType):
        raise TypeError(f"{ktype} is not a tile type")
    return ir.tile(ktype.shape, element_type(ktype.dtype))


# A token chain: a writable tensor parameter's `Value`, or the name of another chain (prints).
TokenChain = Value | str


def kernel_abi(kernel: KernelIR) -> tuple[AbiArg, ...]:
    """The entry's parameters in order; the launcher packs arguments this way.

    Per tensor: the pointer, its dims not fixed at compile time, then its strides
    except the innermost when the specialization says it is 1; per scalar
    parameter: its value.
    """
    args: list[AbiArg] = []
    for param in kernel.params:
        vtype = param.value.type
        if isinstance(vtype, TensorType):
            args.append(AbiArg(param.name, "pointer", dtype=vtype.dtype))
            args.extend(AbiArg(param.name, "dim", axis) for axis, d in enumerate(vtype.shape) if d is None)
            passed = vtype.rank if param.spec is not None and not param.spec.unit_inner_stride else vtype.rank - 1
            args.extend(AbiArg(param.name, "stride", axis) for axis in range(passed))
        else:
            assert isinstance(vtype, TileType)
            args.append(AbiArg(param.name, "scalar", dtype=vtype.dtype))
    return tuple(args)


@dataclass
class TensorInfo:
    """A tensor parameter in the entry: its view and its run-time dims."""

    value: Value
    view: ir.Value
    view_type: ir.TensorViewType
    dims: list[ir.Value | int]
    mutable: bool
    pointer: ir.Value | None = None
    strides: list[ir.Value | int] | None = None  # in elements, every axis


@dataclass
class PartitionInfo:
    tensor: TensorInfo
    view: ir.Value


class Lowering:
    """Builds the Tile IR module of one kernel."""

    def __init__(self, kernel: KernelIR, version: ir.Version, arch: str | None = None,
                 hints: KernelHints | None = None, *, dependent_launch: bool = False) -> None:
        self.kernel = kernel
        self.dependent_launch = dependent_launch
        self.version = version
        self.arch = arch
        self.hints = hints if hints is not None else KernelHints()
        self.module = ir.Module()
        self.values: dict[Value, Any] = {}
        self.tensors: dict[Value, TensorInfo] = {}
        self.tokens: dict[TokenChain, ir.Value] = {}  # token chains: writable tensors and named chains
        self.producers: dict[Value, Operation] = {op_result: op for op in kernel.walk() for op_result in op.results}
        self.regions: list[tuple[str, list[TokenChain]]] = []  # enclosing (kind, threaded chains)
        self.touched_cache: dict[int, list[TokenChain]] = {}
        self.abi = kernel_abi(kernel)
        self.block_ids: tuple[ir.Value, ...] | None = None
        self.shared: dict[Hashable, tuple[ir.Block, Any]] = {}  # see `reuse`
        #: the token of the kernel's grid-dependency wait (`acquire`): reads of read-only
        #: memory after it take it (they are in no chain), so none moves above the wait
        self.acquired: ir.Value | None = None
        self.builder: ir.Builder

    # -- locations and errors --------------------------------------------------------
    @staticmethod
    def ir_location(location: SourceLocation | None) -> ir.Location | None:
        if location is None:
            return None
        return ir.Location(location.filename, location.line, location.column + 1, location.function)

    def error(self, op: Operation, message: str) -> TileCompilerError:
        return TileCompilerError(message, op.location)

    def require_version(self, location: SourceLocation | None, version: ir.Version, what: str) -> None:
        """Refuses ``what`` (at ``location``: an op's line, or the kernel's) when the
        bytecode this compile writes predates ``version``."""
        if self.version < version:
            raise TileCompilerError(f"{what} needs Tile IR bytecode {version} or newer (tileiras {version}+); this "
                                    f"compile writes {self.version}", location)

    # -- the module --------------------------------------------------------------------
    def run(self) -> ir.Module:
        kernel = self.kernel
        arg_types: list[ir.Type] = []
        for arg in self.abi:
            if arg.kind == "pointer":
                assert arg.dtype is not None
                arg_types.append(ir.scalar(ir.ptr(element_type(arg.dtype))))
            elif arg.kind in ("dim", "stride"):
                arg_types.append(ir.scalar(ir.I32))
            else:
                assert arg.dtype is not None
                arg_types.append(ir.scalar(element_type(arg.dtype)))
        entry_hints = self.hints.for_arch(self.arch)
        function = ir.add_function(self.module, kernel.name, arg_types, hints=entry_hints or None,
                                   loc=self.ir_location(kernel.location))
        self.builder = ir.Builder(function, self.ir_location(kernel.location))
        self.bind_parameters(function.args)
        chains = {c for op in kernel.walk() if isinstance(c := self.chain_of(op), str)}
        for chain in sorted(chains):
            self.tokens[chain] = self.builder.make_token()
        if self.dependent_launch:
            self.begin_dependent_launch()
        self.lower_block(kernel.body)
        self.builder.return_()
        return self.module

    def begin_dependent_launch(self) -> None:
        """The start of a kernel compiled for a programmatic dependent launch: it lets
        its own dependents start, then waits for its predecessor, before any memory
        access; each where the kernel does not place it. Before a wait the kernel
        places, it may only read read-only tensors (`reads_before_wait` checks it; the
        launch checks that their memory is frozen)."""
        from cutile_compiler._opdefs.grid import GridOp

        kernel = self.kernel
        self.require_version(kernel.location, ir.V13_4, f"{kernel.name}, compiled for a programmatic dependent launch,")
        reads_before_wait(kernel)
        ops = list(kernel.walk())
        if not any(op.opdef.key is GridOp.LAUNCH_DEPENDENTS for op in ops):
            self.builder.gdc_launch_dependents_tko(self.all_tokens())
        if not any(op.opdef.key is GridOp.DEPENDENCY_WAIT for op in ops):
            self.acquire(lambda token: self.builder.gdc_wait_tko(token))

    def bind_parameters(self, entry_args: Sequence[ir.Value]) -> None:
        by_param: dict[str, list[tuple[AbiArg, ir.Value]]] = {}
        for abi, value in zip(self.abi, entry_args):
            by_param.setdefault(abi.param, []).append((abi, value))
        b = self.builder
        for param in self.kernel.params:
            # Its view, facts and token point at the parameter (tileiras may refuse its dtype).
            b.loc = self.ir_location(param.location or self.kernel.location)
            vtype = param.value.type
            parts = by_param[param.name]
            if isinstance(vtype, TensorType):
                spec = param.spec
                pointer = self.assume_divisible(parts[0][1], spec.base_divisibility if spec else 1)
                dims: list[ir.Value | int] = []
                dynamic_dims = [v for a, v in parts if a.kind == "dim"]
                dynamic_axes = [a.axis for a, v in parts if a.kind == "dim"]
                dynamic_dims = [self.assume_divisible(v, spec.dim_divisibility(axis) if spec else 1)
                                for v, axis in zip(dynamic_dims, dynamic_axes)]
                strides: list[ir.Value | int] = [
                    self.assume_divisible(v, spec.stride_fact(a.axis) if spec else 1)
                    for a, v in parts if a.kind == "stride"]
                it = iter(dynamic_dims)
                for d in vtype.shape:
                    dims.append(next(it) if d is None else d)
                if len(strides) < vtype.rank:
                    strides.append(1)  # the innermost, known to be 1: not passed
                if spec is not None and spec.contiguous and all(d is not None for d in vtype.shape):
                    # A dense tensor of static shape has static strides: the view says so.
                    static = [1] * vtype.rank
                    for axis in range(vtype.rank - 2, -1, -1):
                        static[axis] = static[axis + 1] * int(vtype.shape[axis + 1] or 1)
                    strides = list(static)
                view_type = ir.TensorViewType(
                    element_type(vtype.dtype),
                    tuple(vtype.shape),
                    tuple(s if isinstance(s, int) else None for s in strides),
                )
                dynamic_strides = [s for s in strides if not isinstance(s, int)]
                view = b.make_tensor_view(pointer, dynamic_dims, dynamic_strides, result_types=[view_type])
                info = TensorInfo(param.value, view, view_type, dims, vtype.mutable, pointer, strides)
                self.tensors[param.value] = info
                self.values[param.value] = info
                if vtype.mutable:
                    self.tokens[param.value] = b.make_token()
            else:
                self.values[param.value] = parts[0][1]
        b.loc = self.ir_location(self.kernel.location)

    def assume_divisible(self, value: ir.Value, divisor: int) -> ir.Value:
        """``value`` with the fact that it is a multiple of ``divisor`` (when above 1)."""
        if divisor <= 1:
            return value
        result: ir.Value = self.builder.assume(value, predicate=ir.DivBy(divisor))
        return result

    # -- blocks and ops ------------------------------------------------------------------
    def lower_block(self, block: Block) -> None:
        for op in block.ops:
            self.lower_op(op)

    def lower_op(self, op: Operation) -> None:
        args = [self.values[v] for v in op.operands]
        with self.builder.location(self.ir_location(op.location)):
            try:
                results = op.opdef.lower(self, op, args)
            except ir.IRError as exc:
                raise self.error(op, f"internal error while lowering {op.name} to Tile IR: {exc}") from exc
        for value, result in zip(op.results, results):
            self.values[value] = result

    # -- tokens ---------------------------------------------------------------------------
    def touched(self, op: Operation) -> list[TokenChain]:
        """The token chains (writable tensors in parameter order, then other chains
        such as prints) used inside ``op``'s regions: they are threaded through ``op``."""
        cached = self.touched_cache.get(id(op))
        if cached is not None:
            return cached
        found: set[TokenChain] = set()
        for region in op.regions:
            for inner in region.walk():
                chain = self.chain_of(inner)
                if chain is not None:
                    found.add(chain)
        ordered: list[TokenChain] = [t for t in self.tensors if t in found]
        ordered += sorted(c for c in found if isinstance(c, str))
        self.touched_cache[id(op)] = ordered
        return ordered

    def chain_of(self, op: Operation) -> TokenChain | None:
        """The token chain ``op`` takes part in: a writable tensor's `Value`, a named
        chain, or None (reads of read-only tensors need no ordering)."""
        resource = op.opdef.ordered_resource(op)
        if resource is None or isinstance(resource, str):
            return resource
        tensor = self.tensor_value(resource)
        info = self.tensors.get(tensor) if tensor is not None else None
        return tensor if info is not None and info.mutable else None

    def token_in(self, op: Operation) -> ir.Value | None:
        """The token ``op`` must wait for: the end of its chain; for a read of read-only
        memory, the grid-dependency wait's token if the kernel waited (else None)."""
        chain = self.chain_of(op)
        if chain is None:
            return self.acquired if op.opdef.ordered_resource(op) is not None else None
        return self.tokens[chain]

    def all_tokens(self) -> ir.Value | None:
        """A token after every memory access so far: the chains' ends joined."""
        ends = list(self.tokens.values()) + ([self.acquired] if self.acquired is not None else [])
        if not ends:
            return None
        return ends[0] if len(ends) == 1 else self.builder.join_tokens(ends)

    def acquire(self, make: Callable[[ir.Value | None], ir.Value]) -> None:
        """Emits ``make(token after every access so far)``, an acquire (the grid-dependency
        wait): its token becomes the end of every chain and the token of later reads of
        read-only memory. Only at the kernel's top level (the front end refuses it in a
        loop or branch), so the token is visible to everything after it."""
        token = make(self.all_tokens())
        self.shared.clear()  # a read-only tile loaded before the wait must not serve a read after it
        for chain in self.tokens:
            self.tokens[chain] = token
        self.acquired = token

    def token_out(self, op: Operation, token: ir.Value) -> None:
        """Makes ``token``, the one ``op`` produced, the new end of its chain (an op
        outside every chain drops it)."""
        chain = self.chain_of(op)
        if chain is not None:
            self.tokens[chain] = token

    def tensor_value(self, value: Value) -> Value | None:
        """The tensor parameter a partition (or tensor) value comes from."""
        while value not in self.tensors:
            producer = self.producers.get(value)
            if producer is None or not producer.operands:
                return None
            value = producer.operands[0]
        return value

    def token_values(self, tensors: Sequence[TokenChain]) -> list[ir.Value]:
        return [self.tokens[t] for t in tensors]

    def set_tokens(self, tensors: Sequence[TokenChain], values: Sequence[ir.Value]) -> None:
        for tensor, value in zip(tensors, values):
            self.tokens[tensor] = value

    @contextmanager
    def region_tokens(self) -> Iterator[None]:
        saved = dict(self.tokens)
        try:
            yield
        finally:
            self.tokens = saved

    # -- helpers for op lowerings ---------------------------------------------------------------
    def hint_attrs(self, op: Operation) -> dict[str, Any]:
        """``{"optimization_hints": ...}`` for a memory op that has hints, else ``{}``."""
        hints = self.load_hints(op)
        return {} if hints is None else {"optimization_hints": hints}

    def load_hints(self, op: Operation) -> ir.OptimizationHints | None:
        """The ``optimization_hints`` of a memory op (latency, allow_tma), for each of
        the kernel hints' `target_archs`."""
        values: dict[str, int | bool] = {k: op.attrs[k] for k in ("latency", "allow_tma") if k in op.attrs}
        if not values:
            return None
        return ir.OptimizationHints.of({arch: values for arch in self.hints.target_archs(self.arch)})

    def reuse(self, key: Hashable, build: Callable[[], _T]) -> _T:
        """What ``build()`` made for ``key`` earlier, where it is visible at the insertion
        point (made in this block or one enclosing it), else ``build()``'s, remembered
        for later ops: for values that depend on their key alone (a tile of a read-only
        tensor at given coordinates), so loads of one tile share one."""
        block = self.builder.block
        found = self.shared.get(key)
        if found is not None and _encloses(found[0], block):
            return found[1]  # type: ignore[no-any-return]
        value = build()
        self.shared[key] = (block, value)
        return value

    def constant(self, value: int | float | bool, ktype: KType) -> ir.Value:
        """A constant tile of ``ktype`` (ops pass their result's `KType`; `tile_type` checks it is a tile)."""
        return self.builder.constant(value, tile_type(ktype))

    def index_i32(self, value: ir.Value, ktype: KType) -> ir.Value:
        """An index as i32 (Tile IR's extract takes i32 coordinates)."""
        assert isinstance(ktype, TileType)
        if ktype.dtype.bits == 32:
            return value
        converted: ir.Value
        if ktype.dtype.bits > 32:
            converted = self.builder.trunci(value, result_types=[ir.scalar(ir.I32)])
        else:
            converted = self.builder.exti(value, signedness="signed", result_types=[ir.scalar(ir.I32)])
        return converted


def _encloses(outer: ir.Block, block: ir.Block) -> bool:
    """Whether ``block`` is ``outer`` or nested in one of its ops' regions."""
    current: ir.Block | None = block
    while current is not None:
        if current is outer:
            return True
        region = current.parent
        owner = region.parent if region is not None else None
        current = owner.parent if owner is not None else None
    return False


def reads_before_wait(kernel: KernelIR) -> tuple[str, ...]:
    """The tensor parameters ``kernel`` reads before the ``grid_dependency_control_wait()``
    it places (none without one), in parameter order. A kernel compiled for a dependent
    launch may read there only read-only tensors, whose memory its launch checks is
    frozen (`cutile.Tensor.freeze`: nothing writes it any more); any other access
    before the wait (a store, a read of a tensor it writes) is a `TileCompilerError`
    at its line, as its predecessor may still be using that memory."""
    from cutile_compiler._opdefs.grid import GridOp

    ops = list(kernel.walk())
    wait = next((index for index, op in enumerate(ops) if op.opdef.key is GridOp.DEPENDENCY_WAIT), None)
    if wait is None:
        return ()
    params = {param.value: param for param in kernel.params}
    producers = {result: op for op in ops for result in op.results}
    read: set[str] = set()
    for op in ops[:wait]:
        resource = op.opdef.ordered_resource(op)
        if resource is None or isinstance(resource, str):
            continue  # no memory (a print's chain)
        value: Value | None = resource
        while value is not None and value not in params:  # a partition or view: back to its tensor
            producer = producers.get(value)
            value = producer.operands[0] if producer is not None and producer.operands else None
        param = params.get(value) if value is not None else None
        if param is None or not isinstance(param.value.type, TensorType) or param.value.type.mutable:
            what = f"of '{param.name}', which the kernel writes" if param is not None else "of memory"
            raise TileCompilerError(
                f"an access {what} before grid_dependency_control_wait() in a kernel compiled for a programmatic "
                "dependent launch: the kernel before it on the stream may still be using that memory; move the "
                "access after the wait (only read-only tensors, frozen, may be read before it)", op.location)
        read.add(param.name)
    return tuple(param.name for param in kernel.params if param.name in read)


def lower_kernel(kernel: KernelIR, version: ir.Version | str = "13.3", arch: str | None = None,
                 hints: KernelHints | None = None, *, dependent_launch: bool = False) -> ir.Module:
    """The Tile IR module of ``kernel``, for bytecode ``version`` and GPU ``arch``
    (when known, hints are emitted for it alone; a malformed one is an ``ArchError``);
    ``dependent_launch``: for a programmatic dependent launch (`CompileOptions`)."""
    from cutile_compiler import _opdefs  # noqa: F401  (registers every op's lowering)

    if arch is not None:
        parse_arch(arch)
    parsed = ir.Version.parse(version)
    return Lowering(kernel, parsed, arch, hints, dependent_launch=dependent_launch).run()


__all__ = ["AbiArg", "Lowering", "PartitionInfo", "TensorInfo", "TokenChain", "element_type", "kernel_abi",
           "lower_kernel", "reads_before_wait", "tile_type"]
