"""rms_norm_matmul and silu_mul_matmul: the GEMV with a prologue on a (M <= 16) for every
product method, both weight layouts and splits of K, with the epilogue, against float64
references and against the two kernels it replaces (rms_norm or silu_mul, then the
plain GEMV: the same numbers, or within one ulp of out's dtype); poisoned outputs, tails
in N and K, every dtype; more rows through the two-kernel path; argument errors; the
prologue kernels compile for sm_90 and sm_100."""

from typing import Any

import numpy as np
import pytest

import cutile
from cutile import api, tune
from cutile.core import bf16, f16, f32
import cutile_kernels as ck
from cutile_kernels import _gemv
from matmul_testkit import NUMPY, assert_close, random
from matmul_testkit import reference as matmul_reference

N, K = 67, 300  # tails: 67 = 4 * 16 + 3 columns, 300 = 4 * 64 + 44 of K
SMALL = {"tile_n": 16, "tile_k": 64}
MANTISSA = {f16: 10, bf16: 7, f32: 23}
EPS = 1e-5


def weight_view(w_nk: Any, stored_nk: bool) -> cutile.Tensor:
    """b = [K, N]: the transposed view of the [N, K] weight, or a [K, N] row-major copy."""
    return api.from_numpy(w_nk).T if stored_nk else api.from_numpy(np.ascontiguousarray(w_nk.T))


def rounded(values: Any, dtype: Any) -> Any:
    """float64 values rounded to ``dtype`` and back (what a stored intermediate holds)."""
    return np.asarray(values, np.float64).astype(NUMPY[dtype]).astype(np.float64)


def rms_reference(x: Any, weight: Any, dtype: Any, eps: float = EPS) -> Any:
    x = np.asarray(x, np.float64)
    normed = x / np.sqrt((x * x).mean(axis=1, keepdims=True) + eps) * np.asarray(weight, np.float64)
    return rounded(normed, dtype)


def silu_mul_reference(gate: Any, up: Any, dtype: Any) -> Any:
    g = np.asarray(gate, np.float64)
    return rounded(g / (1.0 + np.exp(-g)) * np.asarray(up, np.float64), dtype)


def assert_within_one_ulp(got: Any, expected: Any, dtype: Any) -> None:
    """Every element equal, or one unit in the last place of ``dtype`` apart. (f32: the
    fused rms_norm sums a row's squares in other chunks than rms_norm, so its normed
    operand may differ in the last bit, which the product carries at the scale of the
    largest terms: agreement to a few f32 ulps of the largest output.)"""
    got, expected = np.asarray(got, np.float64), np.asarray(expected, np.float64)
    assert np.isfinite(got).all() and np.isfinite(expected).all()
    if dtype == f32:
        np.testing.assert_allclose(got, expected, rtol=0, atol=8 * 2.0 ** -23 * float(np.abs(expected).max()))
        return
    magnitude = np.maximum(np.abs(expected), 2.0 ** -14)  # (subnormals aside: f16's least normal)
    ulp = 2.0 ** (np.floor(np.log2(magnitude)) - MANTISSA[dtype])
    assert (np.abs(got - expected) <= ulp).all(), float(np.abs(got - expected).max())


def poisoned(m: int, n: int, dtype: Any) -> cutile.Tensor:
    return api.full([m, n], np.nan, dtype=dtype)


def tile_m(method: str, m: int) -> int:
    return max(8, _gemv.next_power_of_two(m)) if method == "mma_t" else _gemv.next_power_of_two(m)


# -- the fused result: float64, and the two kernels it replaces --------------------------------

