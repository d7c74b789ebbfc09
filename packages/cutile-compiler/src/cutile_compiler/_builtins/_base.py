"""What every DSL function shares: the `Builtin` registry (`DSL_FUNCTIONS`), the
check of a kernel's call against a function's one signature (`bind_call`),
`DeviceFunction`, `HostCallError`, and the helpers that normalize arguments
(compile-time ints, shapes, dtypes, axes, indices, tensors, partitions)."""

from __future__ import annotations

import ast
import inspect
from collections.abc import Callable, Sequence
from typing import Any, Concatenate, Generic, ParamSpec, TYPE_CHECKING, TypeVar

from cutile_compiler import _dtypes as dt
from cutile_compiler._device_function import DeviceFunction as DeviceFunction
from cutile_compiler._errors import HostCallError as HostCallError
from cutile_compiler._ir import Value
from cutile_compiler._opdefs import MemoryOp
from cutile_compiler._opdefs._base import RuleError
from cutile_compiler._opdefs.pointer import check_writable
from cutile_compiler._types import TensorType, tile_shape_problem

if TYPE_CHECKING:
    from cutile_compiler._builtins.control import _StaticRange
    from cutile_compiler._frontend import FrontEnd


_NUMBER = (bool, int, float)
Impl = Callable[..., Any]
#: A DSL function's parameters as the kernel author writes them (static tools show them)
Params = ParamSpec("Params")
#: What picks a member of a family of DSL functions (a reduction's kind, an op's definition)
Which = TypeVar("Which")


def user_signature(impl: Impl, hidden: int = 2) -> inspect.Signature:
    """The signature a kernel author calls: ``impl``'s without its first ``hidden``
    parameters (the front end, the call's node, a method's receiver), and without the
    ``Any`` hints that only say the front end checks the value itself."""
    signature = inspect.signature(impl)
    params = [p.replace(annotation=inspect.Parameter.empty) if p.annotation in ("Any", Any) else p
              for p in list(signature.parameters.values())[hidden:]]
    returns = signature.return_annotation
    if returns not in ("None", None):  # what a DSL function returns is a tile (or tuple); said in its doc
        returns = inspect.Signature.empty
    return signature.replace(parameters=params, return_annotation=returns)


def _spelled(name: str, signature: inspect.Signature) -> str:
    """``name(parameters)`` without type hints, as an error message shows the call's shape."""
    params = [p.replace(annotation=inspect.Parameter.empty) for p in signature.parameters.values()]
    return f"{name}{signature.replace(parameters=params, return_annotation=inspect.Signature.empty)}"


