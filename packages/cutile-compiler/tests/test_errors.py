"""User mistakes: each is refused with a message that says what was expected, at
the offending line of the kernel, with the source line and a caret.

Each kernel marks its faulty line with a ``# <- name`` comment; the test checks
the error's line is that one.
"""

import inspect
import re
from typing import Any

import pytest

from cutile_compiler import _dtypes as dt
from cutile_compiler._errors import TileError, TileSyntaxError, TileTypeError
from cutile_compiler._frontend import build_kernel_ir
from cutile_compiler._signature import TensorSpec, parse_signature, specialize
from cutile_compiler.language import *  # noqa: F403
from cutile_compiler.language import Constant, Mut, Tensor, f16, f32, i8, i32

V = TensorSpec(dt.f32, (256,))
P = TensorSpec(dt.f32, (256,), (64,))
M = TensorSpec(dt.f32, (64, 64), (32, 32))


def compile_kernel(function: Any, **arguments: Any) -> None:
    signature = parse_signature(function)
    build_kernel_ir(function, signature, specialize(signature, function.__name__, arguments),
                    unsafe=getattr(function, "unsafe", False))


def unsafe(function: Any) -> Any:
    """Marks a test kernel as @cutile.entry(unsafe=True)."""
    function.unsafe = True
    return function


def helper(*xs):  # a Python function taking *args: not inlinable
    return xs[0]


@DeviceFunction
def recursive(x):
    return recursive(x)  # <- recursion


@DeviceFunction
def pick(t, n):
    if n > 0:
        return t  # <- return_in_runtime_if
    else:
        return t * 2.0


def k_return_in_runtime_if(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]], n: i32):
    z.store(pick(load_tile_like(x, z), n))


def k_store_readonly(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    x.store(load_tile_like(x, z))  # <- store_readonly


def k_partition_mut(z: Mut[Tensor[f32, ["B"]]]):
    p = z.partition([32])  # <- partition_mut


def k_partition_store(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    p = x.partition([64])
    p.store(0, load_tile_like(x, z))  # <- partition_store


def k_unknown_name(z: Mut[Tensor[f32, ["B"]]]):
    z.store(undefined_thing)  # <- unknown_name


def k_mixed_dtypes(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]], y: Tensor[i32, [-1]]):
    z.store(load_tile_like(x, z) + load_tile_like(y, z))  # <- mixed_dtypes


def k_shapes(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    a = load_tile_like(x, z)
    b = zeros((32,), f32)
    z.store(a + b)  # <- shapes


def k_not_power_of_two(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    p = x.partition([48])  # <- not_power_of_two


def k_try(z: Mut[Tensor[f32, ["B"]]]):
    try:  # <- try
        pass
    except Exception:
        pass


def k_with(z: Mut[Tensor[f32, ["B"]]]):
    with open("f"):  # <- with
        pass


def k_comprehension(z: Mut[Tensor[f32, ["B"]]]):
    values = [i for i in range(3)]  # <- comprehension


def k_plain_function(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    z.store(helper(load_tile_like(x, z)))  # <- plain_function


def k_recursion(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    z.store(recursive(load_tile_like(x, z)))


def k_return_value(z: Mut[Tensor[f32, ["B"]]]):
    return 1  # <- return_value


def k_return_in_for(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]], n: i32):
    t = load_tile_like(x, z)
    for i in range(n):
        t = t + 1.0
        return  # <- return_in_for
    z.store(t)


def k_return_in_if_in_for(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    t = load_tile_like(x, z)
    for i in range(4):
        if i == 2:
            return  # <- return_in_if_in_for
        t = t + 1.0
    z.store(t)


def k_return_in_while(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]], n: i32):
    while n > 0:
        n = n - 1
        if n == 3:
            break
        for i in static_range(2):
            return  # <- return_in_while
    z.store(load_tile_like(x, z))


@DeviceFunction
def first_positive(t, n):
    for i in range(n):
        return t  # <- device_early_return
    return t * 2.0


@DeviceFunction
def last_loop(t):
    for i in range(4):
        if i == 1:
            return t  # <- device_return_in_loop


def k_device_early_return(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]], n: i32):
    z.store(first_positive(load_tile_like(x, z), n))


