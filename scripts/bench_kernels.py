#!/usr/bin/env python3
"""cutile_kernels against the strongest peers, measured in one run on one GPU.

One subcommand per kernel family (`SUBCOMMANDS`): ``gemm`` below, over the shared pieces
(`World`, `Arm`, `measure_case`, `format_table`, `ratio_summary`); ``gemv``, ``norms`` and
``pointwise`` run the scripts of those families (bench_gemv.py, bench_norms.py,
bench_pointwise.py) with the arguments after them, e.g. ``bench_kernels.py norms --smoke``.

- ``gemm``: ``cutile_kernels.matmul`` against cuBLAS (``torch.matmul``; for fp8 e4m3
  ``torch._scaled_mm`` with per-tensor scales), a tuned Triton matmul
  (``_peers/triton_matmul.py``) and NVIDIA cuTile Python's persistent matmul
  (``_peers/cutile_python_matmul.py``, where ``cuda.tile`` imports), for f16, bf16
  and fp8 over square shapes 1024-16384, the LLM shapes M in {1, 16, 128, 2048, 8192}
  x (N, K) of common layers, and two non-multiples; rows with M <= 16 also give the
  bandwidth of the weight read against a device-to-device copy of the weight; then a
  host-overhead row (a loop of small ``matmul`` calls against plain launches of the
  kernel it chose, on the arguments it built) and the issue's targets.

How a row is measured. Correctness first: every arm runs once into an output filled
with NaN, and its result is compared with a float32 reference (TF32 off; float64 on
the interpreter) computed from the same inputs: the relative error
||out - ref|| / ||ref|| (Frobenius) is printed, and an arm above its dtype's tolerance
or with a non-finite value is marked WRONG and not timed. Then every arm is timed by
``cutile.bench`` the same way: device events on one stream, the L2 flushed before each
rep, the cutile arm paired rep by rep with each peer (``do_bench_paired``); a ratio
is the median over pairs of peer time / cutile time (above 1.00: cutile is faster).
The cutile arm is timed through the launch-returning form of ``matmul`` (device work
alone; see `matmul_entry`, the one place that names the kernel library's API).

On the GPU machine (96 rows by default, estimated at 3-6 minutes on the H200 from cold
caches: the first compiles of each arm's configs and Triton's autotuning dominate, the
timed device work is well under a minute; ``--quick``, 8 rows: 1-2 minutes; ``--list``
prints the rows without a GPU):

    scripts/on_gpu_machine.sh python3 scripts/bench_kernels.py gemm
    scripts/on_gpu_machine.sh python3 scripts/bench_kernels.py gemm --quick
    scripts/on_gpu_machine.sh python3 scripts/bench_kernels.py gemm --dtypes bf16 --sets llm --reps 30
    scripts/on_gpu_machine.sh python3 scripts/bench_kernels.py gemm --json /tmp/gemm.json   # also as JSON

CI (no GPU): ``bench_kernels.py gemm --smoke`` runs the cutile arm alone on the CPU
interpreter with tiny shapes (the peers are skipped and the reason printed).

Needs torch on the GPU (a benchmark peer, never a dependency); triton and cuda.tile
are optional peers. The host-overhead row's plain kernel is defined in a function, so
this file keeps annotations evaluated at definition (no ``from __future__ import
annotations``).
"""

import argparse
import json
import math
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from _bench_common import numpy_dtype, torch_dtype

# -- what the gemm sweep covers ---------------------------------------------------------------

SQUARE = (1024, 2048, 4096, 8192, 16384)
LLM_M = (1, 16, 128, 2048, 8192)
#: (N, K) of common LLM layers: attention projections, MLP up/down (Llama-7B, Mistral-7B), a vocab head.
LLM_NK = ((4096, 4096), (11008, 4096), (4096, 11008), (14336, 4096), (151936, 2560))
ODD = ((3000, 5000, 1000), (8191, 8191, 8191))
SETS = ("square", "llm", "odd")
DTYPES = ("f16", "bf16", "fp8")
#: --quick: one LLM shape per M (each (N, K) once), in bf16.
QUICK_LLM = ((1, 4096, 4096), (16, 11008, 4096), (128, 4096, 11008), (2048, 14336, 4096), (8192, 151936, 2560))
#: --smoke: tails everywhere, a decode row (M = 1) and an M = 16 row.
SMOKE_SHAPES = ((33, 47, 29), (1, 40, 24), (16, 20, 70))
#: Norm-wise relative error allowed per input dtype: a few ulps of the output's rounding
#: (f16 2^-11, bf16 2^-8; fp8 outputs bf16). A dropped tail or a missed tile is far above.
TOLERANCE = {"f16": 5e-3, "bf16": 2e-2, "fp8": 2e-2}
#: The per-tensor scales of the fp8 rows (not 1, so that a scale left out shows).
FP8_SCALES = (0.75, 1.25)
ITEMSIZE = {"f16": 2, "bf16": 2, "fp8": 1}
DECODE_M = 16  # rows with M <= this also report the weight-read bandwidth
#: Adaptive reps: about this many milliseconds of device time per timed arm.
TIMED_MS_PER_ARM = 100.0
MIN_REPS, MAX_REPS = 5, 50

# The targets.
TARGET_SQUARE_8192 = 1.00   # fp16 and bf16 8192^3 vs cuBLAS
TARGET_GEOMEAN = 0.95       # over the f16/bf16 sweep vs cuBLAS
TARGET_FLOOR = 0.80         # no f16/bf16 shape below this vs cuBLAS
TARGET_FP8_8192 = 0.90      # fp8 8192^3 vs torch._scaled_mm
TARGET_DECODE_COPY = 0.90   # M <= 16: weight-read bandwidth vs a copy of the weight
TARGET_HOST = 1.10          # a matmul call's host cost vs a plain launch


@dataclass(frozen=True)
class GemmCase:
    dtype: str
    m: int
    n: int
    k: int

    @property
    def label(self) -> str:
        return f"{self.m}x{self.n}x{self.k}"

    @property
    def flops(self) -> int:
        return 2 * self.m * self.n * self.k

    @property
    def decode(self) -> bool:
        return self.m <= DECODE_M

    @property
    def weight_bytes(self) -> int:
        return self.n * self.k * ITEMSIZE[self.dtype]


