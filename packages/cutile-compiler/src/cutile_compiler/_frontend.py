"""The front end: a kernel's Python AST to the typed kernel IR.

One visitor resolves names, folds constants, infers types and builds SSA with
structured control flow, all in a single walk over the AST (each of these needs
the others' answers: a constant decides a shape, a shape decides a type).

Values during the walk are either IR `Value`s (tiles, tensors, partitions) or
plain Python objects, which are compile-time constants: numbers, dtypes, tuples,
DSL functions, modules. Python variables become SSA values: an ``if`` merges the
names its branches assign into the if-op's results; a loop carries the names its
body reassigns. Every error points at the user's source line.
"""

from __future__ import annotations

import ast
import builtins
import operator
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from cutile_compiler import _dtypes as dt
from cutile_compiler._errors import ArgumentTypeError, SourceLocation, TileSyntaxError, TileTypeError, bounded_repr
from cutile_compiler._ir import Block, KernelIR, KernelParam, Operation, Value
from cutile_compiler._opdefs import OPS, ControlOp, DebugOp, ElementwiseOp, GridOp, MemoryOp, Op, RuleError, ShapeOp
from cutile_compiler._opdefs.elementwise import Elementwise
from cutile_compiler._opdefs.shape import constant_value
from cutile_compiler._reads import ABSENT, ExternalReads
from cutile_compiler._signature import KernelSignature, Specialization, TensorAnnotation
from cutile_compiler._source import FunctionSource, capture
from cutile_compiler._types import KType, TensorType, TileType, broadcast_shapes, tile_shape_problem

_NUMBER = (bool, int, float)

_E = ElementwiseOp
#: Python's operators: the op each means on tiles and its fold on constants
_BINARY_OPS: dict[type[ast.operator], tuple[Op, Callable[[Any, Any], Any]]] = {
    ast.Add: (_E.ADD, operator.add),
    ast.Sub: (_E.SUB, operator.sub),
    ast.Mult: (_E.MUL, operator.mul),
    ast.Div: (_E.DIV, operator.truediv),
    ast.FloorDiv: (_E.FLOORDIV, operator.floordiv),
    ast.Mod: (_E.MOD, operator.mod),
    ast.Pow: (_E.POW, operator.pow),
    ast.BitAnd: (_E.AND, operator.and_),
    ast.BitOr: (_E.OR, operator.or_),
    ast.BitXor: (_E.XOR, operator.xor),
    ast.LShift: (_E.SHL, operator.lshift),
    ast.RShift: (_E.SHR, operator.rshift),
}
_COMPARE_OPS: dict[type[ast.cmpop], tuple[Op, Callable[[Any, Any], Any]]] = {
    ast.Eq: (_E.EQ, operator.eq),
    ast.NotEq: (_E.NE, operator.ne),
    ast.Lt: (_E.LT, operator.lt),
    ast.LtE: (_E.LE, operator.le),
    ast.Gt: (_E.GT, operator.gt),
    ast.GtE: (_E.GE, operator.ge),
}
_UNARY_FOLDS: dict[type[ast.unaryop], tuple[Callable[[Any], Any], str]] = {
    ast.USub: (operator.neg, "-"), ast.UAdd: (operator.pos, "+"), ast.Invert: (operator.invert, "~")}
#: The largest int constant folding builds (a tile holds at most 64-bit ints; Python
#: would otherwise spend minutes and gigabytes on ``2 ** 10**10``).
MAX_FOLDED_INT_BITS = 1 << 16
#: How deeply a kernel may nest. Each expression within an expression is a level
#: (a lambda's body too), and so is each block: the kernel's body, an if or loop
#: body, the body of a device function where it is inlined. A chain ``a + b + c +
#: ...`` is one level however long. Real kernels stay below 30; the limit keeps the
#: front end's recursion well inside Python's default stack.
MAX_NESTING = 128
_UNSUPPORTED_STATEMENTS = {
    ast.Try: "try/except", ast.With: "with", ast.AsyncWith: "async with", ast.Raise: "raise",
    ast.FunctionDef: "nested function definitions", ast.AsyncFunctionDef: "nested function definitions",
    ast.ClassDef: "class definitions", ast.Global: "global", ast.Nonlocal: "nonlocal",
    ast.Delete: "del", ast.Import: "import", ast.ImportFrom: "import", ast.AsyncFor: "async for",
    ast.Match: "match",
}


class _Undefined:
    """Marks a name that is not defined on every path to its use."""

    def __init__(self, reason: str) -> None:
        self.reason = reason


@dataclass
class _Frame:
    """One function being visited: the kernel, or an inlined device function."""

    source: FunctionSource
    env: dict[str, Any]
    globals: dict[str, Any]
    closure: dict[str, Any]  # name -> its cell
    result: Any = None
    block: Any = None  # the block an inlined device function is emitted into
    loop_depth: int = 0  # run-time loops of this function around the statement being visited


@dataclass
class _LoopContext:
    """A loop being built: what its break and continue must do.

    A ``loop`` op's break and continue pass on the ``carried`` names (and, for a
    range loop, the next index ``index + step``). A static loop is unrolled at
    compile time and has no op: ``static_block`` is the block its body is emitted
    into, and break/continue there only end the current unrolled copy."""

    carried: list[str] = field(default_factory=list)
    carried_types: list[KType] = field(default_factory=list)
    induction: tuple[Value, Value] | None = None  # (index, step) of a range loop
    static_block: Block | None = None


class KernelLambda:
    """A lambda expression written in a kernel: evaluated inline where it is called."""

    def __init__(self, node: ast.Lambda, frame: _Frame) -> None:
        self.node = node
        self.frame = frame
        self.__name__ = "<lambda>"


class Flow:
    """How a statement list ended: normally, or with break/continue/return."""

    NORMAL = "normal"


@dataclass
class _Retry(Exception):
    """A loop-carried name starts as a constant but the body needs a tile: redo the
    loop with the constant materialized as that tile type."""

    name: str
    needed: KType


