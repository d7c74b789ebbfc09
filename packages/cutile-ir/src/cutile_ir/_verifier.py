"""The verifier: operand/result types from the op table, per-op shape rules, dominance,
region and terminator structure, entry signatures and power-of-two tile dimensions."""

from __future__ import annotations

from typing import Any, Sequence

from ._arch import parse_arch
from ._attributes import ArrayAttr, Bounded, DenseElements, DivBy, FloatAttr, IntegerAttr, OptimizationHints, SameElements
from ._constraints import describe, satisfies
from ._errors import VerificationError
from ._ir import MAX_REGION_DEPTH, Block, Function, Module, Operation
from ._opdef import ELEMENT_MIN_SM, Arity, AttrDef, AttrKind, Checker, RegionRule
from ._types import (
    SCALAR_TYPES, GatherScatterViewType, PartitionViewType, PointerType, ScalarType, StridedViewType,
    TensorViewType, TiledView, TileType, Type, is_pow2, scalar,
)


def _named_types(op: Operation) -> dict[str, list[Type]]:
    out: dict[str, list[Type]] = {}
    for name, vals in op.groups():
        out[name] = [v.type for v in vals]
    for rd, v in zip(op.opdef.results, op.results):
        out.setdefault(rd.name, []).append(v.type)
    if op.opdef.results and op.opdef.results[-1].variadic:
        rd = op.opdef.results[-1]
        out[rd.name] = [v.type for v in op.results[len(op.opdef.results) - 1:]]
    return out


def _shape(t: Type) -> tuple[int, ...] | None:
    return t.shape if isinstance(t, TileType) else None


def _el(t: Type) -> object:
    return t.element if isinstance(t, TileType) else None


# -- extra per-op rules beyond the table's constraints: each record of the op table names
# its rule (``OpDef.check``), which returns the problems it finds.


def same_shape(*names: str) -> Checker:
    def check(op: Operation, ty: dict[str, list[Type]]) -> list[str]:
        shapes = [(n, _shape(ty[n][0])) for n in names if ty.get(n)]
        if len({s for _, s in shapes}) > 1:
            return ["shapes must match: " + ", ".join(f"{n} {list(s or ())}" for n, s in shapes)]
        return []
    return check


def _check_cast_width(op: Operation, ty: dict[str, list[Type]], widen: bool) -> list[str]:
    a, b = ty["from"][0], ty["to"][0]
    ea, eb = _el(a), _el(b)
    probs = same_shape("from", "to")(op, ty)
    if isinstance(ea, ScalarType) and isinstance(eb, ScalarType):
        if widen and not eb.bitwidth > ea.bitwidth:
            probs.append(f"result element {eb} must be wider than operand element {ea}")
        if not widen and not eb.bitwidth < ea.bitwidth:
            probs.append(f"result element {eb} must be narrower than operand element {ea}")
    return probs


def check_reshape(op: Operation, ty: dict[str, list[Type]]) -> list[str]:
    a, b = ty["source"][0], ty["result"][0]
    if isinstance(a, TileType) and isinstance(b, TileType):
        if a.element != b.element:
            return [f"element types differ: {a.element} vs {b.element}"]
        if a.numel != b.numel:
            return [f"element counts differ: {a} has {a.numel}, {b} has {b.numel}"]
    return []


def check_broadcast(op: Operation, ty: dict[str, list[Type]]) -> list[str]:
    a, b = ty["source"][0], ty["result"][0]
    if isinstance(a, TileType) and isinstance(b, TileType):
        if a.element != b.element or a.rank != b.rank:
            return [f"cannot broadcast {a} to {b} (rank and element must match)"]
        for x, y in zip(a.shape, b.shape):
            if x != y and x != 1:
                return [f"cannot broadcast {a} to {b}: dimension {x} is neither {y} nor 1"]
    return []


def check_permute(op: Operation, ty: dict[str, list[Type]]) -> list[str]:
    a, b = ty["source"][0], ty["result"][0]
    perm = op.attributes.get("permutation", ())
    if not isinstance(a, TileType) or not isinstance(b, TileType):
        return []
    if sorted(perm) != list(range(a.rank)):
        return [f"permutation {list(perm)} is not a permutation of 0..{a.rank - 1}"]
    want = TileType(tuple(a.shape[p] for p in perm), a.element)
    return [] if want == b else [f"result type must be {want}, found {b}"]


