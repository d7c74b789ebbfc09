"""Every DSL operation inside a kernel, against numpy on random inputs.

Kernels here are built inside factories, so this file evaluates annotations at
definition (no ``from __future__ import annotations``): string annotations
could not see the factories' local dtypes.

Kernels are built by small factories so that one source covers many ops; the
op is a closure constant of the kernel. Outputs are poisoned before each run,
sizes have tails, and several dtypes are covered.
"""


from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import cutile
import cutile.core as ct
from cutile import api
from cutile.core import Constant, Mut, Tensor, bf16, f16, f32, i32, load_tile_like

RNG = np.random.default_rng(1234)
BOTH_BACKENDS = True


def run_unary(fn: Any, xs: np.ndarray, dtype: Any, out_dtype: Any, tile: int = 64) -> np.ndarray:
    @cutile.entry
    def kernel(z: Mut[Tensor[out_dtype, ["B"]]], x: Tensor[dtype, [-1]]):
        z.store(fn(load_tile_like(x, z)))

    z = api.full([xs.size], 0, dtype=out_dtype).partition([tile])
    z, _ = kernel(z, api.from_numpy(xs, dtype)).sync()
    return z.to_numpy()


def run_binary(fn: Any, xs: np.ndarray, ys: np.ndarray, dtype: Any, out_dtype: Any, tile: int = 64) -> np.ndarray:
    @cutile.entry
    def kernel(z: Mut[Tensor[out_dtype, ["B"]]], x: Tensor[dtype, [-1]], y: Tensor[dtype, [-1]]):
        z.store(fn(load_tile_like(x, z), load_tile_like(y, z)))

    z = api.full([xs.size], 0, dtype=out_dtype).partition([tile])
    z, _, _ = kernel(z, api.from_numpy(xs, dtype), api.from_numpy(ys, dtype)).sync()
    return z.to_numpy()


UNARY_FLOAT: list[tuple[str, Callable[[Any], Any], Callable[[Any], Any], tuple[float, float]]] = [
    ("exp", ct.exp, np.exp, (-3, 3)), ("exp2", ct.exp2, np.exp2, (-3, 3)),
    ("log", ct.log, np.log, (0.1, 10)), ("log2", ct.log2, np.log2, (0.1, 10)),
    ("sqrt", ct.sqrt, np.sqrt, (0, 10)), ("rsqrt", ct.rsqrt, lambda v: 1 / np.sqrt(v), (0.1, 10)),
    ("sin", ct.sin, np.sin, (-4, 4)), ("cos", ct.cos, np.cos, (-4, 4)), ("tan", ct.tan, np.tan, (-1, 1)),
    ("sinh", ct.sinh, np.sinh, (-2, 2)), ("cosh", ct.cosh, np.cosh, (-2, 2)), ("tanh", ct.tanh, np.tanh, (-3, 3)),
    ("floor", ct.floor, np.floor, (-5, 5)), ("ceil", ct.ceil, np.ceil, (-5, 5)),
    ("neg", lambda t: -t, np.negative, (-5, 5)), ("abs", abs, np.abs, (-5, 5)),
]


@pytest.mark.parametrize("name, fn, reference, bounds", UNARY_FLOAT, ids=[u[0] for u in UNARY_FLOAT])
@pytest.mark.parametrize("dtype", [f32, f16, bf16], ids=str)
def test_unary_math(name: str, fn: Any, reference: Any, bounds: tuple[float, float], dtype: Any) -> None:
    xs = RNG.uniform(*bounds, size=300).astype(np.dtype(dtype.numpy_name))
    got = run_unary(fn, xs, dtype, dtype).astype(np.float64)
    expected = reference(xs.astype(np.float64))
    tolerance = {f32: 1e-6, f16: 2e-3, bf16: 1.6e-2}[dtype]
    np.testing.assert_allclose(got, expected, rtol=tolerance, atol=tolerance)


