"""The DSL functions: every public function a kernel calls is a `Builtin`, declared
once in the module of its family (as the ops are in `_opdefs`): `grid`, `memory`,
`shape`, `elementwise`, `reduction`, `matmul`, `pointer` (gather, scatter, atomics),
`debug`, `control` (compile time). `_base` holds what they share: the registry
(`DSL_FUNCTIONS`), the check of a call against a function's signature and the
argument helpers. `methods` gives values their attributes and methods, and `calls`
emits a kernel's calls. Calling a DSL function on the host raises (it only means
something inside a kernel); inside a kernel the front end calls its implementation
with itself, the call's AST node and the evaluated arguments. The typing of each
primitive lives with its op in `_opdefs`; functions here normalize arguments
(numbers to tiles, dtype promotion, broadcasting, axis handling) and create the ops
by their keys (``fe.op(MemoryOp.TILE_LOAD, ...)``). The functions of the element-wise
ops are made from the ops' declarations (`elementwise.define_functions`).

Importing this package imports every family, which fills the registry (in the order
of the imports below: the order of `DSL_FUNCTIONS` and of the language's `__all__`);
`OWN_FUNCTIONS` are the names it then holds, the compiler's own (a family declared
later for a while, `elementwise.declared`, is not among them).
"""

from cutile_compiler._builtins._base import (
    DSL_FUNCTIONS as DSL_FUNCTIONS,
    Builtin as Builtin,
    DeviceFunction as DeviceFunction,
    HostCallError as HostCallError,
)
from cutile_compiler._builtins.grid import (
    bid as bid,
    get_num_tile_blocks as get_num_tile_blocks,
    get_tile_block_id as get_tile_block_id,
    grid_dependency_control_launch_dependents as grid_dependency_control_launch_dependents,
    grid_dependency_control_wait as grid_dependency_control_wait,
    num_blocks as num_blocks,
)
from cutile_compiler._builtins.memory import load as load, load_tile_like as load_tile_like, num_tiles as num_tiles
from cutile_compiler._builtins.shape import (
    arange as arange,
    broadcast_to as broadcast_to,
    cat as cat,
    expand_dims as expand_dims,
    extract as extract,
    flip as flip,
    insert as insert,
    pack_to_bytes as pack_to_bytes,
    unpack_from_bytes as unpack_from_bytes,
    full as full,
    ones as ones,
    permute as permute,
    reshape as reshape,
    transpose as transpose,
    zeros as zeros,
)
from cutile_compiler._builtins.elementwise import (
    astype as astype,
    bitcast as bitcast,
    cdiv as cdiv,
    ceil_div as ceil_div,
    clamp as clamp,
    gelu as gelu,
    pow_ as pow_,
    where as where,
)
from cutile_compiler._builtins.reduction import (
    argmax as argmax,
    argmin as argmin,
    cumprod as cumprod,
    cumsum as cumsum,
    max_ as max_,
    min_ as min_,
    prod as prod,
    reduce as reduce,
    scan as scan,
    sum_ as sum_,
)
from cutile_compiler._builtins.matmul import matmul as matmul, mma as mma, mma_scaled as mma_scaled
from cutile_compiler._builtins.pointer import (
    atomic_add as atomic_add,
    atomic_and as atomic_and,
    atomic_cas as atomic_cas,
    atomic_max as atomic_max,
    atomic_min as atomic_min,
    atomic_or as atomic_or,
    atomic_xchg as atomic_xchg,
    atomic_xor as atomic_xor,
    gather as gather,
    scatter as scatter,
)
from cutile_compiler._builtins.debug import assume as assume, printf as printf
from cutile_compiler._builtins.control import (
    static_assert as static_assert,
    static_items as static_items,
    static_range as static_range,
)
from cutile_compiler._builtins.methods import value_attribute as value_attribute
from cutile_compiler._builtins.calls import call_object as call_object

#: the compiler's own DSL functions, by name (the language keeps these bound once read)
OWN_FUNCTIONS: frozenset[str] = frozenset(DSL_FUNCTIONS)
