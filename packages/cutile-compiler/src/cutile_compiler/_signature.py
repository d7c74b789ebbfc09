"""Kernel signatures: what the annotations of a kernel's parameters say, and how
a call's arguments specialize it.

    def gemm(z: Mut[Tensor[f32, ["BM", "BN"]]], x: Tensor[f16, [-1, "K"]], ...,
             BK: Constant[int], K: Constant[int])

- ``Tensor[dtype, dims]`` is a read-only tensor; ``Mut[Tensor[...]]`` one the
  kernel writes, passed partitioned: its dims are the shape of the tile each
  block owns. A dim is an int (static), -1 (known at run time only) or a name.
- A name is a compile-time constant, inferred from the shapes it appears in or
  passed by keyword; a name used in the body is declared ``Constant[int]``.
- A dtype annotation (``x: f32``) is a run-time scalar.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cutile_compiler._dtypes import DType
from cutile_compiler._errors import ArgumentError, CutileError
from cutile_compiler._types import is_power_of_two

Dim = int | str  # an int (static; -1 dynamic) or a constant's name
#: How a `TensorSpec.map_shape` marks an axis each schedule item owns whole (cutile.OWNED on the host).
OWNED_AXIS = 0


class SignatureError(CutileError, TypeError):
    """A kernel's annotations are malformed (raised when the kernel is defined)."""


class SpecializationError(CutileError, TypeError):
    """A call's arguments do not fit the kernel's signature (names the parameter)."""


@dataclass(frozen=True)
class TensorAnnotation:
    """``Tensor[dtype, dims]`` (``mutable`` once wrapped in ``Mut[...]``)."""

    dtype: DType
    dims: tuple[Dim, ...]
    mutable: bool = False

    def __repr__(self) -> str:
        inner = f"Tensor[{self.dtype}, {list(self.dims)}]"
        return f"Mut[{inner}]" if self.mutable else inner


@dataclass(frozen=True)
class ConstantAnnotation:
    """``Constant[int]`` (or bool/float): a compile-time constant parameter."""

    python_type: type

    def __repr__(self) -> str:
        return f"Constant[{self.python_type.__name__}]"


class _TensorAnnotationFactory:
    """``Tensor[dtype, dims]`` inside annotations."""

    def __getitem__(self, item: tuple[Any, Any]) -> TensorAnnotation:
        return make_tensor_annotation(item)

    def __repr__(self) -> str:
        return "Tensor"


def make_tensor_annotation(item: Any) -> TensorAnnotation:
    """The annotation ``Tensor[dtype, dims]`` makes, from ``(dtype, dims)``; raises
    `SignatureError` naming the mistake."""
    if not (isinstance(item, tuple) and len(item) == 2):
        raise SignatureError("Tensor[...] takes a dtype and a list of dims, e.g. Tensor[f32, [-1, 'K']]")
    dtype, dims = item
    if not isinstance(dtype, DType):
        raise SignatureError(f"Tensor[...]: the first item must be a dtype such as f32, got {dtype!r}")
    if dtype.bits < 8 and not dtype.is_bool:
        raise SignatureError(f"Tensor[{dtype}, ...]: {dtype} values pack two to a byte, which tensors do not hold; "
                             f"pass the bytes as a Tensor[u8, ...] and read them with unpack_from_bytes(t, {dtype})")
    if not isinstance(dims, (list, tuple)) or not dims:
        raise SignatureError(f"Tensor[...]: dims must be a non-empty list, got {dims!r}")
    for dim in dims:
        if isinstance(dim, bool) or not (isinstance(dim, str) and dim.isidentifier() or isinstance(dim, int) and (dim > 0 or dim == -1)):
            raise SignatureError(
                f"Tensor[...]: each dim must be a positive int, -1 (dynamic) or a constant's name, got {dim!r}"
            )
    return TensorAnnotation(dtype, tuple(dims))


class _MutFactory:
    def __getitem__(self, item: Any) -> TensorAnnotation:
        if not isinstance(item, TensorAnnotation):
            raise SignatureError(f"Mut[...] wraps a Tensor[...] annotation, got {item!r}")
        return TensorAnnotation(item.dtype, item.dims, True)

    def __repr__(self) -> str:
        return "Mut"


