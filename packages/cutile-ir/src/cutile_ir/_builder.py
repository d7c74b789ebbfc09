"""A builder that makes ops from the op table, checking types as each op is made.

    b = Builder(func.body)
    s = b.addf(x, y, rounding_mode="nearest_even")      # any op by its mnemonic
    tok = b.make_token()
    with b.for_(lb, ub, step, inits=[acc]) as loop:     # ops with regions
        ...
        b.continue_(new_acc)

Operands are positional in table order (an optional group takes a Value or None, a
variadic group a sequence) or keywords by group name; attributes are keywords (enums
accept members or their MLIR spelling); ``result_types=`` is needed only where the table
cannot infer it; ``loc=`` sets a source location (else the builder's current one).
"""

from __future__ import annotations

import contextlib
import enum
from typing import Any, Iterator, Mapping, Sequence

from ._attributes import (
    ArrayAttr, Attribute, Bounded, DenseElements, DivBy, FloatAttr, IntegerAttr, Location,
    OptimizationHints, SameElements,
)
from ._errors import IRTypeError
from ._ir import Block, Function, Module, Operation, Region, Value
from ._ops import Arity, AttrDef, AttrKind, OpDef, bool_array, get_op
from ._types import (
    I1, I32, FunctionType, PointerType, ScalarType, TileType, TiledView, TokenType, Type, scalar,
)
from ._verifier import check_op, reduce_body_arg_types, reduce_result_type

_UNSET: Any = object()


def _coerce_attr(op: OpDef, a: AttrDef, value: Any) -> Any:
    where = f"attribute '{a.name}'"
    k = a.kind
    if k is AttrKind.ENUM:
        assert a.enum is not None
        if isinstance(value, a.enum):
            return value
        if isinstance(value, str):
            for m in a.enum:
                if getattr(m, "text", m.name.lower()) == value or m.name == value.upper():
                    return m
        elif isinstance(value, int) and not isinstance(value, enum.Enum):
            try:
                return a.enum(value)
            except ValueError:
                pass
        choices = ", ".join(getattr(m, "text", m.name) for m in a.enum)
        raise IRTypeError(f"{where} expects a {a.enum.__name__} ({choices}), found {value!r}", op=op.name)
    if k is AttrKind.INT:
        if isinstance(value, bool) or not isinstance(value, int):
            raise IRTypeError(f"{where} expects an int, found {value!r}", op=op.name)
        if value < 0:
            raise IRTypeError(f"{where} must be non-negative, found {value}", op=op.name)
        return value
    if k in (AttrKind.BOOL, AttrKind.UNIT):
        if not isinstance(value, bool):
            raise IRTypeError(f"{where} expects a bool, found {value!r}", op=op.name)
        return value
    if k in (AttrKind.STR, AttrKind.SYMREF):
        if not isinstance(value, str):
            raise IRTypeError(f"{where} expects a str, found {value!r}", op=op.name)
        return value
    if k is AttrKind.I32_ARRAY:
        vals = tuple(value)
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in vals):
            raise IRTypeError(f"{where} expects a sequence of ints, found {value!r}", op=op.name)
        return vals
    if k is AttrKind.BOOL_ARRAY:
        return bool_array(value)
    if k is AttrKind.DENSE:
        if not isinstance(value, DenseElements):
            raise IRTypeError(f"{where} expects DenseElements, found {value!r}", op=op.name)
        return value
    if k is AttrKind.HINTS:
        if isinstance(value, OptimizationHints):
            return value
        if isinstance(value, Mapping):
            return OptimizationHints.of(value)
        raise IRTypeError(f"{where} expects OptimizationHints or a dict arch -> hints, found {value!r}", op=op.name)
    if k is AttrKind.PREDICATE:
        if not isinstance(value, (DivBy, SameElements, Bounded)):
            raise IRTypeError(f"{where} expects DivBy, SameElements or Bounded, found {value!r}", op=op.name)
        return value
    if k is AttrKind.ATTR_ARRAY:
        if isinstance(value, ArrayAttr):
            return value
        return ArrayAttr(tuple(value))
    raise AssertionError(k)


