"""The printer: MLIR-style text as NVIDIA's ``tileirdisasm`` prints it.

Op syntax comes from each table record's ``fmt``; value names follow MLIR's rules
(result names an op asks for, uniqued with a per-function counter; others numbered).
"""

from __future__ import annotations

import math
import re
from typing import Any

from ._attributes import (
    ArrayAttr, BoolAttr, Bounded, DenseElements, DictAttr, DivBy, FloatAttr, IntegerAttr,
    IntegerOverflow, Location, OptimizationHints, RoundingMode, SameElements, StringAttr, TypeAttr,
    _float_from_bits, decode_element,
)
from ._apfloat import mlir_float
from ._errors import VerificationError
from ._ir import MAX_REGION_DEPTH, Block, Function, Global, Module, Operation, Value
from ._opdef import AttrKind
from ._types import I1, ScalarType, TensorViewType, TileType
from ._verifier import structure_problems

# -- value naming --------------------------------------------------------------------

def asm_name(op: Operation, index: int) -> str | None:
    """The name ``op`` gives its result ``index`` (None: the op names nothing; "": it has the
    interface but no name for this result)."""
    d = op.opdef
    if callable(d.asm_name):
        return d.asm_name(op, index)
    if d.asm_name is not None:
        return d.asm_name if index == 0 else ""
    if len(d.results) > 1 and not any(r.variadic for r in d.results):
        return d.results[index].name if index < len(d.results) else ""
    return None


def constant_name(op: Operation, index: int) -> str:
    """A constant is named for its value (``%cst_1_f32``, ``%true``)."""
    return _const_name(op.attributes["value"]) if index == 0 else ""


def assume_name(op: Operation, index: int) -> str:
    """An assume is named for the value it qualifies (``%assume_pview``)."""
    src = op.operands[0]
    if isinstance(src.owner, Operation):
        inner = asm_name(src.owner, src.index)
        if inner is not None:
            return "assume_" + inner
    return "assume"


def for_arg_names(count: int) -> list[str | None]:
    """A ``for`` body's arguments: the induction variable, then the iter values."""
    return ["loopIdx", *(f"iterArg{i}" for i in range(count - 1))] if count else []


def reduce_arg_names(count: int) -> list[str | None]:
    """A ``reduce`` body's (element, accumulator) pairs."""
    half = count // 2
    if half == 1:
        return ["reduce_lhs", "reduce_rhs"]
    return [*(f"reduce_{s}{i}" for i in range(half) for s in ("lhs", "rhs"))]


