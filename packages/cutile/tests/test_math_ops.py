"""The activation and math functions (sigmoid, silu, erf, gelu, log1p, expm1, isnan,
isinf, clamp) and the shape functions expand_dims, flip and insert: the interpreter
against numpy float64 on random inputs with tails and special values in f32, f16 and
bf16; the lowering compiled for sm_90 and sm_100; erf's approximation (the formula the
GPU runs, evaluated in f32) within its stated error; misuse refused at the line.

Kernels are built in factories, so annotations are evaluated at definition (no
``from __future__ import annotations``)."""

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import cutile
import cutile.core as ct
from cutile import api
from cutile.core import Mut, Tensor, bf16, f16, f32, f64, i32, load_tile_like
from cutile_compiler._errors import TileCompilerError, TileTypeError
from cutile_compiler._opdefs.elementwise import (
    ERF_MAX_ERROR, NumpyMath, erf_formula, expm1_formula, gelu_tanh_formula, log1p_formula, sigmoid_formula, silu_formula)

RNG = np.random.default_rng(16)
BOTH_BACKENDS = True
SIZE, TILE = 300, 64  # 300 = 4 full tiles and a tail of 44
TOLERANCE = {f32: 2e-6, f16: 1e-3, bf16: 8e-3}
DTYPES = [f32, f16, bf16]

_erf = np.vectorize(math.erf, otypes=[np.float64])


def _sigmoid(v: Any) -> Any:
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-v))


UNARY: list[tuple[str, Callable[[Any], Any], Callable[[Any], Any], tuple[float, float]]] = [
    ("sigmoid", ct.sigmoid, _sigmoid, (-20, 20)),
    ("silu", ct.silu, lambda v: v * _sigmoid(v), (-20, 20)),
    ("erf", ct.erf, _erf, (-5, 5)),
    ("gelu", ct.gelu, lambda v: 0.5 * v * (1 + _erf(v / math.sqrt(2))), (-6, 6)),
    ("gelu_tanh", lambda t: ct.gelu(t, approximate="tanh"),
     lambda v: 0.5 * v * (1 + np.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v ** 3))), (-6, 6)),
    ("log1p", ct.log1p, np.log1p, (-0.99, 20)),
    ("expm1", ct.expm1, np.expm1, (-10, 10)),
    ("clamp", lambda t: ct.clamp(t, -1.5, 2), lambda v: np.clip(v, -1.5, 2), (-4, 4)),
]


def unary_kernel(fn: Any, dtype: Any, out_dtype: Any) -> Any:
    @cutile.entry
    def kernel(z: Mut[Tensor[out_dtype, ["B"]]], x: Tensor[dtype, [-1]]):
        z.store(fn(load_tile_like(x, z)))

    return kernel


def run_unary(fn: Any, xs: np.ndarray, dtype: Any, out_dtype: Any) -> np.ndarray:
    kernel = unary_kernel(fn, dtype, out_dtype)
    poison = True if out_dtype is ct.bool_ else 12345
    z = api.full([xs.size], poison, dtype=out_dtype).partition([TILE])
    z, _ = kernel(z, api.from_numpy(xs, dtype)).sync()
    return z.to_numpy()


def _inputs(bounds: tuple[float, float], dtype: Any) -> np.ndarray:
    """Random values in ``bounds`` and, among them, small ones (where log1p and expm1
    lose accuracy unless computed carefully), rounded to ``dtype``."""
    values = RNG.uniform(*bounds, size=SIZE)
    values[:40] = RNG.choice([-1, 1], 40) * 10.0 ** RNG.uniform(-7, -2, 40)
    values = np.clip(values, *bounds)
    return values.astype(np.dtype(dtype.numpy_name))


@pytest.mark.parametrize("name, fn, reference, bounds", UNARY, ids=[u[0] for u in UNARY])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_against_float64(name: str, fn: Any, reference: Any, bounds: tuple[float, float], dtype: Any) -> None:
    xs = _inputs(bounds, dtype)
    got = run_unary(fn, xs, dtype, dtype).astype(np.float64)
    expected = reference(xs.astype(np.float64))
    # one rounding of the exact result to the dtype (relative); on the GPU, erf's
    # approximation adds its absolute error (times |x| / 2 in gelu)
    atol = 4 * ERF_MAX_ERROR if name in ("erf", "gelu") else TOLERANCE[dtype] * 1e-3
    np.testing.assert_allclose(got, expected, rtol=TOLERANCE[dtype], atol=atol)


