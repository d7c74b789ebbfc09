"""The element-wise DSL functions: those made from the declarations of the element-wise
ops (`ElementwiseOp`: math with rounding and flush-to-zero options, folding Python
numbers where the op says so), and pow, where, ceil_div, astype and bitcast."""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Concatenate, TYPE_CHECKING, cast

import numpy as np

from cutile_compiler._builtins._base import (
    DSL_FUNCTIONS, _dtype, _NUMBER, _static_bool, _tile, Builtin, builtin, family_member, Params)
from cutile_compiler._dtypes import DType
from cutile_compiler._errors import bounded_repr
from cutile_compiler._ir import Value
from cutile_compiler._opdefs._base import Op, OpDef, registered
from cutile_compiler._opdefs.elementwise import F32_ONLY_ROUNDINGS, Elementwise, ElementwiseOp

if TYPE_CHECKING:
    from cutile_compiler._frontend import FrontEnd


def _float_options(fe: FrontEnd, node: ast.AST, name: str, rounding: Any, flush_to_zero: Any) -> dict[str, Any]:
    """The rounding/ftz attributes of a float op, checked for their Python types."""
    attrs: dict[str, Any] = {}
    if rounding is not None:
        if not isinstance(rounding, str):
            raise fe.type_error(f"{name}: rounding must be a string such as 'zero', got {fe.describe(rounding)}", node)
        attrs["rounding"] = rounding
    if flush_to_zero is not False:
        attrs["ftz"] = _static_bool(fe, flush_to_zero, node, f"{name}: flush_to_zero")
    return attrs


def _options_doc(opdef: OpDef) -> str:
    """The documentation of the float options ``opdef`` takes."""
    doc = ""
    if opdef.rounding_modes:
        directed = [m for m in opdef.rounding_modes if m not in F32_ONLY_ROUNDINGS]
        fast = [m for m in opdef.rounding_modes if m in F32_ONLY_ROUNDINGS]
        faster = f", or for f32 the faster {' or '.join(fast)}" if fast else ""
        doc += (f" ``rounding``: {', '.join(directed[:-1])} or {directed[-1]} (f32 and f16; nearest_even is the"
                f" default){faster}.")
    if opdef.flush_to_zero:
        doc += " ``flush_to_zero=True`` (f32) treats subnormal inputs and results as zero."
    return doc


def _fold(fe: FrontEnd, node: ast.AST, opdef: Elementwise, *values: bool | int | float) -> bool | int | float:
    """A DSL function applied to Python numbers, computed at compile time with the
    op's own numpy meaning (so a constant and a tile agree), as a Python number."""

    def compute(*numbers: bool | int | float) -> bool | int | float:
        arrays = [np.asarray(v) for v in numbers]
        if any(a.dtype == object for a in arrays):  # an int past 64 bits
            raise OverflowError("an int of more than 64 bits has no numpy value")
        with np.errstate(all="ignore"):  # inf and nan are the answers, as on a tile
            folded: bool | int | float = np.asarray(opdef.function(*arrays)).item()
        return folded

    return fe.fold(compute, values, lambda: f"{opdef.name}({', '.join(bounded_repr(v) for v in values)})", node)  # type: ignore[no-any-return]


def _apply(opdef: Elementwise, fe: FrontEnd, node: ast.Call, operands: tuple[Any, ...], rounding: Any,
           flush_to_zero: Any) -> Any:
    """An element-wise op's DSL function on ``operands`` (tiles or numbers, promoted and
    broadcast together); it takes the float options the op takes (`OpDef.rounding_modes`,
    `OpDef.flush_to_zero`), which the op checks. Python numbers alone fold where the op
    is `Elementwise.foldable`: a constant stays a (weak) Python number."""
    name = opdef.name
    if (opdef.foldable and all(isinstance(x, _NUMBER) for x in operands) and rounding is None
            and flush_to_zero is False):
        return _fold(fe, node, opdef, *operands)
    if len(operands) == 1:
        tiles = [_tile(fe, operands[0], node, f"{name}'s argument")]
        attrs = _float_options(fe, node, name, rounding, flush_to_zero)
    else:
        attrs = _float_options(fe, node, name, rounding, flush_to_zero)
        tiles = fe.unify(operands, node, f"{name}()")
    return fe.op(opdef.key, tiles, attrs, node=node).result


