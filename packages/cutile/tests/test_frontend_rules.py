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

import importlib.util
import inspect
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import cutile
import cutile.core as ct
from cutile import api
from cutile.core import Constant, Mut, Tensor, f16, f32, i8, i32
from cutile_compiler._errors import TileSyntaxError, TileTypeError
from located_errors import line_of, refused_on_both_paths
from cutile_compiler._frontend import MAX_NESTING




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


@cutile.entry(unsafe=True)
def gathering(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]], KIND: Constant[int]):
    i = ct.arange(64)
    if KIND == 0:
        z.store(ct.gather(x, i, i < 32, padding=10**400))  # <- huge padding
    else:
        z.store(ct.gather(x, i, i < 32, padding=-2.5))


def test_a_gather_padding_follows_the_constant_rule() -> None:
    refused_on_both_paths(gathering, lambda: [api.zeros([64]).partition([64]), api.zeros([64])], "# <- huge padding",
                          "gather's padding: the constant <int of about 401 digits> does not fit in f32", KIND=0)
    x = np.random.default_rng(6).standard_normal(64).astype(np.float32)
    cutile.compile(gathering, api.meta([64]).partition([64]), api.meta([64]), KIND=1, arch="sm_90")
    z, _ = gathering(api.zeros([64]).partition([64]), api.from_numpy(x), KIND=1).sync()
    np.testing.assert_array_equal(z.to_numpy(), np.where(np.arange(64) < 32, x, np.float32(-2.5)))


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
    elif KIND == 15:
        ct.static_assert(False, 10**5000)  # <- a huge static_assert message
    elif KIND == 16:
        a = (-8) ** 0.5  # <- a complex result
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
    (15, "# <- a huge static_assert message", "static_assert failed: <int of about 5001 digits>"),
    (16, "# <- a complex result", "the constant expression (-8) ** 0.5 is a complex number, which kernels do not have"),
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


# -- nesting: bounded, with a clear error, never a RecursionError ------------------------------
HEADER = "import cutile\nimport cutile.core as ct\nfrom cutile.core import Mut, Tensor, f32\n\n"


