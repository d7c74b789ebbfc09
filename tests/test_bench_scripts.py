"""scripts/bench_kernels.py: its logic on the interpreter (shape sets and parsing, the
correctness gate before timing, ratios, geomean and minimum, the tables and targets,
the host-overhead row's plain kernel), and the ``gemm --smoke`` run end to end.

The logic tests give the harness arms of their own (numpy matmuls, right and wrong), so
they need no kernel library; the smoke run needs ``cutile_kernels.matmul``."""

from __future__ import annotations

import argparse
import importlib
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "scripts"


@pytest.fixture(scope="module")
def bk() -> Any:
    sys.path.insert(0, str(SCRIPTS))
    try:
        yield importlib.import_module("bench_kernels")
    finally:
        sys.path.remove(str(SCRIPTS))


@pytest.fixture(autouse=True)
def interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUTILE_BACKEND", "interpreter")


# -- shapes and arguments ---------------------------------------------------------------------

def test_shapes_parse_as_m_n_k_or_one_cube(bk: Any) -> None:
    assert bk.parse_shape("3000x5000x1000") == (3000, 5000, 1000)
    assert bk.parse_shape("8191") == (8191, 8191, 8191)
    assert bk.parse_shape("1X4096X4096") == (1, 4096, 4096)


@pytest.mark.parametrize("text", ["3x4", "0x1x1", "axbxc", "", "1x2x3x4", "-5"])
def test_a_malformed_shape_is_an_argument_error_quoting_it(bk: Any, text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="MxNxK"):
        bk.parse_shape(text)


def test_choices_keep_the_order_given_and_refuse_unknown_names(bk: Any) -> None:
    assert bk.parse_choices("fp8,f16,fp8", bk.DTYPES, "dtype") == ("fp8", "f16")
    with pytest.raises(argparse.ArgumentTypeError, match="unknown dtype 'f32'"):
        bk.parse_choices("f16,f32", bk.DTYPES, "dtype")


def test_the_default_sweep_is_every_set_for_every_dtype(bk: Any) -> None:
    cases = bk.gemm_cases(dtypes=bk.DTYPES)
    assert len(cases) == 3 * (5 + 5 * 5 + 2)
    shapes = {(c.m, c.n, c.k) for c in cases}
    assert {(16384,) * 3, (1024,) * 3, (3000, 5000, 1000), (8191,) * 3, (1, 151936, 2560),
            (8192, 4096, 11008)} <= shapes
    assert [c.dtype for c in cases[:32]] == ["f16"] * 32  # grouped by dtype


def test_quick_is_a_handful_and_honours_the_dtypes(bk: Any) -> None:
    quick = bk.gemm_cases(dtypes=bk.DTYPES, quick=True)
    assert [(c.dtype, c.m, c.n, c.k) for c in quick[:2]] == [("f16", 8192, 8192, 8192), ("bf16", 8192, 8192, 8192)]
    assert sorted(c.m for c in quick if c.dtype == "bf16" and c.n != 8192) == list(bk.LLM_M)
    assert [(c.m, c.n, c.k) for c in quick if c.dtype == "fp8"] == [(8192, 8192, 8192)]
    assert {c.dtype for c in bk.gemm_cases(dtypes=("f16",), quick=True)} == {"f16"}


def test_explicit_shapes_replace_the_sets(bk: Any) -> None:
    cases = bk.gemm_cases(dtypes=("bf16", "fp8"), sets=("square",), shapes=[(7, 8, 9)])
    assert [(c.dtype, c.label) for c in cases] == [("bf16", "7x8x9"), ("fp8", "7x8x9")]


def test_a_case_counts_its_flops_and_weight_bytes(bk: Any) -> None:
    case = bk.GemmCase("fp8", 16, 4096, 11008)
    assert case.flops == 2 * 16 * 4096 * 11008
    assert case.weight_bytes == 4096 * 11008
    assert case.decode and not bk.GemmCase("f16", 17, 8, 8).decode
    assert bk.GemmCase("bf16", 1, 10, 20).weight_bytes == 400


# -- arithmetic -------------------------------------------------------------------------------

def test_geomean_and_its_empty_case(bk: Any) -> None:
    assert bk.geomean([1.0, 4.0]) == pytest.approx(2.0)
    assert bk.geomean([0.5, 2.0, 1.0]) == pytest.approx(1.0)
    assert math.isnan(bk.geomean([]))


