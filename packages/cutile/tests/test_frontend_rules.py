"""The front end owns the rules of tiles and constants: a kernel that breaks one is a
`TileTypeError` at its line, with a caret, before either backend runs it. Each
kernel is checked on both paths: ``cutile.compile(..., arch="sm_90")`` (front end,
then tileiras) and the interpreter, so a rule cannot hold on one path only.

The rules: a tile's dims are powers of two and it holds at most 2**24 elements
(whatever op makes it); a constant fits its dtype (no wrap-around, no silent
infinity); a constant index is in range; constant folding of Python operators on
numbers never escapes as a raw Python exception, and messages are bounded however
large the int.
"""

import inspect
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import cutile
import cutile.core as ct
from cutile import api
from cutile.core import Constant, Mut, Tensor, f16, f32, i8, i32
from cutile_compiler._errors import TileTypeError


def line_of(function: Any, marker: str) -> int:
    lines, start = inspect.getsourcelines(function.function if hasattr(function, "function") else function)
    for offset, text in enumerate(lines):
        if marker in text:
            return start + offset
    raise AssertionError(marker)


def refused_on_both_paths(kernel: Any, make_args: Callable[[], list[Any]], marker: str, message: str,
                          **constants: Any) -> None:
    """``kernel`` is refused with ``message`` at the line marked ``marker``, with a
    caret, by ``cutile.compile`` for sm_90 and by the interpreter alike."""
    for path in ("compile for sm_90", "interpreter"):
        args = make_args()
        with pytest.raises(TileTypeError) as info:
            if path == "interpreter":
                kernel(*args, **constants).sync()
            else:
                cutile.compile(kernel, *args, arch="sm_90", **constants)
        error = info.value
        assert message in error.message, (path, error.message)
        assert error.location is not None and error.location.line == line_of(kernel, marker), (path, str(error))
        assert str(error).splitlines()[-1].strip().startswith("^"), (path, str(error))


def meta_or_zeros(shape: list[int], tile: list[int], dtype: Any = f32) -> Callable[[], list[Any]]:
    return lambda: [api.zeros(shape, dtype=dtype).partition(tile)]


# -- the tile-shape rule: every op that makes a tile ------------------------------------------
@cutile.entry
def shapes(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]], KIND: Constant[int]):
    t = z.load()
    if KIND == 0:
        joined = ct.cat(ct.zeros((64,), f32), ct.zeros((32,), f32))  # <- cat 96
    elif KIND == 1:
        big = ct.zeros((1 << 28,), f32)  # <- 2**28 elements
    elif KIND == 2:
        huge = ct.full((1 << 20, 1 << 20), 1.0, f32)  # <- 2**40 elements
    elif KIND == 3:
        wide = ct.zeros((1 << 12, 1), f32) + ct.zeros((1, 1 << 13), f32)  # <- broadcast 2**25
    elif KIND == 4:
        p = x.partition([1 << 25])  # <- partition 2**25
    elif KIND == 5:
        r = ct.cat(ct.zeros((1 << 23,), f32), ct.zeros((1 << 23,), f32))  # 2**24 elements: the most a tile holds
        t = t + ct.sum(r)
    elif KIND == 6:
        r = ct.cat(ct.zeros((1 << 24,), f32), ct.zeros((1 << 24,), f32))  # <- cat 2**25
    z.store(t)


@pytest.mark.parametrize("kind, marker, message", [
    (0, "# <- cat 96", "cat: the result tile<96xf32> is not a valid tile: tile dimensions must be powers of two, got [96]"),
    (1, "# <- 2**28 elements", "a tile holds at most 2**24 = 16777216 elements, [268435456] has 268435456"),
    (2, "# <- 2**40 elements", "a tile holds at most 2**24 = 16777216 elements, [1048576, 1048576] has 1099511627776"),
    (3, "# <- broadcast 2**25", "broadcast: the result tile<4096x8192xf32> is not a valid tile: a tile holds at most"),
    (4, "# <- partition 2**25", "a tile holds at most 2**24 = 16777216 elements, [33554432] has 33554432"),
    (6, "# <- cat 2**25", "cat: the result tile<33554432xf32> is not a valid tile: a tile holds at most 2**24"),
])
def test_a_tile_shape_the_gpu_refuses_is_refused_by_the_front_end(kind: int, marker: str, message: str) -> None:
    # KIND 2 would need 4 TiB on the interpreter: the rule refuses it before any allocation.
    refused_on_both_paths(shapes, lambda: [api.zeros([64]).partition([64]), api.zeros([64])], marker, message,
                          KIND=kind)


