"""The element-wise DSL functions: math with rounding and flush-to-zero options,
constant folding of Python numbers, where, ceil_div, astype and bitcast."""

from __future__ import annotations

import ast
import numpy as np
import operator
from collections.abc import Callable
from typing import Any, Concatenate, TYPE_CHECKING

import numpy as np

from cutile_compiler._builtins._base import DSL_FUNCTIONS, _dtype, _NUMBER, _static_bool, _tile, Builtin, builtin, family_member, Params
from cutile_compiler._dtypes import DType
from cutile_compiler._errors import bounded_repr
from cutile_compiler._ir import Value
from cutile_compiler._opdefs._base import OpDef, OPS
from cutile_compiler._opdefs.elementwise import F32_ONLY_ROUNDINGS

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


# Element-wise DSL functions whose plain-number calls fold (all of them but fma,
# which has three operands and keeps its single rounding on the device).
_FOLDABLE = frozenset({"minimum", "maximum", "exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sin", "cos", "tan",
                       "sinh", "cosh", "tanh", "floor", "ceil", "atan2"})


def _fold(fe: FrontEnd, node: ast.AST, name: str, *values: bool | int | float) -> bool | int | float:
    """A DSL function applied to Python numbers, computed at compile time with the
    op's own numpy meaning (so a constant and a tile agree), as a Python number."""
    from cutile_compiler._opdefs.elementwise import ELEMENTWISE

    def compute(*numbers: bool | int | float) -> bool | int | float:
        arrays = [np.asarray(v) for v in numbers]
        if any(a.dtype == object for a in arrays):  # an int past 64 bits
            raise OverflowError("an int of more than 64 bits has no numpy value")
        with np.errstate(all="ignore"):  # inf and nan are the answers, as on a tile
            folded: bool | int | float = np.asarray(ELEMENTWISE[name].function(*arrays)).item()
        return folded

    return fe.fold(compute, values, lambda: f"{name}({', '.join(bounded_repr(v) for v in values)})", node)  # type: ignore[no-any-return]


def _unary(name: str, fe: FrontEnd, node: ast.Call, x: Any, /, *, rounding: str | None = None,
           flush_to_zero: bool = False) -> Any:
    """An element-wise op of one operand; it takes the float options the op takes
    (`OpDef.rounding_modes`, `OpDef.flush_to_zero`), which the op checks."""
    if isinstance(x, _NUMBER) and rounding is None and flush_to_zero is False and name in _FOLDABLE:
        return _fold(fe, node, name, x)  # a constant stays a (weak) Python number
    value = _tile(fe, x, node, f"{name}'s argument")
    return fe.op(name, [value], _float_options(fe, node, name, rounding, flush_to_zero), node=node).result


def _binary(name: str, fe: FrontEnd, node: ast.Call, x: Any, y: Any, /, *, rounding: str | None = None,
            flush_to_zero: bool = False) -> Any:
    """An element-wise op of two operands (promoted and broadcast together)."""
    if (isinstance(x, _NUMBER) and isinstance(y, _NUMBER) and rounding is None and flush_to_zero is False
            and name in _FOLDABLE):
        return _fold(fe, node, name, x, y)
    attrs = _float_options(fe, node, name, rounding, flush_to_zero)
    a, b = fe.unify([x, y], node, f"{name}()")
    return fe.op(name, [a, b], attrs, node=node).result


def _elementwise(template: Callable[Concatenate[str, FrontEnd, ast.Call, Params], Any], name: str,
                 doc: str) -> Builtin[Params]:
    """Element-wise DSL function ``name`` (`_unary` or `_binary`), documented with the
    float options its op takes."""
    how = " Element-wise." if template is _unary else " Element-wise; shapes broadcast and dtypes promote."
    return family_member(template, name, name, doc + how + _options_doc(OPS[name]))