SPECIAL = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e30, -1e30, 1e-30, -1e-30, 88.0, -88.0, 100.0, -100.0,
                    -1.0, 1.0, 0.5], dtype=np.float64)


@pytest.mark.parametrize("name, fn, reference", [u[:3] for u in UNARY if u[0] != "clamp"] + [
    ("clamp", lambda t: ct.clamp(t, -1.5, 2), lambda v: np.minimum(np.maximum(v, -1.5), 2))],
    ids=[u[0] for u in UNARY])
def test_special_values(name: str, fn: Any, reference: Any) -> None:
    # (clamp is minimum and maximum: NaN is their case, not its)
    xs = np.resize(SPECIAL[~np.isnan(SPECIAL)] if name == "clamp" else SPECIAL, 64).astype(np.float32)
    got = run_unary(fn, xs, f32, f32).astype(np.float64)
    with np.errstate(all="ignore"):
        expected = reference(xs.astype(np.float64)).astype(np.float32).astype(np.float64)
    # (results below f32's smallest normal may flush to zero on the GPU)
    atol = 4 * ERF_MAX_ERROR if name in ("erf", "gelu") else float(np.finfo(np.float32).tiny)
    np.testing.assert_allclose(got, expected, rtol=2e-6, atol=atol, equal_nan=True)


_TINY = float(np.finfo(np.float32).tiny)
#: (name, formula, exact function, absolute tolerance): silu's e^-x overflows below
#: x = -88, where it gives -0 for about x * e^x (below 1e-36); tanh-gelu's tail for
#: x below -5 (results below 1e-11) amplifies the f32 rounding of its argument through
#: e^(-2u), a few parts in 1e6 of results that small
FORMULAS = [("sigmoid", sigmoid_formula, _sigmoid, _TINY), ("silu", silu_formula, lambda v: v * _sigmoid(v), 1e-36),
            ("log1p", log1p_formula, np.log1p, _TINY), ("expm1", expm1_formula, np.expm1, _TINY),
            ("gelu_tanh", gelu_tanh_formula, UNARY[4][2], 1e-15)]


@pytest.mark.interpreter_only
@pytest.mark.parametrize("name, formula, reference, atol", FORMULAS, ids=[f[0] for f in FORMULAS])
def test_lowered_formulas_in_f32(name: str, formula: Any, reference: Any, atol: float) -> None:
    """The formulas the GPU computes, evaluated with f32 steps on numpy (the lowering
    emits the same steps as Tile IR): within a few f32 roundings of the exact function
    on special values, tiny and huge magnitudes and random values."""
    magnitudes = np.geomspace(1e-38, 3e38, 20000)
    xs = np.concatenate([SPECIAL, magnitudes, -magnitudes, RNG.uniform(-30, 30, 20000)]).astype(np.float32)
    got = formula(NumpyMath(np.float32), xs).astype(np.float64)
    with np.errstate(all="ignore"):
        expected = reference(xs.astype(np.float64)).astype(np.float32).astype(np.float64)
    np.testing.assert_allclose(got, expected, rtol=4e-6, atol=atol, equal_nan=True)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_isnan_isinf(dtype: Any) -> None:
    xs = RNG.uniform(-3, 3, size=SIZE)
    xs[RNG.choice(SIZE, 30, replace=False)] = RNG.choice([np.nan, np.inf, -np.inf], 30)
    xs = xs.astype(np.dtype(dtype.numpy_name))
    for fn, reference in ((ct.isnan, np.isnan), (ct.isinf, np.isinf)):
        got = run_unary(fn, xs, dtype, ct.bool_)
        np.testing.assert_array_equal(got, reference(xs.astype(np.float64)))


@pytest.mark.interpreter_only
def test_erf_approximation_error() -> None:
    """The formula erf lowers to, evaluated with f32 steps over every f32 of [-6, 6] at a
    step of 2**-16 and at tiny values, is within ERF_MAX_ERROR of the exact erf."""
    xs = np.concatenate([np.arange(-6, 6, 2.0 ** -16), np.geomspace(1e-38, 1e-2, 4000)]).astype(np.float32)
    got = erf_formula(NumpyMath(np.float32), xs).astype(np.float64)
    exact = _erf(xs.astype(np.float64))
    error = np.abs(got - exact)
    assert error.max() < ERF_MAX_ERROR
    assert (error / np.maximum(np.abs(exact), 1e-300)).max() < 5e-6  # near 0 too: erf(x) ~ 1.128 x


