"""softmax and log_softmax against numpy float64 on the interpreter: both schedules,
tails in rows and columns, f32/f16/bf16, poisoned outputs, any dim."""

from typing import Any

import numpy as np
import pytest
from cutile_kernels_testkit import CHUNKED, CONFIGS, ONE_PASS, check, f64, normal, poisoned

import cutile
from cutile.core import bf16, f32
from cutile_kernels import log_softmax, softmax
from cutile_kernels._rows import ROW_SPACE, default_config as rows_default, fits as rows_fits
from cutile_kernels._softmax import default_config, fits


def reference(x: Any, axis: int = -1, log: bool = False) -> Any:
    shifted = x - x.max(axis=axis, keepdims=True)
    logs = shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))
    return logs if log else np.exp(logs)


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("schedule", ["one_pass", "chunked", "tuned"])
@pytest.mark.parametrize("log", [False, True])
def test_rows_with_tails(dtype: str, schedule: str, log: bool) -> None:
    x = normal((37, 300), dtype, seed=1, scale=4.0)
    out = poisoned((37, 300), dtype)
    function = log_softmax if log else softmax
    result = function(x, out=out, config=CONFIGS[schedule])
    assert result is out
    check(out, reference(f64(x), log=log), dtype, scale=10.0 if log else 1.0)


@pytest.mark.parametrize("config", [ONE_PASS, CHUNKED])
def test_a_new_result_is_of_the_input_kind(config: dict[str, int]) -> None:
    x = normal((5, 130), "f32", seed=2)
    result = softmax(x, config=config)
    assert isinstance(result, np.ndarray) and result.dtype == np.float32
    check(result, reference(f64(x)), "f32")
    tensor_result = softmax(cutile.api.from_numpy(x), config=config)
    assert isinstance(tensor_result, cutile.Tensor)
    check(tensor_result, reference(f64(x)), "f32")


@pytest.mark.parametrize("shape, dim", [((3, 5, 70), -1), ((3, 5, 70), 1), ((6, 9), 0), ((4, 3, 2, 33), -3)])
@pytest.mark.parametrize("log", [False, True])
def test_any_leading_shape_and_dim(shape: tuple[int, ...], dim: int, log: bool) -> None:
    x = normal(shape, "f32", seed=3, scale=2.0)
    result = (log_softmax if log else softmax)(x, dim=dim, config=CHUNKED if dim == -1 else None)
    check(result, reference(f64(x), axis=dim, log=log), "f32", scale=10.0 if log else 1.0)


def test_out_along_another_dim() -> None:
    x = normal((6, 40), "f32", seed=4)
    out = cutile.api.full([40, 6], np.nan).T  # a (6, 40) view whose dim 0 is contiguous
    assert softmax(x, dim=0, out=out) is out
    check(out, reference(f64(x), axis=0), "f32")


def test_a_one_dim_input_is_one_row() -> None:
    x = normal((1000,), "bf16", seed=5)
    check(softmax(x, config=CHUNKED), reference(f64(x)), "bf16")


def test_extreme_values_stay_finite() -> None:
    x = np.full((3, 100), -1e30, np.float32)
    x[:, 7] = 1e30
    x[1] = 0.0
    for config in (ONE_PASS, CHUNKED):
        result = softmax(x, config=config)
        expected = np.zeros((3, 100))
        expected[[0, 2], 7] = 1.0
        expected[1] = 0.01
        np.testing.assert_allclose(result, expected, atol=1e-7)


def test_the_launch_form_writes_out() -> None:
    x = normal((9, 50), "f16", seed=6)
    out = poisoned((9, 50), "f16")
    launch = softmax.launch(x, out=out, config=CHUNKED)
    assert isinstance(launch, cutile.Launch)
    launch.sync()
    check(out, reference(f64(x)), "f16")
    with pytest.raises(cutile.ArgumentError, match="out= is required"):
        softmax.launch(x)


def test_empty_rows_give_an_empty_result() -> None:
    assert softmax(np.zeros((0, 8), np.float32)).shape == (0, 8)
    with pytest.raises(cutile.ArgumentError, match="rows of length 0"):
        softmax(np.zeros((3, 0), np.float32))


# -- the chunked kernel: long rows, -inf entries, where the maximum is --------------------------

