"""cutile's mypy plugin: kernels in cutile's annotations type-check, and launches are typed.

Enable it in the project's mypy configuration::

    [tool.mypy]            # pyproject.toml (or: [mypy] in mypy.ini / setup.cfg)
    plugins = ["cutile.mypy_plugin"]

A kernel's annotations (``Tensor[f32, ["B"]]``, ``Mut[...]``, ``x: f32``,
``Constant[int]``) are read by cutile's compiler; to a type checker they are not
types. With the plugin, mypy reads them as the compiler does:

- inside the kernel, ``Tensor[dtype, dims]`` is a `cutile.core.TensorView`,
  ``Mut[Tensor[...]]`` a `cutile.core.MutTensorView` (which adds ``store`` and
  the atomics), a dtype a `cutile.core.ScalarParam`, ``Constant[int]`` an int;
  the annotation's dtype and dims are checked as the compiler checks them;
- ``@cutile.entry`` makes a ``Kernel[P, R]`` whose call takes what a launch
  takes: a `cutile.Tensor` for a read-only tensor, a `cutile.Partition` for a
  ``Mut`` one, a number for a scalar (``SupportsIndex`` for integer and bool
  dtypes, ``SupportsFloat`` for float ones), the constant's type for a constant
  (optional where it names a dim: the shapes fix it);
  and whose ``.sync()`` returns ``R``, the tensor arguments in signature order
  (one as itself, several as a tuple), as the launch returns them;
- ``Tensor`` without brackets is the runtime class `cutile.Tensor`.

The module imports only mypy (mypy imports it, with the ``cutile`` package around
it); it knows cutile's objects by their names, which ``test_mypy_plugin.py`` checks
against the packages.
"""

from __future__ import annotations

from collections.abc import Callable

from mypy.nodes import ArgKind
from mypy.plugin import AnalyzeTypeContext, FunctionContext, MethodContext, Plugin
from mypy.types import (
    AnyType,
    CallableType,
    Instance,
    Parameters,
    ProperType,
    RawExpressionType,
    TupleType,
    Type,
    TypeList,
    TypeOfAny,
    UnboundType,
    get_proper_type,
)

# The annotation objects, by the full names mypy gives them (where they are defined).
TENSOR_ANNOTATIONS = frozenset({"cutile_compiler._signature.Tensor", "cutile._tensor.Tensor"})
MUT_ANNOTATION = "cutile_compiler._signature.Mut"
CONSTANT_ANNOTATION = "cutile_compiler._signature.Constant"
DTYPE_MODULE = "cutile_compiler._dtypes"
#: dtype name -> the Python type its run-time scalars take (the DType's ``kind``)
DTYPE_KINDS: dict[str, str] = {
    "bool_": "bool",
    **{name: "int" for name in ("i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64")},
    **{name: "float" for name in ("f16", "bf16", "f32", "f64", "tf32", "f8e4m3fn", "f8e5m2", "f8e8m0fnu")},
}

# What the annotations become inside a kernel (cutile_compiler.language re-exports them).
TENSOR_VIEW = "cutile_compiler._kernel_types.TensorView"
MUT_TENSOR_VIEW = "cutile_compiler._kernel_types.MutTensorView"
SCALAR_PARAM = "cutile_compiler._kernel_types.ScalarParam"

# What a launch takes for them.
# (the checker looks names up through their package, the semantic analyzer where defined)
RUNTIME_TENSOR = "cutile.Tensor"
RUNTIME_PARTITION = "cutile.Partition"
RUNTIME_TENSOR_CLASS = "cutile._tensor.Tensor"
HOST_SCALARS = {"int": "typing.SupportsIndex", "bool": "typing.SupportsIndex", "float": "typing.SupportsFloat"}

ENTRY = "cutile._entry.entry"
ENTRY_DECORATOR_CALL = "cutile._entry.KernelDecorator.__call__"