def check_index_count(src: str, idx: str) -> Checker:
    def check(op: Operation, ty: dict[str, list[Type]]) -> list[str]:
        t = ty[src][0]
        n = len(ty.get(idx, []))
        rank = t.index_rank if isinstance(t, TiledView) else t.rank if isinstance(t, TileType) else n
        return [] if n == rank else [f"expects {rank} indices for {t}, found {n}"]
    return check


def check_view_tile(tile_name: str) -> Checker:
    def check(op: Operation, ty: dict[str, list[Type]]) -> list[str]:
        v = ty["view"][0]
        probs = check_index_count("view", "index")(op, ty)
        if isinstance(v, TiledView) and ty.get(tile_name):
            want = v.tile_type
            got = ty[tile_name][0]
            if got != want:
                probs.append(f"tile type must be {want} for {v}, found {got}")
        return probs
    return check


def check_make_tensor_view(op: Operation, ty: dict[str, list[Type]]) -> list[str]:
    t = ty["result"][0]
    base = ty["base"][0]
    probs = []
    if isinstance(t, TensorViewType):
        if len(ty["dynamicShape"]) != t.num_dynamic_shape:
            probs.append(f"{t} has {t.num_dynamic_shape} dynamic dims, found {len(ty['dynamicShape'])} values")
        if len(ty["dynamicStrides"]) != t.num_dynamic_strides:
            probs.append(f"{t} has {t.num_dynamic_strides} dynamic strides, found {len(ty['dynamicStrides'])} values")
        el = _el(base)
        if isinstance(el, PointerType) and el.pointee != t.element:
            probs.append(f"base points to {el.pointee} but the view holds {t.element}")
    return probs


def check_make_view(op: Operation, ty: dict[str, list[Type]]) -> list[str]:
    t, src = ty["result"][0], ty["tensor_view"][0]
    if isinstance(t, TiledView) and t.tensor_view != src:
        return [f"result view is over {t.tensor_view}, but the operand is {src}"]
    return []


def check_mma(same_elements: bool) -> Checker:
    """(MxK)·(KxN)+(MxN) shapes; ``same_elements``: lhs and rhs have one element type."""
    def check(op: Operation, ty: dict[str, list[Type]]) -> list[str]:
        return _mma_problems(op, ty, same_elements)
    return check


def _mma_problems(op: Operation, ty: dict[str, list[Type]], same_elements: bool) -> list[str]:
    a, b, c = ty["lhs"][0], ty["rhs"][0], ty["acc"][0]
    if not all(isinstance(x, TileType) for x in (a, b, c)):
        return []
    assert isinstance(a, TileType) and isinstance(b, TileType) and isinstance(c, TileType)
    if not (a.rank == b.rank == c.rank and a.rank in (2, 3)):
        return [f"expects lhs, rhs, acc of rank 2 (or 3, batched), found {a}, {b}, {c}"]
    m, k = a.shape[-2:]
    k2, n = b.shape[-2:]
    if k != k2 or c.shape[-2:] != (m, n) or a.shape[:-2] != b.shape[:-2] or a.shape[:-2] != c.shape[:-2]:
        return [f"shapes do not form (MxK)·(KxN)+(MxN): {a}, {b}, {c}"]
    if same_elements and a.element != b.element:
        return [f"lhs and rhs element types differ: {a.element} vs {b.element}"]
    return []


def check_cat(op: Operation, ty: dict[str, list[Type]]) -> list[str]:
    a, b, r = ty["lhs"][0], ty["rhs"][0], ty["result"][0]
    d = op.attributes.get("dim", 0)
    if all(isinstance(x, TileType) for x in (a, b, r)):
        assert isinstance(a, TileType) and isinstance(b, TileType) and isinstance(r, TileType)
        if not a.rank == b.rank == r.rank:
            return [f"operands and result must have the same rank, found {a}, {b}, {r}"]
        if not 0 <= d < a.rank:
            return [f"dim {d} out of range for {a}"]
        want = list(a.shape)
        want[d] += b.shape[d]
        if a.element != b.element or r != TileType(tuple(want), a.element):
            return [f"cat of {a} and {b} along {d} gives tile<{'x'.join(map(str, want))}x{a.element}>, found {r}"]
    return []