class FrontEnd:
    """Builds the `KernelIR` of one specialization of a kernel."""

    def __init__(self, function: Any, signature: KernelSignature, spec: Specialization, *, unsafe: bool = False) -> None:
        self.function = function
        self.signature = signature
        self.spec = spec
        self.unsafe = unsafe
        self.source = capture(function)
        self.body = Block()
        self.block = self.body
        self.prologue: list[Operation] = []
        self.frames: list[_Frame] = []
        self.loops: list[_LoopContext] = []
        self.own_partitions: dict[int, Value] = {}
        self.producers: dict[int, Operation] = {}  # by `Value.id`: the op that made each value
        from cutile_compiler._mapped import MappedState

        self.mapped = MappedState()  # minted indices and range proofs of mapped partitions
        self.block_ids: dict[int, Value] = {}
        self.grid_rank = 0
        self.node: ast.AST = self.source.tree
        self.inline_stack: list[Any] = []
        #: the value of each splat constant made so far, by `Value.id`: what `OpDef.check_static` sees
        self.static_values: dict[int, bool | int | float] = {}
        # Every global, closure variable and attribute of a host object the kernel
        # and its device functions read, and the code inlined: the IR is stale once
        # one of them changes.
        self.reads = ExternalReads()
        self.depth = 0  # the current nesting, counted as MAX_NESTING counts it

    # -- locations and errors -----------------------------------------------------
    @property
    def frame(self) -> _Frame:
        return self.frames[-1]

    def location(self, node: ast.AST | None = None) -> SourceLocation:
        return self.frame.source.location(node if node is not None else self.node)

    def type_error(self, message: str, node: ast.AST | None = None) -> TileTypeError:
        return TileTypeError(message, self.location(node))

    def syntax_error(self, message: str, node: ast.AST | None = None) -> TileSyntaxError:
        return TileSyntaxError(message, self.location(node))

    def nesting_error(self, node: ast.AST) -> TileSyntaxError:
        return self.syntax_error(
            f"the kernel nests more than {MAX_NESTING} levels deep here (expressions within expressions, blocks "
            "within blocks, device-function calls within calls), the front end's nesting limit; name intermediate "
            "results or flatten the calls", node)

    # -- building ops -------------------------------------------------------------
    def op(self, key: Op, operands: Sequence[Value], attrs: dict[str, Any] | None = None,
           regions: Sequence[Block] = (), node: ast.AST | None = None, *, prologue: bool = False) -> Operation:
        """Creates the op ``key`` at the insertion point; a broken typing rule becomes a
        `TileTypeError` at the current source line."""
        try:
            opdef = OPS[key]
        except KeyError:  # a compiler bug: ops are created by their registered keys, never by name
            raise ArgumentTypeError(f"FrontEnd.op: key must be a registered Op member (e.g. MemoryOp.TILE_LOAD), "
                                    f"got {key!r}") from None
        attrs = attrs or {}
        try:
            operand_types = [v.type for v in operands]
            result_types = opdef.infer(operand_types, attrs)
            opdef.check_static(operand_types, [self.static_values.get(v.id) for v in operands], attrs)
        except RuleError as exc:
            raise self.type_error(str(exc), node) from None
        for result_type in result_types:  # every tile any op makes obeys the tile-shape rule
            problem = tile_shape_problem(result_type.shape) if isinstance(result_type, TileType) else None
            if problem is not None:
                raise self.type_error(f"{opdef.name}: the result {result_type} is not a valid tile: {problem}", node)
        operation = Operation(opdef, operands, result_types, attrs, regions, self.location(node))
        (self.prologue if prologue else self.block.ops).append(operation)
        for made in operation.results:
            self.producers[made.id] = operation
        static = opdef.static_value(attrs)
        if static is not None:
            self.static_values[operation.result.id] = static
        return operation

    @contextmanager
    def inserting(self, block: Block) -> Iterator[Block]:
        saved = self.block
        self.block = block
        try:
            yield block
        finally:
            self.block = saved

    # -- conversions --------------------------------------------------------------
    def describe(self, value: Any) -> str:
        if isinstance(value, Value):
            return str(value.type)
        if isinstance(value, dt.DType):
            return f"dtype {value}"
        if isinstance(value, tuple):
            return f"tuple of {len(value)}"
        if isinstance(value, _Undefined):
            return "an undefined name"
        name = getattr(value, "__name__", None)
        kind = type(value).__name__
        return f"{kind} {name}" if name else f"{kind} {bounded_repr(value)}"

    def constant(self, value: bool | int | float, dtype: dt.DType, shape: tuple[int, ...] = (),
                 node: ast.AST | None = None) -> Value:
        try:
            value = constant_value(value, dtype)
        except RuleError as exc:
            raise self.type_error(str(exc), node) from None
        return self.op(ShapeOp.CONSTANT, [], {"value": value, "type": TileType(dtype, shape)}, node=node).result

    def to_tile(self, value: Any, node: ast.AST | None = None, *, like: dt.DType | None = None, what: str = "value") -> Value:
        """A tile `Value` for ``value``: tiles as they are, numbers as constants
        (of dtype ``like`` when given, else their default dtype)."""
        if isinstance(value, Value):
            if not isinstance(value.type, TileType):
                raise self.type_error(f"{what} must be a tile, got {value.type}", node)
            return value
        if isinstance(value, _NUMBER):
            dtype = like if like is not None else dt.default_scalar_dtype(value)
            if like is not None and dt.weak_scalar_dtype(value, like) is None:
                raise self.type_error(f"cannot use {bounded_repr(value)} as a {like} value; convert the tile with astype first", node)
            return self.constant(value, dtype, node=node)
        if isinstance(value, _Undefined):
            raise self.syntax_error(value.reason, node)
        raise self.type_error(f"{what} must be a tile or a number, got {self.describe(value)}", node)

    def cast(self, value: Value, dtype: dt.DType, node: ast.AST | None = None) -> Value:
        assert isinstance(value.type, TileType)
        if value.type.dtype is dtype:
            return value
        return self.op(_E.CAST, [value], {"dtype": dtype}, node=node).result

    def broadcast_to(self, value: Value, shape: tuple[int, ...], node: ast.AST | None = None) -> Value:
        tile = value.type
        assert isinstance(tile, TileType)
        if tile.shape == shape:
            return value
        if broadcast_shapes(tile.shape, shape) != shape:
            raise self.type_error(f"a tile of shape {list(tile.shape)} cannot broadcast to {list(shape)}", node)
        if tile.rank < len(shape):
            padded = (1,) * (len(shape) - tile.rank) + tile.shape
            value = self.op(ShapeOp.RESHAPE, [value], {"shape": padded}, node=node).result
        return self.op(ShapeOp.BROADCAST, [value], {"shape": shape}, node=node).result

    def common_shape(self, tiles: Sequence[Value], node: ast.AST | None, what: str) -> tuple[int, ...]:
        """The shape ``tiles`` broadcast to; else an error "{what} [..], [..] do not
        broadcast together"."""
        shape: tuple[int, ...] = ()
        for tile in tiles:
            merged = broadcast_shapes(shape, tile.type.shape)  # type: ignore[attr-defined]
            if merged is None:
                shapes = ", ".join(str(list(t.type.shape)) for t in tiles)  # type: ignore[attr-defined]
                raise self.type_error(f"{what} {shapes} do not broadcast together", node)
            shape = merged
        return shape

    def unify(self, values: Sequence[Any], node: ast.AST | None, what: str) -> list[Value]:
        """Tiles of one dtype and shape from tiles and numbers: dtypes promoted
        losslessly, numbers take the tiles' dtype, shapes broadcast."""
        tiles = [v for v in values if isinstance(v, Value)]
        for v in tiles:
            if not isinstance(v.type, TileType):
                raise self.type_error(f"{what}: operands must be tiles or numbers, got {v.type}", node)
        for v in values:
            if not isinstance(v, (Value, *_NUMBER)):
                if isinstance(v, _Undefined):
                    raise self.syntax_error(v.reason, node)
                raise self.type_error(f"{what}: operands must be tiles or numbers, got {self.describe(v)}", node)
        if tiles:
            dtype: dt.DType = tiles[0].type.dtype  # type: ignore[attr-defined]
            for v in tiles[1:]:
                other: dt.DType = v.type.dtype  # type: ignore[attr-defined]
                common = dt.promote(dtype, other)
                if common is None:
                    raise self.type_error(
                        f"{what}: cannot combine {dtype} and {other} tiles implicitly (no lossless conversion); "
                        f"convert one with .astype(...)", node)
                dtype = common
            shape = self.common_shape(tiles, node, f"{what}: shapes")
        else:
            dtype = _numbers_dtype(values)
            shape = ()
        result = []
        for v in values:
            tile = self.to_tile(v, node, like=dtype) if not isinstance(v, Value) else self.cast(v, dtype, node)
            result.append(self.broadcast_to(tile, shape, node))
        return result

    # -- arithmetic used by operators and DSL functions ---------------------------
    def fold(self, function: Callable[..., Any], operands: Sequence[Any], spelled: Callable[[], str],
             node: ast.AST | None) -> Any:
        """``function(*operands)`` computed at compile time: a Python operator or
        builtin on constants (weak numbers, strings, tuples). Whatever the Python
        operation raises becomes a `TileTypeError` at ``node`` naming the expression
        (``spelled()``); ints that would grow past `MAX_FOLDED_INT_BITS` are refused
        before Python spends the time and memory to build them."""
        if function in (operator.pow, operator.lshift) and len(operands) == 2 \
                and all(isinstance(o, int) for o in operands):
            base, exponent = operands
            bits = abs(base).bit_length()
            if function is operator.pow:  # |base| ** exponent has at least exponent * (bits - 1) bits
                at_least = exponent * (bits - 1) if exponent > 0 else 0
            else:
                at_least = bits + exponent if base != 0 and exponent > 0 else 0
            if at_least > MAX_FOLDED_INT_BITS:
                raise self.type_error(f"the constant expression {spelled()} would be an int of more than "
                                      f"{MAX_FOLDED_INT_BITS} bits", node)
        try:
            result = function(*operands)
        except RecursionError:
            raise  # the stack, not the operation: `build` reports it
        except Exception as exc:
            raise self.type_error(f"the constant expression {spelled()} fails: {exc}", node) from None
        if isinstance(result, complex):  # (-8) ** 0.5: no tile holds it
            raise self.type_error(f"the constant expression {spelled()} is a complex number, which kernels do not have",
                                  node)
        return result

    def binary(self, key: Op, left: Any, right: Any, node: ast.AST | None,
               fold: Callable[[Any, Any], Any] | None = None) -> Any:
        """The element-wise op ``key`` of two operands, written as its Python operator:
        on constants, ``fold`` computes it (strings too where the op says so)."""
        opdef = OPS[key]
        assert isinstance(opdef, Elementwise)
        symbol = opdef.symbol or opdef.name
        constants = (*_NUMBER, str)  # strings fold too: modes, formats, names
        if isinstance(left, constants) and isinstance(right, constants) and fold is not None \
                and (isinstance(left, _NUMBER) and isinstance(right, _NUMBER) or opdef.folds_strings):
            return self.fold(fold, (left, right), lambda: f"{_operand_text(left)} {symbol} "
                             f"{_operand_text(right)}", node)
        a, b = self.unify([left, right], node, f"'{symbol}'")
        dtype: dt.DType = a.type.dtype  # type: ignore[attr-defined]
        if opdef.true_division and not dtype.is_float:
            target = dt.f64 if dtype.bits == 64 else dt.f32
            a, b = self.cast(a, target, node), self.cast(b, target, node)
        return self.op(key, [a, b], node=node).result

    def binary_operator(self, op: ast.operator, left: Any, right: Any, node: ast.AST) -> Any:
        """A Python binary operator on two operands: ``@`` is `matmul`, the others
        their element-wise op (folded on constants)."""
        if isinstance(op, ast.MatMult):
            from cutile_compiler._builtins.matmul import matmul_tiles

            return matmul_tiles(self, node, left, right)
        key, fold = _BINARY_OPS[type(op)]
        return self.binary(key, left, right, node, fold)

    def unary(self, key: Op, operand: Any, node: ast.AST | None) -> Value:
        value = self.to_tile(operand, node, what=OPS[key].name)
        return self.op(key, [value], node=node).result

    def condition(self, value: Any, node: ast.AST) -> Value | bool:
        """A Python truth value (constant) or a bool scalar `Value`."""
        if isinstance(value, _NUMBER) or value is None:
            return bool(value)
        if isinstance(value, Value) and isinstance(value.type, TileType):
            if not value.type.is_scalar:
                raise self.type_error(f"the truth value of a {value.type} is ambiguous: reduce it with any()/all() or compare a scalar", node)
            if value.type.dtype is dt.bool_:
                return value
            zero = self.constant(0, value.type.dtype, node=node)
            return self.op(_E.NE, [value, zero], node=node).result
        raise self.type_error(f"cannot use {self.describe(value)} as a condition", node)

    # -- grid and own tiles ----------------------------------------------------------
    def block_id(self, axis: int) -> Value:
        if axis not in self.block_ids:
            self.block_ids[axis] = self.op(GridOp.BLOCK_ID, [], {"axis": axis}, prologue=True).result
        return self.block_ids[axis]

    def own_index(self, tensor: Value) -> list[Value]:
        assert isinstance(tensor.type, TensorType) and tensor.type.tile_shape is not None
        if tensor.type.map_shape is not None:  # its tiles are the schedule's, not the block id's
            from cutile_compiler._mapped import no_own_tile

            raise no_own_tile(self, tensor)
        return [self.block_id(axis) for axis in range(len(tensor.type.tile_shape))]

    def own_partition(self, tensor: Value, node: ast.AST | None) -> Value:
        """The partition of a Mut tensor into the tiles its blocks own."""
        assert isinstance(tensor.type, TensorType)
        existing = self.own_partitions.get(tensor.id)
        if existing is None:
            tile_shape = tensor.type.tile_shape
            assert tile_shape is not None
            existing = self.op(MemoryOp.MAKE_PARTITION, [tensor], {"tile_shape": tile_shape, "padding": "zero"},
                               node=node, prologue=True).result
            self.own_partitions[tensor.id] = existing
        return existing

    # -- the kernel ---------------------------------------------------------------
    def build(self) -> KernelIR:
        tree = self.source.tree
        function = self.function
        closure = _closure_cells(function)
        env: dict[str, Any] = {}
        self.frames.append(_Frame(self.source, env, function.__globals__, closure))
        self.reads.code(function)
        params: list[KernelParam] = []
        constants = dict(self.spec.constants)
        tensors = dict(self.spec.tensors)
        scalars = dict(self.spec.scalars)
        mutable_ranks = set()
        declared = {a.arg: a for a in (*tree.args.posonlyargs, *tree.args.args, *tree.args.kwonlyargs)}
        for p in self.signature.parameters:
            where = self.source.location(declared[p.name]) if p.name in declared else None
            annotation = p.annotation
            if isinstance(annotation, TensorAnnotation):
                spec = tensors[p.name]
                if annotation.mutable:
                    shape: tuple[int | None, ...] = (None,) * len(spec.shape)
                    ttype = TensorType(spec.dtype, shape, True, spec.tile_shape, spec.map_shape)
                    mutable_ranks.add(len(spec.shape))
                else:
                    shape = tuple(
                        spec.shape[i] if (isinstance(d, str) or d != -1) else None
                        for i, d in enumerate(annotation.dims)
                    )
                    ttype = TensorType(spec.dtype, shape, False, None)
                value = Value(ttype, p.name)
                self.body.args.append(value)
                params.append(KernelParam(p.name, value, "tensor", spec, where))
                env[p.name] = value
            elif p.is_constant:
                env[p.name] = constants[p.name]
            else:
                value = Value(TileType(scalars[p.name]), p.name)
                self.body.args.append(value)
                params.append(KernelParam(p.name, value, "scalar", None, where))
                env[p.name] = value
        self.grid_rank = max(mutable_ranks, default=0)
        try:
            flow = self.visit_statements(tree.body)
        except RecursionError:
            # Within MAX_NESTING this needs a caller already deep in Python's stack.
            raise TileSyntaxError(
                f"the kernel nests too deeply for Python's stack (recursion limit {sys.getrecursionlimit()}) "
                f"under this statement; name intermediate results or flatten the calls", self.location()) from None
        if flow == "return" or flow == Flow.NORMAL:
            pass
        elif flow in ("break", "continue"):
            raise self.syntax_error(f"'{flow}' outside a loop", tree)
        self.body.ops[:0] = self.prologue
        self.frames.pop()
        return KernelIR(tree.name, params, self.body, self.grid_rank, self.source.location(tree), self.unsafe,
                        self.reads)

    # -- statements ----------------------------------------------------------------
    def visit_statements(self, statements: Sequence[ast.stmt]) -> str:
        """Visits a block: the kernel's body, an if or loop body, a device function's body."""
        self.depth += 1  # a block is one level of nesting, as an expression is (see `expr`)
        try:
            if self.depth > MAX_NESTING:
                raise self.nesting_error(statements[0] if statements else self.node)
            for statement in statements:
                self.node = statement
                flow = self.visit_statement(statement)
                if flow != Flow.NORMAL:
                    return flow
            return Flow.NORMAL
        finally:
            self.depth -= 1

    def visit_statement(self, node: ast.stmt) -> str:
        if isinstance(node, ast.Expr):
            if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
                return Flow.NORMAL  # docstring
            self.expr(node.value)
            return Flow.NORMAL
        if isinstance(node, ast.Assign):
            value = self.expr(node.value)
            for target in node.targets:
                self.assign(target, value, node)
            return Flow.NORMAL
        if isinstance(node, ast.AnnAssign):
            if node.value is not None:
                self.assign(node.target, self.expr(node.value), node)
            return Flow.NORMAL
        if isinstance(node, ast.AugAssign):
            if not isinstance(node.target, ast.Name):
                raise self.syntax_error("only names can be updated with augmented assignment (tiles are values; use .store())", node)
            current = self.lookup(node.target.id, node.target)
            self.assign(node.target, self.binary_operator(node.op, current, self.expr(node.value), node), node)
            return Flow.NORMAL
        if isinstance(node, ast.If):
            return self.visit_if(node)
        if isinstance(node, ast.For):
            return self.visit_for(node)
        if isinstance(node, ast.While):
            return self.visit_while(node)
        if isinstance(node, ast.Break):
            self.mapped.check_break(self, node)
            return self.leave_loop("break", node)
        if isinstance(node, ast.Continue):
            return self.leave_loop("continue", node)
        if isinstance(node, ast.Return):
            return self.visit_return(node)
        if isinstance(node, ast.Pass):
            return Flow.NORMAL
        if isinstance(node, ast.Assert):
            return self.visit_assert(node)
        construct = _UNSUPPORTED_STATEMENTS.get(type(node), type(node).__name__)
        raise self.syntax_error(f"{construct} cannot be used inside a kernel", node)

    def assign(self, target: ast.expr, value: Any, node: ast.AST) -> None:
        if isinstance(target, ast.Name):
            self.frame.env[target.id] = value
            return
        if isinstance(target, (ast.Tuple, ast.List)):
            if not isinstance(value, tuple):
                raise self.type_error(f"cannot unpack {self.describe(value)} into {len(target.elts)} names", target)
            if len(value) != len(target.elts):
                raise self.type_error(f"cannot unpack {len(value)} values into {len(target.elts)} names", target)
            for element, item in zip(target.elts, value):
                self.assign(element, item, node)
            return
        if isinstance(target, (ast.Subscript, ast.Attribute)):
            raise self.syntax_error(
                "cannot assign to an element or attribute: tiles are immutable values; "
                "build a new tile, or write a tensor with .store()", target)
        raise self.syntax_error(f"cannot assign to {type(target).__name__}", target)

    def visit_assert(self, node: ast.Assert) -> str:
        test = self.expr(node.test)
        message = self.expr(node.msg) if node.msg is not None else None
        if isinstance(test, (*_NUMBER, type(None), str, tuple)):
            if not test:
                said = message if isinstance(message, str) else bounded_repr(message)
                raise self.type_error(f"assertion failed at compile time{': ' + said if message else ''}", node)
            return Flow.NORMAL
        if message is not None and not isinstance(message, str):
            raise self.type_error(f"an assert's message must be a constant string, got {self.describe(message)}", node.msg)
        if isinstance(test, Value) and isinstance(test.type, TileType) and test.type.dtype is dt.bool_:
            condition: Value = test
        else:
            scalar = self.condition(test, node.test)
            assert isinstance(scalar, Value)
            condition = scalar
        self.op(DebugOp.ASSERT, [condition], {"message": message or ""}, node=node)
        return Flow.NORMAL

    def visit_return(self, node: ast.Return) -> str:
        frame = self.frame
        if frame.loop_depth:  # (Tile IR returns only from the entry's top level or an if there)
            raise self.syntax_error("'return' inside a loop is not supported", node)
        if len(self.frames) > 1:  # an inlined device function
            if self.block is not frame.block:
                # Inside a region of a run-time if: its result would have to merge
                # with the other branch's, which a return does not do.
                raise self.syntax_error(
                    "a device function may return inside an if only when the condition is known at "
                    "compile time; assign the result in each branch and return it after the if", node)
            if node.value is not None:
                frame.result = self.expr(node.value)
            return "return"
        if node.value is not None:
            raise self.syntax_error("a kernel returns nothing: write its results to Mut tensors with .store()", node)
        if self.block is not self.body:
            self.op(ControlOp.RETURN, [], node=node)
        return "return"

    def leave_loop(self, kind: str, node: ast.AST) -> str:
        if not self.loops:
            raise self.syntax_error(f"'{kind}' outside a loop", node)
        context = self.loops[-1]
        if context.static_block is not None:
            if self.block is not context.static_block:
                raise self.syntax_error(
                    f"'{kind}' in a static loop must be decided at compile time; it is under an if whose "
                    "condition is known only at run time (use range(...) for a run-time loop)", node)
            return kind  # the unrolling stops (break) or moves on to the next item (continue)
        values = self.carried_values(context.carried, context.carried_types, node)
        if kind == "continue" and context.induction is not None:
            index, step = context.induction
            values = [self.op(_E.ADD, [index, step], node=node).result, *values]
        self.op(ControlOp.CONTINUE if kind == "continue" else ControlOp.BREAK, values, node=node)
        return kind

    # -- if -----------------------------------------------------------------------------
    def visit_if(self, node: ast.If) -> str:
        test = self.condition(self.expr(node.test), node.test)
        if isinstance(test, bool):  # decided at compile time: only one branch exists
            return self.visit_statements(node.body if test else node.orelse)
        before = dict(self.frame.env)
        then_block, else_block = Block(), Block()
        with self.inserting(then_block):
            then_flow = self.visit_statements(node.body)
            then_env = self.frame.env
        self.frame.env = dict(before)
        with self.inserting(else_block):
            else_flow = self.visit_statements(node.orelse)
            else_env = self.frame.env
        self.frame.env = dict(before)
        live = [(env, block) for env, block, flow in ((then_env, then_block, then_flow), (else_env, else_block, else_flow))
                if flow == Flow.NORMAL]
        changed = sorted({n for env, _ in live for n in env if env.get(n) is not before.get(n)})
        merged_names: list[str] = []
        merged_types: list[KType] = []
        for name in changed:
            values = [env.get(name, _Undefined("")) for env, _ in live]
            if any(isinstance(v, _Undefined) for v in values):
                self.frame.env[name] = _Undefined(
                    f"'{name}' is assigned in only one branch of the if at line {self.location(node).line}; "
                    "assign it before the if or in both branches")
                continue
            if all(not isinstance(v, Value) for v in values) and all(v == values[0] for v in values) \
                    and all(type(v) is type(values[0]) for v in values):
                self.frame.env[name] = values[0]
                continue
            if not all(isinstance(v, (Value, *_NUMBER)) for v in values) or any(
                    isinstance(v, Value) and not isinstance(v.type, TileType) for v in values):
                raise self.type_error(f"'{name}' holds different non-tile values on the branches of the if", node)
            merged_names.append(name)
            merged_types.append(self.merge_type(name, values, node))
        for env, block in live:
            with self.inserting(block):
                saved, self.frame.env = self.frame.env, env
                yielded = self.carried_values(merged_names, merged_types, node)
                self.frame.env = saved
                self.op(ControlOp.YIELD, yielded, node=node)
        if_op = self.op(ControlOp.IF, [test], {"result_types": tuple(merged_types)}, [then_block, else_block], node=node)
        for name, result in zip(merged_names, if_op.results):
            self.frame.env[name] = result
        if then_flow != Flow.NORMAL and else_flow != Flow.NORMAL:
            return then_flow if then_flow == else_flow else "return"
        return Flow.NORMAL

    def merge_type(self, name: str, values: Sequence[Any], node: ast.AST) -> KType:
        tiles = [v for v in values if isinstance(v, Value)]
        if not tiles:
            return TileType(_numbers_dtype(values))
        first = tiles[0].type
        for v in tiles[1:]:
            if v.type != first:
                raise self.type_error(f"'{name}' is a {first} on one path and a {v.type} on another; make them agree", node)
        return first

    def carried_values(self, names: Sequence[str], types: Sequence[KType], node: ast.AST) -> list[Value]:
        """The current values of ``names`` as `Value`s of ``types`` (constants materialized)."""
        result = []
        for name, expected in zip(names, types):
            value = self.frame.env.get(name)
            if isinstance(value, _Undefined) or value is None:
                raise self.syntax_error(f"'{name}' is not defined on every path here", node)
            if isinstance(value, Value):
                if value.type != expected:
                    raise self.type_error(
                        f"'{name}' changes type from {expected} to {value.type}; give it its final type before "
                        "the loop or if (e.g. with full(...) or astype)", node)
                result.append(value)
            elif isinstance(value, _NUMBER) and isinstance(expected, TileType):
                result.append(self.constant(value, expected.dtype, expected.shape, node))
            else:
                raise self.type_error(f"'{name}' must stay a tile, got {self.describe(value)}", node)
        return result

    # -- loops ----------------------------------------------------------------------------
    def visit_for(self, node: ast.For) -> str:
        if node.orelse:
            raise self.syntax_error("for ... else is not supported inside a kernel", node)
        from cutile_compiler._mapped import TileSchedule, mapped_loop

        if not isinstance(node.iter, ast.Call):
            iterable = self.expr(node.iter)
            if isinstance(iterable, TileSchedule):
                return mapped_loop(self, node, iterable)
            if isinstance(iterable, tuple):
                return self.unrolled(node, list(iterable))
            raise self.syntax_error("a kernel loops over range(...), static_range(...) or a constant tuple", node.iter)
        callee = self.expr(node.iter.func)
        from cutile_compiler._builtins import static_items, static_range

        if callee is static_range or callee is builtins.range:
            if node.iter.keywords:
                raise self.syntax_error("range() takes no keyword arguments", node.iter)
            bounds = [self.expr(a) for a in node.iter.args]
            if not 1 <= len(bounds) <= 3:
                raise self.syntax_error("range() takes 1 to 3 arguments", node.iter)
            if callee is static_range:
                return self.unrolled(node, list(static_items(self, node.iter, "static_range", bounds)))
            return self.range_loop(node, bounds)
        iterable = self.call(callee, node.iter)
        if isinstance(iterable, TileSchedule):
            return mapped_loop(self, node, iterable)
        if isinstance(iterable, tuple):
            return self.unrolled(node, list(iterable))
        raise self.syntax_error("a kernel loops over range(...), static_range(...) or a constant tuple", node.iter)

    def unrolled(self, node: ast.For, items: list[Any]) -> str:
        self.loops.append(_LoopContext(static_block=self.block))
        try:
            for item in items:
                self.assign(node.target, item, node)
                flow = self.visit_statements(node.body)
                if flow == "return":
                    return flow
                if flow == "break":
                    break
        finally:
            self.loops.pop()
        return Flow.NORMAL

    def loop_inits(self, node: ast.For | ast.While) -> tuple[list[str], list[Value], list[KType]]:
        """The names a loop carries (those its body reassigns that are defined before
        it, but not a range loop's own index), their values on entry as tiles, and
        their types."""
        assigned = _assigned_names(node.body)
        if isinstance(node, ast.For) and isinstance(node.target, ast.Name):
            assigned = assigned - {node.target.id}
        env = self.frame.env
        carried = [n for n in sorted(assigned) if n in env and not isinstance(env[n], _Undefined)]
        inits = [self.to_tile(env[n], node, what=f"'{n}'") for n in carried]
        return carried, inits, [v.type for v in inits]

    def range_loop(self, node: ast.For, bounds: list[Any]) -> str:
        if not isinstance(node.target, ast.Name):
            raise self.syntax_error("the loop variable of range() must be a single name", node.target)
        start, stop, step = (0, bounds[0], 1) if len(bounds) == 1 else (bounds[0], bounds[1], bounds[2] if len(bounds) == 3 else 1)
        if isinstance(step, int) and step <= 0:
            raise self.type_error(f"range() step must be positive inside a kernel, got {bounded_repr(step)}", node.iter)
        if all(isinstance(b, int) for b in (start, stop, step)) and len(range(start, stop, step)) == 0:
            return Flow.NORMAL
        index_dtype = dt.i32
        for b in (start, stop, step):
            if isinstance(b, Value):
                if not (isinstance(b.type, TileType) and b.type.is_scalar and b.type.dtype.is_integer):
                    raise self.type_error(f"range() bounds must be integer scalars, got {b.type}", node.iter)
                if b.type.dtype.bits == 64:
                    index_dtype = dt.i64
            elif not isinstance(b, int) or isinstance(b, bool):
                raise self.type_error(f"range() bounds must be ints, got {self.describe(b)}", node.iter)
            elif not dt.fits(b, dt.i32):
                index_dtype = dt.i64
        build = self.range_as_loop if _has_loop_exit(node.body) else self.range_as_for
        return self.settle_loop_types(node, lambda: build(node, start, stop, step, index_dtype))

    def settle_loop_types(self, node: ast.For | ast.While, build: Callable[[], str]) -> str:
        """Builds a loop with ``build``, again each time the body needs a carried name
        that starts as a constant to be a tile (`_Retry`), with that constant
        materialized before the loop."""
        for _ in range(8):
            saved_env = dict(self.frame.env)
            depth, block, emitted, prologue = len(self.loops), self.block, len(self.block.ops), len(self.prologue)
            try:
                return build()
            except _Retry as retry:
                # Forget the abandoned attempt: its loop contexts (an enclosing break
                # reads the stack) and the ops it emitted before the loop.
                del self.loops[depth:]
                del block.ops[emitted:]
                del self.prologue[prologue:]
                self.frame.env = saved_env
                self.frame.env[retry.name] = self.materialize(saved_env[retry.name], retry.needed, node)
        raise self.type_error("cannot settle the types of the loop's variables", node)

    def materialize(self, value: Any, needed: KType, node: ast.AST) -> Value:
        if isinstance(value, _NUMBER) and isinstance(needed, TileType):
            return self.constant(value, needed.dtype, needed.shape, node)
        raise self.type_error(f"cannot give {self.describe(value)} the type {needed}", node)

    def bound(self, value: Any, dtype: dt.DType, node: ast.AST) -> Value:
        if isinstance(value, Value):
            return self.cast(value, dtype, node)
        return self.constant(value, dtype, node=node)

    def enter_body(self, names: list[str], inits: list[Value], index: Value | None = None) -> Block:
        """A loop's body block, whose arguments are a range loop's ``index`` (if any)
        and the carried ``names``; the environment becomes the body's, in which those
        names are bound to the arguments."""
        args = [Value(v.type, n) for n, v in zip(names, inits)]
        env = dict(self.frame.env)
        env.update(zip(names, args))
        if index is not None:
            assert index.name is not None
            env[index.name] = index
            args.insert(0, index)
        self.frame.env = env
        return Block(args)

    def loop_body(self, node: ast.For | ast.While, carried: list[str], types: list[KType],
                  before: dict[str, Any]) -> None:
        """Emits the body statements of a ``loop`` op; a body that runs to its end
        continues with the next iteration."""
        flow = self.loop_statements(node.body)
        if flow == Flow.NORMAL:
            self.finish_loop(carried, types, self.frame.env, before, node)
            self.leave_loop("continue", node)

    def loop_statements(self, statements: Sequence[ast.stmt]) -> str:
        """Visits the body of a run-time loop (where a return is refused)."""
        frame = self.frame
        frame.loop_depth += 1
        try:
            return self.visit_statements(statements)
        finally:
            frame.loop_depth -= 1

    def break_if(self, condition: Value, when: bool, node: ast.AST) -> None:
        """Emits ``if condition == when: break`` (out of the innermost ``loop`` op,
        passing on its carried values) as an ``if`` op without results."""
        exit_block, stay_block = Block(), Block()
        with self.inserting(exit_block):
            self.leave_loop("break", node)
        with self.inserting(stay_block):
            self.op(ControlOp.YIELD, [], node=node)
        regions = [exit_block, stay_block] if when else [stay_block, exit_block]
        self.op(ControlOp.IF, [condition], {"result_types": ()}, regions, node=node)

    def finish_loop(self, names: list[str], types: list[KType], body_env: dict[str, Any],
                    before: dict[str, Any], node: ast.AST) -> None:
        """Checks each carried name kept its type; names first assigned in the
        body become undefined after the loop."""
        for name, expected in zip(names, types):
            value = body_env.get(name)
            if isinstance(value, Value) and value.type != expected:
                if isinstance(before.get(name), _NUMBER) and isinstance(value.type, TileType):
                    raise _Retry(name, value.type)
                raise self.type_error(
                    f"'{name}' changes type in the loop from {expected} to {value.type}; give it its final type "
                    "before the loop (e.g. with full(...) or astype)", node)

    def range_as_for(self, node: ast.For, start: Any, stop: Any, step: Any, index_dtype: dt.DType,
                     enter: Callable[[Value], None] | None = None) -> str:
        """A range loop without break/continue: a ``for`` op. With ``enter`` (a
        mapped partition's loop) the index is hidden and ``enter(index)`` binds the
        loop's target at the top of the body."""
        before = self.frame.env
        carried, inits, types = self.loop_inits(node)
        bounds = [self.bound(b, index_dtype, node.iter) for b in (start, stop, step)]
        index = Value(TileType(index_dtype), _HIDDEN_INDEX if enter is not None else _target_name(node))
        self.mapped.note_range_index(self, index, start, stop, step)
        body = self.enter_body(carried, inits, index)
        with self.inserting(body):
            if enter is not None:
                enter(index)
            self.loop_statements(node.body)
            self.finish_loop(carried, types, self.frame.env, before, node)
            self.op(ControlOp.YIELD, self.carried_values(carried, types, node), node=node)
        body_env = self.frame.env
        self.frame.env = before
        for_op = self.op(ControlOp.FOR, [*bounds, *inits], regions=[body], node=node)
        self.after_loop(carried, for_op.results, body_env, before, node)
        return Flow.NORMAL

    def after_loop(self, carried: list[str], results: Sequence[Value], body_env: dict[str, Any],
                   before: dict[str, Any], node: ast.AST) -> None:
        env = dict(before)
        env.update(zip(carried, results))
        line = self.location(node).line
        for name in body_env:
            if name not in before:
                env[name] = _Undefined(
                    f"'{name}' is assigned only inside the loop at line {line}; define it before the loop to use it after")
        self.frame.env = env

    def range_as_loop(self, node: ast.For, start: Any, stop: Any, step: Any, index_dtype: dt.DType,
                      enter: Callable[[Value], None] | None = None) -> str:
        """A range loop with break/continue: a ``loop`` op carrying the index
        (``enter`` as for `range_as_for`)."""
        before = self.frame.env
        carried, inits, types = self.loop_inits(node)
        start_v, stop_v, step_v = (self.bound(b, index_dtype, node.iter) for b in (start, stop, step))
        iv = Value(TileType(index_dtype), _HIDDEN_INDEX if enter is not None else _target_name(node))
        self.mapped.note_range_index(self, iv, start, stop, step)
        body = self.enter_body(carried, inits, iv)
        self.loops.append(_LoopContext(carried, types, (iv, step_v)))
        with self.inserting(body):
            self.break_if(self.op(_E.GE, [iv, stop_v], node=node).result, True, node)
            if enter is not None:
                enter(iv)
            self.loop_body(node, carried, types, before)
        self.loops.pop()
        body_env = self.frame.env
        self.frame.env = before
        loop_op = self.op(ControlOp.LOOP, [start_v, *inits], {"result_types": tuple(types)}, [body], node=node)
        self.after_loop(carried, loop_op.results, body_env, before, node)
        return Flow.NORMAL

    def visit_while(self, node: ast.While) -> str:
        if node.orelse:
            raise self.syntax_error("while ... else is not supported inside a kernel", node)
        return self.settle_loop_types(node, lambda: self.while_loop(node))

    def while_loop(self, node: ast.While) -> str:
        before = self.frame.env
        carried, inits, types = self.loop_inits(node)
        body = self.enter_body(carried, inits)
        self.loops.append(_LoopContext(carried, types))
        with self.inserting(body):
            test = self.condition(self.expr(node.test), node.test)
            if test is False:  # known at compile time: the body never runs
                self.leave_loop("break", node)
            else:
                if not isinstance(test, bool):
                    self.break_if(test, False, node)
                self.loop_body(node, carried, types, before)
        self.loops.pop()
        body_env = self.frame.env
        self.frame.env = before
        loop_op = self.op(ControlOp.LOOP, inits, {"result_types": tuple(types)}, [body], node=node)
        self.after_loop(carried, loop_op.results, body_env, before, node)
        return Flow.NORMAL

    # -- expressions --------------------------------------------------------------------
    def expr(self, node: ast.expr) -> Any:
        saved = self.node
        self.node = node
        self.depth += 1  # an expression within an expression is one level of nesting
        try:
            if self.depth > MAX_NESTING:
                raise self.nesting_error(node)
            return self._expr(node)
        finally:
            self.depth -= 1
            self.node = saved

    def _expr(self, node: ast.expr) -> Any:
        if isinstance(node, ast.Constant):
            if isinstance(node.value, (bool, int, float, str)) or node.value is None:
                return node.value
            raise self.syntax_error(f"constants of type {type(node.value).__name__} are not supported", node)
        if isinstance(node, ast.Name):
            return self.lookup(node.id, node)
        if isinstance(node, ast.BinOp):
            # ``a + b + c + ...`` nests to the left: walked as a loop, so its length is free.
            spine = [node]
            while isinstance(spine[-1].left, ast.BinOp):
                spine.append(spine[-1].left)
            accumulated = self.expr(spine[-1].left)
            for step in reversed(spine):
                self.node = step
                accumulated = self.binary_operator(step.op, accumulated, self.expr(step.right), step)
            return accumulated
        if isinstance(node, ast.UnaryOp):
            operand = self.expr(node.operand)
            if isinstance(node.op, ast.Not):
                test = self.condition(operand, node)
                if isinstance(test, bool):
                    return not test
                return self.op(_E.XOR, [test, self.constant(True, dt.bool_, node=node)], node=node).result
            if isinstance(operand, _NUMBER):
                function, symbol = _UNARY_FOLDS[type(node.op)]
                return self.fold(function, (operand,), lambda: f"{symbol}{bounded_repr(operand)}", node)
            if isinstance(node.op, ast.UAdd):
                return self.to_tile(operand, node)
            return self.unary(_E.NEG if isinstance(node.op, ast.USub) else _E.INVERT, operand, node)
        if isinstance(node, ast.Compare):
            result: Any = True
            left = self.expr(node.left)
            for cmp, right_node in zip(node.ops, node.comparators):
                right = self.expr(right_node)
                if isinstance(cmp, (ast.Is, ast.IsNot)):
                    dtypes = isinstance(left, dt.DType) and isinstance(right, dt.DType)  # (each is one object)
                    if not (right is None or left is None or dtypes) or isinstance(left, Value) \
                            or isinstance(right, Value):
                        raise self.syntax_error("'is' compares only with None, or a dtype with a dtype, inside a "
                                                "kernel", node)
                    part: Any = (left is right) == isinstance(cmp, ast.Is)
                elif isinstance(cmp, (ast.Eq, ast.NotEq)) and _compile_time_object(left, right):
                    part = (left == right) == isinstance(cmp, ast.Eq)  # dtypes, None, tuples: decided now
                elif isinstance(cmp, (ast.In, ast.NotIn)):
                    if not isinstance(right, tuple) or isinstance(left, Value):
                        raise self.syntax_error("'in' needs a constant and a constant tuple", node)
                    part = (left in right) == isinstance(cmp, ast.In)
                else:
                    name, fold = _COMPARE_OPS[type(cmp)]
                    part = self.binary(name, left, right, node, fold)
                result = part if result is True else self.logical("and", result, part, node)
                left = right
            return result
        if isinstance(node, ast.BoolOp):
            kind = "and" if isinstance(node.op, ast.And) else "or"
            value: Any = self.expr(node.values[0])
            for operand_node in node.values[1:]:
                test = self.condition(value, node) if not isinstance(value, Value) else value
                if isinstance(test, bool):  # Python's short-circuit on constants
                    if (kind == "and") != test:
                        return value
                    value = self.expr(operand_node)
                    continue
                value = self.logical(kind, value, self.expr(operand_node), node)
            return value
        if isinstance(node, ast.IfExp):
            test = self.condition(self.expr(node.test), node.test)
            if isinstance(test, bool):
                return self.expr(node.body if test else node.orelse)
            a, b = self.unify([self.expr(node.body), self.expr(node.orelse)], node, "conditional expression")
            test_value = self.broadcast_to(test, a.type.shape, node)  # type: ignore[attr-defined]
            return self.op(_E.SELECT, [test_value, a, b], node=node).result
        if isinstance(node, (ast.Tuple, ast.List)):
            return tuple(self.expr(e) for e in node.elts)
        if isinstance(node, ast.Attribute):
            return self.attribute(self.expr(node.value), node.attr, node)
        if isinstance(node, ast.Subscript):
            return self.subscript(self.expr(node.value), node)
        if isinstance(node, ast.Call):
            return self.call(self.expr(node.func), node)
        if isinstance(node, ast.Lambda):
            return KernelLambda(node, self.frame)
        if isinstance(node, ast.JoinedStr):
            raise self.syntax_error("f-strings are not supported in kernels; print() takes a format string and values", node)
        names = {ast.ListComp: "list comprehensions", ast.DictComp: "dict comprehensions",
                 ast.SetComp: "set comprehensions", ast.GeneratorExp: "generator expressions", ast.Dict: "dicts",
                 ast.Set: "sets", ast.Starred: "starred expressions", ast.NamedExpr: "the walrus operator",
                 ast.Await: "await", ast.Yield: "yield", ast.YieldFrom: "yield from"}
        raise self.syntax_error(f"{names.get(type(node), type(node).__name__)} cannot be used inside a kernel", node)

    def logical(self, kind: str, left: Any, right: Any, node: ast.AST) -> Any:
        a, b = self.condition(left, node), self.condition(right, node)
        if isinstance(a, bool) and isinstance(b, bool):
            return (a and b) if kind == "and" else (a or b)
        a_v = a if isinstance(a, Value) else self.constant(a, dt.bool_, node=node)
        b_v = b if isinstance(b, Value) else self.constant(b, dt.bool_, node=node)
        return self.op(_E.AND if kind == "and" else _E.OR, [a_v, b_v], node=node).result

    def lookup(self, name: str, node: ast.AST) -> Any:
        frame = self.frame
        if name in frame.env:
            value = frame.env[name]
            if isinstance(value, _Undefined):
                raise self.syntax_error(value.reason, node)
            return value
        if name in frame.closure:
            value = self.reads.cell(frame.closure[name], name)
            if value is not ABSENT:  # (an empty cell: a name not bound yet)
                return value
        value = self.reads.global_name(frame.globals, name)
        if value is not ABSENT:
            return value
        if hasattr(builtins, name):
            return getattr(builtins, name)
        undeclared = [c for c, _ in self.spec.constants if c == name]
        if undeclared and len(self.frames) == 1:
            raise self.syntax_error(
                f"name '{name}' is a shape constant of the signature; to use it in the body, declare it as a "
                f"parameter: {name}: Constant[int]", node)
        raise self.syntax_error(f"name '{name}' is not defined", node)

    def attribute(self, value: Any, attr: str, node: ast.Attribute) -> Any:
        from cutile_compiler._builtins import value_attribute

        if isinstance(value, Value):
            return value_attribute(self, value, attr, node)
        if isinstance(value, tuple) and attr in ("count", "index"):
            return getattr(value, attr)
        if isinstance(value, dt.DType):
            if attr in ("bits", "itemsize", "name", "is_float", "is_integer", "is_signed"):
                return getattr(value, attr)
        if isinstance(value, _NUMBER) or isinstance(value, (str, type(None))):
            raise self.syntax_error(f"{self.describe(value)} has no attribute '{attr}' usable in a kernel", node)
        try:
            found = getattr(value, attr)
        except AttributeError:
            raise self.syntax_error(f"{self.describe(value)} has no attribute '{attr}'", node) from None
        self.reads.attribute(value, attr, found)  # (config.SCALE may be rebound later)
        return found

    def subscript(self, value: Any, node: ast.Subscript) -> Any:
        if isinstance(node.slice, ast.Slice) and isinstance(value, tuple):
            lower = self.expr(node.slice.lower) if node.slice.lower else None
            upper = self.expr(node.slice.upper) if node.slice.upper else None
            step = self.expr(node.slice.step) if node.slice.step else None
            return self.fold(lambda: value[lower:upper:step], (),
                             lambda: f"{self.describe(value)}[{bounded_repr(lower)}:{bounded_repr(upper)}:{bounded_repr(step)}]",
                             node)
        if isinstance(value, Value) and isinstance(value.type, TileType):
            return self.new_axes(value, node)
        index = self.expr(node.slice)
        if isinstance(value, tuple):
            if isinstance(index, int) and not isinstance(index, bool):
                if not -len(value) <= index < len(value):
                    raise self.type_error(f"index {bounded_repr(index)} is out of range for a tuple of {len(value)}", node)
                return value[index]
            if isinstance(index, tuple) or isinstance(index, Value):
                raise self.type_error("tuples are indexed with compile-time ints", node)
        raise self.type_error(f"{self.describe(value)} cannot be subscripted", node)

    def new_axes(self, tile: Value, node: ast.Subscript) -> Value:
        """``t[:, None]``, ``t[None]``, ``t[..., None]``: the tile with size-1 axes where
        the index has None (``np.newaxis``), its own axes where it has ``:`` or ``...``."""
        items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        shape: tuple[int, ...] = tile.type.shape  # type: ignore[attr-defined]
        wrong = ("tiles are indexed only with ':', '...' and None (new axes: t[:, None]); for elements or "
                 "sub-tiles use extract(), reshape() or a reduction")
        ellipses = [i for i in items if isinstance(i, ast.Constant) and i.value is Ellipsis]
        if len(ellipses) > 1:
            raise self.syntax_error("an index holds at most one '...'", node)
        kept = sum(1 for i in items if isinstance(i, ast.Slice))
        result: list[int] = []
        axis = 0
        for item in items:
            if isinstance(item, ast.Slice):
                if item.lower or item.upper or item.step:
                    raise self.syntax_error(wrong, item)
                if axis >= len(shape):
                    raise self.type_error(f"too many ':' for a rank-{len(shape)} tile", item)
                result.append(shape[axis])
                axis += 1
            elif isinstance(item, ast.Constant) and item.value is Ellipsis:
                take = len(shape) - kept
                if take < 0:
                    raise self.type_error(f"too many ':' for a rank-{len(shape)} tile", item)
                result.extend(shape[axis:axis + take])
                axis += take
            elif self.expr(item) is None:
                result.append(1)
            else:
                raise self.syntax_error(wrong, item)
        result.extend(shape[axis:])  # axes not named are kept, as numpy does
        return self.op(ShapeOp.RESHAPE, [tile], {"shape": tuple(result)}, node=node).result

    def call(self, callee: Any, node: ast.Call) -> Any:
        from cutile_compiler._builtins import call_object

        args: list[Any] = []
        for a in node.args:
            if isinstance(a, ast.Starred):
                spread = self.expr(a.value)
                if not isinstance(spread, tuple):
                    raise self.type_error(f"only tuples can be spread with *, got {self.describe(spread)}", a)
                args.extend(spread)
            else:
                args.append(self.expr(a))
        kwargs: dict[str, Any] = {}
        for k in node.keywords:
            if k.arg is None:
                raise self.syntax_error("**kwargs is not supported inside a kernel", k)
            kwargs[k.arg] = self.expr(k.value)
        return call_object(self, callee, args, kwargs, node)

    # -- device functions ------------------------------------------------------------
    def call_lambda(self, function: KernelLambda, args: list[Any], kwargs: dict[str, Any], node: ast.AST) -> Any:
        """Evaluates a lambda written in the kernel, its parameters bound to ``args``."""
        spec = function.node.args
        names = [a.arg for a in [*spec.posonlyargs, *spec.args]]
        if spec.vararg or spec.kwarg or spec.kwonlyargs or spec.defaults:
            raise self.syntax_error("a lambda in a kernel takes plain positional parameters only", function.node)
        if kwargs or len(args) != len(names):
            raise self.type_error(f"the lambda takes {len(names)} argument(s), got {len(args)}", node)
        outer = function.frame
        frame = _Frame(outer.source, {**outer.env, **dict(zip(names, args))}, outer.globals, outer.closure)
        self.frames.append(frame)
        try:
            return self.expr(function.node.body)
        finally:
            self.frames.pop()


    def check_inlinable(self, function: Any, node: ast.AST) -> None:
        """Refuses, at the call, a function the front end cannot inline: one taking
        ``*args`` or ``**kwargs`` (a kernel's values have no run-time tuple or dict), a
        generator or coroutine, or one closing over a value that is not a constant."""
        import inspect

        name = function.__qualname__
        if inspect.isgeneratorfunction(function) or inspect.iscoroutinefunction(function):
            raise self.syntax_error(f"cannot inline {name}: generators and coroutines cannot be called in a kernel",
                                    node)
        for parameter in inspect.signature(function).parameters.values():
            if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
                stars = "*" if parameter.kind is parameter.VAR_POSITIONAL else "**"
                raise self.syntax_error(f"cannot inline {name}: it takes {stars}{parameter.name}; a function called "
                                        f"in a kernel takes named parameters only", node)
        for variable, cell in _closure_cells(function).items():
            try:
                captured = cell.cell_contents
            except ValueError:
                continue  # not bound yet: the body's use of it says so
            if not _constant_object(captured):
                raise self.syntax_error(
                    f"cannot inline {name}: it closes over '{variable}', {self.describe(captured)}; a function "
                    f"called in a kernel may close over constants (numbers, strings, dtypes, tuples), functions "
                    f"and modules only", node)

    def inline(self, function: Any, args: list[Any], kwargs: dict[str, Any], node: ast.Call) -> Any:
        import inspect

        if function in self.inline_stack:
            raise self.syntax_error(f"recursive call of {function.__qualname__}: device functions are inlined and cannot recurse", node)
        self.check_inlinable(function, node)
        source = capture(function)
        try:
            bound = inspect.signature(function).bind(*args, **kwargs)
        except TypeError as exc:
            raise self.type_error(f"{function.__qualname__}(): {exc}", node) from None
        bound.apply_defaults()
        frame = _Frame(source, dict(bound.arguments), function.__globals__, _closure_cells(function), block=self.block)
        self.reads.code(function)
        for statement in source.tree.body[:-1]:
            early = next((n for n in ast.walk(statement) if isinstance(n, ast.Return)), None)
            if early is not None:
                raise TileSyntaxError("a device function may return only at its end (its last statement)",
                                      source.location(early))
        self.frames.append(frame)
        self.inline_stack.append(function)
        try:
            flow = self.visit_statements(source.tree.body)
            if flow in ("break", "continue"):
                raise self.syntax_error(f"'{flow}' outside a loop", source.tree)
        finally:
            self.frames.pop()
            self.inline_stack.pop()
        return frame.result