def test_a_tile_of_2_to_the_24_elements_is_accepted_on_both_paths() -> None:
    cutile.compile(shapes, api.meta([64]).partition([64]), api.meta([64]), KIND=5, arch="sm_90")
    z, _ = shapes(api.from_numpy(np.ones(64, np.float32)).partition([64]), api.zeros([64]), KIND=5).sync()
    np.testing.assert_array_equal(z.to_numpy(), np.ones(64))


# -- the constant rule: a constant fits its dtype ----------------------------------------------
@cutile.entry
def counting(z: Mut[Tensor[i8, ["B"]]], KIND: Constant[int]):
    if KIND == 0:
        z.store(ct.arange(256, i8))  # <- arange 256 i8
    else:
        z.store(ct.arange(128, i8))


def test_arange_past_its_dtype_is_refused_not_wrapped() -> None:
    refused_on_both_paths(counting, meta_or_zeros([256], [256], i8), "# <- arange 256 i8",
                          "arange(256, i8): its last value 255 does not fit in i8", KIND=0)
    cutile.compile(counting, api.meta([128], dtype=i8).partition([128]), KIND=1, arch="sm_90")
    z = counting(api.zeros([128], dtype=i8).partition([128]), KIND=1).sync()
    np.testing.assert_array_equal(z.to_numpy(), np.arange(128, dtype=np.int8))


@cutile.entry
def float_constants(z: Mut[Tensor[f32, ["B"]]], h: Mut[Tensor[f16, ["B"]]], KIND: Constant[int]):
    t = z.load()
    u = h.load()
    if KIND == 0:
        t = t + 1e39  # <- f32 overflow
    elif KIND == 1:
        u = u + 70000.0  # <- f16 overflow
    elif KIND == 2:
        u = ct.full((64,), 1e5, f16)  # <- f16 full
    else:
        t = ct.maximum(t * 3.0e38, float("-inf"))  # inf and nan written as such stay allowed
        u = u + 65504.0  # f16's largest finite value
    z.store(t)
    h.store(u)


@pytest.mark.parametrize("kind, marker, message", [
    (0, "# <- f32 overflow", "the constant 1e+39 does not fit in f32 (its largest finite value is 3.40282e+38)"),
    (1, "# <- f16 overflow", "the constant 70000.0 does not fit in f16 (its largest finite value is 65504)"),
    (2, "# <- f16 full", "the constant 100000.0 does not fit in f16"),
])
def test_a_float_constant_that_would_become_infinite_is_refused(kind: int, marker: str, message: str) -> None:
    def make_args() -> list[Any]:
        return [api.zeros([64]).partition([64]), api.zeros([64], dtype=f16).partition([64])]
    refused_on_both_paths(float_constants, make_args, marker, message, KIND=kind)


def test_float_constants_at_the_edge_of_their_dtype_are_accepted() -> None:
    cutile.compile(float_constants, api.meta([64]).partition([64]), api.meta([64], dtype=f16).partition([64]),
                   KIND=3, arch="sm_90")
    x = np.random.default_rng(1).uniform(-1, 1, 64).astype(np.float32)
    z, h = float_constants(api.from_numpy(x).partition([64]), api.zeros([64], dtype=f16).partition([64]),
                           KIND=3).sync()
    expected = np.maximum(x * np.float32(3.0e38), np.float32(-np.inf))
    np.testing.assert_array_equal(z.to_numpy(), expected)
    np.testing.assert_array_equal(h.to_numpy(), np.full(64, 65504, np.float16))


# -- a constant index is checked where the op is made ------------------------------------------
@cutile.entry
def extracting(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]], INDEX: Constant[int]):
    t = ct.load(x, (0,), (64,))
    part = ct.extract(t, (INDEX,), (16,))  # <- extract
    z.store(part)


@pytest.mark.parametrize("index", [4, -1, 1 << 40])
def test_a_constant_extract_index_out_of_range_is_refused(index: int) -> None:
    refused_on_both_paths(extracting, lambda: [api.zeros([16]).partition([16]), api.zeros([64])], "# <- extract",
                          f"extract: index {index} is out of range along axis 0: [64] holds 4 sub-tiles of 16 there "
                          "(indices 0 to 3)", INDEX=index)


def test_a_constant_extract_index_in_range_takes_that_sub_tile() -> None:
    x = np.random.default_rng(2).standard_normal(64).astype(np.float32)
    cutile.compile(extracting, api.meta([16]).partition([16]), api.meta([64]), INDEX=3, arch="sm_90")
    z, _ = extracting(api.zeros([16]).partition([16]), api.from_numpy(x), INDEX=3).sync()
    np.testing.assert_array_equal(z.to_numpy(), x[48:64])