def parse_shape(text: str) -> tuple[int, int, int]:
    """``MxNxK`` (``8x4096x4096``) or one number N for N^3."""
    parts = text.lower().split("x")
    try:
        values = [int(p) for p in parts]
    except ValueError:
        values = []
    if len(values) == 1:
        values = values * 3
    if len(values) != 3 or min(values) < 1:
        raise argparse.ArgumentTypeError(f"a shape is MxNxK of positive integers (or one N for N^3), got {text!r}")
    return values[0], values[1], values[2]


def parse_choices(text: str, allowed: Sequence[str], what: str) -> tuple[str, ...]:
    """A comma-separated subset of ``allowed``, in the order given, without repeats."""
    chosen: list[str] = []
    for item in (part.strip() for part in text.split(",")):
        if item not in allowed:
            raise argparse.ArgumentTypeError(f"unknown {what} {item!r}: choose from {', '.join(allowed)}")
        if item not in chosen:
            chosen.append(item)
    if not chosen:
        raise argparse.ArgumentTypeError(f"no {what} given: choose from {', '.join(allowed)}")
    return tuple(chosen)


def shapes_of_set(name: str) -> list[tuple[int, int, int]]:
    if name == "square":
        return [(s, s, s) for s in SQUARE]
    if name == "llm":
        return [(m, n, k) for m in LLM_M for n, k in LLM_NK]
    if name == "odd":
        return list(ODD)
    raise ValueError(f"unknown shape set {name!r}")


def gemm_cases(*, dtypes: Sequence[str], sets: Sequence[str] = SETS, quick: bool = False, smoke: bool = False,
               shapes: Sequence[tuple[int, int, int]] = ()) -> list[GemmCase]:
    """The rows of a gemm run, grouped by dtype: ``shapes`` when given (every dtype),
    else --smoke's tiny shapes, else --quick's handful, else the chosen sets."""
    if shapes:
        return [GemmCase(d, *s) for d in dtypes for s in shapes]
    if smoke:
        return [GemmCase(d, *s) for d in dtypes for s in SMOKE_SHAPES]
    if quick:
        cases = [GemmCase(d, 8192, 8192, 8192) for d in ("f16", "bf16") if d in dtypes]
        if "bf16" in dtypes:
            cases += [GemmCase("bf16", *s) for s in QUICK_LLM]
        if "fp8" in dtypes:
            cases.append(GemmCase("fp8", 8192, 8192, 8192))
        return cases
    return [GemmCase(d, *s) for d in dtypes for name in sets for s in shapes_of_set(name)]


# -- arithmetic of the tables -------------------------------------------------------------------

def geomean(values: Iterable[float]) -> float:
    """The geometric mean of positive values (NaN for none)."""
    logs = [math.log(v) for v in values]
    if not logs:
        return math.nan
    return math.exp(sum(logs) / len(logs))


def adaptive_reps(estimate_ms: float) -> int:
    """Reps giving about TIMED_MS_PER_ARM of device time, clamped to [MIN_REPS, MAX_REPS]."""
    if not estimate_ms > 0:
        return MAX_REPS
    return max(MIN_REPS, min(MAX_REPS, round(TIMED_MS_PER_ARM / estimate_ms)))


def within_tolerance(error: float, tolerance: float) -> bool:
    """The correctness gate: a finite relative error at most ``tolerance`` (NaN fails)."""
    return math.isfinite(error) and error <= tolerance


def format_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Columns right-aligned to their widest cell, the first left-aligned."""
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(str(c).ljust(w) if i == 0 else str(c).rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))

    return "\n".join([line(headers), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def format_ratio(value: float | None) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:.3f}"


def format_rate(value: float) -> str:
    if value >= 10:
        return f"{value:.0f}"
    return f"{value:.1f}" if value >= 1 else f"{value:.2g}"


def format_error(value: float | None) -> str:
    if value is None:
        return "-"
    return "non-finite" if not math.isfinite(value) else f"{value:.1e}"


# -- arms and their outcomes -------------------------------------------------------------------

OK, WRONG, ERROR, ABSENT = "ok", "WRONG", "error", "absent"


@dataclass
class Prepared:
    """One arm made ready for one case: ``run`` does the work once (it may return a
    cutile launch or op, which the bench queues and waits for), writing into ``out``."""

    run: Callable[[], Any]
    out: Any
    note: str = ""


@dataclass
class Outcome:
    """What became of one arm on one case."""

    status: str
    error: float | None = None
    reason: str = ""
    ms: float | None = None
    note: str = ""


@dataclass
class Arm:
    """A contender: ``prepare(inputs, world, reference)`` gives its `Prepared` (raising
    says why it cannot run this case); ``missing`` says why it cannot run at all (None:
    it can)."""

    name: str
    prepare: Callable[[Any, "World", Any], Prepared]
    missing: str | None = None


@dataclass
class CaseResult:
    """One row: each arm's outcome and each peer's ratio (peer time / ours)."""

    label: str
    outcomes: dict[str, Outcome]
    ratios: dict[str, float] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)


def first_line(exc: BaseException, limit: int = 160) -> str:
    text = f"{type(exc).__name__}: {exc}".strip().splitlines()[0]
    return text if len(text) <= limit else text[:limit - 3] + "..."


def is_pending(value: Any) -> bool:
    """A cutile launch or op (run by the bench, or by `finish`), as opposed to work already done."""
    import cuda_async
    import cutile

    return isinstance(value, (cutile.Launch, cuda_async.DeviceOp))


def finish(value: Any) -> None:
    """Runs a returned launch or op to completion (work that ran already needs nothing)."""
    if is_pending(value):
        value.sync()


def measure_case(label: str, arms: Sequence[Arm], inputs: Any, world: "World", *, tolerance: float,
                 reps: int | None, warmup: int) -> CaseResult:
    """Runs every arm once and checks it against ``world.reference``, then times the
    correct ones: ``arms[0]`` (ours) paired with each correct peer, or alone."""
    from cutile import bench

    reference = world.reference(inputs)
    outcomes: dict[str, Outcome] = {}
    ready: dict[str, Prepared] = {}
    for arm in arms:
        if arm.missing is not None:
            outcomes[arm.name] = Outcome(ABSENT, reason=arm.missing)
            continue
        try:
            prepared = arm.prepare(inputs, world, reference)
            world.poison(prepared.out)
            world.synchronize()  # (the poison is torch's work: cutile launches on its own stream)
            finish(prepared.run())
            world.synchronize()
            error = world.relative_error(prepared.out, reference)
        except Exception as exc:  # a peer refusing a shape is a row's note, not the end of the run
            world.synchronize_quietly()
            outcomes[arm.name] = Outcome(ERROR, reason=first_line(exc))
            continue
        good = within_tolerance(error, tolerance)
        outcomes[arm.name] = Outcome(OK if good else WRONG, error=error, note=prepared.note)
        if good:
            ready[arm.name] = prepared
    del reference
    result = CaseResult(label, outcomes)
    if not ready:
        return result
    ours = arms[0].name
    first = ready.get(ours) or next(iter(ready.values()))
    count = reps if reps is not None else adaptive_reps(bench.do_bench(first.run, warmup=1, reps=3).median_ms)
    our_samples: list[float] = []
    for arm in arms[1:]:
        if arm.name not in ready:
            continue
        try:
            if ours in ready:
                paired = bench.do_bench_paired(ready[ours].run, ready[arm.name].run, warmup=warmup, reps=count)
                our_samples += paired.a.samples_ms
                outcomes[arm.name].ms = paired.b.median_ms
                result.ratios[arm.name] = paired.ratio
            else:
                outcomes[arm.name].ms = bench.do_bench(ready[arm.name].run, warmup=warmup, reps=count).median_ms
        except Exception as exc:
            world.synchronize_quietly()
            outcomes[arm.name] = Outcome(ERROR, error=outcomes[arm.name].error, reason="timing: " + first_line(exc))
    if ours in ready:
        if not our_samples:
            our_samples = list(bench.do_bench(ready[ours].run, warmup=warmup, reps=count).samples_ms)
        outcomes[ours].ms = statistics.median(our_samples)
    return result


def ratio_summary(results: Sequence[CaseResult], peer: str) -> tuple[float, float, str, int]:
    """(geomean, minimum, label of the minimum, count) of one peer's ratios."""
    pairs = [(r.ratios[peer], r.label) for r in results if peer in r.ratios and math.isfinite(r.ratios[peer])]
    if not pairs:
        return math.nan, math.nan, "", 0
    low = min(pairs)
    return geomean(v for v, _ in pairs), low[0], low[1], len(pairs)