def _infer(op: OpDef, rule: str, named: dict[str, list[Value]], attrs: dict[str, Any]) -> Type | None:
    kind, _, arg = rule.partition(":")
    if kind == "token":
        return TokenType()
    if kind == "scalar_i32":
        return scalar(I32)
    if kind == "value":
        v = attrs.get("value")
        return v.type if isinstance(v, DenseElements) else None
    src = named.get(arg)
    if not src:
        return None
    t = src[0].type
    if kind == "same":
        return t
    if kind == "i1" and isinstance(t, TileType):
        return TileType(t.shape, I1)
    if kind == "pointee" and isinstance(t, TileType) and isinstance(t.element, PointerType):
        return TileType(t.shape, t.element.pointee)
    if kind == "view_tile" and isinstance(t, TiledView):
        return t.tile_type
    return None


def make_op(
    name: str | OpDef,
    operands: Sequence[Any] = (),
    attrs: Mapping[str, Any] | None = None,
    result_types: Sequence[Type] | None = None,
    loc: Location | None = None,
    check: bool = True,
) -> Operation:
    """Make a detached op from the table; positional operands follow the table's groups."""
    op = name if isinstance(name, OpDef) else get_op(name)
    if op.structural:
        raise IRTypeError("is a structural op; use add_function(module, ...) / Module.add_entry / Module.add_global",
                          op=op.name)
    attrs = dict(attrs or {})
    groups: dict[str, Any] = {}
    pos = list(operands)
    if len(pos) > len(op.operands):
        raise IRTypeError(
            f"takes at most {len(op.operands)} operand groups ({', '.join(o.name for o in op.operands)}), "
            f"found {len(pos)}", op=op.name, loc=loc)
    for od, v in zip(op.operands, pos):
        groups[od.name] = v
    for od in op.operands:
        if od.name in attrs and op.attr(od.name) is None:
            if od.name in groups:
                groups_txt = ", ".join(f"{o.name} ({o.arity.value})" for o in op.operands)
                raise IRTypeError(f"operand '{od.name}' given twice, by position and by keyword (positional "
                                  f"operands fill the groups {groups_txt} in order; a variadic group takes a list)",
                                  op=op.name, loc=loc)
            groups[od.name] = attrs.pop(od.name)
    flat: list[Value] = []
    segments: list[int] = []
    named: dict[str, list[Value]] = {}
    for od in op.operands:
        v = groups.get(od.name, _UNSET)
        if od.arity is Arity.ONE:
            if v is _UNSET or v is None:
                raise IRTypeError(f"missing operand '{od.name}'", op=op.name, loc=loc)
            vals = [v]
        elif od.arity is Arity.OPTIONAL:
            vals = [] if v is _UNSET or v is None else [v]
        else:
            if v is _UNSET or v is None:
                vals = []
            elif isinstance(v, Value):
                vals = [v]
            else:
                vals = list(v)
        for x in vals:
            if not isinstance(x, Value):
                raise IRTypeError(f"operand '{od.name}' must be a Value, found {x!r}", op=op.name, loc=loc)
        named[od.name] = vals
        flat.extend(vals)
        segments.append(len(vals))
    final: dict[str, Any] = {}
    for a in op.attrs:
        if a.name in attrs:
            v = _coerce_attr(op, a, attrs.pop(a.name))
            if a.kind is AttrKind.UNIT and not v:
                continue
            final[a.name] = v
        elif a.in_flags:
            continue
        elif a.default is not None:
            final[a.name] = a.default
        else:
            raise IRTypeError(f"missing attribute '{a.name}' ({a.kind.value})", op=op.name, loc=loc)
    if attrs:
        known = [o.name for o in op.operands] + [a.name for a in op.attrs]
        raise IRTypeError(f"unknown argument(s) {', '.join(sorted(attrs))}; known: {', '.join(known)}",
                          op=op.name, loc=loc)
    if result_types is None:
        rts: list[Type] = []
        for r in op.results:
            if r.variadic:
                raise IRTypeError(f"needs result_types= (result group '{r.name}' is variadic)", op=op.name, loc=loc)
            t = _infer(op, r.infer, named, final) if r.infer else None
            if t is None:
                raise IRTypeError(f"needs result_types= (cannot infer result '{r.name}')", op=op.name, loc=loc)
            rts.append(t)
    else:
        rts = list(result_types)
    result = Operation(op, flat, segments, final, rts, len(op.regions), loc)
    if check:
        problems = check_op(result)
        if problems:
            raise IRTypeError(problems[0], op=op.name, loc=loc)
    return result


