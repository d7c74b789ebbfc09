"""The split-K kernels' record: matmul takes a winner of the call's bucket (each weight
layout its own), a stale record is refused with its reason (the default then), the
search is gated and pruned, and the tuning script writes a record that loads."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import cutile
from cutile import api, tune
from cutile.core import bf16, f16, f32
from cutile_kernels import _configs, _matmul, _splitk, _splitk_tuning, matmul
from matmul_testkit import assert_close, random
from matmul_testkit import reference as matmul_reference

pytestmark = pytest.mark.skipif(cutile.backend() != "interpreter", reason="the records of the interpreter backend")

ROOT = Path(__file__).parents[3]
M, N, K = 40, 24, 2100  # few output tiles, a long K: matmul's split-K path
WINNER = {"tile_m": 64, "tile_n": 32, "tile_k": 128, "split_k": 4, "method": "mma", "num_worker_warps": 8}


def _write_record(folder: Path, winners: dict[str, dict[str, Any]], source: str | None = None) -> None:
    split_k_tuner = _splitk_tuning.tuner(records_dir=folder)
    provenance = split_k_tuner.provenance
    if source is not None:
        provenance = tune.Provenance.current("split_k", source, _splitk_tuning.SPACE)
    record = tune.Record(provenance, {b: tune.Winner(c, 0.01) for b, c in winners.items()})
    assert split_k_tuner.record_path is not None
    record.save(split_k_tuner.record_path)


@pytest.fixture
def records(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("CUTILE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("CUTILE_TUNE", raising=False)
    yield tmp_path / "records"
    _splitk_tuning.use_records(None)


def _split_k_plans() -> list[Any]:
    return [s.plan for s in _matmul._SIGNATURES.values() if s.plan is not None and s.plan.path == "split_k"]


@pytest.mark.parametrize("stored_nk", [True, False], ids=["w.T", "kn"])
def test_matmul_takes_the_records_winner_for_each_layout(records: Path, stored_nk: bool) -> None:
    layout = "nk" if stored_nk else "kn"
    _write_record(records, {f"{layout}_e2_m64_n32_k4096": WINNER})
    _splitk_tuning.use_records(records)
    assert _matmul._choose_path(M, N, K, 2, bf16, f32, False, None) == "split_k"
    assert _splitk_tuning.choose(M, N, K, bf16, weight_nk=stored_nk) == WINNER
    assert _splitk_tuning.choose(M, N, K, bf16, weight_nk=not stored_nk) == _splitk.default_config(M, N, K, bf16)
    rng = np.random.default_rng(5)
    a, w = random(rng, (M, K), bf16), random(rng, (N, K), bf16)
    bias = random(rng, (N,), bf16)
    stored = api.from_numpy(w if stored_nk else np.ascontiguousarray(w.T))
    out = api.full([M, N], np.nan, dtype=bf16)
    matmul(api.from_numpy(a), stored.T if stored_nk else stored, out=out, bias=api.from_numpy(bias), activation="silu")
    expected = matmul_reference(a.astype(np.float64), w.T.astype(np.float64), bias=bias.astype(np.float64),
                                activation="silu")
    assert_close(out.to_numpy(), expected, bf16)
    plans = _split_k_plans()
    assert plans and plans[-1].config == WINNER


def test_where_both_records_hold_the_bucket_the_faster_family_computes_it(
        records: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    m, n, k = 300, 260, 100  # many tiles, a short K: the tiled GEMM's by the shape
    config = {"tile_m": 64, "tile_n": 64, "tile_k": 32, "split_k": 1, "method": "mma", "num_worker_warps": 4}
    _write_record(records, {"kn_e2_m512_n512_k128": config})  # measured 0.01 ms
    _splitk_tuning.use_records(records)

    def tiled_winner(ms: float | None) -> None:
        winner = None if ms is None else tune.Winner({}, ms)
        monkeypatch.setattr(_configs, "recorded", lambda dtype, m, n, k: winner)

    tiled_winner(0.02)
    assert _matmul._choose_path(m, n, k, 2, f16, f32, False, None) == "split_k"
    assert _matmul._choose_path(m, n, k, 2, f16, f32, False, None, compare_records=False) == "tiled"
    assert _matmul._choose_path(m, n, k, 2, f16, f32, False, None, weight_nk=True) == "tiled"  # no nk winner
    rng = np.random.default_rng(8)
    a, b = random(rng, (m, k), f16), random(rng, (k, n), f16)
    out = api.full([m, n], np.nan, dtype=f16)
    matmul(api.from_numpy(a), api.from_numpy(b), out=out)
    assert_close(out.to_numpy(), matmul_reference(a.astype(np.float64), b.astype(np.float64)), f16)
    plans = _split_k_plans()
    assert plans and plans[-1].config == config
    tiled_winner(0.005)
    assert _matmul._choose_path(m, n, k, 2, f16, f32, False, None) == "tiled"
    tiled_winner(None)  # only one record holds it: the shape decides
    assert _matmul._choose_path(m, n, k, 2, f16, f32, False, None) == "tiled"
    assert _matmul._choose_path(M, N, K, 2, f16, f32, False, None) == "split_k"


def test_a_stale_record_is_refused_with_its_reason_and_never_applied(records: Path,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    _write_record(records, {"kn_e2_m64_n32_k4096": WINNER}, source="other kernels")
    _splitk_tuning.use_records(records)
    with caplog.at_level("WARNING", logger="cutile.tune"):
        assert _splitk_tuning.choose(M, N, K, f16, weight_nk=False) == _splitk.default_config(M, N, K, f16)
    assert "source_hash" in caplog.text


def test_buckets_fit_and_prune() -> None:
    assert _splitk_tuning.split_k_bucket((128, 4096, 11008, 2, 0)) == "kn_e2_m128_n4096_k16384"
    assert _splitk_tuning.split_k_bucket((100, 4000, 4096, 2, 1)) == "nk_e2_m128_n4096_k4096"
    assert _splitk_tuning.split_k_bucket((3, 5, 7, 4, 0)) == "kn_e4_m16_n16_k64"
    fitted = _splitk_tuning.fit({**WINNER, "tile_m": 128, "tile_n": 128, "split_k": 32}, 40, 24, 300)
    assert (fitted["tile_m"], fitted["tile_n"], fitted["split_k"]) == (64, 32, 3)  # 3 K tiles of 128
    kept = [c for c in _splitk_tuning.SPACE.configs() if _splitk_tuning.prune_for(128, 4096, 4096, 2)(c)]
    assert kept and all(c["method"] == "mma" and int(c["tile_k"]) >= 32 for c in kept)
    for c in kept:
        blocks = -(-128 // int(c["tile_m"])) * -(-4096 // int(c["tile_n"])) * int(c["split_k"])
        assert _splitk_tuning.MIN_BLOCKS <= blocks <= _splitk_tuning.MAX_BLOCKS
        assert int(c["tile_m"]) * int(c["tile_n"]) <= (128 * 128 if c["num_worker_warps"] == 4 else 128 * 256)
    wide = [c for c in _splitk_tuning.SPACE.configs() if _splitk_tuning.prune_for(128, 4096, 4096, 4)(c)]
    assert wide and all(int(c["tile_k"]) <= 64 for c in wide)
    small = [c for c in _splitk_tuning.SPACE.configs() if _splitk_tuning.prune_for(40, 24, 300, 2)(c)]
    assert small  # a shape that cannot fill MIN_BLOCKS still has configs
    assert any(c["method"] == "mma_t" for c in _splitk_tuning.SPACE.configs()
               if _splitk_tuning.prune_for(16, 4096, 4096, 2)(c))


def test_the_tuner_searches_a_shape_gated_and_pruned(records: Path) -> None:
    """`tuner().tune` times configs the shape's prune keeps, gated against float64 at
    sampled columns; the others are invalid with the reason."""
    _splitk_tuning.use_records(records)
    shape = (40, 24, 300, 2, 1)
    result = _splitk_tuning.tuner().tune(shape, budget=30.0, warmup=1, reps=1, paired_reps=1,
                                         prune=lambda c: c["num_worker_warps"] == 4 and c["tile_n"] == 32
                                         and c["split_k"] in (1, 2, 4) and c["tile_k"] in (16, 64))
    ok = [t for t in result.trials if t.status == "ok"]
    assert ok and all(_splitk_tuning.prune_for(40, 24, 300, 2)(t.config) for t in ok)
    assert any(t.status == "invalid" and "cannot run or win" in (t.reason or "") for t in result.trials)


def test_the_tuning_script_writes_a_record_that_loads(tmp_path: Path) -> None:
    out = tmp_path / "records"
    env = {"CUTILE_BACKEND": "interpreter", "CUTILE_CACHE_DIR": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "tune_kernels.py"), "splitk", "--smoke", "--write",
                           "--records-dir", str(out)], capture_output=True, text=True, env={**os.environ, **env},
                          timeout=600)
    assert done.returncode == 0, done.stderr
    provenance = _splitk_tuning.tuner(records_dir=out).provenance
    record = tune.Record.load(out / "interpreter" / "split_k.json", provenance)
    assert set(record.winners) == {"kn_e2_m64_n32_k512", "nk_e2_m64_n32_k512"}
    assert all(_splitk_tuning.prune_for(40, 24, 300, 2)(w.config) for w in record.winners.values())
