"""Element-wise operations: arithmetic, comparisons, math functions, select, casts.

Each is declared once, as a member of `ElementwiseOp` whose value says all the op
is: the operands and dtype kinds it takes, its numpy meaning, its Tile IR, the
float options it takes, whether its DSL function folds Python numbers, and that
function's documentation (the DSL function itself is made from the declaration
by ``_builtins.elementwise``).

Operands of an element-wise op have identical tile types (the front end inserts
casts and broadcasts first, as Tile IR requires). Integer ``floordiv`` and
``mod`` follow Python (floor) semantics; ``div`` is true division, for floats.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

import cutile_ir as ir
from cutile_compiler import _dtypes as dt
from cutile_compiler._dtypes import numpy_dtype as numpy_dtype  # (the ops evaluate with it)
from cutile_compiler._ir import Operation
from cutile_compiler._lowering import tile_type
from cutile_compiler._opdefs._base import EvalContext, IntegerDivisionByZero, Op, OpDef, RuleError, register
from cutile_compiler._types import KType, TileType

if TYPE_CHECKING:
    from cutile_compiler._lowering import Lowering

Kinds = frozenset[str]
FLOAT: Kinds = frozenset({"float"})
INT: Kinds = frozenset({"int", "uint"})
NUMBER: Kinds = frozenset({"int", "uint", "float"})
BITS: Kinds = frozenset({"int", "uint", "bool"})
ANY: Kinds = frozenset({"int", "uint", "float", "bool"})

_KIND_WORDS = {FLOAT: "floating-point", INT: "integer", NUMBER: "numeric", BITS: "integer or bool", ANY: "any"}


def tile_operand(types: Sequence[KType], index: int, op: str) -> TileType:
    found = types[index]
    if not isinstance(found, TileType):
        raise RuleError(f"{op}: operand {index + 1} must be a tile, got {found}")
    return found


def check_kind(tile: TileType, kinds: Kinds, op: str, hint: str = "") -> None:
    """Refuses a dtype of another kind; ``hint`` (e.g. "; convert with ...") ends the message."""
    if tile.dtype.restricted:
        raise RuleError(f"{op}: {tile.dtype} is a storage and scale format without arithmetic; convert it with "
                        f".astype(f32) first")
    if tile.dtype.kind not in kinds:
        raise RuleError(f"{op} needs {_KIND_WORDS.get(kinds, '/'.join(sorted(kinds)))} operands, got {tile.dtype}{hint}")


def same_types(types: Sequence[KType], op: str) -> TileType:
    first = tile_operand(types, 0, op)
    for index in range(1, len(types)):
        other = tile_operand(types, index, op)
        if other != first:
            raise RuleError(f"{op}: operands must have the same type, got {first} and {other}")
    return first


def _quiet(function: Callable[..., Any]) -> Callable[..., Any]:
    """numpy warns on overflow and division by zero; the GPU does neither."""

    def run(*args: Any) -> Any:
        with np.errstate(all="ignore"):
            return function(*args)

    return run


#: How an op emits its Tile IR when its declaration names no single Tile IR op.
Lowerer = Callable[["Elementwise", "Lowering", Operation, Sequence[Any]], Sequence[Any]]


class Elementwise(OpDef):
    """An element-wise op of ``arity`` operands, declared once with all it means:

    - ``kinds``: the dtype kinds its operands take (its typing rule refuses others,
      ending the message with ``kind_hint``);
    - ``function``: its numpy meaning (the interpreter's, and constant folding's);
    - its Tile IR: ``float_op`` for float operands and ``int_op`` for integer and
      bool ones (``signed``: the integer op takes a signedness), or ``lower``, a
      function emitting it;
    - ``rounding`` and ``flush_to_zero``: the float options it takes (see
      `check_float_options`);
    - ``doc``: the documentation of its DSL function, named as the op (None: it has
      none; an operator or another function reaches it); ``foldable``: whether that
      function applied to Python numbers is computed at compile time;
    - ``symbol``: its Python operator (messages name it so), ``folds_strings``:
      the operator on two strings folds too, ``true_division``: the operator
      converts integer operands to floats first (Python's ``/``);
    - ``spelled``: how messages name the op when not by its name or symbol.
    """

    lanewise = True

    def __init__(self, arity: int, kinds: Kinds, function: Callable[..., Any], *, float_op: str | None = None,
                 int_op: str | None = None, signed: bool = False, lower: Lowerer | None = None,
                 rounding: tuple[str, ...] = (), flush_to_zero: bool = False, doc: str | None = None,
                 foldable: bool = False, symbol: str = "", folds_strings: bool = False, true_division: bool = False,
                 spelled: str = "", kind_hint: str = "") -> None:
        self.arity = arity
        self.kinds = kinds
        self.function = _quiet(function)
        self.float_op = float_op
        self.int_op = int_op
        self.signed = signed
        self.lowerer = lower
        self.rounding_modes = rounding
        self.flush_to_zero = flush_to_zero
        self.doc = doc
        self.foldable = foldable
        self.symbol = symbol
        self.folds_strings = folds_strings
        self.true_division = true_division
        self._spelled = spelled
        self.kind_hint = kind_hint

    def result_type(self, operand: TileType) -> TileType:
        return operand

    def infer(self, operand_types: Sequence[KType], attrs: dict[str, Any]) -> tuple[KType, ...]:
        if len(operand_types) != self.arity:
            raise RuleError(f"{self.spelled} takes {self.arity} operand(s), got {len(operand_types)}")
        tile = same_types(operand_types, self.spelled)
        check_kind(tile, self.kinds, self.spelled, self.kind_hint)
        check_float_options(self, tile.dtype, attrs)
        return (self.result_type(tile),)

    def evaluate(self, ctx: EvalContext, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        result_type = op.results[0].type
        assert isinstance(result_type, TileType)
        if op.attrs.get("rounding", "nearest_even") != "nearest_even" or op.attrs.get("ftz"):
            return (_with_options(self.function, args, numpy_dtype(result_type.dtype), op.attrs),)
        out = self.function(*args)
        with np.errstate(over="ignore"):  # a float64 result past the dtype's range is its infinity
            return (np.asarray(out, dtype=numpy_dtype(result_type.dtype)),)

    def lower(self, ctx: Lowering, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        if self.lowerer is not None:
            return self.lowerer(self, ctx, op, args)
        operand_type = op.operands[0].type
        assert isinstance(operand_type, TileType)
        return (self.emit(ctx, operand_type.dtype, args, op.attrs),)

    def emit(self, ctx: Lowering, dtype: dt.DType, args: Sequence[Any], attrs: dict[str, Any] | None = None) -> Any:
        """The op's one Tile IR op on ``args`` of ``dtype`` (with the float options of
        ``attrs``): what it lowers to, and what a reduction combining by it emits."""
        attrs = attrs or {}
        if dtype.is_float:
            assert self.float_op is not None, self.name
            options: dict[str, Any] = {}
            if self.rounding_modes:  # an op taking rounding modes needs one in Tile IR
                options["rounding_mode"] = attrs.get("rounding", "nearest_even")
            if attrs.get("ftz"):
                options["flush_to_zero"] = True
            return getattr(ctx.builder, self.float_op)(*args, **options)
        assert self.int_op is not None, self.name
        options = {"signedness": dtype.signedness} if self.signed else {}
        return getattr(ctx.builder, self.int_op)(*args, **options)


class Comparison(Elementwise):
    """A comparison (Tile IR ``predicate``) of two operands of any kind, giving bools.
    On floats it is ordered (false where an operand is NaN) unless ``unordered``
    (Python's ``!=``, true for NaN)."""

    def __init__(self, predicate: str, function: Callable[..., Any], symbol: str, *, unordered: bool = False,
                 folds_strings: bool = False) -> None:
        super().__init__(2, ANY, function, symbol=symbol, folds_strings=folds_strings)
        self.predicate = predicate
        self.ordering = "unordered" if unordered else "ordered"

    def result_type(self, operand: TileType) -> TileType:
        return operand.with_dtype(dt.bool_)

    def lower(self, ctx: Lowering, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        operand_type = op.operands[0].type
        assert isinstance(operand_type, TileType)
        if operand_type.dtype.is_float:
            return (ctx.builder.cmpf(args[0], args[1], comparison_predicate=self.predicate,
                                     comparison_ordering=self.ordering),)
        return (ctx.builder.cmpi(args[0], args[1], comparison_predicate=self.predicate,
                                 signedness=operand_type.dtype.signedness),)


class IntegerDivision(Elementwise):
    """``floordiv`` and ``mod``: on integers a zero divisor is an error of the kernel
    (`IntegerDivisionByZero`), not the 0 numpy gives; floats keep IEEE inf/nan."""

    def evaluate(self, ctx: EvalContext, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        results = super().evaluate(ctx, op, args)
        if results[0].dtype.kind in "iu":
            zero = np.broadcast_to(np.asarray(args[1]) == 0, results[0].shape)
            if zero.any():
                raise IntegerDivisionByZero(self.symbol, zero, results[0])
        return results


# -- rounding modes and flush-to-zero (Tile IR's options on float math) ------------------
# Each op says which it takes (`OpDef.rounding_modes`, `OpDef.flush_to_zero`); the
# DSL functions offer the keywords their op takes, and this one rule checks them.
#: the IEEE rounding modes of Tile IR's float arithmetic (nearest_even is the default)
DIRECTED = ("nearest_even", "zero", "negative_inf", "positive_inf")
#: the fast approximations some f32 ops offer as a rounding mode: "approx" (div,
#: sqrt) and "full" (div)
F32_ONLY_ROUNDINGS = frozenset({"approx", "full"})
_F32_TINY = float(np.finfo(np.float32).tiny)


def check_float_options(opdef: OpDef, dtype: dt.DType, attrs: dict[str, Any]) -> None:
    """Checks the ``rounding`` and ``ftz`` attributes of an op of ``dtype`` results
    against what the op takes (its `OpDef.rounding_modes` and `OpDef.flush_to_zero`)
    and what Tile IR and the interpreter's emulation support."""
    op = opdef.spelled
    rounding = attrs.get("rounding")
    if rounding is not None and rounding != "nearest_even":
        if not opdef.rounding_modes:
            raise RuleError(f"{op} takes no rounding mode, got rounding={rounding!r}")
        if rounding not in opdef.rounding_modes:
            raise RuleError(f"{op}: rounding must be one of {', '.join(opdef.rounding_modes)}, got {rounding!r}")
        if rounding in F32_ONLY_ROUNDINGS and dtype is not dt.f32:
            raise RuleError(f"{op}: rounding={rounding!r} is for f32 only, got {dtype}")
        if dtype not in (dt.f32, dt.f16):
            raise RuleError(f"{op}: rounding={rounding!r} is supported for f32 and f16 results, got {dtype}")
    if attrs.get("ftz"):
        if not opdef.flush_to_zero:
            raise RuleError(f"{op} takes no flush_to_zero")
        if dtype is not dt.f32:
            raise RuleError(f"{op}: flush_to_zero is for f32 only, got {dtype}")


def _flush(values: Any) -> Any:
    """f32 subnormals (held in f64) to zero of the same sign."""
    return np.where(np.abs(values) < _F32_TINY, np.copysign(0.0, values), values)


def round_to(exact: Any, target: np.dtype[Any], rounding: str) -> Any:
    """Float64 values rounded to ``target`` in a directed mode. Exact for f32 and f16
    results of +, -, *, /, sqrt of f32/f16 operands (their f64 results never land
    on a target value or midpoint unless exact)."""
    exact = np.asarray(exact, dtype=np.float64)
    with np.errstate(all="ignore"):
        nearest = exact.astype(target)
        back = nearest.astype(np.float64)
        if rounding == "zero":
            return np.where(np.abs(back) > np.abs(exact), np.nextafter(nearest, target.type(0)), nearest)
        if rounding == "positive_inf":
            return np.where(back < exact, np.nextafter(nearest, target.type(np.inf)), nearest)
        if rounding == "negative_inf":
            return np.where(back > exact, np.nextafter(nearest, target.type(-np.inf)), nearest)
    return nearest  # nearest_even; approx and full are computed exactly here


def _with_options(function: Callable[..., Any], args: Sequence[Any], target: np.dtype[Any], attrs: dict[str, Any]) -> Any:
    wide = [np.asarray(a, dtype=np.float64) for a in args]
    if attrs.get("ftz"):
        wide = [_flush(w) for w in wide]
    exact = function(*wide)
    result = round_to(exact, target, attrs.get("rounding", "nearest_even"))
    if attrs.get("ftz"):
        result = _flush(result.astype(np.float64)).astype(target)
    return np.asarray(result, dtype=target)


def _rsqrt(a: Any) -> Any:
    return (1.0 / np.sqrt(a.astype(np.float64))).astype(a.dtype)


class Select(OpDef):
    """``select(cond, a, b)``: a where cond is true, else b (numpy ``where``)."""

    lanewise = True

    def infer(self, operand_types: Sequence[KType], attrs: dict[str, Any]) -> tuple[KType, ...]:
        cond = tile_operand(operand_types, 0, "where")
        value = same_types(operand_types[1:], "where")
        if cond.dtype is not dt.bool_:
            raise RuleError(f"where's condition must be a bool tile (a comparison), got {cond}")
        if cond.shape != value.shape:
            raise RuleError(f"where: condition shape {list(cond.shape)} differs from value shape {list(value.shape)}")
        return (value,)

    def evaluate(self, ctx: EvalContext, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        return (np.where(args[0], args[1], args[2]).astype(args[1].dtype),)

    def lower(self, ctx: Lowering, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        return _lower_select(self, ctx, op, args)


class Cast(OpDef):
    """``cast(x) {dtype}``: value conversion (float to int truncates toward zero,
    int to float rounds to nearest, float narrowing rounds to nearest even)."""

    lanewise = True
    _spelled = "astype"
    rounding_modes = ("nearest_even", "zero")

    def infer(self, operand_types: Sequence[KType], attrs: dict[str, Any]) -> tuple[KType, ...]:
        tile = tile_operand(operand_types, 0, "astype")
        target: dt.DType = attrs["dtype"]
        if target is dt.f8e8m0fnu and tile.dtype is not target:
            # (Tile IR converts to it only rounding toward zero or +inf; scales are exponent bytes)
            raise RuleError(f"astype: conversion to f8e8m0fnu is not supported; make scales from their exponent "
                            f"bytes with bitcast(t, f8e8m0fnu) of a u8 tile (value 2 ** (byte - 127))")
        if tile.dtype.restricted and not target.is_float and tile.dtype is not target:
            raise RuleError(f"astype: {tile.dtype} converts to float dtypes only, got {target}")
        if target.restricted and not tile.dtype.is_float and tile.dtype is not target:
            raise RuleError(f"astype: only floats convert to {target}, got {tile.dtype}")
        if attrs.get("rounding", "nearest_even") != "nearest_even":
            if not (target.is_float and (tile.dtype.is_float or tile.dtype.is_integer)):
                raise RuleError(f"astype: a rounding mode applies to conversions to floats, not {tile.dtype} to {target}")
        check_float_options(self, target, attrs)
        return (tile.with_dtype(target),)

    def evaluate(self, ctx: EvalContext, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        target: dt.DType = op.attrs["dtype"]
        value = args[0]
        rounding = op.attrs.get("rounding", "nearest_even")
        if rounding != "nearest_even":
            return (np.asarray(round_to(np.asarray(value).astype(np.float64), numpy_dtype(target), rounding)),)
        if target is dt.bool_:
            return (np.asarray(value != 0),)
        if target.is_integer and value.dtype.kind == "f":
            with np.errstate(all="ignore"):
                value = np.trunc(value.astype(np.float64))
                info = np.iinfo(numpy_dtype(target))
                value = np.clip(np.nan_to_num(value, nan=0.0), info.min, info.max)
        with np.errstate(all="ignore"):
            return (np.asarray(value).astype(numpy_dtype(target)),)

    def lower(self, ctx: Lowering, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        return _lower_cast(self, ctx, op, args)


class Bitcast(OpDef):
    """``bitcast(x) {dtype}``: the same bits read as another dtype of equal width."""

    lanewise = True

    def infer(self, operand_types: Sequence[KType], attrs: dict[str, Any]) -> tuple[KType, ...]:
        tile = tile_operand(operand_types, 0, "bitcast")
        target: dt.DType = attrs["dtype"]
        if target.bits != tile.dtype.bits or target is dt.bool_ or tile.dtype is dt.bool_:
            raise RuleError(f"bitcast: {tile.dtype} ({tile.dtype.bits} bits) cannot be reinterpreted as {target} ({target.bits} bits)")
        return (tile.with_dtype(target),)

    def evaluate(self, ctx: EvalContext, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        return (np.ascontiguousarray(args[0]).view(numpy_dtype(op.attrs["dtype"])),)

    def lower(self, ctx: Lowering, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        return _lower_bitcast(self, ctx, op, args)


# -- lowering to Tile IR: the ops whose declaration names no single Tile IR op -------------------
def _lower_floordiv(self: Elementwise, ctx: Lowering, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
    b = ctx.builder
    dtype = _tile_of(op.operands[0]).dtype
    if dtype.is_float:
        quotient = b.divf(args[0], args[1], rounding_mode="nearest_even")
        return (b.floor(quotient),)
    rounding = "negative_inf" if dtype.is_signed else "zero"
    return (b.divi(args[0], args[1], signedness=dtype.signedness, rounding=rounding),)


def _lower_mod(self: Elementwise, ctx: Lowering, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
    b = ctx.builder
    operand_type = _tile_of(op.operands[0])
    dtype = operand_type.dtype
    if dtype.is_float:
        return (_python_remainder(ctx, op, b.remf(args[0], args[1]), args[1], operand_type),)
    remainder = b.remi(args[0], args[1], signedness=dtype.signedness)
    if not dtype.is_signed:
        return (remainder,)
    return (_python_remainder(ctx, op, remainder, args[1], operand_type),)


def _lower_invert(self: Elementwise, ctx: Lowering, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
    operand_type = _tile_of(op.operands[0])
    dtype = operand_type.dtype
    ones = ctx.constant(True if dtype.is_bool else -1 if dtype.is_signed else (1 << dtype.bits) - 1, operand_type)
    return (ctx.builder.xori(args[0], ones),)


def _tile_of(value: Any) -> TileType:
    found = value.type
    assert isinstance(found, TileType)
    return found


def _python_remainder(ctx: Lowering, op: Operation, remainder: Any, divisor: Any, tile: TileType) -> Any:
    """C's remainder (sign of the dividend) to Python's (sign of the divisor)."""
    b = ctx.builder
    zero = ctx.constant(0, tile)
    if tile.dtype.is_float:
        nonzero = b.cmpf(remainder, zero, comparison_predicate="not_equal", comparison_ordering="ordered")
        r_negative = b.cmpf(remainder, zero, comparison_predicate="less_than", comparison_ordering="ordered")
        d_negative = b.cmpf(divisor, zero, comparison_predicate="less_than", comparison_ordering="ordered")
        adjusted = b.addf(remainder, divisor, rounding_mode="nearest_even")
    else:
        nonzero = b.cmpi(remainder, zero, comparison_predicate="not_equal", signedness="signed")
        r_negative = b.cmpi(remainder, zero, comparison_predicate="less_than", signedness="signed")
        d_negative = b.cmpi(divisor, zero, comparison_predicate="less_than", signedness="signed")
        adjusted = b.addi(remainder, divisor)
    fix = b.andi(nonzero, b.xori(r_negative, d_negative))
    return b.select(fix, adjusted, remainder)




def _lower_select(self: Select, ctx: Lowering, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
    return (ctx.builder.select(*args),)


def _lower_cast(self: Cast, ctx: Lowering, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
    b = ctx.builder
    source_type = op.operands[0].type
    assert isinstance(source_type, TileType)
    source: dt.DType = source_type.dtype
    target: dt.DType = op.attrs["dtype"]
    result_type = tile_type(op.results[0].type)
    value = args[0]
    if source.ir_name == target.ir_name:
        return (value,)
    if target is dt.bool_:
        zero = ctx.constant(0, source_type)
        if source.is_float:
            return (b.cmpf(value, zero, comparison_predicate="not_equal", comparison_ordering="unordered"),)
        return (b.cmpi(value, zero, comparison_predicate="not_equal", signedness="signed"),)
    if source is dt.bool_:
        if target.is_float:
            one, zero = ctx.constant(1, op.results[0].type), ctx.constant(0, op.results[0].type)
            return (b.select(value, one, zero),)
        return (b.exti(value, signedness="unsigned", result_types=[result_type]),)
    if source.is_integer and target.is_integer:
        if target.bits > source.bits:
            return (b.exti(value, signedness=source.signedness, result_types=[result_type]),)
        return (b.trunci(value, result_types=[result_type]),)
    rounding = op.attrs.get("rounding", "nearest_even")
    if source.is_float and target.is_float:
        return (b.ftof(value, rounding_mode=rounding, result_types=[result_type]),)
    if source.is_integer:
        return (b.itof(value, signedness=source.signedness, rounding_mode=rounding, result_types=[result_type]),)
    attrs: dict[str, Any] = {"signedness": target.signedness, "rounding_mode": "nearest_int_to_zero"}
    if ctx.version >= ir.V13_4:
        attrs["saturating"] = True  # out-of-range values clamp, as the interpreter's do
    return (b.ftoi(value, result_types=[result_type], **attrs),)


def _lower_bitcast(self: Bitcast, ctx: Lowering, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
    return (ctx.builder.bitcast(args[0], result_types=[tile_type(op.results[0].type)]),)


# -- composite math: ops Tile IR has no single op for, lowered as formulas ----------------
# Each is computed on the GPU in f32 (f64 for f64 tiles; f16, bf16 and fp8 operands are
# widened first and the result rounded back once), so a 16-bit result is as accurate as
# its format; the interpreter computes the exact function in float64 and rounds once.
class FormulaMath:
    """The arithmetic a composite op's formula is written in, emitted as Tile IR on
    tiles of one working type (`Elementwise` lowerers use it; `NumpyMath` is the same
    interface on numpy arrays, so a test evaluates the very formula the GPU runs)."""

    def __init__(self, ctx: Lowering, working: TileType) -> None:
        self.ctx, self.working, self.b = ctx, working, ctx.builder

    def const(self, value: float) -> Any:
        return self.ctx.constant(value, self.working)

    def add(self, a: Any, b: Any) -> Any:
        return self.b.addf(a, b, rounding_mode="nearest_even")

    def sub(self, a: Any, b: Any) -> Any:
        return self.b.subf(a, b, rounding_mode="nearest_even")

    def mul(self, a: Any, b: Any) -> Any:
        return self.b.mulf(a, b, rounding_mode="nearest_even")

    def div(self, a: Any, b: Any) -> Any:
        return self.b.divf(a, b, rounding_mode="nearest_even")

    def neg(self, a: Any) -> Any:
        return self.b.negf(a)

    def abs(self, a: Any) -> Any:
        return self.b.absf(a)

    def exp(self, a: Any) -> Any:
        return self.b.exp(a)

    def log(self, a: Any) -> Any:
        return self.b.log(a)

    def tanh(self, a: Any) -> Any:
        return self.b.tanh(a)

    def minimum(self, a: Any, b: Any) -> Any:  # (NaN in, NaN out, as numpy's)
        return self.b.minf(a, b, propagate_nan=True)

    def maximum(self, a: Any, b: Any) -> Any:
        return self.b.maxf(a, b, propagate_nan=True)

    def equal(self, a: Any, b: Any) -> Any:
        return self.b.cmpf(a, b, comparison_predicate="equal", comparison_ordering="ordered")

    def select(self, condition: Any, a: Any, b: Any) -> Any:
        return self.b.select(condition, a, b)


class NumpyMath:
    """`FormulaMath`'s interface on numpy arrays of one float dtype (every step
    rounded to it, as the GPU's f32 steps are)."""

    def __init__(self, dtype: Any = np.float32) -> None:
        self.dtype = np.dtype(dtype)

    def _(self, value: Any) -> Any:
        return np.asarray(value, dtype=self.dtype)

    def __getattribute__(self, name: str) -> Any:
        found = object.__getattribute__(self, name)
        if not callable(found) or name.startswith("_"):
            return found

        def quiet(*args: Any) -> Any:  # inf and nan are answers here, as on the GPU
            with np.errstate(all="ignore"):
                return found(*args)
        return quiet

    def const(self, value: float) -> Any:
        return self._(value)

    def add(self, a: Any, b: Any) -> Any:
        return self._(np.add(a, b))

    def sub(self, a: Any, b: Any) -> Any:
        return self._(np.subtract(a, b))

    def mul(self, a: Any, b: Any) -> Any:
        return self._(np.multiply(a, b))

    def div(self, a: Any, b: Any) -> Any:
        with np.errstate(all="ignore"):
            return self._(np.divide(a, b))

    def neg(self, a: Any) -> Any:
        return self._(np.negative(a))

    def abs(self, a: Any) -> Any:
        return self._(np.abs(a))

    def exp(self, a: Any) -> Any:
        with np.errstate(all="ignore"):
            return self._(np.exp(a))

    def log(self, a: Any) -> Any:
        with np.errstate(all="ignore"):
            return self._(np.log(a))

    def tanh(self, a: Any) -> Any:
        return self._(np.tanh(a))

    def minimum(self, a: Any, b: Any) -> Any:
        return self._(np.minimum(a, b))

    def maximum(self, a: Any, b: Any) -> Any:
        return self._(np.maximum(a, b))

    def equal(self, a: Any, b: Any) -> Any:
        return np.equal(a, b)

    def select(self, condition: Any, a: Any, b: Any) -> Any:
        return self._(np.where(condition, a, b))


#: erf(x) ~ x * P(x^2) / Q(x^2) for |x| <= 4 (x clamped there: erf(4) is 1 in f32), the
#: rational approximation of Eigen's and XLA's float erf. Measured max error in f32
#: arithmetic against the exact erf: ERF_MAX_ERROR (tests/test_math_ops.py checks it).
ERF_P = (-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06, -5.69250639462346e-05,
         -7.34990630326855e-04, -2.95459980854025e-03, -1.60960333262415e-02)
ERF_Q = (-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03, -7.37332916720468e-03,
         -1.42647390514189e-02)
ERF_CLAMP = 4.0
#: the largest absolute error of `erf_formula` in f32 over the reals (of erf's range [-1, 1])
ERF_MAX_ERROR = 1e-6


def _horner(m: Any, x: Any, coefficients: Sequence[float]) -> Any:
    result = m.const(coefficients[0])
    for c in coefficients[1:]:
        result = m.add(m.mul(result, x), m.const(c))
    return result


def erf_formula(m: Any, x: Any) -> Any:
    """erf(x) as `ERF_P`/`ERF_Q`'s rational function, in the arithmetic ``m``."""
    clamped = m.minimum(m.maximum(x, m.const(-ERF_CLAMP)), m.const(ERF_CLAMP))
    square = m.mul(clamped, clamped)
    return m.div(m.mul(clamped, _horner(m, square, ERF_P)), _horner(m, square, ERF_Q))


def sigmoid_formula(m: Any, x: Any) -> Any:
    """1 / (1 + e^-x): 0 for large negative x (e^-x is inf), 1 for large positive."""
    return m.div(m.const(1.0), m.add(m.const(1.0), m.exp(m.neg(x))))


def silu_formula(m: Any, x: Any) -> Any:
    """x / (1 + e^-x) (x * sigmoid(x) with one rounding less)."""
    return m.div(x, m.add(m.const(1.0), m.exp(m.neg(x))))


_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_GELU_CUBIC = 0.044715


def gelu_formula(m: Any, x: Any) -> Any:
    """x * (1 + erf(x / sqrt(2))) / 2."""
    return m.mul(m.mul(m.const(0.5), x), m.add(m.const(1.0), erf_formula(m, m.mul(x, m.const(math.sqrt(0.5))))))


def gelu_tanh_formula(m: Any, x: Any) -> Any:
    """x * (1 + tanh(u)) / 2 with u = sqrt(2/pi) * (x + 0.044715 x^3), computed as
    x / (1 + e^(-2u)), the same value: 1 + tanh(u) cancels to 0 for negative x
    long before the result does."""
    inner = m.mul(m.const(_SQRT_2_OVER_PI), m.add(x, m.mul(m.const(_GELU_CUBIC), m.mul(x, m.mul(x, x)))))
    return m.div(x, m.add(m.const(1.0), m.exp(m.mul(m.const(-2.0), inner))))


def log1p_formula(m: Any, x: Any) -> Any:
    """log(1 + x) accurately for small x: log(u) * x / (u - 1) with u = 1 + x rounded
    (Goldberg's formulation: the rounding error of u cancels), x where u is 1, inf
    where u is."""
    u = m.add(m.const(1.0), x)
    ratio = m.mul(m.log(u), m.div(x, m.sub(u, m.const(1.0))))
    ratio = m.select(m.equal(u, m.const(1.0)), x, ratio)
    return m.select(m.equal(u, m.const(math.inf)), u, ratio)


def expm1_formula(m: Any, x: Any) -> Any:
    """e^x - 1 accurately for small x: (u - 1) * x / log(u) with u = e^x rounded
    (Kahan's formulation), x where u is 1, -1 where u - 1 is, inf where u is."""
    u = m.exp(x)
    u_minus_1 = m.sub(u, m.const(1.0))
    ratio = m.mul(u_minus_1, m.div(x, m.log(u)))  # (x / log(u) is near 1: no overflow near e^x's top)
    ratio = m.select(m.equal(u, m.const(1.0)), x, ratio)
    ratio = m.select(m.equal(u_minus_1, m.const(-1.0)), u_minus_1, ratio)
    return m.select(m.equal(u, m.const(math.inf)), u, ratio)


def _working_dtype(dtype: dt.DType) -> dt.DType:
    """The dtype a composite op computes in: f64 for f64, else f32."""
    return dt.f64 if dtype is dt.f64 else dt.f32


def _formula_lowerer(formula: Callable[[Any, Any], Any]) -> Lowerer:
    """The lowering of a composite op: ``formula`` emitted in its working dtype,
    its operand widened before and its result rounded back after."""

    def lower(self: Elementwise, ctx: Lowering, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        operand = _tile_of(op.operands[0])
        working = operand.with_dtype(_working_dtype(operand.dtype))
        b = ctx.builder
        x = args[0]
        if working.dtype is not operand.dtype:
            x = b.ftof(x, rounding_mode="nearest_even", result_types=[tile_type(working)])
        result = formula(FormulaMath(ctx, working), x)
        if working.dtype is not operand.dtype:
            result = b.ftof(result, rounding_mode="nearest_even", result_types=[tile_type(operand)])
        return (result,)

    return lower


def _exact(function: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """A numpy meaning computed in float64 (the interpreter rounds it once to the result dtype)."""
    return lambda a: function(np.asarray(a, dtype=np.float64))


_erf_scalar = np.frompyfunc(math.erf, 1, 1)


def _erf(values: Any) -> Any:
    return np.asarray(_erf_scalar(values), dtype=np.float64)


def _sigmoid(values: Any) -> Any:
    return 1.0 / (1.0 + np.exp(-values))


def _silu(values: Any) -> Any:
    return values / (1.0 + np.exp(-values))


def _gelu(values: Any) -> Any:
    return 0.5 * values * (1.0 + _erf(values / math.sqrt(2.0)))


def _gelu_tanh(values: Any) -> Any:
    return 0.5 * values * (1.0 + np.tanh(_SQRT_2_OVER_PI * (values + _GELU_CUBIC * values ** 3)))


class Approximated(Elementwise):
    """A composite op whose lowering is an approximation accurate to f32 (erf, exact
    gelu): refused for f64 tiles, which it could not compute to their precision."""

    def infer(self, operand_types: Sequence[KType], attrs: dict[str, Any]) -> tuple[KType, ...]:
        result = super().infer(operand_types, attrs)
        dtype = tile_operand(operand_types, 0, self.spelled).dtype
        if dtype is dt.f64:
            raise RuleError(f"{self.spelled}: f64 tiles are not supported (the GPU computes it with an f32-accurate "
                            f"approximation); convert with .astype(f32)")
        return result


class FloatClass(Elementwise):
    """A test of float values (isnan, isinf) giving bools."""

    def result_type(self, operand: TileType) -> TileType:
        return operand.with_dtype(dt.bool_)

    def evaluate(self, ctx: EvalContext, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
        return (np.asarray(self.function(np.asarray(args[0], dtype=np.float64)), dtype=np.bool_),)


def _lower_isnan(self: Elementwise, ctx: Lowering, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
    # NaN is the one value unequal to itself (an unordered comparison is true for it)
    return (ctx.builder.cmpf(args[0], args[0], comparison_predicate="not_equal", comparison_ordering="unordered"),)


def _lower_isinf(self: Elementwise, ctx: Lowering, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
    operand = _tile_of(op.operands[0])
    return (ctx.builder.cmpf(ctx.builder.absf(args[0]), ctx.constant(math.inf, operand),
                             comparison_predicate="equal", comparison_ordering="ordered"),)


_ROUNDED: dict[str, Any] = {"rounding": DIRECTED, "flush_to_zero": True}


class ElementwiseOp(Op):
    """The element-wise ops, each declared once (see `Elementwise`)."""

    ADD = Elementwise(2, NUMBER, np.add, float_op="addf", int_op="addi", **_ROUNDED, symbol="+",
                      folds_strings=True, doc="x + y.")
    SUB = Elementwise(2, NUMBER, np.subtract, float_op="subf", int_op="subi", **_ROUNDED, symbol="-", doc="x - y.")
    MUL = Elementwise(2, NUMBER, np.multiply, float_op="mulf", int_op="muli", **_ROUNDED, symbol="*", doc="x * y.")
    DIV = Elementwise(2, FLOAT, np.true_divide, float_op="divf", rounding=DIRECTED + ("approx", "full"),
                      flush_to_zero=True, symbol="/", true_division=True, kind_hint="; use / or // on integers",
                      doc="x / y for floats.")
    FLOORDIV = IntegerDivision(2, NUMBER, np.floor_divide, lower=_lower_floordiv, symbol="//")
    MOD = IntegerDivision(2, NUMBER, np.remainder, lower=_lower_mod, symbol="%")
    POW = Elementwise(2, FLOAT, np.power, float_op="pow", symbol="**", spelled="pow ('**')",
                      kind_hint="; convert with .astype(f32)")
    # maxf/minf without propagate_nan: a NaN operand is a missing value (NaN only when both are), np.fmax's way
    MINIMUM = Elementwise(2, NUMBER, np.fmin, float_op="minf", int_op="mini", signed=True, flush_to_zero=True,
                          foldable=True, doc="The element-wise minimum; NaN only where both are NaN (a NaN "
                                             "operand gives the other).")
    MAXIMUM = Elementwise(2, NUMBER, np.fmax, float_op="maxf", int_op="maxi", signed=True, flush_to_zero=True,
                          foldable=True, doc="The element-wise maximum; NaN only where both are NaN (a NaN "
                                             "operand gives the other).")
    ATAN2 = Elementwise(2, FLOAT, np.arctan2, float_op="atan2", foldable=True,
                        doc="The angle of (x, y) = atan(y / x) in the right quadrant; atan2(y, x).")
    AND = Elementwise(2, BITS, np.bitwise_and, int_op="andi", symbol="&")
    OR = Elementwise(2, BITS, np.bitwise_or, int_op="ori", symbol="|")
    XOR = Elementwise(2, BITS, np.bitwise_xor, int_op="xori", symbol="^")
    SHL = Elementwise(2, INT, np.left_shift, int_op="shli", symbol="<<")
    SHR = Elementwise(2, INT, np.right_shift, int_op="shri", signed=True, symbol=">>")
    NEG = Elementwise(1, NUMBER, np.negative, float_op="negf", int_op="negi")
    ABS = Elementwise(1, NUMBER, np.abs, float_op="absf", int_op="absi")
    INVERT = Elementwise(1, BITS, np.invert, lower=_lower_invert)
    EXP = Elementwise(1, FLOAT, np.exp, float_op="exp", foldable=True, doc="e ** x.")
    EXP2 = Elementwise(1, FLOAT, np.exp2, float_op="exp2", flush_to_zero=True, foldable=True, doc="2 ** x.")
    LOG = Elementwise(1, FLOAT, np.log, float_op="log", foldable=True, doc="The natural logarithm.")
    LOG2 = Elementwise(1, FLOAT, np.log2, float_op="log2", foldable=True, doc="The base-2 logarithm.")
    SQRT = Elementwise(1, FLOAT, np.sqrt, float_op="sqrt", rounding=DIRECTED + ("approx",), flush_to_zero=True,
                       foldable=True, doc="The square root.")
    RSQRT = Elementwise(1, FLOAT, _rsqrt, float_op="rsqrt", flush_to_zero=True, foldable=True, doc="1 / sqrt(x).")
    SIN = Elementwise(1, FLOAT, np.sin, float_op="sin", foldable=True, doc="The sine (radians).")
    COS = Elementwise(1, FLOAT, np.cos, float_op="cos", foldable=True, doc="The cosine (radians).")
    TAN = Elementwise(1, FLOAT, np.tan, float_op="tan", foldable=True, doc="The tangent (radians).")
    SINH = Elementwise(1, FLOAT, np.sinh, float_op="sinh", foldable=True, doc="The hyperbolic sine.")
    COSH = Elementwise(1, FLOAT, np.cosh, float_op="cosh", foldable=True, doc="The hyperbolic cosine.")
    TANH = Elementwise(1, FLOAT, np.tanh, float_op="tanh", foldable=True, doc="The hyperbolic tangent.")
    FLOOR = Elementwise(1, FLOAT, np.floor, float_op="floor", foldable=True,
                        doc="Rounds down to an integral value (floats).")
    CEIL = Elementwise(1, FLOAT, np.ceil, float_op="ceil", foldable=True, doc="Rounds up to an integral value (floats).")
    FMA = Elementwise(3, FLOAT, lambda a, b, c: a * b + c, float_op="fma", **_ROUNDED,
                      doc="a * b + c with one rounding (floats).")
    SIGMOID = Elementwise(1, FLOAT, _exact(_sigmoid), lower=_formula_lowerer(sigmoid_formula), foldable=True,
                          doc="The logistic function 1 / (1 + e ** -x).")
    SILU = Elementwise(1, FLOAT, _exact(_silu), lower=_formula_lowerer(silu_formula), foldable=True,
                       doc="x * sigmoid(x) (the SiLU or swish activation).")
    ERF = Approximated(1, FLOAT, _exact(_erf), lower=_formula_lowerer(erf_formula), foldable=True,
                       doc="The error function (f16, bf16, f32; on the GPU a rational approximation with an "
                           "absolute error below 1e-6).")
    GELU_ERF = Approximated(1, FLOAT, _exact(_gelu), lower=_formula_lowerer(gelu_formula), spelled="gelu")
    GELU_TANH = Elementwise(1, FLOAT, _exact(_gelu_tanh), lower=_formula_lowerer(gelu_tanh_formula),
                            spelled="gelu(approximate='tanh')")
    LOG1P = Elementwise(1, FLOAT, _exact(np.log1p), lower=_formula_lowerer(log1p_formula), foldable=True,
                        doc="log(1 + x), accurate for small x.")
    EXPM1 = Elementwise(1, FLOAT, _exact(np.expm1), lower=_formula_lowerer(expm1_formula), foldable=True,
                        doc="e ** x - 1, accurate for small x.")
    ISNAN = FloatClass(1, FLOAT, np.isnan, lower=_lower_isnan, doc="Whether x is NaN (a bool tile).")
    ISINF = FloatClass(1, FLOAT, np.isinf, lower=_lower_isinf, doc="Whether x is an infinity (a bool tile).")
    EQ = Comparison("equal", np.equal, "==", folds_strings=True)
    NE = Comparison("not_equal", np.not_equal, "!=", unordered=True, folds_strings=True)
    LT = Comparison("less_than", np.less, "<")
    LE = Comparison("less_than_or_equal", np.less_equal, "<=")
    GT = Comparison("greater_than", np.greater, ">")
    GE = Comparison("greater_than_or_equal", np.greater_equal, ">=")
    SELECT = Select()
    CAST = Cast()
    BITCAST = Bitcast()


register(ElementwiseOp)
