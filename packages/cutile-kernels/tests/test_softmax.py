"""softmax and log_softmax against numpy float64 on the interpreter: both schedules,
tails in rows and columns, f32/f16/bf16, poisoned outputs, any dim."""

from typing import Any

import numpy as np
import pytest
from cutile_kernels_testkit import CHUNKED, CONFIGS, ONE_PASS, check, f64, normal, poisoned

import cutile
from cutile_kernels import log_softmax, softmax


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