@pytest.mark.parametrize("splits", [1, 3])
@pytest.mark.parametrize("stored_nk", [True, False], ids=["w.T", "kn"])
@pytest.mark.parametrize("method", ["dot", "sum", "mma_t", "mma"])
@pytest.mark.parametrize("m", [1, 3, 16])
def test_rms_norm_prologue_every_method_layout_and_split(m: int, method: str, stored_nk: bool, splits: int) -> None:
    rng = np.random.default_rng(m * 100 + splits)
    x, norm_w, w = random(rng, (m, K), bf16), random(rng, (K,), bf16), random(rng, (N, K), bf16)
    x = (x * 3.0 + 0.5).astype(NUMPY[bf16])  # rows far from unit RMS: the scale matters
    config = {**SMALL, "method": method, "tile_m": tile_m(method, m), "split_k": splits}
    out = poisoned(m, N, bf16)
    b = weight_view(w, stored_nk)
    result = ck.rms_norm_matmul(api.from_numpy(x), api.from_numpy(norm_w), b, EPS, out=out, config=config)
    assert result is out
    assert_close(out.to_numpy(), matmul_reference(rms_reference(x, norm_w, bf16), w.T), bf16)
    normed = ck.rms_norm(api.from_numpy(x), api.from_numpy(norm_w), EPS)
    two = poisoned(m, N, bf16)
    _gemv.small_m_matmul(normed, b, two, config=config).sync()
    assert_within_one_ulp(out.to_numpy(), two.to_numpy(), bf16)


@pytest.mark.parametrize("splits", [1, 3])
@pytest.mark.parametrize("stored_nk", [True, False], ids=["w.T", "kn"])
@pytest.mark.parametrize("method", ["dot", "sum", "mma_t", "mma"])
@pytest.mark.parametrize("m", [1, 3, 16])
def test_silu_mul_prologue_every_method_layout_and_split(m: int, method: str, stored_nk: bool, splits: int) -> None:
    rng = np.random.default_rng(m * 100 + splits + 7)
    gate_up, w = random(rng, (m, 2 * K), bf16), random(rng, (N, K), bf16)
    config = {**SMALL, "method": method, "tile_m": tile_m(method, m), "split_k": splits}
    both = api.from_numpy(gate_up)
    b = weight_view(w, stored_nk)
    out = poisoned(m, N, bf16)
    ck.silu_mul_matmul(both, b, out=out, config=config)
    expected = matmul_reference(silu_mul_reference(gate_up[:, :K], gate_up[:, K:], bf16), w.T)
    assert_close(out.to_numpy(), expected, bf16)
    act = ck.silu_mul(both[:, :K], both[:, K:])
    two = poisoned(m, N, bf16)
    _gemv.small_m_matmul(act, b, two, config=config).sync()
    assert_within_one_ulp(out.to_numpy(), two.to_numpy(), bf16)
    # the pair form: two tensors of their own
    pair = poisoned(m, N, bf16)
    ck.silu_mul_matmul((api.from_numpy(np.ascontiguousarray(gate_up[:, :K])),
                        api.from_numpy(np.ascontiguousarray(gate_up[:, K:]))), b, out=pair, config=config)
    assert_within_one_ulp(pair.to_numpy(), two.to_numpy(), bf16)


@pytest.mark.parametrize("prologue", ["rms_norm", "silu_mul"])
@pytest.mark.parametrize("splits", [1, 4])
@pytest.mark.parametrize("dtype", [f16, bf16, f32], ids=str)
@pytest.mark.parametrize("m", [1, 3, 16])
def test_every_dtype_with_the_whole_epilogue(m: int, dtype: Any, splits: int, prologue: str) -> None:
    """bias, an activation, a residual and alpha after the fused product, the default
    method for M (dot for 1, mma_t beyond), tails in N and K, K split unevenly."""
    rng = np.random.default_rng(m + splits)
    n, k = 83, 290
    w = random(rng, (n, k), dtype)
    bias, residual = random(rng, (n,), dtype), random(rng, (m, n), dtype)
    config = {"tile_n": 64 if m > 2 else 16, "tile_k": 64, "split_k": splits}
    out = poisoned(m, n, dtype)
    epilogue = {"bias": api.from_numpy(bias), "activation": "gelu", "residual": api.from_numpy(residual),
                "alpha": 0.75}
    if prologue == "rms_norm":
        x, norm_w = random(rng, (m, k), dtype), random(rng, (k,), dtype)
        ck.rms_norm_matmul(api.from_numpy(x), api.from_numpy(norm_w), weight_view(w, True), EPS, out=out,
                           config=config, **epilogue)
        left = rms_reference(x, norm_w, dtype)
        two_left = ck.rms_norm(api.from_numpy(x), api.from_numpy(norm_w), EPS)
    else:
        gate_up = random(rng, (m, 2 * k), dtype)
        both = api.from_numpy(gate_up)
        ck.silu_mul_matmul(both, weight_view(w, True), out=out, config=config, **epilogue)
        left = silu_mul_reference(gate_up[:, :k], gate_up[:, k:], dtype)
        two_left = ck.silu_mul(both[:, :k], both[:, k:])
    assert_close(out.to_numpy(), matmul_reference(left, w.T, bias, "gelu", residual, 0.75), dtype)
    two = poisoned(m, n, dtype)
    _gemv.small_m_matmul(two_left, weight_view(w, True), two, config=config, **epilogue).sync()
    assert_within_one_ulp(out.to_numpy(), two.to_numpy(), dtype)


