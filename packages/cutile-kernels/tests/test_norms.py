"""rms_norm, add_rms_norm, qk_norm, layer_norm and layer_norm_backward against numpy
float64 on the interpreter: both schedules, tails, f32/f16/bf16 (and another weight
dtype), poisoned outputs, leading shapes; the backward against a numpy gradient
(checked itself against finite differences)."""

from typing import Any

import numpy as np
import pytest
from cutile_kernels_testkit import CHUNKED, CONFIGS, ONE_PASS, check, f64, normal, poisoned

import cutile
from cutile import api
from cutile.core import f32
from cutile_kernels import add_rms_norm, layer_norm, layer_norm_backward, qk_norm, rms_norm
from cutile_kernels._norms import layer_norm_backward_reference

SHAPE = (37, 300)


def rms_reference(x: Any, w: Any, eps: float) -> Any:
    return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps) * w


def layer_norm_reference(x: Any, w: Any, b: Any, eps: float) -> tuple[Any, Any, Any]:
    mean = x.mean(axis=-1, keepdims=True)
    rstd = 1.0 / np.sqrt(x.var(axis=-1, keepdims=True) + eps)
    return (x - mean) * rstd * w + b, mean, rstd


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("schedule", ["one_pass", "chunked", "tuned"])
def test_rms_norm(dtype: str, schedule: str) -> None:
    x, w = normal(SHAPE, dtype, seed=1, scale=2.0, shift=1.0), normal((SHAPE[1],), dtype, seed=2)
    out = poisoned(SHAPE, dtype)
    assert rms_norm(x, w, 1e-5, out=out, config=CONFIGS[schedule]) is out
    check(out, rms_reference(f64(x), f64(w), 1e-5), dtype, scale=4.0)


@pytest.mark.parametrize("weight_dtype", ["f32", "f16"])
def test_rms_norm_with_a_weight_of_another_dtype(weight_dtype: str) -> None:
    x, w = normal((3, 4, 100), "bf16", seed=3), normal((100,), weight_dtype, seed=4)
    for config in (ONE_PASS, CHUNKED):
        result = rms_norm(x, w, config=config)
        assert result.shape == (3, 4, 100) and result.dtype == x.dtype
        check(result, rms_reference(f64(x), f64(w), 1e-6), "bf16", scale=4.0)


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("schedule", ["one_pass", "chunked", "tuned"])
def test_add_rms_norm(dtype: str, schedule: str) -> None:
    x, r = normal(SHAPE, dtype, seed=5), normal(SHAPE, dtype, seed=6)
    w = normal((SHAPE[1],), dtype, seed=7)
    total_out, normed_out = poisoned(SHAPE, dtype), poisoned(SHAPE, dtype)
    total, normed = add_rms_norm(x, r, w, 1e-6, out=(total_out, normed_out), config=CONFIGS[schedule])
    assert total is total_out and normed is normed_out
    rounded = f64((f64(x) + f64(r)).astype(x.dtype))  # the sum as stored, in x's dtype
    check(total, rounded, dtype, scale=4.0)
    check(normed, rms_reference(rounded, f64(w), 1e-6), dtype, scale=4.0)


def test_add_rms_norm_makes_both_results() -> None:
    x, r, w = normal((2, 3, 50), "f16", seed=8), normal((2, 3, 50), "f16", seed=9), normal((50,), "f16", seed=10)
    total, normed = add_rms_norm(x, r, w, 1e-6, config=CHUNKED)
    assert isinstance(total, np.ndarray) and total.shape == (2, 3, 50)
    check(total, f64((f64(x) + f64(r)).astype(np.float16)), "f16", scale=4.0)
    check(normed, rms_reference(f64(total), f64(w), 1e-6), "f16", scale=4.0)


