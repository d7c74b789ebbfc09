"""The kernel language: what ``cutile.core`` re-exports for kernel authors.

Annotations (``Tensor``, ``Mut``, ``Constant``), dtypes, and the DSL functions
that kernels call; `TensorView`, `MutTensorView`, `PartitionView` and
`ScalarParam` are what a kernel's parameters are to a type checker (cutile's
mypy plugin reads the annotations as them). Calling a DSL function outside a kernel raises
`HostCallError`; on the host each shows its parameters (`inspect.signature`) and
documentation. The DSL functions exported are those of the registry,
`_builtins.DSL_FUNCTIONS`, loaded on first use: the first DSL function asked for
(``language.load``, ``from ... import load``, ``dir()``, ``__all__``) imports the
registry (and the op definitions it is declared with), so that importing the language (and cutile)
does not. Static tools see them through the imports and bindings under
``TYPE_CHECKING`` below (a test checks that they and the registry agree): those of
the element-wise ops bound from the ops' declarations, one line each.
"""

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from cutile_compiler._device_function import DeviceFunction as DeviceFunction
from cutile_compiler._errors import HostCallError as HostCallError
from cutile_compiler._dtypes import (
    DType as DType,
    bf16 as bf16,
    bool_ as bool_,
    f8e4m3fn as f8e4m3fn,
    f8e5m2 as f8e5m2,
    f8e8m0fnu as f8e8m0fnu,
    f4e2m1fn as f4e2m1fn,
    f16 as f16,
    f32 as f32,
    f64 as f64,
    i8 as i8,
    i16 as i16,
    i32 as i32,
    i64 as i64,
    tf32 as tf32,
    u8 as u8,
    u16 as u16,
    u32 as u32,
    u64 as u64,
)
from cutile_compiler._dtypes import ALL_DTYPES, TILE_ONLY_DTYPES
from cutile_compiler._kernel_types import (
    MutTensorView as MutTensorView,
    PartitionView as PartitionView,
    ScalarParam as ScalarParam,
    TensorView as TensorView,
)
from cutile_compiler._signature import Constant as Constant, Mut as Mut, Tensor as Tensor