class _ConstantFactory:
    def __getitem__(self, item: Any) -> ConstantAnnotation:
        if item not in (int, bool, float):
            raise SignatureError(f"Constant[...] takes int, bool or float, got {item!r}")
        return ConstantAnnotation(item)

    def __repr__(self) -> str:
        return "Constant"


Tensor = _TensorAnnotationFactory()
Mut = _MutFactory()
Constant = _ConstantFactory()

ParamAnnotation = TensorAnnotation | ConstantAnnotation | DType


@dataclass(frozen=True)
class Parameter:
    name: str
    annotation: ParamAnnotation
    default: Any = inspect.Parameter.empty

    @property
    def is_constant(self) -> bool:
        return isinstance(self.annotation, ConstantAnnotation)


@dataclass(frozen=True)
class KernelSignature:
    """A kernel's parameters as its annotations declare them (`parse_signature`)."""

    parameters: tuple[Parameter, ...]

    @property
    def mutable(self) -> tuple[Parameter, ...]:
        return tuple(p for p in self.parameters if isinstance(p.annotation, TensorAnnotation) and p.annotation.mutable)


def parse_signature(function: Any) -> KernelSignature:
    """Reads a kernel's annotations (evaluated in the function's globals)."""
    name = getattr(function, "__qualname__", repr(function))
    closure = inspect.getclosurevars(function).nonlocals if hasattr(function, "__code__") else {}
    try:
        # String annotations (from __future__ import annotations) may name closure
        # variables of a kernel built inside a function.
        hints = inspect.get_annotations(function, eval_str=True, locals=dict(closure))
    except Exception as exc:
        raise SignatureError(f"kernel {name}: cannot evaluate its annotations ({exc})") from None
    parameters: list[Parameter] = []
    for p in inspect.signature(function).parameters.values():
        if p.kind not in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
            raise SignatureError(f"kernel {name}: parameter '{p.name}' must be a plain parameter (no *args/**kwargs)")
        annotation = hints.get(p.name)
        if annotation is None:
            raise SignatureError(
                f"kernel {name}: parameter '{p.name}' needs an annotation: Tensor[...], Mut[Tensor[...]], "
                "Constant[int] or a dtype"
            )
        if annotation in (int, bool, float):
            annotation = ConstantAnnotation(annotation)
        if not isinstance(annotation, (TensorAnnotation, ConstantAnnotation, DType)):
            raise SignatureError(f"kernel {name}: parameter '{p.name}' has an unsupported annotation {annotation!r}")
        parameters.append(Parameter(p.name, annotation, p.default))
    signature = KernelSignature(tuple(parameters))
    mutable = signature.mutable
    ranks = {len(p.annotation.dims) for p in mutable if isinstance(p.annotation, TensorAnnotation)}
    if len(ranks) > 1:
        raise SignatureError(f"kernel {name}: the Mut tensors must have tiles of one rank (the grid's), got ranks {sorted(ranks)}")
    if ranks and max(ranks) > 3:
        raise SignatureError(f"kernel {name}: a Mut tensor's tile may have at most 3 dims (one per grid axis)")
    return signature


#: Divisibility facts are capped at this power of two (bigger ones add no speed and
#: would multiply specializations).
MAX_DIVISIBILITY = 16


def divisibility(value: int, cap: int = MAX_DIVISIBILITY) -> int:
    """The largest power of two (at most ``cap``) dividing ``value``; ``cap`` for 0."""
    if value == 0:
        return cap
    return min(cap, value & -value)


