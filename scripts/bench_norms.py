#!/usr/bin/env python3
"""The row kernels of cutile_kernels (softmax, log_softmax, rms_norm, add_rms_norm,
layer_norm, layer_norm_backward) against a device-to-device copy, torch and Triton.

Per kernel and dtype at 16384 x 8192 (softmax and log_softmax also at 8192 x 151936):
each implementation's result is checked first (against float64 on sampled rows; the
weight gradients on every row), then timed with `cutile.bench.do_bench` (L2 flushed;
cutile in the returned-launch form, ``f.launch(..., out=)``, so the device alone is
timed), and reported in GB/s of the bytes it must move (reads + writes) and as a
fraction of a device-to-device copy (torch ``copy_``) of the same bytes in the same run.
Peers, where importable: torch eager (``torch.softmax``, ``F.rms_norm``, ``F.layer_norm``,
``aten.native_layer_norm_backward``) and Triton kernels written here, one row per
program (none for the backward).

``--tune`` first searches each kernel's configs (`cutile.tune`, the library's space)
at each shape and dtype and prints the winners; ``--record-dir DIR`` also writes the
records (``DIR/<kernel>.json``: commit them as packages/cutile-kernels/src/cutile_kernels/records/).
The timed table then uses the winners. ``--smoke`` runs everything on the CPU
interpreter with tiny shapes (CI runs it).

On the GPU machine:

    scripts/on_gpu_machine.sh python3 scripts/bench_norms.py
    scripts/on_gpu_machine.sh python3 scripts/bench_norms.py --tune --record-dir /tmp/records
"""

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from _bench_common import choose_backend, lacks_gpu, optional, torch_copy, torch_dtype

KERNELS = ("softmax", "log_softmax", "rms_norm", "add_rms_norm", "layer_norm", "layer_norm_backward")
SHAPES = {name: [(16384, 8192)] for name in KERNELS}
SHAPES["softmax"].append((8192, 151936))
SHAPES["log_softmax"].append((8192, 151936))
SMOKE_SHAPES = {name: [(37, 300)] for name in KERNELS}
SMOKE_SHAPES["softmax"].append((4, 20000))  # rows longer than any tile: the chunked kernel
SMOKE_SHAPES["log_softmax"].append((4, 20000))
EPS = 1e-5


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="the CPU interpreter, tiny shapes")
    parser.add_argument("--kernels", default=",".join(KERNELS), help="comma-separated subset")
    parser.add_argument("--dtypes", default="f32,bf16", help="comma-separated: f32, bf16, f16")
    parser.add_argument("--reps", type=int, default=50)
    parser.add_argument("--tune", action="store_true", help="search each kernel's configs first")
    parser.add_argument("--tune-budget", type=float, default=30.0,
                        help="seconds per search (shape and dtype): no config is started past it")
    parser.add_argument("--record-dir", type=Path, help="with --tune: write the records here")
    args = parser.parse_args(argv)
    choose_backend(args.smoke)

    import cutile
    from cutile import bench, tune
    from cutile.core import bf16, f16, f32

    if lacks_gpu("bench_norms.py", args.smoke):
        return 2
    gpu = cutile.backend() == "gpu"
    dtypes = {"f32": f32, "bf16": bf16, "f16": f16}
    chosen_kernels = [k for k in args.kernels.split(",") if k]
    unknown = [k for k in chosen_kernels if k not in KERNELS]
    if unknown:
        parser.error(f"unknown kernels {unknown}; expected some of {list(KERNELS)}")
    chosen_dtypes = [dtypes[d] for d in args.dtypes.split(",") if d]
    shapes = SMOKE_SHAPES if args.smoke else SHAPES
    reps, warmup = (2, 1) if args.smoke else (args.reps, 10)

    torch = optional("torch") if gpu else None
    if torch is not None and not torch.cuda.is_available():
        torch = None
    triton = optional("triton") if torch is not None else None
    peers = Peers(torch, triton)
    print(f"backend {cutile.backend()}; torch {'yes' if torch else 'no'}; triton {'yes' if triton else 'no'}")

    failures = 0
    if args.tune:
        failures += tune_all(chosen_kernels, chosen_dtypes, shapes, args, tune)
    print(f"{'kernel':21s} {'dtype':5s} {'shape':>13s} {'impl':7s} {'ms':>9s} {'GB/s':>8s} {'x copy':>7s}  check")
    for name in chosen_kernels:
        for dtype in chosen_dtypes:
            for rows, cols in shapes[name]:
                failures += run_case(name, dtype, rows, cols, peers, bench, reps, warmup)
    print("results: OK" if not failures else f"results: {failures} FAILED")
    return 1 if failures else 0


