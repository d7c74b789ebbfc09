#!/usr/bin/env python3
"""cutile_kernels' pointwise, gather and cache functions against torch, as a fraction of
the device-to-device copy of the same bytes, measured in one run on one GPU.

- rope: q (4096 tokens, 32 heads, 128) and k (4096, 8, 128) bf16 at i64 positions,
  neox, out of place and in place (bytes: q and k read and written);
- silu_mul: gate and up (4096, 14336) bf16 (bytes: two read, one written);
- embedding: 4096 rows of a 151936 x 4096 bf16 table (bytes: rows read and written);
- argmax: 8192 x 151936, fp32 and bf16 (bytes: x read);
- top_k: k = 50 of 1 and 64 rows of 151936 (LLM sampling), bf16 and fp32, against
  torch.topk (bytes: x read);
- kv_cache_update: 4096 new tokens of 8 heads x 128 bf16 into a (16, 8192, 8, 128)
  cache, and a decode step (one token per batch entry of 64) for its latency.

Every cutile result is checked against torch first (an error stops the script), then
timed with `cutile.bench.do_bench` over the returned-launch form (``fn.launch(...).op``:
device time alone, L2 flushed before each rep); torch eager (and with ``--compile``
torch.compile, where it fuses what eager cannot) on the same bench stream. The copy is
torch's ``copy_`` of a tensor of half the bytes (read + written = the bytes moved).
Target (issue 16): >= 0.90x of copy bandwidth for rope, silu_mul and embedding.

    scripts/on_gpu_machine.sh python3 scripts/bench_pointwise.py [--compile] [--only rope ...]

``--record`` first searches each function's configs at these shapes (``--budget`` seconds
per shape) and saves the winners as ``cutile_kernels/records/<arch>/<name>.json`` (to
commit), which the timed run then uses; argmax's at 8192, 64 and 1 rows of 151936, each
in f32 and bf16 (its buckets hold the element size).

``--smoke`` runs every workload on the CPU interpreter at small sizes against numpy
(no torch, no GPU; the CI runs it).
"""

import argparse
import math
import os
import sys
from collections.abc import Callable
from typing import Any

import numpy as np