@dataclass(frozen=True)
class TensorSpec:
    """What a compile needs to know of a tensor argument; part of the compile key.

    The runtime fills, besides dtype, shape and tile shape, facts that let
    tileiras vectorize (all defaults are "nothing known", always correct):

    - ``base_divisibility``: the largest power of two, capped at
      `MAX_DIVISIBILITY`, dividing the address of element 0 in bytes
      (``divisibility(ptr)``);
    - ``shape_divisibility``: per dimension, ``divisibility(shape[i])``
      (empty: unknown);
    - ``stride_divisibility``: per dimension, ``divisibility(strides[i])``,
      strides in elements (empty: unknown);
    - ``contiguous``: the tensor is dense row-major (strides are the suffix
      products of the shape);
    - ``unit_inner_stride``: the innermost stride is 1 (or the last dim has one
      element). The kernel ABI passes every stride but such an innermost one.

    A mapped partition (``t.partition(tile).map(map_shape, blocks=n)``) also has
    ``map_shape``: per axis its group size, or `OWNED_AXIS` (0) for an axis each
    schedule item owns whole. The block count is not part of it (a run-time value).
    """

    dtype: DType
    shape: tuple[int, ...]
    tile_shape: tuple[int, ...] | None = None  # for a partitioned (Mut) argument
    base_divisibility: int = 1
    shape_divisibility: tuple[int, ...] = ()
    stride_divisibility: tuple[int, ...] = ()
    contiguous: bool = False
    unit_inner_stride: bool = True
    map_shape: tuple[int, ...] | None = None  # for a mapped partition

    def __post_init__(self) -> None:
        if self.map_shape is not None and (self.tile_shape is None or len(self.map_shape) != len(self.tile_shape)
                                           or any(isinstance(m, bool) or not isinstance(m, int) or m < 0
                                                  for m in self.map_shape)):
            raise ArgumentError(f"TensorSpec: a map shape has one int >= 0 per tile dim (0: owned), got "
                                f"{self.map_shape!r} for tile shape {self.tile_shape!r}")
        facts = [self.base_divisibility, *self.shape_divisibility, *self.stride_divisibility]
        for fact in facts:
            if isinstance(fact, bool) or not isinstance(fact, int) or not is_power_of_two(fact) \
                    or fact > MAX_DIVISIBILITY:
                raise ArgumentError(f"TensorSpec: divisibility facts are powers of two up to {MAX_DIVISIBILITY}, "
                                    f"got {fact!r}")
        for name, facts_of in (("shape_divisibility", self.shape_divisibility),
                               ("stride_divisibility", self.stride_divisibility)):
            if facts_of and len(facts_of) != len(self.shape):
                raise ArgumentError(f"TensorSpec: {name} has {len(facts_of)} entries for a rank-{len(self.shape)} tensor")

    @staticmethod
    def describe(dtype: DType, shape: Sequence[int], strides: Sequence[int], address: int,
                 tile_shape: tuple[int, ...] | None = None, map_shape: tuple[int, ...] | None = None) -> TensorSpec:
        """The spec of a tensor with these shape, strides (in elements) and base
        address (in bytes), with every fact filled: what the runtime should call
        (``map_shape`` for a mapped partition)."""
        shape = tuple(shape)
        dense = all(strides[i] == _suffix_product(shape, i + 1) for i in range(len(shape)) if shape[i] != 1)
        unit_inner = not shape or shape[-1] <= 1 or strides[-1] == 1
        return TensorSpec(dtype, shape, tile_shape, divisibility(address),
                          tuple(divisibility(d) for d in shape), tuple(divisibility(s) for s in strides), dense,
                          unit_inner, map_shape)

    def dim_divisibility(self, axis: int) -> int:
        return self.shape_divisibility[axis] if self.shape_divisibility else 1

    def stride_fact(self, axis: int) -> int:
        return self.stride_divisibility[axis] if self.stride_divisibility else 1


def _suffix_product(shape: tuple[int, ...], start: int) -> int:
    product = 1
    for extent in shape[start:]:
        product *= extent
    return product


def constant_key(value: Any) -> Any:
    """A constant as caches compare it: floats by their bits (0.0 and -0.0 compile
    differently, and a NaN must equal itself), everything else by value."""
    return ("float", value.hex()) if type(value) is float else value


@dataclass(frozen=True)
class Specialization:
    """A kernel bound to one set of constants, dtypes and static dims: the unit of
    compilation and of caching."""

    constants: tuple[tuple[str, Any], ...] = field(compare=False)
    tensors: tuple[tuple[str, TensorSpec], ...]
    scalars: tuple[tuple[str, DType], ...]
    #: what equality and hashing see of ``constants`` (see `constant_key`)
    constants_key: tuple[tuple[str, Any], ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "constants_key", tuple((n, constant_key(v)) for n, v in self.constants))