def unary(opdef: Elementwise, fe: FrontEnd, node: ast.Call, x: Any, /, *, rounding: str | None = None,
          flush_to_zero: bool = False) -> Any:
    return _apply(opdef, fe, node, (x,), rounding, flush_to_zero)


def binary(opdef: Elementwise, fe: FrontEnd, node: ast.Call, x: Any, y: Any, /, *, rounding: str | None = None,
           flush_to_zero: bool = False) -> Any:
    return _apply(opdef, fe, node, (x, y), rounding, flush_to_zero)


def ternary(opdef: Elementwise, fe: FrontEnd, node: ast.Call, a: Any, b: Any, c: Any, /, *,
            rounding: str | None = None, flush_to_zero: bool = False) -> Any:
    return _apply(opdef, fe, node, (a, b, c), rounding, flush_to_zero)


#: The parameters of an element-wise op's DSL function, by the op's arity, and what its
#: documentation adds to the op's
_TEMPLATES: dict[int, tuple[Callable[..., Any], str]] = {
    1: (unary, " Element-wise."),
    2: (binary, " Element-wise; shapes broadcast and dtypes promote."),
    3: (ternary, ""),
}
#: The DSL function of each registered element-wise op that declares one (`Elementwise.doc`)
FUNCTIONS: dict[Op, Builtin[...]] = {}


def define_functions(family: type[Op]) -> None:
    """Makes the DSL function of each op of ``family`` that declares one: named as the
    op, with the parameters of its arity's template and the op's documentation,
    followed by that of the float options it takes. They join `DSL_FUNCTIONS`."""
    for key in family:
        opdef = key.definition
        if isinstance(opdef, Elementwise) and opdef.doc is not None:
            template, how = _TEMPLATES[opdef.arity]
            FUNCTIONS[key] = family_member(template, opdef, opdef.name, opdef.doc + how + _options_doc(opdef))


def remove_functions(family: type[Op]) -> None:
    """Takes the DSL functions of ``family``'s ops out of `DSL_FUNCTIONS` again."""
    for key in family:
        function = FUNCTIONS.pop(key, None)
        if function is not None:
            del DSL_FUNCTIONS[function.__name__]


@contextmanager
def declared(family: type[Op]) -> Iterator[dict[Op, Builtin[...]]]:
    """Inside the block, the ops of ``family`` (declared outside the compiler, e.g. by a
    test) are registered and have their DSL functions; yields those functions by key."""
    with registered(family):
        try:
            define_functions(family)
            yield {key: FUNCTIONS[key] for key in family if key in FUNCTIONS}
        finally:
            remove_functions(family)


def function_of(template: Callable[Concatenate[Elementwise, FrontEnd, ast.Call, Params], Any],
                key: Op) -> Builtin[Params]:
    """The DSL function of element-wise op ``key``, typed with the parameters of
    ``template`` (`unary`, `binary` or `ternary`: its arity's) for static tools."""
    opdef = key.definition
    assert isinstance(opdef, Elementwise) and _TEMPLATES[opdef.arity][0] is template, key
    return cast("Builtin[Params]", FUNCTIONS[key])


define_functions(ElementwiseOp)


@builtin
def pow_(fe: FrontEnd, node: ast.Call, x: Any, y: Any) -> Any:
    """x ** y for floating-point tiles."""
    return fe.binary(ElementwiseOp.POW, x, y, node, operator.pow)


