#!/usr/bin/env python3
"""Qwen3 decode and prefill: examples/llm on cutile_kernels against the same model in
torch (eager, and replayed as a torch CUDA graph) and the HBM roofline, in one run on one
GPU, with the same random weights.

Shapes: Qwen3-0.6B, 1.7B, 4B and 8B (random weights, bf16), batch 1 and 8, every
sequence at a context of 512 and 4096 positions. Decode: the mean time of ``--steps``
greedy steps, each ending with the sampled ids read back to the host (what a generation
loop waits for), and for cutile also in replays of 8 steps whose ids stay on the device
(read back once per replay), and both with each replay queued before the host reads the
ids of the replay before (``queued``: generate's loop, the host's read overlapping the
device's next replay; the timed loop ends with the last replay's read); the graphs of one
step with the kernels launched one after another and as programmatic dependent launches
(``PDL``: each starts while the one before finishes, as generate's graphs); tokens/s
counts every sequence of the batch. The roofline: the bytes a step must read (every weight
once, and each sequence's cached keys and values) over the bandwidth of a
device-to-device copy measured in the same run. Prefill: one
``--prefill-len`` prompt, batch 1, the whole forward to the last token's logits, the
median of three runs after a warm-up.

The torch model is written here (RMSNorm, RoPE, SDPA with ``enable_gqa``; the decode
step over a static cache with a length mask, so a torch CUDA graph can replay it) and
reads the cutile model's weights and KV cache in place through DLPack. Before timing,
one decode step of each arm is checked (a mismatch stops the script): cutile's graph
replay against its eager step (exactly), torch's graph against torch eager, and cutile's
and torch's bf16 logits against the same model in float32 (the weights and the cached
keys and values as float32 copies): cutile passes when its largest difference from the
float32 logits is within 3% of their largest value or within twice torch bf16's (bf16
rounding compounds over a deep model's layers, in both). The prefill logits likewise.

    scripts/on_gpu_machine.sh python3 scripts/bench_llm.py [--models qwen3-4b ...] [--batches 1 8]
        [--contexts 512 4096] [--steps 64] [--prefill-len 2048]

``--smoke`` runs the tiny config on the CPU interpreter (cutile's graph replays against
its eager steps; no torch): what CI runs.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MODELS = ("qwen3-0.6b", "qwen3-1.7b", "qwen3-4b", "qwen3-8b")


class Checked(Exception):
    """A result differs from its reference."""


def close(what: str, got: np.ndarray[Any, Any], expected: np.ndarray[Any, Any], tolerance: float = 0.03) -> None:
    scale = float(np.abs(expected).max())
    worst = float(np.abs(got - expected).max())
    if not np.all(np.isfinite(got)) or worst > tolerance * scale:
        raise Checked(f"{what}: largest difference {worst:.4g} against a largest value {scale:.4g}")


def close_to_float32(what: str, got: np.ndarray[Any, Any], peer: np.ndarray[Any, Any],
                     exact: np.ndarray[Any, Any], tolerance: float = 0.03, *,
                     names: tuple[str, str] = ("cutile", "torch bf16")) -> None:
    """Checks ``got`` (cutile's bf16 logits) against ``exact`` (the float32 model's): within
    ``tolerance`` of exact's largest value, or within twice the difference of ``peer``
    (torch's bf16 logits) from exact; prints both differences (``names``: got's and peer's)."""
    scale = float(np.abs(exact).max())
    worst, peer_worst = float(np.abs(got - exact).max()), float(np.abs(peer - exact).max())
    print(f"  check, {what}: largest difference from the float32 model: {names[0]} {worst:.4g}, {names[1]} "
          f"{peer_worst:.4g} (largest logit {scale:.4g})")
    if not np.all(np.isfinite(got)) or worst > max(tolerance * scale, 2 * peer_worst):
        raise Checked(f"{what}: {names[0]}'s largest difference from the float32 model is {worst:.4g}, "
                      f"{names[1]}'s {peer_worst:.4g}, against a largest value {scale:.4g}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="the tiny config on the CPU interpreter (CI)")
    parser.add_argument("--models", nargs="*", default=list(MODELS), choices=MODELS)
    parser.add_argument("--batches", nargs="*", type=int, default=[1, 8])
    parser.add_argument("--contexts", nargs="*", type=int, default=[512, 4096])
    parser.add_argument("--steps", type=int, default=64, help="timed decode steps per arm")
    parser.add_argument("--prefill-len", type=int, default=2048, help="prompt tokens of the prefill timing (0: none)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.smoke:
        os.environ["CUTILE_BACKEND"] = "interpreter"

    import cutile

    if not args.smoke and cutile.backend() != "gpu":
        print("bench_llm.py needs a GPU (--smoke runs on the interpreter)", file=sys.stderr)
        return 2
    from examples.llm.generate import copy_bandwidth, decode_bytes
    from examples.llm.model import PRESETS

    if args.smoke:
        models, batches, contexts, steps, prefill_len = ["tiny"], [1, 2], [8], 8, 12
    else:
        models, batches, contexts, steps, prefill_len = args.models, args.batches, args.contexts, args.steps, \
            args.prefill_len
    bandwidth = copy_bandwidth(1 << 30 if not args.smoke else 1 << 20)
    print(f"copy bandwidth (device to device, read + written): {bandwidth / 1e9:.1f} GB/s")
    header = (f"{'model':11s} {'batch':>5s} {'context':>7s} {'arm':28s} {'ms/step':>9s} {'tokens/s':>10s} "
              f"{'of roofline':>11s}")
    print(header)
    for name in models:
        config = PRESETS[name]
        bench = ModelBench(config, args.seed, smoke=args.smoke)
        for batch in batches:
            for context in contexts:
                moved = decode_bytes(config, [context + steps // 2] * batch)
                floor_ms = 1000 * moved / bandwidth
                for arm, ms in bench.decode(batch, context, steps).items():
                    print(f"{name:11s} {batch:5d} {context:7d} {arm:28s} {ms:9.3f} {1000 * batch / ms:10.1f} "
                          f"{100 * floor_ms / ms:10.1f}%")
                print(f"{name:11s} {batch:5d} {context:7d} {'roofline':28s} {floor_ms:9.3f} "
                      f"{1000 * batch / floor_ms:10.1f} {'':>11s}")
        if prefill_len:  # (printed as measured: a run cut short keeps its rows)
            for arm, ms in bench.prefill(prefill_len).items():
                print(f"{name:11s} {'prefill ' + str(prefill_len):16s} {arm:28s} {ms:10.2f} ms "
                      f"{1000 * prefill_len / ms:10.1f} tokens/s")
        bench.release()
    print(f"results: OK ({'interpreter, wall clock: not figures' if args.smoke else 'GPU, host clock per step'})")
    return 0


class ModelBench:
    """One model's weights (cutile, random on the device) and its arms."""

    def __init__(self, config: Any, seed: int, *, smoke: bool) -> None:
        from examples.llm.model import Qwen3Model
        from examples.llm.weights import random_weights

        self.config, self.smoke = config, smoke
        self.model = Qwen3Model(config, random_weights(config, seed))
        self.rng = np.random.default_rng(seed + 1)
        self.torch: Any = None
        if not smoke:
            import torch

            self.torch = torch
            self.reference = TorchQwen3(torch, config, self.model.weights)
            self.exact = TorchQwen3(torch, config, self.model.weights, dtype=torch.float32)

    def release(self) -> None:
        self.model = None  # type: ignore[assignment]
        if self.torch is not None:
            self.reference = self.exact = None  # type: ignore[assignment]
            self.torch.cuda.empty_cache()

    def decode(self, batch: int, context: int, steps: int) -> dict[str, float]:
        """ms per decode step of each arm at ``context`` positions, the arms checked first."""
        from cutile import api

        from examples.llm.model import DecodeGraph, KVCache, PendingReplay

        c, model = self.config, self.model
        cache = KVCache.allocate(c, batch, context + 2 * steps + 8)
        prompts = [self.rng.integers(0, c.vocab_size, context).tolist() for _ in range(batch)]
        first = model.prefill(prompts, cache).to_numpy()
        ids_np = first.argmax(-1).astype(np.int64)
        ids = api.from_numpy(ids_np)
        # Check: one eager step, one replay and (on the GPU) torch's step, all at position `context`.
        eager = model.decode_step(ids, cache).to_numpy()
        cache.lengths = [context] * batch
        replay = DecodeGraph(model, cache, greedy=True, dependent_launches=False)
        replayed = replay.step(ids).to_numpy()
        close(f"batch {batch} context {context}: cutile graph replay against its eager step", replayed, eager, 1e-6)
        arms: dict[str, Callable[[], None]] = {}
        finish: dict[str, Callable[[], None]] = {}  # what an arm's timed loop ends with (queued work waited for)
        state = {"ids": ids}

        def cutile_graph() -> None:
            replay.step(state["ids"])
            state["ids"] = replay.last_ids  # greedy: the argmax stays on the device
            state["ids"].to_numpy()  # the host read of the sampled ids

        def cutile_eager() -> None:
            from examples.llm.generate import sample

            state["ids"] = sample(model.decode_step(state["ids"], cache))
            state["ids"].to_numpy()

        chunk = 8 if steps % 8 == 0 else 1
        several = DecodeGraph(model, cache, greedy=True, steps=chunk)  # (dependent launches, as generate's)
        cache.lengths = [context] * batch
        several.replay(ids)
        if several.tokens.to_numpy()[0].tolist() != eager.argmax(-1).tolist():
            raise Checked(f"batch {batch} context {context}: the {chunk}-step graph's first tokens differ from the "
                          "eager step's argmax")

        def cutile_graph_chunk() -> None:  # `chunk` steps per replay, the ids kept on the device
            several.replay(state["ids"])
            state["ids"] = several.last_ids
            several.tokens.to_numpy()

        def queued(graph: DecodeGraph) -> Callable[[], None]:
            # each replay queued before the host reads the one before's ids (generate's loop)
            before: list[PendingReplay] = []

            def run() -> None:
                pending = graph.enqueue(state["ids"])
                state["ids"] = graph.last_ids
                if before:
                    before.pop().wait()  # the host read of the replay before's ids
                before.append(pending)
            return run

        dependent = DecodeGraph(model, cache, greedy=True, dependent_launches=True)
        cache.lengths = [context] * batch
        close(f"batch {batch} context {context}: cutile graph replay of dependent launches against its eager step",
              dependent.step(ids).to_numpy(), eager, 1e-6)
        arms["cutile (CUDA graph)"] = cutile_graph
        arms["cutile (graph, queued)"] = queued(replay)
        finish["cutile (graph, queued)"] = replay.wait
        arms["cutile (graph PDL, queued)"] = queued(dependent)
        finish["cutile (graph PDL, queued)"] = dependent.wait
        if chunk > 1:
            arms[f"cutile (graph PDL x{chunk})"] = cutile_graph_chunk
            arms[f"cutile (graph PDL x{chunk}, queued)"] = queued(several)
            finish[f"cutile (graph PDL x{chunk}, queued)"] = several.wait
        arms["cutile (eager)"] = cutile_eager
        if self.torch is not None:
            torch = self.torch
            step = self.reference.decode_step(cache)
            cache.lengths = [context] * batch
            logits = step.run(torch.from_dlpack(ids), context)
            exact = self.exact.decode_step(cache).run(torch.from_dlpack(ids), context).cpu().numpy()
            torch_eager = logits.float().cpu().numpy()
            close_to_float32(f"batch {batch} context {context}, decode step", eager, torch_eager, exact)
            graphed = step.graphed(context)
            # torch's graph against the float32 model as its eager step is (its kernels may
            # differ from eager's under capture, so bf16 rounding differs too)
            close_to_float32(f"batch {batch} context {context}, torch CUDA graph",
                             graphed.run(torch.from_dlpack(ids), context).float().cpu().numpy(), torch_eager, exact,
                             names=("torch graph", "torch eager"))
            torch_state = {"ids": torch.from_dlpack(ids), "position": context}

            def torch_arm(runner: Any) -> Callable[[], None]:
                def run() -> None:
                    out = runner.run(torch_state["ids"], torch_state["position"])
                    torch_state["ids"] = out.argmax(-1)
                    torch_state["ids"].cpu()  # the host read of the sampled ids
                    torch_state["position"] += 1
                return run

            arms["torch eager"] = torch_arm(step)
            arms["torch (CUDA graph)"] = torch_arm(graphed)
        results: dict[str, float] = {}
        for arm, run in arms.items():
            calls = steps // chunk if f" x{chunk}" in arm else steps
            cache.lengths = [context] * batch
            state["ids"] = ids
            if self.torch is not None:
                torch_state["ids"], torch_state["position"] = self.torch.from_dlpack(ids), context
            end = finish.get(arm, lambda: None)
            for _ in range(2):  # warm-up (the cache positions are rewritten by the timed steps)
                run()
            end()
            cache.lengths = [context] * batch
            if self.torch is not None:
                torch_state["position"] = context
            started = time.perf_counter()
            for _ in range(calls):
                run()
            end()
            results[arm] = 1000 * (time.perf_counter() - started) / steps
        replay.close()
        dependent.close()
        several.close()
        return results

    def prefill(self, length: int) -> dict[str, float]:
        """ms of a prefill of one ``length``-token prompt (median of 3 after a warm-up), checked."""
        from examples.llm.model import KVCache

        c, model = self.config, self.model
        prompt = self.rng.integers(0, c.vocab_size, length).tolist()
        cache = KVCache.allocate(c, 1, length)
        logits = model.prefill([prompt], cache).to_numpy()

        def cutile_prefill() -> None:
            model.prefill([prompt], cache).to_numpy()  # (the read waits for the device)

        arms: dict[str, Callable[[], None]] = {"cutile": cutile_prefill}
        if self.torch is not None:
            ids = self.torch.tensor(prompt, device="cuda")
            expected = self.reference.prefill(ids).cpu().numpy()
            close_to_float32(f"prefill of {length}", logits[0], expected[0], self.exact.prefill(ids).cpu().numpy()[0])

            def torch_prefill() -> None:
                self.reference.prefill(ids).cpu()

            arms["torch (SDPA)"] = torch_prefill
        results = {}
        for arm, run in arms.items():
            run()
            times = []
            for _ in range(3):
                started = time.perf_counter()
                run()
                times.append(1000 * (time.perf_counter() - started))
            results[arm] = float(np.median(times))
        return results


class TorchQwen3:
    """The same Qwen3 in torch, on the cutile weights' memory (DLPack); with ``dtype``,
    on copies of them in that dtype (float32: the reference the bf16 arms are checked
    against)."""

    def __init__(self, torch: Any, config: Any, weights: Any, dtype: Any = None) -> None:
        self.torch, self.c, self.dtype = torch, config, dtype
        t = self.own
        self.embed, self.norm, self.head = t(weights.embed_tokens), t(weights.norm), t(weights.lm_head)
        self.layers = [{name: t(tensor) for name, tensor in vars(layer).items() if tensor is not None}
                       for layer in weights.layers]
        dim = config.head_dim
        self.inv_freq = config.rope_theta ** (-torch.arange(0, dim, 2, device="cuda", dtype=torch.float32) / dim)

    def own(self, tensor: Any) -> Any:
        """A cutile tensor as this model reads it: its memory (DLPack), or a copy in the model's dtype."""
        shared = self.torch.from_dlpack(tensor)
        return shared if self.dtype is None else shared.to(self.dtype)

    def rms(self, x: Any, w: Any) -> Any:
        x32 = x.float()
        return (x32 * self.torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.c.rms_norm_eps) * w.float()).to(x.dtype)

    def rope(self, x: Any, positions: Any) -> Any:
        """x (tokens, heads, dim) at positions (tokens,)."""
        torch = self.torch
        angles = positions.float()[:, None] * self.inv_freq
        cos, sin = torch.cat([angles.cos()] * 2, -1)[:, None], torch.cat([angles.sin()] * 2, -1)[:, None]
        half = x.shape[-1] // 2
        rotated = torch.cat([-x[..., half:], x[..., :half]], -1)
        return (x.float() * cos + rotated.float() * sin).to(x.dtype)

    def qkv(self, layer: dict[str, Any], x: Any, positions: Any) -> tuple[Any, Any, Any]:
        c, n = self.c, x.shape[0]
        if "qkv_proj" in layer:  # the stacked weight, as the cutile model reads it: one GEMM
            q, k, v = (x @ layer["qkv_proj"].T).split([c.q_size, c.kv_size, c.kv_size], dim=-1)
        else:
            q, k, v = x @ layer["q_proj"].T, x @ layer["k_proj"].T, x @ layer["v_proj"].T
        q = q.reshape(n, c.num_attention_heads, c.head_dim)
        k = k.reshape(n, c.num_key_value_heads, c.head_dim)
        v = v.reshape(n, c.num_key_value_heads, c.head_dim)
        return self.rope(self.rms(q, layer["q_norm"]), positions), self.rope(self.rms(k, layer["k_norm"]), positions), v

    def mlp_and_residuals(self, layer: dict[str, Any], hidden: Any, attended: Any) -> Any:
        F = self.torch.nn.functional
        hidden = hidden + attended @ layer["o_proj"].T
        x = self.rms(hidden, layer["post_attention_layernorm"])
        if "gate_up_proj" in layer:  # the stacked weight, as the cutile model reads it: one GEMM
            gate, up = (x @ layer["gate_up_proj"].T).chunk(2, dim=-1)
        else:
            gate, up = x @ layer["gate_proj"].T, x @ layer["up_proj"].T
        return hidden + (F.silu(gate) * up) @ layer["down_proj"].T

    def prefill(self, ids: Any) -> Any:
        """The last token's logits (f32, (vocab,)) of one prompt."""
        torch, c = self.torch, self.c
        sdpa = torch.nn.functional.scaled_dot_product_attention
        n = ids.shape[0]
        positions = torch.arange(n, device="cuda")
        hidden = self.embed[ids]
        for layer in self.layers:
            q, k, v = self.qkv(layer, self.rms(hidden, layer["input_layernorm"]), positions)
            attended = sdpa(q.transpose(0, 1)[None], k.transpose(0, 1)[None], v.transpose(0, 1)[None], is_causal=True,
                            enable_gqa=True)[0]
            hidden = self.mlp_and_residuals(layer, hidden, attended.transpose(0, 1).reshape(n, c.q_size))
        return self.rms(hidden[-1:], self.norm).float() @ self.head.float().T

    def decode_step(self, cache: Any) -> TorchDecode:
        return TorchDecode(self, cache)


class TorchDecode:
    """torch's decode step over the cutile cache's memory (every sequence at one
    position): eager, or `graphed()` into a torch CUDA graph with static inputs."""

    def __init__(self, model: TorchQwen3, cache: Any) -> None:
        torch = model.torch
        self.model, self.torch = model, torch
        self.keys = [model.own(k) for k in cache.keys]  # (batch, max_seq, kv_heads, dim)
        self.values = [model.own(v) for v in cache.values]
        self.batch, self.max_seq = int(cache.batch), int(cache.max_seq)
        self.slots = torch.arange(self.max_seq, device="cuda")

    def forward(self, ids: Any, position: Any) -> Any:
        """Logits (batch, vocab) f32; ``position`` a 1-element i64 device tensor."""
        torch, m, c = self.torch, self.model, self.model.c
        sdpa = torch.nn.functional.scaled_dot_product_attention
        batch = self.batch
        positions = position.expand(batch)
        mask = (self.slots <= position)[None, None, None, :]
        hidden = m.embed[ids]
        rows = torch.arange(batch, device="cuda")
        for layer, keys, values in zip(m.layers, self.keys, self.values):
            q, k, v = m.qkv(layer, m.rms(hidden, layer["input_layernorm"]), positions)
            keys.index_put_((rows, positions), k)
            values.index_put_((rows, positions), v)
            attended = sdpa(q[:, :, None], keys.transpose(1, 2), values.transpose(1, 2), attn_mask=mask,
                            enable_gqa=True)
            hidden = m.mlp_and_residuals(layer, hidden, attended.reshape(batch, c.q_size))
        return m.rms(hidden, m.norm).float() @ m.head.float().T

    def run(self, ids: Any, position: int) -> Any:
        return self.forward(ids, self.torch.tensor([position], device="cuda"))

    def graphed(self, position: int) -> Any:
        """The step captured in a torch CUDA graph; its warm-up and capture write the
        cache at ``position`` (which the next step there rewrites)."""
        return _TorchGraph(self, position)


class _TorchGraph:
    def __init__(self, step: TorchDecode, position: int) -> None:
        torch = step.torch
        self.torch = torch
        self.ids = torch.zeros(step.batch, dtype=torch.int64, device="cuda")
        self.position = torch.full((1,), position, dtype=torch.int64, device="cuda")
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(2):  # warm-up off the default stream, as torch's graph docs say
                step.forward(self.ids, self.position)
        torch.cuda.current_stream().wait_stream(stream)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.out = step.forward(self.ids, self.position)

    def run(self, ids: Any, position: int) -> Any:
        self.ids.copy_(ids)
        self.position.fill_(position)
        self.graph.replay()
        return self.out


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Checked as exc:
        print(f"results: WRONG: {exc}", file=sys.stderr)
        sys.exit(1)