# -- reduce and scan: their typing rules, in one place. The builder infers result and body
# types with these functions and the verifier checks ops against them, so the two agree.

def reduce_result_type(op_name: str, operand: TileType, dim: int) -> TileType:
    """The result of ``op_name`` ("reduce" or "scan") for one operand along ``dim``:
    reduce drops dimension ``dim``, scan keeps the operand's type."""
    if op_name == "scan":
        return operand
    return TileType(operand.shape[:dim] + operand.shape[dim + 1:], operand.element)


def reduce_yield_types(operand_types: Sequence[Type]) -> list[Type]:
    """What the body of reduce/scan yields: a rank-0 tile of each operand's element
    (an operand that is not a tile is skipped; the op table's constraint reports it)."""
    return [scalar(t.element) for t in operand_types if isinstance(t, TileType)]


def reduce_body_arg_types(operand_types: Sequence[Type]) -> list[Type]:
    """The body block's arguments: an (element, accumulator) pair of rank-0 tiles per operand."""
    return [s for s in reduce_yield_types(operand_types) for _ in range(2)]


def check_reduce(op: Operation, ty: dict[str, list[Type]]) -> list[str]:
    ins, outs = ty["operands"], ty["results"]
    d = op.attributes.get("dim", 0)
    ids = op.attributes.get("identities")
    probs = []
    if len(ins) != len(outs):
        probs.append(f"{len(ins)} operands but {len(outs)} results")
    if ids is not None and len(ids.values) != len(ins):
        probs.append(f"{len(ins)} operands but {len(ids.values)} identities")
    for i, t in enumerate(ins):
        if not isinstance(t, TileType):
            continue
        if not 0 <= d < t.rank:
            probs.append(f"dim {d} out of range for {t}")
            continue
        if ids is not None and i < len(ids.values):
            ident = ids.values[i]
            if not isinstance(ident, (IntegerAttr, FloatAttr)):
                probs.append(f"identity {i} must be an integer or float attribute, found {ident!r}")
            elif ident.type != t.element:
                probs.append(f"identity {i} has type {ident.type}, operand element is {t.element}")
        if i < len(outs):
            want = reduce_result_type(op.name, t, d)
            if outs[i] != want:
                probs.append(f"result {i} must be {want}, found {outs[i]}")
    return probs


def check_constant(op: Operation, ty: dict[str, list[Type]]) -> list[str]:
    v = op.attributes.get("value")
    if isinstance(v, DenseElements) and v.type != ty["result"][0]:
        return [f"value has type {v.type}, result is {ty['result'][0]}"]
    return []


def check_bitcast(op: Operation, ty: dict[str, list[Type]]) -> list[str]:
    a, b = _el(ty["source"][0]), _el(ty["result"][0])
    probs = same_shape("source", "result")(op, ty)
    if isinstance(a, ScalarType) and isinstance(b, ScalarType) and a.bitwidth != b.bitwidth:
        probs.append(f"bitcast needs equal widths, found {a} and {b}")
    return probs


def check_pack(op: Operation, ty: dict[str, list[Type]]) -> list[str]:
    a, b = ty["source"][0], ty["result"][0]
    ea, eb = _el(a), _el(b)
    if isinstance(a, TileType) and isinstance(b, TileType) and isinstance(ea, ScalarType) and isinstance(eb, ScalarType):
        if ea.bitwidth == eb.bitwidth:
            return [f"source and result element widths must differ, found {a} and {b}"]
        if a.rank != 1 or b.rank != 1 or a.numel * ea.bitwidth != b.numel * eb.bitwidth:
            return [f"{a} and {b} must be 1-d tiles of the same number of bits"]
    return []


def check_ptr_access(ptrs: str, data: str) -> Checker:
    """Loads, stores and atomics through a tile of pointers: shapes match, data is the pointee."""
    def check(op: Operation, ty: dict[str, list[Type]]) -> list[str]:
        p = ty[ptrs][0]
        probs: list[str] = []
        if not isinstance(p, TileType) or not isinstance(p.element, PointerType):
            return probs
        want = TileType(p.shape, p.element.pointee)
        if ty.get(data) and ty[data][0] != want:
            probs.append(f"'{data}' must be {want} for pointers {p}, found {ty[data][0]}")
        for extra in ("mask", "paddingValue"):
            if ty.get(extra):
                t = ty[extra][0]
                if _shape(t) != p.shape:
                    probs.append(f"'{extra}' must have shape {list(p.shape)}, found {t}")
                elif extra == "paddingValue" and t != want:
                    probs.append(f"'paddingValue' must be {want}, found {t}")
        return probs
    return check