def test_numbers_fold() -> None:
    """The functions on Python numbers are computed at compile time, with the same meaning."""
    @cutile.entry
    def kernel(z: Mut[Tensor[f32, ["B"]]]):
        z.store(ct.full((TILE,), ct.sigmoid(0.5) + ct.erf(0.5) + ct.log1p(1e-9) + ct.clamp(7, 0, 3), f32))

    z = api.full([TILE], 0, dtype=f32).partition([TILE])
    z = kernel(z).sync()
    expected = 1 / (1 + math.exp(-0.5)) + math.erf(0.5) + math.log1p(1e-9) + 3
    np.testing.assert_allclose(z.to_numpy(), np.float32(expected), rtol=1e-7)


@cutile.function
def _all_math(t: Any) -> Any:
    total = ct.sigmoid(t) + ct.silu(t) + ct.erf(t) + ct.gelu(t) + ct.gelu(t, approximate="tanh")
    total = total + ct.log1p(abs(t)) + ct.expm1(t) + ct.clamp(t, -1, 1) + ct.flip(t)
    return ct.where(ct.isnan(t) | ct.isinf(t), 0, total)


@pytest.mark.interpreter_only
@pytest.mark.parametrize("arch", ["sm_90", "sm_100"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_compiles(arch: str, dtype: Any) -> None:
    kernel = unary_kernel(_all_math, dtype, dtype)
    compiled = cutile.compile(kernel, api.meta([SIZE], dtype=dtype).partition([TILE]), api.meta([SIZE], dtype=dtype),
                              arch=arch)
    assert compiled.cubin[:4] == b"\x7fELF"
    for word in ("exp", "log", "select", "cat"):  # (every function: erf, sigmoid, gelu... are formulas)
        assert word in compiled.mlir


# -- expand_dims, flip, insert ----------------------------------------------------------------
def test_expand_dims_and_flip() -> None:
    @cutile.entry
    def kernel(z: Mut[Tensor[f32, ["M", "N"]]], x: Tensor[f32, [-1, -1]], v: Tensor[f32, [-1]]):
        t = load_tile_like(x, z)
        row = v.load(index=(ct.bid(1),), shape=(8,))
        col = v.load(index=(ct.bid(0),), shape=(16,))
        z.store(ct.flip(t, axis=1) * 10 + ct.flip(t, 0) + ct.expand_dims(row, 0) + ct.expand_dims(col, axis=-1)
                + ct.flip(t) * 100 + t.flip((0, -1)) * 1000)

    xs = RNG.standard_normal((40, 24)).astype(np.float32)
    vs = RNG.standard_normal(64).astype(np.float32)
    z = api.full([40, 24], np.nan, dtype=f32).partition([16, 8])
    z, _, _ = kernel(z, api.from_numpy(xs), api.from_numpy(vs)).sync()
    expected = np.empty((40, 24))
    padded = np.zeros((48, 24))
    padded[:40] = xs
    for bi in range(3):
        for bj in range(3):
            block = padded[16 * bi:16 * bi + 16, 8 * bj:8 * bj + 8]
            out = (block[:, ::-1] * 10 + block[::-1, :] + vs[8 * bj:8 * bj + 8][None, :]
                   + vs[16 * bi:16 * bi + 16][:, None] + block[::-1, ::-1] * 1100)
            rows = min(16, 40 - 16 * bi)
            expected[16 * bi:16 * bi + rows, 8 * bj:8 * bj + 8] = out[:rows]
    np.testing.assert_allclose(z.to_numpy(), expected, rtol=1e-6, atol=1e-3)
    for arch in ("sm_90", "sm_100"):
        cutile.compile(kernel, api.meta([40, 24], dtype=f32).partition([16, 8]), api.meta([40, 24], dtype=f32),
                       api.meta([64], dtype=f32), arch=arch)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_insert(dtype: Any) -> None:
    @cutile.entry
    def kernel(z: Mut[Tensor[dtype, ["B"]]], x: Tensor[dtype, [-1]], k: i32):
        t = load_tile_like(x, z)
        t = ct.insert(t, (k,), ct.full((8,), -7, dtype))  # a run-time index
        z.store(ct.insert(t, (1,), 5))  # a number: a unit sub-tile

    xs = RNG.standard_normal(SIZE).astype(np.dtype(dtype.numpy_name))
    z = api.full([SIZE], 99, dtype=dtype).partition([TILE])
    z, _ = kernel(z, api.from_numpy(xs, dtype), 3).sync()
    expected = xs.astype(np.float64).copy()
    for start in range(0, SIZE, TILE):
        expected[start + 24:start + 32] = -7
        expected[start + 1] = 5
    np.testing.assert_array_equal(z.to_numpy().astype(np.float64), expected)
    compiled = cutile.compile(kernel, api.meta([SIZE], dtype=dtype).partition([TILE]), api.meta([SIZE], dtype=dtype),
                              3, arch="sm_100")
    assert "insert" in compiled.mlir


def _refused(kernel: Any, args: Callable[[], list[Any]], marker: str, message: str) -> None:
    import inspect

    lines, start = inspect.getsourcelines(kernel.function)
    line = start + next(i for i, text in enumerate(lines) if marker in text)
    for path in ("sm_90", "interpreter"):
        with pytest.raises(TileTypeError) as info:
            if path == "interpreter":
                kernel(*args()).sync()
            else:
                cutile.compile(kernel, *args(), arch=path)
        assert message in info.value.message, info.value.message
        assert info.value.location is not None and info.value.location.line == line
        assert str(info.value).splitlines()[-1].strip().startswith("^")


@pytest.mark.interpreter_only
def test_misuse_is_located() -> None:
    @cutile.entry
    def bad_insert(z: Mut[Tensor[f32, ["B"]]]):
        z.store(ct.insert(ct.zeros((TILE,), f32), (8,), ct.ones((8,), f32)))  # mark

    _refused(bad_insert, lambda: [api.zeros([TILE]).partition([TILE])], "# mark",
             "insert: index 8 is out of range along axis 0")

    @cutile.entry
    def bad_gelu(z: Mut[Tensor[f32, ["B"]]]):
        z.store(ct.gelu(ct.zeros((TILE,), f32), approximate="fast"))  # mark

    _refused(bad_gelu, lambda: [api.zeros([TILE]).partition([TILE])], "# mark", "approximate must be 'none' or 'tanh'")

    @cutile.entry
    def f64_erf(z: Mut[Tensor[f64, ["B"]]]):
        z.store(ct.erf(ct.zeros((TILE,), f64)))  # mark

    _refused(f64_erf, lambda: [api.zeros([TILE], dtype=f64).partition([TILE])], "# mark", "erf: f64 tiles are not")

    @cutile.entry
    def int_sigmoid(z: Mut[Tensor[i32, ["B"]]]):
        z.store(ct.sigmoid(ct.zeros((TILE,), i32)))  # mark

    _refused(int_sigmoid, lambda: [api.zeros([TILE], dtype=i32).partition([TILE])], "# mark",
             "sigmoid needs floating-point operands")

    @cutile.entry
    def bad_axis(z: Mut[Tensor[f32, ["B"]]]):
        z.store(ct.reshape(ct.expand_dims(ct.zeros((TILE,), f32), 2), (TILE,)))  # mark

    _refused(bad_axis, lambda: [api.zeros([TILE]).partition([TILE])], "# mark", "axis 2 is out of range")


@pytest.mark.interpreter_only
def test_insert_needs_bytecode_13_4() -> None:
    """Older bytecode has no insert op: the lowering says so at the kernel's line."""
    from cutile_compiler import lower_kernel

    @cutile.entry
    def kernel(z: Mut[Tensor[f32, ["B"]]]):
        z.store(ct.insert(ct.zeros((TILE,), f32), (1,), ct.ones((8,), f32)))  # mark

    launch = kernel(api.zeros([TILE]).partition([TILE]))
    spec, _ = launch.specialization()
    launch.cancel()
    with pytest.raises(TileCompilerError, match="insert needs Tile IR bytecode 13.4") as info:
        lower_kernel(kernel.kernel_ir(spec), "13.3", "sm_100")
    assert info.value.location is not None and "# mark" in str(info.value)
