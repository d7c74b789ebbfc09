#!/usr/bin/env python3
"""cutile_kernels' flash attention forward against torch SDPA (flash backend), in TFLOP/s.

Per dtype (f16, bf16) and causality at (batch, heads, seq, head_dim) = (4, 32, 4096, 128):
each implementation's result is checked first (cutile against SDPA's; on the interpreter
against float64 numpy), then timed with `cutile.bench.do_bench` (L2 flushed; cutile in
the launch form, ``attention.launch(..., out=)``, on cutile tensors imported once, so the
device alone is timed). FLOPs are ``4 * batch * heads * seq_q * seq_k * head_dim``, half
of it causal. ``--search`` times every config of `SPACE` (each checked first) and prints
the best; ``--config`` times one (JSON); otherwise each row runs the config the library
chooses for its shape (the committed record's winner, else the default). ``--record`` first
searches the configs (``--budget`` seconds per shape) at the benchmark's shapes and saves
the winners as ``cutile_kernels/records/<arch>/attention.json`` (to commit). The search
times the dense kernel; variable-length calls take their dense shape's bucket, so only
shapes the varlen kernel was seen to compile and run well with are recorded (a winner of
64x128 tiles, 4 warps, occupancy 2 at a Qwen3 prefill shape failed in tileiras for the
varlen kernel on sm_90).
``--smoke`` runs it all on the CPU interpreter with tiny shapes (CI runs it; a smoke
record is not saved).

On the GPU machine:

    scripts/on_gpu_machine.sh python3 scripts/bench_attention.py
    scripts/on_gpu_machine.sh python3 scripts/bench_attention.py --search --dtypes f16
    scripts/on_gpu_machine.sh python3 scripts/bench_attention.py --record --budget 30
"""

import argparse
import json
import sys
from typing import Any

import numpy as np

from _bench_common import choose_backend, lacks_gpu, numpy_dtype, optional, torch_dtype

