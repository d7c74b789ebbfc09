"""Generation with the Qwen3 model: prefill, then one decode step per new token, greedy
or sampled; and the command line that times it against the HBM roofline.

Run: ``python -m examples.llm.generate --random-weights --config qwen3-4b --prompt-len 512
--new-tokens 256`` on a GPU, ``python -m examples.llm.generate --tiny`` anywhere (the
interpreter runs the 2-layer config), ``--checkpoint DIR`` for a Hugging Face checkpoint.

The roofline: a decode step must read every weight and each sequence's cached keys and
values once, so its time is at least those bytes over the HBM bandwidth, taken here as
that of a device-to-device copy measured in the same run.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

import cutile
import cutile_kernels as ck
from cutile import api, bench
from cutile.core import u32

from .model import PRESETS, DecodeGraph, KVCache, ModelError, PendingReplay, Qwen3Config, Qwen3Model
from .weights import load_checkpoint, random_weights


#: the largest k `cutile_kernels.top_k` takes
TOP_K_ON_DEVICE = 64


def sample(logits: cutile.Tensor, *, temperature: float = 0.0, top_k: int | None = None,
           rng: np.random.Generator | None = None) -> cutile.Tensor:
    """The next token of each row of f32 ``logits`` ``(batch, vocab)``, an i64 ``(batch,)``
    device tensor: the argmax on the device when ``temperature`` is 0 (greedy), else a
    draw from ``softmax(logits / temperature)``, restricted to the ``top_k`` largest
    logits when given. With ``top_k`` up to `cutile_kernels.top_k`'s limit the k largest
    are found on the device and only they are read back; otherwise the whole rows are.
    The draw itself is on the host."""
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not temperature >= 0:
        raise ModelError(f"sample(): parameter 'temperature' must be a number >= 0, got {temperature!r}")
    vocab = int(logits.shape[-1])
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= vocab):
        raise ModelError(f"sample(): parameter 'top_k' must be an int from 1 to the vocabulary's {vocab}, "
                         f"got {top_k!r}")
    if temperature == 0 or top_k == 1:
        greedy: cutile.Tensor = ck.argmax(logits)
        return greedy
    generator = rng if rng is not None else np.random.default_rng()
    if top_k is not None and top_k <= TOP_K_ON_DEVICE:
        values, indices = ck.top_k(logits, top_k)
        chosen_among = _draw(values.to_numpy().astype(np.float64) / temperature, generator)
        picked = np.take_along_axis(indices.to_numpy(), chosen_among[:, None], axis=-1)[:, 0]
        return api.from_numpy(picked.astype(np.int64))
    scaled = logits.to_numpy().astype(np.float64) / temperature
    if top_k is not None and top_k < vocab:
        kth = np.partition(scaled, vocab - top_k, axis=-1)[:, vocab - top_k:vocab - top_k + 1]
        scaled = np.where(scaled >= kth, scaled, -np.inf)
    return api.from_numpy(_draw(scaled, generator).astype(np.int64))


def _draw(scaled: np.ndarray, generator: np.random.Generator) -> np.ndarray:
    """Each row's draw from ``softmax(scaled)`` (a column index; -inf columns never)."""
    probabilities = np.exp(scaled - scaled.max(axis=-1, keepdims=True))
    probabilities /= probabilities.sum(axis=-1, keepdims=True)
    draws = generator.random((probabilities.shape[0], 1))
    chosen = (np.cumsum(probabilities, axis=-1) < draws).sum(axis=-1)
    return np.asarray(np.minimum(chosen, scaled.shape[-1] - 1))


class Tokenizer(Protocol):
    """What generation asks of a tokenizer (the ``tokenizers`` package's `Tokenizer`)."""

    def encode(self, text: str) -> Any: ...

    def decode(self, ids: list[int]) -> str: ...


def load_tokenizer(path: str | Path) -> Tokenizer:
    """A Hugging Face ``tokenizer.json``, through the ``tokenizers`` package (imported
    only here: without a tokenizer, prompts and outputs are token ids)."""
    if not Path(path).is_file():
        raise ModelError(f"--tokenizer: no file {path}")
    try:  # (imported by name: it is optional, so type checking does not ask for it)
        tokenizers = importlib.import_module("tokenizers")
    except ImportError:
        raise ModelError("--tokenizer needs the 'tokenizers' package (pip install tokenizers); without it, give "
                         "token ids (--prompt-ids)") from None
    try:
        loaded: Tokenizer = tokenizers.Tokenizer.from_file(str(path))
    except Exception as error:  # the Rust library raises its own exception type
        raise ModelError(f"--tokenizer: cannot read {path}: {error}") from None
    return loaded