def test_adaptive_reps_give_about_the_budget_within_bounds(bk: Any) -> None:
    assert bk.adaptive_reps(bk.TIMED_MS_PER_ARM / 20) == 20
    assert bk.adaptive_reps(1e-4) == bk.MAX_REPS
    assert bk.adaptive_reps(1e4) == bk.MIN_REPS
    assert bk.adaptive_reps(0.0) == bk.MAX_REPS


def test_the_gate_fails_non_finite_errors(bk: Any) -> None:
    assert bk.within_tolerance(1e-3, 1e-3)
    assert not bk.within_tolerance(2e-3, 1e-3)
    assert not bk.within_tolerance(math.nan, 1.0)
    assert not bk.within_tolerance(math.inf, 1.0)


def test_a_table_aligns_its_columns(bk: Any) -> None:
    text = bk.format_table(["name", "value"], [["a", "1"], ["longer", "12345"]])
    lines = text.splitlines()
    assert lines[0] == "name    value"
    assert lines[2] == "a           1"
    assert lines[3] == "longer  12345"
    assert len({len(line) for line in lines}) == 1


# -- the correctness gate and the timing of a row ------------------------------------------

class Recorder:
    """A numpy matmul arm that counts its runs; ``damage`` spoils its output."""

    def __init__(self, damage: str = "") -> None:
        self.runs = 0
        self.damage = damage

    def prepare(self, inputs: Any, world: Any, reference: Any) -> Any:
        from bench_kernels import Prepared

        out = inputs.new_out()

        def run() -> None:
            self.runs += 1
            result = inputs.a.astype(np.float64) @ inputs.b.astype(np.float64)
            if inputs.scale is not None:
                result *= inputs.scale
            if self.damage == "scaled":
                result *= 1.1
            if self.damage == "tail":
                result = result[:-1]  # the last row is never written: the poison stays
            out[:len(result)] = result.astype(out.dtype)

        return Prepared(run, out)


def refusing(inputs: Any, world: Any, reference: Any) -> Any:
    raise RuntimeError("this peer does not take this shape")


@pytest.mark.parametrize("dtype", ["f16", "bf16", "fp8"])
def test_wrong_arms_are_marked_and_not_timed_and_correct_ones_are_paired(bk: Any, dtype: str) -> None:
    world = bk.NumpyWorld(seed=1)
    case = bk.GemmCase(dtype, 19, 23, 37)
    arms = {name: Recorder(damage) for name, damage in
            (("ours", ""), ("good", ""), ("scaled", "scaled"), ("tail", "tail"))}
    arm_list = [bk.Arm(name, recorder.prepare) for name, recorder in arms.items()]
    arm_list += [bk.Arm("refuses", refusing), bk.Arm("absent", refusing, missing="not installed")]
    result = bk.measure_case(case.label, arm_list, world.gemm_inputs(case), world,
                             tolerance=bk.TOLERANCE[dtype], reps=3, warmup=1)
    status = {name: outcome.status for name, outcome in result.outcomes.items()}
    assert status == {"ours": "ok", "good": "ok", "scaled": "WRONG", "tail": "WRONG", "refuses": "error",
                      "absent": "absent"}
    assert result.outcomes["ours"].error < bk.TOLERANCE[dtype]
    assert result.outcomes["scaled"].error == pytest.approx(0.1, rel=0.05)
    assert math.isnan(result.outcomes["tail"].error)
    assert "does not take this shape" in result.outcomes["refuses"].reason
    assert result.outcomes["absent"].reason == "not installed"
    assert arms["scaled"].runs == 1 and arms["tail"].runs == 1  # checked once, never timed
    assert result.outcomes["scaled"].ms is None and result.outcomes["tail"].ms is None
    assert set(result.ratios) == {"good"}
    assert arms["good"].runs == 1 + 1 + 3  # check, warm-up, timed pairs
    assert result.outcomes["ours"].ms is not None and result.outcomes["good"].ms is not None


def test_peers_are_timed_alone_when_ours_is_wrong(bk: Any) -> None:
    world = bk.NumpyWorld()
    case = bk.GemmCase("f16", 8, 8, 8)
    ours, peer = Recorder("scaled"), Recorder()
    result = bk.measure_case(case.label, [bk.Arm("ours", ours.prepare), bk.Arm("peer", peer.prepare)],
                             world.gemm_inputs(case), world, tolerance=1e-3, reps=2, warmup=0)
    assert result.outcomes["ours"].status == "WRONG" and result.outcomes["ours"].ms is None
    assert result.outcomes["peer"].ms is not None and result.ratios == {}