class Checked(Exception):
    """A result differs from its reference."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="small sizes on the CPU interpreter, against numpy")
    parser.add_argument("--compile", action="store_true", help="also time torch.compile of the torch formulations")
    parser.add_argument("--reps", type=int, default=50)
    parser.add_argument("--record", action="store_true",
                        help="first search each function's configs at the benchmark's shapes and save the records "
                             "(packages/cutile-kernels/src/cutile_kernels/records/<arch>/, to commit)")
    parser.add_argument("--budget", type=float, default=60.0, help="seconds of search per shape with --record")
    parser.add_argument("--only", nargs="*", default=None,
                        help="workloads to run (rope, silu_mul, embedding, argmax, top_k, kv_cache_update)")
    args = parser.parse_args(argv)
    if args.smoke:
        os.environ["CUTILE_BACKEND"] = "interpreter"

    import cutile
    from cutile import bench

    import cutile_kernels as ck

    if not args.smoke and cutile.backend() != "gpu":
        print("bench_pointwise.py needs a GPU (--smoke runs on the interpreter)", file=sys.stderr)
        return 2
    wanted = set(args.only) if args.only else {"rope", "silu_mul", "embedding", "argmax", "top_k", "kv_cache_update"}
    reps, warmup = (2, 1) if args.smoke else (args.reps, 10)
    if args.record:
        make_records(wanted, args.budget, args.smoke)
    rows: list[tuple[str, str, float, float]] = []  # workload, implementation, ms, GB/s

    if args.smoke:
        lib = Numpy()
    else:
        import torch
        lib = Torch(torch, args.compile)

    def timed(workload: str, implementation: str, moved: int, fn: Callable[[], Any]) -> float:
        result = bench.do_bench(fn, warmup=warmup, reps=reps)
        gbs = moved / result.median_ms / 1e6
        rows.append((workload, implementation, result.median_ms, gbs))
        return gbs

    def compare(workload: str, moved: int, cutile_fn: Callable[[], Any], peers: dict[str, Callable[[], Any]]) -> None:
        copy_gbs = timed(workload, "copy (same bytes)", moved, lib.copy_of(moved))
        cutile_gbs = timed(workload, "cutile", moved, cutile_fn)
        for name, peer in peers.items():
            timed(workload, name, moved, peer)
        rows.append((workload, "cutile / copy", float("nan"), cutile_gbs / copy_gbs))

    rng = np.random.default_rng(0)
    small = args.smoke

    if "rope" in wanted:
        tokens, hq, hk, d = (37, 4, 2, 16) if small else (4096, 32, 8, 128)
        q, k = lib.randn((tokens, hq, d), "bf16"), lib.randn((tokens, hk, d), "bf16")
        positions = lib.from_numpy(rng.integers(0, 8192, tokens).astype(np.int64))
        oq, ok = lib.empty((tokens, hq, d), "bf16"), lib.empty((tokens, hk, d), "bf16")
        ck.rope(q, k, positions, 1e4, out_q=oq, out_k=ok)
        eq, ek = lib.rope_reference(q, k, positions, 1e4)
        lib.check("rope q", oq, eq, 2e-2)
        lib.check("rope k", ok, ek, 2e-2)
        moved = 2 * lib.nbytes(q) + 2 * lib.nbytes(k)
        compare("rope neox bf16 (out of place)", moved,
                lambda: ck.rope.launch(q, k, positions, 1e4, out_q=oq, out_k=ok).op,
                lib.peers("rope", q, k, positions))
        compare("rope neox bf16 (in place)", moved,
                lambda: ck.rope.launch(oq, ok, positions, 1e4, inplace=True).op, {})

    if "silu_mul" in wanted:
        n_rows, width = (9, 300) if small else (4096, 14336)
        gate, up = lib.randn((n_rows, width), "bf16"), lib.randn((n_rows, width), "bf16")
        out = lib.empty((n_rows, width), "bf16")
        ck.silu_mul(gate, up, out=out)
        lib.check("silu_mul", out, lib.silu_mul_reference(gate, up), 2e-2)
        compare("silu_mul bf16", 3 * lib.nbytes(gate), lambda: ck.silu_mul.launch(gate, up, out=out).op,
                lib.peers("silu_mul", gate, up))

    if "embedding" in wanted:
        vocab, dim, count = (1000, 64, 37) if small else (151936, 4096, 4096)
        table = lib.randn((vocab, dim), "bf16")
        ids = lib.from_numpy(rng.integers(0, vocab, count).astype(np.int64))
        out = lib.empty((count, dim), "bf16")
        ck.embedding(ids, table, out=out)
        lib.check("embedding", out, lib.embedding_reference(ids, table), 0.0)
        compare("embedding bf16", 2 * lib.nbytes(out), lambda: ck.embedding.launch(ids, table, out=out).op,
                lib.peers("embedding", ids, table))

    if "argmax" in wanted:
        n_rows, vocab = (5, 3001) if small else (8192, 151936)
        for dtype in ("f32", "bf16"):
            x = lib.randn((n_rows, vocab), dtype)
            out = lib.empty((n_rows,), "i64")
            ck.argmax(x, out=out)
            lib.check(f"argmax {dtype}", out, lib.argmax_reference(x), 0.0)
            compare(f"argmax {dtype}", lib.nbytes(x), lambda: ck.argmax.launch(x, out=out).op,
                    lib.peers("argmax", x))
        for batch in (1, 64):  # decode: few rows, the two stages fill the GPU
            x = lib.randn((batch, vocab), "bf16")
            out = lib.empty((batch,), "i64")
            ck.argmax(x, out=out)
            lib.check(f"argmax decode {batch}", out, lib.argmax_reference(x), 0.0)
            compare(f"argmax bf16 {batch} x {vocab} (decode)", lib.nbytes(x),
                    lambda: ck.argmax.launch(x, out=out).op, lib.peers("argmax", x))

    if "top_k" in wanted:
        vocab, k = (3001, 8) if small else (151936, 50)
        for n_rows, dtype in ((1, "bf16"), (64, "bf16"), (64, "f32")):
            x = lib.randn((n_rows, vocab), dtype)
            values, indices = lib.empty((n_rows, k), dtype), lib.empty((n_rows, k), "i64")
            ck.top_k(x, k, out=(values, indices))
            lib.check_top_k(f"top_k {dtype} {n_rows}", x, k, values, indices)
            compare(f"top_k {dtype} {n_rows} x {vocab}, k {k}", lib.nbytes(x),
                    lambda: ck.top_k.launch(x, k, out=(values, indices)).op, lib.peers("top_k", x, k))

    if "kv_cache_update" in wanted:
        batch, max_seq, tokens, heads, d = (2, 40, 9, 2, 24) if small else (16, 8192, 4096, 8, 128)
        cache = lib.zeros((batch, max_seq, heads, d), "bf16")
        new = lib.randn((batch, tokens, heads, d), "bf16")
        start = max_seq - tokens - 3
        positions = lib.from_numpy(np.arange(start, start + tokens, dtype=np.int64))
        ck.kv_cache_update(cache, new, positions)
        lib.check("kv_cache_update rows", lib.rows(cache, start, tokens), new, 0.0)
        lib.check("kv_cache_update elsewhere", lib.rows(cache, 0, start), lib.zeros_like_rows(cache, start), 0.0)
        moved = 2 * lib.nbytes(new)
        compare("kv_cache_update bf16 (prefill)", moved, lambda: ck.kv_cache_update.launch(cache, new, positions).op,
                lib.peers("kv_cache_update", cache, new, start))
        decode_batch = 2 if small else 64
        cache = lib.zeros((decode_batch, max_seq, heads, d), "bf16")
        step = lib.randn((decode_batch, 1, heads, d), "bf16")
        position = lib.from_numpy(np.array([max_seq // 2], np.int64))
        ck.kv_cache_update(cache, step, position)
        lib.check("kv_cache_update decode", lib.rows(cache, max_seq // 2, 1), step, 0.0)
        compare(f"kv_cache_update bf16 (decode, batch {decode_batch})", 2 * lib.nbytes(step),
                lambda: ck.kv_cache_update.launch(cache, step, position).op,
                lib.peers("kv_cache_update", cache, step, max_seq // 2))

    print(f"{'workload':48s} {'implementation':28s} {'ms':>10s} {'GB/s':>9s}")
    for workload, implementation, ms, gbs in rows:
        if math.isnan(ms):
            print(f"{workload:48s} {implementation:28s} {'':>10s} {gbs:8.3f}x")
        else:
            print(f"{workload:48s} {implementation:28s} {ms:10.4f} {gbs:9.1f}")
    print(f"results: OK ({'interpreter, wall clock: not figures' if args.smoke else 'GPU, device time'})")
    return 0


#: function -> (its module, the shapes its record holds: the benchmark's; smoke: small ones)
RECORD_SHAPES: dict[str, tuple[str, list[tuple[int, ...]], list[tuple[int, ...]]]] = {
    "rope": ("rope", [(4096, 32, 8, 128), (64, 32, 8, 128)], [(37, 4, 2, 16)]),
    "silu_mul": ("activations", [(4096 * 14336, 2, 0)], [(2700, 2, 0)]),
    "embedding": ("embedding", [(4096, 151936, 4096)], [(37, 1000, 64)]),
    # (rows, cols, itemsize): f32 and bf16 rows run different kernels, each searched for its own buckets
    "argmax": ("argmax", [(rows, 151936, itemsize) for rows in (8192, 64, 1) for itemsize in (4, 2)],
               [(5, 3001, 4), (5, 3001, 2)]),
    "top_k": ("top_k", [(1, 151936, 50), (64, 151936, 50)], [(5, 3001, 8)]),
    "kv_cache_update": ("kv_cache", [(16, 8192, 4096, 1024), (64, 8192, 1, 1024)], [(2, 40, 9, 48)]),
}


def make_records(wanted: set[str], budget: float, smoke: bool) -> None:
    """Searches each wanted function's space at its shapes and saves its record."""
    import importlib

    for function, (module_name, shapes, small_shapes) in RECORD_SHAPES.items():
        if function not in wanted:
            continue
        tuner = importlib.import_module(f"cutile_kernels._{module_name}").TUNER
        record = tuner.make_record(small_shapes if smoke else shapes, budget=budget,
                                   **({"warmup": 1, "reps": 2, "paired_reps": 2} if smoke else {}))
        if smoke:  # a record of interpreter timings is no record to commit
            print(f"searched {tuner.name}: {len(record.winners)} buckets ({', '.join(record.winners)}; not saved)")
            continue
        assert tuner.record_path is not None
        record.save(tuner.record_path)
        print(f"saved {tuner.record_path} ({', '.join(record.winners)})")