_ANNOTATION_GRAMMAR = ("Tensor[...] takes a dtype and a list of dims, e.g. Tensor[f32, [-1, 'K']]: each dim a positive "
                       "int, -1 (dynamic) or a constant's name")


class CutilePlugin(Plugin):
    """The hooks: one per annotation object, and the two spellings of ``@cutile.entry``."""

    def get_type_analyze_hook(self, fullname: str) -> Callable[[AnalyzeTypeContext], Type] | None:
        if fullname in TENSOR_ANNOTATIONS:
            return _tensor_annotation
        if fullname == MUT_ANNOTATION:
            return _mut_annotation
        if fullname == CONSTANT_ANNOTATION:
            return _constant_annotation
        module, _, name = fullname.rpartition(".")
        if module == DTYPE_MODULE and name in DTYPE_KINDS:
            kind = DTYPE_KINDS[name]
            return lambda ctx: _scalar_annotation(ctx, name, kind)
        return None

    def get_function_hook(self, fullname: str) -> Callable[[FunctionContext], Type] | None:
        if fullname == ENTRY:
            return lambda ctx: _kernel_type(ctx.arg_types, ctx.default_return_type, ctx)
        return None

    def get_method_hook(self, fullname: str) -> Callable[[MethodContext], Type] | None:
        if fullname == ENTRY_DECORATOR_CALL:  # @cutile.entry(unsafe=True, ...)
            return lambda ctx: _kernel_type(ctx.arg_types, ctx.default_return_type, ctx)
        return None


def plugin(version: str) -> type[Plugin]:
    """mypy's entry point (the ``plugins`` setting names this module)."""
    return CutilePlugin


# -- annotations ---------------------------------------------------------------------
def _dim_problem(dim: Type) -> str | None:
    """Why ``dim`` (one item of a Tensor annotation's list) is not a dim, or None."""
    if isinstance(dim, RawExpressionType) and dim.base_type_name == "builtins.int":
        value = dim.literal_value
        if isinstance(value, int) and not isinstance(value, bool) and (value > 0 or value == -1):
            return None
        return f"got {value!r}"
    if isinstance(dim, UnboundType) and dim.original_str_expr is not None:  # a string: a constant's name
        if dim.original_str_expr.isidentifier():
            return None
        return f"got {dim.original_str_expr!r}"
    return f"got {dim}"


def _tensor_annotation(ctx: AnalyzeTypeContext) -> Type:
    annotation = ctx.type
    if not annotation.args:  # the class itself, as a host program annotates a tensor
        return _runtime_tensor(ctx)
    if len(annotation.args) != 2:
        ctx.api.fail(_ANNOTATION_GRAMMAR, ctx.context)
        return AnyType(TypeOfAny.from_error)
    dtype, dims = annotation.args
    for dim in dims.items if isinstance(dims, TypeList) else ():
        if isinstance(dim, UnboundType) and dim.original_str_expr is not None:  # (even if the rest is wrong)
            _withdraw_undefined_name(ctx, dim)
    if _dtype_name(ctx, dtype) is None:
        ctx.api.fail(f"Tensor[...]: the first item must be a dtype such as f32, got {dtype}", ctx.context)
        return AnyType(TypeOfAny.from_error)
    if not isinstance(dims, TypeList) or not dims.items:
        ctx.api.fail(f"Tensor[...]: dims must be a non-empty list, e.g. [-1, 'K'], got {dims}", ctx.context)
        return AnyType(TypeOfAny.from_error)
    for dim in dims.items:
        problem = _dim_problem(dim)
        if problem is not None:
            ctx.api.fail(f"Tensor[...]: each dim must be a positive int, -1 (dynamic) or a constant's name, {problem}",
                         ctx.context)
            return AnyType(TypeOfAny.from_error)
    return ctx.api.named_type(TENSOR_VIEW, [])