def check_shape_query(op: Operation, ty: dict[str, list[Type]]) -> list[str]:
    src = ty["src"][0]
    n = src.rank if isinstance(src, TensorViewType) else src.index_rank if isinstance(src, TiledView) else 0
    res = ty.get("result", [])
    probs = [] if len(res) == n else [f"{src} has rank {n}, found {len(res)} results"]
    if len({str(t) for t in res}) > 1:
        probs.append("all results must have the same type")
    return probs


def check_alloca(op: Operation, ty: dict[str, list[Type]]) -> list[str]:
    a = op.attributes.get("alignment", 0)
    return [] if a == 0 or is_pow2(a) else [f"alignment must be a power of two, found {a}"]


def _view_type_problem(t: Type) -> str | None:
    if isinstance(t, (PartitionViewType, StridedViewType)):
        r = t.tensor_view.rank
        if len(t.tile_shape) != r:
            return f"{t}: tile rank {len(t.tile_shape)} differs from the tensor rank {r}"
        if sorted(t.dim_map) != list(range(r)):
            return f"{t}: dim_map {list(t.dim_map)} is not a permutation of 0..{r - 1}"
        if isinstance(t, StridedViewType) and len(t.traversal_strides) != r:
            return f"{t}: needs {r} traversal strides, found {len(t.traversal_strides)}"
    if isinstance(t, GatherScatterViewType):
        r = t.tensor_view.rank
        if not 0 <= t.sparse_dim < r:
            return f"{t}: sparse_dim {t.sparse_dim} out of range for rank {r}"
    return None


def check_assume(op: Operation, ty: dict[str, list[Type]]) -> list[str]:
    pred = op.attributes.get("predicate")
    t = ty["value"][0]
    el = _el(t)
    is_int_tile = isinstance(el, ScalarType) and el.is_int
    if isinstance(pred, Bounded) and not is_int_tile:
        return [f"bounded<...> applies to tiles of integers, found {t}"]
    if isinstance(pred, DivBy) and not (is_int_tile or isinstance(el, PointerType) or isinstance(t, TensorViewType)):
        return [f"div_by<...> applies to integer or pointer tiles and tensor views, found {t}"]
    if isinstance(pred, SameElements):
        if not isinstance(t, TileType) or len(pred.values) != t.rank:
            return [f"same_elements<...> needs one value per dimension of a tile, found {t}"]
    return []


def check_iota(op: Operation, ty: dict[str, list[Type]]) -> list[str]:
    t = ty["result"][0]
    return [] if isinstance(t, TileType) and t.rank == 1 else [f"result must be a 1-d tile, found {t}"]


def check_exti(op: Operation, ty: dict[str, list[Type]]) -> list[str]:
    return _check_cast_width(op, ty, True)


def check_trunci(op: Operation, ty: dict[str, list[Type]]) -> list[str]:
    return _check_cast_width(op, ty, False)


def all_of(*checks: Checker) -> Checker:
    """One rule that reports the problems of each of ``checks``."""
    def check(op: Operation, ty: dict[str, list[Type]]) -> list[str]:
        return [p for c in checks for p in c(op, ty)]
    return check


def check_unpadded_view(op: Operation, ty: dict[str, list[Type]]) -> list[str]:
    if getattr(ty["view"][0], "padding", None) is not None:
        return ["views with a padding value cannot take atomic reductions"]
    return []


def describe_elements(elements: frozenset[ScalarType]) -> str:
    """``integers i32 and i64``, ``floats f16, bf16, f32 and f64``, ``i32, i64, f32 and f64``."""
    ints = sorted((e for e in elements if e.is_int), key=lambda e: e.bitwidth)
    floats = sorted((e for e in elements if not e.is_int), key=lambda e: (e.bitwidth, SCALAR_TYPES.index(e)))
    names = [str(e) for e in ints + floats]
    listed = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
    return ("integers " if not floats else "floats " if not ints else "") + listed


