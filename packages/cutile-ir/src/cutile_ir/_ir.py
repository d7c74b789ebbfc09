"""The in-memory IR: values, operations with regions and blocks, functions, globals, modules."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

from ._attributes import DenseElements, Location, OptimizationHints, SymbolVisibility
from ._errors import IRError
from ._opdef import Arity, OpDef
from ._types import FunctionType, Type


#: How deep regions may nest (an op in the body of an op in the body of ...). The verifier
#: reports deeper nesting and the reader refuses it, so that the verifier, printer and
#: writer, which recurse once per level, stay far from Python's recursion limit.
MAX_REGION_DEPTH = 64


class Value:
    """An SSA value: a block argument or an op result."""

    __slots__ = ("type", "owner", "index", "name")

    def __init__(self, type: Type, owner: Operation | Block, index: int, name: str | None = None) -> None:
        self.type = type
        self.owner = owner
        self.index = index
        self.name = name

    def __repr__(self) -> str:
        kind = "arg" if isinstance(self.owner, Block) else self.owner.name
        return f"<Value {kind}#{self.index}: {self.type}>"


class Operation:
    """One op: its table record, operands (flat, with per-group sizes), attributes, results, regions."""

    __slots__ = ("opdef", "operands", "segments", "attributes", "results", "regions", "loc", "parent")

    def __init__(
        self,
        opdef: OpDef,
        operands: Sequence[Value],
        segments: Sequence[int],
        attributes: dict[str, Any],
        result_types: Sequence[Type],
        num_regions: int = 0,
        loc: Location | None = None,
    ) -> None:
        self.opdef = opdef
        self.operands: list[Value] = operands if type(operands) is list else list(operands)
        self.segments: tuple[int, ...] = tuple(segments)
        self.attributes: dict[str, Any] = attributes if type(attributes) is dict else dict(attributes)
        self.results: list[Value] = [Value(t, self, i) for i, t in enumerate(result_types)]
        self.regions: list[Region] = [Region(self) for _ in range(num_regions)] if num_regions else []
        self.loc = loc
        self.parent: Block | None = None

    @property
    def name(self) -> str:
        return self.opdef.name

    @property
    def result(self) -> Value:
        """The single result (error if the op has none or several)."""
        if len(self.results) != 1:
            raise IRError(f"op has {len(self.results)} results, not one", op=self.name, loc=self.loc)
        return self.results[0]

    def group(self, name: str) -> list[Value]:
        """The operands of the named operand group."""
        start = 0
        for od, n in zip(self.opdef.operands, self.segments):
            if od.name == name:
                return self.operands[start:start + n]
            start += n
        raise KeyError(f"{self.name} has no operand group {name!r}")

    def operand(self, name: str) -> Value | None:
        """The operand of a single or optional group (None when absent)."""
        g = self.group(name)
        if self.opdef.operand(name).arity is Arity.VARIADIC:
            raise KeyError(f"{self.name}.{name} is variadic; use group()")
        return g[0] if g else None

    def groups(self) -> Iterator[tuple[str, list[Value]]]:
        start = 0
        for od, n in zip(self.opdef.operands, self.segments):
            yield od.name, self.operands[start:start + n]
            start += n

    def walk(self) -> Iterator[Operation]:
        """This op and every op nested in its regions, in pre-order."""
        yield self
        for r in self.regions:
            for b in r.blocks:
                for op in b.ops:
                    yield from op.walk()

    def __repr__(self) -> str:
        return f"<Operation {self.name}>"


class Block:
    """A list of ops with typed arguments."""

    __slots__ = ("args", "ops", "parent")

    def __init__(self, arg_types: Sequence[Type] = (), parent: Region | None = None) -> None:
        self.args: list[Value] = [Value(t, self, i) for i, t in enumerate(arg_types)]
        self.ops: list[Operation] = []
        self.parent = parent

    def append(self, op: Operation) -> Operation:
        op.parent = self
        self.ops.append(op)
        return op

    def add_arg(self, t: Type) -> Value:
        v = Value(t, self, len(self.args))
        self.args.append(v)
        return v


class Region:
    """An op's region: a list of blocks (Tile IR uses one block per region)."""

    __slots__ = ("blocks", "parent")

    def __init__(self, parent: Operation | None = None) -> None:
        self.blocks: list[Block] = []
        self.parent = parent

    def add_block(self, arg_types: Sequence[Type] = ()) -> Block:
        b = Block(arg_types, self)
        self.blocks.append(b)
        return b

    @property
    def block(self) -> Block:
        if not self.blocks:
            raise IRError("region has no block")
        return self.blocks[0]


@dataclass(eq=False)
class Function:
    """A kernel entry (``entry=True``) or a device function, with its body block."""

    name: str
    type: FunctionType
    entry: bool = True
    private: bool = False
    hints: OptimizationHints | None = None
    loc: Location | None = None
    body: Block = field(default_factory=Block)

    def __post_init__(self) -> None:
        if not self.body.args and self.type.inputs:
            for t in self.type.inputs:
                self.body.add_arg(t)

    @property
    def args(self) -> list[Value]:
        return self.body.args

    def walk(self) -> Iterator[Operation]:
        for op in self.body.ops:
            yield from op.walk()


