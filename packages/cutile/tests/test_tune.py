"""`cutile.tune` on the interpreter: declared spaces and their checks, invalid and
wrong configs skipped, the budget, the trial log (resume, refusal), records and their
provenance (each stale field refused), winners by shape bucket, the disk cache and
search on first use."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import cutile
from cuda_core import CudaLaunchError
from cutile import api, tune
from cutile.core import Mut, Tensor, f32, load_tile_like

pytestmark = pytest.mark.interpreter_only


@cutile.entry
def scaled_add(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]], y: Tensor[f32, [-1]], a: f32) -> None:
    z.store(a * load_tile_like(x, z) + load_tile_like(y, z))


N = 300  # not a multiple of any tile: every config has a tail


def _inputs(seed: int = 0) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    rng = np.random.default_rng(seed)
    return rng.standard_normal(N).astype(np.float32), rng.standard_normal(N).astype(np.float32)


def _setup(config: tune.Config) -> tune.Runner:
    xh, yh = _inputs()
    tile = config["tile"]
    assert isinstance(tile, int)
    z = api.full([N], np.nan).partition([tile])  # poisoned
    x, y = api.from_numpy(xh), api.from_numpy(yh)
    a = 3.0 if config.get("variant", "right") == "right" else 2.0
    return lambda: scaled_add(z, x, y, a)


def _reference() -> np.ndarray[Any, Any]:
    x, y = _inputs()
    expected: np.ndarray[Any, Any] = 3.0 * x.astype(np.float64) + y
    return expected


def test_space_is_every_combination_in_order_and_checks_known_parameters() -> None:
    space = tune.Space(tile=[64, 128], num_worker_warps=[1, 4], schedule=["a", "b"])
    configs = space.configs()
    assert len(configs) == 8 and configs[0] == {"tile": 64, "num_worker_warps": 1, "schedule": "a"}
    assert configs[1] == {"tile": 64, "num_worker_warps": 1, "schedule": "b"}
    for warps in (1, 2, 4, 8, 16, 32):
        tune.Space(num_worker_warps=[warps])
    for name, bad in [("num_worker_warps", 3), ("num_worker_warps", 64), ("occupancy", 0), ("occupancy", 33),
                      ("num_ctas", 3), ("split_k", 0), ("group_size", -1), ("tile_m", 0)]:
        with pytest.raises(cutile.ArgumentError, match=name):
            tune.Space(**{name: [bad]})
    with pytest.raises(cutile.ArgumentError, match="tile"):
        tune.Space(tile=[])
    with pytest.raises(cutile.ArgumentError, match="tile"):
        tune.Space(tile=[True])
    with pytest.raises(cutile.ArgumentError, match="repeated"):
        tune.Space(tile=[64, 64])
    assert tune.Space(tile=[64, 128]).digest != tune.Space(tile=[128, 64]).digest


def test_invalid_and_wrong_configs_are_skipped_and_the_best_is_checked_head_to_head() -> None:
    space = tune.Space(tile=[32, 64, 100, 128], variant=["right", "wrong"])
    result = tune.search(space, _setup, reference=_reference(), reps=3, warmup=1, paired_reps=4)
    by_status: dict[str, list[tune.Config]] = {}
    for trial in result.trials:
        by_status.setdefault(trial.status, []).append(trial.config)
    # tile 100 is not a power of two: its setup fails with a CutileError, the search goes on.
    assert {c["tile"] for c in by_status["invalid"]} == {100}
    assert all(c["variant"] == "wrong" for c in by_status["wrong"]) and len(by_status["wrong"]) == 3
    assert len(by_status["ok"]) == 3 and all(c["variant"] == "right" for c in by_status["ok"])
    assert result.best in by_status["ok"] and result.paired is not None and len(result.paired.ratios) == 4
    invalid = next(t for t in result.trials if t.status == "invalid")
    assert "Error" in invalid.reason


def test_the_flush_asked_for_reaches_every_timing(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[Any] = []
    real_bench, real_paired = tune.do_bench, tune.do_bench_paired

    def bench(*args: Any, **kwargs: Any) -> Any:
        asked.append(kwargs["flush_l2"])
        return real_bench(*args, **kwargs)

    def paired(*args: Any, **kwargs: Any) -> Any:
        asked.append(kwargs["flush_l2"])
        return real_paired(*args, **kwargs)

    monkeypatch.setattr(tune, "do_bench", bench)
    monkeypatch.setattr(tune, "do_bench_paired", paired)
    space = tune.Space(tile=[64, 128])
    tune.search(space, _setup, reference=_reference(), reps=2, warmup=0, paired_reps=2, flush_l2="clean")
    assert asked == ["clean"] * 3  # two configs, then the head to head
    with pytest.raises(cutile.ArgumentError, match="flush_l2 must be"):
        tune.search(space, _setup, flush_l2="sometimes")


def test_a_runner_failing_on_its_first_call_is_invalid_and_other_errors_propagate() -> None:
    def setup(config: tune.Config) -> tune.Runner:
        if config["tile"] == 64:
            def fails() -> None:
                raise cutile.LaunchError("scaled_add: the grid does not fit")
            return fails
        return _setup(config)

    result = tune.search(tune.Space(tile=[64, 128]), setup, reference=_reference(), reps=1, warmup=0)
    assert [t.status for t in result.trials] == ["invalid", "ok"] and result.best == {"tile": 128}
    assert result.paired is None and "grid does not fit" in result.trials[0].reason

    def buggy(config: tune.Config) -> tune.Runner:
        raise ZeroDivisionError("a bug in the setup, not an invalid config")

    with pytest.raises(ZeroDivisionError):
        tune.search(tune.Space(tile=[64]), buggy)

    def out_of_resources(config: tune.Config) -> tune.Runner:
        def launch() -> None:
            raise CudaLaunchError(701, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", "too many resources", "cuLaunchKernel")
        return launch if config["tile"] == 64 else _setup(config)

    result = tune.search(tune.Space(tile=[64, 128]), out_of_resources, reps=1, warmup=0)
    assert [t.status for t in result.trials] == ["invalid", "ok"] and "CudaLaunchError" in result.trials[0].reason


def test_no_valid_config_is_a_tune_error_saying_why() -> None:
    with pytest.raises(tune.TuneError, match="wrong"):
        tune.search(tune.Space(tile=[64], variant=["wrong"]), _setup, reference=_reference(), reps=1, warmup=0)


def test_prune_and_a_check_function() -> None:
    space = tune.Space(tile=[32, 64, 128])
    result = tune.search(space, _setup, prune=lambda c: c["tile"] != 32,
                         reference=lambda value: bool(np.allclose(value[0].to_numpy(), _reference(),
                                                                  rtol=1e-5, atol=1e-6)),
                         reps=1, warmup=0, paired_reps=2)
    assert [t.status for t in result.trials] == ["pruned", "ok", "ok"]


def test_the_budget_stops_starting_configs() -> None:
    def slow_setup(config: tune.Config) -> tune.Runner:
        time.sleep(0.1)
        return lambda: None

    space = tune.Space(tile_m=list(range(1, 21)))
    started = time.monotonic()
    result = tune.search(space, slow_setup, budget=0.25, reps=1, warmup=0, paired_reps=1)
    assert time.monotonic() - started < 1.5
    # Configs start until 0.25 s have passed: a few, never all 20 (a loaded machine may fit fewer).
    assert result.out_of_budget and 1 <= len(result.trials) <= 4
    with pytest.raises(cutile.ArgumentError, match="budget"):
        tune.search(space, slow_setup, budget=0)


def test_a_budgeted_search_tries_the_space_in_a_fixed_shuffled_order() -> None:
    space = tune.Space(occupancy=[1, 2, 4, 8], tile_m=[16, 32, 64, 128, 256])
    declared = [dict(c) for c in space.configs()]

    def order_of(**options: Any) -> list[tune.Config]:
        seen: list[tune.Config] = []

        def setup(config: tune.Config) -> tune.Runner:
            seen.append(dict(config))
            raise cutile.ArgumentError("invalid: only the order is looked at")

        with pytest.raises(tune.TuneError):
            tune.search(space, setup, **options)
        return seen

    assert order_of() == declared and order_of(budget=1e6, order="declared") == declared
    shuffled = order_of(budget=1e6)
    assert shuffled != declared and sorted(map(str, shuffled)) == sorted(map(str, declared))
    assert order_of(budget=1e6) == shuffled == order_of(order="shuffled")  # the same every search
    # the first quarter reaches beyond the first value of the first parameter
    assert len({c["occupancy"] for c in shuffled[:5]}) > 1
    with pytest.raises(cutile.ArgumentError, match="order must be one of"):
        tune.search(space, lambda c: (lambda: None), order="random")


def test_the_log_resumes_and_refuses_another_space(tmp_path: Path) -> None:
    log = tmp_path / "trials.jsonl"
    calls: list[tune.Config] = []

    def setup(config: tune.Config) -> tune.Runner:
        calls.append(dict(config))
        time.sleep(0.05)
        return lambda: None

    space = tune.Space(tile_m=[1, 2, 3, 4, 5, 6])
    first = tune.search(space, setup, budget=0.12, log=log, reps=1, warmup=0, paired_reps=1)
    assert first.out_of_budget
    tried = len(first.trials)
    lines = log.read_text().splitlines()
    assert json.loads(lines[0])["space"] == space.digest and len(lines) == 1 + tried
    done = {int(json.loads(line)["config"]["tile_m"]) for line in lines[1:]}
    calls.clear()
    second = tune.search(space, setup, log=log, reps=1, warmup=0, paired_reps=1)
    assert not second.out_of_budget and len(second.trials) == 6
    # Only the rest ran (the first ones of the log only again for the head to head, at the end).
    assert [int(c["tile_m"]) for c in calls[:6 - tried]] == sorted(set(range(1, 7)) - done)
    with pytest.raises(tune.TuneError, match="another search space"):
        tune.search(tune.Space(tile_m=[1, 2]), setup, log=log)
    (tmp_path / "junk.jsonl").write_text("not json\n")
    with pytest.raises(tune.TuneError, match="not a cutile tuning log"):
        tune.search(space, setup, log=tmp_path / "junk.jsonl")


def _provenance(**changes: str) -> tune.Provenance:
    base = tune.Provenance.current("scaled_add", scaled_add, tune.Space(tile=[64, 128]))
    return tune.Provenance(**{**base.__dict__, **changes})


def test_provenance_is_of_the_kernel_source_and_the_system() -> None:
    here = _provenance()
    assert here.kernel == "scaled_add" and here.arch == "interpreter" and here.cutile_version == cutile.__version__
    assert len(here.source_hash) == 16 and here.space_hash == tune.Space(tile=[64, 128]).digest
    assert tune.Provenance.current("k", "def k(): pass", tune.Space(tile=[1])).source_hash != here.source_hash


@pytest.mark.parametrize("field", ["kernel", "source_hash", "cutile_version", "tileiras", "arch", "space_hash"])
def test_a_stale_record_is_refused_naming_the_field(tmp_path: Path, field: str) -> None:
    path = tmp_path / "scaled_add.json"
    tune.Record(_provenance(**{field: "something else"}), {"512": tune.Winner({"tile": 64}, 1.0)}).save(path)
    with pytest.raises(tune.StaleRecordError, match=field) as caught:
        tune.Record.load(path, _provenance())
    assert caught.value.field == field and caught.value.recorded == "something else"
    assert isinstance(caught.value, cutile.CutileError)


def test_a_record_round_trips_and_malformed_ones_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    record = tune.Record(_provenance(), {"512": tune.Winner({"tile": 64}, 1.5)})
    record.save(path)
    assert tune.Record.load(path, _provenance()) == record
    path.write_text("{}")
    with pytest.raises(tune.TuneError, match="not a cutile tuning record"):
        tune.Record.load(path, _provenance())
    with pytest.raises(tune.TuneError, match="cannot read"):
        tune.Record.load(tmp_path / "missing.json", _provenance())


def test_shape_buckets() -> None:
    assert tune.shape_bucket((300,)) == "512"
    assert tune.shape_bucket((1, 1024, 3000)) == "1x1024x4096"


def _tuner(tmp_path: Path, **kwargs: Any) -> tune.Tuner:
    space = tune.Space(tile=[64, 128])
    options = {"search_options": {"reps": 1, "warmup": 0, "paired_reps": 2}, **kwargs}
    return tune.Tuner("scaled_add", space, lambda config, shape: _setup(config), source=scaled_add,
                      reference=lambda shape: _reference(), **options)


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CUTILE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("CUTILE_TUNE", raising=False)
    return tmp_path / "cache" / "tune"


def test_a_tuner_answers_from_its_record_by_bucket(tmp_path: Path, cache: Path) -> None:
    record = tmp_path / "scaled_add.json"
    tune.Record(_provenance(), {"512": tune.Winner({"tile": 128}, 1.0)}).save(record)
    tuner = _tuner(tmp_path, record=record, default={"tile": 64})
    assert tuner.config((300,)) == {"tile": 128}  # 300 -> bucket 512
    assert tuner.config((400,)) == {"tile": 128}
    assert tuner.config((600,)) == {"tile": 64}  # no winner for 1024: the default, no search
    assert not cache.exists()


def test_a_tuners_winner_gives_the_known_config_with_its_time_and_never_searches(
        tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    record = tmp_path / "scaled_add.json"
    tune.Record(_provenance(), {"512": tune.Winner({"tile": 128}, 1.5)}).save(record)
    tune.Record(_provenance(), {"512": tune.Winner({"tile": 64}, 9.0), "1024": tune.Winner({"tile": 64}, 2.5)}).save(
        cache / "scaled_add.json")
    monkeypatch.setenv("CUTILE_TUNE", "1")
    tuner = _tuner(tmp_path, record=record)
    assert tuner.winner((300,)) == tune.Winner({"tile": 128}, 1.5)  # the record's, over the cache's
    assert tuner.winner((600,)) == tune.Winner({"tile": 64}, 2.5)  # the cache's
    assert tuner.winner((3000,)) is None  # unknown: no search, though CUTILE_TUNE=1
    assert tune.Record.load(cache / "scaled_add.json", tuner.provenance).winners.keys() == {"512", "1024"}
    stale = tmp_path / "stale.json"
    tune.Record(_provenance(tileiras="an older tileiras"), {"512": tune.Winner({"tile": 128}, 1.0)}).save(stale)
    with pytest.raises(tune.StaleRecordError, match="tileiras"):
        _tuner(tmp_path, record=stale).winner((300,))
    assert _tuner(tmp_path, record=stale, on_stale="warn").winner((300,)) == tune.Winner({"tile": 64}, 9.0)


def test_a_stale_record_is_never_applied(tmp_path: Path, cache: Path, caplog: pytest.LogCaptureFixture) -> None:
    record = tmp_path / "scaled_add.json"
    tune.Record(_provenance(tileiras="an older tileiras"), {"512": tune.Winner({"tile": 128}, 1.0)}).save(record)
    with pytest.raises(tune.StaleRecordError, match="tileiras"):
        _tuner(tmp_path, record=record, default={"tile": 64}).config((300,))
    with caplog.at_level(logging.WARNING, logger="cutile.tune"):
        assert _tuner(tmp_path, record=record, default={"tile": 64}, on_stale="warn").config((300,)) == {"tile": 64}
    assert "stale" in caplog.text and "tileiras" in caplog.text


def test_a_stale_cache_is_logged_not_used_and_replaced(tmp_path: Path, cache: Path,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    tune.Record(_provenance(cutile_version="0.0.1"), {"512": tune.Winner({"tile": 128}, 1.0)}).save(
        cache / "scaled_add.json")
    with caplog.at_level(logging.WARNING, logger="cutile.tune"):
        assert _tuner(tmp_path, default={"tile": 64}).config((300,)) == {"tile": 64}
    assert "cutile_version" in caplog.text
    tuner = _tuner(tmp_path, search_on_first_use=True)
    best = tuner.config((300,))
    assert tune.Record.load(cache / "scaled_add.json", tuner.provenance).winners["512"].config == best


def test_search_on_first_use_fills_the_disk_cache(tmp_path: Path, cache: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(tune.TuneError, match="CUTILE_TUNE=1"):
        _tuner(tmp_path).config((300,))
    monkeypatch.setenv("CUTILE_TUNE", "1")
    tuner = _tuner(tmp_path)
    best = tuner.config((300,))
    assert best in ({"tile": 64}, {"tile": 128})
    cached = tune.Record.load(cache / "scaled_add.json", tuner.provenance)
    assert cached.winners["512"].config == best
    monkeypatch.setenv("CUTILE_TUNE", "0")
    assert _tuner(tmp_path).config((257,)) == best  # a new tuner finds it in the cache, same bucket
    assert _tuner(tmp_path, search_on_first_use=True, default={"tile": 64}).config((300,)) == best


def test_a_tuner_makes_a_record_to_commit(tmp_path: Path, cache: Path) -> None:
    tuner = _tuner(tmp_path)
    record = tuner.make_record([(300,), (1000,)])
    assert set(record.winners) == {"512", "1024"}
    record.save(tmp_path / "out.json")
    assert tune.Record.load(tmp_path / "out.json", tuner.provenance).winners == record.winners


def test_tuner_arguments_are_checked(tmp_path: Path) -> None:
    with pytest.raises(cutile.ArgumentError, match="on_stale"):
        _tuner(tmp_path, on_stale="ignore")
    with pytest.raises(cutile.ArgumentError, match="default"):
        _tuner(tmp_path, default={"tiles": 64})
    with pytest.raises(cutile.ArgumentError, match="name"):
        tune.Tuner("a/b", tune.Space(tile=[1]), lambda c, s: (lambda: None), source="x")


@pytest.mark.gpu
def test_on_the_gpu_a_search_times_real_launches_and_records_the_arch(tmp_path: Path, cache: Path) -> None:
    tuner = _tuner(tmp_path)
    result = tuner.tune((N,))
    assert all(t.status == "ok" for t in result.trials) and result.paired is not None
    assert result.paired.timing == "cuda-events"
    assert tuner.provenance.arch.startswith("sm_") and tuner.provenance.tileiras != "interpreter"
    record = tuner.make_record([(N,)])
    record.save(tmp_path / "r.json")
    assert tune.Record.load(tmp_path / "r.json", tuner.provenance).winners["512"].config in tune.Space(
        tile=[64, 128]).configs()


def test_a_gpu_provenance_names_the_tileiras_release_not_its_files(monkeypatch: pytest.MonkeyPatch) -> None:
    """A committed record must hold on every install of one tileiras release: the
    provenance takes its release and --version text, not the disk cache's identity
    (paths and mtimes)."""
    import hashlib

    from cuda_core.testing import use_fake_driver
    from cutile_compiler import find_toolchain

    chain = find_toolchain()
    with use_fake_driver():
        monkeypatch.setattr("cutile._backend.current", lambda: "gpu")
        provenance = tune.Provenance.current("k", "source", tune.Space(tile=[1]))
    digest = hashlib.sha256(chain.version_text.encode()).hexdigest()[:16]
    assert provenance.tileiras == f"tileiras {chain.release} ({digest})"
    assert provenance.arch.startswith("sm_")