@pytest.mark.parametrize(("method", "rows", "k"), [("mma_t", 16, 1100), ("dot", 1, 9000)])
def test_the_sum_of_squares_in_several_loads(method: str, rows: int, k: int) -> None:
    """K past the prologue's load of squares (`_gemv.squares_tile`: 512 columns for 16
    rows, 8192 for one): the sum runs over several, the last one partial."""
    tile = tile_m(method, rows)
    assert _gemv.squares_tile("rms_norm", tile, k) < k
    rng = np.random.default_rng(k)
    x, norm_w, w = random(rng, (rows, k), bf16), random(rng, (k,), bf16), random(rng, (40, k), bf16)
    out = poisoned(rows, 40, bf16)
    config = {"method": method, "tile_m": tile, "tile_n": 16 if method == "dot" else 64, "tile_k": 256,
              "split_k": 2}
    ck.rms_norm_matmul(api.from_numpy(x), api.from_numpy(norm_w), weight_view(w, True), EPS, out=out,
                       config=config)
    assert_close(out.to_numpy(), matmul_reference(rms_reference(x, norm_w, bf16), w.T), bf16)


@pytest.mark.parametrize("activation", ["relu", "silu"])
def test_a_wider_out_and_epilogue_operands_of_other_dtypes(activation: str) -> None:
    """An f32 out (the LM head's logits) of bf16 operands, an f32 bias, an f16 residual,
    with the record's (or default) config for the shape."""
    rng = np.random.default_rng(5)
    x, norm_w, w = random(rng, (2, K), bf16), random(rng, (K,), f32), random(rng, (N, K), bf16)
    bias, residual = random(rng, (N,), f32), random(rng, (2, N), f16)
    got = ck.rms_norm_matmul(api.from_numpy(x), api.from_numpy(norm_w), weight_view(w, True), EPS,
                             bias=api.from_numpy(bias), activation=activation, residual=api.from_numpy(residual),
                             out_dtype=f32)
    assert got.dtype == f32 and got.shape == (2, N)
    assert_close(got.to_numpy(), matmul_reference(rms_reference(x, norm_w, bf16), w.T, bias, activation, residual),
                 f32)


def test_numpy_in_numpy_out_and_a_pending_launch() -> None:
    rng = np.random.default_rng(9)
    x, norm_w, w = random(rng, (1, K), bf16), random(rng, (K,), bf16), random(rng, (N, K), bf16)
    got = ck.rms_norm_matmul(x, norm_w, np.ascontiguousarray(w.T), EPS)
    assert isinstance(got, np.ndarray) and got.shape == (1, N)
    assert_close(got, matmul_reference(rms_reference(x, norm_w, bf16), w.T), bf16)
    out = poisoned(1, N, bf16)
    launch = ck.rms_norm_matmul.launch(api.from_numpy(x), api.from_numpy(norm_w), weight_view(w, True), EPS,
                                       out=out)
    assert isinstance(launch, cutile.Launch)  # one kernel: the GEMV with its prologue
    assert launch.kernel.name == "gemv_rms_norm_direct"
    launch.sync()
    assert_close(out.to_numpy(), matmul_reference(rms_reference(x, norm_w, bf16), w.T), bf16)
    gate_up = random(rng, (1, 2 * K), bf16)
    launch = ck.silu_mul_matmul.launch(api.from_numpy(gate_up), weight_view(w, True), out=out)
    assert isinstance(launch, cutile.Launch) and launch.kernel.name == "gemv_silu_mul_direct"
    launch.sync()
    assert_close(out.to_numpy(), matmul_reference(silu_mul_reference(gate_up[:, :K], gate_up[:, K:], bf16), w.T),
                 bf16)