def k_device_return_in_loop(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    z.store(last_loop(load_tile_like(x, z)))


def k_subscript_assign(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    t = load_tile_like(x, z)
    t[0] = 1.0  # <- subscript_assign


def k_float_into_int(z: Mut[Tensor[i32, ["B"]]], x: Tensor[i32, [-1]]):
    z.store(load_tile_like(x, z) + 1.5)  # <- float_into_int


def k_overflow(z: Mut[Tensor[i8, ["B"]]], x: Tensor[i8, [-1]]):
    z.store(load_tile_like(x, z) + 300)  # <- overflow


def k_mma_shapes(z: Mut[Tensor[f32, ["BM", "BN"]]], x: Tensor[f16, [-1, -1]]):
    a = x.load(index=(0, 0), shape=(32, 16))
    z.store(mma(a, a, z.load()))  # <- mma_shapes


def k_mma_dtype(z: Mut[Tensor[f32, ["BM", "BN"]]]):
    a = zeros((32, 32), i32)
    z.store(mma(a, a, z.load()))  # <- mma_dtype


def k_axis(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    s = sum(load_tile_like(x, z), axis=3)  # <- axis


def k_range_float(z: Mut[Tensor[f32, ["B"]]]):
    for i in range(2.5):  # <- range_float
        pass


def k_one_branch(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    t = load_tile_like(x, z)
    if sum(t) > 0:
        u = t
    z.store(u)  # <- one_branch


def k_loop_only(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]], N: Constant[int]):
    for i in range(N):
        inner = load_tile_like(x, z)
    z.store(inner)  # <- loop_only


def k_type_change(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]], N: Constant[int]):
    acc = zeros((64,), f32)
    for i in range(N):  # <- type_change
        acc = acc.astype(f16)
    z.store(acc)