def test_the_fp8_inputs_are_a_transposed_weight_with_scales(bk: Any) -> None:
    inputs = bk.NumpyWorld().gemm_inputs(bk.GemmCase("fp8", 3, 5, 7))
    assert inputs.b.shape == (7, 5) and inputs.weight.shape == (5, 7) and np.shares_memory(inputs.b, inputs.weight)
    assert inputs.scale == pytest.approx(bk.FP8_SCALES[0] * bk.FP8_SCALES[1])
    assert str(inputs.new_out().dtype) == "bfloat16" and np.isnan(inputs.new_out().astype(np.float32)).all()
    expected = inputs.a.astype(np.float64) @ inputs.weight.astype(np.float64).T * inputs.scale
    np.testing.assert_allclose(inputs.reference(), expected)


# -- summaries, tables, targets -------------------------------------------------------------

def results_of(bk: Any, rows: list[tuple[str, tuple[int, int, int], float | None]]) -> tuple[list[Any], list[Any]]:
    cases, results = [], []
    for dtype, shape, ratio in rows:
        case = bk.GemmCase(dtype, *shape)
        outcomes = {"cutile": bk.Outcome("ok", error=1e-4, ms=1.0), "cuBLAS": bk.Outcome("ok", error=1e-4, ms=1.0)}
        result = bk.CaseResult(case.label, outcomes, {} if ratio is None else {"cuBLAS": ratio})
        cases.append(case)
        results.append(result)
    return cases, results


def test_ratio_summary_gives_geomean_and_the_minimum_with_its_shape(bk: Any) -> None:
    cases, results = results_of(bk, [("f16", (1, 2, 3), 0.5), ("f16", (4, 5, 6), 2.0), ("f16", (7, 8, 9), 1.0),
                                     ("f16", (9, 9, 9), None)])
    mean, low, at, count = bk.ratio_summary(results, "cuBLAS")
    assert (mean, low, at, count) == (pytest.approx(1.0), 0.5, "1x2x3", 3)
    assert bk.ratio_summary(results, "Triton")[3] == 0


def test_the_targets_read_the_rows_they_name(bk: Any) -> None:
    cases, results = results_of(bk, [("f16", (8192,) * 3, 1.02), ("bf16", (8192,) * 3, 0.97),
                                     ("bf16", (1, 4096, 4096), 0.79), ("fp8", (8192,) * 3, 0.95)])
    results[2].extra["copy_gbs"] = 4000.0
    results[2].outcomes["cutile"].ms = 4096 * 4096 * 2 / (3800.0 * 1e6)  # 3800 GB/s: 0.95x copy
    host = bk.HostOverhead((128,) * 3, {}, None, 1.25, {})
    lines = bk.target_lines(results, cases, host)
    assert lines[0].startswith("f16 8192^3") and lines[0].endswith("1.020 met")
    assert lines[1].endswith("0.970 NOT met")
    assert "0.921 (n=3)" in lines[2] and lines[2].endswith("NOT met")  # geomean of 1.02, 0.97, 0.79
    assert "min 0.790 at 1x4096x4096 NOT met" in lines[3]
    assert lines[4].endswith("0.950 met")
    assert "min 0.950 at bf16 1x4096x4096 met" in lines[5]
    assert lines[6].endswith("1.250 NOT met")
    assert all(line.endswith("not measured") for line in bk.target_lines([], [], None))


def test_the_table_marks_wrong_failed_and_absent_arms(bk: Any) -> None:
    case = bk.GemmCase("bf16", 2048, 4096, 4096)
    outcomes = {"cutile": bk.Outcome("ok", error=3e-3, ms=0.2),
                "cuBLAS": bk.Outcome("WRONG", error=0.4),
                "Triton": bk.Outcome("error", reason="boom"),
                "cuTile Python": bk.Outcome("absent", reason="not importable")}
    arms = [bk.Arm(name, refusing) for name in outcomes]
    table = bk.gemm_table([bk.CaseResult(case.label, outcomes)], [case], arms)
    row = table.splitlines()[2].split()
    tflops = case.flops / 0.2 / 1e9
    assert row[:6] == ["bf16", "2048x4096x4096", f"{tflops:.0f}", "WRONG", "error", "-"]
    assert row[-4:] == ["3.0e-03", "4.0e-01", "-", "-"]


