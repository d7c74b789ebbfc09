"""The kernel language: what ``cutile.core`` re-exports for kernel authors.

Annotations (``Tensor``, ``Mut``, ``Constant``), dtypes, and the DSL functions
that kernels call; `TensorView`, `MutTensorView`, `PartitionView` and
`ScalarParam` are what a kernel's parameters are to a type checker (cutile's
mypy plugin reads the annotations as them). Calling a DSL function outside a kernel raises
`HostCallError`; on the host each shows its parameters (`inspect.signature`) and
documentation. The DSL functions exported are those of the registry,
`_builtins.DSL_FUNCTIONS`; they are imported by name below so that static tools
see them (a test checks the two agree).
"""

from typing import TYPE_CHECKING

from cutile_compiler._builtins import (
    DSL_FUNCTIONS,
    DeviceFunction as DeviceFunction,
    HostCallError as HostCallError,
    add as add,
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
    atan2 as atan2,
    bid as bid,
    bitcast as bitcast,
    broadcast_to as broadcast_to,
    cat as cat,
    ceil as ceil,
    cdiv as cdiv,
    ceil_div as ceil_div,
    cos as cos,
    cosh as cosh,
    cumprod as cumprod,
    cumsum as cumsum,
    div as div,
    exp as exp,
    exp2 as exp2,
    extract as extract,
    floor as floor,
    fma as fma,
    full as full,
    gather as gather,
    get_num_tile_blocks as get_num_tile_blocks,
    get_tile_block_id as get_tile_block_id,
    load as load,
    load_tile_like as load_tile_like,
    log as log,
    log2 as log2,
    matmul as matmul,
    max_,
    maximum as maximum,
    min_,
    minimum as minimum,
    mma as mma,
    mul as mul,
    num_blocks as num_blocks,
    num_tiles as num_tiles,
    ones as ones,
    permute as permute,
    pow_,
    printf as printf,
    prod as prod,
    reduce as reduce,
    reshape as reshape,
    rsqrt as rsqrt,
    scan as scan,
    scatter as scatter,
    sin as sin,
    sinh as sinh,
    sqrt as sqrt,
    static_assert as static_assert,
    static_range as static_range,
    sub as sub,
    sum_,
    tan as tan,
    tanh as tanh,
    transpose as transpose,
    where as where,
    zeros as zeros,
)
from cutile_compiler._dtypes import (
    DType as DType,
    bf16 as bf16,
    bool_ as bool_,
    f8e4m3fn as f8e4m3fn,
    f8e5m2 as f8e5m2,
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
from cutile_compiler._dtypes import ALL_DTYPES
from cutile_compiler._kernel_types import (
    MutTensorView as MutTensorView,
    PartitionView as PartitionView,
    ScalarParam as ScalarParam,
    TensorView as TensorView,
)
from cutile_compiler._signature import Constant as Constant, Mut as Mut, Tensor as Tensor

sum = sum_  # noqa: A001 - the DSL's names shadow Python's inside kernels on purpose
max = max_  # noqa: A001
min = min_  # noqa: A001
pow = pow_  # noqa: A001

if not TYPE_CHECKING:  # (static tools read the exports off the ``as`` imports above)
    __all__ = [
        "Constant", "DType", "DeviceFunction", "HostCallError", "Mut", "Tensor",
        "TensorView", "MutTensorView", "PartitionView", "ScalarParam",  # what type checkers see in kernels
        *(d.name if d.name != "bool" else "bool_" for d in ALL_DTYPES),
        *DSL_FUNCTIONS,
    ]