def _compile_time_object(left: Any, right: Any) -> bool:
    """Whether ``left == right`` is decided at compile time as Python decides it: both
    are compile-time objects and at least one is a dtype, None or a tuple (numbers and
    strings fold through the operator's own rule)."""
    if not (_known_now(left) and _known_now(right)):
        return False
    return any(isinstance(v, (dt.DType, tuple)) or v is None for v in (left, right))


def _known_now(value: Any) -> bool:
    """No run-time value in ``value`` (a tuple's items included): ``(n, 1) == (0, 1)`` with
    a run-time ``n`` is the comparison's rule's to refuse, not Python's to fold to False."""
    if isinstance(value, tuple):
        return all(_known_now(item) for item in value)
    return not isinstance(value, (Value, _Undefined))


def _constant_object(value: Any) -> bool:
    """What a helper function inlined into a kernel may close over: what the compile
    reads as a constant (numbers, strings, None, dtypes, tuples of them), functions,
    classes and modules."""
    import types

    if value is None or isinstance(value, (*_NUMBER, str, dt.DType)):
        return True
    if isinstance(value, tuple):
        return all(_constant_object(item) for item in value)
    return isinstance(value, (types.FunctionType, types.BuiltinFunctionType, types.ModuleType, type)) \
        or callable(value) and type(value).__module__.startswith("cutile")


