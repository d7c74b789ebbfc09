"""The GEMM's configs: a record's winner is used, a stale record refused with its reason
(the defaults then), buckets and defaults as documented; the tuning script end to end."""

from __future__ import annotations

import dataclasses
import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import cutile
from cutile import tune
from cutile.core import bf16, f16, f32, f8e4m3fn

from cutile_kernels import _configs, _matmul, matmul
from cutile_kernels._records import RECORDS_DIR

pytestmark = pytest.mark.skipif(cutile.backend() != "interpreter", reason="the records of the interpreter backend")

M, N, K = 67, 45, 39
ROOT = Path(__file__).parents[3]


@pytest.fixture
def records(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A records folder of the test's own, with no tuner, plan or cached winner from before."""
    monkeypatch.setenv("CUTILE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("CUTILE_TUNE", raising=False)
    monkeypatch.setattr(_configs, "RECORDS_DIR", tmp_path / "records")
    monkeypatch.setattr(_configs, "_TUNERS", {})
    monkeypatch.setattr(_matmul, "_SIGNATURES", {})
    return tmp_path / "records"


def _only_plan() -> Any:
    """The plan of the one call signature without a config= (a search's runners pass theirs)
    that launches a kernel (M, N, K's rows are off 16 bytes: the call's own signature
    stages them, its call on the aligned temporaries has the plan)."""
    (signature,) = [s for key, s in _matmul._SIGNATURES.items()
                    if key[-1] is None and (s.plan is None or s.plan.path != "staged")]
    return signature.plan


def _operands() -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    rng = np.random.default_rng(3)
    return rng.standard_normal((M, K)).astype(np.float32), rng.standard_normal((K, N)).astype(np.float32)


WINNER = {"tile_m": 32, "tile_n": 16, "tile_k": 16, "num_worker_warps": 4, "occupancy": 1, "group_size": 2,
          "blocks_per_sm": 1}


def test_a_records_winner_is_used(records: Path) -> None:
    provenance = tune.Provenance.current("matmul_f32", _configs.kernel_source(), _configs.SPACE)
    record = tune.Record(provenance, {_configs.gemm_bucket((M, N, K)): tune.Winner(dict(WINNER), 0.1)})
    record.save(_configs.record_path(provenance.arch, f32))
    a, b = _operands()
    np.testing.assert_allclose(matmul(a, b), a.astype(np.float64) @ b, atol=1e-5)
    assert _only_plan().config == WINNER
    assert _only_plan().tile == (32, 16)


@pytest.mark.parametrize("field", ["source_hash", "cutile_version", "tileiras", "arch", "space_hash"])
def test_a_stale_record_is_refused_with_its_reason_and_defaults_used(records: Path, field: str,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    provenance = tune.Provenance.current("matmul_f32", _configs.kernel_source(), _configs.SPACE)
    stale = dataclasses.replace(provenance, **{field: "something-else"})
    tune.Record(stale, {_configs.gemm_bucket((M, N, K)): tune.Winner(dict(WINNER), 0.1)}).save(
        _configs.record_path(provenance.arch, f32))
    a, b = _operands()
    with caplog.at_level(logging.WARNING, logger="cutile.tune"):
        np.testing.assert_allclose(matmul(a, b), a.astype(np.float64) @ b, atol=1e-5)
    assert any(field in r.getMessage() and "not using" in r.getMessage() for r in caplog.records)
    assert _only_plan().config == _configs.fit_to_problem(_configs.default_config(M, N, K, f32), M, N, K)


def test_no_record_gives_the_default(records: Path) -> None:
    a, b = _operands()
    matmul(a, b)
    assert _only_plan().config == _configs.fit_to_problem(_configs.default_config(M, N, K, f32), M, N, K)


def test_buckets_and_defaults() -> None:
    assert _configs.gemm_bucket((8192, 8192, 8192)) == "m8192_n8192_k8192"
    assert _configs.gemm_bucket((3000, 5000, 1000)) == "m4096_n8192_k1024"
    assert _configs.gemm_bucket((1, 151936, 2560)) == "m16_n16384_k4096"
    assert _configs.gemm_bucket((100000, 10, 10)) == "m8192_n64_k64"
    big = _configs.default_config(8192, 8192, 8192, f16)
    assert (big["tile_m"], big["tile_n"], big["tile_k"], big["num_worker_warps"], big["group_size"]) == \
        (128, 256, 64, 8, 16)  # the sm_90 winner of the measured runs
    assert _configs.default_config(8192, 8192, 8192, bf16)["tile_n"] == 256
    assert _configs.default_config(8192, 8192, 8192, f8e4m3fn)["tile_k"] == 128
    assert _configs.default_config(8192, 8192, 8192, f32)["tile_n"] == 128
    assert _configs.default_config(128, 4096, 4096, f16)["tile_m"] == 64
    assert _configs.fit_to_problem(big, 20, 3000, 5)["tile_m"] == 32
    assert _configs.fit_to_problem(big, 20, 3000, 5)["tile_k"] == 16
    for config in _configs.SPACE.configs():
        if int(config["tile_m"]) * int(config["tile_n"]) >= 128 * 256 and _configs.prune(config):
            assert config["num_worker_warps"] == 8


def test_the_quick_search_tries_small_tiles_only_for_short_outputs() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("tune_kernels", ROOT / "scripts" / "tune_kernels.py")
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)

    def kept(shape: tuple[int, int, int]) -> list[dict[str, Any]]:
        keep = script.for_shape(script.quick(bf16, shape), shape)
        return [c for c in _configs.SPACE.configs() if keep(c)]

    smallest = {shape: min(int(c["tile_m"]) * int(c["tile_n"]) for c in kept(shape))
                for shape in ((8192, 8192, 8192), (128, 4096, 4096))}
    assert smallest == {(8192, 8192, 8192): 128 * 128, (128, 4096, 4096): 64 * 64}
    assert {c["tile_k"] for c in kept((8192, 8192, 8192))} == {32, 64}
    assert all(c["num_worker_warps"] == 8 for c in kept((8192, 8192, 8192)))


def test_the_tuning_script_writes_records_that_load(tmp_path: Path) -> None:
    out = tmp_path / "records"
    env = {"CUTILE_BACKEND": "interpreter", "CUTILE_CACHE_DIR": str(tmp_path / "cache")}
    import os

    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "tune_kernels.py"), "gemm", "--smoke", "--dtype",
                           "f32", "--write", "--records-dir", str(out)], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=600)
    assert done.returncode == 0, done.stderr
    path = out / "interpreter" / "matmul_f32.json"
    provenance = tune.Provenance.current("matmul_f32", _configs.kernel_source(), _configs.SMOKE_SPACE)
    record = tune.Record.load(path, provenance)
    assert record.winners and all(set(w.config) == set(_configs.SPACE.params) for w in record.winners.values())
    assert "matmul_f32" in done.stdout


