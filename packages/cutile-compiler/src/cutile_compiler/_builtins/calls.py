"""A kernel's calls: of DSL functions, methods, device functions, lambdas, dtypes,
and the Python builtins allowed in kernels."""

from __future__ import annotations

import ast
import builtins
import inspect
import sys
from typing import Any, TYPE_CHECKING

from cutile_compiler import _dtypes as dt
from cutile_compiler._builtins._base import _NUMBER, _tile, Builtin, DeviceFunction, Impl
from cutile_compiler._builtins.control import _StaticRange, static_items
from cutile_compiler._builtins.debug import _print
from cutile_compiler._builtins.methods import BoundMethod
from cutile_compiler._builtins.reduction import _reduce
from cutile_compiler._errors import bounded_repr
from cutile_compiler._opdefs import ElementwiseOp

if TYPE_CHECKING:
    from cutile_compiler._frontend import FrontEnd


def _py_min_max(kind: str) -> Impl:
    def impl(fe: FrontEnd, node: ast.Call, *args: Any) -> Any:
        if len(args) == 1:
            (only,) = args
            if isinstance(only, tuple):
                args = only
            else:
                return _reduce(fe, node, kind, only, None, False)
        if len(args) < 2:
            raise fe.type_error(f"{kind}() needs at least two values", node)
        if all(isinstance(a, _NUMBER) for a in args):
            return fe.fold(builtins.min if kind == "min" else builtins.max, (args,),
                           lambda: f"{kind}{bounded_repr(tuple(args))}", node)
        result = args[0]
        for a in args[1:]:
            x, y = fe.unify([result, a], node, f"{kind}()")
            result = fe.op(ElementwiseOp.MINIMUM if kind == "min" else ElementwiseOp.MAXIMUM, [x, y], node=node).result
        return result
    return impl


def _py_abs(fe: FrontEnd, node: ast.Call, x: Any) -> Any:
    if isinstance(x, _NUMBER):
        return fe.fold(abs, (x,), lambda: f"abs({bounded_repr(x)})", node)
    return fe.op(ElementwiseOp.ABS, [_tile(fe, x, node, "abs's argument")], node=node).result


def _py_convert(kind: type, dtype: dt.DType) -> Impl:
    def impl(fe: FrontEnd, node: ast.Call, x: Any) -> Any:
        if isinstance(x, _NUMBER) or kind is float and isinstance(x, str):  # float("inf"), float("nan")
            return fe.fold(kind, (x,), lambda: f"{kind.__name__}({bounded_repr(x)})", node)
        return fe.cast(_tile(fe, x, node, f"{kind.__name__}()'s argument"), dtype, node)
    return impl


def _py_len(fe: FrontEnd, node: ast.Call, x: Any) -> int:
    if isinstance(x, tuple):
        return len(x)
    raise fe.type_error(f"len() takes a tuple inside a kernel, got {fe.describe(x)}", node)


def _py_range(fe: FrontEnd, node: ast.Call, *args: Any) -> Any:
    if all(isinstance(a, int) for a in args):
        return static_items(fe, node, "range", args)
    raise fe.syntax_error("range() with run-time bounds is only allowed as the iterable of a for loop", node)


_PYTHON_BUILTINS: dict[Any, Impl] = {
    builtins.min: _py_min_max("min"), builtins.max: _py_min_max("max"), builtins.abs: _py_abs,
    builtins.int: _py_convert(int, dt.i32), builtins.float: _py_convert(float, dt.f32),
    builtins.bool: _py_convert(bool, dt.bool_), builtins.len: _py_len, builtins.range: _py_range,
}


#: Libraries whose Python functions are host code, never inlined into a kernel (cutile's own
#: host packages among them; cutile_kernels' helpers are kernel code)
_LIBRARIES = frozenset({"numpy", "ml_dtypes", "scipy", "torch", "jax", "cupy", "cutile", "cutile_compiler",
                        "cutile_ir", "cuda_core", "cuda_async"})


def call_object(fe: FrontEnd, callee: Any, args: list[Any], kwargs: dict[str, Any], node: ast.Call) -> Any:
    """Emits a call of ``callee`` found in a kernel."""
    from cutile_compiler._frontend import KernelLambda

    if isinstance(callee, Builtin):
        return callee.emit(fe, node, args, kwargs)
    if isinstance(callee, BoundMethod):
        return callee.emit(fe, node, args, kwargs)
    if isinstance(callee, DeviceFunction):
        return fe.inline(callee.python_function, args, kwargs, node)
    if isinstance(callee, KernelLambda):
        return fe.call_lambda(callee, args, kwargs, node)
    if isinstance(callee, dt.DType):
        if len(args) != 1 or kwargs:
            raise fe.type_error(f"{callee}(x) converts one value", node)
        value = args[0]
        if isinstance(value, _NUMBER):
            return fe.constant(value, callee, node=node)
        return fe.cast(_tile(fe, value, node, f"{callee}()'s argument"), callee, node)
    try:
        python_builtin = _PYTHON_BUILTINS.get(callee)
    except TypeError:  # unhashable
        python_builtin = None
    if python_builtin is not None:
        if kwargs:
            raise fe.type_error(f"{getattr(callee, '__name__', callee)}() takes no keyword arguments in a kernel", node)
        return python_builtin(fe, node, *args)
    if callee is builtins.print:
        return _print(fe, node, args, kwargs, "\n")
    if isinstance(callee, _StaticRange):
        raise fe.syntax_error("static_range() is only allowed as the iterable of a for loop", node)
    name = getattr(callee, "__qualname__", None) or getattr(callee, "__name__", None) or type(callee).__name__
    if inspect.isfunction(callee) and callee.__name__ == "<lambda>":
        return fe.inline(callee, args, kwargs, node)  # a lambda is an expression: inlined as it is
    if inspect.isfunction(callee):
        module = (getattr(callee, "__module__", None) or "").partition(".")[0]
        if module in sys.stdlib_module_names or module in _LIBRARIES:
            raise fe.syntax_error(f"cannot call {callee.__module__}.{name} inside a kernel: a kernel calls the kernel "
                                  f"language's functions (cutile.core) and Python functions of its own, which are "
                                  f"inlined", node)
        return fe.inline(callee, args, kwargs, node)  # a plain helper function, inlined as a device function is
    raise fe.syntax_error(f"cannot call {fe.describe(callee)} inside a kernel", node)