exp = _elementwise(_unary, "exp", "e ** x.")
exp2 = _elementwise(_unary, "exp2", "2 ** x.")
log = _elementwise(_unary, "log", "The natural logarithm.")
log2 = _elementwise(_unary, "log2", "The base-2 logarithm.")
sqrt = _elementwise(_unary, "sqrt", "The square root.")
rsqrt = _elementwise(_unary, "rsqrt", "1 / sqrt(x).")
sin = _elementwise(_unary, "sin", "The sine (radians).")
cos = _elementwise(_unary, "cos", "The cosine (radians).")
tan = _elementwise(_unary, "tan", "The tangent (radians).")
sinh = _elementwise(_unary, "sinh", "The hyperbolic sine.")
cosh = _elementwise(_unary, "cosh", "The hyperbolic cosine.")
tanh = _elementwise(_unary, "tanh", "The hyperbolic tangent.")
floor = _elementwise(_unary, "floor", "Rounds down to an integral value (floats).")
ceil = _elementwise(_unary, "ceil", "Rounds up to an integral value (floats).")
atan2 = _elementwise(_binary, "atan2", "The angle of (x, y) = atan(y / x) in the right quadrant; atan2(y, x).")
minimum = _elementwise(_binary, "minimum", "The element-wise minimum.")
maximum = _elementwise(_binary, "maximum", "The element-wise maximum.")
add = _elementwise(_binary, "add", "x + y.")
sub = _elementwise(_binary, "sub", "x - y.")
mul = _elementwise(_binary, "mul", "x * y.")
div = _elementwise(_binary, "div", "x / y for floats.")


@builtin
def pow_(fe: FrontEnd, node: ast.Call, x: Any, y: Any) -> Any:
    """x ** y for floating-point tiles."""
    return fe.binary("pow", x, y, node, operator.pow)


@builtin
def fma(fe: FrontEnd, node: ast.Call, a: Any, b: Any, c: Any, /, *, rounding: str | None = None,
        flush_to_zero: bool = False) -> Value:
    """a * b + c with one rounding (floats)."""
    attrs = _float_options(fe, node, "fma", rounding, flush_to_zero)
    x, y, z = fe.unify([a, b, c], node, "fma()")
    return fe.op("fma", [x, y, z], attrs, node=node).result


fma.__doc__ = (fma.__doc__ or "") + _options_doc(OPS["fma"])


@builtin
def where(fe: FrontEnd, node: ast.Call, condition: Any, x: Any, y: Any) -> Any:
    """x where ``condition`` (a bool tile) holds, else y; shapes broadcast."""
    if isinstance(condition, bool) and isinstance(x, _NUMBER) and isinstance(y, _NUMBER):
        return x if condition else y  # decided at compile time
    cond = _tile(fe, condition, node, "where's condition")  # its dtype is the op's rule (`Select`)
    a, b = fe.unify([x, y], node, "where()")
    shape = fe.common_shape([cond, a], node, "where(): shapes")
    return fe.op("select", [fe.broadcast_to(cond, shape, node), fe.broadcast_to(a, shape, node),
                            fe.broadcast_to(b, shape, node)], node=node).result


@builtin
def ceil_div(fe: FrontEnd, node: ast.Call, a: Any, b: Any) -> Any:
    """(a + b - 1) // b: how many chunks of b cover a."""
    if isinstance(a, int) and isinstance(b, int):
        if b == 0:
            raise fe.type_error("ceil_div by zero", node)
        return fe.fold(lambda x, y: -(-x // y), (a, b), lambda: f"ceil_div({bounded_repr(a)}, {bounded_repr(b)})", node)
    return fe.binary("floordiv", fe.binary("sub", fe.binary("add", a, b, node), 1, node), b, node)


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
    return fe.op("cast", [value], {"dtype": target, **attrs}, node=node).result


@builtin
def bitcast(fe: FrontEnd, node: ast.Call, x: Any, dtype: DType) -> Value:
    """x's bits read as ``dtype`` of the same width."""
    return fe.op("bitcast", [_tile(fe, x, node, "bitcast's argument")], {"dtype": _dtype(fe, dtype, node)}, node=node).result
