"""What peers' kernels write, accepted: dtype comparisons decided at compile time (per-dtype
branches), ``matmul`` and ``@`` with batch dimensions broadcast, ``t[:, None]``-style new
axes, and plain Python helper functions inlined without a decorator; each against numpy
float64 on the interpreter, compiled for sm_90 and sm_100, and its misuse refused at the
line with a caret.

Kernels are built in factories, so annotations are evaluated at definition (no
``from __future__ import annotations``)."""

import inspect
import statistics
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import cutile
import cutile.core as ct
from cutile import api
from cutile.core import Mut, Tensor, bf16, f16, f32, i32, load_tile_like
from cutile_compiler._errors import TileSyntaxError, TileTypeError

RNG = np.random.default_rng(1616)
BOTH_BACKENDS = True
DTYPES = [f32, f16, bf16]


def _np(dtype: Any) -> Any:
    return np.dtype(dtype.numpy_name)


def located(kernel: Any, args: Callable[[], list[Any]], marker: str, message: str,
            error: type[Exception] = TileSyntaxError, source: Any = None) -> None:
    """``kernel`` is refused with ``message`` at the line marked ``marker`` (with a caret)
    of its source (or of ``source``), by the compile for sm_90 and by the interpreter alike."""
    lines, start = inspect.getsourcelines(source or kernel.function)
    line = start + next(i for i, text in enumerate(lines) if marker in text)
    for path in ("sm_90", "interpreter"):
        with pytest.raises(error) as info:
            if path == "interpreter":
                kernel(*args()).sync()
            else:
                cutile.compile(kernel, *args(), arch=path)
        assert message in info.value.message, info.value.message  # type: ignore[attr-defined]
        assert info.value.location is not None, str(info.value)  # type: ignore[attr-defined]
        assert str(info.value).splitlines()[-1].strip().startswith("^"), str(info.value)
        assert info.value.location.line == line, str(info.value)  # type: ignore[attr-defined]


# -- dtype comparisons ------------------------------------------------------------------------
def dtype_branches(dtype: Any) -> Any:
    @cutile.entry
    def kernel(z: Mut[Tensor[f32, ["B"]]], x: Tensor[dtype, [-1]]):
        t = load_tile_like(x, z)
        if t.dtype == f32:
            code = 1.0
        elif x.dtype in (f16, bf16) and t.dtype != bf16:
            code = 2.0
        elif t.dtype is bf16 and t.dtype not in (f32,):
            code = 3.0
        else:
            code = 4.0
        wide = t.astype(f32) if t.dtype != f32 else t  # a per-dtype branch on tile code
        z.store(wide + code + (10.0 if z.dtype == x.dtype else 20.0))

    return kernel


@pytest.mark.parametrize("dtype, code", [(f32, 11.0), (f16, 22.0), (bf16, 23.0)], ids=str)
def test_dtype_comparisons_fold(dtype: Any, code: float) -> None:
    xs = RNG.integers(-8, 8, 200).astype(_np(dtype))
    z = api.full([200], np.nan, dtype=f32).partition([64])
    z, _ = dtype_branches(dtype)(z, api.from_numpy(xs, dtype)).sync()
    np.testing.assert_array_equal(z.to_numpy(), xs.astype(np.float32) + code)


@pytest.mark.interpreter_only
def test_a_tuple_holding_a_run_time_value_is_not_folded() -> None:
    # (n, 1) == (0, 1) cannot be decided at compile time: refused at the comparison, never False
    @cutile.entry
    def compares(z: Mut[Tensor[f32, [4]]], n: i32):
        a = z.load()
        if (n, 1) == (0, 1):  # mark
            a = a + 1.0
        z.store(a)

    located(compares, lambda: [api.zeros([4]).partition([4]), 0], "# mark",
            "'==': operands must be tiles or numbers, got tuple of 2", TileTypeError)


@pytest.mark.interpreter_only
@pytest.mark.parametrize("arch", ["sm_90", "sm_100"])
def test_dtype_branches_compile(arch: str) -> None:
    for dtype in DTYPES:
        compiled = cutile.compile(dtype_branches(dtype), api.meta([200], dtype=f32).partition([64]),
                                  api.meta([200], dtype=dtype), arch=arch)
        assert compiled.cubin[:4] == b"\x7fELF"
        assert "if" not in compiled.mlir.split("entry", 1)[1].split()  # decided at compile time: no branch left