def bind_call(fe: FrontEnd, node: ast.Call, name: str, signature: inspect.Signature, args: Sequence[Any],
              kwargs: dict[str, Any]) -> None:
    """Checks a kernel's call of DSL function (or method) ``name`` against its one
    signature: a wrong count of arguments or an unknown keyword is a `TileTypeError`
    at ``node`` naming the function and the parameter."""
    params = list(signature.parameters.values())
    keywords = [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    unknown = [k for k in kwargs if k not in keywords and not any(p.kind is p.VAR_KEYWORD for p in params)]
    if unknown:
        takes = f"takes only {', '.join(keywords)}" if keywords else "takes no keyword arguments"
        raise fe.type_error(f"{name}() {takes}, got {', '.join(unknown)}", node)
    positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(args) > len(positional) and not any(p.kind is p.VAR_POSITIONAL for p in params):
        counted = f"{len(positional)} positional argument{'s' * (len(positional) != 1)}"
        listed = f" ({', '.join(positional)})" if positional else ""
        raise fe.type_error(f"{_spelled(name, signature)} takes {counted}{listed}, got {len(args)}", node)
    try:
        signature.bind(*args, **kwargs)
    except TypeError as exc:  # a missing argument, or one given twice: Python's words name the parameter
        raise fe.type_error(f"{_spelled(name, signature)}: {exc}", node) from None


#: The DSL functions by the name kernels call them, in the order they are declared:
#: what `cutile_compiler.language` exports (with its dtypes, annotations and classes).
DSL_FUNCTIONS: dict[str, Builtin[...] | _StaticRange] = {}


class Builtin(Generic[Params]):
    """A DSL function. ``impl(fe, node, *args, **kwargs)`` emits it in a kernel; on the
    host it presents ``impl``'s parameters after those two (`inspect.signature`) and
    its documentation, and calling it raises `HostCallError`. Its type parameter is
    those parameters, so that type checkers and IDEs show them too."""

    def __init__(self, name: str, impl: Callable[Concatenate[FrontEnd, ast.Call, Params], Any], doc: str) -> None:
        if name in DSL_FUNCTIONS:
            raise ValueError(f"the DSL function {name} is declared twice")  # pragma: no cover - a compiler bug
        self.__name__ = name
        self.__qualname__ = name
        self.__module__ = "cutile_compiler.language"
        self.__doc__ = doc
        self.impl = impl
        self.__signature__ = user_signature(impl)
        DSL_FUNCTIONS[name] = self

    def __call__(self, *args: Params.args, **kwargs: Params.kwargs) -> Any:
        raise HostCallError(f"{self.__name__}() can only be called inside a cutile kernel")

    def __repr__(self) -> str:
        return f"<cutile builtin {self.__name__}{self.__signature__}>"

    def emit(self, fe: FrontEnd, node: ast.Call, args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
        bind_call(fe, node, self.__name__, self.__signature__, args, kwargs)
        return self.impl(fe, node, *args, **kwargs)


def builtin(impl: Callable[Concatenate[FrontEnd, ast.Call, Params], Any]) -> Builtin[Params]:
    """Declares a DSL function; its docstring is the user's documentation."""
    name = impl.__name__.rstrip("_")
    return Builtin(name, impl, inspect.getdoc(impl) or "")


def family_member(template: Callable[Concatenate[Which, FrontEnd, ast.Call, Params], Any], which: Which, name: str,
                  doc: str) -> Builtin[Params]:
    """The DSL function ``name`` of a family declared once: ``template(which, fe, node, ...)``
    (``which`` picks the member, e.g. the op of an element-wise function), with the
    template's parameters after those three."""
    def impl(fe: FrontEnd, node: ast.Call, /, *args: Params.args, **kwargs: Params.kwargs) -> Any:
        return template(which, fe, node, *args, **kwargs)

    shown = inspect.signature(template)
    impl.__signature__ = shown.replace(parameters=list(shown.parameters.values())[1:])  # type: ignore[attr-defined]
    return Builtin(name, impl, doc)


# -- helpers ----------------------------------------------------------------------------
def _tile(fe: FrontEnd, value: Any, node: ast.AST, what: str) -> Value:
    return fe.to_tile(value, node, what=what)


def _static_int(fe: FrontEnd, value: Any, node: ast.AST, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value.bit_length() > 63:
        raise fe.type_error(f"{what} must be a compile-time int (of 64 bits), got {fe.describe(value)}", node)
    return value


def _static_bool(fe: FrontEnd, value: Any, node: ast.AST, what: str) -> bool:
    if not isinstance(value, bool):
        raise fe.type_error(f"{what} must be True or False, got {fe.describe(value)}", node)
    return value


def _static_shape(fe: FrontEnd, value: Any, node: ast.AST, what: str = "shape", *, power_of_two: bool = True) -> tuple[int, ...]:
    items = value if isinstance(value, tuple) else (value,)
    shape = tuple(_static_int(fe, v, node, f"{what} dims") for v in items)
    if any(d <= 0 for d in shape):
        raise fe.type_error(f"{what} dims must be positive, got {list(shape)}", node)
    problem = tile_shape_problem(shape) if power_of_two else None
    if problem is not None:
        raise fe.type_error(f"{what}: {problem}", node)
    return shape


def _dtype(fe: FrontEnd, value: Any, node: ast.AST) -> dt.DType:
    if not isinstance(value, dt.DType):
        raise fe.type_error(f"expected a dtype such as f32, got {fe.describe(value)}", node)
    return value


def _axis(fe: FrontEnd, axis: Any, rank: int, node: ast.AST) -> int:
    value = _static_int(fe, axis, node, "axis")
    if not -rank <= value < rank:
        raise fe.type_error(f"axis {value} is out of range for a rank-{rank} tile", node)
    return value % rank


def _index(fe: FrontEnd, index: Any, node: ast.AST) -> list[Value]:
    """A tile index's coordinates as values; their count and kinds are the op's rule
    (`check_index`)."""
    items = index if isinstance(index, tuple) else (index,)
    return [fe.to_tile(item, node, what="an index coordinate") for item in items]


def _partition(fe: FrontEnd, tensor: Value, shape: Any, padding: Any, node: ast.AST) -> Value:
    assert isinstance(tensor.type, TensorType)
    if tensor.type.mutable and not fe.unsafe:
        # Any other view of a tensor the blocks write would let a block read tiles
        # that other blocks are writing: a race.
        raise fe.type_error(
            "a Mut tensor is already partitioned among the blocks, which write it tile by tile; a safe kernel "
            "reads it only through its own tile (.load() without an index) and writes it with .store(). Other "
            "tiles need @cutile.entry(unsafe=True)", node)
    tile_shape = _static_shape(fe, shape, node, "partition shape")
    # the tile shape's rank and the padding are the op's rules (`MakePartition`)
    return fe.op(MemoryOp.MAKE_PARTITION, [tensor], {"tile_shape": tile_shape, "padding": padding}, node=node).result


def _writable(fe: FrontEnd, tensor: TensorType, name: str, node: ast.AST) -> None:
    """The ops' one rule of which tensors a kernel may write (`check_writable`), checked
    at ``node`` before the other operands are looked at."""
    try:
        check_writable(tensor, name)
    except RuleError as exc:
        raise fe.type_error(str(exc), node) from None


def _tensor_arg(fe: FrontEnd, value: Any, node: ast.AST, what: str) -> Value:
    if not (isinstance(value, Value) and isinstance(value.type, TensorType)):
        raise fe.type_error(f"{what} must be a tensor parameter of the kernel, got {fe.describe(value)}", node)
    return value


def _convert_value(fe: FrontEnd, value: Any, dtype: dt.DType, node: ast.AST, what: str) -> Value:
    tile = fe.to_tile(value, node, like=dtype, what=what)
    if tile.type.dtype is not dtype:  # type: ignore[attr-defined]
        if not dt.converts_losslessly(tile.type.dtype, dtype) and not isinstance(value, _NUMBER):  # type: ignore[attr-defined]
            raise fe.type_error(f"{what}: a {tile.type} cannot become {dtype} without loss; convert it with "
                                f".astype({dtype})", node)
        tile = fe.cast(tile, dtype, node)
    return tile


def _hint_attrs(fe: FrontEnd, node: ast.AST, latency: Any, allow_tma: Any) -> dict[str, Any]:
    attrs: dict[str, Any] = {}
    if latency is not None:
        value = _static_int(fe, latency, node, "latency")
        if not 1 <= value <= 10:
            raise fe.type_error(f"latency must be from 1 to 10, got {value}", node)
        attrs["latency"] = value
    if allow_tma is not None:
        attrs["allow_tma"] = _static_bool(fe, allow_tma, node, "allow_tma")
    return attrs