#: The name of a mapped partition loop's item number in the body's environment (no
#: Python name can be it, so the kernel cannot see it).
_HIDDEN_INDEX = "<schedule item>"


def _target_name(node: ast.For) -> str:
    assert isinstance(node.target, ast.Name)
    return node.target.id


def _operand_text(value: Any) -> str:
    """An operand of a folded operator as the message writes it: a negative number in
    parentheses (``(-8) ** 0.5``, not ``-8 ** 0.5``)."""
    text = bounded_repr(value)
    return f"({text})" if text.startswith("-") else text


def _numbers_dtype(values: Sequence[Any]) -> dt.DType:
    """The dtype plain numbers take together: their default dtypes promoted (f32 when
    no lossless promotion exists)."""
    dtype = dt.default_scalar_dtype(values[0])
    for v in values[1:]:
        dtype = dt.promote(dtype, dt.default_scalar_dtype(v)) or dt.f32
    return dtype


def _closure_cells(function: Any) -> dict[str, Any]:
    """The cells of ``function``'s closure variables, by name (read through
    `ExternalReads.cell`, which records what was read)."""
    return dict(zip(function.__code__.co_freevars, function.__closure__ or ()))


def _assigned_names(statements: Sequence[ast.stmt]) -> set[str]:
    names: set[str] = set()
    for statement in statements:
        for node in ast.walk(statement):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
                names.add(node.target.id)
    return names


def _has_loop_exit(statements: Sequence[ast.stmt]) -> bool:
    """Whether break/continue of *this* loop appear (not those of nested loops)."""
    pending: list[ast.AST] = list(statements)
    while pending:  # a loop, not a recursion: the statements may hold arbitrarily deep expressions
        node = pending.pop()
        if isinstance(node, (ast.Break, ast.Continue)):
            return True
        if isinstance(node, ast.stmt) and not isinstance(node, (ast.For, ast.While, ast.FunctionDef,
                                                                ast.AsyncFunctionDef)):
            pending.extend(child for child in ast.iter_child_nodes(node) if isinstance(child, ast.stmt))
    return False


def build_kernel_ir(function: Any, signature: KernelSignature, spec: Specialization, *, unsafe: bool = False) -> KernelIR:
    """The typed kernel IR of ``function`` specialized by ``spec``."""
    return FrontEnd(function, signature, spec, unsafe=unsafe).build()


__all__ = ["FrontEnd", "build_kernel_ir"]