# -- tuning ------------------------------------------------------------------------------------

def tuning_of(name: str) -> Any:
    if name in ("softmax", "log_softmax"):
        from cutile_kernels._softmax import tuning
        return tuning(log=name == "log_softmax")
    from cutile_kernels._norms import tuning as norm_tuning
    return norm_tuning(name)


def tune_all(kernels: list[str], dtypes: list[Any], shapes: dict[str, list[tuple[int, int]]], args: Any,
             tune: Any) -> int:
    failures = 0
    for name in kernels:
        tuning = tuning_of(name)
        record = tune.Record(tuning.tuner.provenance)
        for dtype in dtypes:
            for rows, cols in shapes[name]:
                started = time.monotonic()
                options: dict[str, Any] = {"budget": args.tune_budget}
                if args.smoke:
                    options.update(warmup=1, reps=1, paired_reps=2)
                try:
                    found = tuning.search(rows, cols, dtype, **options)
                except cutile_error() as exc:
                    print(f"tune {name} {dtype} {rows}x{cols}: FAILED: {exc}")
                    failures += 1
                    continue
                counts: dict[str, int] = {}
                for trial in found.trials:
                    counts[trial.status] = counts.get(trial.status, 0) + 1
                    if trial.status in ("invalid", "wrong"):
                        print(f"    {trial.config}: {trial.status}: {trial.reason}")
                print(f"tune {name} {dtype} {rows}x{cols}: winner {found.best} {found.best_ms:.4f} ms "
                      f"({', '.join(f'{n} {s}' for s, n in sorted(counts.items()))}"
                      f"{', budget reached' if found.out_of_budget else ''}; {time.monotonic() - started:.0f} s)")
                bucket = tuning.tuner.bucket((rows, cols, int(dtype.itemsize)))
                record.winners[bucket] = tune.Winner(found.best, found.best_ms)
                tuning.use(rows, cols, dtype, found.best)  # the timed table below runs the winner
        if args.record_dir is not None and record.winners:
            path = args.record_dir / record.provenance.arch / f"{name}.json"  # (the package's layout)
            path.parent.mkdir(parents=True, exist_ok=True)
            record.save(path)
            print(f"record {path}")
    return failures


def cutile_error() -> type[Exception]:
    import cutile
    return cutile.CutileError


# -- one case ------------------------------------------------------------------------------------

class Peers:
    def __init__(self, torch: Any, triton: Any) -> None:
        self.torch, self.triton = torch, triton
        self.kernels = triton_kernels() if triton is not None else None


def run_case(name: str, dtype: Any, rows: int, cols: int, peers: Peers, bench: Any, reps: int, warmup: int) -> int:
    case = Case(name, dtype, rows, cols, peers)
    copy_ms = bench.do_bench(case.copy, warmup=warmup, reps=reps).median_ms if case.copy is not None else None
    failures = 0
    gigabytes = case.bytes / 1e9
    shape = f"{rows}x{cols}"
    if copy_ms is not None:
        print(f"{name:21s} {str(dtype):5s} {shape:>13s} {'copy':7s} {copy_ms:9.4f} {gigabytes / copy_ms * 1e3:8.0f} "
              f"{1.0:7.3f}")
    for impl, (run, check) in case.implementations().items():
        try:
            problem = check()
        except Exception as exc:  # a peer's failure is reported, not fatal (cutile's is counted)
            problem = f"{type(exc).__name__}: {exc}"
        if problem:
            print(f"{name:21s} {str(dtype):5s} {shape:>13s} {impl:7s} {'':>9s} {'':>8s} {'':>7s}  WRONG: {problem}")
            failures += impl == "cutile"
            continue
        ms = bench.do_bench(run, warmup=warmup, reps=reps).median_ms
        ratio = f"{copy_ms / ms:7.3f}" if copy_ms is not None else f"{'-':>7s}"
        print(f"{name:21s} {str(dtype):5s} {shape:>13s} {impl:7s} {ms:9.4f} {gigabytes / ms * 1e3:8.0f} {ratio}  ok")
    case.release()
    return failures