def _element_problem(op: Operation, ty: dict[str, list[Type]]) -> str | None:
    rule = op.opdef.elements
    if rule is None or not ty.get(rule.operand):
        return None
    t = ty[rule.operand][0]
    value = op.attributes.get(rule.by_attr) if rule.by_attr is not None else None
    accepted = rule.elements(value)
    what = f"'{getattr(value, 'text', value)}'" if rule.by_attr is not None else f"'{rule.operand}'"
    if accepted is None or not accepted:
        return f"takes no {what}" if rule.by_attr is not None else None
    if _el(t) not in accepted:
        return f"{what} works only with {describe_elements(accepted)}, found {t}"
    return None


#: What each kind of attribute holds in ``Operation.attributes`` (as the builder and the
#: reader make them); the printer relies on it.
_ATTR_VALUE_TYPES: dict[AttrKind, tuple[type, ...]] = {
    AttrKind.INT: (int,), AttrKind.BOOL: (bool,), AttrKind.UNIT: (bool,), AttrKind.STR: (str,),
    AttrKind.SYMREF: (str,), AttrKind.I32_ARRAY: (tuple, list), AttrKind.BOOL_ARRAY: (tuple, list),
    AttrKind.DENSE: (DenseElements,), AttrKind.HINTS: (OptimizationHints,),
    AttrKind.PREDICATE: (DivBy, SameElements, Bounded), AttrKind.ATTR_ARRAY: (ArrayAttr,),
}


def _attr_value_problem(a: AttrDef, v: Any) -> str | None:
    want = (a.enum,) if a.kind is AttrKind.ENUM and a.enum is not None else _ATTR_VALUE_TYPES.get(a.kind, ())
    if want and not isinstance(v, want):
        return f"attribute '{a.name}' must be {' or '.join(t.__name__ for t in want)}, found {v!r}"
    if a.kind is AttrKind.I32_ARRAY and not all(isinstance(x, int) for x in v):
        return f"attribute '{a.name}' must hold ints, found {v!r}"
    return None


def _segments_fit(op: Operation) -> bool:
    return len(op.segments) == len(op.opdef.operands) and sum(op.segments) == len(op.operands)


def structure_problems(op: Operation) -> list[str]:
    """Problems with the shape of one op: its operand groups, result count, attributes (each
    present and of its kind) and region count. Everything else about an op (the verifier's
    types, the printer's text) is read through this shape, so both check it first."""
    d = op.opdef
    if not _segments_fit(op):
        return [f"operand segments {list(op.segments)} do not fit groups {[o.name for o in d.operands]}"]
    probs: list[str] = []
    for od, (name, vals) in zip(d.operands, op.groups()):
        if od.arity is Arity.ONE and len(vals) != 1:
            probs.append(f"operand '{name}' needs exactly one value, found {len(vals)}")
        if od.arity is Arity.OPTIONAL and len(vals) > 1:
            probs.append(f"optional operand '{name}' takes at most one value, found {len(vals)}")
    fixed = [r for r in d.results if not r.variadic]
    if d.results and d.results[-1].variadic:
        if len(op.results) < len(fixed):
            probs.append(f"expects at least {len(fixed)} results, found {len(op.results)}")
    elif len(op.results) != len(d.results):
        probs.append(f"expects {len(d.results)} results, found {len(op.results)}")
    for a in d.attrs:
        if a.name not in op.attributes:
            if not a.in_flags:
                probs.append(f"missing attribute '{a.name}'")
            continue
        bad = _attr_value_problem(a, op.attributes[a.name])
        if bad:
            probs.append(bad)
    if len(op.regions) != len(d.regions):
        probs.append(f"has {len(op.regions)} regions, expects {len(d.regions)}")
    return probs


def check_op(op: Operation) -> list[str]:
    """Problems with one op's own operands, attributes and results (no context needed)."""
    d = op.opdef
    probs = structure_problems(op)
    if not _segments_fit(op):
        return probs
    for od, (name, vals) in zip(d.operands, op.groups()):
        for v in vals:
            if not satisfies(od.constraint, v.type):
                probs.append(f"operand '{name}' must be {describe(od.constraint)}, found {v.type}")
    for i, v in enumerate(op.results):
        rd = d.results[min(i, len(d.results) - 1)] if d.results else None
        if rd is not None and not satisfies(rd.constraint, v.type):
            probs.append(f"result '{rd.name}' must be {describe(rd.constraint)}, found {v.type}")
    if probs:
        return probs
    ty = _named_types(op)
    for group in d.same:
        ts = [(n, ty[n][0]) for n in group if ty.get(n)]
        if len({t for _, t in ts}) > 1:
            probs.append("types must match: " + ", ".join(f"{n} is {t}" for n, t in ts))
    if probs:
        return probs
    bad = _element_problem(op, ty)
    if bad:
        probs.append(bad)
    if d.check is not None:
        probs += d.check(op, ty)
    return probs