def format_float(bits: int, t: ScalarType) -> str:
    """A float element as MLIR prints it: decimal, or hex of its ``t.bitwidth`` bits (NaN,
    infinities, values without a short decimal form); bits above the width are ignored."""
    bits &= (1 << t.bitwidth) - 1
    s = mlir_float(_float_from_bits(bits, t), t)
    if s is None:
        return "0x" + format(bits, "0%dX" % ((t.bitwidth + 3) // 4))
    return s


def format_element(data: bytes, t: ScalarType) -> str:
    if t == I1:
        return "true" if decode_element(data, t) else "false"
    if t.is_float:
        return format_float(int.from_bytes(data, "little"), t)
    return str(decode_element(data, t))


def _const_name(d: DenseElements) -> str:
    el = d.type.element
    assert isinstance(el, ScalarType)
    if not d.is_splat:
        return "cst_i1" if el == I1 else f"cst_{el}"
    v = decode_element(d.element_bytes(0), el)
    if el == I1:
        return "true" if v else "false"
    if el.is_float:
        if math.isnan(v):
            return f"cst_NaN_{el}"
        if math.isfinite(v) and v >= 0 and math.copysign(1.0, v) > 0 and v == int(v) and v < 2.0 ** 64:
            return f"cst_{int(v)}_{el}"
        return f"cst_{el}"
    return f"cst_{v}_{el}"


def _unprintable(op: Operation | None, problem: str) -> VerificationError:
    return VerificationError(f"cannot print: {problem}", op=op.name if op else None, loc=op.loc if op else None)


class _Names:
    """MLIR's SSANameState, for one function."""

    def __init__(self) -> None:
        self.names: dict[int, str] = {}
        self.heads: dict[int, tuple[str, int]] = {}
        self.next_value = 0
        self.next_arg = 0
        self.next_conflict = 0
        self.scopes: list[set[str]] = [set()]

    def used(self, n: str) -> bool:
        return any(n in s for s in self.scopes)

    def unique(self, n: str) -> str:
        if self.used(n):
            base = n + "_"
            while True:
                cand = base + str(self.next_conflict)
                self.next_conflict += 1
                if not self.used(cand):
                    n = cand
                    break
        self.scopes[-1].add(n)
        return n

    def function(self, f: Function) -> None:
        self.region([f.body], None, 0)

    def region(self, blocks: list[Block], owner: Operation | None, depth: int) -> None:
        if depth > MAX_REGION_DEPTH:
            raise _unprintable(owner, f"regions nested more than {MAX_REGION_DEPTH} deep")
        for b in blocks:
            self.block_args(b, owner)
            for op in b.ops:
                self.op_results(op)
        saved = (self.next_value, self.next_arg, self.next_conflict)
        for b in blocks:
            for op in b.ops:
                for r in op.regions:
                    self.next_value, self.next_arg, self.next_conflict = saved
                    self.scopes.append(set())
                    self.region(r.blocks, op, depth + 1)
                    self.scopes.pop()

    def block_args(self, b: Block, owner: Operation | None) -> None:
        names: list[str | None] = [None] * len(b.args)
        rule = owner.opdef.region_rule if owner is not None else None
        if rule is not None and rule.arg_names is not None:
            names = rule.arg_names(len(b.args))
        for a, name in zip(b.args, names):
            if name is None:
                self.names[id(a)] = f"arg{self.next_arg}"
                self.next_arg += 1
            else:
                self.names[id(a)] = self.unique(name)

    def op_results(self, op: Operation) -> None:
        if not op.results:
            return
        names = [asm_name(op, i) for i in range(len(op.results))]
        # MLIR groups results: a named result starts a group, unnamed ones join the previous
        groups: list[tuple[str, list[Value]]] = []
        for r, n in zip(op.results, names):
            if n:
                groups.append((self.unique(n), [r]))
            elif groups:
                groups[-1][1].append(r)
            else:
                groups.append(("", [r]))
        for base, vals in groups:
            if not base:
                base = str(self.next_value)
                self.next_value += 1
            self.heads[id(vals[0])] = (base, len(vals))
            for i, r in enumerate(vals):
                self.names[id(r)] = base if len(vals) == 1 else f"{base}#{i}"

    def __call__(self, v: Value) -> str:
        return "%" + self.names.get(id(v), "<<UNKNOWN>>")


# -- attributes ------------------------------------------------------------------------

def escape(s: str) -> str:
    out = []
    for ch in s.encode("utf-8"):
        c = chr(ch)
        if c == "\\":
            out.append("\\\\")
        elif 0x20 <= ch < 0x7F and c != '"':
            out.append(c)
        else:
            out.append("\\%02X" % ch)
    return '"' + "".join(out) + '"'


def attr_text(a: Any) -> str:
    """An attribute as it appears inside a dictionary or an array."""
    if isinstance(a, IntegerAttr):
        return str(a.value) if a.type != I1 else ("true" if a.value else "false")
    if isinstance(a, FloatAttr):
        return format_float(a.bits, a.type)
    if isinstance(a, BoolAttr):
        return "true" if a.value else "false"
    if isinstance(a, StringAttr):
        return escape(a.value)
    if isinstance(a, TypeAttr):
        return a.value.mlir()
    if isinstance(a, ArrayAttr):
        return "[" + ", ".join(attr_text(x) for x in a.values) + "]"
    if isinstance(a, DictAttr):
        return "{" + ", ".join(f"{k} = {attr_text(v)}" for k, v in sorted(a.items, key=lambda kv: kv[0])) + "}"
    if isinstance(a, OptimizationHints):
        return "<" + ", ".join(f"{k} = {attr_text(v)}" for k, v in sorted(a.per_arch, key=lambda kv: kv[0])) + ">"
    if isinstance(a, DivBy):
        extra = ""
        if a.every is not None:
            extra += f", every {a.every}"
        if a.along is not None:
            extra += (" along " if a.every is not None else ", along ") + str(a.along)
        return f"div_by<{a.divisor}{extra}>"
    if isinstance(a, SameElements):
        return "same_elements<[" + ", ".join(str(x) for x in a.values) + "]>"
    if isinstance(a, Bounded):
        lb = "?" if a.lb is None else str(a.lb)
        ub = "?" if a.ub is None else str(a.ub)
        return f"bounded<{lb}, {ub}>"
    if isinstance(a, DenseElements):
        return dense_text(a)
    return repr(a)


def typed_attr_text(a: Any) -> str:
    """An identity value: ``0.000000e+00 : f32``."""
    if isinstance(a, (IntegerAttr, FloatAttr)):
        return f"{attr_text(a)} : {a.type}"
    return attr_text(a)


def dense_text(d: DenseElements) -> str:
    """``<f32: 1.0>`` for a splat, else every element nested by the shape; it reads only
    the stored elements, so a splat of a huge tile costs nothing."""
    el = d.type.element
    assert isinstance(el, ScalarType)
    if d.is_splat:
        return f"<{el}: {format_element(d.element_bytes(0), el)}>"
    items = [format_element(d.element_bytes(i), el) for i in range(d.stored_elements)]

    def nest(xs: list[str], shape: tuple[int, ...]) -> str:
        if len(shape) <= 1:
            return "[" + ", ".join(xs) + "]"
        step = len(xs) // shape[0]
        return "[" + ", ".join(nest(xs[i:i + step], shape[1:]) for i in range(0, len(xs), step)) + "]"

    return f"<{el}: {nest(items, d.type.shape)}>"


# -- the format interpreter -------------------------------------------------------------

_TOKEN = re.compile(r"`[^`]*`|\(|\)\?|\^|\$\w+|type\(\$\w+\)|%\w+\(\$\w+\)|attr-dict|\S+")


def _parse(fmt: str) -> list[Any]:
    toks = _TOKEN.findall(fmt)
    pos = 0

    def group() -> list[Any]:
        nonlocal pos
        out: list[Any] = []
        while pos < len(toks):
            t = toks[pos]
            pos += 1
            if t == "(":
                out.append(("group", group()))
            elif t == ")?":
                return out
            elif t == "^":
                out[-1] = ("anchor", out[-1])
            else:
                out.append(t)
        return out

    return group()


_PARSED: dict[str, list[Any]] = {}


class _Line:
    def __init__(self) -> None:
        self.parts: list[str] = []
        self.space = True
        self.last_punct = False

    def literal(self, s: str) -> None:
        if s == "":
            self.space = False
            return
        if len(s) != 1 and s != "->":
            emit = True
        elif self.last_punct:
            emit = s[0] not in ">)}],"
        else:
            emit = s[0] not in "<>(){}[],"
        if emit and self.space:
            self.parts.append(" ")
        self.parts.append(s)
        self.space = not (len(s) == 1 and s in "<({[")
        self.last_punct = s[0] != "_" and not s[0].isalpha()

    def value(self, s: str) -> None:
        if self.space:
            self.parts.append(" ")
        self.parts.append(s)
        self.space = True
        self.last_punct = False

    def text(self) -> str:
        return "".join(self.parts)


def loc_text(loc: Location) -> str:
    return f"loc({escape(loc.file)}:{loc.line}:{loc.column})"


class Printer:
    def __init__(self, locations: bool = False) -> None:
        self.lines: list[str] = []
        self.names = _Names()
        self.locations = locations

    def emit(self, indent: int, s: str) -> None:
        self.lines.append("  " * indent + s)

    # -- module level --------------------------------------------------------------
    def module(self, m: Module) -> str:
        for g in m.globals:
            self.global_(g)
        for f in m.functions:
            self.function(f)
        return "\n".join(self.lines) + "\n"

    def global_(self, g: Global) -> None:
        vis = "private " if int(g.visibility) else ""
        const = "constant " if g.constant else ""
        align = f" alignment = {g.alignment}" if g.alignment else ""
        if not isinstance(g.value, DenseElements):
            raise VerificationError(f"cannot print global @{g.name}: its value is not DenseElements, found {g.value!r}")
        self.emit(0, f"global {vis} {const}@{g.name}{align} {dense_text(g.value)} : {g.value.type}")

    def function(self, f: Function) -> None:
        self.names = _Names()
        self.names.function(f)
        args = ", ".join(f"{self.names(a)}: {a.type}" for a in f.body.args)
        res = ""
        if f.type.results:
            res = " -> (" + ", ".join(str(t) for t in f.type.results) + ")"
        hints = f" optimization_hints={attr_text(f.hints)}" if f.hints is not None else ""
        kw = "entry" if f.entry else "func"
        self.emit(0, f"{kw} @{f.name}({args}){res}{hints} {{")
        self.block_ops(f.body, 1, elide_empty_terminator=False)
        self.emit(0, "}" + (" " + loc_text(f.loc) if self.locations and f.loc is not None else ""))

    def block_ops(self, b: Block, indent: int, elide_empty_terminator: bool = True) -> None:
        for i, op in enumerate(b.ops):
            if (elide_empty_terminator and i == len(b.ops) - 1 and op.opdef.elided_when_empty
                    and not op.operands):
                continue
            self.op(op, indent)

    # -- ops ------------------------------------------------------------------------
    def results_prefix(self, op: Operation) -> str:
        if not op.results:
            return ""
        parts = []
        for r in op.results:
            head = self.names.heads.get(id(r))
            if head is not None:
                base, n = head
                parts.append(f"%{base}" if n == 1 else f"%{base}:{n}")
        return ", ".join(parts) + " = "

    def op(self, op: Operation, indent: int) -> None:
        # The text is read through the op's shape (its groups, results, attributes, regions):
        # an op whose shape is broken is reported, whatever else about it is wrong is printed.
        shape = structure_problems(op)
        if shape:
            raise _unprintable(op, shape[0])
        self._op(op, indent)
        if self.locations and op.loc is not None:
            self.lines[-1] += " " + loc_text(op.loc)

    def _op(self, op: Operation, indent: int) -> None:
        fmt = op.opdef.fmt
        if not isinstance(fmt, str):  # a custom printer
            fmt(self, op, indent)
            return
        line = _Line()
        self.run(op, self.parsed(fmt), line)
        self.emit(indent, self.results_prefix(op) + op.name + line.text())

    def parsed(self, fmt: str) -> list[Any]:
        p = _PARSED.get(fmt)
        if p is None:
            p = _PARSED[fmt] = _parse(fmt)
        return p

    def present(self, op: Operation, elem: Any) -> bool:
        tok = elem[1] if isinstance(elem, tuple) else elem
        m = re.search(r"\$(\w+)", tok)
        assert m is not None
        name = m.group(1)
        a = op.opdef.attr(name)
        if a is not None:
            if name not in op.attributes:
                return False
            if a.default is not None and op.attributes[name] == a.default:
                return False
            return True
        return bool(self.group_values(op, name))

    def group_values(self, op: Operation, name: str) -> list[Value]:
        if any(o.name == name for o in op.opdef.operands):
            return op.group(name)
        rds = op.opdef.results
        for i, rd in enumerate(rds):
            if rd.name == name:
                if rd.variadic:
                    return op.results[i:]
                return [op.results[i]] if i < len(op.results) else []
        return []

    def run(self, op: Operation, elems: list[Any], line: _Line) -> None:
        for e in elems:
            if isinstance(e, tuple) and e[0] == "group":
                anchor = next((x for x in e[1] if isinstance(x, tuple) and x[0] == "anchor"), None)
                if anchor is not None and self.present(op, anchor):
                    self.run(op, [x[1] if isinstance(x, tuple) and x[0] == "anchor" else x for x in e[1]], line)
                continue
            if isinstance(e, tuple) and e[0] == "anchor":
                e = e[1]
            assert isinstance(e, str)
            if e.startswith("`"):
                line.literal(e[1:-1])
            elif e == "attr-dict":
                continue
            elif e.startswith("type("):
                name = e[6:-1]
                line.value(", ".join(str(v.type) for v in self.group_values(op, name)))
            elif e.startswith("%"):
                fn, arg = e[1:].split("(")
                line.value(self.directive(fn, op.attributes.get(arg[1:-1])))
            elif e.startswith("$"):
                name = e[1:]
                a = op.opdef.attr(name)
                if a is not None:
                    if a.kind is not AttrKind.UNIT:
                        line.value(self.attr_value(op, name))
                else:
                    line.value(", ".join(self.names(v) for v in self.group_values(op, name)))
            else:
                line.literal(e)

    def directive(self, fn: str, v: Any) -> str:
        if fn == "rounding":
            return "" if v is None or v == RoundingMode.NEAREST_EVEN else f"rounding<{v.text}>"
        if fn == "rounding_unless_full":
            return "" if v is None or v == RoundingMode.FULL else f"rounding<{v.text}>"
        if fn == "int_rounding":
            return "" if v is None or v == RoundingMode.NEAREST_INT_TO_ZERO else f"rounding<{v.text}>"
        if fn == "signedness":
            return "" if v is None else str(v.text)
        raise AssertionError(fn)

    def attr_value(self, op: Operation, name: str) -> str:
        a = op.opdef.attr(name)
        assert a is not None
        v = op.attributes.get(name, a.default)
        k = a.kind
        if k is AttrKind.ENUM:
            if isinstance(v, (IntegerOverflow, RoundingMode)):
                return f"<{v.text}>"
            return str(v.text)
        if k is AttrKind.INT:
            return str(v)
        if k is AttrKind.BOOL:
            return "true" if v else "false"
        if k is AttrKind.STR:
            return escape(str(v))
        if k is AttrKind.SYMREF:
            return "@" + str(v)
        if k is AttrKind.I32_ARRAY:
            return "[" + ", ".join(str(x) for x in v) + "]"
        if k is AttrKind.BOOL_ARRAY:
            return "[" + ", ".join("true" if x else "false" for x in v) + "]"
        return attr_text(v)

    # -- custom formats (the table's records name these methods as their printers) -------
    def op_structural(self, op: Operation, indent: int) -> None:
        """Globals, entries and the module print as the module's parts, never as ops."""
        raise _unprintable(op, "a structural op is not an op of a function body")

    def op_constant(self, op: Operation, indent: int) -> None:
        d = op.attributes["value"]
        self.emit(indent, f"{self.results_prefix(op)}constant {dense_text(d)} : {op.results[0].type}")

    def region(self, op: Operation, i: int, indent: int, header: str) -> None:
        self.emit(indent, header + " {")
        r = op.regions[i]
        if r.blocks:
            self.block_ops(r.blocks[0], indent + 1)
        self.emit(indent, "}")

    def op_for(self, op: Operation, indent: int) -> None:
        n = self.names
        lb, ub, step = op.operands[:3]
        inits = op.group("initValues")
        blk = op.regions[0].blocks[0] if op.regions[0].blocks else None
        if blk is None or len(blk.args) != 1 + len(inits):
            raise _unprintable(op, f"the body must take the induction variable and {len(inits)} iter values")
        iv = n(blk.args[0])
        uns = "unsigned " if "unsignedCmp" in op.attributes else ""
        s = f"{self.results_prefix(op)}for {uns}{iv} in ({n(lb)} to {n(ub)}, step {n(step)}) : {lb.type}"
        if inits:
            pairs = ", ".join(f"{n(a)} = {n(v)}" for a, v in zip(blk.args[1:], inits))
            s += f" iter_values({pairs}) -> (" + ", ".join(str(r.type) for r in op.results) + ")"
        self.region(op, 0, indent, s)

    def op_loop(self, op: Operation, indent: int) -> None:
        n = self.names
        inits = op.group("initValues")
        blk = op.regions[0].blocks[0] if op.regions[0].blocks else None
        s = f"{self.results_prefix(op)}loop"
        if inits:
            if blk is None or len(blk.args) != len(inits):
                raise _unprintable(op, f"the body must take the {len(inits)} iter values")
            s += " iter_values(" + ", ".join(f"{n(a)} = {n(v)}" for a, v in zip(blk.args, inits)) + ")"
            s += " : " + ", ".join(str(v.type) for v in inits)
            if op.results:
                s += " -> " + ", ".join(str(r.type) for r in op.results)
        elif op.results:
            s += " : " + ", ".join(str(r.type) for r in op.results)
        self.region(op, 0, indent, s)

    def op_if(self, op: Operation, indent: int) -> None:
        s = f"{self.results_prefix(op)}if {self.names(op.operands[0])}"
        if op.results:
            s += " -> (" + ", ".join(str(r.type) for r in op.results) + ")"
        self.emit(indent, s + " {")
        if op.regions[0].blocks:
            self.block_ops(op.regions[0].blocks[0], indent + 1)
        if len(op.regions) > 1 and op.regions[1].blocks:
            self.emit(indent, "} else {")
            self.block_ops(op.regions[1].blocks[0], indent + 1)
        self.emit(indent, "}")

    def _reduce_like(self, op: Operation, indent: int, extra: str) -> None:
        n = self.names
        ins = op.group("operands")
        ids = op.attributes["identities"]
        s = (f"{self.results_prefix(op)}{op.name} " + ", ".join(n(v) for v in ins) + f" dim={op.attributes['dim']}"
             + extra + " identities=[" + ", ".join(typed_attr_text(x) for x in ids.values) + "] : "
             + ", ".join(str(v.type) for v in ins) + " -> " + ", ".join(str(r.type) for r in op.results) + " ")
        self.emit(indent, s)
        blk = op.regions[0].blocks[0] if op.regions[0].blocks else None
        args = ", ".join(f"{n(a)}: {a.type}" for a in blk.args) if blk else ""
        self.emit(indent, f"({args}) {{")
        if blk:
            self.block_ops(blk, indent + 1, elide_empty_terminator=False)
        self.emit(indent, "}")

    def op_reduce(self, op: Operation, indent: int) -> None:
        self._reduce_like(op, indent, "")

    def op_scan(self, op: Operation, indent: int) -> None:
        rev = "true" if op.attributes.get("reverse") else "false"
        self._reduce_like(op, indent, f" reverse={rev}")

    def op_shape_query(self, op: Operation, indent: int) -> None:
        src = op.operands[0]
        rt = str(op.results[0].type) if op.results else ""
        self.emit(indent, f"{self.results_prefix(op)}{op.name} {self.names(src)} : {src.type} -> {rt}")

    def op_make_view(self, op: Operation, indent: int) -> None:
        self.emit(indent, f"{self.results_prefix(op)}{op.name} {self.names(op.operands[0])} : {op.results[0].type}")

    def op_make_tensor_view(self, op: Operation, indent: int) -> None:
        n = self.names
        t = op.results[0].type
        dyn_shape = iter(op.group("dynamicShape"))
        dyn_strides = iter(op.group("dynamicStrides"))
        if not isinstance(t, TensorViewType) or (t.num_dynamic_shape, t.num_dynamic_strides) != (
                len(op.group("dynamicShape")), len(op.group("dynamicStrides"))):
            raise _unprintable(op, f"the dynamic shape and strides do not fit the result {t}")
        shape = [n(next(dyn_shape)) if d is None else str(d) for d in getattr(t, "shape", ())]
        strides = [n(next(dyn_strides)) if d is None else str(d) for d in getattr(t, "strides", ())]
        dyn = op.group("dynamicShape") + op.group("dynamicStrides")
        s = f"{self.results_prefix(op)}make_tensor_view {n(op.operands[0])}"
        s += ", shape = [" + ", ".join(shape) + "], strides = [" + ", ".join(strides) + "] :"
        pre = []
        base_el = op.operands[0].type.element if isinstance(op.operands[0].type, TileType) else None
        if getattr(base_el, "attr", None) is not None:
            pre.append(str(op.operands[0].type))
        if dyn:
            pre.append(str(dyn[0].type))
        if pre:
            s += " " + ", ".join(pre) + " ->"
        self.emit(indent, f"{s} {t}")

    def _mem_attrs(self, op: Operation) -> str:
        s = " " + str(op.attributes["memory_ordering_semantics"].text)
        if "memory_scope" in op.attributes:
            s += " " + str(op.attributes["memory_scope"].text)
        return s

    def _view_tail(self, op: Operation) -> str:
        s = ""
        tok = op.operand("token")
        if tok is not None:
            s += f" token = {self.names(tok)}"
        if "optimization_hints" in op.attributes:
            s += f" optimization_hints = {attr_text(op.attributes['optimization_hints'])}"
        if any(op.attributes.get("inbounds", ())):
            s += f" inbounds = {self.attr_value(op, 'inbounds')}"
        return s

    def _index(self, op: Operation) -> tuple[str, str]:
        idx = op.group("index")
        return "[" + ", ".join(self.names(v) for v in idx) + "]", (", " + str(idx[0].type)) if idx else ""

    def op_load_view(self, op: Operation, indent: int) -> None:
        view = op.operand("view")
        assert view is not None
        ix, ixt = self._index(op)
        s = (f"{self.results_prefix(op)}load_view_tko{self._mem_attrs(op)} {self.names(view)}{ix}{self._view_tail(op)}"
             f" : {view.type}{ixt} -> {op.results[0].type}, {op.results[1].type}")
        self.emit(indent, s)

    def op_store_view(self, op: Operation, indent: int) -> None:
        view, tile_ = op.operand("view"), op.operand("tile")
        assert view is not None and tile_ is not None
        ix, ixt = self._index(op)
        s = (f"{self.results_prefix(op)}store_view_tko{self._mem_attrs(op)} {self.names(tile_)}, {self.names(view)}{ix}"
             f"{self._view_tail(op)} : {tile_.type}, {view.type}{ixt} -> {op.results[0].type}")
        self.emit(indent, s)

    def op_atomic_red_view(self, op: Operation, indent: int) -> None:
        view, val = op.operand("view"), op.operand("value")
        assert view is not None and val is not None
        ix, ixt = self._index(op)
        s = (f"{self.results_prefix(op)}atomic_red_view_tko{self._mem_attrs(op)} {self.names(view)}{ix}, "
             f"{op.attributes['mode'].text}, {self.names(val)}{self._view_tail(op)} : {val.type}, {view.type}{ixt}"
             f" -> {op.results[0].type}")
        self.emit(indent, s)


def print_module(module: Module, locations: bool = False) -> str:
    """The module as MLIR text, in ``tileirdisasm``'s style; ``locations=True`` appends
    each op's source location as ``loc("file":line:col)``."""
    return Printer(locations).module(module)


def print_function(f: Function, locations: bool = False) -> str:
    """One function as MLIR text."""
    p = Printer(locations)
    p.function(f)
    return "\n".join(p.lines) + "\n"


