"""The DSL functions that reduce and scan tiles along axes, with built-in or
kernel-written combining functions."""

from __future__ import annotations

import ast
import inspect
from typing import Any, TYPE_CHECKING

from cutile_compiler import _dtypes as dt
from cutile_compiler._builtins._base import _axis, _NUMBER, _tile, builtin, DeviceFunction, family_member
from cutile_compiler._ir import Value
from cutile_compiler._opdefs import ControlOp, ReductionOp, ShapeOp
from cutile_compiler._opdefs._base import RuleError
from cutile_compiler._opdefs.shape import constant_value
from cutile_compiler._types import TileType

if TYPE_CHECKING:
    from cutile_compiler._frontend import FrontEnd


def _reducible_rank(fe: FrontEnd, value: Value, kind: str, node: ast.AST) -> int:
    """The rank of a tile to reduce or scan (checked before its axis is read: a
    scalar has none)."""
    rank: int = value.type.rank  # type: ignore[attr-defined]
    if rank == 0:
        raise fe.type_error(f"{kind} needs a tile of rank 1 or more, got a scalar", node)
    return rank


def _reduce(fe: FrontEnd, node: ast.Call, kind: str, x: Any, axis: Any, keepdims: Any) -> Value:
    value = _tile(fe, x, node, f"{kind}'s argument")
    rank = _reducible_rank(fe, value, kind, node)
    if axis is None:
        if kind in ("argmax", "argmin") and rank != 1:
            raise fe.type_error(f"{kind} over all axes needs a 1-D tile; pass axis=", node)
        axes = list(range(rank))
    else:
        axes = [_axis(fe, a, rank, node) for a in (axis if isinstance(axis, tuple) else (axis,))]
    result = value
    for a in sorted(set(axes), reverse=True):
        result = fe.op(ReductionOp.REDUCE, [result], {"kind": kind, "axis": a}, node=node).result
    if keepdims:
        shape = tuple(1 if i in axes else d for i, d in enumerate(value.type.shape))  # type: ignore[attr-defined]
        result = fe.op(ShapeOp.RESHAPE, [result], {"shape": shape}, node=node).result
    return result


def _reduction(kind: str, fe: FrontEnd, node: ast.Call, x: Any, axis: int | tuple[int, ...] | None = None,
               keepdims: bool = False) -> Value:
    return _reduce(fe, node, kind, x, axis, keepdims)


sum_ = family_member(_reduction, "sum", "sum", "The sum along ``axis`` (all axes by default).")
prod = family_member(_reduction, "prod", "prod", "The product along ``axis`` (all axes by default).")
max_ = family_member(_reduction, "max", "max", "The maximum along ``axis`` (all axes by default); NaN is a "
                     "missing value (all NaN: NaN).")
min_ = family_member(_reduction, "min", "min", "The minimum along ``axis`` (all axes by default); NaN is a "
                     "missing value (all NaN: NaN).")
argmax = family_member(_reduction, "argmax", "argmax",
                       "The i32 position of the maximum along ``axis`` (first on ties; NaN never taken, "
                       "all NaN: 0).")
argmin = family_member(_reduction, "argmin", "argmin",
                       "The i32 position of the minimum along ``axis`` (first on ties; NaN never taken, "
                       "all NaN: 0).")


def _scan(kind: str, fe: FrontEnd, node: ast.Call, x: Any, axis: int = 0, reverse: bool = False) -> Value:
    value = _tile(fe, x, node, f"cum{kind}'s argument")
    rank = _reducible_rank(fe, value, f"cum{kind}", node)
    return fe.op(ReductionOp.SCAN, [value], {"kind": kind, "axis": _axis(fe, axis, rank, node),
                                   "reverse": bool(reverse)}, node=node).result


cumsum = family_member(_scan, "sum", "cumsum", "Inclusive prefix sums along ``axis``.")
cumprod = family_member(_scan, "prod", "cumprod", "Inclusive prefix products along ``axis``.")