def verdict(value: float | None, target: float, *, at_most: bool = False) -> str:
    if value is None or not math.isfinite(value):
        return "not measured"
    met = value <= target if at_most else value >= target
    return "met" if met else "NOT met"


# -- where tensors live: torch on the GPU, numpy on the interpreter ----------------------------

class World:
    """Makes a subcommand's tensors and references on one side: `TorchWorld` (GPU) or
    `NumpyWorld` (the interpreter, for --smoke)."""

    tensor_kind = ""

    def synchronize(self) -> None:
        pass

    def synchronize_quietly(self) -> None:
        """After an arm failed: wait for the device without raising again."""
        try:
            self.synchronize()
        except Exception:
            pass

    def reference(self, inputs: Any) -> Any:
        return inputs.reference()

    def poison(self, out: Any) -> None:
        raise NotImplementedError

    def relative_error(self, out: Any, reference: Any) -> float:
        raise NotImplementedError

    def gemm_inputs(self, case: "GemmCase") -> "GemmInputs":
        raise NotImplementedError

    def copy_arm(self, source: Any) -> Prepared:
        """A device-to-device copy of ``source`` (the bandwidth ceiling of a weight read)."""
        raise NotImplementedError

    def release(self) -> None:
        """Between rows: give cached memory back."""


@dataclass
class GemmInputs:
    """One case's operands: a [M, K], b [K, N] (for fp8 the transposed view of a
    [N, K] weight, as torch._scaled_mm wants it), ``weight`` b's storage,
    ``scale`` the product of the per-tensor scales (None for 16-bit inputs)."""

    case: GemmCase
    a: Any
    b: Any
    weight: Any
    scale_a: float | None
    scale_b: float | None
    reference: Callable[[], Any]
    new_out: Callable[[], Any]

    @property
    def scale(self) -> float | None:
        return None if self.scale_a is None or self.scale_b is None else self.scale_a * self.scale_b


class NumpyWorld(World):
    tensor_kind = "numpy"

    def __init__(self, seed: int = 0) -> None:
        import numpy as np

        self.np = np
        self.rng = np.random.default_rng(seed)

    def dtype(self, name: str) -> Any:
        return numpy_dtype(name)

    def gemm_inputs(self, case: GemmCase) -> GemmInputs:
        np = self.np
        dtype = self.dtype(case.dtype)
        a = self.rng.standard_normal((case.m, case.k)).astype(dtype)
        if case.dtype == "fp8":
            weight = self.rng.standard_normal((case.n, case.k)).astype(dtype)
            b, (scale_a, scale_b), out_dtype = weight.T, FP8_SCALES, self.dtype("bf16")
        else:
            weight = self.rng.standard_normal((case.k, case.n)).astype(dtype)
            b, scale_a, scale_b, out_dtype = weight, None, None, dtype
        scale = 1.0 if scale_a is None or scale_b is None else scale_a * scale_b

        def reference() -> Any:
            return (a.astype(np.float64) @ b.astype(np.float64)) * scale

        return GemmInputs(case, a, b, weight, scale_a, scale_b, reference,
                          lambda: np.full((case.m, case.n), np.nan, dtype=out_dtype))

    def poison(self, out: Any) -> None:
        out[...] = self.np.nan

    def relative_error(self, out: Any, reference: Any) -> float:
        np = self.np
        values = np.asarray(out).astype(np.float64)
        if not np.all(np.isfinite(values)):
            return math.nan
        return float(np.linalg.norm(values - reference) / max(np.linalg.norm(reference), 1e-300))

    def copy_arm(self, source: Any) -> Prepared:
        target = self.np.empty_like(source)
        return Prepared(lambda: self.np.copyto(target, source), target)