# -- constant folding never escapes as a raw Python exception ----------------------------------
@cutile.entry
def folding(z: Mut[Tensor[f32, ["B"]]], w: Mut[Tensor[i32, ["B"]]], KIND: Constant[int]):
    t = z.load()
    u = w.load()
    if KIND == 0:
        a = ~1.5  # <- invert a float
    elif KIND == 1:
        a = int(float("inf"))  # <- int of inf
    elif KIND == 2:
        a = int(float("nan"))  # <- int of nan
    elif KIND == 3:
        for i in ct.static_range(0, 8, 0):  # <- static_range step 0
            t = t + 1.0
    elif KIND == 4:
        for i in range(1, 5, 0):  # <- range step 0
            t = t + 1.0
    elif KIND == 5:
        items = range(1, 5, 0)  # <- range value step 0
    elif KIND == 6:
        u = u + 10**5000  # <- i32 plus a huge int
    elif KIND == 7:
        t = t + 10**5000  # <- f32 plus a huge int
    elif KIND == 8:
        t = t + 10**400  # <- f32 plus 10**400
    elif KIND == 9:
        a = 2 ** 10**10  # <- a power too large to fold
    elif KIND == 10:
        a = 1 << 10**12  # <- a shift too large to fold
    elif KIND == 11:
        a = ct.exp(10**400)  # <- exp of a huge int
    elif KIND == 12:
        a = (1, 2, 3)[::0]  # <- slice step 0
    elif KIND == 13:
        for i in ct.static_range(10**9):  # <- a billion unrolled copies
            t = t + 1.0
    elif KIND == 14:
        a = (1, 2)[10**5000]  # <- a huge tuple index
    else:
        # Folding that works: Python's meaning, at compile time.
        a = ~5 + int(2.7) + abs(-3) + int(float("1e3")) + ct.ceil_div(10, 4) + (2**62 >> 60)
        for i in ct.static_range(0, 8, 3):
            a = a + i
        a = a + (1, 2, 3, 4)[1::2][1]
        t = t + a
        u = u + (10**30 // 10**21)
    z.store(t)
    w.store(u)


FOLDING_ERRORS = [
    (0, "# <- invert a float", "the constant expression ~1.5 fails: bad operand type for unary ~: 'float'"),
    (1, "# <- int of inf", "the constant expression int(inf) fails: cannot convert float infinity to integer"),
    (2, "# <- int of nan", "the constant expression int(nan) fails: cannot convert float NaN to integer"),
    (3, "# <- static_range step 0", "the constant expression static_range(0, 8, 0) fails: range() arg 3 must not be zero"),
    (4, "# <- range step 0", "range() step must be positive inside a kernel, got 0"),
    (5, "# <- range value step 0", "the constant expression range(1, 5, 0) fails: range() arg 3 must not be zero"),
    (6, "# <- i32 plus a huge int", "the constant <int of about 5001 digits> does not fit in i32 (-2147483648 to 2147483647)"),
    (7, "# <- f32 plus a huge int", "the constant <int of about 5001 digits> does not fit in f32"),
    (8, "# <- f32 plus 10**400", "the constant <int of about 401 digits> does not fit in f32"),
    (9, "# <- a power too large to fold", "the constant expression 2 ** 10000000000 would be an int of more than 65536 bits"),
    (10, "# <- a shift too large to fold", "the constant expression 1 << 1000000000000 would be an int of more than 65536 bits"),
    (11, "# <- exp of a huge int", "the constant expression exp(<int of about 401 digits>) fails"),
    (12, "# <- slice step 0", "fails: slice step cannot be zero"),
    (13, "# <- a billion unrolled copies", "static_range(1000000000) has 1000000000 items; a compile-time range has at most 65536"),
    (14, "# <- a huge tuple index", "index <int of about 5001 digits> is out of range for a tuple of 2"),
]


@pytest.mark.parametrize("kind, marker, message", FOLDING_ERRORS)
def test_constant_folding_errors_are_located_type_errors(kind: int, marker: str, message: str) -> None:
    def make_args() -> list[Any]:
        return [api.zeros([64]).partition([64]), api.zeros([64], dtype=i32).partition([64])]
    started = time.monotonic()
    refused_on_both_paths(folding, make_args, marker, message, KIND=kind)
    assert time.monotonic() - started < 30  # refused, not computed


def test_constant_folding_that_python_allows_still_folds() -> None:
    cutile.compile(folding, api.meta([64]).partition([64]), api.meta([64], dtype=i32).partition([64]), KIND=99,
                   arch="sm_90")
    x = np.random.default_rng(3).standard_normal(64).astype(np.float32)
    z, w = folding(api.from_numpy(x).partition([64]), api.zeros([64], dtype=i32).partition([64]), KIND=99).sync()
    a = ~5 + int(2.7) + abs(-3) + 1000 + 3 + 4 + (0 + 3 + 6) + 4
    np.testing.assert_array_equal(z.to_numpy(), (x.astype(np.float64) + a).astype(np.float32))
    np.testing.assert_array_equal(w.to_numpy(), np.full(64, 10**9, np.int32))