@pytest.mark.parametrize("splits", [1, 2])
def test_a_decode_loop_ping_pongs_the_residual_stream(splits: int) -> None:
    """The decode layer's pattern: out= one buffer, residual= the other, swapped each
    step, the same tensors every step (the calls' cached checks and views)."""
    rng = np.random.default_rng(13)
    h = 96
    norm_w, w = random(rng, (h,), bf16), random(rng, (h, h), bf16)
    streams = [api.from_numpy(random(rng, (1, h), bf16)), api.empty([1, h], dtype=bf16)]
    b = weight_view(w, True)
    expected = streams[0].to_numpy().astype(np.float64)
    for step in range(4):
        src, dst = streams[step % 2], streams[(step + 1) % 2]
        ck.rms_norm_matmul(src, api.from_numpy(norm_w), b, EPS, out=dst, residual=src,
                           config={"tile_n": 16, "tile_k": 32, "split_k": splits})
        left = rms_reference(rounded(expected, bf16), norm_w, bf16)
        expected = rounded(matmul_reference(left, w.T, residual=rounded(expected, bf16)), bf16)
        assert_close(dst.to_numpy(), expected, bf16)
        expected = dst.to_numpy().astype(np.float64)


# -- configs: the GEMV record's ------------------------------------------------------------------

def _write_record(folder: Any, winners: dict[str, dict[str, Any]], source: str | None = None) -> None:
    gemv_tuner = _gemv.tuner(records_dir=folder)
    provenance = gemv_tuner.provenance
    if source is not None:
        provenance = tune.Provenance.current("gemv", source, _gemv.SPACE)
    record = tune.Record(provenance, {b: tune.Winner(c, 0.01) for b, c in winners.items()})
    assert gemv_tuner.record_path is not None
    record.save(gemv_tuner.record_path)


WINNER = {"method": "sum", "tile_m": 1, "tile_n": 64, "tile_k": 64, "split_k": 3, "num_worker_warps": 4,
          "occupancy": 1, "latency": 3}


def test_the_fused_calls_take_the_gemv_records_winner(tmp_path: Any) -> None:
    n, k = 70, 200
    _write_record(tmp_path, {"nk_e2_m1_n128_k256": WINNER})
    try:
        _gemv.use_records(tmp_path)
        rng = np.random.default_rng(23)
        x, norm_w, w = random(rng, (1, k), bf16), random(rng, (k,), bf16), random(rng, (n, k), bf16)
        work = ck.rms_norm_matmul.launch(api.from_numpy(x), api.from_numpy(norm_w), weight_view(w, True), EPS,
                                         out=poisoned(1, n, bf16))
        assert not isinstance(work, cutile.Launch)  # the winner's split of K: the partials, then their sum
        work.sync()
        assert _gemv.chosen(1, n, k, bf16, weight_nk=True) == WINNER
        assert _gemv.chosen(1, n, k, bf16, weight_nk=False) == _gemv.default_config(1, n, k, bf16, weight_nk=False)
    finally:
        _gemv.use_records(None)
    assert _gemv.chosen(1, n, k, bf16, weight_nk=True) != WINNER  # (the choices are forgotten with the records)