def test_the_decode_table_compares_the_weight_read_with_a_copy(bk: Any) -> None:
    case = bk.GemmCase("bf16", 1, 4096, 4096)
    ms = case.weight_bytes / (2000.0 * 1e6)  # 2000 GB/s
    result = bk.CaseResult(case.label, {"cutile": bk.Outcome("ok", error=0.0, ms=ms)}, extra={"copy_gbs": 4000.0})
    table = bk.decode_table([result], [case], [bk.Arm("cutile", refusing)])
    assert table.splitlines()[2].split() == ["bf16", "1x4096x4096", "4000", "2000", "0.500"]


# -- the host-overhead row and the smoke run -------------------------------------------------

def test_the_host_rows_plain_kernel_is_checked_and_timed_on_the_interpreter(bk: Any) -> None:
    host = bk.host_overhead(bk.NumpyWorld(), size=32, count=2, repeats=1, tile=(16, 16, 16))
    assert bk.TILED in host.per_call_us and host.per_call_us[bk.TILED] > 0
    assert not any("WRONG" in reason for reason in host.reasons.values()), host.reasons


def test_the_parser_has_the_gemm_subcommand_and_its_options(bk: Any) -> None:
    args = bk.build_parser().parse_args(["gemm", "--quick", "--dtypes", "bf16", "--shape", "8x16x32", "--reps", "7"])
    assert args.quick and args.dtypes == ("bf16",) and args.shape == [(8, 16, 32)] and args.reps == 7
    assert args.run is bk.run_gemm
    with pytest.raises(SystemExit):
        bk.build_parser().parse_args(["gemm", "--dtypes", "f64"])


# The smoke run is the end-to-end check of the script with the real kernel library.
def test_gemm_smoke_runs_end_to_end_on_the_interpreter() -> None:
    done = subprocess.run([sys.executable, str(SCRIPTS / "bench_kernels.py"), "gemm", "--smoke"],
                          capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Targets (issue 15)" in done.stdout
    assert "WRONG" not in done.stdout and "cutile arm not correct" not in done.stdout
    assert "Traceback" not in done.stderr, done.stderr
    assert "LaunchNeverRunWarning" not in done.stderr, done.stderr


def test_list_prints_the_rows_without_running_anything(bk: Any, capsys: pytest.CaptureFixture[str]) -> None:
    assert bk.main(["gemm", "--list", "--quick", "--dtypes", "bf16,fp8"]) == 0
    printed = capsys.readouterr().out
    rows = [line.split() for line in printed.splitlines()[2:-1]]
    assert [row[:2] for row in rows] == [["bf16", "8192x8192x8192"], *(["bf16", "x".join(map(str, s))] for s in
                                         bk.QUICK_LLM), ["fp8", "8192x8192x8192"]]
    assert rows[1][-1] == "yes" and printed.endswith("7 rows\n")  # M = 1: a GB/s row


def test_the_json_record_holds_every_arm_and_ratio(bk: Any) -> None:
    import json

    cases, results = results_of(bk, [("f16", (8192,) * 3, 1.02), ("bf16", (1, 4096, 4096), None)])
    results[1].outcomes["cuBLAS"] = bk.Outcome("error", reason="boom")
    results[1].extra["copy_gbs"] = 4000.0
    host = bk.HostOverhead((128,) * 3, {bk.TILED: 9.0}, 4.0, None, {"matmul": "absent"})
    record = json.loads(json.dumps(bk.results_json(cases, results, host, {"device": "x"}, ["a target"])))
    assert record["device"] == "x" and record["targets"] == ["a target"]
    first, second = record["rows"]
    assert (first["m"], first["ratios"], first["arms"]["cutile"]["tflops"]) == (8192, {"cuBLAS": 1.02},
                                                                               pytest.approx(2 * 8192 ** 3 / 1e9))
    assert second["arms"]["cuBLAS"] == {"status": "error", "relative_error": None, "ms": None, "reason": "boom",
                                        "note": "", "tflops": None}
    assert second["copy_gbs"] == 4000.0 and record["host"]["per_call_us"] == {bk.TILED: 9.0}