def test_the_record_is_asked_once_per_call_signature(records: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[tuple[int, int, int]] = []
    choose = _configs.choose

    def counting(dtype: Any, m: int, n: int, k: int) -> dict[str, Any]:
        asked.append((m, n, k))
        return choose(dtype, m, n, k)

    monkeypatch.setattr(_configs, "choose", counting)
    a, b = _operands()
    for _ in range(3):
        matmul(a, b)
    assert asked == [(M, N, K)]
    matmul(a[:40], b)  # another signature: asked again
    assert asked == [(M, N, K), (40, N, K)]


def test_the_tuning_gate_passes_a_right_result_and_fails_a_wrong_one() -> None:
    from cutile_kernels import _tuning

    shape = (40, 24, 20)
    runner = _tuning.setup(f32)(dict(WINNER), shape)
    gate = _tuning.reference(f32)(shape)
    assert gate(runner().sync())
    out = _tuning._INPUTS[f32][5]
    np.asarray(out, copy=False)[20, 3] += 1.0  # the middle row, a sampled column
    assert not gate(None)


def test_precompile_compiles_each_config_in_threads() -> None:
    from cutile_kernels import _tuning

    configs = [dict(WINNER), {**WINNER, "tile_m": 16}, {**WINNER, "tile_x": 1}]  # the last one is refused
    assert _tuning.precompile(f16, (40, 24, 20), configs, "sm_90", 2) == 2


def test_cutile_tune_searches_a_bucket_on_first_use_and_caches_the_winner(records: Path, tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_configs, "SPACE", _configs.SMOKE_SPACE)  # a small search
    monkeypatch.setenv("CUTILE_TUNE", "1")
    a, b = _operands()
    np.testing.assert_allclose(matmul(a, b), a.astype(np.float64) @ b, atol=1e-5)
    chosen = _only_plan().config
    assert chosen in [_configs.fit_to_problem(c, M, N, K) for c in _configs.SMOKE_SPACE.configs()]
    cached = tmp_path / "cache" / "tune" / "matmul_f32.json"
    provenance = tune.Provenance.current("matmul_f32", _configs.kernel_source(), _configs.SMOKE_SPACE)
    assert _configs.gemm_bucket((M, N, K)) in tune.Record.load(cached, provenance).winners


def _committed_provenance(stem: str) -> Any:
    """The provenance the library computes now for the committed record ``stem``.json."""
    from cutile_kernels import (_activations, _argmax, _attention, _decode_attention, _embedding, _gemv, _kv_cache,
                                _norms, _qk_norm, _rope, _softmax, _splitk_tuning, _top_k)

    makers: dict[str, Any] = {
        "gemv": lambda: _gemv.tuner().provenance,
        "split_k": lambda: _splitk_tuning.tuner().provenance,
        "qk_norm": lambda: _qk_norm.TUNER.tuner.provenance,
        "softmax": lambda: _softmax.tuning().tuner.provenance,
        "log_softmax": lambda: _softmax.tuning(log=True).tuner.provenance,
        "rms_norm": lambda: _norms.tuning("rms_norm").tuner.provenance,
        "add_rms_norm": lambda: _norms.tuning("add_rms_norm").tuner.provenance,
        "decode_attention": lambda: _decode_attention.TUNER.tuner.provenance,
        "attention": lambda: _attention.TUNER.tuner.provenance,
        "layer_norm": lambda: _norms.tuning("layer_norm").tuner.provenance,
        "layer_norm_backward": lambda: _norms.tuning("layer_norm_backward").tuner.provenance,
        "pointwise": lambda: _activations.TUNER.tuner.provenance,
        "argmax": lambda: _argmax.TUNER.tuner.provenance,
        "embedding": lambda: _embedding.TUNER.tuner.provenance,
        "kv_cache_update": lambda: _kv_cache.TUNER.tuner.provenance,
        "rope": lambda: _rope.TUNER.tuner.provenance,
        "top_k": lambda: _top_k.TUNER.tuner.provenance,
        "matmul_f16": lambda: _configs.tuner(f16).provenance,
        "matmul_bf16": lambda: _configs.tuner(bf16).provenance,
        "matmul_f8e4m3fn": lambda: _configs.tuner(f8e4m3fn).provenance,
    }
    assert stem in makers, f"records/{stem}.json has no entry here: add its tuner"
    return makers[stem]()


@pytest.mark.parametrize("path", sorted(RECORDS_DIR.glob("*/*.json")),
                         ids=lambda path: f"{path.parent.name}/{path.stem}")
def test_every_committed_record_matches_its_kernels_source_and_space(path: Path) -> None:
    """A kernel's source or search space edited after its record was made stales the record
    (refused at call time with a warning, the defaults used): re-make it on that GPU."""
    import json

    recorded = json.loads(path.read_text())["provenance"]
    current = _committed_provenance(path.stem)
    for field in ("kernel", "source_hash", "space_hash", "cutile_version"):
        assert recorded[field] == getattr(current, field), (
            f"{path.parent.name}/{path.name}: {field} {recorded[field]!r} is not the kernel's "
            f"{getattr(current, field)!r} -- re-make the record on that GPU (its kernel's sweep or tune script)")
