"""The kernel language: what ``cutile.core`` re-exports for kernel authors.

Annotations (``Tensor``, ``Mut``, ``Constant``), dtypes, and the DSL functions
that kernels call. Calling a DSL function outside a kernel raises
`HostCallError`.
"""

from cutile_compiler._builtins import (
    DeviceFunction,
    HostCallError,
    arange,
    argmax,
    argmin,
    astype,
    atan2,
    bid,
    bitcast,
    broadcast_to,
    cat,
    ceil,
    ceil_div,
    cos,
    cosh,
    cumprod,
    cumsum,
    exp,
    exp2,
    extract,
    floor,
    fma,
    full,
    get_num_tile_blocks,
    get_tile_block_id,
    load,
    load_tile_like,
    log,
    log2,
    matmul,
    max_,
    maximum,
    min_,
    minimum,
    mma,
    num_blocks,
    num_tiles,
    ones,
    permute,
    pow_,
    prod,
    reshape,
    rsqrt,
    sin,
    sinh,
    sqrt,
    static_assert,
    static_range,
    sum_,
    tan,
    tanh,
    transpose,
    where,
    zeros,
)
from cutile_compiler._dtypes import (
    DType,
    bf16,
    bool_,
    f8e4m3fn,
    f8e5m2,
    f16,
    f32,
    f64,
    i8,
    i16,
    i32,
    i64,
    tf32,
    u8,
    u16,
    u32,
    u64,
)
from cutile_compiler._signature import Constant, Mut, Tensor

sum = sum_  # noqa: A001 - the DSL's names shadow Python's inside kernels on purpose
max = max_  # noqa: A001
min = min_  # noqa: A001
pow = pow_  # noqa: A001
cdiv = ceil_div

__all__ = [
    "Constant", "DType", "DeviceFunction", "HostCallError", "Mut", "Tensor",
    "arange", "argmax", "argmin", "astype", "atan2", "bf16", "bid", "bitcast", "bool_", "broadcast_to",
    "cat", "cdiv", "ceil", "ceil_div", "cos", "cosh", "cumprod", "cumsum", "exp", "exp2", "extract",
    "f16", "f32", "f64", "f8e4m3fn", "f8e5m2", "floor", "fma", "full", "get_num_tile_blocks",
    "get_tile_block_id", "i16", "i32", "i64", "i8", "load", "load_tile_like", "log", "log2", "matmul",
    "max", "maximum", "min", "minimum", "mma", "num_blocks", "num_tiles", "ones", "permute", "pow",
    "prod", "reshape", "rsqrt", "sin", "sinh", "sqrt", "static_assert", "static_range", "sum", "tan",
    "tanh", "tf32", "transpose", "u16", "u32", "u64", "u8", "where", "zeros",
]