def _combining(fe: FrontEnd, node: ast.Call, kind: str, x: Any, axis: Any, combine_fn: Any, identity: Any,
               attrs: dict[str, Any]) -> Any:
    """A reduce_fn/scan_fn op whose body is ``combine_fn(accumulator, element)`` inlined."""
    from cutile_compiler._builtins.calls import call_object  # (which reduces for Python's min and max)
    from cutile_compiler._ir import Block

    is_tuple = isinstance(x, tuple)
    tiles = [_tile(fe, v, node, f"{kind}'s tile") for v in (x if is_tuple else (x,))]
    identities = identity if isinstance(identity, tuple) else (identity,)
    if len(identities) != len(tiles):
        raise fe.type_error(f"{kind}: {len(tiles)} tile(s) need {len(identities)} identity value(s), got "
                            f"{len(identities)}", node)
    from cutile_compiler._frontend import KernelLambda

    if not (isinstance(combine_fn, (DeviceFunction, KernelLambda)) or inspect.isfunction(combine_fn)):
        raise fe.type_error(f"{kind}'s combine_fn must be a @cutile.function or a lambda of (accumulator, element), "
                            f"got {fe.describe(combine_fn)}", node)
    rank = _reducible_rank(fe, tiles[0], kind, node)
    checked: list[int | float | bool] = []
    for tile, ident in zip(tiles, identities):
        dtype: dt.DType = tile.type.dtype  # type: ignore[attr-defined]
        if not isinstance(ident, _NUMBER) or (dtype.is_integer and isinstance(ident, float)):
            raise fe.type_error(f"{kind}: the identity of a {dtype} tile must be a {dtype} number, got "
                                f"{fe.describe(ident)}", node)
        try:
            checked.append(constant_value(ident, dtype))
        except RuleError as exc:
            raise fe.type_error(f"{kind}'s identity: {exc}", node) from None
    body = Block()
    elements, accumulators = [], []
    for tile in tiles:
        scalar = TileType(tile.type.dtype)  # type: ignore[attr-defined]
        element, accumulator = Value(scalar, "element"), Value(scalar, "acc")
        body.args += [element, accumulator]
        elements.append(element)
        accumulators.append(accumulator)
    with fe.inserting(body):
        arguments: list[Any] = [tuple(accumulators), tuple(elements)] if is_tuple else [accumulators[0], elements[0]]
        result = call_object(fe, combine_fn, arguments, {}, node)
        results = result if isinstance(result, tuple) else (result,)
        if len(results) != len(tiles) or (is_tuple != isinstance(result, tuple)):
            raise fe.type_error(f"{kind}: combine_fn must return {len(tiles)} value(s), like its accumulator, got "
                                f"{fe.describe(result)}", node)
        yielded = []
        for value, accumulator in zip(results, accumulators):
            wanted = accumulator.type
            assert isinstance(wanted, TileType)
            tile = fe.to_tile(value, node, like=wanted.dtype, what=f"{kind}'s combined value")
            if tile.type != wanted:
                if isinstance(tile.type, TileType) and tile.type.is_scalar and dt.converts_losslessly(tile.type.dtype, wanted.dtype):
                    tile = fe.cast(tile, wanted.dtype, node)
                else:
                    raise fe.type_error(f"{kind}: combine_fn must return {wanted} values, got {tile.type}", node)
            yielded.append(tile)
        fe.op(ControlOp.YIELD, yielded, node=node)
    key = ReductionOp.REDUCE_FN if kind == "reduce" else ReductionOp.SCAN_FN
    op = fe.op(key, tiles, {"axis": _axis(fe, axis, rank, node), "identities": tuple(checked), **attrs}, [body],
               node=node)
    return tuple(op.results) if is_tuple else op.results[0]


@builtin
def reduce(fe: FrontEnd, node: ast.Call, x: Any, axis: int, combine_fn: Any, identity: Any) -> Any:
    """x reduced along ``axis`` by ``combine_fn(accumulator, element)`` (a device
    function or lambda on scalars; associative and commutative), starting from
    ``identity``. ``x`` may be a tuple of tiles of one shape, with a tuple of
    identities; combine_fn then takes and returns tuples."""
    return _combining(fe, node, "reduce", x, axis, combine_fn, identity, {})


@builtin
def scan(fe: FrontEnd, node: ast.Call, x: Any, axis: int, combine_fn: Any, identity: Any, reverse: bool = False) -> Any:
    """Inclusive scan of x along ``axis`` by ``combine_fn(accumulator, element)``, as
    for `reduce` (``reverse=True`` scans from the end)."""
    return _combining(fe, node, "scan", x, axis, combine_fn, identity, {"reverse": bool(reverse)})
