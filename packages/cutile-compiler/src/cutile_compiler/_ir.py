"""The typed kernel IR: the compiler's own representation of a kernel.

It is produced by the front end (`_frontend`), executed directly by the CPU
interpreter, and lowered to Tile IR for the GPU. Values are in SSA form; control
flow is structured (``for``, ``if``, ``loop`` with nested blocks), as in MLIR's
``scf`` dialect and in Tile IR itself. Every operation refers to an `OpDef`
(see `_opdefs`), which holds its typing rule, its numpy meaning and its lowering.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cutile_compiler._errors import SourceLocation
from cutile_compiler._reads import ExternalReads
from cutile_compiler._types import KType

if TYPE_CHECKING:
    from cutile_compiler._opdefs import OpDef
    from cutile_compiler._signature import TensorSpec

_ids = itertools.count()


class Value:
    """An SSA value: the result of one operation, or an argument of a block."""

    __slots__ = ("type", "id", "name")

    def __init__(self, type: KType, name: str | None = None) -> None:
        self.type = type
        self.id = next(_ids)
        self.name = name

    def __repr__(self) -> str:
        return f"%{self.name or ''}{self.id}: {self.type}"


class Operation:
    """One operation: ``results = opdef(operands) {attrs} [regions]``."""

    __slots__ = ("opdef", "operands", "results", "attrs", "regions", "location")

    def __init__(
        self,
        opdef: OpDef,
        operands: Sequence[Value],
        result_types: Sequence[KType],
        attrs: dict[str, Any] | None = None,
        regions: Sequence[Block] = (),
        location: SourceLocation | None = None,
    ) -> None:
        self.opdef = opdef
        self.operands = tuple(operands)
        self.results = tuple(Value(t) for t in result_types)
        self.attrs = attrs or {}
        self.regions = list(regions)
        self.location = location

    @property
    def name(self) -> str:
        return self.opdef.name

    @property
    def result(self) -> Value:
        """The single result (raises if the op has none or several)."""
        if len(self.results) != 1:
            raise ValueError(f"{self.name} has {len(self.results)} results")
        return self.results[0]

    def __repr__(self) -> str:
        return f"<Operation {self.name}>"


@dataclass
class Block:
    """A sequence of operations with block arguments (loop variables, carried values)."""

    args: list[Value] = field(default_factory=list)
    ops: list[Operation] = field(default_factory=list)

    def walk(self) -> Iterator[Operation]:
        """Every operation in this block and its nested blocks, in program order."""
        for op in self.ops:
            yield op
            for region in op.regions:
                yield from region.walk()


@dataclass(frozen=True)
class KernelParam:
    """A runtime parameter of the kernel (constants are folded away)."""

    name: str
    value: Value  # an argument of the kernel's body block
    kind: str  # "tensor" or "scalar"
    spec: TensorSpec | None = None  # a tensor's facts (divisibility, contiguity)
    location: SourceLocation | None = None  # the parameter in the def: where its entry ops point


@dataclass
class KernelIR:
    """A kernel specialized for one set of constants, dtypes and static shapes."""

    name: str
    params: list[KernelParam]
    body: Block
    grid_rank: int  # how many grid axes the kernel's partitions use (0 to 3)
    location: SourceLocation | None = None
    unsafe: bool = False
    #: the globals, closure variables and code it was compiled from: it is stale
    #: once ``reads.changed()`` names one
    reads: ExternalReads = field(default_factory=ExternalReads)

    def walk(self) -> Iterator[Operation]:
        return self.body.walk()


def format_kernel(kernel: KernelIR) -> str:
    """A readable listing of the IR (for CUTILE_DUMP=ir and for tests)."""
    names: dict[int, str] = {}

    def name(value: Value) -> str:
        if value.id not in names:
            wanted = f"%{value.name}"
            names[value.id] = wanted if value.name and wanted not in names.values() else f"%{len(names)}"
        return names[value.id]

    lines = [
        f"kernel {kernel.name}("
        + ", ".join(f"{name(p.value)}: {p.value.type}" for p in kernel.params)
        + f") grid_rank={kernel.grid_rank}" + (" unsafe" if kernel.unsafe else "") + " {"
    ]

    def emit(block: Block, indent: int) -> None:
        pad = "  " * indent
        for op in block.ops:
            results = ", ".join(name(r) for r in op.results)
            lhs = f"{results} = " if results else ""
            attrs = (
                " {" + ", ".join(f"{k}={_format_attr(v)}" for k, v in sorted(op.attrs.items())) + "}"
                if op.attrs
                else ""
            )
            operands = ", ".join(name(o) for o in op.operands)
            types = ", ".join(str(r.type) for r in op.results)
            suffix = f" : {types}" if types else ""
            lines.append(f"{pad}{lhs}{op.name}({operands}){attrs}{suffix}")
            for index, region in enumerate(op.regions):
                args = ", ".join(f"{name(a)}: {a.type}" for a in region.args)
                lines.append(f"{pad}  ^region{index}({args}):")
                emit(region, indent + 2)

    emit(kernel.body, 1)
    lines.append("}")
    return "\n".join(lines)


def _format_attr(value: Any) -> str:
    if isinstance(value, tuple):
        return "[" + ", ".join(_format_attr(v) for v in value) + "]"
    return str(value)