def k_tile_condition(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    t = load_tile_like(x, z)
    if t > 0:  # <- tile_condition
        z.store(t)


def k_static_assert(z: Mut[Tensor[f32, ["B"]]], B: Constant[int]):
    static_assert(B == 128, "tiles must be 128 wide")  # <- static_assert


def k_like_readonly(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    z.store(load_tile_like(x, x))  # <- like_readonly


def k_index_rank(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    z.store(x.load(index=(0, 1), shape=(64,)))  # <- index_rank


def k_astype_not_dtype(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    z.store(load_tile_like(x, z).astype(3))  # <- astype_not_dtype


def k_store_shape(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    z.store(zeros((32,), f32))  # <- store_shape


def k_int_pow(z: Mut[Tensor[i32, ["B"]]], x: Tensor[i32, [-1]]):
    z.store(load_tile_like(x, z) ** 2)  # <- int_pow


def k_int_pow_call(z: Mut[Tensor[i32, ["B"]]], x: Tensor[i32, [-1]]):
    z.store(pow(load_tile_like(x, z), 2))  # <- int_pow_call


def k_int_div_call(z: Mut[Tensor[i32, ["B"]]], x: Tensor[i32, [-1]]):
    z.store(div(load_tile_like(x, z), 2))  # <- int_div_call


def k_rounding_refused(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    z.store(exp(load_tile_like(x, z), rounding="zero"))  # <- rounding_refused


def k_ftz_refused(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    z.store(log(load_tile_like(x, z), flush_to_zero=True))  # <- ftz_refused


def k_rounding_mode_of_another_op(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    t = load_tile_like(x, z)
    z.store(add(t, t, rounding="approx"))  # <- rounding_mode_of_another_op


def k_rounding_f32_only(z: Mut[Tensor[f16, ["B"]]], x: Tensor[f16, [-1]]):
    t = load_tile_like(x, z)
    z.store(div(t, t, rounding="full"))  # <- rounding_f32_only


def k_ftz_f16(z: Mut[Tensor[f16, ["B"]]], x: Tensor[f16, [-1]]):
    z.store(sqrt(load_tile_like(x, z), flush_to_zero=True))  # <- ftz_f16


def k_astype_rounding(z: Mut[Tensor[f16, ["B"]]], x: Tensor[f32, [-1]]):
    z.store(load_tile_like(x, z).astype(f16, rounding="positive_inf"))  # <- astype_rounding


def k_unknown_keyword(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    z.store(sqrt(load_tile_like(x, z), fast=True))  # <- unknown_keyword


def k_partition_rank(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    p = x.partition((64, 64))  # <- partition_rank
    z.store(p.load((0, 0)).reshape((64 * 64,)).extract((0,), (64,)))


def k_partition_padding(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    z.store(x.load(index=(0,), shape=(64,), padding="inf"))  # <- partition_padding


def k_fstring(z: Mut[Tensor[f32, ["B"]]]):
    s = f"{z}"  # <- fstring


def k_is(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    if x is z:  # <- is
        pass


def k_tuple_index(z: Mut[Tensor[f32, ["B"]]]):
    b = get_tile_block_id()[3]  # <- tuple_index


def k_extract(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    e = extract(load_tile_like(x, z), (0,), (48,))  # <- extract


def k_undeclared_constant(z: Mut[Tensor[f32, ["B"]]]):
    n = B  # <- undeclared_constant


def k_lossy_store(z: Mut[Tensor[f16, ["B"]]], x: Tensor[f32, [-1]]):
    z.store(load_tile_like(x, z))  # <- lossy_store


def k_bad_call_arity(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    z.store(load_tile_like(x))  # <- bad_call_arity


def k_unknown_method(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    z.store(load_tile_like(x, z).frobnicate())  # <- unknown_method


def k_where_condition(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    t = load_tile_like(x, z)
    z.store(where(t, t, 0.0))  # <- where_condition


def k_gather_safe(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    z.store(gather(x, arange(64), unchecked=True))  # <- gather_safe


def k_atomic_safe(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    atomic_add(z, arange(64), 1.0)  # <- atomic_safe


@unsafe
def k_scatter_readonly(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    scatter(x, arange(64), 1.0)  # <- scatter_readonly


@unsafe
def k_gather_shapes(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1, -1]]):
    v = gather(x, (arange(64), arange(32)))  # <- gather_shapes


@unsafe
def k_gather_rank(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1, -1]]):
    v = gather(x, arange(64))  # <- gather_rank


@unsafe
def k_gather_float_index(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    v = gather(x, load_tile_like(x, z))  # <- gather_float_index


@unsafe
def k_atomic_float_max(z: Mut[Tensor[f32, ["B"]]]):
    old = atomic_max(z, arange(64), 1.0)  # <- atomic_float_max


@unsafe
def k_atomic_order(z: Mut[Tensor[i32, ["B"]]]):
    old = atomic_add(z, arange(64), 1, order="weak")  # <- atomic_order


def k_own_atomic_readonly(z: Mut[Tensor[i32, ["B"]]], x: Tensor[i32, [-1]]):
    x.atomic_add(1)  # <- own_atomic_readonly


def k_own_atomic_shape(z: Mut[Tensor[i32, ["B"]]]):
    z.atomic_add(zeros((32,), i32))  # <- own_atomic_shape


def k_own_atomic_i8(z: Mut[Tensor[i8, ["B"]]]):
    z.atomic_add(1)  # <- own_atomic_i8


def k_print_no_format(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    print(load_tile_like(x, z))  # <- print_no_format


def k_print_count(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    print("%f and %f", load_tile_like(x, z))  # <- print_count


def k_print_kind(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    print("%d", load_tile_like(x, z))  # <- print_kind


def k_print_spec(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    print("%s", load_tile_like(x, z))  # <- print_spec


def k_print_kwarg(z: Mut[Tensor[f32, ["B"]]]):
    print("hello", sep="")  # <- print_kwarg


def k_assert_message(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    assert sum(load_tile_like(x, z)) > 0, 42  # <- assert_message


def k_assert_tile(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    assert load_tile_like(x, z), "nonzero"  # <- assert_tile


def k_assume_divisor(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    n = assume(x.shape[0], div_by=12)  # <- assume_divisor


def k_assume_float(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    t = assume(load_tile_like(x, z), div_by=4)  # <- assume_float


def k_latency(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    z.store(load_tile_like(x, z, latency=11))  # <- latency


def k_allow_tma(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    z.store(x.load(index=(0,), shape=(64,), allow_tma=1))  # <- allow_tma


def k_reduce_not_function(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    s = reduce(load_tile_like(x, z), 0, 3, 0.0)  # <- reduce_not_function


def k_reduce_arity(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    t = load_tile_like(x, z)
    s = reduce((t, t), 0, lambda a, b: a[0] + b[0], (0.0, 0.0))  # <- reduce_arity


def k_reduce_identity(z: Mut[Tensor[i8, ["B"]]], x: Tensor[i8, [-1]]):
    s = reduce(load_tile_like(x, z), 0, lambda a, b: a + b, 1000)  # <- reduce_identity


def k_reduce_result_type(z: Mut[Tensor[i32, ["B"]]], x: Tensor[i32, [-1]]):
    s = reduce(load_tile_like(x, z), 0, lambda a, b: a * 0.5, 0)  # <- reduce_result_type


def k_lambda_defaults(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    f = lambda a, b=1: a + b  # <- lambda_defaults
    z.store(f(load_tile_like(x, z)))


def k_tile_atomic_safe(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    part = x.partition([64])
    part.atomic_add(0, load_tile_like(x, z))  # <- tile_atomic_safe


@unsafe
def k_tile_atomic_scope(z: Mut[Tensor[f32, ["B"]]]):
    z.partition([64]).atomic_add(0, 1.0, scope="sys")  # <- tile_atomic_scope


@unsafe
def k_tile_atomic_readonly(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    x.partition([64]).atomic_max(0, 1.0)  # <- tile_atomic_readonly


def k_read_other_tile(z: Mut[Tensor[f32, ["B"]]]):
    b, _, _ = get_tile_block_id()
    z.store(load(z, (b + 1,), (64,)))  # <- read_other_tile


def k_read_mut_in_other_tiles(z: Mut[Tensor[f32, ["B"]]], w: Mut[Tensor[f32, [32]]]):
    z.store(load_tile_like(w, z))  # <- read_mut_in_other_tiles


@unsafe
def k_partition_lossy_store(z: Mut[Tensor[f16, ["B"]]], x: Tensor[f32, [-1]]):
    z.partition([64]).store((0,), load_tile_like(x, z))  # <- partition_lossy_store


def k_matmul_operator(z: Mut[Tensor[f32, ["BM", "BN"]]], x: Tensor[f32, [-1, -1]]):
    a = load_tile_like(x, z)
    z.store(a.sum(0) @ a)  # <- matmul_operator


def k_matmul_augmented(z: Mut[Tensor[f32, ["BM", "BN"]]], x: Tensor[f32, [-1, -1]]):
    a = load_tile_like(x, z)
    a @= a.sum(0)  # <- matmul_augmented
    z.store(a)


CASES: list[tuple[Any, dict[str, Any], type[TileError], str, str]] = [
    (k_partition_lossy_store, {"z": TensorSpec(dt.f16, (256,), (64,)), "x": V}, TileTypeError,
     "partition_lossy_store", r"store's value: a tile<64xf32> cannot become f16 without loss"),
    (k_matmul_operator, {"z": M, "x": TensorSpec(dt.f32, (64, 64))}, TileTypeError, "matmul_operator",
     r"matmul's a must be a matrix \(2-D\) or a batch of them, got tile<32xf32>"),
    (k_matmul_augmented, {"z": M, "x": TensorSpec(dt.f32, (64, 64))}, TileTypeError, "matmul_augmented",
     r"matmul's b must be a matrix \(2-D\) or a batch of them, got tile<32xf32>"),
    (k_read_other_tile, {"z": P}, TileTypeError, "read_other_tile",
     "a safe kernel reads it only through its own tile"),
    (k_read_mut_in_other_tiles, {"z": P, "w": TensorSpec(dt.f32, (256,), (32,))}, TileTypeError,
     "read_mut_in_other_tiles", r"would read other blocks' tiles while they write them \(a race\)"),
    (k_store_readonly, {"z": P, "x": V}, TileTypeError, "store_readonly", r"store: the tensor is not declared Mut\[...\], so the kernel may not write it"),
    (k_partition_mut, {"z": P}, TileTypeError, "partition_mut", "a Mut tensor is already partitioned among the blocks"),
    (k_partition_store, {"z": P, "x": V}, TileTypeError, "partition_store", r"needs @cutile.entry\(unsafe=True\)"),
    (k_unknown_name, {"z": P}, TileSyntaxError, "unknown_name", "name 'undefined_thing' is not defined"),
    (k_mixed_dtypes, {"z": P, "x": V, "y": TensorSpec(dt.i32, (256,))}, TileTypeError, "mixed_dtypes",
     "cannot combine f32 and i32 tiles implicitly"),
    (k_shapes, {"z": P, "x": V}, TileTypeError, "shapes", r"shapes \[64\], \[32\] do not broadcast"),
    (k_not_power_of_two, {"z": P, "x": V}, TileTypeError, "not_power_of_two", r"powers of two, got \[48\]"),
    (k_try, {"z": P}, TileSyntaxError, "try", "try/except cannot be used inside a kernel"),
    (k_with, {"z": P}, TileSyntaxError, "with", "with cannot be used inside a kernel"),
    (k_comprehension, {"z": P}, TileSyntaxError, "comprehension", "list comprehensions cannot be used inside a kernel"),
    (k_plain_function, {"z": P, "x": V}, TileSyntaxError, "plain_function", r"cannot inline helper: it takes \*xs"),
    (k_recursion, {"z": P, "x": V}, TileSyntaxError, "recursion", "recursive call of recursive"),
    (k_return_value, {"z": P}, TileSyntaxError, "return_value", "a kernel returns nothing"),
    (k_return_in_for, {"z": P, "x": V, "n": dt.i32}, TileSyntaxError, "return_in_for",
     "'return' inside a loop is not supported"),
    (k_return_in_if_in_for, {"z": P, "x": V}, TileSyntaxError, "return_in_if_in_for",
     "'return' inside a loop is not supported"),
    (k_return_in_while, {"z": P, "x": V, "n": dt.i32}, TileSyntaxError, "return_in_while",
     "'return' inside a loop is not supported"),
    (k_device_early_return, {"z": P, "x": V, "n": dt.i32}, TileSyntaxError, "device_early_return",
     r"a device function may return only at its end \(its last statement\)"),
    (k_device_return_in_loop, {"z": P, "x": V}, TileSyntaxError, "device_return_in_loop",
     "'return' inside a loop is not supported"),
    (k_subscript_assign, {"z": P, "x": V}, TileSyntaxError, "subscript_assign", "tiles are immutable values"),
    (k_float_into_int, {"z": TensorSpec(dt.i32, (256,), (64,)), "x": TensorSpec(dt.i32, (256,))}, TileTypeError,
     "float_into_int", "cannot use 1.5 as a i32 value"),
    (k_overflow, {"z": TensorSpec(dt.i8, (256,), (64,)), "x": TensorSpec(dt.i8, (256,))}, TileTypeError, "overflow",
     "the constant 300 does not fit in i8"),
    (k_mma_shapes, {"z": M, "x": TensorSpec(dt.f16, (64, 64))}, TileTypeError, "mma_shapes", "mma: shapes do not chain"),
    (k_mma_dtype, {"z": M}, TileTypeError, "mma_dtype", "inputs i32 with accumulator f32 are not supported"),
    (k_axis, {"z": P, "x": V}, TileTypeError, "axis", "axis 3 is out of range for a rank-1 tile"),
    (k_range_float, {"z": P}, TileTypeError, "range_float", r"range\(\) bounds must be ints"),
    (k_one_branch, {"z": P, "x": V}, TileSyntaxError, "one_branch", "'u' is assigned in only one branch of the if"),
    (k_loop_only, {"z": P, "x": V, "N": 3}, TileSyntaxError, "loop_only", "'inner' is assigned only inside the loop"),
    (k_type_change, {"z": P, "x": V, "N": 3}, TileTypeError, "type_change",
     r"'acc' changes type in the loop from tile<64xf32> to tile<64xf16>"),
    (k_tile_condition, {"z": P, "x": V}, TileTypeError, "tile_condition", "the truth value of a tile<64xbool> is ambiguous"),
    (k_static_assert, {"z": P}, TileTypeError, "static_assert", "static_assert failed: tiles must be 128 wide"),
    (k_like_readonly, {"z": P, "x": V}, TileTypeError, "like_readonly", "must be a Mut tensor"),
    (k_index_rank, {"z": P, "x": V}, TileTypeError, "index_rank", "the index needs 1 coordinate"),
    (k_astype_not_dtype, {"z": P, "x": V}, TileTypeError, "astype_not_dtype", "expected a dtype such as f32, got int 3"),
    (k_store_shape, {"z": P, "x": V}, TileTypeError, "store_shape", r"store: this block's tile has shape \[64\], the value \[32\]"),
    (k_int_pow, {"z": TensorSpec(dt.i32, (256,), (64,)), "x": TensorSpec(dt.i32, (256,))}, TileTypeError, "int_pow",
     r"pow \('\*\*'\) needs floating-point operands, got i32; convert with .astype\(f32\)"),
    (k_int_pow_call, {"z": TensorSpec(dt.i32, (256,), (64,)), "x": TensorSpec(dt.i32, (256,))}, TileTypeError,
     "int_pow_call", r"pow \('\*\*'\) needs floating-point operands, got i32; convert with .astype\(f32\)"),
    (k_int_div_call, {"z": TensorSpec(dt.i32, (256,), (64,)), "x": TensorSpec(dt.i32, (256,))}, TileTypeError, "int_div_call",
     "div needs floating-point operands, got i32; use / or // on integers"),
    (k_rounding_refused, {"z": P, "x": V}, TileTypeError, "rounding_refused",
     "exp takes no rounding mode, got rounding='zero'"),
    (k_ftz_refused, {"z": P, "x": V}, TileTypeError, "ftz_refused", "log takes no flush_to_zero"),
    (k_rounding_mode_of_another_op, {"z": P, "x": V}, TileTypeError, "rounding_mode_of_another_op",
     "add: rounding must be one of nearest_even, zero, negative_inf, positive_inf, got 'approx'"),
    (k_rounding_f32_only, {"z": TensorSpec(dt.f16, (256,), (64,)), "x": TensorSpec(dt.f16, (256,))}, TileTypeError,
     "rounding_f32_only", "div: rounding='full' is for f32 only, got f16"),
    (k_ftz_f16, {"z": TensorSpec(dt.f16, (256,), (64,)), "x": TensorSpec(dt.f16, (256,))}, TileTypeError,
     "ftz_f16", "sqrt: flush_to_zero is for f32 only, got f16"),
    (k_astype_rounding, {"z": TensorSpec(dt.f16, (256,), (64,)), "x": V}, TileTypeError, "astype_rounding",
     "astype: rounding must be one of nearest_even, zero, got 'positive_inf'"),
    (k_unknown_keyword, {"z": P, "x": V}, TileTypeError, "unknown_keyword",
     r"sqrt\(\) takes only rounding, flush_to_zero, got fast"),
    (k_partition_rank, {"z": P, "x": V}, TileTypeError, "partition_rank",
     r"partition: a rank-1 tensor is partitioned with 1 tile dims, got \[64, 64\]"),
    (k_partition_padding, {"z": P, "x": V}, TileTypeError, "partition_padding",
     "partition: padding must be one of zero, neg_zero, nan, pos_inf, neg_inf, got 'inf'"),
    (k_fstring, {"z": P}, TileSyntaxError, "fstring", "f-strings are not supported in kernels"),
    (k_is, {"z": P, "x": V}, TileSyntaxError, "is", "'is' compares only with None"),
    (k_tuple_index, {"z": P}, TileTypeError, "tuple_index", "index 3 is out of range for a tuple of 3"),
    (k_extract, {"z": P, "x": V}, TileTypeError, "extract", r"tile dimensions must be powers of two, got \[48\]"),
    (k_undeclared_constant, {"z": P}, TileSyntaxError, "undeclared_constant",
     "declare it as a parameter: B: Constant\\[int\\]"),
    (k_lossy_store, {"z": TensorSpec(dt.f16, (256,), (64,)), "x": V}, TileTypeError, "lossy_store",
     r"store's value: a tile<64xf32> cannot become f16 without loss; convert it with .astype\(f16\)"),
    (k_bad_call_arity, {"z": P, "x": V}, TileTypeError, "bad_call_arity", "missing a required argument: 'like'"),
    (k_unknown_method, {"z": P, "x": V}, TileSyntaxError, "unknown_method", "has no attribute 'frobnicate'"),
    (k_where_condition, {"z": P, "x": V}, TileTypeError, "where_condition", "where's condition must be a bool tile"),
    (k_gather_safe, {"z": P, "x": V}, TileTypeError, "gather_safe",
     r"gather\(..., unchecked=True\) reads without a bounds check, which only @cutile.entry\(unsafe=True\) kernels"),
    (k_atomic_safe, {"z": P, "x": V}, TileTypeError, "atomic_safe",
     r"atomic_add at arbitrary indices needs @cutile.entry\(unsafe=True\).*own tile atomically"),
    (k_scatter_readonly, {"z": P, "x": V}, TileTypeError, "scatter_readonly", r"scatter: the tensor is not declared Mut\[...\], so the kernel may not write it"),
    (k_gather_shapes, {"z": P, "x": TensorSpec(dt.f32, (64, 64))}, TileTypeError, "gather_shapes",
     r"gather: the shapes of indices, values and mask \[64\], \[32\] do not broadcast"),
    (k_gather_rank, {"z": P, "x": TensorSpec(dt.f32, (64, 64))}, TileTypeError, "gather_rank",
     r"gather: a rank-2 tensor needs 2 index tile\(s\), got 1"),
    (k_gather_float_index, {"z": P, "x": V}, TileTypeError, "gather_float_index",
     "gather: indices must be integer tiles, got tile<64xf32>"),
    (k_atomic_float_max, {"z": P}, TileTypeError, "atomic_float_max",
     "atomic_max: the GPU's atomics take 32/64-bit integers, not f32"),
    (k_atomic_order, {"z": TensorSpec(dt.i32, (256,), (64,))}, TileTypeError, "atomic_order",
     "atomic_add: order must be one of 'relaxed', 'acquire', 'release', 'acq_rel', got 'weak'"),
    (k_own_atomic_readonly, {"z": TensorSpec(dt.i32, (256,), (64,)), "x": TensorSpec(dt.i32, (256,))}, TileTypeError,
     "own_atomic_readonly", r"atomic_add: the tensor is not declared Mut\[...\], so the kernel may not write it"),
    (k_own_atomic_shape, {"z": TensorSpec(dt.i32, (256,), (64,))}, TileTypeError, "own_atomic_shape",
     r"atomic_add: this block's tile has shape \[64\], the value \[32\]"),
    (k_own_atomic_i8, {"z": TensorSpec(dt.i8, (256,), (64,))}, TileTypeError, "own_atomic_i8",
     "atomic_add: the GPU's atomics take 32/64-bit integers, f16, bf16, f32 or f64, not i8"),
    (k_print_no_format, {"z": P, "x": V}, TileTypeError, "print_no_format",
     r"print\(\) in a kernel takes a constant format string first"),
    (k_print_count, {"z": P, "x": V}, TileTypeError, "print_count",
     r"print: the format has 2 conversion\(s\) but 1 value\(s\) were given"),
    (k_print_kind, {"z": P, "x": V}, TileTypeError, "print_kind",
     "print: conversion %d needs an integer or bool value, value 1 is tile<64xf32>; use %f"),
    (k_print_spec, {"z": P, "x": V}, TileTypeError, "print_spec", "print: conversion '%s' is not supported"),
    (k_print_kwarg, {"z": P}, TileTypeError, "print_kwarg", r"print\(\) in a kernel takes only end= as a keyword, got sep"),
    (k_assert_message, {"z": P, "x": V}, TileTypeError, "assert_message",
     "an assert's message must be a constant string, got int 42"),
    (k_assert_tile, {"z": P, "x": V}, TileTypeError, "assert_tile", "the truth value of a tile<64xf32> is ambiguous"),
    (k_assume_divisor, {"z": P, "x": V}, TileTypeError, "assume_divisor",
     "assume: div_by must be a positive power of two, got 12"),
    (k_assume_float, {"z": P, "x": V}, TileTypeError, "assume_float",
     "assume: facts are stated about integer values, got tile<64xf32>"),
    (k_latency, {"z": P, "x": V}, TileTypeError, "latency", "latency must be from 1 to 10, got 11"),
    (k_allow_tma, {"z": P, "x": V}, TileTypeError, "allow_tma", "allow_tma must be True or False, got int 1"),
    (k_reduce_not_function, {"z": P, "x": V}, TileTypeError, "reduce_not_function",
     r"reduce's combine_fn must be a @cutile.function or a lambda of \(accumulator, element\), got int 3"),
    (k_reduce_arity, {"z": P, "x": V}, TileTypeError, "reduce_arity",
     r"reduce: combine_fn must return 2 value\(s\), like its accumulator, got f32"),
    (k_reduce_identity, {"z": TensorSpec(dt.i8, (256,), (64,)), "x": TensorSpec(dt.i8, (256,))}, TileTypeError,
     "reduce_identity", "reduce's identity: the constant 1000 does not fit in i8 \\(-128 to 127\\)"),
    (k_reduce_result_type, {"z": TensorSpec(dt.i32, (256,), (64,)), "x": TensorSpec(dt.i32, (256,))}, TileTypeError,
     "reduce_result_type", "cannot use 0.5 as a i32 value"),
    (k_tile_atomic_safe, {"z": P, "x": V}, TileTypeError, "tile_atomic_safe",
     r"atomic_add into a partition's tile at an arbitrary index needs @cutile.entry\(unsafe=True\)"),
    (k_tile_atomic_scope, {"z": P}, TileTypeError, "tile_atomic_scope",
     "atomic_add: a tile reduction's scope is 'tl_blk' or 'device', got 'sys'"),
    (k_tile_atomic_readonly, {"z": P, "x": V}, TileTypeError, "tile_atomic_readonly",
     r"atomic_max: the tensor is not declared Mut\[...\], so the kernel may not write it"),
    (k_return_in_runtime_if, {"z": P, "x": V, "n": dt.i32}, TileSyntaxError, "return_in_runtime_if",
     "a device function may return inside an if only when the condition is known at compile time"),
    (k_lambda_defaults, {"z": P, "x": V}, TileSyntaxError, "lambda_defaults",
     "a lambda in a kernel takes plain positional parameters only"),
]


def marked_line(function: Any, marker: str) -> int:
    lines, _ = inspect.getsourcelines(function)
    path = inspect.getsourcefile(function)
    assert path is not None
    text = open(path).read().splitlines()
    for number, line in enumerate(text, start=1):
        if line.rstrip().endswith(f"# <- {marker}") or f"# <- {marker} " in line:
            return number
    raise AssertionError(f"no '# <- {marker}' marker")


@pytest.mark.parametrize("kernel, arguments, error, marker, message", CASES, ids=[c[3] for c in CASES])
def test_mistake_is_reported_at_its_line(kernel: Any, arguments: dict[str, Any], error: type[TileError],
                                         marker: str, message: str) -> None:
    with pytest.raises(error) as info:
        compile_kernel(kernel, **arguments)
    raised = info.value
    assert type(raised) is error
    assert raised.location is not None
    assert raised.location.line == marked_line(kernel, marker), str(raised)
    text = str(raised)
    assert re.search(message, text), text
    first_line, source_line, caret_line = text.splitlines()[:3]
    assert first_line.startswith(f"{raised.location.filename}:{raised.location.line}:{raised.location.column + 1}: ")
    assert f"# <- {marker}" in source_line
    assert caret_line.strip() and set(caret_line.strip()) == {"^"}
    assert caret_line.index("^") == raised.location.column


def test_every_mistake_kernel_is_a_distinct_case() -> None:
    kernels = {name for name, value in globals().items() if name.startswith("k_") and callable(value)}
    assert {c[0].__name__ for c in CASES} == kernels  # no kernel is left out of the table
    assert len({c[0] for c in CASES}) == len({c[3] for c in CASES}) == len(CASES) >= 30