class TorchWorld(World):
    tensor_kind = "torch"

    def __init__(self, seed: int = 0, device: str = "cuda") -> None:
        import torch

        self.torch = torch
        self.device = device
        torch.manual_seed(seed)
        # The reference in true float32: TF32 would round the operands to 10 bits.
        torch.backends.cuda.matmul.allow_tf32 = False

    def dtype(self, name: str) -> Any:
        return torch_dtype(self.torch, name)

    def gemm_inputs(self, case: GemmCase) -> GemmInputs:
        torch = self.torch
        dtype = self.dtype(case.dtype)
        a = torch.randn(case.m, case.k, device=self.device).to(dtype)
        if case.dtype == "fp8":
            weight = torch.randn(case.n, case.k, device=self.device).to(dtype)
            b, (scale_a, scale_b), out_dtype = weight.t(), FP8_SCALES, torch.bfloat16
        else:
            weight = torch.randn(case.k, case.n, device=self.device).to(dtype)
            b, scale_a, scale_b, out_dtype = weight, None, None, dtype
        scale = 1.0 if scale_a is None or scale_b is None else scale_a * scale_b

        def reference() -> Any:
            return torch.matmul(a.float(), b.float()).mul_(scale)

        return GemmInputs(case, a, b, weight, scale_a, scale_b, reference,
                          lambda: torch.full((case.m, case.n), math.nan, device=self.device, dtype=out_dtype))

    def synchronize(self) -> None:
        if self.device != "cpu":
            self.torch.cuda.synchronize()

    def poison(self, out: Any) -> None:
        out.fill_(math.nan)

    def relative_error(self, out: Any, reference: Any) -> float:
        torch = self.torch
        if not bool(torch.isfinite(out).all()):
            return math.nan
        difference = out.float().sub_(reference)
        return float(torch.linalg.vector_norm(difference) / torch.linalg.vector_norm(reference).clamp_min(1e-30))

    def copy_arm(self, source: Any) -> Prepared:
        target = self.torch.empty_like(source)
        return Prepared(lambda: target.copy_(source), target)

    def release(self) -> None:
        if self.device != "cpu":
            self.torch.cuda.empty_cache()

    def device_name(self) -> str:
        return "cpu" if self.device == "cpu" else str(self.torch.cuda.get_device_name(0))



# -- the gemm arms ------------------------------------------------------------------------------

def matmul_entry() -> Callable[..., Any]:
    """The function the cutile arm calls: ``cutile_kernels.matmul``'s form that returns
    the pending launch (``matmul.launch``) where there is one, so the bench times device
    work alone; else ``matmul`` itself, which runs the work (the table then notes that
    its time includes the host's wait). Adjust here if the API differs."""
    import cutile_kernels

    matmul: Callable[..., Any] = getattr(cutile_kernels, "matmul")  # (absent until the GEMM family lands)
    launch_form: Callable[..., Any] = getattr(matmul, "launch", matmul)
    return launch_form


def cutile_matmul(entry: Callable[..., Any], a: Any, b: Any, out: Any, *, scale_a: float | None,
                  scale_b: float | None) -> Any:
    """The one call of the cutile arm: out = (a @ b) [* scale_a * scale_b]."""
    if scale_a is None:
        return entry(a, b, out=out)
    return entry(a, b, out=out, scale_a=scale_a, scale_b=scale_b)


def cutile_matmul_missing() -> str | None:
    try:
        import cutile_kernels
    except ImportError as exc:
        return f"cutile_kernels does not import: {first_line(exc)}"
    if not hasattr(cutile_kernels, "matmul"):
        return "cutile_kernels.matmul not present"
    return None


def prepare_cutile(inputs: GemmInputs, world: World, reference: Any) -> Prepared:
    out = inputs.new_out()
    entry = matmul_entry()

    def run() -> Any:
        return cutile_matmul(entry, inputs.a, inputs.b, out, scale_a=inputs.scale_a, scale_b=inputs.scale_b)

    probe = run()  # the first call compiles; its result shows whether the launch form was taken
    pending = is_pending(probe)
    finish(probe)
    world.synchronize()
    return Prepared(run, out, "" if pending else "timed with its host wait (no launch-returning form)")


def prepare_cublas(inputs: GemmInputs, world: World, reference: Any) -> Prepared:
    import torch

    out = inputs.new_out()
    a, b = inputs.a, inputs.b
    if inputs.case.dtype == "fp8":
        assert inputs.scale_a is not None and inputs.scale_b is not None
        scale_a = torch.tensor(inputs.scale_a, device=out.device, dtype=torch.float32)
        scale_b = torch.tensor(inputs.scale_b, device=out.device, dtype=torch.float32)
        return Prepared(lambda: torch._scaled_mm(a, b, scale_a=scale_a, scale_b=scale_b, out_dtype=out.dtype, out=out),
                        out, "torch._scaled_mm")
    return Prepared(lambda: torch.matmul(a, b, out=out), out)


def prepare_triton(inputs: GemmInputs, world: World, reference: Any) -> Prepared:
    from _peers import triton_matmul

    out = inputs.new_out()
    a, b, scale = inputs.a, inputs.b, inputs.scale
    form = "TMA descriptors" if triton_matmul.uses_tma(a, b, out) else "pointer loads (a row stride not 16-byte aligned)"
    return Prepared(lambda: triton_matmul.matmul(a, b, out, scale), out, form)


def prepare_cutile_python(inputs: GemmInputs, world: World, reference: Any) -> Prepared:
    """The fastest correct config of the peer's few (each timed briefly on this case)."""
    from _peers import cutile_python_matmul as peer
    from cutile import bench

    import torch

    case = inputs.case
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    out = inputs.new_out()
    best: tuple[float, Any, Any] | None = None
    failures: list[str] = []
    for config in peer.CONFIGS[peer.family(case.m, ITEMSIZE[case.dtype])]:
        try:
            launch = peer.launcher(inputs.a, inputs.b, out, inputs.scale, config, sms)
            world.poison(out)
            world.synchronize()
            launch()
            world.synchronize()
            error = world.relative_error(out, reference)
            if not within_tolerance(error, TOLERANCE[case.dtype]):
                failures.append(f"{config}: relative error {format_error(error)}")
                continue
            ms = bench.do_bench(launch, warmup=1, reps=5).median_ms
        except Exception as exc:
            world.synchronize_quietly()
            failures.append(f"{config}: {first_line(exc, 100)}")
            continue
        if best is None or ms < best[0]:
            best = (ms, config, launch)
    if best is None:
        raise RuntimeError("no config ran correctly: " + "; ".join(failures))
    return Prepared(best[2], out, str(best[1]) + (f"; left out: {'; '.join(failures)}" if failures else ""))


def triton_missing() -> str | None:
    try:
        from _peers import triton_matmul  # noqa: F401
    except Exception as exc:  # an optional peer: any failure to import leaves it out, with the reason
        return f"triton not importable: {first_line(exc)}"
    return None


def cutile_python_missing() -> str | None:
    try:
        from _peers import cutile_python_matmul  # noqa: F401
    except Exception as exc:  # (as for triton)
        return f"cuda.tile not importable: {first_line(exc)}"
    return None


PEERS = ("cuBLAS", "Triton", "cuTile Python")
#: Column labels of the arms (the tables are wide).
SHORT = {"cutile": "cutile", "cuBLAS": "cuBLAS", "Triton": "Triton", "cuTile Python": "cuTilePy"}