@dataclass
class Generation:
    """The new tokens of each sequence and the time spent (host clock, the device
    work finished: each step reads its sampled ids back)."""

    tokens: list[list[int]]
    prefill_s: float
    decode_s: float
    steps: int
    first_logits: np.ndarray[Any, Any] = field(repr=False)  # f32 (batch, vocab): the prefill's

    @property
    def ms_per_step(self) -> float:
        return 1000 * self.decode_s / max(self.steps, 1)


def generate(model: Qwen3Model, prompts: Sequence[Sequence[int]], new_tokens: int, *, temperature: float = 0.0,
             top_k: int | None = None, seed: int = 0, max_seq: int | None = None, graph: bool = True,
             sync_every: int = 1, on_step: Callable[[int], None] | None = None,
             dependent_launches: bool = True) -> Generation:
    """Prefill of ``prompts`` (batch 1 or more, each its own length), then ``new_tokens``
    tokens per sequence: the first from the prefill's logits, then one decode step each,
    by replays of a `DecodeGraph` (``graph``; greedy decoding keeps the ids on the
    device and reads them back every ``sync_every`` steps, one replay of that many,
    queued before the host reads the replay before's), else by eager
    `Qwen3Model.decode_step` calls; ``dependent_launches``: the graph's kernels are
    programmatic dependent launches (`DecodeGraph`). The decode time counts every step,
    the graph's capture excluded."""
    if isinstance(new_tokens, bool) or not isinstance(new_tokens, int) or new_tokens < 1:
        raise ModelError(f"generate(): parameter 'new_tokens' must be an int >= 1, got {new_tokens!r}")
    if isinstance(sync_every, bool) or not isinstance(sync_every, int) or sync_every < 1:
        raise ModelError(f"generate(): parameter 'sync_every' must be an int >= 1, got {sync_every!r}")
    if not prompts:
        raise ModelError("generate(): parameter 'prompts' holds no prompt")
    greedy = temperature == 0 or top_k == 1
    if sync_every > 1 and not (graph and greedy):
        raise ModelError(f"generate(): sync_every={sync_every} keeps the ids on the device, which needs greedy "
                         "decoding (temperature 0) by graph replays")
    longest = max(len(p) for p in prompts)
    steps = new_tokens - 1  # the last new token is sampled, never fed back
    per_replay = min(sync_every, max(steps, 1))
    need = longest + -(-steps // per_replay) * per_replay  # (a last replay may run past the steps asked)
    size = need if max_seq is None else max_seq
    if size < need or size > model.config.max_position_embeddings:
        raise ModelError(f"generate(): {longest} prompt tokens and {new_tokens} new need a cache of {need} "
                         f"positions (max_seq {size}, the model's max_position_embeddings "
                         f"{model.config.max_position_embeddings})")
    rng = np.random.default_rng(seed)
    cache = KVCache.allocate(model.config, len(prompts), size)
    started = time.perf_counter()
    logits = model.prefill(prompts, cache)
    first_logits = logits.to_numpy()  # waits for the prefill
    ids = sample(logits, temperature=temperature, top_k=top_k, rng=rng)
    tokens = [[int(t)] for t in ids.to_numpy()]
    prefilled = time.perf_counter()
    replay = (DecodeGraph(model, cache, greedy=greedy, steps=per_replay, dependent_launches=dependent_launches)
              if graph and steps else None)
    captured = time.perf_counter()
    done_steps = 0

    def take(block: np.ndarray[Any, Any]) -> None:
        nonlocal done_steps
        block = block[:steps - done_steps]  # (a last replay may run past the steps asked)
        for row, column in zip(tokens, block.T):
            row.extend(int(t) for t in column)
        done_steps += len(block)
        if on_step is not None:
            on_step(done_steps)

    if replay is not None and greedy:
        # Each replay is queued before the host reads the one before's ids (the one read
        # per replay): the device runs replay r + 1 while the host reads replay r's.
        queued: PendingReplay | None = None
        try:
            for _ in range(-(-steps // per_replay)):
                pending = replay.enqueue(ids)
                ids = replay.last_ids
                if queued is not None:
                    take(queued.wait())
                queued = pending
            if queued is not None:
                take(queued.wait())
        except BaseException:
            with contextlib.suppress(Exception):  # (the first error is the one to see)
                replay.wait()  # nothing stays queued: the step buffers are the model's
            raise
    while done_steps < steps:
        if replay is not None:
            ids = sample(replay.replay(ids), temperature=temperature, top_k=top_k, rng=rng)
        else:
            ids = sample(model.decode_step(ids, cache), temperature=temperature, top_k=top_k, rng=rng)
        take(ids.to_numpy()[None])  # the one read per step: the sampled ids
    done = time.perf_counter()
    return Generation(tokens, prefilled - started, done - captured, steps, first_logits)


def copy_bandwidth(nbytes: int = 1 << 30) -> float:
    """Bytes per second of a device-to-device copy of ``nbytes`` (read plus written),
    the median of `cutile.bench.do_bench`: cutile's copy of 32-bit words and, on the
    GPU, the driver's memcpy, whichever is faster (the roofline is the device's, not
    one kernel's)."""
    words = max(nbytes // 8, 1)
    source = api.zeros((words,), u32)
    best_ms = bench.do_bench(lambda: api.copy(source), warmup=3, reps=20).median_ms
    if cutile.backend() == "gpu":
        import cuda_core

        stream = cuda_core.Stream.create()  # (the current device, where api.zeros allocated)
        with cuda_core.DeviceBuffer.allocate(4 * words, stream=stream) as src, \
                cuda_core.DeviceBuffer.allocate(4 * words, stream=stream) as dst:
            src.memset(0, width=4, stream=stream)
            driver = bench.do_bench(lambda: dst.copy_from(src, stream=stream), stream=stream, warmup=3, reps=20)
        best_ms = min(best_ms, driver.median_ms)
    return 2 * 4 * words / (best_ms / 1000)


def decode_bytes(config: Qwen3Config, lengths: Sequence[int]) -> int:
    """Bytes a decode step reads at least: every weight once (the tied embedding once,
    as the LM head; the embedding rows gathered are few) and each sequence's cache."""
    return config.weight_bytes() + sum(config.kv_bytes(n) for n in lengths)


def _progress(total: int) -> Callable[[int], None]:
    width = 30

    def show(done: int) -> None:
        filled = width * done // max(total, 1)
        print(f"\rdecode [{'#' * filled}{'.' * (width - filled)}] {done}/{total}", end="", file=sys.stderr,
              flush=True)
        if done == total:
            print(file=sys.stderr)

    return show


def _size(nbytes: float) -> str:
    return f"{nbytes / 1e9:.3f} GB" if nbytes >= 1e8 else f"{nbytes / 1e6:.3f} MB"


def _parse_lengths(text: str) -> list[int]:
    try:
        lengths = [int(part) for part in text.split(",")]
    except ValueError:
        raise ModelError(f"--prompt-lens: expected comma-separated ints, got {text!r}") from None
    if not lengths or min(lengths) < 1:
        raise ModelError(f"--prompt-lens: every length must be at least 1, got {text!r}")
    return lengths


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m examples.llm.generate", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--random-weights", action="store_true", help="random weights of --config's shapes")
    source.add_argument("--checkpoint", metavar="DIR", help="a Hugging Face checkpoint (config.json, *.safetensors)")
    source.add_argument("--tiny", action="store_true", help="random weights of the 2-layer config (the interpreter)")
    parser.add_argument("--config", choices=sorted(PRESETS), help="the shapes of --random-weights")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random weights, prompts and sampling")
    parser.add_argument("--batch", type=int, default=1, help="sequences, each of --prompt-len tokens")
    parser.add_argument("--prompt-len", type=int, default=None, help="tokens per prompt (random ids)")
    parser.add_argument("--prompt-lens", type=_parse_lengths, default=None,
                        help="comma-separated lengths, one sequence each (overrides --batch / --prompt-len)")
    parser.add_argument("--prompt-ids", default=None, help="one prompt's comma-separated token ids")
    parser.add_argument("--tokenizer", metavar="JSON", default=None,
                        help="a tokenizer.json (the 'tokenizers' package): --prompt is text, outputs are decoded")
    parser.add_argument("--prompt", default=None, help="one prompt's text (with --tokenizer)")
    parser.add_argument("--new-tokens", type=int, default=None, help="tokens to generate per sequence")
    parser.add_argument("--temperature", type=float, default=0.0, help="0: greedy (default)")
    parser.add_argument("--top-k", type=int, default=None, help="sample among the k largest logits")
    parser.add_argument("--eager", action="store_true", help="decode by eager launches, not CUDA graph replays")
    parser.add_argument("--no-dependent-launches", action="store_true",
                        help="replay the decode graph's kernels one after another, not as programmatic dependent "
                             "launches")
    parser.add_argument("--sync-every", type=int, default=1, metavar="N",
                        help="greedy: keep the ids on the device, one graph of N steps per host read")
    parser.add_argument("--no-roofline", action="store_true", help="skip the copy-bandwidth measurement")
    parser.add_argument("--progress", action="store_true", help="a progress bar on stderr")
    parser.add_argument("--no-warmup", action="store_true",
                        help="time the first run (with its kernel compiles and loads) instead of a second one")
    args = parser.parse_args(argv)
    try:
        return _run(args)
    except ModelError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    if args.tiny:
        args.config = args.config or "tiny"
    if args.checkpoint is not None:
        if args.config is not None:
            raise ModelError("--config gives random weights' shapes; a --checkpoint has its own config.json")
        config, weights = load_checkpoint(args.checkpoint)
        name = args.checkpoint
    else:
        if args.config is None:
            raise ModelError("--random-weights needs --config (one of " + ", ".join(sorted(PRESETS)) + ")")
        config, name = PRESETS[args.config], args.config
        weights = random_weights(config, args.seed)
    small = config.num_hidden_layers <= 2
    new_tokens = args.new_tokens if args.new_tokens is not None else (8 if small else 128)
    rng = np.random.default_rng(args.seed + 1)
    tokenizer = load_tokenizer(args.tokenizer) if args.tokenizer is not None else None
    if args.prompt is not None and tokenizer is None:
        raise ModelError("--prompt is text: it needs --tokenizer (else give --prompt-ids)")
    if args.prompt is not None and args.prompt_ids is not None:
        raise ModelError("give --prompt or --prompt-ids, not both")
    if args.prompt is not None:
        assert tokenizer is not None
        prompts = [list(tokenizer.encode(args.prompt).ids)]
        if not prompts[0]:
            raise ModelError(f"--prompt: {args.prompt!r} encodes to no token")
    elif args.prompt_ids is not None:
        try:
            prompts = [[int(t) for t in args.prompt_ids.split(",")]]
        except ValueError:
            raise ModelError(f"--prompt-ids: expected comma-separated ints, got {args.prompt_ids!r}") from None
    else:
        lengths = args.prompt_lens or [args.prompt_len or (16 if small else 512)] * args.batch
        prompts = [rng.integers(0, config.vocab_size, n).tolist() for n in lengths]
    model = Qwen3Model(config, weights)
    on_step = _progress(new_tokens - 1) if args.progress else None
    max_seq = max(len(p) for p in prompts) + new_tokens - 1
    if not args.no_warmup:  # compiles and loads the prefill's kernels (the decode's load before its capture)
        generate(model, prompts, 1, max_seq=max_seq)
    if args.sync_every > 1:  # a last replay may run past the tokens asked
        max_seq = max(len(p) for p in prompts) + -(-(new_tokens - 1) // args.sync_every) * args.sync_every
    result = generate(model, prompts, new_tokens, temperature=args.temperature, top_k=args.top_k, seed=args.seed,
                      max_seq=max_seq, graph=not args.eager, sync_every=args.sync_every, on_step=on_step,
                      dependent_launches=not args.no_dependent_launches)
    batch = len(prompts)
    prompt_tokens = sum(len(p) for p in prompts)
    print(f"model: {name} ({config.num_hidden_layers} layers, hidden {config.hidden_size}, "
          f"{_size(config.weight_bytes())} of bf16 weights) on the {cutile.backend()} backend")
    print(f"batch {batch}, prompt lengths {[len(p) for p in prompts]}, {new_tokens} new tokens per sequence, "
          f"decode {'eager' if args.eager else 'by CUDA graph replays'}"
          f"{'' if args.eager or args.no_dependent_launches else ' of dependent launches'}"
          f"{f', {args.sync_every} steps per replay' if args.sync_every > 1 else ''}")
    print(f"prefill: {1000 * result.prefill_s:.2f} ms ({prompt_tokens / result.prefill_s:.1f} tokens/s)")
    if result.steps:
        step_s = result.decode_s / result.steps
        print(f"decode: {batch / step_s:.1f} tokens/s, {1000 * step_s:.3f} ms/token "
              f"(per step of {batch} sequence{'s' * (batch > 1)})")
        if not args.no_roofline:
            bandwidth = copy_bandwidth(1 << 30 if cutile.backend() == "gpu" else 1 << 22)
            # the mean cache length read by a step: the prompt, plus half the new tokens
            lengths = [len(p) + 1 + result.steps / 2 for p in prompts]
            moved = decode_bytes(config, [round(n) for n in lengths])
            floor_s = moved / bandwidth
            print(f"roofline: {_size(moved)} read per step over the copy's {bandwidth / 1e9:.1f} GB/s = "
                  f"{1000 * floor_s:.3f} ms; decode at {100 * floor_s / step_s:.1f}% of it")
    for row, tokens in enumerate(result.tokens[:4]):
        shown = " ".join(str(t) for t in tokens[:16]) + (" ..." if len(tokens) > 16 else "")
        print(f"sequence {row}: {shown}")
        if tokenizer is not None:
            print(f"sequence {row} text: {tokenizer.decode(tokens)!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