# -- matmul with batch broadcasting, and @ ------------------------------------------------------
CASES = [((1, 8, 16), (2, 16, 8)), ((2, 8, 16), (1, 16, 8)), ((8, 16), (4, 16, 8)), ((2, 8, 16), (16, 8)),
         ((2, 2, 8, 16), (1, 2, 16, 8)), ((2, 8, 16), (2, 16, 8)), ((16, 16), (16, 8))]


def stored_shape(shape: tuple[int, ...]) -> tuple[int, ...]:
    """A result of rank 4 is stored as rank 3 (a Mut tensor's tile has at most 3 dims)."""
    return shape if len(shape) <= 3 else (int(np.prod(shape[:-2])), *shape[-2:])


def matmul_kernel(a_shape: tuple[int, ...], b_shape: tuple[int, ...], out_shape: tuple[int, ...], dtype: Any,
                  how: str) -> Any:
    a_index, b_index = (0,) * len(a_shape), (0,) * len(b_shape)
    stored = stored_shape(out_shape)

    @cutile.entry
    def kernel(z: Mut[Tensor[f32, list(stored)]], a: Tensor[dtype, list(a_shape)], b: Tensor[dtype, list(b_shape)]):
        x = a.load(index=a_index, shape=a_shape)
        y = b.load(index=b_index, shape=b_shape)
        if how == "operator":
            r = x @ y
        elif how == "augmented":
            r = x
            r @= y
        elif how == "matmul":
            r = ct.matmul(x, y)
        else:
            r = ct.mma(x, y, ct.full(out_shape, 1.0, f32))
        z.store(ct.reshape(r, stored))

    return kernel


@pytest.mark.parametrize("how", ["operator", "augmented", "matmul", "mma"])
@pytest.mark.parametrize("a_shape, b_shape", CASES, ids=[f"{a}@{b}" for a, b in CASES])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_matmul_broadcasts_batches(a_shape: tuple[int, ...], b_shape: tuple[int, ...], dtype: Any, how: str) -> None:
    out_shape = np.broadcast_shapes(a_shape[:-2], b_shape[:-2]) + (a_shape[-2], b_shape[-1])
    a = RNG.standard_normal(a_shape).astype(_np(dtype))
    b = RNG.standard_normal(b_shape).astype(_np(dtype))
    kernel = matmul_kernel(a_shape, b_shape, out_shape, dtype, how)
    stored = list(stored_shape(out_shape))
    z = api.full(stored, np.nan, dtype=f32).partition(stored)
    z, _, _ = kernel(z, api.from_numpy(a, dtype), api.from_numpy(b, dtype)).sync()
    expected = np.matmul(a.astype(np.float64), b.astype(np.float64)) + (1.0 if how == "mma" else 0.0)
    expected = expected.reshape(stored)
    np.testing.assert_allclose(z.to_numpy(), expected, rtol=1e-4, atol=1e-4)


@pytest.mark.interpreter_only
@pytest.mark.parametrize("arch", ["sm_90", "sm_100"])
def test_matmul_broadcast_compiles(arch: str) -> None:
    for a_shape, b_shape in CASES[:5]:
        out_shape = np.broadcast_shapes(a_shape[:-2], b_shape[:-2]) + (a_shape[-2], b_shape[-1])
        kernel = matmul_kernel(a_shape, b_shape, out_shape, f16, "operator")
        stored = list(stored_shape(out_shape))
        compiled = cutile.compile(kernel, api.meta(stored, dtype=f32).partition(stored),
                                  api.meta(list(a_shape), dtype=f16), api.meta(list(b_shape), dtype=f16), arch=arch)
        assert "mmaf" in compiled.mlir