class Case:
    """One kernel, dtype and shape: inputs, float64 references, each implementation's
    runner (what do_bench times) and check (None when right, else why not)."""

    def __init__(self, name: str, dtype: Any, rows: int, cols: int, peers: Peers) -> None:
        from cutile import api

        self.name, self.dtype, self.rows, self.cols, self.peers = name, dtype, rows, cols, peers
        self.torch = peers.torch
        rng = np.random.default_rng(0)
        self.sample = np.unique(np.linspace(0, rows - 1, min(rows, 64)).astype(np.int64))
        shift = 0.5 if name.startswith("layer_norm") else 0.0
        needed = {"softmax": "x", "log_softmax": "x", "rms_norm": "xw", "add_rms_norm": "xrw", "layer_norm": "xwb",
                  "layer_norm_backward": "xwbd"}[name]
        self.host = {"x": rng.standard_normal((rows, cols), dtype=np.float32) * 2.0 + shift}
        if "r" in needed:
            self.host["r"] = rng.standard_normal((rows, cols), dtype=np.float32)
        for key in "wb":
            if key in needed:
                self.host[key] = rng.standard_normal(cols, dtype=np.float32)
        if "d" in needed:
            self.host["dy"] = rng.standard_normal((rows, cols), dtype=np.float32)
        # The references' inputs: the values as rounded to the dtype, in float64 (of the
        # sampled rows; every row for the backward, whose weight gradients sum them all).
        every_row = name == "layer_norm_backward"
        self.exact = {k: api.from_numpy(v if v.ndim == 1 or every_row else v[self.sample], dtype).to_numpy()
                      .astype(np.float64) for k, v in self.host.items()}
        self.inputs = {k: self.device(v) for k, v in self.host.items()}
        self.host.clear()
        element = int(dtype.itemsize)
        passes = {"add_rms_norm": 4, "layer_norm_backward": 3}.get(name, 2)
        self.bytes = passes * rows * cols * element
        self.copy = torch_copy(self.torch, self.bytes) if self.torch is not None else None
        self.expected = self.reference()

    # tensors of the peers' kind: torch on the GPU, else cutile tensors
    def device(self, values: Any) -> Any:
        from cutile import api

        if self.torch is not None:
            return self.torch.from_numpy(values).cuda().to(torch_dtype(self.torch, str(self.dtype)))
        return api.from_numpy(values, self.dtype)

    def empty(self, shape: tuple[int, ...], stats: bool = False) -> Any:
        from cutile import api
        from cutile.core import f32

        if self.torch is not None:
            return self.torch.full(shape, float("nan"), dtype=self.torch.float32 if stats else self.inputs["x"].dtype,
                                   device="cuda")
        return api.full(list(shape), float("nan"), f32 if stats else self.dtype)

    def to_numpy(self, value: Any) -> Any:
        if self.torch is not None and isinstance(value, self.torch.Tensor):
            return value.detach().float().cpu().numpy().astype(np.float64)
        return np.asarray(value.to_numpy(), dtype=np.float64)

    def release(self) -> None:
        self.inputs.clear()
        self.copy = None
        if self.torch is not None:
            self.torch.cuda.empty_cache()

    # references --------------------------------------------------------------------------------
    def reference(self) -> dict[str, Any]:
        e, s = self.exact, self.sample
        x = e["x"][s] if self.name == "layer_norm_backward" else e["x"]  # (only the backward holds every row)
        if self.name in ("softmax", "log_softmax"):
            shifted = x - x.max(axis=1, keepdims=True)
            logs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
            return {"y": logs if self.name == "log_softmax" else np.exp(logs)}
        if self.name == "rms_norm":
            return {"y": x / np.sqrt((x * x).mean(axis=1, keepdims=True) + EPS) * e["w"]}
        if self.name == "add_rms_norm":
            total = (x + e["r"]).astype(np.float32)  # close to the rounded sum; tolerances cover the rest
            total = total.astype(np.float64)
            return {"sum": total, "y": total / np.sqrt((total * total).mean(axis=1, keepdims=True) + EPS) * e["w"]}
        if self.name == "layer_norm":
            mean = x.mean(axis=1, keepdims=True)
            return {"y": (x - mean) / np.sqrt(x.var(axis=1, keepdims=True) + EPS) * e["w"] + e["b"]}
        from cutile_kernels._norms import layer_norm_backward_reference

        mean_all = e["x"].mean(axis=1, keepdims=True)
        rstd_all = 1.0 / np.sqrt(e["x"].var(axis=1, keepdims=True) + EPS)
        self.stats = (mean_all, rstd_all)
        dx, dw, db = layer_norm_backward_reference(e["dy"], e["x"], e["w"], mean_all, rstd_all)
        return {"dx": dx[s], "dw": dw, "db": db}

    def compare(self, got: dict[str, Any]) -> str | None:
        tolerance = 1e-4 if str(self.dtype) == "f32" else 3e-2
        for key, expected in self.expected.items():
            values = self.to_numpy(got[key])
            if key in ("y", "sum", "dx"):
                values = values.reshape(self.rows, -1)[self.sample]
            scale = float(np.abs(expected).max(initial=0.0))
            if not np.isfinite(values).all():
                return f"{key}: not finite"
            if not np.allclose(values, expected, rtol=tolerance, atol=tolerance * scale):
                return f"{key}: max abs error {float(np.max(np.abs(values - expected))):.3g} (scale {scale:.3g})"
        return None

    # implementations -----------------------------------------------------------------------------
    def implementations(self) -> dict[str, tuple[Callable[[], Any], Callable[[], str | None]]]:
        found = {"cutile": self.cutile()}
        if self.torch is not None:
            found["torch"] = self.torch_eager()
        if self.peers.kernels is not None and self.name != "layer_norm_backward":
            found["triton"] = self.triton()
        return found

    def _checked(self, run: Callable[[], Any], outputs: dict[str, Any], sync: Callable[[Any], Any]) \
            -> tuple[Callable[[], Any], Callable[[], str | None]]:
        def check() -> str | None:
            sync(run())
            return self.compare(outputs)
        return run, check

    def cutile(self) -> tuple[Callable[[], Any], Callable[[], str | None]]:
        import cutile_kernels as ck
        from cutile import api

        # Shared once as cutile tensors (no DLPack exchange inside the timed calls).
        i = {k: api.from_dlpack(v) if self.torch is not None else v for k, v in self.inputs.items()}
        shape = (self.rows, self.cols)
        def own(t: Any) -> Any:
            return api.from_dlpack(t) if self.torch is not None else t

        if self.name in ("softmax", "log_softmax", "rms_norm", "layer_norm"):
            out = {"y": self.empty(shape)}
            function = getattr(ck, self.name)
            arguments: dict[str, Callable[[], tuple[Any, ...]]] = {
                "softmax": lambda: (i["x"],), "log_softmax": lambda: (i["x"],),
                "rms_norm": lambda: (i["x"], i["w"], EPS),
                "layer_norm": lambda: (i["x"], i["w"], i["b"], EPS)}
            args = arguments[self.name]()
            y = own(out["y"])
            run = lambda: function.launch(*args, out=y)  # noqa: E731
        elif self.name == "add_rms_norm":
            out = {"sum": self.empty(shape), "y": self.empty(shape)}
            targets = (own(out["sum"]), own(out["y"]))
            run = lambda: ck.add_rms_norm.launch(i["x"], i["r"], i["w"], EPS, out=targets)  # noqa: E731
        else:
            mean, rstd = (own(self.device_stats(v)) for v in self.stats)
            out = {"dx": self.empty(shape), "dw": self.empty((self.cols,)), "db": self.empty((self.cols,))}
            grads = (own(out["dx"]), own(out["dw"]), own(out["db"]))
            run = lambda: ck.layer_norm_backward.launch(i["dy"], i["x"], i["w"], mean, rstd,  # noqa: E731
                                                        out=grads)
        return self._checked(run, out, lambda work: work.sync())

    def device_stats(self, values: Any) -> Any:
        from cutile import api

        if self.torch is not None:
            return self.torch.from_numpy(values.astype(np.float32)).cuda()
        return api.from_numpy(values.astype(np.float32))

    def torch_eager(self) -> tuple[Callable[[], Any], Callable[[], str | None]]:
        torch, i = self.torch, self.inputs
        functional = torch.nn.functional
        cols = self.cols
        out: dict[str, Any] = {}

        def keep(**results: Any) -> None:
            out.update(results)

        if self.name == "softmax":
            run = lambda: keep(y=torch.softmax(i["x"], -1))  # noqa: E731
        elif self.name == "log_softmax":
            run = lambda: keep(y=torch.log_softmax(i["x"], -1))  # noqa: E731
        elif self.name == "rms_norm":
            run = lambda: keep(y=functional.rms_norm(i["x"], (cols,), i["w"], EPS))  # noqa: E731
        elif self.name == "add_rms_norm":
            def run() -> None:
                total = i["x"] + i["r"]
                keep(sum=total, y=functional.rms_norm(total, (cols,), i["w"], EPS))
        elif self.name == "layer_norm":
            run = lambda: keep(y=functional.layer_norm(i["x"], (cols,), i["w"], i["b"], EPS))  # noqa: E731
        else:
            mean, rstd = (self.device_stats(v) for v in self.stats)

            def run() -> None:
                dx, dw, db = torch.ops.aten.native_layer_norm_backward(i["dy"], i["x"], [cols], mean, rstd, i["w"],
                                                                       i["b"], [True, True, True])
                keep(dx=dx, dw=dw, db=db)
        return self._checked(run, out, lambda _: torch.cuda.synchronize())

    def triton(self) -> tuple[Callable[[], Any], Callable[[], str | None]]:
        kernels, i = self.peers.kernels, self.inputs
        assert kernels is not None  # (implementations() asks for this peer only where Triton imports)
        block = 1 << max(0, self.cols - 1).bit_length()
        warps = 32 if block >= 65536 else 16 if block >= 8192 else 8
        grid = (self.rows,)
        shape = (self.rows, self.cols)
        if self.name in ("softmax", "log_softmax"):
            out = {"y": self.empty(shape)}
            run = lambda: kernels["softmax"][grid](out["y"], i["x"], self.cols, BLOCK=block,  # noqa: E731
                                                   LOG=self.name == "log_softmax", num_warps=warps)
        elif self.name == "rms_norm":
            out = {"y": self.empty(shape)}
            run = lambda: kernels["rms_norm"][grid](out["y"], i["x"], i["w"], self.cols, EPS, BLOCK=block,  # noqa: E731
                                                    num_warps=warps)
        elif self.name == "add_rms_norm":
            out = {"sum": self.empty(shape), "y": self.empty(shape)}
            run = lambda: kernels["add_rms_norm"][grid](out["sum"], out["y"], i["x"], i["r"], i["w"],  # noqa: E731
                                                        self.cols, EPS, BLOCK=block, num_warps=warps)
        else:
            out = {"y": self.empty(shape)}
            run = lambda: kernels["layer_norm"][grid](out["y"], i["x"], i["w"], i["b"], self.cols, EPS,  # noqa: E731
                                                      BLOCK=block, num_warps=warps)
        return self._checked(run, out, lambda _: self.torch.cuda.synchronize())