class Numpy:
    """--smoke: cutile tensors on the interpreter, references in numpy float64."""

    def __init__(self) -> None:
        from cutile import api

        self.api = api
        self.rng = np.random.default_rng(1)

    def randn(self, shape: tuple[int, ...], dtype: str) -> Any:
        return self.api.from_numpy(self.rng.standard_normal(shape).astype(np.float32), dtype)

    def empty(self, shape: tuple[int, ...], dtype: str) -> Any:
        return self.api.full(list(shape), -1 if dtype == "i64" else np.nan, dtype=dtype)

    def zeros(self, shape: tuple[int, ...], dtype: str) -> Any:
        return self.api.zeros(list(shape), dtype=dtype)

    def from_numpy(self, array: np.ndarray) -> Any:
        return self.api.from_numpy(array)

    def nbytes(self, t: Any) -> int:
        return int(t.nbytes)

    def values(self, t: Any) -> np.ndarray:
        return np.asarray(t if isinstance(t, np.ndarray) else t.to_numpy()).astype(np.float64)

    def check(self, what: str, got: Any, expected: Any, tolerance: float) -> None:
        if not np.allclose(self.values(got), self.values(expected), rtol=tolerance, atol=tolerance):
            raise Checked(f"{what}: wrong result")

    def rows(self, cache: Any, start: int, count: int) -> np.ndarray:
        return self.values(cache)[:, start:start + count]

    def zeros_like_rows(self, cache: Any, count: int) -> np.ndarray:
        return np.zeros_like(self.values(cache)[:, :count])

    def rope_reference(self, q: Any, k: Any, positions: Any, theta: float) -> tuple[np.ndarray, np.ndarray]:
        pos = self.values(positions)
        out = []
        for x in (self.values(q), self.values(k)):
            d = x.shape[-1]
            angle = pos[:, None, None] * theta ** (-2.0 * np.arange(d // 2) / d)
            x1, x2 = x[..., : d // 2], x[..., d // 2:]
            out.append(np.concatenate([x1 * np.cos(angle) - x2 * np.sin(angle),
                                       x2 * np.cos(angle) + x1 * np.sin(angle)], -1))
        return out[0], out[1]

    def silu_mul_reference(self, gate: Any, up: Any) -> np.ndarray:
        g = self.values(gate)
        return g / (1.0 + np.exp(-g)) * self.values(up)

    def embedding_reference(self, ids: Any, table: Any) -> np.ndarray:
        return self.values(table)[self.values(ids).astype(np.int64)]

    def argmax_reference(self, x: Any) -> np.ndarray:
        return self.values(x).argmax(-1).astype(np.float64)

    def check_top_k(self, what: str, x: Any, k: int, values: Any, indices: Any) -> None:
        """Indices in torch.topk's order (values decreasing, ties by increasing index; no
        NaN in the inputs), values the input's at them."""
        host = self.values(x)
        order = np.lexsort((np.broadcast_to(np.arange(host.shape[1]), host.shape), -host), axis=-1)[:, :k]
        if not np.array_equal(self.values(indices), order):
            raise Checked(f"{what}: wrong indices")
        self.check(what, values, np.take_along_axis(host, order, -1), 0.0)

    def copy_of(self, moved: int) -> Callable[[], Any]:
        source = self.api.zeros([max(1, moved // 8)], dtype="f32")  # read + written: the bytes moved
        return lambda: self.api.copy(source)

    def peers(self, workload: str, *arguments: Any) -> dict[str, Callable[[], Any]]:
        return {}


class Torch:
    """On the GPU: torch tensors (cutile_kernels takes them through DLPack) and torch peers."""

    DTYPES = {"f32": "float32", "bf16": "bfloat16", "f16": "float16", "i64": "int64"}

    def __init__(self, torch: Any, compiled: bool) -> None:
        self.torch = torch
        self.compiled = compiled
        self.generator = torch.Generator(device="cuda").manual_seed(1)

    def dtype(self, name: str) -> Any:
        return getattr(self.torch, self.DTYPES[name])

    def randn(self, shape: tuple[int, ...], dtype: str) -> Any:
        return self.torch.randn(shape, device="cuda", generator=self.generator).to(self.dtype(dtype))

    def empty(self, shape: tuple[int, ...], dtype: str) -> Any:
        fill = -1 if dtype == "i64" else float("nan")
        return self.torch.full(shape, fill, device="cuda", dtype=self.dtype(dtype))

    def zeros(self, shape: tuple[int, ...], dtype: str) -> Any:
        return self.torch.zeros(shape, device="cuda", dtype=self.dtype(dtype))

    def from_numpy(self, array: np.ndarray) -> Any:
        return self.torch.from_numpy(array).cuda()

    def nbytes(self, t: Any) -> int:
        return int(t.numel() * t.element_size())

    def check(self, what: str, got: Any, expected: Any, tolerance: float) -> None:
        self.torch.cuda.synchronize()
        if not self.torch.allclose(got.double(), expected.double(), rtol=tolerance, atol=tolerance):
            worst = (got.double() - expected.double()).abs().max().item()
            raise Checked(f"{what}: wrong result (largest difference {worst})")

    def rows(self, cache: Any, start: int, count: int) -> Any:
        return cache[:, start:start + count]

    def zeros_like_rows(self, cache: Any, count: int) -> Any:
        return self.torch.zeros_like(cache[:, :count])

    def cos_sin(self, positions: Any, d: int, theta: float) -> tuple[Any, Any]:
        inv_freq = theta ** (-self.torch.arange(0, d, 2, device="cuda", dtype=self.torch.float32) / d)
        angle = positions.float()[:, None] * inv_freq[None, :]
        emb = self.torch.cat((angle, angle), dim=-1)
        return emb.cos(), emb.sin()

    @staticmethod
    def rotate(x: Any, cos: Any, sin: Any, torch: Any) -> Any:
        """HF transformers' apply_rotary_pos_emb, on (tokens, heads, d) with cos/sin (tokens, d)."""
        half = x.shape[-1] // 2
        rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
        return (x * cos[:, None, :] + rotated * sin[:, None, :]).to(x.dtype)

    def rope_reference(self, q: Any, k: Any, positions: Any, theta: float) -> tuple[Any, Any]:
        cos, sin = self.cos_sin(positions.double(), q.shape[-1], theta)
        return (self.rotate(q.double(), cos.double(), sin.double(), self.torch),
                self.rotate(k.double(), cos.double(), sin.double(), self.torch))

    def silu_mul_reference(self, gate: Any, up: Any) -> Any:
        return self.torch.nn.functional.silu(gate.double()) * up.double()

    def embedding_reference(self, ids: Any, table: Any) -> Any:
        return table[ids]

    def argmax_reference(self, x: Any) -> Any:
        return x.argmax(-1)

    def check_top_k(self, what: str, x: Any, k: int, values: Any, indices: Any) -> None:
        """Values as torch.topk's, and each the input's at its index (torch's CUDA topk
        leaves the order of equal values open, so indices are checked through the values;
        the order of ties is the interpreter tests' job)."""
        self.check(what, values, self.torch.topk(x, k).values, 0.0)
        self.check(f"{what} indices", x.gather(-1, indices), values, 0.0)
        if not bool((indices.sort(-1).values.diff(dim=-1) > 0).all()):
            raise Checked(f"{what}: an index repeats")

    def copy_of(self, moved: int) -> Callable[[], Any]:
        source = self.torch.empty(max(1, moved // 8), device="cuda", dtype=self.torch.float32)
        target = self.torch.empty_like(source)
        return lambda: target.copy_(source)

    def peers(self, workload: str, *arguments: Any) -> dict[str, Callable[[], Any]]:
        torch, F = self.torch, self.torch.nn.functional
        formulations: dict[str, Callable[..., Any]]
        if workload == "rope":
            q, k, positions = arguments
            cos, sin = self.cos_sin(positions, q.shape[-1], 1e4)  # the cos/sin cache HF keeps
            cos, sin = cos.to(q.dtype), sin.to(q.dtype)
            rotate = self.rotate

            def rope(q: Any, k: Any, cos: Any, sin: Any) -> Any:
                return rotate(q, cos, sin, torch), rotate(k, cos, sin, torch)
            formulations, inputs = {"torch eager (cos/sin cache)": rope}, (q, k, cos, sin)
        elif workload == "silu_mul":
            formulations, inputs = {"torch eager": lambda g, u: F.silu(g) * u}, arguments
        elif workload == "embedding":
            ids, table = arguments
            formulations, inputs = {"torch F.embedding": lambda i, t: F.embedding(i, t)}, (ids, table)
        elif workload == "argmax":
            formulations, inputs = {"torch.argmax": lambda x: torch.argmax(x, dim=-1)}, arguments
        elif workload == "top_k":
            x, k = arguments
            formulations, inputs = {"torch.topk": lambda x: torch.topk(x, k, dim=-1)}, (x,)
        else:
            cache, new, start = arguments
            count = new.shape[1]
            formulations = {"torch slice copy_": lambda c, n: c[:, start:start + count].copy_(n)}
            inputs = (cache, new)
        peers = {name: (lambda f=f: f(*inputs)) for name, f in formulations.items()}
        if self.compiled and workload in ("rope", "silu_mul"):  # where a fused kernel beats eager
            for name, f in formulations.items():
                fused = torch.compile(f)
                fused(*inputs)
                peers[name.replace("eager", "compile")] = lambda fused=fused: fused(*inputs)
        return peers


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Checked as exc:
        print(f"results: WRONG: {exc}", file=sys.stderr)
        sys.exit(1)