def kernel_from_source(tmp_path: Path, name: str, text: str) -> Any:
    """The kernel ``k`` of a module written to a file (the front end reads sources)."""
    path = tmp_path / f"{name}.py"
    path.write_text(HEADER + text)
    spec = importlib.util.spec_from_file_location(f"frontend_rules_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.k


def device_chain(tmp_path: Path, depth: int) -> Any:
    """A kernel calling device function g{depth-1}, which calls g{depth-2}, ... g0."""
    functions = ["@cutile.function\ndef g0(t):\n    return t + 1.0\n"]
    functions += [f"@cutile.function\ndef g{i}(t):\n    return g{i - 1}(t) * 1.0  # <- level {i}\n"
                  for i in range(1, depth)]
    kernel = f"@cutile.entry\ndef k(z: Mut[Tensor[f32, ['B']]]):\n    z.store(g{depth - 1}(z.load()))\n"
    return kernel_from_source(tmp_path, f"chain{depth}", "\n".join([*functions, kernel]))


def one_expression(tmp_path: Path, name: str, expression: str) -> Any:
    return kernel_from_source(tmp_path, name, f"@cutile.entry\ndef k(z: Mut[Tensor[f32, ['B']]]):\n"
                                              f"    t = z.load()\n    z.store({expression})  # <- the expression\n")


def runs_on_both_paths(kernel: Any, expected: Callable[[np.ndarray], np.ndarray]) -> None:
    """``kernel`` compiles for sm_90 (lowered, printed, through tileiras) and gives
    ``expected(x)`` on the interpreter (x and the expectation in f32, as the kernel
    computes, so they agree exactly)."""
    compiled = cutile.compile(kernel, api.meta([64]).partition([64]), arch="sm_90")
    assert compiled.cubin and "return" in compiled.mlir and compiled.ir_text
    x = np.random.default_rng(4).uniform(-1, 1, 64).astype(np.float32)
    z = kernel(api.from_numpy(x).partition([64])).sync()
    np.testing.assert_array_equal(z.to_numpy(), expected(x))


def repeated_sum(x: np.ndarray, terms: int) -> np.ndarray:
    """x + x + ... + x (``terms`` of them), left to right in f32."""
    total = x
    for _ in range(terms - 1):
        total = total + x
    return total


def refused_for_nesting(kernel: Any, filename: Path) -> TileSyntaxError:
    errors = []
    for path in ("compile for sm_90", "interpreter"):
        with pytest.raises(TileSyntaxError) as info:
            if path == "interpreter":
                kernel(api.zeros([64]).partition([64])).sync()
            else:
                cutile.compile(kernel, api.meta([64]).partition([64]), arch="sm_90")
        error = info.value
        assert f"the kernel nests more than {MAX_NESTING} levels deep here" in error.message, (path, error.message)
        assert error.location is not None and error.location.filename == str(filename), (path, str(error))
        assert str(error).splitlines()[-1].strip().startswith("^"), (path, str(error))
        errors.append(error)
    assert errors[0].location == errors[1].location
    return errors[0]


def test_a_device_function_chain_below_the_nesting_limit_compiles(tmp_path: Path) -> None:
    # Each function is three levels: g(t) * 1.0, the call g(t), and g's body.
    depth = MAX_NESTING // 3 - 2
    runs_on_both_paths(device_chain(tmp_path, depth), lambda x: x + np.float32(1.0))


def test_blocks_nested_up_to_the_limit_lower_print_and_interpret(tmp_path: Path) -> None:
    # Each function holds a run-time if around the call of the next: a region inside a
    # region, 40 deep, through the interpreter, lowering, the Tile IR printer and tileiras.
    depth = MAX_NESTING // 3 - 2
    functions = ["@cutile.function\ndef g0(t, s):\n    return t + 1.0\n"]
    functions += [f"@cutile.function\ndef g{i}(t, s):\n    if s > {i}.0:\n        t = g{i - 1}(t, s)\n"
                  f"    else:\n        t = t * 2.0\n    return t\n" for i in range(1, depth)]
    kernel = kernel_from_source(tmp_path, "ifs", "\n".join([*functions, (
        f"@cutile.entry\ndef k(z: Mut[Tensor[f32, ['B']]]):\n    t = z.load()\n"
        f"    z.store(g{depth - 1}(t * 1.0, ct.sum(t)))\n")]))
    compiled = cutile.compile(kernel, api.meta([64]).partition([64]), arch="sm_90")
    assert compiled.cubin and compiled.mlir.count("if ") >= depth - 1
    for scale in (0.1, 1.0):  # sums of about 3 and 32: the innermost else taken at different depths
        x = (np.random.default_rng(5).uniform(0, 1, 64) * scale).astype(np.float32)
        total = float(x.sum(dtype=np.float32))
        level = depth - 1
        while level >= 1 and total > level:
            level -= 1
        expected = x + np.float32(1.0) if level == 0 else x * np.float32(2.0)
        z = kernel(api.from_numpy(x).partition([64])).sync()
        np.testing.assert_array_equal(z.to_numpy(), expected)


def test_a_122_deep_device_function_chain_gets_the_nesting_error(tmp_path: Path) -> None:
    error = refused_for_nesting(device_chain(tmp_path, 122), tmp_path / "chain122.py")
    assert "# <- level" in error.location.excerpt()  # type: ignore[union-attr]  # inside the chain, at a call


def test_a_long_sum_is_not_nesting(tmp_path: Path) -> None:
    # a + b + c + ... nests to the left in Python's AST; the front end walks it as a loop.
    runs_on_both_paths(one_expression(tmp_path, "sum488", " + ".join(["t"] * 488)), lambda x: repeated_sum(x, 488))


def test_a_long_sum_in_a_lambda_is_not_nesting(tmp_path: Path) -> None:
    kernel = kernel_from_source(tmp_path, "lambda_sum", "add_up = lambda t: " + " + ".join(["t"] * 1500) + "\n\n"
                                "@cutile.entry\ndef k(z: Mut[Tensor[f32, ['B']]]):\n    z.store(add_up(z.load()))\n")
    runs_on_both_paths(kernel, lambda x: repeated_sum(x, 1500))


def test_an_expression_below_the_nesting_limit_compiles_and_one_above_is_refused(tmp_path: Path) -> None:
    runs_on_both_paths(one_expression(tmp_path, "negate120", "- " * 120 + "t"), lambda x: x)
    error = refused_for_nesting(one_expression(tmp_path, "negate300", "- " * 300 + "t"), tmp_path / "negate300.py")
    assert error.location is not None and "# <- the expression" in error.location.excerpt()


def test_past_pythons_stack_the_front_end_still_reports_the_nesting(tmp_path: Path) -> None:
    kernel = device_chain(tmp_path, 40)  # within MAX_NESTING, but Python's stack is nearly used up here
    z = api.zeros([64]).partition([64])

    def deep(levels: int) -> None:
        if levels:
            deep(levels - 1)
            return
        with pytest.raises(TileSyntaxError, match="the kernel nests too deeply for Python's stack"):
            kernel(z).compile()

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(len(inspect.stack()) + 400)
    try:
        deep(150)
    finally:
        sys.setrecursionlimit(limit)


def test_the_same_kernel_text_in_two_files_is_located_in_each_file(tmp_path: Path) -> None:
    # Their code objects compare equal (same code, same first line): the source
    # cache must still tell the files apart.
    text = "@cutile.entry\ndef k(z: Mut[Tensor[f32, ['B']]]):\n    z.store(z.load() + ~1.5)\n"
    for name in ("first", "second"):
        kernel = kernel_from_source(tmp_path, name, text)
        with pytest.raises(TileTypeError) as info:
            cutile.compile(kernel, api.meta([64]).partition([64]), arch="sm_90")
        assert info.value.location is not None and info.value.location.filename == str(tmp_path / f"{name}.py")