def test_a_stale_record_is_refused_with_a_warning_and_the_defaults_used(tmp_path: Any,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    _write_record(tmp_path, {"nk_e2_m1_n128_k256": WINNER}, source="the kernels before a change")
    try:
        _gemv.use_records(tmp_path)
        with caplog.at_level("WARNING", logger="cutile.tune"):
            assert _gemv.chosen(1, 70, 200, bf16, weight_nk=True) == _gemv.default_config(1, 70, 200, bf16)
        assert "stale" in caplog.text and "source_hash" in caplog.text
    finally:
        _gemv.use_records(None)


# -- more than 16 rows: the two kernels -------------------------------------------------------------

@pytest.mark.parametrize("prologue", ["rms_norm", "silu_mul"])
def test_more_rows_run_the_row_function_then_matmul(prologue: str) -> None:
    rng = np.random.default_rng(17)
    m, n, k = 40, 45, 72
    w, residual = random(rng, (n, k), bf16), random(rng, (m, n), bf16)
    out = poisoned(m, n, bf16)
    if prologue == "rms_norm":
        x, norm_w = random(rng, (m, k), bf16), random(rng, (k,), bf16)
        args: tuple[Any, ...] = (api.from_numpy(x), api.from_numpy(norm_w), weight_view(w, True), EPS)
        function = ck.rms_norm_matmul
        left = rms_reference(x, norm_w, bf16)
    else:
        gate_up = random(rng, (m, 2 * k), bf16)
        args = (api.from_numpy(gate_up), weight_view(w, True))
        function = ck.silu_mul_matmul
        left = silu_mul_reference(gate_up[:, :k], gate_up[:, k:], bf16)
    work = function.launch(*args, out=out, residual=api.from_numpy(residual), activation="relu")
    assert not isinstance(work, cutile.Launch)  # the row function's launch, then matmul's
    work.sync()
    expected = matmul_reference(left, w.T, activation="relu", residual=residual)
    assert_close(out.to_numpy(), expected, bf16)
    got = function(*args, residual=api.from_numpy(residual), activation="relu")
    np.testing.assert_array_equal(got.to_numpy(), out.to_numpy())


# -- argument errors ---------------------------------------------------------------------------------

def _rms_args(**change: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    x, norm_w = api.zeros([2, 64], dtype=bf16), api.zeros([64], dtype=bf16)
    w = api.zeros([32, 64], dtype=bf16)
    args = {"x": x, "norm_weight": norm_w, "b": w.T, "eps": 1e-6}
    kwargs: dict[str, Any] = {}
    for key, value in change.items():
        (args if key in args else kwargs)[key] = value
    return (args["x"], args["norm_weight"], args["b"], args["eps"]), kwargs


@pytest.mark.parametrize(("change", "error", "words"), [
    ({"x": api.zeros([2, 3, 64], dtype=bf16)}, cutile.ArgumentError, "x must be 2-D"),
    ({"x": api.zeros([2, 64], dtype="i32")}, cutile.ArgumentTypeError, "x has dtype i32"),
    ({"x": [1, 2]}, cutile.ArgumentTypeError, "x must be a tensor"),
    ({"norm_weight": api.zeros([63], dtype=bf16)}, cutile.ArgumentError, "norm_weight must have shape [64]"),
    ({"norm_weight": api.zeros([64], dtype="i32")}, cutile.ArgumentTypeError, "norm_weight has dtype i32"),
    ({"eps": -1.0}, cutile.ArgumentError, "eps must be"),
    ({"eps": float("nan")}, cutile.ArgumentError, "eps must be"),
    ({"b": api.zeros([63, 32], dtype=bf16)}, cutile.ArgumentError, "b must be [64, N]"),
    ({"b": api.zeros([64, 32], dtype=f16)}, cutile.ArgumentTypeError, "b has dtype f16"),
    ({"out": api.zeros([2, 31], dtype=bf16)}, cutile.ArgumentError, "out must have shape [2, 32]"),
    ({"out": api.zeros([2, 32], dtype=bf16), "out_dtype": "f32"}, cutile.ArgumentTypeError, "out_dtype is f32"),
    ({"out_dtype": "i32"}, cutile.ArgumentTypeError, "out_dtype"),
    ({"bias": api.zeros([31], dtype=bf16)}, cutile.ArgumentError, "bias must have shape"),
    ({"residual": api.zeros([2, 31], dtype=bf16)}, cutile.ArgumentError, "residual must have shape"),
    ({"activation": "tanh"}, cutile.ArgumentError, "activation"),
    ({"alpha": float("inf")}, cutile.ArgumentError, "alpha"),
    ({"config": {"tile_q": 4}}, cutile.ArgumentError, "config key 'tile_q'"),
    ({"config": {"tile_m": 1}}, cutile.ArgumentError, "config['tile_m']"),
])
def test_rms_norm_matmul_errors_name_the_parameter(change: dict[str, Any], error: type[Exception],
                                                   words: str) -> None:
    args, kwargs = _rms_args(**change)
    with pytest.raises(error, match=r"^rms_norm_matmul: ") as raised:
        ck.rms_norm_matmul(*args, **kwargs)
    assert words in str(raised.value)


def test_outputs_sharing_an_operands_memory_are_refused() -> None:
    x, norm_w = api.zeros([2, 64], dtype=bf16), api.zeros([64], dtype=bf16)
    w = api.zeros([64, 64], dtype=bf16)
    with pytest.raises(cutile.ArgumentError, match="out overlaps the memory of x"):
        ck.rms_norm_matmul(x, norm_w, w.T, out=x)
    stream = api.zeros([2, 64], dtype=bf16)
    with pytest.raises(cutile.ArgumentError, match="out overlaps the memory of residual"):
        ck.rms_norm_matmul(x, norm_w, w.T, out=stream, residual=stream)  # (the residual stream is ping-ponged)
    shared = api.zeros([2 * 64], dtype=bf16)
    with pytest.raises(cutile.ArgumentError, match="out overlaps the memory of norm_weight"):
        ck.rms_norm_matmul(x, shared[64:], w.T, out=shared.reshape(2, 64))
    gate_up = api.zeros([2, 128], dtype=bf16)
    with pytest.raises(cutile.ArgumentError, match="out overlaps the memory of gate_up"):
        ck.silu_mul_matmul(gate_up, w.T, out=gate_up[:, 64:])
    up = api.zeros([2, 64], dtype=bf16)
    with pytest.raises(cutile.ArgumentError, match="out overlaps the memory of up"):
        ck.silu_mul_matmul((api.zeros([2, 64], dtype=bf16), up), w.T, out=up)


@pytest.mark.parametrize(("gate_up", "b", "error", "words"), [
    (api.zeros([2, 127], dtype=bf16), None, cutile.ArgumentError, "an even number of columns"),
    (api.zeros([2, 64, 2], dtype=bf16), None, cutile.ArgumentError, "gate_up must be 2-D"),
    ((api.zeros([2, 64], dtype=bf16),), None, cutile.ArgumentError, "a pair (gate, up)"),
    ((api.zeros([2, 64], dtype=bf16), api.zeros([2, 63], dtype=bf16)), None, cutile.ArgumentError,
     "gate and up must have one shape"),
    ((api.zeros([2, 64], dtype=bf16), api.zeros([2, 64], dtype=f16)), None, cutile.ArgumentTypeError,
     "gate and up must have one dtype"),
    (api.zeros([2, 128], dtype=bf16), api.zeros([32, 64], dtype=bf16), cutile.ArgumentError, "b must be [64, N]"),
])
def test_silu_mul_matmul_errors_name_the_parameter(gate_up: Any, b: Any, error: type[Exception], words: str) -> None:
    b = api.zeros([32, 64], dtype=bf16).T if b is None else b
    with pytest.raises(error, match=r"^silu_mul_matmul: ") as raised:
        ck.silu_mul_matmul(gate_up, b)
    assert words in str(raised.value)


def test_more_rows_refuse_a_gemv_config_and_check_the_epilogue_by_name() -> None:
    x, norm_w, w = api.zeros([20, 64], dtype=bf16), api.zeros([64], dtype=bf16), api.zeros([32, 64], dtype=bf16)
    with pytest.raises(cutile.ArgumentError, match="rms_norm_matmul: config= is the GEMV's"):
        ck.rms_norm_matmul(x, norm_w, w.T, config={"tile_n": 16})
    with pytest.raises(cutile.ArgumentError, match="silu_mul_matmul: bias must have shape"):
        ck.silu_mul_matmul(api.zeros([20, 128], dtype=bf16), w.T, bias=api.zeros([31], dtype=bf16))


# -- compiles ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("arch", ["sm_90", "sm_100"])
@pytest.mark.parametrize("prologue", ["rms_norm", "silu_mul"])
def test_the_prologue_kernels_compile(prologue: str, arch: str) -> None:
    """At decode sizes (the 4B's hidden 2560 and intermediate 9728), M = 1 and 16, both
    layouts, direct and split, with the residual epilogue; real host tensors, whose
    alignment lets tileiras use TMA as on the GPU."""
    k = 2560 if prologue == "rms_norm" else 9728
    n = 2560
    cases = [(1, True, _gemv.default_config(1, n, k, bf16)),
             (16, True, _gemv.default_config(16, n, k, bf16)),
             (1, False, _gemv.default_config(1, n, k, bf16, weight_nk=False)),
             (16, False, {"method": "mma_t", "tile_m": 16, "tile_n": 128, "tile_k": 128, "split_k": 1})]
    for m, stored_nk, config in cases:
        weight = api.zeros([n, k] if stored_nk else [k, n], dtype=bf16)
        a, out = api.zeros([m, k], dtype=bf16), api.zeros([m, n], dtype=bf16)
        extra = api.zeros([k], dtype=bf16) if prologue == "rms_norm" else api.zeros([m, k], dtype=bf16)
        ops, cfg = _gemv._checked("test", a, weight.T if stored_nk else weight, out, None, None,
                                  api.zeros([m, n], dtype=bf16), 1.0, config)
        launches = _gemv._launches(ops, cfg, _gemv.Prologue(prologue, extra, 1e-6))
        assert len(launches) == (1 if cfg["split_k"] == 1 else 2)
        assert launches[0][0].name == f"gemv_{prologue}_{'direct' if cfg['split_k'] == 1 else 'partial'}"
        for kernel, arguments, constants in launches:
            compiled = cutile.compile(kernel, *arguments, arch=arch, **constants)
            assert compiled.cubin[:4] == b"\x7fELF"


# -- on the GPU, at the Qwen3-4B decode shapes ---------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("stored_nk", [True, False], ids=["w.T", "kn"])
@pytest.mark.parametrize("m", [1, 16])
def test_gpu_prologues_at_decode_shapes(m: int, stored_nk: bool) -> None:
    """The QKV GEMV (6144 x 2560) with the input norm and the down GEMV (2560 x 9728)
    with silu_mul and the residual, the record's config (or the default), against the
    two kernels they replace and float64."""
    rng = np.random.default_rng(m)
    h, inner, qkv = 2560, 9728, 6144
    x, norm_w = random(rng, (m, h), bf16), random(rng, (h,), bf16)
    w_qkv = (random(rng, (qkv, h), bf16) * 0.05).astype(NUMPY[bf16])
    out = poisoned(m, qkv, bf16)
    ck.rms_norm_matmul(api.from_numpy(x), api.from_numpy(norm_w), weight_view(w_qkv, stored_nk), EPS, out=out)
    assert_close(out.to_numpy(), matmul_reference(rms_reference(x, norm_w, bf16), w_qkv.T), bf16)
    two = ck.matmul(ck.rms_norm(api.from_numpy(x), api.from_numpy(norm_w), EPS), weight_view(w_qkv, stored_nk))
    # (a normed value may differ in its last bit where the sums of squares' orders differ)
    assert_close(out.to_numpy(), two.to_numpy().astype(np.float64), bf16)
    gate_up = random(rng, (m, 2 * inner), bf16)
    w_down = (random(rng, (h, inner), bf16) * 0.05).astype(NUMPY[bf16])
    residual = random(rng, (m, h), bf16)
    out = poisoned(m, h, bf16)
    ck.silu_mul_matmul(api.from_numpy(gate_up), weight_view(w_down, stored_nk), out=out,
                       residual=api.from_numpy(residual))
    left = silu_mul_reference(gate_up[:, :inner], gate_up[:, inner:], bf16)
    assert_close(out.to_numpy(), matmul_reference(left, w_down.T, residual=residual), bf16)