@dataclass(eq=False)
class Global:
    """A module-level global: a dense initial value, alignment, constness and visibility."""

    name: str
    value: DenseElements
    alignment: int = 0
    constant: bool = False
    visibility: SymbolVisibility = SymbolVisibility.PUBLIC
    loc: Location | None = None


@dataclass(eq=False)
class Module:
    """A Tile IR module: named, with globals and functions (kernel entries first-class)."""

    name: str = "kernels"
    functions: list[Function] = field(default_factory=list)
    globals: list[Global] = field(default_factory=list)
    producer: str | None = None

    def add_entry(self, name: str, arg_types: Sequence[Type], *, hints: OptimizationHints | None = None,
                  loc: Location | None = None) -> Function:
        """Add a kernel entry taking ``arg_types`` and return it (see also ``add_function``)."""
        f = Function(name, FunctionType(tuple(arg_types), ()), entry=True, hints=hints, loc=loc)
        self.functions.append(f)
        return f

    def add_global(self, name: str, value: DenseElements, *, alignment: int = 0, constant: bool = False,
                   visibility: SymbolVisibility = SymbolVisibility.PUBLIC) -> Global:
        """Add a global initialised with ``value``."""
        g = Global(name, value, alignment, constant, visibility)
        self.globals.append(g)
        return g

    def function(self, name: str) -> Function:
        for f in self.functions:
            if f.name == name:
                return f
        raise KeyError(name)

    def walk(self) -> Iterator[Operation]:
        for f in self.functions:
            yield from f.walk()

    def __str__(self) -> str:
        from ._printer import print_module

        return print_module(self)


__all__ = ["Block", "Function", "Global", "Module", "Operation", "Region", "Value"]


def differences(a: Module, b: Module) -> list[str]:
    """Structural differences between two modules (empty when they are equal).

    Values are compared by position (which op or block argument defines them), attributes
    and types by value, locations by file/line/column.
    """
    out: list[str] = []
    if a.producer != b.producer:
        out.append(f"producer {a.producer!r} != {b.producer!r}")
    if len(a.globals) != len(b.globals):
        out.append(f"{len(a.globals)} globals != {len(b.globals)}")
    for ga, gb in zip(a.globals, b.globals):
        ka = (ga.name, ga.value, ga.alignment, ga.constant, ga.visibility)
        kb = (gb.name, gb.value, gb.alignment, gb.constant, gb.visibility)
        if ka != kb:
            out.append(f"global {ka} != {kb}")
    if len(a.functions) != len(b.functions):
        out.append(f"{len(a.functions)} functions != {len(b.functions)}")
    for fa, fb in zip(a.functions, b.functions):
        ka2 = (fa.name, fa.type, fa.entry, fa.private, fa.hints, fa.loc)
        kb2 = (fb.name, fb.type, fb.entry, fb.private, fb.hints, fb.loc)
        if ka2 != kb2:
            out.append(f"function {ka2} != {kb2}")
            continue
        vmap: dict[int, int] = {}
        _block_diff(fa.body, fb.body, vmap, f"@{fa.name}", out)
    return out


def _block_diff(a: Block, b: Block, vmap: dict[int, int], where: str, out: list[str]) -> None:
    if [x.type for x in a.args] != [x.type for x in b.args]:
        out.append(f"{where}: block arguments differ")
        return
    for x, y in zip(a.args, b.args):
        vmap[id(x)] = id(y)
    if len(a.ops) != len(b.ops):
        out.append(f"{where}: {len(a.ops)} ops != {len(b.ops)}")
        return
    for i, (oa, ob) in enumerate(zip(a.ops, b.ops)):
        w = f"{where}/{i}:{oa.name}"
        if oa.name != ob.name:
            out.append(f"{w}: op {oa.name} != {ob.name}")
            return
        if oa.attributes != ob.attributes:
            out.append(f"{w}: attributes {oa.attributes} != {ob.attributes}")
        if oa.segments != ob.segments or [vmap.get(id(v)) for v in oa.operands] != [id(v) for v in ob.operands]:
            out.append(f"{w}: operands differ")
        if [r.type for r in oa.results] != [r.type for r in ob.results]:
            out.append(f"{w}: result types differ")
        if oa.loc != ob.loc:
            out.append(f"{w}: location {oa.loc} != {ob.loc}")
        if len(oa.regions) != len(ob.regions):
            out.append(f"{w}: region counts differ")
        for ri, (ra, rb) in enumerate(zip(oa.regions, ob.regions)):
            if len(ra.blocks) != len(rb.blocks):
                out.append(f"{w}: region {ri} block counts differ")
                continue
            for ba, bb in zip(ra.blocks, rb.blocks):
                _block_diff(ba, bb, vmap, f"{w}.r{ri}", out)
        for x, y in zip(oa.results, ob.results):
            vmap[id(x)] = id(y)