SHAPE = (4, 32, 4096, 128)
SMOKE_SHAPE = (1, 2, 70, 64)
SMOKE_CONFIG = {"block_m": 32, "block_n": 16, "num_worker_warps": 4, "occupancy": 1}
TOLERANCE = {"f16": 4e-3, "bf16": 2.5e-2}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="the CPU interpreter, tiny shapes")
    parser.add_argument("--dtypes", default="f16,bf16", help="comma-separated: f16, bf16")
    parser.add_argument("--causal", default="false,true", help="comma-separated: false, true")
    parser.add_argument("--shape", default=None, help="batch,heads,seq,head_dim (default 4,32,4096,128)")
    parser.add_argument("--kv-heads", type=int, default=None, help="GQA: kv heads (default: the heads)")
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--config", default=None, help="a config as JSON (SPACE's keys) instead of the default")
    parser.add_argument("--search", action="store_true", help="time every config of SPACE")
    parser.add_argument("--record", action="store_true",
                        help="first search the configs at the benchmark's shapes and save the "
                             "record (packages/cutile-kernels/src/cutile_kernels/records/<arch>/attention.json)")
    parser.add_argument("--budget", type=float, default=30.0, help="seconds of search per shape with --record")
    args = parser.parse_args(argv)
    choose_backend(args.smoke)

    import cutile
    from cutile import bench
    from cutile_kernels._attention import DEFAULT, SPACE, TUNER, _shape_key, attention

    if lacks_gpu("bench_attention.py", args.smoke):
        return 2
    gpu = cutile.backend() == "gpu"
    torch = optional("torch") if gpu else None
    if gpu and (torch is None or not torch.cuda.is_available()):
        print("bench_attention.py needs torch with CUDA on the GPU (the inputs and the peer)", file=sys.stderr)
        return 2
    shape = tuple(int(n) for n in args.shape.split(",")) if args.shape else (SMOKE_SHAPE if args.smoke else SHAPE)
    batch, heads, seq, head_dim = shape
    kv_heads = args.kv_heads or (1 if args.smoke else heads)
    reps, warmup = (2, 1) if args.smoke else (args.reps, 5)
    dtypes = [d for d in args.dtypes.split(",") if d]
    causals = [c.strip().lower() == "true" for c in args.causal.split(",") if c]
    from cutile.core import bf16, f16
    keys = {(dtype, causal): _shape_key(batch, heads, kv_heads, seq, seq, head_dim, causal,
                                        bf16 if dtype == "bf16" else f16)
            for dtype in dtypes for causal in causals}
    recorded: dict[str, dict[str, Any]] = {}  # --record's winners by bucket (what the timed rows run)
    if args.record:
        shapes = list(keys.values())
        record = TUNER.make_record(shapes, budget=args.budget, **({"warmup": 1, "reps": 1} if args.smoke else {}))
        if args.smoke:  # a record of interpreter timings is no record to commit
            print(f"searched {TUNER.name}: {len(record.winners)} buckets (not saved)")
        else:
            record.save(TUNER.record_path)
            recorded = {bucket: dict(winner.config) for bucket, winner in record.winners.items()}
            print(f"saved {TUNER.record_path}: " + ", ".join(f"{bucket} {winner.config} {winner.median_ms:.4f} ms"
                                                             for bucket, winner in record.winners.items()))
    print(f"backend {cutile.backend()}; shape {shape}, kv heads {kv_heads}")
    print(f"{'dtype':5s} {'causal':6s} {'impl':8s} {'ms':>9s} {'TFLOP/s':>8s} {'x sdpa':>7s}  config / check")
    failures = 0
    for dtype in dtypes:
        for causal in causals:
            if args.search:
                configs: list[dict[str, Any]] = [dict(c) for c in SPACE.configs()]
            elif args.config:
                configs = [{**DEFAULT, **json.loads(args.config)}]
            else:  # what a call of this shape runs: the record's winner, else the default
                key = keys[dtype, causal]
                chosen = recorded.get(TUNER.bucket(key)) or dict(TUNER.config(key))
                configs = [SMOKE_CONFIG if args.smoke else chosen]
            flops = 4 * batch * heads * seq * seq * head_dim * (0.5 if causal else 1.0)
            case = Case(dtype, causal, batch, heads, kv_heads, seq, head_dim, torch)
            sdpa_ms = None
            if torch is not None:
                sdpa_ms = bench.do_bench(case.sdpa, warmup=warmup, reps=reps).median_ms
                print(f"{dtype:5s} {str(causal):6s} {'sdpa':8s} {sdpa_ms:9.4f} {flops / sdpa_ms / 1e9:8.1f} "
                      f"{1.0:7.3f}")
            best: tuple[float, dict[str, Any]] | None = None
            for config in configs:
                try:
                    problem = case.check(attention, config)
                except cutile.CutileError as exc:
                    problem = f"{type(exc).__name__}: {exc}"
                if problem:
                    print(f"{dtype:5s} {str(causal):6s} {'cutile':8s} {'':>9s} {'':>8s} {'':>7s}  {config} WRONG: "
                          f"{problem}")
                    failures += not args.search  # a config the search cannot run is reported, not fatal
                    continue
                ms = bench.do_bench(lambda: case.launch(attention, config), warmup=warmup, reps=reps).median_ms
                ratio = f"{sdpa_ms / ms:7.3f}" if sdpa_ms is not None else f"{'-':>7s}"
                print(f"{dtype:5s} {str(causal):6s} {'cutile':8s} {ms:9.4f} {flops / ms / 1e9:8.1f} {ratio}  "
                      f"{config} ok")
                if best is None or ms < best[0]:
                    best = (ms, config)
            if best is None:
                failures += 1
            elif args.search:
                ratio = f" ({sdpa_ms / best[0]:.3f}x sdpa)" if sdpa_ms is not None else ""
                print(f"best {dtype} causal={causal}: {best[1]} {best[0]:.4f} ms{ratio}")
    print("results: OK" if not failures else f"results: {failures} FAILED")
    return 1 if failures else 0


class Case:
    """One dtype and causality: inputs (torch on the GPU, numpy on the interpreter), the
    preallocated output, the peer's runner and each config's check and launch."""

    def __init__(self, dtype: str, causal: bool, batch: int, heads: int, kv_heads: int, seq: int, head_dim: int,
                 torch: Any) -> None:
        from cutile import api
        self.dtype, self.causal, self.torch = dtype, causal, torch
        q_shape, kv_shape = (batch, heads, seq, head_dim), (batch, kv_heads, seq, head_dim)
        if torch is not None:
            of_dtype = torch_dtype(torch, dtype)
            generator = torch.Generator(device="cuda").manual_seed(0)
            self.q = torch.randn(q_shape, device="cuda", dtype=of_dtype, generator=generator)
            self.k = torch.randn(kv_shape, device="cuda", dtype=of_dtype, generator=generator)
            self.v = torch.randn(kv_shape, device="cuda", dtype=of_dtype, generator=generator)
            self.out = torch.empty_like(self.q)
            self.expected = self.sdpa()
            torch.cuda.synchronize()
        else:
            of_dtype = numpy_dtype(dtype)
            rng = np.random.default_rng(0)
            self.q, self.k, self.v = (rng.standard_normal(s).astype(of_dtype) for s in (q_shape, kv_shape, kv_shape))
            self.out = np.empty(q_shape, of_dtype)
            q64, k64, v64 = (np.asarray(t, np.float64) for t in (self.q, self.k, self.v))
            self.expected = _reference(q64, k64, v64, causal)
        # cutile tensors over the same memory, imported once (the timed launches skip the import)
        self.tensors = [api.from_dlpack(t) for t in (self.q, self.k, self.v, self.out)]

    def sdpa(self) -> Any:
        torch = self.torch
        from torch.nn.attention import SDPBackend, sdpa_kernel
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return torch.nn.functional.scaled_dot_product_attention(self.q, self.k, self.v, is_causal=self.causal,
                                                                    enable_gqa=self.k.shape[1] != self.q.shape[1])

    def launch(self, attention: Any, config: dict[str, Any]) -> Any:
        q, k, v, out = self.tensors
        return attention.launch(q, k, v, out=out, causal=self.causal, config=config).op

    def check(self, attention: Any, config: dict[str, Any]) -> str | None:
        """None when the config's result is right, else why not (the output poisoned first)."""
        if self.torch is not None:
            self.out.fill_(float("nan"))
            self.torch.cuda.synchronize()
            self.launch(attention, config).sync()
            got, expected = self.out.float(), self.expected.float()
            if not bool(self.torch.isfinite(got).all()):
                return "an element was not written (NaN)"
            error = float((got - expected).abs().max())
        else:
            self.out[...] = np.nan
            self.launch(attention, config).sync()
            got64 = np.asarray(self.out, np.float64)
            if not np.isfinite(got64).all():
                return "an element was not written (NaN)"
            error = float(np.abs(got64 - self.expected).max())
        limit = 2 * TOLERANCE[self.dtype]
        return None if error <= limit else f"max abs error {error:.3g} > {limit:.3g}"


def _reference(q: Any, k: Any, v: Any, causal: bool) -> Any:
    group = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    if causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -np.inf)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    return (p / p.sum(axis=-1, keepdims=True)) @ v


if __name__ == "__main__":
    sys.exit(main())