def triton_kernels() -> dict[str, Any]:
    """One row per program, the whole row in one block (Triton's tutorial formulation);
    contiguous rows."""
    import triton
    import triton.language as tl

    @triton.jit  # type: ignore[untyped-decorator]
    def softmax(y_ptr, x_ptr, n_cols, BLOCK: tl.constexpr, LOG: tl.constexpr):  # type: ignore[no-untyped-def]
        row = tl.program_id(0).to(tl.int64)
        cols = tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=-float("inf")).to(tl.float32)
        shifted = x - tl.max(x, axis=0)
        e = tl.exp(shifted)
        total = tl.sum(e, axis=0)
        if LOG:
            y = shifted - tl.log(total)
        else:
            y = e / total
        tl.store(y_ptr + row * n_cols + cols, y.to(y_ptr.dtype.element_ty), mask=mask)

    @triton.jit  # type: ignore[untyped-decorator]
    def rms_norm(y_ptr, x_ptr, w_ptr, n_cols, eps, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
        row = tl.program_id(0).to(tl.int64)
        cols = tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
        scale = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_ptr + row * n_cols + cols, (x * scale * w).to(y_ptr.dtype.element_ty), mask=mask)

    @triton.jit  # type: ignore[untyped-decorator]
    def add_rms_norm(s_ptr, y_ptr, x_ptr, r_ptr, w_ptr, n_cols, eps,  # type: ignore[no-untyped-def]
                     BLOCK: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)
        cols = tl.arange(0, BLOCK)
        mask = cols < n_cols
        total = (tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
                 + tl.load(r_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32))
        rounded = total.to(s_ptr.dtype.element_ty)
        tl.store(s_ptr + row * n_cols + cols, rounded, mask=mask)
        t = rounded.to(tl.float32)
        scale = tl.rsqrt(tl.sum(t * t, axis=0) / n_cols + eps)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_ptr + row * n_cols + cols, (t * scale * w).to(y_ptr.dtype.element_ty), mask=mask)

    @triton.jit  # type: ignore[untyped-decorator]
    def layer_norm(y_ptr, x_ptr, w_ptr, b_ptr, n_cols, eps, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
        row = tl.program_id(0).to(tl.int64)
        cols = tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
        mean = tl.sum(x, axis=0) / n_cols
        centered = tl.where(mask, x - mean, 0.0)
        rstd = tl.rsqrt(tl.sum(centered * centered, axis=0) / n_cols + eps)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_ptr + row * n_cols + cols, (centered * rstd * w + b).to(y_ptr.dtype.element_ty), mask=mask)

    return {"softmax": softmax, "rms_norm": rms_norm, "add_rms_norm": add_rms_norm, "layer_norm": layer_norm}


if __name__ == "__main__":
    sys.exit(main())