@pytest.mark.parametrize("layout", [(2, 4, 7, 64), (9, 4, 64)])
@pytest.mark.parametrize("dtype", ["bf16", "f32"])
def test_qk_norm(layout: tuple[int, ...], dtype: str) -> None:
    q = normal(layout, dtype, seed=11, scale=3.0)
    k_layout = (*layout[:-3], 2, *layout[-2:]) if len(layout) == 4 else (layout[0], 2, layout[2])
    k = normal(k_layout, dtype, seed=12)
    qw, kw = normal((64,), dtype, seed=13), normal((64,), dtype, seed=14)
    q_out = poisoned(layout, dtype)
    qn, kn = qk_norm(q, k, qw, kw, 1e-6, out=(q_out, None))
    assert qn is q_out and isinstance(kn, np.ndarray) and kn.shape == k_layout
    check(qn, rms_reference(f64(q), f64(qw), 1e-6), dtype, scale=4.0)
    check(kn, rms_reference(f64(k), f64(kw), 1e-6), dtype, scale=4.0)


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("schedule", ["one_pass", "chunked", "tuned"])
@pytest.mark.parametrize("return_stats", [False, True])
@pytest.mark.parametrize("cols", [300, 256])  # one pass: a tile wider than the rows (masked), and as wide
def test_layer_norm(dtype: str, schedule: str, return_stats: bool, cols: int) -> None:
    shape = (SHAPE[0], cols)
    x = normal(shape, dtype, seed=15, scale=2.0, shift=5.0)  # a mean far from 0: the variance must not cancel
    w, b = normal((cols,), dtype, seed=16), normal((cols,), dtype, seed=17)
    expected, mean, rstd = layer_norm_reference(f64(x), f64(w), f64(b), 1e-5)
    out = poisoned(shape, dtype)
    if return_stats:
        stats = api.full([shape[0], 1], np.nan), api.full([shape[0], 1], np.nan)
        y, m, r = layer_norm(x, w, b, 1e-5, return_stats=True, out=(out, *stats), config=CONFIGS[schedule])
        assert y is out and m is stats[0] and r is stats[1]
        check(m, mean, "f32", scale=5.0)
        check(r, rstd, "f32")
    else:
        assert layer_norm(x, w, b, 1e-5, out=out, config=CONFIGS[schedule]) is out
    check(out, expected, dtype, scale=4.0)


@pytest.mark.parametrize("schedule", ["one_pass", "chunked"])
@pytest.mark.parametrize("cols", [1024, 1000])
def test_layer_norm_of_rows_with_a_large_mean(schedule: str, cols: int) -> None:
    """Rows of 1e4 + N(0, 1) in f32: E[x^2] - E[x]^2 would lose every digit of the
    variance (1e8 against 1, at an f32 ulp of 1e8 of 8); the statistics must not."""
    x = normal((19, cols), "f32", seed=21, shift=1e4)
    w, b = normal((cols,), "f32", seed=22), normal((cols,), "f32", seed=23)
    expected, mean, rstd = layer_norm_reference(f64(x), f64(w), f64(b), 1e-5)
    y = layer_norm(x, w, b, 1e-5, out=poisoned(x.shape, "f32"), config=CONFIGS[schedule])
    check(y, expected, "f32", scale=4.0)
    stats = api.full([x.shape[0], 1], np.nan), api.full([x.shape[0], 1], np.nan)
    y, m, r = layer_norm(x, w, b, 1e-5, return_stats=True, out=(poisoned(x.shape, "f32"), *stats),
                         config=CONFIGS[schedule])
    check(r, rstd, "f32")
    check(m, mean, "f32")
    # The chunked rows with their statistics are normalized by the stored f32 mean,
    # rounded by up to half an ulp of 1e4 (5e-4): that is their error (as torch's).
    check(y, expected, "f32", scale=4.0 if schedule == "one_pass" else 1e3)


@pytest.mark.parametrize("dtype, cols, rtol", [("f32", 4096, 1e-6), ("f32", 4000, 1e-6), ("f32", 768, 1e-6),
                                               ("bf16", 4096, 4096 * 2.0**-24)])
def test_layer_norm_of_rows_whose_first_element_is_an_outlier(dtype: str, cols: int, rtol: float) -> None:
    """The one-pass statistics are shifted by each row's first element: an outlier there
    (1e3 in N(0, 1)) amplifies E[d^2]'s rounding by about the row length. f32 rows sum in
    f64 (1 / n too: any row length), which leaves rstd at f32 precision; 16-bit rows sum in
    f32, within ``cols * 2^-24`` (below their own precision)."""
    x = normal((8, cols), dtype, seed=24)
    x[:, 0] = 1e3
    w, b = np.ones(cols, np.float32), np.zeros(cols, np.float32)
    _, _, rstd = layer_norm_reference(f64(x), f64(w), f64(b), 1e-5)
    rstd_out = api.full([x.shape[0], 1], np.nan)
    _, _, r = layer_norm(x, w, b, 1e-5, return_stats=True, out=(None, None, rstd_out), config=ONE_PASS)
    assert r is rstd_out
    np.testing.assert_allclose(f64(rstd_out.to_numpy()), rstd, rtol=rtol)


@pytest.mark.parametrize("config", [ONE_PASS, CHUNKED], ids=["one_pass", "chunked"])
def test_layer_norm_of_a_row_holding_nan_or_inf_is_nan(config: dict[str, int]) -> None:
    """A NaN or an infinity in a row makes its rstd and every output NaN, as torch's (the
    variance's clamp at 0 must keep a NaN: sm_90's maxf drops it)."""
    x = normal((4, 300), "f32", seed=31)
    x[0, 5], x[1, 7], x[2, 0] = np.nan, np.inf, -np.inf
    w, b = np.ones(300, np.float32), np.zeros(300, np.float32)
    y, _, rstd = layer_norm(x, w, b, return_stats=True, config=config)
    y, rstd = np.asarray(y), np.asarray(rstd)
    assert np.isnan(rstd[:3]).all() and np.isnan(y[:3]).all()
    assert np.isfinite(y[3]).all() and np.isfinite(rstd[3]).all()