def _withdraw_undefined_name(ctx: AnalyzeTypeContext, dim: UnboundType) -> None:
    """Withdraws mypy's report that a named dim (``"B"``) is an undefined name.

    Before any plugin sees a function's annotations, mypy looks up every name in
    them in search of type variables, and a string there is a forward reference to
    one: ``"B"`` is reported undefined. In a Tensor annotation it names a
    compile-time constant, not a Python name, so the report (at the dim's line
    and column, with that message) is removed from the file's errors. This reads
    mypy's error store (``Errors.error_info_map``), which no plugin interface
    offers; were it to change, the reports stay and the examples' mypy run in CI fails.
    """
    errors = getattr(getattr(ctx.api, "api", None), "errors", None)
    infos = getattr(errors, "error_info_map", {}).get(getattr(errors, "file", None))
    if not infos:
        return
    message = f'Name "{dim.name}" is not defined'
    infos[:] = [info for info in infos
                if not (info.message == message and info.line == dim.line and info.column == dim.column)]


def _runtime_tensor(ctx: AnalyzeTypeContext) -> Type:
    """The class `cutile.Tensor`, where the program has loaded it (the compiler's
    ``Tensor`` alone does not)."""
    semantic_analyzer = getattr(ctx.api, "api", None)
    lookup = getattr(semantic_analyzer, "lookup_fully_qualified_or_none", None)
    if lookup is not None and lookup(RUNTIME_TENSOR_CLASS) is not None:
        return ctx.api.named_type(RUNTIME_TENSOR_CLASS, [])
    ctx.api.fail("Tensor needs [dtype, dims] in a kernel's annotation, e.g. Tensor[f32, [-1]]; a host annotation "
                 "uses cutile.Tensor", ctx.context)
    return AnyType(TypeOfAny.from_error)


def _dtype_name(ctx: AnalyzeTypeContext, item: Type) -> str | None:
    """The dtype ``item`` names (``f32``, ``ct.f32``), or None."""
    if not isinstance(item, UnboundType):
        return None
    analyzed = get_proper_type(ctx.api.analyze_type(item))
    if isinstance(analyzed, Instance) and analyzed.type.fullname == SCALAR_PARAM:
        return item.name.rpartition(".")[2]
    return None


def _mut_annotation(ctx: AnalyzeTypeContext) -> Type:
    args = ctx.type.args
    inner = get_proper_type(ctx.api.analyze_type(args[0])) if len(args) == 1 else None
    if isinstance(inner, AnyType) and inner.type_of_any == TypeOfAny.from_error:
        return inner  # (the Tensor annotation said what is wrong)
    if not (isinstance(inner, Instance) and inner.type.fullname == TENSOR_VIEW):
        ctx.api.fail("Mut[...] wraps a Tensor[...] annotation, e.g. Mut[Tensor[f32, ['B']]]", ctx.context)
        return AnyType(TypeOfAny.from_error)
    return ctx.api.named_type(MUT_TENSOR_VIEW, [])


def _constant_annotation(ctx: AnalyzeTypeContext) -> Type:
    args = ctx.type.args
    inner = get_proper_type(ctx.api.analyze_type(args[0])) if len(args) == 1 else None
    if isinstance(inner, Instance) and inner.type.fullname in ("builtins.int", "builtins.bool", "builtins.float"):
        return inner
    ctx.api.fail("Constant[...] takes int, bool or float", ctx.context)
    return AnyType(TypeOfAny.from_error)


def _scalar_annotation(ctx: AnalyzeTypeContext, name: str, kind: str) -> Type:
    if ctx.type.args:
        ctx.api.fail(f"the dtype {name} takes no [...]: a dtype annotation is a run-time scalar", ctx.context)
        return AnyType(TypeOfAny.from_error)
    return ctx.api.named_type(SCALAR_PARAM, [ctx.api.named_type(f"builtins.{kind}", [])])