def short(name: str) -> str:
    return SHORT.get(name, name)


def gemm_arms(smoke: bool, peers: Sequence[str]) -> list[Arm]:
    """cutile first (the arm the others are paired with), then the chosen peers."""
    arms = [Arm("cutile", prepare_cutile, cutile_matmul_missing())]
    smoke_reason = "skipped: --smoke runs the cutile arm alone, on the interpreter"
    makers: dict[str, tuple[Callable[[Any, World, Any], Prepared], Callable[[], str | None]]] = {
        "cuBLAS": (prepare_cublas, lambda: None),
        "Triton": (prepare_triton, triton_missing),
        "cuTile Python": (prepare_cutile_python, cutile_python_missing),
    }
    for name in PEERS:
        prepare, missing = makers[name]
        if name not in peers:
            arms.append(Arm(name, prepare, "skipped: not in --peers"))
        else:
            arms.append(Arm(name, prepare, smoke_reason if smoke else missing()))
    return arms


# -- the host-overhead row ------------------------------------------------------------------

def plain_gemm_kernel() -> Any:
    """A tiled f16 GEMM (one output tile per block, fp32 accumulate): the plain cutile
    kernel a matmul call is measured against."""
    import cutile
    from cutile.core import Constant, Mut, Tensor, cdiv, f16, f32, get_tile_block_id, mma, zeros

    @cutile.entry
    def tiled_gemm(z: Mut[Tensor[f16, ["BM", "BN"]]], x: Tensor[f16, [-1, "K"]], y: Tensor[f16, ["K", -1]],
                   BM: Constant[int], BN: Constant[int], BK: Constant[int], K: Constant[int]) -> None:
        part_x = x.partition([BM, BK])
        part_y = y.partition([BK, BN])
        bm, bn, _ = get_tile_block_id()
        acc = zeros((BM, BN), f32)
        for k in range(cdiv(K, BK)):
            acc = mma(part_x.load([bm, k]), part_y.load([k, bn]), acc)
        z.store(acc.astype(f16))

    return tiled_gemm


@dataclass
class HostOverhead:
    size: tuple[int, int, int]
    per_call_us: dict[str, float]
    device_us: float | None  # the tiled kernel's device time per launch (GPU)
    ratio: float | None  # matmul on cutile tensors / a plain launch of matmul's own kernel
    reasons: dict[str, str]


TILED = "plain launch of a tiled cutile GEMM, prebuilt arguments"
SAME_KERNEL = "plain launch of matmul's chosen kernel, its arguments prebuilt"
OURS_HOST = "matmul on cutile tensors, in cutile.batch()"


def _timed_in_batch(step: Callable[[], Any]) -> Callable[[int], float]:
    """A loop of ``n`` steps inside ``cutile.batch()``: the seconds of the loop itself
    (launches enqueued, not waited for), not of the batch's final wait."""
    import cutile

    def loop(n: int) -> float:
        with cutile.batch():
            start = time.perf_counter()
            for _ in range(n):
                step()
            return time.perf_counter() - start

    return loop


def _launch_and_sync(entry: Callable[..., Any], a: Any, b: Any, c: Any) -> None:
    entry(a, b, out=c).sync()