def specialize(
    signature: KernelSignature,
    kernel_name: str,
    args: Mapping[str, Any],
) -> Specialization:
    """Binds arguments to the signature: tensors as `TensorSpec`, constants as
    Python values, scalars as numbers. Infers named constants from shapes and
    checks every dim; errors name the parameter and say what was expected."""
    constants: dict[str, Any] = {}
    sources: dict[str, str] = {}

    def bind(name: str, value: Any, where: str) -> None:
        if name in constants and constants[name] != value:
            raise SpecializationError(
                f"{kernel_name}: constant '{name}' is {constants[name]} from {sources[name]} but {value} from {where}"
            )
        constants.setdefault(name, value)
        sources.setdefault(name, where)

    for p in signature.parameters:
        if p.is_constant and p.name in args:
            value = args[p.name]
            expected = p.annotation.python_type  # type: ignore[union-attr]
            if expected is float and isinstance(value, int) and not isinstance(value, bool):
                value = float(value)
            if type(value) is not expected:
                raise SpecializationError(
                    f"{kernel_name}: parameter '{p.name}' is Constant[{expected.__name__}], got {type(value).__name__} {value!r}"
                )
            bind(p.name, value, f"argument '{p.name}'")

    tensors: dict[str, TensorSpec] = {}
    scalars: dict[str, DType] = {}
    for p in signature.parameters:
        annotation = p.annotation
        if isinstance(annotation, TensorAnnotation):
            if p.name not in args:
                raise SpecializationError(f"{kernel_name}: missing tensor argument '{p.name}'")
            spec = args[p.name]
            if not isinstance(spec, TensorSpec):
                raise SpecializationError(f"{kernel_name}: parameter '{p.name}' expects a tensor, got {type(spec).__name__}")
            if spec.dtype is not annotation.dtype:
                raise SpecializationError(f"{kernel_name}: parameter '{p.name}' expects dtype {annotation.dtype}, got {spec.dtype}")
            described = spec.tile_shape if annotation.mutable else spec.shape
            what = "tile shape" if annotation.mutable else "shape"
            if annotation.mutable and spec.tile_shape is None:
                raise SpecializationError(
                    f"{kernel_name}: parameter '{p.name}' is Mut[...]: pass it partitioned, e.g. "
                    f"t.partition({[d if isinstance(d, int) and d > 0 else 128 for d in annotation.dims]})"
                )
            if not annotation.mutable and spec.tile_shape is not None:
                raise SpecializationError(
                    f"{kernel_name}: parameter '{p.name}' is read-only: pass the tensor itself, not a partition of it "
                    "(unpartition() gives it back)"
                )
            assert described is not None
            if len(described) != len(annotation.dims):
                raise SpecializationError(
                    f"{kernel_name}: parameter '{p.name}' expects rank {len(annotation.dims)} ({what} {list(annotation.dims)}), "
                    f"got {what} {list(described)}"
                )
            for axis, (dim, actual) in enumerate(zip(annotation.dims, described)):
                if isinstance(dim, str):
                    bind(dim, actual, f"{what} of '{p.name}' (axis {axis})")
                elif dim != -1 and dim != actual:
                    raise SpecializationError(
                        f"{kernel_name}: parameter '{p.name}' expects {what} {list(annotation.dims)}, got {list(described)}"
                    )
            tensors[p.name] = spec
        elif isinstance(annotation, DType):
            if p.name not in args:
                raise SpecializationError(f"{kernel_name}: missing scalar argument '{p.name}'")
            scalars[p.name] = annotation

    for p in signature.parameters:
        if p.is_constant and p.name not in constants:
            if p.default is not inspect.Parameter.empty:
                constants[p.name] = p.default
            else:
                raise SpecializationError(
                    f"{kernel_name}: constant '{p.name}' is not fixed by any shape; pass it by keyword ({p.name}=...)"
                )
    # Names only used in shapes (not declared Constant) still constrain shapes and
    # key the specialization; the body can only see declared ones.
    return Specialization(
        constants=tuple(sorted(constants.items())),
        tensors=tuple(tensors.items()),
        scalars=tuple(scalars.items()),
    )