def test_layer_norm_stats_of_leading_shapes() -> None:
    x, w, b = normal((2, 3, 90), "f32", seed=18), normal((90,), "f32", seed=19), normal((90,), "f32", seed=20)
    for config in (ONE_PASS, CHUNKED):
        y, mean, rstd = layer_norm(x, w, b, return_stats=True, config=config)
        expected, m, r = layer_norm_reference(f64(x), f64(w), f64(b), 1e-5)
        assert mean.shape == rstd.shape == (2, 3, 1) and mean.dtype == np.float32
        check(y, expected, "f32", scale=4.0)
        check(mean, m, "f32")
        check(rstd, r, "f32")


def test_the_backward_reference_is_the_gradient() -> None:
    """The numpy gradient the kernels are checked against, against central differences
    of sum(dy * layer_norm(x)) in float64."""
    rng = np.random.default_rng(0)
    x, w, b, dy = rng.standard_normal((3, 7)), rng.standard_normal(7), rng.standard_normal(7), rng.standard_normal((3, 7))

    def loss(x: Any, w: Any, b: Any) -> float:
        return float((dy * layer_norm_reference(x, w, b, 1e-5)[0]).sum())

    _, mean, rstd = layer_norm_reference(x, w, b, 1e-5)
    dx, dw, db = layer_norm_backward_reference(dy, x, w, mean, rstd)
    step = 1e-6
    for value, grad, which in ((x, dx, 0), (w, dw, 1), (b, db, 2)):
        numeric = np.zeros_like(value)
        for index in np.ndindex(value.shape):
            args = [x.copy(), w.copy(), b.copy()]
            args[which][index] += step
            up = loss(*args)
            args[which][index] -= 2 * step
            numeric[index] = (up - loss(*args)) / (2 * step)
        np.testing.assert_allclose(grad, numeric, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("schedule", ["one_pass", "chunked", "tuned"])
# (9, 1500): row and column tails in the column-sum stage's (4, 1024) tiles
@pytest.mark.parametrize("shape", [SHAPE, (1000, 40), (2, 3, 129), (9, 1500)])
def test_layer_norm_backward(dtype: str, schedule: str, shape: tuple[int, ...]) -> None:
    x = normal(shape, dtype, seed=21, scale=2.0, shift=1.0)
    w, b = normal(shape[-1:], dtype, seed=22), normal(shape[-1:], dtype, seed=23)
    dy = normal(shape, dtype, seed=24)
    _, mean, rstd = layer_norm(x, w, b, 1e-5, return_stats=True)
    outs = poisoned(shape, dtype), poisoned(shape[-1:], dtype), poisoned(shape[-1:], dtype)
    dx, dw, db = layer_norm_backward(dy, x, w, mean, rstd, out=outs, config=CONFIGS[schedule])
    assert dx is outs[0] and dw is outs[1] and db is outs[2]
    expected = layer_norm_backward_reference(f64(dy), f64(x), f64(w), f64(mean), f64(rstd))
    rows = int(np.prod(shape[:-1]))
    check(dx, expected[0].reshape(shape), dtype, scale=4.0)
    check(dw, expected[1], dtype, scale=4.0 * np.sqrt(rows))  # sums over the rows
    check(db, expected[2], dtype, scale=4.0 * np.sqrt(rows))


def test_layer_norm_backward_of_no_rows_gives_zero_weight_gradients() -> None:
    x = np.zeros((0, 20), np.float32)
    w = np.ones(20, np.float32)
    stats = np.zeros((0, 1), np.float32)
    dx, dw, db = layer_norm_backward(x, x, w, stats, stats)
    assert dx.shape == (0, 20)
    np.testing.assert_array_equal(dw, np.zeros(20))
    np.testing.assert_array_equal(db, np.zeros(20))


@pytest.mark.parametrize("config", [ONE_PASS, CHUNKED])
def test_launch_forms(config: dict[str, int]) -> None:
    x, r, w = normal((6, 100), "f32", seed=25), normal((6, 100), "f32", seed=26), normal((100,), "f32", seed=27)
    b = normal((100,), "f32", seed=28)
    z, s = poisoned((6, 100), "f32"), poisoned((6, 100), "f32")
    rms_norm.launch(x, w, out=z, config=config).sync()
    check(z, rms_reference(f64(x), f64(w), 1e-6), "f32", scale=4.0)
    add_rms_norm.launch(x, r, w, out=(s, z), config=config).sync()
    check(s, f64(x) + f64(r), "f32", scale=4.0)
    ln = layer_norm.launch(x, w, b, return_stats=True, out=(z, api.empty([6, 1], f32), api.empty([6, 1], f32)),
                           config=config)
    ln.sync()
    check(z, layer_norm_reference(f64(x), f64(w), f64(b), 1e-5)[0], "f32", scale=4.0)
    with pytest.raises(cutile.ArgumentError, match="out= is required"):
        rms_norm.launch(x, w)


@pytest.mark.parametrize("cols", [100, 20000], ids=["one_pass", "long_rows"])
def test_add_rms_norm_in_known_layouts_takes_its_plan_and_still_checks_what_can_change(cols: int) -> None:
    """add_rms_norm of 2-D cutile tensors with both outputs given keeps its plan by the
    operands' layouts and memory: a call in them again (new values in the same memory,
    new view objects) takes it and computes right; another stride, dtype or memory is
    planned afresh; a bad eps or a consumed output is still refused."""
    from cutile_kernels import _norms

    rows, dtype = 3, "bf16"
    xs, rs = normal((rows, cols), dtype, seed=41), normal((rows, cols), dtype, seed=42)
    x, r, w = api.from_numpy(xs), api.from_numpy(rs), api.from_numpy(normal((cols,), dtype, seed=43))
    out = (poisoned((rows, cols), dtype), poisoned((rows, cols), dtype))
    plans = _norms._ADD_RMS_NORM_PLANS
    plans.clear()

    def expect(total: Any, normed: Any, x_values: Any, r_values: Any, weight: Any) -> None:
        rounded = f64((f64(x_values) + f64(r_values)).astype(x_values.dtype))
        check(total, rounded, dtype, scale=4.0)
        check(normed, rms_reference(rounded, f64(weight.to_numpy()), 1e-6), dtype, scale=4.0)

    total, normed = add_rms_norm(x, r, w, 1e-6, out=out)
    assert total is out[0] and normed is out[1]
    expect(*out, xs, rs, w)
    assert len(plans) == 1
    kept = next(iter(plans.values()))
    assert kept.one_pass is (cols == 100)
    new_x, new_r = normal((rows, cols), dtype, seed=44, scale=3.0), normal((rows, cols), dtype, seed=45)
    x.host_view()[...], r.host_view()[...] = new_x, new_r
    for t in out:
        t.host_view()[...] = np.nan
    views = (out[0][...], out[1][...])
    total, normed = add_rms_norm(x[...], r[...], w, 1e-6, out=views)
    assert total is views[0] and normed is views[1]  # (the caller's objects, as a fresh plan gives them)
    assert len(plans) == 1 and next(iter(plans.values())) is kept
    expect(*out, new_x, new_r, w)
    wide = api.from_numpy(normal((rows, cols + 8), dtype, seed=46))  # a strided x: another layout
    add_rms_norm(wide[:, :cols], r, w, 1e-6, out=out)
    expect(*out, wide.to_numpy()[:, :cols], new_r, w)
    other_w = api.from_numpy(normal((cols,), "f32", seed=47))  # another dtype of the weight
    add_rms_norm(x, r, other_w, 1e-6, out=out)
    expect(*out, new_x, new_r, other_w)
    assert len(plans) == 3
    with pytest.raises(cutile.ArgumentError, match="eps must be a finite number"):
        add_rms_norm(x, r, w, float("nan"), out=out)
    with pytest.raises(cutile.ArgumentError, match="residual"):
        add_rms_norm(x, api.from_numpy(normal((rows, cols - 1), dtype, seed=48)), w, 1e-6, out=out)
    taken = out[0].partition([1, 4])
    with pytest.raises(cutile.OwnershipError, match="consumed"):
        add_rms_norm(x, r, w, 1e-6, out=out)
    del taken


def test_layer_norm_default_gives_16_bit_tiles_of_8192_elements_4_warps_and_4_blocks_an_sm() -> None:
    from cutile.core import bf16 as bf16_dtype, f32 as f32_dtype

    from cutile_kernels import _norms, _rows

    wide = _norms.layer_norm_default(16384, 8192, bf16_dtype)
    assert (wide["occupancy"], wide["num_worker_warps"]) == (4, 4)
    assert _norms.layer_norm_default(16384, 8192, f32_dtype) == _rows.default_config(16384, 8192, f32_dtype)
    # a 16-bit tile of 16384 elements would hold 128 a thread with 4 warps: the generic default's 8 stay
    assert _norms.layer_norm_default(8, 16384, bf16_dtype) == _rows.default_config(8, 16384, bf16_dtype)