if TYPE_CHECKING:
    from cutile_compiler._builtins import (
        arange as arange,
        argmax as argmax,
        argmin as argmin,
        assume as assume,
        astype as astype,
        atomic_add as atomic_add,
        atomic_and as atomic_and,
        atomic_cas as atomic_cas,
        atomic_max as atomic_max,
        atomic_min as atomic_min,
        atomic_or as atomic_or,
        atomic_xchg as atomic_xchg,
        atomic_xor as atomic_xor,
        bid as bid,
        bitcast as bitcast,
        broadcast_to as broadcast_to,
        cat as cat,
        cdiv as cdiv,
        ceil_div as ceil_div,
        clamp as clamp,
        cumprod as cumprod,
        cumsum as cumsum,
        expand_dims as expand_dims,
        extract as extract,
        flip as flip,
        full as full,
        gather as gather,
        gelu as gelu,
        get_num_tile_blocks as get_num_tile_blocks,
        get_tile_block_id as get_tile_block_id,
        grid_dependency_control_launch_dependents as grid_dependency_control_launch_dependents,
        grid_dependency_control_wait as grid_dependency_control_wait,
        insert as insert,
        load as load,
        load_tile_like as load_tile_like,
        matmul as matmul,
        max_,
        min_,
        mma as mma,
        mma_scaled as mma_scaled,
        num_blocks as num_blocks,
        num_tiles as num_tiles,
        ones as ones,
        pack_to_bytes as pack_to_bytes,
        permute as permute,
        pow_,
        printf as printf,
        prod as prod,
        reduce as reduce,
        reshape as reshape,
        scan as scan,
        scatter as scatter,
        static_assert as static_assert,
        static_range as static_range,
        sum_,
        transpose as transpose,
        unpack_from_bytes as unpack_from_bytes,
        where as where,
        zeros as zeros,
    )
    from cutile_compiler._builtins.elementwise import binary as _binary, function_of as _function_of, ternary as _ternary
    from cutile_compiler._builtins.elementwise import unary as _unary
    from cutile_compiler._opdefs.elementwise import ElementwiseOp as _Op

    # The element-wise ops' DSL functions, made from the ops' declarations (`ElementwiseOp`),
    # bound with the parameters of their arity for static tools.
    exp = _function_of(_unary, _Op.EXP)
    exp2 = _function_of(_unary, _Op.EXP2)
    log = _function_of(_unary, _Op.LOG)
    log2 = _function_of(_unary, _Op.LOG2)
    sqrt = _function_of(_unary, _Op.SQRT)
    rsqrt = _function_of(_unary, _Op.RSQRT)
    sin = _function_of(_unary, _Op.SIN)
    cos = _function_of(_unary, _Op.COS)
    tan = _function_of(_unary, _Op.TAN)
    sinh = _function_of(_unary, _Op.SINH)
    cosh = _function_of(_unary, _Op.COSH)
    tanh = _function_of(_unary, _Op.TANH)
    floor = _function_of(_unary, _Op.FLOOR)
    ceil = _function_of(_unary, _Op.CEIL)
    atan2 = _function_of(_binary, _Op.ATAN2)
    minimum = _function_of(_binary, _Op.MINIMUM)
    maximum = _function_of(_binary, _Op.MAXIMUM)
    add = _function_of(_binary, _Op.ADD)
    sub = _function_of(_binary, _Op.SUB)
    mul = _function_of(_binary, _Op.MUL)
    div = _function_of(_binary, _Op.DIV)
    fma = _function_of(_ternary, _Op.FMA)
    sigmoid = _function_of(_unary, _Op.SIGMOID)
    silu = _function_of(_unary, _Op.SILU)
    erf = _function_of(_unary, _Op.ERF)
    log1p = _function_of(_unary, _Op.LOG1P)
    expm1 = _function_of(_unary, _Op.EXPM1)
    isnan = _function_of(_unary, _Op.ISNAN)
    isinf = _function_of(_unary, _Op.ISINF)

    sum = sum_  # noqa: A001 - the DSL's names shadow Python's inside kernels on purpose
    max = max_  # noqa: A001
    min = min_  # noqa: A001
    pow = pow_  # noqa: A001


def _registry() -> Mapping[str, Any]:
    """The DSL functions by name: importing `_builtins` declares them all."""
    from cutile_compiler._builtins import DSL_FUNCTIONS

    return DSL_FUNCTIONS


def _own_functions() -> frozenset[str]:
    from cutile_compiler._builtins import OWN_FUNCTIONS

    return OWN_FUNCTIONS


#: what the module exports besides the DSL functions (the registry's, on first use)
_DECLARED = [
    "Constant", "DType", "DeviceFunction", "HostCallError", "Mut", "Tensor",
    "TensorView", "MutTensorView", "PartitionView", "ScalarParam",  # what type checkers see in kernels
    *(d.name if d.name != "bool" else "bool_" for d in (*ALL_DTYPES, *TILE_ONLY_DTYPES)),
]


if not TYPE_CHECKING:  # (static tools read the exports off the imports and bindings above)
    def __getattr__(name: str) -> Any:
        # A DSL function, or ``__all__``, looked up in the registry (loaded by the first
        # such lookup); private and special names that tools probe for (``__path__``,
        # ``__wrapped__``...) never load it. The compiler's own functions are then
        # bound here, as the imports bind them for static tools: later reads are plain
        # lookups, and a warm start finds a kernel's global `exp` as this module's. A
        # family declared for a while (`declared`) is reachable exactly while registered.
        if name == "__all__":
            return [*_DECLARED, *_registry()]
        if name.startswith("_") or name not in _registry():
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = _registry()[name]
        if name in _own_functions():
            globals()[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*globals(), *_DECLARED, *_registry()})