BINARY_FLOAT = [
    ("add", lambda a, b: a + b, np.add), ("sub", lambda a, b: a - b, np.subtract),
    ("mul", lambda a, b: a * b, np.multiply), ("div", lambda a, b: a / b, np.divide),
    ("floordiv", lambda a, b: a // b, np.floor_divide), ("mod", lambda a, b: a % b, np.mod),
    ("pow", lambda a, b: abs(a) ** b, lambda a, b: np.abs(a) ** b),
    ("minimum", ct.minimum, np.minimum), ("maximum", ct.maximum, np.maximum),
    ("atan2", ct.atan2, np.arctan2), ("min", min, np.minimum), ("max", max, np.maximum),
    ("fma", lambda a, b: ct.fma(a, b, a), lambda a, b: a * b + a),
]


@pytest.mark.parametrize("name, fn, reference", BINARY_FLOAT, ids=[b[0] for b in BINARY_FLOAT])
def test_binary_float(name: str, fn: Any, reference: Any) -> None:
    xs = RNG.uniform(-4, 4, 333).astype(np.float32)
    ys = RNG.uniform(0.5, 3, 333).astype(np.float32) * RNG.choice([-1, 1], 333).astype(np.float32)
    got = run_binary(fn, xs, ys, f32, f32)
    np.testing.assert_allclose(got, reference(xs.astype(np.float64), ys.astype(np.float64)), rtol=1e-5, atol=1e-5)


BINARY_INT = [
    ("add", lambda a, b: a + b, np.add), ("sub", lambda a, b: a - b, np.subtract),
    ("mul", lambda a, b: a * b, np.multiply), ("floordiv", lambda a, b: a // b, np.floor_divide),
    ("mod", lambda a, b: a % b, np.mod), ("and", lambda a, b: a & b, np.bitwise_and),
    ("or", lambda a, b: a | b, np.bitwise_or), ("xor", lambda a, b: a ^ b, np.bitwise_xor),
    ("shl", lambda a, b: a << (b & 7), lambda a, b: a << (b & 7)),
    ("shr", lambda a, b: a >> (b & 7), lambda a, b: a >> (b & 7)),
    ("maximum", ct.maximum, np.maximum), ("minimum", ct.minimum, np.minimum),
]


@pytest.mark.parametrize("name, fn, reference", BINARY_INT, ids=[b[0] for b in BINARY_INT])
def test_binary_int_follows_python_semantics(name: str, fn: Any, reference: Any) -> None:
    xs = RNG.integers(-1000, 1000, 200).astype(np.int32)
    ys = RNG.integers(1, 50, 200).astype(np.int32) * RNG.choice([-1, 1], 200).astype(np.int32)
    got = run_binary(fn, xs, ys, i32, i32)
    np.testing.assert_array_equal(got, reference(xs, ys).astype(np.int32))


COMPARISONS = [("lt", lambda a, b: a < b, np.less), ("le", lambda a, b: a <= b, np.less_equal),
               ("gt", lambda a, b: a > b, np.greater), ("ge", lambda a, b: a >= b, np.greater_equal),
               ("eq", lambda a, b: a == b, np.equal), ("ne", lambda a, b: a != b, np.not_equal)]


@pytest.mark.parametrize("name, fn, reference", COMPARISONS, ids=[c[0] for c in COMPARISONS])
def test_comparisons_and_where(name: str, fn: Any, reference: Any) -> None:
    xs = RNG.integers(-3, 3, 150).astype(np.float32)
    ys = RNG.integers(-3, 3, 150).astype(np.float32)
    got = run_binary(lambda a, b: ct.where(fn(a, b), a, b * 10), xs, ys, f32, f32)
    np.testing.assert_array_equal(got, np.where(reference(xs, ys), xs, ys * 10))


def test_python_scalars_are_weakly_typed() -> None:
    xs = RNG.standard_normal(100).astype(np.float16)
    got = run_unary(lambda t: t * 2 + 1, xs, f16, f16)
    np.testing.assert_array_equal(got, (xs * np.float16(2) + np.float16(1)).astype(np.float16))
    ints = RNG.integers(0, 100, 100).astype(np.int32)
    np.testing.assert_array_equal(run_unary(lambda t: (t + 3) // 2 - t % 7, ints, i32, i32), (ints + 3) // 2 - ints % 7)


def test_mixed_dtypes_promote_losslessly() -> None:
    xs = RNG.standard_normal(100).astype(np.float16)
    got = run_binary(lambda a, b: a.astype(f32) + b, xs, xs, f16, f32)
    np.testing.assert_allclose(got, xs.astype(np.float32) * 2)


@pytest.mark.parametrize("target, numpy_target", [(i32, np.int32), (f16, np.float16), (bf16, ml_dtypes.bfloat16)])
def test_astype(target: Any, numpy_target: Any) -> None:
    xs = RNG.uniform(-100, 100, 128).astype(np.float32)
    got = run_unary(lambda t: t.astype(target).astype(f32), xs, f32, f32)
    expected = np.trunc(xs) if target is i32 else xs.astype(numpy_target).astype(np.float32)
    np.testing.assert_array_equal(got, expected)


def test_bitcast_round_trip() -> None:
    xs = RNG.standard_normal(64).astype(np.float32)
    got = run_unary(lambda t: ct.bitcast(ct.bitcast(t, i32) ^ -(1 << 31), f32), xs, f32, f32)
    np.testing.assert_array_equal(got, -xs)


@cutile.entry
def reductions(out: Mut[Tensor[f32, ["R", 8]]], x: Tensor[f32, [-1, -1]], KIND: Constant[int]):
    t = load_tile_like(x, out)
    bm, bn, _ = ct.get_tile_block_id()
    if KIND == 0:
        r = ct.sum(t, axis=1, keepdims=True)
    elif KIND == 1:
        r = ct.max(t, axis=1, keepdims=True)
    elif KIND == 2:
        r = ct.min(t, axis=1, keepdims=True)
    elif KIND == 3:
        r = ct.prod(t, axis=1, keepdims=True)
    elif KIND == 4:
        r = ct.argmax(t, axis=1, keepdims=True).astype(f32)
    else:
        r = ct.argmin(t, axis=1, keepdims=True).astype(f32)
    out.store(ct.broadcast_to(r, (16, 8)))


@pytest.mark.parametrize("kind, reference", [(0, np.sum), (1, np.max), (2, np.min), (3, np.prod),
                                             (4, np.argmax), (5, np.argmin)])
def test_reductions(kind: int, reference: Any) -> None:
    xs = RNG.uniform(0.5, 1.5, (40, 8)).astype(np.float32)
    out = api.full([40, 8], np.nan).partition([16, 8])
    out, _ = reductions(out, api.from_numpy(xs), KIND=kind).sync()
    expected = np.repeat(reference(xs, axis=1)[:, None], 8, axis=1)
    np.testing.assert_allclose(out.to_numpy(), expected, rtol=1e-6)


# The GPU's maxf/minf (no propagate_nan) take NaN as a missing value; max/min reduce from a
# NaN identity and argmax/argmin under a total order (NaN below every number, ties to the
# first position), so no reduction tree changes the result. These run on both backends.
NAN_ROWS = np.array([[np.nan, 1.0, 3.0, np.nan, -2.0, 0.5, 3.0, 1.0],
                     [np.nan] * 8,
                     [np.nan, -np.inf, -np.inf, np.nan, -np.inf, -np.inf, -np.inf, -np.inf],
                     [2.0, np.nan, 2.0, 7.0, np.nan, 7.0, -1.0, np.inf],
                     [1.0, 1.0, np.nan, np.nan, np.nan, np.nan, np.nan, np.nan],
                     [np.nan, np.nan, np.nan, np.nan, np.nan, np.nan, 5.0, np.nan],
                     [-np.inf] * 8,
                     [np.inf, np.nan, np.inf, np.nan, np.inf, np.nan, np.inf, np.nan]], dtype=np.float32)


@pytest.mark.parametrize("kind, expected", [
    (1, [3.0, np.nan, -np.inf, np.inf, 1.0, 5.0, -np.inf, np.inf]),  # max: NaN left out; all NaN: NaN
    (2, [-2.0, np.nan, -np.inf, -1.0, 1.0, 5.0, -np.inf, np.inf]),  # min
    (4, [2, 0, 1, 7, 0, 6, 0, 0]),  # argmax: the first largest number; all NaN: the first position
    (5, [4, 0, 1, 6, 0, 6, 0, 0])])  # argmin
def test_reductions_take_nan_as_missing(kind: int, expected: list[float]) -> None:
    rows = np.resize(NAN_ROWS, (16, 8))
    np.testing.assert_array_equal(_nan_as_missing(rows, kind), np.resize(np.array(expected, np.float32), 16))
    # every rotation of the columns too: a pick that depended on the reduction's tree would differ
    for shift in range(8):
        xs = np.roll(rows, shift, axis=1)
        out = api.full([16, 8], 12345.0).partition([16, 8])
        out, _ = reductions(out, api.from_numpy(xs), KIND=kind).sync()
        np.testing.assert_array_equal(out.to_numpy()[:, 0], _nan_as_missing(xs, kind), err_msg=f"rotated by {shift}")


def _nan_as_missing(xs: np.ndarray, kind: int) -> np.ndarray:
    """max (1), min (2), argmax (4) or argmin (5) of each row with NaN left out."""
    numbers = ~np.isnan(xs)
    with np.errstate(all="ignore"):
        extreme = np.where(numbers, xs, -np.inf if kind in (1, 4) else np.inf)
        best = extreme.max(axis=1) if kind in (1, 4) else extreme.min(axis=1)
    if kind in (1, 2):
        return np.where(numbers.any(axis=1), best, np.nan).astype(np.float32)
    return np.argmax(numbers & (xs == best[:, None]), axis=1).astype(np.float32)


def test_maximum_and_minimum_take_nan_as_missing() -> None:
    x = np.array([np.nan, 1.0, np.nan, -np.inf, 2.0, -3.0, np.nan, np.inf] * 8, dtype=np.float32)
    y = np.array([1.0, np.nan, np.nan, np.nan, 3.0, -4.0, -np.inf, np.nan] * 8, dtype=np.float32)

    @cutile.entry
    def both(hi: Mut[Tensor[f32, ["B"]]], lo: Mut[Tensor[f32, ["B"]]], a: Tensor[f32, [-1]], b: Tensor[f32, [-1]]):
        ta, tb = load_tile_like(a, hi), load_tile_like(b, hi)
        hi.store(ct.maximum(ta, tb))
        lo.store(ct.minimum(ta, tb))

    hi, lo = (api.full([64], 12345.0).partition([64]) for _ in range(2))
    hi, lo, _, _ = both(hi, lo, api.from_numpy(x), api.from_numpy(y)).sync()
    np.testing.assert_array_equal(hi.to_numpy(), np.fmax(x, y))  # NaN only where both are
    np.testing.assert_array_equal(lo.to_numpy(), np.fmin(x, y))
    assert np.isnan(hi.to_numpy()[2]) and hi.to_numpy()[0] == 1.0


@pytest.mark.parametrize("kind, reference", [("sum", np.cumsum), ("prod", np.cumprod)])
@pytest.mark.parametrize("reverse", [False, True])
def test_scans(kind: str, reference: Any, reverse: bool) -> None:
    xs = RNG.uniform(0.9, 1.1, 256).astype(np.float32)
    scan = ct.cumsum if kind == "sum" else ct.cumprod
    got = run_unary(lambda t: scan(t, 0, reverse), xs, f32, f32, tile=256)
    expected = reference(xs[::-1])[::-1] if reverse else reference(xs)
    np.testing.assert_allclose(got, expected, rtol=1e-5)


@cutile.entry
def shapes(out: Mut[Tensor[f32, [8, 16]]], x: Tensor[f32, [8, 16]]):
    t = x.load(index=(0, 0), shape=(8, 16))
    r = ct.reshape(t, (16, 8))
    tt = ct.transpose(r)  # (8, 16)
    left = ct.extract(tt, (0, 0), (8, 8))
    right = ct.extract(tt, (0, 1), (8, 8))
    joined = ct.cat(right, left, 1)
    row = ct.arange(16, f32)
    out.store(joined + ct.broadcast_to(ct.reshape(row, (1, 16)), (8, 16)) + ct.full((8, 16), 0.5, f32)
              - ct.zeros((8, 16), f32) * ct.ones((8, 16), f32))


def test_shape_operations() -> None:
    xs = RNG.standard_normal((8, 16)).astype(np.float32)
    out = api.full([8, 16], np.nan).partition([8, 16])
    out, _ = shapes(out, api.from_numpy(xs)).sync()
    tt = xs.reshape(16, 8).T
    expected = np.concatenate([tt[:, 8:], tt[:, :8]], axis=1) + np.arange(16, dtype=np.float32)[None, :] + 0.5
    np.testing.assert_allclose(out.to_numpy(), expected)


@cutile.entry
def control(out: Mut[Tensor[i32, ["B"]]], x: Tensor[i32, [-1]], N: Constant[int]):
    t = load_tile_like(x, out)
    acc = ct.zeros((64,), i32)
    count = 0
    for i in range(N):
        if i % 2 == 0:
            acc = acc + t
        else:
            acc = acc - 1
        count += 1
    j = 0
    while j < 5:
        j += 2
        if j == 4:
            continue
        acc = acc * 2
    for k in range(100):
        if k >= 3:
            break
        acc = acc + k
    for s in ct.static_range(3):
        acc = acc + s
    out.store(acc + count + j)


def test_control_flow() -> None:
    xs = RNG.integers(-10, 10, 100).astype(np.int32)
    out = api.full([100], 0, dtype=i32).partition([64])
    out, _ = control(out, api.from_numpy(xs), N=5).sync()
    acc = np.zeros(100, np.int64)
    for i in range(5):
        acc = acc + xs if i % 2 == 0 else acc - 1
    j = 0
    while j < 5:
        j += 2
        if j == 4:
            continue
        acc = acc * 2
    acc = acc + 0 + 1 + 2 + 0 + 1 + 2 + 5 + j
    np.testing.assert_array_equal(out.to_numpy(), acc.astype(np.int32))


@cutile.function
def scaled(t: Any, factor: Any) -> Any:
    return t * factor + 1


@cutile.entry
def uses_device_function(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]], alpha: f32):
    z.store(scaled(load_tile_like(x, z), alpha))


def test_device_functions_and_scalar_parameters() -> None:
    xs = RNG.standard_normal(200).astype(np.float32)
    z = api.zeros([200]).partition([128])
    z, _ = uses_device_function(z, api.from_numpy(xs), 2.5).sync()
    np.testing.assert_allclose(z.to_numpy(), xs * np.float32(2.5) + 1, rtol=1e-6)


@cutile.entry
def batched(z: Mut[Tensor[f32, [1, "BM", "BN"]]], a: Tensor[f32, [-1, -1, "K"]], b: Tensor[f32, [-1, "K", -1]],
            BM: Constant[int], BN: Constant[int], K: Constant[int]):
    i, m, n = ct.get_tile_block_id()
    ta = a.load(index=(i, m, 0), shape=(1, BM, K))
    tb = b.load(index=(i, 0, n), shape=(1, K, BN))
    z.store(ct.matmul(ta, tb))


def test_batched_matmul_tf32_free_f32() -> None:
    a = RNG.standard_normal((3, 40, 16)).astype(np.float32)
    b = RNG.standard_normal((3, 16, 24)).astype(np.float32)
    z = api.full([3, 40, 24], np.nan).partition([1, 32, 32])
    z, _, _ = batched(z, api.from_numpy(a), api.from_numpy(b)).sync()
    np.testing.assert_allclose(z.to_numpy(), a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)