@builtin
def where(fe: FrontEnd, node: ast.Call, condition: Any, x: Any, y: Any) -> Any:
    """x where ``condition`` (a bool tile) holds, else y; shapes broadcast."""
    if isinstance(condition, bool) and isinstance(x, _NUMBER) and isinstance(y, _NUMBER):
        return x if condition else y  # decided at compile time
    cond = _tile(fe, condition, node, "where's condition")  # its dtype is the op's rule (`Select`)
    a, b = fe.unify([x, y], node, "where()")
    shape = fe.common_shape([cond, a], node, "where(): shapes")
    return fe.op(ElementwiseOp.SELECT, [fe.broadcast_to(cond, shape, node), fe.broadcast_to(a, shape, node),
                                        fe.broadcast_to(b, shape, node)], node=node).result


@builtin
def ceil_div(fe: FrontEnd, node: ast.Call, a: Any, b: Any) -> Any:
    """(a + b - 1) // b: how many chunks of b cover a."""
    if isinstance(a, int) and isinstance(b, int):
        if b == 0:
            raise fe.type_error("ceil_div by zero", node)
        return fe.fold(lambda x, y: -(-x // y), (a, b), lambda: f"ceil_div({bounded_repr(a)}, {bounded_repr(b)})", node)
    return fe.binary(ElementwiseOp.FLOORDIV, fe.binary(ElementwiseOp.SUB, fe.binary(ElementwiseOp.ADD, a, b, node), 1, node),
                     b, node)


cdiv = DSL_FUNCTIONS["cdiv"] = ceil_div  # cuTile's name for it


@builtin
def astype(fe: FrontEnd, node: ast.Call, x: Any, dtype: DType, rounding: str | None = None) -> Value:
    """x converted to ``dtype`` (floats to ints truncate toward zero). Conversions to
    floats round to nearest even, or toward zero with ``rounding="zero"`` (to f32
    or f16)."""
    value = _tile(fe, x, node, "astype's argument")
    target = _dtype(fe, dtype, node)
    attrs = _float_options(fe, node, "astype", rounding, False)
    if not attrs or value.type.dtype is target:  # type: ignore[attr-defined]
        return fe.cast(value, target, node)
    return fe.op(ElementwiseOp.CAST, [value], {"dtype": target, **attrs}, node=node).result


@builtin
def bitcast(fe: FrontEnd, node: ast.Call, x: Any, dtype: DType) -> Value:
    """x's bits read as ``dtype`` of the same width."""
    return fe.op(ElementwiseOp.BITCAST, [_tile(fe, x, node, "bitcast's argument")], {"dtype": _dtype(fe, dtype, node)},
                 node=node).result


@builtin
def gelu(fe: FrontEnd, node: ast.Call, x: Any, approximate: str = "none") -> Value:
    """The GELU activation x * P(X <= x) for standard normal X: exact, x * (1 + erf(x /
    sqrt(2))) / 2 (``approximate="none"``; f16, bf16, f32), or ``approximate="tanh"``,
    x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 x ** 3))) / 2. Element-wise."""
    if approximate not in ("none", "tanh"):
        raise fe.type_error(f"gelu: approximate must be 'none' or 'tanh', got {fe.describe(approximate)}", node)
    key = ElementwiseOp.GELU_ERF if approximate == "none" else ElementwiseOp.GELU_TANH
    return fe.op(key, [_tile(fe, x, node, "gelu's argument")], node=node).result


@builtin
def clamp(fe: FrontEnd, node: ast.Call, x: Any, lo: Any, hi: Any) -> Any:
    """minimum(maximum(x, lo), hi): x limited to [lo, hi]. Element-wise;
    shapes broadcast and dtypes promote; numbers alone fold."""
    if all(isinstance(v, _NUMBER) for v in (x, lo, hi)):
        return fe.fold(lambda a, b, c: min(max(a, b), c), (x, lo, hi),
                       lambda: f"clamp({bounded_repr(x)}, {bounded_repr(lo)}, {bounded_repr(hi)})", node)
    value, low, high = fe.unify([x, lo, hi], node, "clamp()")
    raised = fe.op(ElementwiseOp.MAXIMUM, [value, low], node=node).result
    return fe.op(ElementwiseOp.MINIMUM, [raised, high], node=node).result