# -- launches ------------------------------------------------------------------------
def _kernel_type(arg_types: list[list[Type]], default: Type, ctx: FunctionContext | MethodContext) -> Type:
    """``Kernel[P, R]`` for the decorated function: P its launch's parameters, R what
    ``.sync()`` returns."""
    kernel = get_proper_type(default)
    function = get_proper_type(arg_types[0][0]) if arg_types and arg_types[0] else None
    if not (isinstance(kernel, Instance) and isinstance(function, CallableType)):
        return default
    host_types: list[Type] = []
    kinds: list[ArgKind] = []
    results: list[Type] = []
    shape_names = _dim_names(function)
    for body_type, kind, name in zip(function.arg_types, function.arg_kinds, function.arg_names):
        host, role = _host_type(get_proper_type(body_type), ctx)
        host_types.append(host)
        if role == "tensor":
            results.append(host)
        # a constant that names a dim may be left out: the shapes fix it
        if role == "constant" and (shape_names is None or name in shape_names):
            kind = {ArgKind.ARG_POS: ArgKind.ARG_OPT, ArgKind.ARG_NAMED: ArgKind.ARG_NAMED_OPT}.get(kind, kind)
        kinds.append(kind)
    # Python's rule, which mypy's calls assume: no required positional parameter after an
    # optional one. From the first such parameter on, parameters are keyword-only here.
    optional_seen = keyword_only = False
    for i, kind in enumerate(kinds):
        keyword_only |= optional_seen and kind == ArgKind.ARG_POS
        if keyword_only and kind in (ArgKind.ARG_POS, ArgKind.ARG_OPT):
            kinds[i] = ArgKind.ARG_NAMED if kind == ArgKind.ARG_POS else ArgKind.ARG_NAMED_OPT
        optional_seen |= kind == ArgKind.ARG_OPT
    if len(results) == 1:
        result: Type = results[0]
    else:
        fallback = ctx.api.named_generic_type("builtins.tuple", [AnyType(TypeOfAny.special_form)])
        result = TupleType(results, fallback)
    parameters = Parameters(host_types, kinds, list(function.arg_names))
    return kernel.copy_modified(args=[parameters, result])


def _dim_names(function: CallableType) -> set[str] | None:
    """The named dims of the kernel's Tensor annotations (as written: the analyzed
    types keep none), or None where the annotations are not at hand."""
    definition = function.definition
    written = getattr(definition, "unanalyzed_type", None)
    if not isinstance(written, CallableType):
        return None
    names: set[str] = set()

    def visit(item: Type) -> None:
        if isinstance(item, UnboundType):
            if item.original_str_expr is not None and item.original_str_expr.isidentifier():
                names.add(item.original_str_expr)
            for arg in item.args:
                visit(arg)
        elif isinstance(item, TypeList):
            for member in item.items:
                visit(member)

    for annotation in written.arg_types:
        visit(annotation)
    return names


def _host_type(body_type: ProperType, ctx: FunctionContext | MethodContext) -> tuple[Type, str]:
    """What a launch takes for a parameter the kernel sees as ``body_type``, and
    its role: "tensor" (one of the results), "scalar", "constant" or "other"."""
    if isinstance(body_type, Instance):
        name = body_type.type.fullname
        if name == TENSOR_VIEW:
            return ctx.api.named_generic_type(RUNTIME_TENSOR, []), "tensor"
        if name == MUT_TENSOR_VIEW:
            return ctx.api.named_generic_type(RUNTIME_PARTITION, []), "tensor"
        if name == SCALAR_PARAM and body_type.args:
            kind = get_proper_type(body_type.args[0])
            if isinstance(kind, Instance) and kind.type.name in HOST_SCALARS:
                return ctx.api.named_generic_type(HOST_SCALARS[kind.type.name], []), "scalar"
        if name in ("builtins.int", "builtins.bool", "builtins.float"):
            return body_type, "constant"
    return body_type, "other"