def _tile_dims_problem(t: Type) -> str | None:
    dims: tuple[int, ...] = ()
    if isinstance(t, TileType):
        dims = t.shape
    elif isinstance(t, TiledView):
        dims = t.tile_shape
    bad = [x for x in dims if not is_pow2(x)]
    if bad:
        return f"tile dimensions must be powers of two, found {t}"
    return None


def _element_arch_problem(op: Operation, sm: int) -> str | None:
    """An element type the op takes in this mode only on newer targets (bf16 atomic addf)."""
    rule = op.opdef.elements
    assert rule is not None
    vals = op.group(rule.operand) if _segments_fit(op) else []
    value = op.attributes.get(rule.by_attr) if rule.by_attr is not None else None
    el = _el(vals[0].type) if vals else None
    need = rule.min_sm_of(value, el)
    if need is not None and sm < need:
        mode = f"'{getattr(value, 'text', value)}' " if rule.by_attr is not None else ""
        return f"{mode}on {el} needs sm_{need} or newer, target is sm_{sm}"
    return None


def _arch_problem(t: Type, sm: int) -> str | None:
    el = t.element if isinstance(t, TileType) else getattr(t, "element", None)
    if isinstance(el, PointerType):
        el = el.pointee
    if isinstance(el, ScalarType):
        need = ELEMENT_MIN_SM.get(el)
        if need is not None and sm < need:
            return f"element type {el} needs sm_{need} or newer, target is sm_{sm}"
    return None


