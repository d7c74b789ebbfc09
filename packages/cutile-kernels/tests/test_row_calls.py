"""How the row kernels take arguments and configs: errors naming the parameter, kinds
of inputs and results, `default_config`, and the `cutile.tune` search and record."""

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from cutile_kernels_testkit import ONE_PASS, check, f64, normal

import cutile
from cutile import api, tune
from cutile.core import bf16, f16, f32, i32
from cutile_kernels import add_rms_norm, default_config, layer_norm, layer_norm_backward, qk_norm, rms_norm, softmax
from cutile_kernels import _norms as norms
from cutile_kernels import _rows as rows_module
from cutile_kernels._rows import RowTuning
from cutile_kernels._softmax import tuning as softmax_tuning  # (the package's `softmax` is the function)
from cutile_kernels._rows import ROW_SPACE, RowConfig, fits

X = np.ones((4, 10), np.float32)
W = np.ones(10, np.float32)


@pytest.mark.parametrize("call, error, message", [
    (lambda: softmax(np.ones((4, 10), np.int32)), cutile.ArgumentTypeError, "softmax: x has dtype i32"),
    (lambda: softmax([[1.0, 2.0]]), cutile.ArgumentTypeError, "softmax: x must be a tensor"),
    (lambda: softmax(X, dim=2), cutile.ArgumentError, "dim 2 is out of range"),
    (lambda: softmax(X, dim=True), cutile.ArgumentError, "dim True"),
    (lambda: softmax(X, out=np.ones((4, 11), np.float32)), cutile.ArgumentError, "softmax: out has shape"),
    (lambda: softmax(X, out=np.ones((4, 10), np.float16)), cutile.ArgumentTypeError, "softmax: out has dtype f16"),
    (lambda: softmax(api.from_numpy(X).partition([2, 16])), cutile.ArgumentTypeError, "x is a partition"),
    (lambda: softmax(X, config={"tile_rows": 3, "tile_cols": 64, "occupancy": 1, "num_worker_warps": 4}),
     cutile.ArgumentError, "powers of two"),
    (lambda: softmax(X, config={"tile_rows": 1}), cutile.ArgumentError, "expected positive ints"),
    (lambda: rms_norm(X, np.ones(9, np.float32)), cutile.ArgumentError, "rms_norm: weight has shape \\[9\\]"),
    (lambda: rms_norm(X, np.ones(10, np.int32)), cutile.ArgumentTypeError, "rms_norm: weight has dtype i32"),
    (lambda: rms_norm(X, W, eps=-1.0), cutile.ArgumentError, "eps must be a finite number"),
    (lambda: rms_norm(X, W, eps="1"), cutile.ArgumentError, "eps must be a finite number"),
    (lambda: add_rms_norm(X, X[:, :5], W), cutile.ArgumentError, "add_rms_norm: residual has shape"),
    (lambda: add_rms_norm(X, X, W, out=np.ones_like(X)), cutile.ArgumentError, "out must be a tuple of 2"),
    (lambda: add_rms_norm(X, X, W, out=(None, np.ones((4, 10), np.float16))), cutile.ArgumentTypeError,
     "out\\[1\\] \\(normed\\) has dtype f16"),
    (lambda: qk_norm(X, np.ones((4, 12), np.float32), W, W), cutile.ArgumentError, "q's head dim is 10 and k's 12"),
    (lambda: layer_norm(X, W, np.ones(10, np.float16)), cutile.ArgumentTypeError, "bias has dtype f16"),
    (lambda: layer_norm(X, W, W, return_stats=True, out=(None, None)), cutile.ArgumentError,
     "out must be a tuple of 3"),
    (lambda: layer_norm(X, W, W, return_stats=True, out=(None, np.ones((4,), np.float32), None)),
     cutile.ArgumentError, "out\\[1\\] \\(mean\\) has shape \\[4\\]; expected \\[4, 1\\]"),
    (lambda: layer_norm_backward(X, X, W, np.ones(4, np.float16), np.ones(4, np.float32)), cutile.ArgumentError,
     "mean must be f32 with one value per row \\(4\\)"),
    (lambda: layer_norm_backward(X, X, W, np.ones(4, np.float32), np.ones(5, np.float32)), cutile.ArgumentError,
     "rstd must be f32 with one value per row"),
    (lambda: layer_norm_backward(X[:, :5], X, W, np.ones(4, np.float32), np.ones(4, np.float32)),
     cutile.ArgumentError, "dy has shape"),
    (lambda: rms_norm(np.array(1.0, np.float32), W), cutile.ArgumentError, "x is a scalar"),
])
def test_errors_name_the_parameter(call: Any, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        call()


def test_an_out_sharing_memory_with_an_input_is_refused() -> None:
    x = np.random.default_rng(0).standard_normal((4, 10)).astype(np.float32)
    with pytest.raises(cutile.ArgumentError, match="softmax: out overlaps the memory of x"):
        softmax(x, out=x)
    with pytest.raises(cutile.ArgumentError, match="softmax: out overlaps the memory of x"):
        softmax(x, dim=0, out=x)
    r = x.copy()
    with pytest.raises(cutile.ArgumentError, match="out\\[1\\] \\(normed\\) overlaps the memory of residual"):
        add_rms_norm(x, r, W, out=(None, r))
    weights = np.ones((2, 10), np.float32)
    with pytest.raises(cutile.ArgumentError, match="rms_norm: out overlaps the memory of weight"):
        rms_norm(np.ones((1, 10), np.float32), weights[0], out=weights[:1])
    halves = np.zeros((8, 10), np.float32)
    softmax(halves[:4], out=halves[4:])  # neighbours in one buffer do not overlap


def test_a_non_contiguous_out_of_many_dims_is_refused() -> None:
    x = np.ones((2, 3, 10), np.float32)
    out = api.zeros([3, 2, 10]).permute(1, 0, 2)
    with pytest.raises(cutile.ArgumentError, match="out of shape \\[2, 3, 10\\] is not contiguous"):
        rms_norm(x, W, out=out)


def test_a_read_only_out_is_refused_by_the_launch() -> None:
    out = np.zeros((4, 10), np.float32)
    out.flags.writeable = False
    with pytest.raises(cutile.CutileError):
        softmax(X, out=out)


def test_non_contiguous_inputs() -> None:
    base = normal((6, 4, 64), "f32", seed=1)
    strided_rows = base[:, 1, :]  # 2-D with a row stride: read in place
    check(rms_norm(strided_rows, W.repeat(7)[:64], config=ONE_PASS),
          f64(strided_rows) / np.sqrt((f64(strided_rows) ** 2).mean(-1, keepdims=True) + 1e-6), "f32", scale=4.0)
    leading = base.transpose(1, 0, 2)  # leading dims not contiguous: copied
    expected = f64(leading) / np.sqrt((f64(leading) ** 2).mean(-1, keepdims=True) + 1e-6)
    check(rms_norm(leading, np.ones(64, np.float32)), expected, "f32", scale=4.0)


def test_cutile_tensors_in_and_out() -> None:
    x = api.from_numpy(normal((5, 33), "f32", seed=2))
    y = rms_norm(x, api.ones([33]))
    assert isinstance(y, cutile.Tensor) and y.shape == (5, 33)
    total, normed = add_rms_norm(x, x, api.ones([33]))
    assert isinstance(total, cutile.Tensor) and isinstance(normed, cutile.Tensor)


@pytest.mark.parametrize("dtype, cols, expected", [
    (f32, 8192, {"tile_rows": 1, "tile_cols": 8192, "occupancy": 2, "num_worker_warps": 8}),
    (bf16, 8192, {"tile_rows": 1, "tile_cols": 16384, "occupancy": 2, "num_worker_warps": 8}),
    (f32, 151936, {"tile_rows": 1, "tile_cols": 4096, "occupancy": 4, "num_worker_warps": 8}),
    (np.float16, 300, {"tile_rows": 16, "tile_cols": 16384, "occupancy": 2, "num_worker_warps": 8}),
    (f32, 128, {"tile_rows": 16, "tile_cols": 8192, "occupancy": 2, "num_worker_warps": 4}),
    (bf16, 128, {"tile_rows": 64, "tile_cols": 16384, "occupancy": 2, "num_worker_warps": 8}),
    (f32, 2000, {"tile_rows": 2, "tile_cols": 8192, "occupancy": 2, "num_worker_warps": 4}),
])
def test_default_config(dtype: Any, cols: int, expected: dict[str, int]) -> None:
    config = default_config(16384, cols, dtype)
    assert config == expected
    for name, value in config.items():
        assert value in ROW_SPACE.params[name]  # a config of the searched space


def test_a_few_rows_are_not_stacked_past_their_count() -> None:
    assert default_config(3, 128, f32)["tile_rows"] == 4
    assert default_config(1, 64, bf16)["tile_rows"] == 1


def test_default_config_refuses_a_non_dtype() -> None:
    with pytest.raises(cutile.ArgumentTypeError, match="default_config: dtype"):
        default_config(4, 4, object())


def test_the_one_pass_schedule_is_chosen_by_the_row_length() -> None:
    config = RowConfig.of(default_config(1, 300, f16))
    assert config.tile(300) == (1, 512, True)
    assert config.tile(20000) == (1, 16384, False)


def test_pruning_drops_duplicates_and_tiles_too_large() -> None:
    kept = [c for c in ROW_SPACE.configs() if fits(c, 300)]
    assert {c["tile_cols"] for c in kept} == {2048}  # every one-pass config with a wider tile is the same
    kept = [c for c in ROW_SPACE.configs() if fits(c, 8192)]
    assert all(c["tile_rows"] * c["tile_cols"] <= 2048 * c["num_worker_warps"] for c in kept)
    assert {"tile_rows": 1, "tile_cols": 8192, "occupancy": 2, "num_worker_warps": 8} in kept


def test_a_search_on_the_interpreter_finds_a_valid_winner(tmp_path: Path) -> None:
    tuning = norms.tuning("rms_norm")
    found = tuning.search(8, 300, f32, warmup=1, reps=1, paired_reps=2, log=tmp_path / "trials.jsonl")
    assert fits(found.best, 300)
    assert {t.status for t in found.trials} <= {"ok", "pruned"}
    assert sum(t.status == "ok" for t in found.trials) == len([c for c in ROW_SPACE.configs() if fits(c, 300)])
    assert len((tmp_path / "trials.jsonl").read_text().splitlines()) == 1 + len(ROW_SPACE.configs())


def test_a_wrong_kernel_result_fails_the_search_gate() -> None:
    tuning = softmax_tuning()
    check_before = tuning._build  # the builder's check decides: here it says wrong

    def wrong(config: tune.Config, rows: int, cols: int, dtype: Any) -> Any:
        runner, _ = check_before(config, rows, cols, dtype)
        return runner, lambda: False

    tuning._build = wrong
    try:
        with pytest.raises(cutile.TuneError, match="the check function returned False"):
            tuning.search(4, 100, f32, warmup=1, reps=1, budget=5.0)
    finally:
        tuning._build = check_before


def test_a_committed_record_decides_the_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tuning = softmax_tuning(log=True)
    record = tune.Record(tuning.tuner.provenance)
    chosen: tune.Config = {"tile_rows": 2, "tile_cols": 2048, "occupancy": 4, "num_worker_warps": 4}
    record.winners["64x512x32bit"] = tune.Winner(chosen, 0.1)
    arch = tuning.tuner.provenance.arch  # (records are per arch: records/<arch>/<name>.json)
    record.save(tmp_path / arch / "log_softmax.json")
    assert json.loads((tmp_path / arch / "log_softmax.json").read_text())["winners"]
    monkeypatch.setattr(rows_module, "RECORDS", tmp_path)
    fresh = RowTuning("log_softmax", tuning.tuner.source, tuning._build)
    assert fresh.config(50, 300, f32) == RowConfig(2, 2048, 4, 4)
    assert fresh.config(50, 300, bf16) == RowConfig.of(default_config(50, 300, bf16))  # another bucket


def test_a_stale_record_is_not_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                    caplog: pytest.LogCaptureFixture) -> None:
    tuning = softmax_tuning()
    stale = tune.Provenance(**{**tuning.tuner.provenance.__dict__, "source_hash": "0" * 16})
    record = tune.Record(stale)
    record.winners["64x512x32bit"] = tune.Winner({"tile_rows": 4, "tile_cols": 2048, "occupancy": 1,
                                                  "num_worker_warps": 4}, 0.1)
    record.save(tmp_path / stale.arch / "softmax.json")
    monkeypatch.setattr(rows_module, "RECORDS", tmp_path)
    fresh = RowTuning("softmax", tuning.tuner.source, tuning._build)
    assert fresh.config(50, 300, f32) == RowConfig.of(default_config(50, 300, f32))
    assert "source_hash" in caplog.text


def test_unknown_tuning_names_are_refused() -> None:
    with pytest.raises(cutile.ArgumentError, match="no row kernel 'gemm'"):
        norms.tuning("gemm")


def test_i32_is_not_a_row_dtype() -> None:
    with pytest.raises(cutile.ArgumentTypeError, match="expected f16, bf16 or f32"):
        layer_norm(api.zeros([2, 4], i32), W[:4], W[:4])