#: chunks of 1024 columns: rows of 5000 take 5 chunks, the last partial
LONG = {"tile_rows": 1, "tile_cols": 1024, "occupancy": 2, "num_worker_warps": 8}


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("log", [False, True])
def test_long_rows_in_chunks(dtype: str, log: bool) -> None:
    x = normal((3, 5000), dtype, seed=7, scale=3.0)
    x[0, 4990] = 12.0  # the maximum in the partial last chunk (pass 1 reads it first)
    x[1, 3] = 12.0  # in the first chunk (read last)
    out = poisoned((3, 5000), dtype)
    (log_softmax if log else softmax)(x, out=out, config=LONG)
    check(out, reference(f64(x), log=log), dtype, scale=10.0 if log else 1.0)


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("config", [LONG, CHUNKED], ids=["long", "chunked"])
def test_minus_infinity_entries(dtype: str, log: bool, config: dict[str, int]) -> None:
    x = normal((4, 3000), dtype, seed=8, scale=2.0)
    x[0, :1500] = -np.inf  # whole chunks of -inf, then finite values in the same lanes
    x[1, 2000:] = -np.inf  # the chunks read first are -inf
    x[2, ::7] = -np.inf  # scattered
    x[3, :] = -np.inf
    x[3, 1234] = 5.0  # one finite entry: probability 1
    out = poisoned((4, 3000), dtype)
    (log_softmax if log else softmax)(x, out=out, config=config)
    got, expected = f64(out.to_numpy()), reference(f64(x), log=log)
    finite = np.isfinite(expected)
    if log:  # a -inf entry is -inf; the others as the reference
        assert (got[~finite] == -np.inf).all()
        check(np.where(finite, got, 0.0), np.where(finite, expected, 0.0), dtype, scale=10.0)
    else:
        assert finite.all()
        check(got, expected, dtype)


@pytest.mark.parametrize("config", [ONE_PASS, LONG], ids=["one_pass", "long"])
def test_a_row_of_only_minus_infinity_is_nan_as_in_numpy(config: dict[str, int]) -> None:
    x = normal((2, 2000), "f32", seed=9)
    x[1] = -np.inf
    for function in (softmax, log_softmax):
        result = function(x, config=config)
        assert np.isnan(result[1]).all()
        check(result[:1], reference(f64(x[:1]), log=function is log_softmax), "f32", scale=10.0)


def test_large_and_tiny_values_in_chunks() -> None:
    x = np.zeros((3, 2500), np.float32)
    x[0] = np.linspace(-1e30, 1e30, 2500, dtype=np.float32)  # one entry near 1e30 dominates
    x[1] = np.linspace(-200.0, 0.0, 2500, dtype=np.float32)  # exp down to 1e-87: below f32's normals
    x[2] = 1e30
    result = softmax(x, config=LONG)
    expected = reference(f64(x))
    np.testing.assert_allclose(result, expected, rtol=2e-5, atol=1e-37)  # (below 2**-126: flushed to 0)
    logs, expected_logs = f64(log_softmax(x, config=LONG)), reference(f64(x), log=True)
    ulp = np.spacing(np.abs(x).max(axis=1, keepdims=True)).astype(np.float64)  # f32's at each row's magnitude
    assert (np.abs(logs - expected_logs) <= np.maximum(2 * ulp, 1e-4)).all()


def test_the_long_row_default_and_pruning() -> None:

    for dtype, chunk in ((f32, 8192), (bf16, 16384), (np.float16, 16384)):
        assert default_config(8192, 151936, dtype) == {"tile_rows": 1, "tile_cols": chunk, "occupancy": 1,
                                                       "num_worker_warps": 8}
    assert default_config(64, 8192, f32) == rows_default(64, 8192, f32)  # one pass: the rows' default
    for dtype in (f32, bf16):
        assert fits(default_config(8192, 151936, dtype), 151936)
    kept = [c for c in ROW_SPACE.configs() if fits(c, 151936)]
    # (chunked configs below the register budget, which spilled in tileiras's sm_90 code, are
    # pruned; those that held are kept)
    for spilled in [(4096, 4, 8), (2048, 4, 8), (16384, 2, 8), (8192, 4, 4)]:
        assert dict(zip(("tile_cols", "occupancy", "num_worker_warps"), spilled), tile_rows=1) not in kept
    for held in [(4096, 1, 8), (4096, 2, 8), (8192, 1, 8), (2048, 4, 4), (4096, 2, 4), (2048, 2, 8), (16384, 1, 8)]:
        assert dict(zip(("tile_cols", "occupancy", "num_worker_warps"), held), tile_rows=1) in kept
    stacked: dict[str, int | str] = {"tile_rows": 8, "tile_cols": 2048, "occupancy": 2,
                                     "num_worker_warps": 8}  # 64 elements a thread
    assert rows_fits(stacked, 151936) and not fits(stacked, 151936)
    one_pass: dict[str, int | str] = {"tile_rows": 1, "tile_cols": 8192, "occupancy": 4, "num_worker_warps": 8}
    assert fits(one_pass, 8192) and not fits(one_pass, 8193)  # the rule is the chunked kernel's


@pytest.mark.parametrize("config", [ONE_PASS, LONG, CHUNKED], ids=["one_pass", "long", "chunked"])
def test_a_nan_entry_makes_its_row_nan(config: dict[str, int]) -> None:
    x = normal((3, 2000), "f32", seed=10)
    x[1, 1500] = np.nan
    for function in (softmax, log_softmax):
        result = function(x, config=config)
        assert np.isnan(result[1]).all()
        rest = [0, 2]
        check(result[rest], reference(f64(x[rest]), log=function is log_softmax), "f32", scale=10.0)