def host_overhead(world: World, *, size: int, count: int, repeats: int, tile: tuple[int, int, int]) -> HostOverhead:
    """Host cost per call of loops of ``count`` calls inside ``cutile.batch()``, median
    of ``repeats`` interleaved runs: ``matmul`` (cutile tensors, and the world's own)
    against a plain launch of the kernel it chose on the arguments it built once (the
    ratio of the issue's target), and a plain launch of a small tiled GEMM."""
    from cutile import api, bench

    case = GemmCase("f16", size, size, size)
    inputs = world.gemm_inputs(case)
    out = inputs.new_out()
    # (from_numpy copies: the interpreter's tiled result is read back through the tensor)
    from_world = api.from_dlpack if world.tensor_kind == "torch" else api.from_numpy
    a_c, b_c, c_c = from_world(inputs.a), from_world(inputs.b), from_world(out)
    tiled_host = inputs.new_out()
    tiled = plain_gemm_kernel()
    bm, bn, bk = tile
    z: Any = from_world(tiled_host).partition([bm, bn])
    reasons: dict[str, str] = {}

    def tiled_step() -> None:
        nonlocal z
        z, _x, _y = tiled(z, a_c, b_c, BK=bk).sync()

    loops: dict[str, Callable[[int], float]] = {TILED: _timed_in_batch(tiled_step)}
    missing = cutile_matmul_missing()
    if missing is None:
        entry = matmul_entry()
        world_kind = f"{world.tensor_kind} {'arrays' if world.tensor_kind == 'numpy' else 'tensors'}"
        for name, (a, b, c) in ((OURS_HOST, (a_c, b_c, c_c)),
                                (f"matmul on {world_kind}, in cutile.batch()", (inputs.a, inputs.b, out))):
            try:
                first = entry(a, b, out=c)
                if is_pending(first):  # the launch form: synced (in a batch, enqueued at once)
                    if name == OURS_HOST:
                        # The same kernel and arguments, launched as a user launches a kernel.
                        kernel, arguments = first.kernel, dict(first.arguments)
                        loops[SAME_KERNEL] = _timed_in_batch(lambda: kernel(**arguments).sync())
                    loops[name] = _timed_in_batch(partial(_launch_and_sync, entry, a, b, c))
                else:  # the plain form runs (in a batch: enqueues) by itself
                    loops[name] = _timed_in_batch(partial(entry, a, b, out=c))
                finish(first)
            except Exception as exc:
                world.synchronize_quietly()
                reasons[name] = first_line(exc)
    else:
        reasons["matmul"] = missing
    for name, loop in list(loops.items()):
        try:
            loop(max(1, count // 10))  # warm-up: compile, load, plan caches
            world.synchronize()
        except Exception as exc:
            world.synchronize_quietly()
            reasons[name] = first_line(exc)
            del loops[name]
    device_us = None
    if TILED in loops:
        z = z.unpartition()
        result = z.to_numpy() if world.tensor_kind == "numpy" else tiled_host
        error = world.relative_error(result, inputs.reference())
        if not within_tolerance(error, TOLERANCE["f16"]):
            reasons[TILED] = f"tiled kernel WRONG (relative error {format_error(error)})"
        z = z.partition([bm, bn])
        if world.tensor_kind == "torch":
            device_us = bench.do_bench(lambda: tiled(z, a_c, b_c, BK=bk), warmup=2, reps=20).median_ms * 1e3
    samples: dict[str, list[float]] = {name: [] for name in loops}
    for _ in range(repeats):
        for name, loop in loops.items():
            world.synchronize()
            samples[name].append(loop(count) / count * 1e6)
    per_call = {name: statistics.median(values) for name, values in samples.items()}
    ours, plain = per_call.get(OURS_HOST), per_call.get(SAME_KERNEL)
    ratio = ours / plain if ours is not None and plain is not None else None
    return HostOverhead((size, size, size), per_call, device_us, ratio, reasons)


# -- the gemm subcommand -------------------------------------------------------------------

def add_gemm_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dtypes", type=lambda t: parse_choices(t, DTYPES, "dtype"), default=DTYPES,
                        help=f"comma-separated, of {','.join(DTYPES)} (default: all)")
    parser.add_argument("--sets", type=lambda t: parse_choices(t, SETS, "shape set"), default=SETS,
                        help="comma-separated shape sets: square (1024-16384), llm (M in 1..8192 x layer N,K), "
                             "odd (3000x5000x1000, 8191^3) (default: all)")
    parser.add_argument("--shape", type=parse_shape, action="append", default=[], metavar="MxNxK",
                        help="run these shapes only (repeatable; one N means N^3)")
    parser.add_argument("--peers", type=lambda t: parse_choices(t, PEERS, "peer"), default=PEERS,
                        help=f"comma-separated, of {','.join(PEERS)} (default: all)")
    parser.add_argument("--quick", action="store_true",
                        help="a handful of rows: 8192^3 f16 and bf16, one LLM shape per M in bf16, 8192^3 fp8")
    parser.add_argument("--reps", type=int, default=None,
                        help=f"timed reps per arm (default: about {TIMED_MS_PER_ARM:.0f} ms of device time each, "
                             f"{MIN_REPS}-{MAX_REPS})")
    parser.add_argument("--warmup", type=int, default=3, help="untimed calls before timing (after the check)")
    parser.add_argument("--no-host", action="store_true", help="skip the host-overhead row")
    parser.add_argument("--host-calls", type=int, default=300, help="calls per host-overhead loop")
    parser.add_argument("--smoke", action="store_true",
                        help="CPU interpreter, tiny shapes, the cutile arm only (what CI runs)")
    parser.add_argument("--list", action="store_true", help="print the rows the options choose and stop (no GPU)")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the results to PATH as JSON")


def gemm_table(results: Sequence[CaseResult], cases: Sequence[GemmCase], arms: Sequence[Arm]) -> str:
    names = [arm.name for arm in arms]
    peers = names[1:]
    headers = ["dtype", "MxNxK", *(f"{short(n)} TF/s" for n in names), *(f"c/{short(p)}" for p in peers),
               *(f"err {short(n)}" for n in names)]
    rows = []
    for case, result in zip(cases, results):
        rates = []
        for name in names:
            outcome = result.outcomes[name]
            if outcome.status == OK and outcome.ms:
                rates.append(format_rate(case.flops / outcome.ms / 1e9))
            elif outcome.status == OK:
                rates.append("?")
            else:
                rates.append({WRONG: "WRONG", ERROR: "error", ABSENT: "-"}[outcome.status])
        rows.append([case.dtype, case.label, *rates, *(format_ratio(result.ratios.get(p)) for p in peers),
                     *(format_error(result.outcomes[n].error) for n in names)])
    return format_table(headers, rows)


def decode_table(results: Sequence[CaseResult], cases: Sequence[GemmCase], arms: Sequence[Arm]) -> str:
    """M <= 16 rows: weight bytes / time, and that against a copy's bandwidth (read + write)."""
    names = [arm.name for arm in arms]
    headers = ["dtype", "MxNxK", "copy GB/s", *(f"{short(n)} GB/s" for n in names),
               *(f"{short(n)} x copy" for n in names)]
    rows = []
    for case, result in zip(cases, results):
        if not case.decode:
            continue
        copy_gbs = result.extra.get("copy_gbs")
        rates: list[str] = []
        fractions: list[str] = []
        for name in names:
            outcome = result.outcomes[name]
            if outcome.status == OK and outcome.ms:
                gbs = case.weight_bytes / outcome.ms / 1e6
                rates.append(format_rate(gbs))
                fractions.append(format_ratio(gbs / copy_gbs) if copy_gbs else "-")
            else:
                rates.append("-")
                fractions.append("-")
        rows.append([case.dtype, case.label, format_rate(copy_gbs) if copy_gbs else "-", *rates, *fractions])
    return format_table(headers, rows)


def decode_fractions(results: Sequence[CaseResult], cases: Sequence[GemmCase], arm: str) -> list[tuple[float, str]]:
    found = []
    for case, result in zip(cases, results):
        outcome = result.outcomes.get(arm)
        copy_gbs = result.extra.get("copy_gbs")
        if case.decode and outcome is not None and outcome.status == OK and outcome.ms and copy_gbs:
            found.append((case.weight_bytes / outcome.ms / 1e6 / copy_gbs, f"{case.dtype} {case.label}"))
    return found


def summary_table(results: Sequence[CaseResult], cases: Sequence[GemmCase], peers: Sequence[str]) -> str:
    groups: list[tuple[str, list[CaseResult]]] = []
    for dtype in dict.fromkeys(c.dtype for c in cases):
        groups.append((dtype, [r for c, r in zip(cases, results) if c.dtype == dtype]))
    sixteen = [r for c, r in zip(cases, results) if c.dtype in ("f16", "bf16")]
    if len({c.dtype for c in cases if c.dtype in ("f16", "bf16")}) > 1:
        groups.append(("f16+bf16", sixteen))
    rows = []
    for name, group in groups:
        summaries = [ratio_summary(group, p) for p in peers]
        rows.append([f"geomean {name}", *(f"{format_ratio(g)} (n={n})" if n else "-" for g, _, _, n in summaries)])
        rows.append([f"min {name}", *(f"{format_ratio(lo)} at {at}" if n else "-" for _, lo, at, n in summaries)])
    return format_table(["cutile / peer", *(short(p) for p in peers)], rows)


def target_lines(results: Sequence[CaseResult], cases: Sequence[GemmCase], host: HostOverhead | None) -> list[str]:
    def ratio_at(dtype: str, shape: tuple[int, int, int], peer: str) -> float | None:
        for case, result in zip(cases, results):
            if (case.dtype, case.m, case.n, case.k) == (dtype, *shape):
                return result.ratios.get(peer)
        return None

    lines = []
    for dtype in ("f16", "bf16"):
        value = ratio_at(dtype, (8192, 8192, 8192), "cuBLAS")
        lines.append(f"{dtype} 8192^3 >= {TARGET_SQUARE_8192:.2f}x cuBLAS: {format_ratio(value)} "
                     f"{verdict(value, TARGET_SQUARE_8192)}")
    sixteen = [r for c, r in zip(cases, results) if c.dtype in ("f16", "bf16")]
    mean, low, at, count = ratio_summary(sixteen, "cuBLAS")
    lines.append(f"geomean over the f16/bf16 sweep >= {TARGET_GEOMEAN:.2f}x cuBLAS: {format_ratio(mean)} (n={count}) "
                 f"{verdict(mean if count else None, TARGET_GEOMEAN)}")
    lines.append(f"no f16/bf16 shape below {TARGET_FLOOR:.2f}x cuBLAS: min {format_ratio(low)}"
                 f"{' at ' + at if at else ''} {verdict(low if count else None, TARGET_FLOOR)}")
    value = ratio_at("fp8", (8192, 8192, 8192), "cuBLAS")
    lines.append(f"fp8 8192^3 >= {TARGET_FP8_8192:.2f}x torch._scaled_mm: {format_ratio(value)} "
                 f"{verdict(value, TARGET_FP8_8192)}")
    fractions = decode_fractions(results, cases, "cutile")
    worst = min(fractions) if fractions else None
    lines.append(f"M <= {DECODE_M}: weight read >= {TARGET_DECODE_COPY:.2f}x copy bandwidth: "
                 + (f"min {worst[0]:.3f} at {worst[1]} " if worst else "")
                 + verdict(worst[0] if worst else None, TARGET_DECODE_COPY))
    ratio = host.ratio if host is not None else None
    lines.append(f"matmul host cost <= {TARGET_HOST:.2f}x a plain launch of its kernel: {format_ratio(ratio)} "
                 f"{verdict(ratio, TARGET_HOST, at_most=True)}")
    return lines


def gemm_row(case: GemmCase, arms: Sequence[Arm], world: Any, *, reps: int | None, warmup: int) -> CaseResult:
    """One row: the arms checked and timed, and for M <= DECODE_M the copy of the weight."""
    from cutile import bench

    inputs = world.gemm_inputs(case)
    result = measure_case(case.label, arms, inputs, world, tolerance=TOLERANCE[case.dtype], reps=reps, warmup=warmup)
    if case.decode:
        copy = world.copy_arm(inputs.weight)
        copy_ms = bench.do_bench(copy.run, warmup=1, reps=reps or 20).median_ms
        result.extra["copy_gbs"] = 2 * case.weight_bytes / copy_ms / 1e6
    return result


def list_cases(cases: Sequence[GemmCase]) -> str:
    rows = [[c.dtype, c.label, f"{c.flops / 1e9:.1f}", f"{c.weight_bytes / 1e6:.1f}", "yes" if c.decode else ""]
            for c in cases]
    return format_table(["dtype", "MxNxK", "GFLOP", "weight MB", "GB/s row"], rows)


def results_json(cases: Sequence[GemmCase], results: Sequence[CaseResult], host: HostOverhead | None,
                 header: dict[str, Any], targets: Sequence[str]) -> dict[str, Any]:
    rows = []
    for case, result in zip(cases, results):
        arms = {name: {"status": o.status, "relative_error": o.error, "ms": o.ms, "reason": o.reason, "note": o.note,
                       "tflops": case.flops / o.ms / 1e9 if o.status == OK and o.ms else None}
                for name, o in result.outcomes.items()}
        rows.append({"dtype": case.dtype, "m": case.m, "n": case.n, "k": case.k, "arms": arms,
                     "ratios": result.ratios, "copy_gbs": result.extra.get("copy_gbs")})
    host_part = None if host is None else {"size": host.size, "per_call_us": host.per_call_us,
                                           "device_us": host.device_us, "ratio": host.ratio, "reasons": host.reasons}
    return {**header, "rows": rows, "host": host_part, "targets": list(targets)}


def versions() -> dict[str, str]:
    """The peers' versions, for the record of a run."""
    import importlib

    found = {}
    for module in ("torch", "triton", "cuda.tile", "cutile", "cutile_kernels"):
        try:
            found[module] = str(getattr(importlib.import_module(module), "__version__", "?"))
        except Exception:  # an optional peer not installed (or failing to import) has no version to record
            continue
    return found


def run_gemm(args: argparse.Namespace) -> int:
    if args.list:
        cases = gemm_cases(dtypes=args.dtypes, sets=args.sets, quick=args.quick, smoke=args.smoke, shapes=args.shape)
        print(list_cases(cases))
        print(f"{len(cases)} rows")
        return 0
    if args.smoke:
        os.environ["CUTILE_BACKEND"] = "interpreter"
    else:
        try:
            import torch
        except ImportError:
            print("bench_kernels.py gemm needs torch on the GPU (or --smoke for the interpreter)", file=sys.stderr)
            return 2
        if not torch.cuda.is_available():
            print("bench_kernels.py gemm needs a GPU (or --smoke for the interpreter)", file=sys.stderr)
            return 2
    import cutile

    if not args.smoke and cutile.backend() != "gpu":
        print("bench_kernels.py gemm needs cutile's GPU backend (or --smoke for the interpreter)", file=sys.stderr)
        return 2
    started = time.perf_counter()
    world: Any = NumpyWorld() if args.smoke else TorchWorld()
    arms = gemm_arms(args.smoke, args.peers)
    cases = gemm_cases(dtypes=args.dtypes, sets=args.sets, quick=args.quick, smoke=args.smoke, shapes=args.shape)
    reps = args.reps if args.reps is not None else (3 if args.smoke else None)
    if args.smoke:
        print("gemm --smoke: CPU interpreter, tiny shapes; times are host wall clock, not device time")
    else:
        import torch

        print(f"gemm on {torch.cuda.get_device_name(0)}; " + ", ".join(f"{m} {v}" for m, v in versions().items()))
    for arm in arms:
        if arm.missing is not None:
            print(f"  {arm.name}: {arm.missing}")
    print(f"{len(cases)} rows; ratios: peer time / cutile time, median over pairs (above 1.00: cutile faster); "
          f"err: relative error vs a float32 reference (tolerance f16 {TOLERANCE['f16']:g}, "
          f"bf16 {TOLERANCE['bf16']:g}, fp8 {TOLERANCE['fp8']:g})", flush=True)

    results: list[CaseResult] = []
    for index, case in enumerate(cases, 1):
        try:
            result = gemm_row(case, arms, world, reps=reps, warmup=1 if args.smoke else args.warmup)
        except Exception as exc:  # e.g. out of memory making the inputs: the row says so, the sweep goes on
            world.synchronize_quietly()
            result = CaseResult(case.label, {arm.name: Outcome(ERROR, reason="row failed: " + first_line(exc))
                                             for arm in arms})
        results.append(result)
        cells = [(f"{name} {format_rate(case.flops / o.ms / 1e9)}" if o.status == OK and o.ms else f"{name} {o.status}")
                 + (f" ({o.note})" if o.note else "") for name, o in result.outcomes.items() if o.status != ABSENT]
        print(f"[{index}/{len(cases)} {time.perf_counter() - started:.0f}s] {case.dtype} {case.label}: "
              + ", ".join(cells), flush=True)
        world.release()

    host = None
    host_error = ""
    if not args.no_host:
        try:
            host = host_overhead(world, size=32 if args.smoke else 128, count=5 if args.smoke else args.host_calls,
                                 repeats=1 if args.smoke else 7, tile=(16, 16, 16) if args.smoke else (64, 64, 32))
        except Exception as exc:  # the tables above still print
            world.synchronize_quietly()
            host_error = first_line(exc)

    print("\nGEMM, TFLOP/s per arm (f32 accumulate; fp8: e4m3 in, bf16 out, per-tensor scales); "
          "c/X: cutile's speed over X's (X time / cutile time); err: relative error")
    print(gemm_table(results, cases, arms))
    # (the peers' forms and configs are in the progress lines above)
    notes = [(case, name, o) for case, r in zip(cases, results) for name, o in r.outcomes.items()
             if o.status in (ERROR, WRONG) or (o.note and name == arms[0].name)]
    for case, name, outcome in notes:
        said = [outcome.reason or outcome.note]
        if outcome.status == WRONG:
            said.append(f"WRONG (relative error {format_error(outcome.error)}, not timed)")
        print(f"  {case.dtype} {case.label} {name}: " + "; ".join(s for s in said if s))
    if any(case.decode for case in cases):
        print(f"\nM <= {DECODE_M}: GB/s of the weight read (weight bytes / time); copy: torch copy_ of the weight "
              "(bytes read + written / time)")
        print(decode_table(results, cases, arms))
    print("\nSummary over the rows (cutile / peer, speed)")
    print(summary_table(results, cases, [arm.name for arm in arms[1:]]))
    if host is not None:
        print(f"\nHost cost per call, {host.size[0]}^3 f16, loops of {args.host_calls if not args.smoke else 5} calls "
              "(the loop inside cutile.batch(), not its final wait)"
              + ("; device time of the tiled kernel " + f"{host.device_us:.1f} us" if host.device_us else ""))
        for name, us in host.per_call_us.items():
            print(f"  {name:<64} {us:8.2f} us")
        for name, reason in host.reasons.items():
            print(f"  {name}: {reason}")
        print(f"  matmul on cutile tensors / plain launch of its kernel: {format_ratio(host.ratio)}")
    elif host_error:
        print(f"\nHost cost per call: failed: {host_error}")
    print("\nTargets (issue 15)" + (" — the interpreter's figures mean nothing here" if args.smoke else ""))
    targets = target_lines(results, cases, host)
    for line in targets:
        print("  " + line)
    if args.json is not None:
        header = {"device": "interpreter" if args.smoke else world.device_name(), "backend": cutile.backend(),
                  "versions": versions(), "argv": sys.argv[1:]}
        args.json.write_text(json.dumps(results_json(cases, results, host, header, targets), indent=1))
        print(f"results written to {args.json}")
    print(f"\ntotal {time.perf_counter() - started:.0f} s")
    wrong = [f"{c.dtype} {c.label} {n}" for c, r in zip(cases, results) for n, o in r.outcomes.items()
             if o.status == WRONG]
    ours_failed = [f"{c.dtype} {c.label}" for c, r in zip(cases, results) if r.outcomes["cutile"].status != OK]
    if wrong:
        print("WRONG results: " + ", ".join(wrong))
    if ours_failed:
        print("cutile arm not correct on: " + ", ".join(ours_failed))
    host_failures = {n: r for n, r in host.reasons.items() if n != "matmul"} if host is not None else {}
    host_failed = bool(host_failures) or bool(host_error)
    if host_failures:
        print("host-overhead row failed: " + "; ".join(f"{n}: {r}" for n, r in host_failures.items()))
    return 1 if wrong or ours_failed or host_failed else 0


#: name -> (add its arguments, run it). softmax, rms_norm and attention join here.
SUBCOMMANDS: dict[str, tuple[Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]] = {
    "gemm": (add_gemm_arguments, run_gemm),
}
# Kernel families benchmarked by scripts of their own: ``bench_kernels.py NAME ARGS...``
# runs ``scripts/<script>.py ARGS...`` (its own --help lists them).
SCRIPT_SUBCOMMANDS = {
    "gemv": ("bench_gemv", "GEMV and split-K kernels alone"),
    "norms": ("bench_norms", "softmax, log_softmax, RMSNorm, LayerNorm"),
    "pointwise": ("bench_pointwise", "rope, silu_mul, embedding, argmax, top_k, the KV cache update"),
    "attention": ("bench_attention", "flash attention forward against SDPA"),
    "decode": ("bench_decode", "decode attention over a KV cache"),
}


def run_script(name: str, arguments: list[str]) -> int:
    import importlib.util

    script = SCRIPT_SUBCOMMANDS[name][0]
    spec = importlib.util.spec_from_file_location(script, Path(__file__).with_name(f"{script}.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return int(module.main(arguments))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for name, (add_arguments, run) in SUBCOMMANDS.items():
        sub = commands.add_parser(name, help=f"benchmark {name}")
        add_arguments(sub)
        sub.set_defaults(run=run)
    for name, (script, what) in SCRIPT_SUBCOMMANDS.items():
        commands.add_parser(name, help=f"{what} (scripts/{script}.py, with the arguments after it)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments and arguments[0] in SCRIPT_SUBCOMMANDS:
        return run_script(arguments[0], arguments[1:])
    args = build_parser().parse_args(arguments)
    return int(args.run(args))


if __name__ == "__main__":
    sys.exit(main())