class Builder:
    """Appends ops to a block; any op of the table is a method (``b.addf``, ``b.return_``)."""

    def __init__(self, block: Block | Function, loc: Location | None = None) -> None:
        self.block: Block = block.body if isinstance(block, Function) else block
        self.index: int | None = None
        self.loc = loc

    # -- insertion point and locations ------------------------------------------------
    @contextlib.contextmanager
    def at(self, block: Block, index: int | None = None) -> Iterator[Block]:
        """Insert into ``block`` (at its end, or before op ``index``) within the ``with``."""
        old = (self.block, self.index)
        self.block, self.index = block, index
        try:
            yield block
        finally:
            self.block, self.index = old

    @contextlib.contextmanager
    def before(self, op: Operation) -> Iterator[Block]:
        """Insert just before ``op`` within the ``with`` (e.g. a join_tokens a pass adds)."""
        if op.parent is None:
            raise IRTypeError("op is not in a block", op=op.name)
        with self.at(op.parent, op.parent.ops.index(op)) as b:
            yield b

    @contextlib.contextmanager
    def location(self, loc: Location | None) -> Iterator[None]:
        """Give ``loc`` to every op made within the ``with``."""
        old, self.loc = self.loc, loc
        try:
            yield
        finally:
            self.loc = old

    # -- generic creation -------------------------------------------------------------
    def create(self, op_name: str, /, *operands: Any, result_types: Sequence[Type] | None = None,
               loc: Location | None = None, **attrs: Any) -> Operation:
        """Make op ``op_name`` at the insertion point and return the Operation."""
        op = make_op(op_name, operands, attrs, result_types, loc if loc is not None else self.loc)
        if self.index is None:
            self.block.append(op)
        else:
            op.parent = self.block
            self.block.ops.insert(self.index, op)
            self.index += 1
        return op

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        opdef = get_op(name.rstrip("_"))

        def build(*operands: Any, result_types: Sequence[Type] | None = None,
                  loc: Location | None = None, **attrs: Any) -> Any:
            op = self.create(opdef.name, *operands, result_types=result_types, loc=loc, **attrs)
            if opdef.regions:
                return op
            if len(op.results) == 1 and not any(r.variadic for r in opdef.results):
                return op.results[0]
            if not op.results and not any(r.variadic for r in opdef.results):
                return op
            return tuple(op.results)

        build.__name__ = opdef.name
        return build

    # -- helpers for common shapes ----------------------------------------------------
    def constant(self, value: int | float | bool | Sequence[int | float | bool] | DenseElements,
                 type: TileType | ScalarType | None = None, loc: Location | None = None) -> Value:
        """A constant tile: a DenseElements, or Python value(s) with a tile (or element) type."""
        if isinstance(value, DenseElements):
            dense = value
        else:
            if type is None:
                raise IRTypeError("constant of a Python value needs a type", op="constant")
            t = type if isinstance(type, TileType) else scalar(type)
            if isinstance(value, (list, tuple)):
                dense = DenseElements.from_values(t, value)
            else:
                assert isinstance(value, (int, float, bool))
                dense = DenseElements.splat(t, value)
        op = self.create("constant", value=dense, loc=loc)
        return op.results[0]

    @contextlib.contextmanager
    def region(self, op: Operation, index: int = 0, arg_types: Sequence[Type] = ()) -> Iterator[list[Value]]:
        """Fill region ``index`` of ``op``: yields the new block's arguments."""
        region: Region = op.regions[index]
        block = region.add_block(arg_types)
        with self.at(block):
            yield block.args

    @contextlib.contextmanager
    def for_(self, lower: Value, upper: Value, step: Value, inits: Sequence[Value] = (),
             unsigned_cmp: bool = False, loc: Location | None = None) -> Iterator[RegionOp]:
        """``for iv in [lower, upper) step`` carrying ``inits``; the body ends with ``continue_``."""
        op = self.create("for", lower, upper, step, list(inits), result_types=[v.type for v in inits], loc=loc,
                         unsignedCmp=unsigned_cmp)
        with self.region(op, 0, [lower.type] + [v.type for v in inits]) as args:
            yield RegionOp(op, args)

    @contextlib.contextmanager
    def loop(self, inits: Sequence[Value] = (), result_types: Sequence[Type] = (),
             loc: Location | None = None) -> Iterator[RegionOp]:
        """An unbounded loop; ``continue_`` carries values on, ``break_`` leaves with results."""
        op = self.create("loop", list(inits), result_types=list(result_types), loc=loc)
        with self.region(op, 0, [v.type for v in inits]) as args:
            yield RegionOp(op, args)

    def if_(self, cond: Value, result_types: Sequence[Type] = (), loc: Location | None = None) -> IfOp:
        """``with b.if_(c) as i: with i.then(): ...; with i.else_(): ...``; ``i.results``."""
        op = self.create("if", cond, result_types=list(result_types), loc=loc)
        return IfOp(self, op)

    @contextlib.contextmanager
    def reduce(self, operands: Sequence[Value], dim: int, identities: Sequence[Any],
               result_types: Sequence[Type] | None = None, loc: Location | None = None) -> Iterator[RegionOp]:
        """Reduce along ``dim``; the body gets (element, accumulator) rank-0 pairs and yields."""
        op = self._reduce_like("reduce", operands, dim, identities, result_types, loc, {})
        with self.region(op, 0, _pair_args(operands)) as args:
            yield RegionOp(op, args)

    @contextlib.contextmanager
    def scan(self, operands: Sequence[Value], dim: int, identities: Sequence[Any], reverse: bool = False,
             result_types: Sequence[Type] | None = None, loc: Location | None = None) -> Iterator[RegionOp]:
        """Inclusive scan along ``dim``; body as for :meth:`reduce`."""
        op = self._reduce_like("scan", operands, dim, identities, result_types, loc, {"reverse": reverse})
        with self.region(op, 0, _pair_args(operands)) as args:
            yield RegionOp(op, args)

    def _reduce_like(self, name: str, operands: Sequence[Value], dim: int, identities: Sequence[Any],
                     result_types: Sequence[Type] | None, loc: Location | None, extra: dict[str, Any]) -> Operation:
        ids: list[Attribute] = []
        for v, ident in zip(operands, identities):
            el = v.type.element if isinstance(v.type, TileType) else None
            if isinstance(ident, (IntegerAttr, FloatAttr)):
                ids.append(ident)
            elif isinstance(el, ScalarType) and el.is_float:
                ids.append(FloatAttr.of(el, float(ident)))
            elif isinstance(el, ScalarType):
                ids.append(IntegerAttr(el, int(ident)))
            else:
                raise IRTypeError(f"cannot make an identity for operand of type {v.type}", op=name)
        if result_types is None:
            result_types = []
            for v in operands:
                t = v.type
                if not isinstance(t, TileType) or not 0 <= dim < t.rank:
                    raise IRTypeError(f"dim {dim} out of range for operand of type {t}", op=name, loc=loc)
                result_types.append(reduce_result_type(name, t, dim))
        return self.create(name, list(operands), result_types=list(result_types), loc=loc, dim=dim, identities=ids,
                           **extra)