@pytest.mark.interpreter_only
def test_matmul_misuse_is_located() -> None:
    @cutile.entry
    def mismatched(z: Mut[Tensor[f32, [4, 8, 8]]]):
        z.store(ct.zeros((2, 8, 8), f32) @ ct.zeros((4, 8, 8), f32))  # mark

    located(mismatched, lambda: [api.zeros([4, 8, 8]).partition([4, 8, 8])], "# mark",
            "matmul: the batch dimensions [2], [4] do not broadcast together", TileTypeError)

    @cutile.entry
    def vector(z: Mut[Tensor[f32, [8]]]):
        z.store(ct.zeros((8,), f32) @ ct.zeros((8, 8), f32))  # mark

    located(vector, lambda: [api.zeros([8]).partition([8])], "# mark", "matmul's a must be a matrix",
            TileTypeError)

    @cutile.entry
    def acc_too_small(z: Mut[Tensor[f32, [1, 8, 8]]]):
        z.store(ct.mma(ct.zeros((2, 8, 8), f32), ct.zeros((8, 8), f32), ct.zeros((1, 8, 8), f32)))  # mark

    located(acc_too_small, lambda: [api.zeros([1, 8, 8]).partition([1, 8, 8])], "# mark",
            "do not broadcast to acc's [1, 8, 8]", TileTypeError)


# -- new axes ---------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_new_axes(dtype: Any) -> None:
    @cutile.entry
    def kernel(z: Mut[Tensor[dtype, ["M", "N"]]], r: Tensor[dtype, [-1]], c: Tensor[dtype, [-1]]):
        row = r.load(index=(ct.bid(1),), shape=(16,))
        col = c.load(index=(ct.bid(0),), shape=(8,))
        outer = col[:, None] * row[None, :] + col[..., None] - row[None]
        z.store(outer + ct.reshape(row[:, None, None][None], (1, 16)) + ct.expand_dims(col, 1)[:, :])

    rs = RNG.integers(-4, 4, 40).astype(_np(dtype))
    cs = RNG.integers(-4, 4, 24).astype(_np(dtype))
    z = api.full([24, 40], np.nan, dtype=dtype).partition([8, 16])
    z, _, _ = kernel(z, api.from_numpy(rs, dtype), api.from_numpy(cs, dtype)).sync()
    r, c = np.zeros(48), cs.astype(np.float64)
    r[:40] = rs
    expected = c[:, None] * r[None, :] + c[:, None] - r[None, :] + r[None, :] + c[:, None]
    np.testing.assert_array_equal(z.to_numpy().astype(np.float64), expected[:, :40])
    if dtype is f32:
        for arch in ("sm_90", "sm_100"):
            cutile.compile(kernel, api.meta([24, 40], dtype=dtype).partition([8, 16]), api.meta([40], dtype=dtype),
                           api.meta([24], dtype=dtype), arch=arch)


@pytest.mark.interpreter_only
def test_new_axes_misuse_is_located() -> None:
    @cutile.entry
    def element(z: Mut[Tensor[f32, [8]]]):
        z.store(ct.zeros((8, 8), f32)[0])  # mark

    located(element, lambda: [api.zeros([8]).partition([8])], "# mark", "tiles are indexed only with ':'")

    @cutile.entry
    def sliced(z: Mut[Tensor[f32, [8]]]):
        z.store(ct.zeros((16,), f32)[0:8])  # mark

    located(sliced, lambda: [api.zeros([8]).partition([8])], "# mark", "tiles are indexed only with ':'")

    @cutile.entry
    def too_many(z: Mut[Tensor[f32, [8]]]):
        z.store(ct.zeros((8,), f32)[:, :])  # mark

    located(too_many, lambda: [api.zeros([8]).partition([8])], "# mark", "too many ':' for a rank-1 tile",
            TileTypeError)


# -- plain helper functions --------------------------------------------------------------------
SHIFT = 3.0


def _affine(t, scale=2.0, *, shift=SHIFT):  # no decorator: inlined where a kernel calls it
    return t * scale + shift


def _twice(t, f):
    return f(f(t))


def _rms(t, eps):
    return t * ct.rsqrt(ct.sum(t * t) / t.shape[0] + eps)