class _Verifier:
    def __init__(self, module: Module, arch: str | None = None) -> None:
        self.module = module
        self.problems: list[str] = []
        self.globals = {g.name for g in module.globals}
        self.sm = parse_arch(arch).sm if arch is not None else None
        self.loops: list[Operation] = []
        self.depth = 0  # regions entered: bounded so that no walk of a verified module recurses too deep

    def report(self, msg: str, op: Operation | None = None, fn: Function | None = None) -> None:
        loc = op.loc if op is not None else fn.loc if fn is not None else None
        where = ""
        if loc is not None:
            where = f"{loc}: "
        what = f"'{op.name}'" if op is not None else f"function @{fn.name}" if fn is not None else "module"
        self.problems.append(f"{where}{what}: {msg}")

    def run(self) -> None:
        names: set[str] = set()
        for g in self.module.globals:
            if g.name in names:
                self.problems.append(f"global @{g.name}: symbol defined twice")
            names.add(g.name)
            p = _tile_dims_problem(g.value.type)
            if p:
                self.problems.append(f"global @{g.name}: {p}")
        for f in self.module.functions:
            if f.name in names:
                self.report("symbol defined twice", fn=f)
            names.add(f.name)
            self.function(f)

    def function(self, f: Function) -> None:
        if f.entry:
            if f.type.results:
                self.report(f"kernel entries return nothing, found results {[str(t) for t in f.type.results]}", fn=f)
            for i, t in enumerate(f.type.inputs):
                # tileiras fails (exit 5, no message) on any other parameter type, tensor_view included
                if not (isinstance(t, TileType) and t.rank == 0):
                    self.report(f"entry parameter {i} must be a rank-0 tile (scalar or pointer), found {t}", fn=f)
        if [a.type for a in f.body.args] != list(f.type.inputs):
            self.report("body block arguments do not match the signature", fn=f)
        for t in f.type.inputs:
            p = _tile_dims_problem(t)
            if p:
                self.report(p, fn=f)
        visible: set[int] = {id(a) for a in f.body.args}
        self.block(f.body, visible, "entry", f)
        last = f.body.ops[-1] if f.body.ops else None
        if last is None or last.name != "return":
            self.report("body must end with 'return'", fn=f)
        elif [v.type for v in last.operands] != list(f.type.results):
            self.report(f"return types {[str(v.type) for v in last.operands]} do not match the signature "
                        f"results {[str(t) for t in f.type.results]}", op=last)

    def block(self, b: Block, scope: set[int], parent: str, f: Function, rule: RegionRule | None = None) -> None:
        """Check ``b``, a region of op ``parent`` (whose region rule is ``rule``), whose uses
        may see the values in ``scope``; the values it defines are added to ``scope`` while
        it is checked and removed after (one set for the whole function, so checking costs
        no copy per block)."""
        defined: list[int] = []
        try:
            self._block(b, scope, defined, parent, rule, f)
        finally:
            scope.difference_update(defined)

    def _block(self, b: Block, scope: set[int], defined: list[int], parent: str, rule: RegionRule | None,
               f: Function) -> None:
        for i, op in enumerate(b.ops):
            d = op.opdef
            for n, v in enumerate(op.operands):
                if id(v) not in scope:
                    self.report(f"operand {n} does not dominate this use (defined later, elsewhere, "
                                f"or in a region that has ended)", op=op)
            for msg in check_op(op):
                self.report(msg, op=op)
            for r in op.results:
                dims = _tile_dims_problem(r.type) or _view_type_problem(r.type)
                if dims:
                    self.report(dims, op=op)
                if self.sm is not None:
                    bad = _arch_problem(r.type, self.sm)
                    if bad:
                        self.report(bad, op=op)
            if self.sm is not None and d.min_sm is not None and self.sm < d.min_sm:
                self.report(f"needs sm_{d.min_sm} or newer, target is sm_{self.sm}", op=op)
            if self.sm is not None and d.elements is not None and d.elements.min_sm:
                bad = _element_arch_problem(op, self.sm)
                if bad:
                    self.report(bad, op=op)
            if d.terminator:
                if i != len(b.ops) - 1:
                    self.report("a terminator must be the last op of its block", op=op)
                if parent not in d.parents:
                    self.report(f"may not terminate the body of '{parent}' (allowed in: "
                                f"{', '.join(d.parents)})", op=op)
                elif rule is not None and op.name in rule.passes_to_loop:
                    self.early_exit(op, parent)
            if rule is not None and rule.pure_body and not d.pure and not d.terminator:
                self.report(f"only pure ops may appear in the body of '{parent}'", op=op)
            for a in d.attrs:
                if a.kind is AttrKind.SYMREF and op.attributes.get(a.name) not in self.globals:
                    self.report(f"refers to unknown global @{op.attributes.get(a.name)}", op=op)
            self.regions(op, scope, f)
            for r in op.results:
                if id(r) not in scope:
                    scope.add(id(r))
                    defined.append(id(r))

    def regions(self, op: Operation, scope: set[int], f: Function) -> None:
        d = op.opdef
        if not d.regions or structure_problems(op):  # a shape check_op reported: regions are read through it
            return
        if self.depth >= MAX_REGION_DEPTH:
            self.report(f"regions nested more than {MAX_REGION_DEPTH} deep", op=op)
            return
        self.depth += 1
        try:
            self._regions(op, scope, f)
        finally:
            self.depth -= 1

    def _regions(self, op: Operation, scope: set[int], f: Function) -> None:
        d = op.opdef
        rule = d.region_rule
        for ri, region in enumerate(op.regions):
            if len(region.blocks) > 1:
                self.report(f"region {ri} has {len(region.blocks)} blocks; Tile IR regions have one", op=op)
            if not region.blocks:
                if not (rule is not None and rule.may_be_empty is not None and rule.may_be_empty(op, ri)):
                    self.report(f"region {ri} ('{d.regions[ri]}') is empty", op=op)
                continue
            blk = region.blocks[0]
            want = rule.block_args(op, ri) if rule is not None else None
            got = [a.type for a in blk.args]
            if want is not None and got != want:
                self.report(f"region {ri} block arguments must be {[str(t) for t in want]}, found "
                            f"{[str(t) for t in got]}", op=op)
            args = [id(a) for a in blk.args if id(a) not in scope]
            scope.update(args)
            is_loop = rule is not None and bool(rule.loop_exits)
            if is_loop:
                self.loops.append(op)
            self.block(blk, scope, op.name, f, rule)
            if is_loop:
                self.loops.pop()
            scope.difference_update(args)
            self.terminator(op, ri, blk)

    def early_exit(self, op: Operation, parent: str) -> None:
        """A terminator ending a region that passes it on (break/continue ending an ``if``)
        acts on the innermost enclosing loop."""
        loop = self.loops[-1] if self.loops else None
        rule = loop.opdef.region_rule if loop is not None else None
        carried = rule.exit_types(op.name) if rule is not None else None
        if loop is None or carried is None:
            want_loop = " or ".join(f"'{p}'" for p in op.opdef.parents if p != parent)
            self.report(f"inside '{parent}' needs an enclosing {want_loop}", op=op)
            return
        types = [v.type for v in op.operands]
        want = carried(loop)
        if types != want:
            self.report(f"{op.name} carries {[str(t) for t in types]}, the enclosing '{loop.name}' expects "
                        f"{[str(t) for t in want]}", op=op)

    def terminator(self, op: Operation, ri: int, blk: Block) -> None:
        last = blk.ops[-1] if blk.ops else None
        rule = op.opdef.region_rule
        if last is None or not last.opdef.terminator:
            self.report(f"region {ri} must end with {rule.ends_with if rule is not None else 'a terminator'}", op=op)
            return
        bad = rule.end_problem(op, last) if rule is not None else None
        if bad:
            self.report(bad, op=last)