def _pair_args(operands: Sequence[Value]) -> list[Type]:
    """The body's block arguments, by the verifier's rule; here every operand must be a tile."""
    for v in operands:
        if not isinstance(v.type, TileType):
            raise IRTypeError(f"reduce/scan operands must be tiles, found {v.type}")
    return reduce_body_arg_types([v.type for v in operands])


class RegionOp:
    """An op with a body being built: ``args`` are the body block's arguments."""

    def __init__(self, op: Operation, args: list[Value]) -> None:
        self.op = op
        self.args = args

    @property
    def results(self) -> list[Value]:
        return self.op.results


class IfOp:
    """An ``if`` being built: fill ``then()`` and, optionally, ``else_()``."""

    def __init__(self, builder: Builder, op: Operation) -> None:
        self.builder = builder
        self.op = op

    def __enter__(self) -> IfOp:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    @contextlib.contextmanager
    def then(self) -> Iterator[None]:
        with self.builder.region(self.op, 0):
            yield

    @contextlib.contextmanager
    def else_(self) -> Iterator[None]:
        with self.builder.region(self.op, 1):
            yield

    @property
    def results(self) -> list[Value]:
        return self.op.results


def add_function(module: Module, name: str, arg_types: Sequence[Type], *, entry: bool = True,
                 result_types: Sequence[Type] = (), hints: OptimizationHints | Mapping[str, Mapping[str, int | bool]] | None = None,
                 loc: Location | None = None, private: bool = False) -> Function:
    """Add a kernel entry (or device function) to ``module`` and return it."""
    if hints is not None and not isinstance(hints, OptimizationHints):
        hints = OptimizationHints.of(hints)
    f = Function(name, FunctionType(tuple(arg_types), tuple(result_types)), entry=entry, private=private,
                 hints=hints, loc=loc)
    module.functions.append(f)
    return f