def _make_scaled(factor: float) -> Any:
    def scaled(t):  # closes over a number
        return t * factor

    return scaled


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_plain_helpers_inline(dtype: Any) -> None:
    times_three = _make_scaled(3.0)

    @cutile.entry
    def kernel(z: Mut[Tensor[dtype, ["B"]]], x: Tensor[dtype, [-1]]):
        t = load_tile_like(x, z).astype(f32)
        u = _affine(t) + _affine(t, 0.5, shift=-1.0) + _twice(t, times_three) + _twice(t, lambda v: v + 1)
        z.store((u + _rms(t, 1e-6) * 0).astype(dtype))

    xs = RNG.integers(-8, 8, 200).astype(_np(dtype))
    z = api.full([200], np.nan, dtype=dtype).partition([64])
    z, _ = kernel(z, api.from_numpy(xs, dtype)).sync()
    t = xs.astype(np.float64)
    expected = (t * 2 + 3) + (t * 0.5 - 1) + t * 9 + (t + 2)
    np.testing.assert_allclose(z.to_numpy().astype(np.float64), expected, rtol=1e-2 if dtype is not f32 else 1e-6)
    if dtype is f32:
        for arch in ("sm_90", "sm_100"):
            cutile.compile(kernel, api.meta([200], dtype=dtype).partition([64]), api.meta([200], dtype=dtype),
                           arch=arch)


def _recurse(t):
    return _recurse(t)  # mark-recursion


def _star(*ts):
    return ts[0]


def _stars(t, **options):
    return t


def _generator(t):
    yield t


_TABLE = [1.0, 2.0]


def _reads_list(t):
    return t * _TABLE[0]


def _make_closure() -> Any:
    table = [1.0, 2.0]

    def closes(t):
        return t * table[0]

    return closes


@pytest.mark.interpreter_only
def test_plain_helper_misuse_is_located() -> None:
    closes = _make_closure()
    kernels = []

    @cutile.entry
    def recursion(z: Mut[Tensor[f32, ["B"]]]):
        z.store(_recurse(ct.zeros((64,), f32)))

    located(recursion, lambda: [api.zeros([64]).partition([64])], "# mark-recursion", "recursive call of _recurse",
            source=_recurse)

    @cutile.entry
    def star(z: Mut[Tensor[f32, ["B"]]]):
        z.store(_star(ct.zeros((64,), f32)))  # mark

    kernels.append((star, "# mark", "cannot inline _star: it takes *ts"))

    @cutile.entry
    def stars(z: Mut[Tensor[f32, ["B"]]]):
        z.store(_stars(ct.zeros((64,), f32)))  # mark

    kernels.append((stars, "# mark", "cannot inline _stars: it takes **options"))

    @cutile.entry
    def generator(z: Mut[Tensor[f32, ["B"]]]):
        z.store(_generator(ct.zeros((64,), f32)))  # mark

    kernels.append((generator, "# mark", "cannot inline _generator: generators"))

    @cutile.entry
    def closure(z: Mut[Tensor[f32, ["B"]]]):
        z.store(closes(ct.zeros((64,), f32)))  # mark

    kernels.append((closure, "# mark", "cannot inline _make_closure.<locals>.closes: it closes over 'table', list"))

    @cutile.entry
    def library(z: Mut[Tensor[f32, ["B"]]]):
        z.store(statistics.fmean(ct.zeros((64,), f32)))  # mark

    kernels.append((library, "# mark", "cannot call statistics.fmean inside a kernel"))

    for kernel, marker, message in kernels:
        located(kernel, lambda: [api.zeros([64]).partition([64])], marker, message)


def test_global_list_read_by_a_helper_is_refused_where_used() -> None:
    """A helper's globals are read as the kernel's are: a list is no kernel value."""
    @cutile.entry
    def kernel(z: Mut[Tensor[f32, ["B"]]]):
        z.store(_reads_list(ct.zeros((64,), f32)))

    with pytest.raises(TileTypeError, match="list"):
        kernel(api.zeros([64]).partition([64])).sync()


def test_integer_helpers() -> None:
    @cutile.entry
    def kernel(z: Mut[Tensor[i32, ["B"]]], x: Tensor[i32, [-1]]):
        z.store(_affine(load_tile_like(x, z), 2, shift=1))

    xs = RNG.integers(-100, 100, 200).astype(np.int32)
    z = api.full([200], -1, dtype=i32).partition([64])
    z, _ = kernel(z, api.from_numpy(xs)).sync()
    np.testing.assert_array_equal(z.to_numpy(), xs * 2 + 1)