# -- region rules of the ops with regions (each record's RegionRule names these) -------

def iter_value_types(op: Operation) -> list[Type]:
    """What a loop carries from one iteration to the next: its initial values' types."""
    return [v.type for v in op.group("initValues")]


def result_types(op: Operation) -> list[Type]:
    return [r.type for r in op.results]


def for_block_args(op: Operation, index: int) -> list[Type]:
    """The induction variable (the bounds' type), then the iter values."""
    return [op.operands[0].type] + iter_value_types(op)


def loop_block_args(op: Operation, index: int) -> list[Type]:
    return iter_value_types(op)


def no_block_args(op: Operation, index: int) -> list[Type]:
    return []


def reduce_block_args(op: Operation, index: int) -> list[Type]:
    return reduce_body_arg_types([v.type for v in op.group("operands")])


def else_may_be_empty(op: Operation, index: int) -> bool:
    """An ``if`` without results may leave its else region without a block."""
    return index == 1 and not op.results


def _continue_problem(op: Operation, last: Operation) -> str | None:
    types, want = [v.type for v in last.operands], iter_value_types(op)
    if types != want:
        return f"continue carries {[str(t) for t in types]}, the loop carries {[str(t) for t in want]}"
    return None


def _results_problem(op: Operation, last: Operation) -> str | None:
    types, want = [v.type for v in last.operands], result_types(op)
    if types != want:
        return f"{last.name} yields {[str(t) for t in types]}, '{op.name}' results are {[str(t) for t in want]}"
    return None


def for_end(op: Operation, last: Operation) -> str | None:
    """A ``for`` body's terminator carries the iter values to the next iteration."""
    return _continue_problem(op, last)


def loop_end(op: Operation, last: Operation) -> str | None:
    """A ``loop`` body ends with continue (the iter values) or break (the results)."""
    if last.name == "continue":
        return _continue_problem(op, last)
    if last.name == "break":
        return _results_problem(op, last)
    return None


def if_end(op: Operation, last: Operation) -> str | None:
    """A branch's yield gives the ``if``'s results (break/continue act on the loop around)."""
    return _results_problem(op, last) if last.name == "yield" else None


def reduce_end(op: Operation, last: Operation) -> str | None:
    """The body of reduce/scan yields one rank-0 tile per operand."""
    types = [v.type for v in last.operands]
    want = reduce_yield_types([v.type for v in op.group("operands")])
    if types != want:
        return f"yield must give {[str(t) for t in want]}, found {[str(t) for t in types]}"
    return None


def verify(module: Module, arch: str | None = None) -> None:
    """Raise :class:`VerificationError` listing every problem found in ``module``; with
    ``arch`` (``"sm_90"``) also the element types and ops that target lacks."""
    found = problems(module, arch)
    if found:
        err = VerificationError("; ".join(found) if len(found) == 1 else
                                f"{len(found)} problems:\n  " + "\n  ".join(found))
        err.problems = found  # type: ignore[attr-defined]
        raise err


def problems(module: Module, arch: str | None = None) -> list[str]:
    """Every problem in ``module`` (empty when it verifies)."""
    v = _Verifier(module, arch)
    v.run()
    return v.problems


