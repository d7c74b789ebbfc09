"""examples/llm, the Qwen3 engine on cutile_kernels: its tiny config against a float64
numpy reference of the same architecture written here (logits of prefill and decode,
greedy tokens for 16 steps, ragged batches), checkpoints written and read back, the
sampler, the command line; and on the GPU the 0.6B shapes against a torch model
written here with the same weights."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import cutile
from cutile import api

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from examples.llm.generate import generate, sample  # noqa: E402
from examples.llm.model import (  # noqa: E402
    PRESETS, DecodeGraph, KVCache, ModelError, Qwen3Config, Qwen3Model, Qwen3Weights,
)
from examples.llm.weights import (  # noqa: E402
    from_arrays, load_checkpoint, random_arrays, random_weights, save_checkpoint,
)

needs_safetensors = pytest.mark.skipif(
    __import__("importlib").util.find_spec("safetensors") is None,
    reason="the 'safetensors' package is not installed (the workspace's 'examples' dependency group)")

# The tiny config, untied so that greedy decoding does not just repeat the prompt's last token.
TINY = replace(PRESETS["tiny"], tie_word_embeddings=False)


def tiny_arrays(config: Qwen3Config = TINY, seed: int = 7) -> dict[str, np.ndarray[Any, Any]]:
    arrays = random_arrays(config, seed)
    rng = np.random.default_rng(seed + 1)
    # Logits of a few units (not hundredths) leave the greedy choice clear of bf16 rounding.
    head = "model.embed_tokens.weight" if config.tie_word_embeddings else "lm_head.weight"
    arrays[head] = rng.standard_normal(arrays[head].shape).astype(ml_dtypes.bfloat16)
    for name, a in arrays.items():
        if name.endswith(("q_proj.weight", "k_proj.weight")):  # sharper attention than uniform
            arrays[name] = (rng.standard_normal(a.shape) * 0.2).astype(ml_dtypes.bfloat16)
    return arrays


def device_weights(config: Qwen3Config, arrays: dict[str, np.ndarray[Any, Any]], stacked: bool = True) -> Qwen3Weights:
    """The arrays on the device: each layer's projections stacked (q, k, v and gate, up:
    one GEMM each) as the loaders make them, or each tensor on its own."""
    if stacked:
        return from_arrays(config, arrays)
    return Qwen3Weights.from_named(config, {name: api.from_numpy(a) for name, a in arrays.items()})


# -- the float64 reference ---------------------------------------------------------------


class Reference:
    """Qwen3 in float64 numpy, recomputing the whole sequence per call (no cache)."""

    def __init__(self, config: Qwen3Config, arrays: dict[str, np.ndarray[Any, Any]]) -> None:
        self.c = config
        self.w = {name: a.astype(np.float64) for name, a in arrays.items()}

    def norm(self, x: np.ndarray[Any, Any], weight: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + self.c.rms_norm_eps) * weight

    def rope(self, x: np.ndarray[Any, Any], positions: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        half = self.c.head_dim // 2
        freqs = self.c.rope_theta ** (-np.arange(half) * 2.0 / self.c.head_dim)
        angles = positions[:, None, None] * freqs  # (tokens, 1, half)
        x1, x2 = x[..., :half], x[..., half:]
        return np.concatenate([x1 * np.cos(angles) - x2 * np.sin(angles),
                               x2 * np.cos(angles) + x1 * np.sin(angles)], axis=-1)

    def logits(self, ids: list[int]) -> np.ndarray[Any, Any]:
        """The logits of every position of one sequence, (tokens, vocab)."""
        c, w = self.c, self.w
        n, heads, kv, dim = len(ids), c.num_attention_heads, c.num_key_value_heads, c.head_dim
        positions = np.arange(n, dtype=np.float64)
        hidden = w["model.embed_tokens.weight"][ids]
        for layer in range(c.num_hidden_layers):
            p = f"model.layers.{layer}."
            x = self.norm(hidden, w[p + "input_layernorm.weight"])
            q = (x @ w[p + "self_attn.q_proj.weight"].T).reshape(n, heads, dim)
            k = (x @ w[p + "self_attn.k_proj.weight"].T).reshape(n, kv, dim)
            v = (x @ w[p + "self_attn.v_proj.weight"].T).reshape(n, kv, dim)
            q = self.rope(self.norm(q, w[p + "self_attn.q_norm.weight"]), positions)
            k = self.rope(self.norm(k, w[p + "self_attn.k_norm.weight"]), positions)
            group = heads // kv
            k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
            scores = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(dim)
            scores = np.where(np.tril(np.ones((n, n), bool)), scores, -np.inf)
            probs = np.exp(scores - scores.max(-1, keepdims=True))
            probs /= probs.sum(-1, keepdims=True)
            attended = np.einsum("hqk,khd->qhd", probs, v).reshape(n, heads * dim)
            hidden = hidden + attended @ w[p + "self_attn.o_proj.weight"].T
            x = self.norm(hidden, w[p + "post_attention_layernorm.weight"])
            gate, up = x @ w[p + "mlp.gate_proj.weight"].T, x @ w[p + "mlp.up_proj.weight"].T
            hidden = hidden + (gate / (1 + np.exp(-gate)) * up) @ w[p + "mlp.down_proj.weight"].T
        head = w["model.embed_tokens.weight" if c.tie_word_embeddings else "lm_head.weight"]
        result: np.ndarray[Any, Any] = self.norm(hidden, w["model.norm.weight"]) @ head.T
        return result

    def greedy(self, prompt: list[int], steps: int) -> list[int]:
        ids = list(prompt)
        for _ in range(steps):
            ids.append(int(np.argmax(self.logits(ids)[-1])))
        return ids[len(prompt):]


def assert_logits_close(got: np.ndarray[Any, Any], expected: np.ndarray[Any, Any]) -> None:
    # bf16 activations between kernels: about 3 significant digits per rounding.
    scale = np.abs(expected).max()
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got, expected, rtol=0, atol=0.02 * scale)
    assert np.corrcoef(got.ravel(), expected.ravel())[0, 1] > 0.999


# -- the model against the reference --------------------------------------------------------


def test_tiny_head_dim_is_one_the_attention_kernels_take() -> None:
    assert PRESETS["tiny"].head_dim in (64, 128)
    with pytest.raises(ModelError, match="head_dim"):
        replace(TINY, head_dim=32)


@pytest.mark.parametrize("stacked", [True, False], ids=["stacked", "separate"])
def test_tiny_prefill_and_decode_logits_match_the_float64_reference(stacked: bool) -> None:
    arrays = tiny_arrays()
    weights = device_weights(TINY, arrays, stacked)
    assert (weights.layers[0].qkv_proj is not None) == stacked
    model, reference = Qwen3Model(TINY, weights), Reference(TINY, arrays)
    prompt = np.random.default_rng(3).integers(0, TINY.vocab_size, 13).tolist()
    cache = KVCache.allocate(TINY, 1, 24)
    logits = model.prefill([prompt], cache)
    expected = reference.logits(prompt)
    assert_logits_close(logits.to_numpy()[0], expected[-1])
    # Decode steps fed the reference's own choices: each step's logits against a full recompute.
    ids = list(prompt)
    for _ in range(3):
        ids.append(int(np.argmax(reference.logits(ids)[-1])))
        step = model.decode_step(api.from_numpy(np.array([ids[-1]], np.int64)), cache)
        assert_logits_close(step.to_numpy()[0], reference.logits(ids)[-1])
    assert cache.lengths == [len(ids)]


@pytest.mark.parametrize("graph", [True, False], ids=["graph", "eager"])
def test_tiny_greedy_tokens_match_the_reference_for_16_steps(graph: bool) -> None:
    arrays = tiny_arrays()
    model, reference = Qwen3Model(TINY, device_weights(TINY, arrays)), Reference(TINY, arrays)
    prompt = np.random.default_rng(5).integers(0, TINY.vocab_size, 9).tolist()
    result = generate(model, [prompt], 16, graph=graph)
    expected = reference.greedy(prompt, 16)
    assert result.tokens == [expected]
    assert len(set(expected)) > 2  # the test means something: the tokens change
    assert result.steps == 15


@pytest.mark.parametrize("graph", [True, False], ids=["graph", "eager"])
def test_a_ragged_batch_matches_each_sequence_run_alone(graph: bool) -> None:
    arrays = tiny_arrays()
    model, reference = Qwen3Model(TINY, device_weights(TINY, arrays)), Reference(TINY, arrays)
    rng = np.random.default_rng(11)
    prompts = [rng.integers(0, TINY.vocab_size, n).tolist() for n in (5, 12, 1)]
    result = generate(model, prompts, 5, graph=graph)
    for b, prompt in enumerate(prompts):
        assert_logits_close(result.first_logits[b], reference.logits(prompt)[-1])
        assert result.tokens[b] == reference.greedy(prompt, 5), f"sequence {b}"


def test_prefills_of_the_same_lengths_reuse_their_buffers_and_every_prefill_matches() -> None:
    """The model keeps a prefill's intermediates for its prompt lengths: a prefill of other
    tokens of those lengths works in them again, one of other lengths in new ones; each
    call's logits are its own (not overwritten by the next prefill)."""
    arrays = tiny_arrays()
    model, reference = Qwen3Model(TINY, device_weights(TINY, arrays)), Reference(TINY, arrays)
    rng = np.random.default_rng(17)
    first, second = (rng.integers(0, TINY.vocab_size, 7).tolist() for _ in range(2))
    first_logits = model.prefill([first], KVCache.allocate(TINY, 1, 16))
    kept = model.prefill_buffers([7])
    second_logits = model.prefill([second], KVCache.allocate(TINY, 1, 16))
    assert model.prefill_buffers([7]) is kept
    assert_logits_close(first_logits.to_numpy()[0], reference.logits(first)[-1])
    assert_logits_close(second_logits.to_numpy()[0], reference.logits(second)[-1])
    ragged = [rng.integers(0, TINY.vocab_size, n).tolist() for n in (5, 9)]
    logits = model.prefill(ragged, KVCache.allocate(TINY, 2, 16)).to_numpy()
    assert model.prefill_buffers([5, 9]) is not kept
    for b, prompt in enumerate(ragged):
        assert_logits_close(logits[b], reference.logits(prompt)[-1])
    again = model.prefill([second], KVCache.allocate(TINY, 1, 16))
    assert_logits_close(again.to_numpy()[0], reference.logits(second)[-1])
    kept = model.prefill_buffers([7])
    model.release_prefill_buffers()  # freed: the next prefill makes new ones, and is right
    assert model.prefill_buffers([7]) is not kept
    assert_logits_close(model.prefill([first], KVCache.allocate(TINY, 1, 16)).to_numpy()[0],
                        reference.logits(first)[-1])


@pytest.mark.parametrize("lengths", [[], [0], [-1], [2.5], [3, True]], ids=str)
def test_prefill_buffers_refuse_lengths_that_are_no_prompt_lengths(lengths: list[Any]) -> None:
    model = Qwen3Model(TINY, device_weights(TINY, tiny_arrays()))
    with pytest.raises(ModelError, match="parameter 'lengths'"):
        model.prefill_buffers(lengths)


def test_an_equal_length_batch_writes_the_cache_in_one_launch_per_layer_and_matches() -> None:
    arrays = tiny_arrays()
    model, reference = Qwen3Model(TINY, device_weights(TINY, arrays)), Reference(TINY, arrays)
    rng = np.random.default_rng(13)
    prompts = [rng.integers(0, TINY.vocab_size, 6).tolist() for _ in range(2)]
    result = generate(model, prompts, 4)
    assert result.tokens == [reference.greedy(p, 4) for p in prompts]


def _two_prefilled_caches(positions: int) -> tuple[Qwen3Model, list[list[int]], KVCache, KVCache, np.ndarray[Any, Any]]:
    """The tiny model, two prompts, and two caches of ``positions`` both prefilled with
    them (one for eager steps, one for a graph's), with the prefill's logits."""
    model = Qwen3Model(TINY, device_weights(TINY, tiny_arrays()))
    prompts = [[3, 1, 4, 1, 5], [9, 2, 6]]
    eager_cache, graph_cache = KVCache.allocate(TINY, 2, positions), KVCache.allocate(TINY, 2, positions)
    first = model.prefill(prompts, eager_cache).to_numpy()
    model.prefill(prompts, graph_cache)
    return model, prompts, eager_cache, graph_cache, first


def test_graph_replays_give_the_eager_steps_logits_and_sampled_runs_agree() -> None:
    model, prompts, eager_cache, graph_cache, first = _two_prefilled_caches(12)
    replay = DecodeGraph(model, graph_cache, greedy=True)
    assert replay.graph.node_count > 0
    assert graph_cache.lengths == [5, 3]  # the warm-up and the capture do not advance the cache
    ids = api.from_numpy(first.argmax(-1).astype(np.int64))
    for _ in range(4):
        expected = model.decode_step(ids, eager_cache).to_numpy()
        got = replay.step(ids).to_numpy()
        np.testing.assert_array_equal(got, expected)
        assert replay.last_ids.to_numpy().tolist() == expected.argmax(-1).tolist()
        ids = api.from_numpy(expected.argmax(-1).astype(np.int64))
    assert graph_cache.lengths == eager_cache.lengths == [9, 7]
    with pytest.raises(ModelError, match="'ids' must be i64"):
        replay.step(api.from_numpy(np.array([1, 2], np.int32)))
    with pytest.raises(ModelError, match="need greedy decoding"):
        DecodeGraph(model, graph_cache, greedy=False, steps=2)
    with pytest.raises(ModelError, match="13 positions; the cache has 12"):
        DecodeGraph(model, graph_cache, greedy=True, steps=4)
    # temperature sampling: the same seed draws the same tokens either way
    a = generate(model, prompts, 5, temperature=0.9, top_k=8, seed=4, graph=True)
    b = generate(model, prompts, 5, temperature=0.9, top_k=8, seed=4, graph=False)
    assert a.tokens == b.tokens


def test_queued_greedy_replays_alternate_two_graphs_and_give_the_eager_steps_ids() -> None:
    model, _, eager_cache, graph_cache, first = _two_prefilled_caches(22)
    ids = api.from_numpy(first.argmax(-1).astype(np.int64))
    expected, eager_ids = [], ids
    for _ in range(10):
        eager_ids = api.from_numpy(model.decode_step(eager_ids, eager_cache).to_numpy().argmax(-1).astype(np.int64))
        expected.append(eager_ids.to_numpy().tolist())
    replay = DecodeGraph(model, graph_cache, greedy=True, steps=2)
    assert len(replay.graphs) == 2 and replay.graphs[0] is not replay.graphs[1]
    queued = [replay.enqueue(ids)]
    got: list[list[int]] = []
    for _ in range(3):  # each from the last replay's own ids: queued behind it, nothing from the host
        queued.append(replay.enqueue(replay.last_ids))
        assert len(replay._pending) == 2  # an older one was waited for first: two at most
        got += [row.tolist() for row in queued[-2].wait()]  # the replay before's ids, as generate reads them
    got += [row.tolist() for row in queued[-1].wait()]
    assert got == expected[:8]
    assert replay.tokens.to_numpy().tolist() == expected[6:8]
    # lengths and ids from the host (a tensor of their own) while a replay is queued: it is
    # waited for first, then the same two steps run again
    queued.append(replay.enqueue(replay.last_ids))
    graph_cache.lengths = [13, 11]
    restart = replay.enqueue(api.from_numpy(np.array(expected[7], np.int64)))
    assert replay._pending == [restart]
    assert [row.tolist() for row in queued[-1].wait()] == expected[8:10]
    assert [row.tolist() for row in restart.wait()] == expected[8:10]  # the same steps again: the same ids
    assert graph_cache.lengths == eager_cache.lengths == [15, 13]
    # ids left unread until the replay after the next rewrote their rows: refused, not wrong
    unread = replay.enqueue(replay.last_ids)
    replay.enqueue(replay.last_ids)
    replay.enqueue(replay.last_ids)
    with pytest.raises(ModelError, match="rewritten by a later replay"):
        unread.wait()
    replay.close()
    with pytest.raises(ValueError, match="closed"):
        replay.graphs[1].launch()


def test_both_greedy_graphs_are_warmed_up_before_their_captures() -> None:
    # A vocabulary of several argmax chunks: its partials are made per out= row, one set per
    # graph, and a capture refuses an allocation (the interpreter's as the GPU's).
    config = replace(TINY, vocab_size=40000)
    model = Qwen3Model(config, random_weights(config, 3))
    cache = KVCache.allocate(config, 1, 8)
    first = model.prefill([[1, 2, 3]], cache).to_numpy()
    replay = DecodeGraph(model, cache, greedy=True)
    ids = api.from_numpy(first.argmax(-1).astype(np.int64))
    eager_cache = KVCache.allocate(config, 1, 8)
    model.prefill([[1, 2, 3]], eager_cache)
    expected = model.decode_step(ids, eager_cache).to_numpy().argmax(-1)
    assert replay.replay(ids) is replay.bufs.logits and replay.last_ids.to_numpy().tolist() == expected.tolist()
    with pytest.raises(cutile.GraphCaptureError, match="cannot run while"), cutile.graph_scope("allocates"):
        api.empty((2,), "f32")


def test_the_captured_steps_allocate_nothing_and_a_greedy_replay_needs_no_upload(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # What a GPU capture refuses (GraphCaptureError): an allocation or an upload inside it.
    model = Qwen3Model(TINY, random_weights(TINY, 0))
    cache = KVCache.allocate(TINY, 2, 12)
    model.prefill([[1, 2], [3]], cache)
    replay = DecodeGraph(model, cache, greedy=True, steps=2)  # warmed up: plans and workspaces made
    replay.replay(api.from_numpy(np.array([5, 6], np.int64)))  # the device state set from the host
    import cutile.api as api_module

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the decode step allocated a tensor")

    monkeypatch.setattr(api_module, "_allocate", refuse)
    monkeypatch.setattr(api_module, "_from_host", refuse)
    with pytest.raises(AssertionError):
        api.empty((2,), "f32")  # the patch holds
    replay._record(0)  # what the captures record
    replay._record(1)
    replay.replay(replay.last_ids)  # the next replay: nothing from the host
    assert cache.lengths == [6, 5]


def test_several_steps_per_replay_keep_the_ids_on_the_device_and_match_the_reference() -> None:
    arrays = tiny_arrays()
    model, reference = Qwen3Model(TINY, device_weights(TINY, arrays)), Reference(TINY, arrays)
    rng = np.random.default_rng(17)
    prompts = [rng.integers(0, TINY.vocab_size, n).tolist() for n in (7, 4)]
    result = generate(model, prompts, 12, sync_every=4)  # 11 steps: three replays of 4, the last cut
    assert result.steps == 11 and [len(t) for t in result.tokens] == [12, 12]
    assert result.tokens == [reference.greedy(p, 12) for p in prompts]
    with pytest.raises(ModelError, match="sync_every=4 keeps the ids on the device"):
        generate(model, prompts, 12, sync_every=4, temperature=1.0)


# Counts the kernel launches of one eager decode step on the GPU backend over cuda_core's
# fake driver (the real kernels, compiled for sm_90, launched but not run) for the tiny
# config with 2 and 3 layers; prints the difference (one layer's launches) as JSON. In a
# process of its own: kernels loaded into the fake must not reach the interpreter.
LAUNCH_COUNT = r"""
import collections, dataclasses, itertools, json, sys
import ml_dtypes, numpy as np
import cuda_async
from cuda_core.testing import use_fake_driver
from cutile import _backend, _gpu, api
from examples.llm.model import PRESETS, KVCache, Qwen3Model, Qwen3Weights
from examples.llm.weights import from_arrays

stacked = sys.argv[1] == "stacked"
load = _gpu.LoadedKernel.__init__
with use_fake_driver() as fake, cuda_async.using_policy(cuda_async.SingleStream()):
    fake._addresses = itertools.count(0x100000000000, 1 << 32)  # room for any tensor between two
    def loaded(self, compiled, ordinal=0, **options):  # the fake learns each kernel's parameters as it loads
        fake.kernels[compiled.name] = _gpu.fake_param_layout(compiled.abi)
        load(self, compiled, ordinal, **options)
    _gpu.LoadedKernel.__init__ = loaded
    _backend.reset_for_tests("gpu")
    counts = []
    for layers in (2, 3):
        config = dataclasses.replace(PRESETS["tiny"], num_hidden_layers=layers)
        arrays = {n: np.zeros(shape, ml_dtypes.bfloat16) for n, shape in config.weight_shapes().items()}
        weights = from_arrays(config, arrays) if stacked else Qwen3Weights.from_named(
            config, {n: api.from_numpy(a) for n, a in arrays.items()})
        model, cache = Qwen3Model(config, weights), KVCache.allocate(config, 1, 32)
        cache.lengths = [5]
        ids = api.from_numpy(np.array([3], np.int64))
        model.decode_step(ids, cache)  # plans and workspaces made
        first = len(fake.launches)
        model.decode_step(ids, cache)
        counts.append(collections.Counter(launch["function"] for launch in fake.launches[first:]))
print(json.dumps(dict(counts[1] - counts[0])))
"""


@pytest.mark.parametrize("stacked", [True, False], ids=["stacked", "separate"])
def test_a_decode_step_launches_nine_kernels_per_layer(stacked: bool) -> None:
    """Per layer: the QKV GEMV, qk_norm with RoPE and the K and V cache writes in one
    launch, decode attention in one (a short cache: one split), the output projection,
    add_rms_norm, the gate_up GEMV, silu_mul, the down GEMV and add_rms_norm (no split-K
    at the tiny shapes). Separate weights take q, k, v and gate, up GEMVs of their own (12)."""
    done = subprocess.run([sys.executable, "-c", LAUNCH_COUNT, "stacked" if stacked else "separate"],
                          capture_output=True, text=True, timeout=600, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "CUTILE_BACKEND": "gpu"})
    assert done.returncode == 0, done.stdout + done.stderr
    per_layer = json.loads(done.stdout.strip().splitlines()[-1])
    # silu_mul reads the stacked gate_up output's strided halves (its "rows" kernel), or two whole tensors
    silu_mul = {"binary_rows": 1} if stacked else {"binary_flat": 1}
    assert per_layer == {"gemv_direct": 4 if stacked else 7, "qk_norm_rope_cache_q": 1, "decode_whole": 1,
                         "add_rms_norm_rows": 2, **silu_mul}
    assert sum(per_layer.values()) == (9 if stacked else 12)


# Runs a prefill of the tiny config with 2 and 3 layers on the GPU backend over the fake
# driver and notes, at each host wait for kernels (an event synchronize, a stream's but
# cutile's own, which allocations use), how many had been launched; prints both runs'.
PREFILL_WAITS = r"""
import dataclasses, itertools, json
import ml_dtypes, numpy as np
from cuda_core.testing import use_fake_driver
from cutile import _backend, _gpu, api
from examples.llm.model import PRESETS, KVCache, Qwen3Model
from examples.llm.weights import from_arrays

load = _gpu.LoadedKernel.__init__
with use_fake_driver() as fake:  # (the default policy: its streams are not the allocations')
    fake._addresses = itertools.count(0x100000000000, 1 << 32)
    def loaded(self, compiled, ordinal=0, **options):
        fake.kernels[compiled.name] = _gpu.fake_param_layout(compiled.abi)
        load(self, compiled, ordinal, **options)
    _gpu.LoadedKernel.__init__ = loaded
    _backend.reset_for_tests("gpu")
    waits = []
    def waiting(*args, _call, _original):
        # (cutile's own stream, where allocations are made and waited for, runs no kernel of a prefill)
        if _call == "cuEventSynchronize" or int(args[0]) != int(_gpu.default_stream(0).handle):
            waits.append([_call, len(fake.launches)])
        return _original(*args)
    for call in ("cuEventSynchronize", "cuStreamSynchronize"):
        setattr(fake, call, lambda *args, _call=call, _original=getattr(fake, call): waiting(
            *args, _call=_call, _original=_original))
    runs = []
    for layers in (2, 3):
        config = dataclasses.replace(PRESETS["tiny"], num_hidden_layers=layers)
        arrays = {n: np.zeros(shape, ml_dtypes.bfloat16) for n, shape in config.weight_shapes().items()}
        model, cache = Qwen3Model(config, from_arrays(config, arrays)), KVCache.allocate(config, 1, 32)
        model.prefill([[1, 2, 3, 4, 5]], cache)  # plans and kernels made
        first = len(fake.launches)
        del waits[:]
        model.prefill([[1, 2, 3, 4, 5]], cache)
        launched = fake.launches[first:]
        assert all(launch["stream"] != int(_gpu.default_stream(0).handle) for launch in launched)
        runs.append({"launches": len(launched), "waits": [[c, n - first] for c, n in waits]})
print(json.dumps(runs))
"""


def test_a_prefill_queues_each_layer_before_waiting_for_the_one_before() -> None:
    """The host waits for layer n - 1 only after queueing layer n (the device then runs
    layer n while the host queues layer n + 1): once per layer (and for the embedding
    after layer 0), and for the stream once at the end."""
    done = subprocess.run([sys.executable, "-c", PREFILL_WAITS], capture_output=True, text=True, timeout=600,
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT), "CUTILE_BACKEND": "gpu"})
    assert done.returncode == 0, done.stdout + done.stderr
    two, three = json.loads(done.stdout.strip().splitlines()[-1])
    per_layer = three["launches"] - two["launches"]
    before = two["launches"] - 2 * per_layer  # the embedding and first norm, the gather and LM head
    assert per_layer > 5 and before > 0
    for run, layers in ((two, 2), (three, 3)):
        calls = [call for call, _ in run["waits"]]
        # the embedding's and each layer's but the last, the final batch's stream synchronize, the last layer's
        assert calls == ["cuEventSynchronize"] * layers + ["cuStreamSynchronize", "cuEventSynchronize"], calls
        for n, (_, launched) in enumerate(run["waits"][1:layers]):
            assert launched >= (n + 2) * per_layer, (n, launched, per_layer)  # layer n + 1 queued first
        assert run["waits"][0][1] >= per_layer  # the embedding waited for after layer 0 was queued


def test_tied_embeddings_use_the_embedding_as_the_lm_head() -> None:
    config = PRESETS["tiny"]
    arrays = tiny_arrays(config)
    assert "lm_head.weight" not in arrays
    model, reference = Qwen3Model(config, device_weights(config, arrays)), Reference(config, arrays)
    prompt = [1, 200, 3, 400, 5]
    logits = model.prefill([prompt], KVCache.allocate(config, 1, 8))
    assert_logits_close(logits.to_numpy()[0], reference.logits(prompt)[-1])


def test_random_weights_are_made_on_the_device_with_the_seed() -> None:
    a, b = random_weights(TINY, 1), random_weights(TINY, 1)
    c = random_weights(TINY, 2)
    first = a.layers[0].q_proj.to_numpy().astype(np.float64)
    assert np.array_equal(first, b.layers[0].q_proj.to_numpy().astype(np.float64))
    assert not np.array_equal(first, c.layers[0].q_proj.to_numpy().astype(np.float64))
    assert 0.015 < first.std() < 0.025 and abs(first.mean()) < 0.005
    assert a.lm_head is not a.embed_tokens  # untied: its own tensor
    assert a.layers[1].gate_up_proj is not None  # made stacked: the MLP's first product is one GEMM
    assert np.array_equal(a.layers[1].up_proj.to_numpy().astype(np.float64),
                          a.layers[1].gate_up_proj.to_numpy().astype(np.float64)[TINY.intermediate_size:])
    assert a.layers[1].qkv_proj is not None  # and q, k, v: the attention's projections in one GEMM
    qkv = a.layers[1].qkv_proj.to_numpy().astype(np.float64)
    q_rows, kv_rows = TINY.q_size, TINY.kv_size
    for part, rows in ((a.layers[1].q_proj, qkv[:q_rows]), (a.layers[1].k_proj, qkv[q_rows:q_rows + kv_rows]),
                       (a.layers[1].v_proj, qkv[q_rows + kv_rows:])):
        assert np.array_equal(part.to_numpy().astype(np.float64), rows)
    separate = device_weights(TINY, tiny_arrays(), stacked=False)
    assert separate.layers[0].gate_up_proj is None and separate.layers[0].qkv_proj is None
    tensors = {name: api.from_numpy(a) for name, a in tiny_arrays().items()}
    tensors["model.layers.0.mlp.gate_up_proj.weight"] = api.zeros((3, 64), "bf16")
    with pytest.raises(ModelError, match="gate_up_proj.weight' is bf16 \\[3, 64\\]"):
        Qwen3Weights.from_named(TINY, tensors)
    tensors["model.layers.0.mlp.gate_up_proj.weight"] = api.zeros((2 * TINY.intermediate_size, 64), "bf16")
    with pytest.raises(ModelError, match="as its halves"):
        Qwen3Weights.from_named(TINY, tensors)  # the right shape, but not the layer's gate and up
    del tensors["model.layers.0.mlp.gate_up_proj.weight"]
    qkv_name = "model.layers.0.self_attn.qkv_proj.weight"
    tensors[qkv_name] = api.zeros((TINY.q_size, 64), "bf16")
    with pytest.raises(ModelError, match=f"qkv_proj.weight' is bf16 \\[{TINY.q_size}, 64\\]; expected bf16 "
                                         f"\\[{TINY.q_size + 2 * TINY.kv_size}, 64\\]"):
        Qwen3Weights.from_named(TINY, tensors)
    tensors[qkv_name] = api.zeros((TINY.q_size + 2 * TINY.kv_size, 64), "bf16")
    with pytest.raises(ModelError, match="must hold the layer's q_proj, k_proj, v_proj as its row blocks"):
        Qwen3Weights.from_named(TINY, tensors)
    stacked = tensors[qkv_name]  # q and k its row blocks, v not
    tensors["model.layers.0.self_attn.q_proj.weight"] = stacked[:TINY.q_size]
    tensors["model.layers.0.self_attn.k_proj.weight"] = stacked[TINY.q_size:TINY.q_size + TINY.kv_size]
    with pytest.raises(ModelError, match="as its row blocks"):
        Qwen3Weights.from_named(TINY, tensors)
    tensors["model.layers.0.self_attn.v_proj.weight"] = stacked[TINY.q_size + TINY.kv_size:]
    assert Qwen3Weights.from_named(TINY, tensors).layers[0].qkv_proj is stacked
    assert tuple(a.lm_head.shape) == (TINY.vocab_size, TINY.hidden_size)


def test_generation_refuses_bad_arguments() -> None:
    model = Qwen3Model(TINY, random_weights(TINY, 0))
    with pytest.raises(ModelError, match="new_tokens"):
        generate(model, [[1, 2]], 0)
    with pytest.raises(ModelError, match="token ids"):
        generate(model, [[1, TINY.vocab_size]], 2)
    with pytest.raises(ModelError, match="prompt 1 has 0 tokens"):
        generate(model, [[1], []], 2)
    with pytest.raises(ModelError, match="max_position_embeddings"):
        generate(model, [[1] * 250], 10)
    cache = KVCache.allocate(TINY, 1, 2)
    model.prefill([[1, 2]], cache)
    with pytest.raises(ModelError, match="fills the cache"):
        model.decode_step(api.from_numpy(np.array([3], np.int64)), cache)
    assert isinstance(ModelError("x"), cutile.CutileError)


# -- sampling ---------------------------------------------------------------------------


def test_sample_greedy_top_k_and_temperature() -> None:
    rng = np.random.default_rng(0)
    values = rng.standard_normal((3, 50)).astype(np.float32)
    logits = api.from_numpy(values)
    assert sample(logits).to_numpy().tolist() == values.argmax(-1).tolist()
    assert sample(logits, temperature=1.0, top_k=1).to_numpy().tolist() == values.argmax(-1).tolist()
    top3 = np.argsort(values, -1)[:, -3:]
    draws = np.stack([sample(logits, temperature=2.0, top_k=3, rng=rng).to_numpy() for _ in range(60)])
    for row in range(3):
        assert set(draws[:, row].tolist()) <= set(top3[row].tolist())
        assert len(set(draws[:, row].tolist())) > 1  # a draw, not the argmax
    # A very low temperature concentrates on the argmax; a high one spreads.
    cold = np.stack([sample(logits, temperature=1e-3, rng=rng).to_numpy() for _ in range(10)])
    assert (cold == values.argmax(-1)).all()
    hot = np.stack([sample(logits, temperature=100.0, rng=rng).to_numpy() for _ in range(40)])
    assert len(set(hot[:, 0].tolist())) > 10
    with pytest.raises(ModelError, match="temperature"):
        sample(logits, temperature=-1.0)
    with pytest.raises(ModelError, match="top_k"):
        sample(logits, temperature=1.0, top_k=51)


# -- checkpoints --------------------------------------------------------------------------


@needs_safetensors
def test_a_safetensors_checkpoint_is_written_and_read_back(tmp_path: Path) -> None:
    arrays = tiny_arrays()
    save_checkpoint(tmp_path, TINY, arrays)
    assert json.loads((tmp_path / "config.json").read_text())["model_type"] == "qwen3"
    config, weights = load_checkpoint(tmp_path)
    assert config == TINY
    as_f64 = lambda t: t.to_numpy().astype(np.float64)  # noqa: E731
    assert np.array_equal(as_f64(weights.layers[1].down_proj),
                          arrays["model.layers.1.mlp.down_proj.weight"].astype(np.float64))
    assert np.array_equal(as_f64(weights.lm_head), arrays["lm_head.weight"].astype(np.float64))
    assert np.array_equal(as_f64(weights.norm), arrays["model.norm.weight"].astype(np.float64))
    # gate and up stacked for one GEMM, the Hugging Face tensors its halves
    layer = weights.layers[1]
    assert layer.gate_up_proj is not None and tuple(layer.gate_up_proj.shape) == (2 * TINY.intermediate_size, 64)
    assert np.array_equal(as_f64(layer.up_proj), arrays["model.layers.1.mlp.up_proj.weight"].astype(np.float64))
    assert np.array_equal(as_f64(layer.gate_up_proj)[:TINY.intermediate_size],
                          arrays["model.layers.1.mlp.gate_proj.weight"].astype(np.float64))
    # and q, k, v stacked for one GEMM, the Hugging Face tensors its row blocks
    assert layer.qkv_proj is not None and tuple(layer.qkv_proj.shape) == (TINY.q_size + 2 * TINY.kv_size, 64)
    assert np.array_equal(as_f64(layer.qkv_proj), np.concatenate(
        [arrays[f"model.layers.1.self_attn.{name}_proj.weight"] for name in "qkv"]).astype(np.float64))
    assert np.array_equal(as_f64(layer.v_proj), arrays["model.layers.1.self_attn.v_proj.weight"].astype(np.float64))
    # The checkpoint's model gives the reference's logits.
    prompt = [4, 8, 15, 16, 23, 42]
    logits = Qwen3Model(config, weights).prefill([prompt], KVCache.allocate(config, 1, 8))
    assert_logits_close(logits.to_numpy()[0], Reference(TINY, arrays).logits(prompt)[-1])


@needs_safetensors
def test_f32_checkpoints_are_converted_and_sharded_files_are_merged(tmp_path: Path) -> None:
    from safetensors.numpy import save_file

    arrays = tiny_arrays()
    save_checkpoint(tmp_path, TINY, {})
    (tmp_path / "model.safetensors").unlink()
    names = sorted(arrays)
    save_file({n: arrays[n].astype(np.float32) for n in names[: len(names) // 2]},
              str(tmp_path / "model-00001-of-00002.safetensors"))
    save_file({n: arrays[n] for n in names[len(names) // 2:]}, str(tmp_path / "model-00002-of-00002.safetensors"))
    _, weights = load_checkpoint(tmp_path)
    assert np.array_equal(weights.embed_tokens.to_numpy().astype(np.float64),
                          arrays["model.embed_tokens.weight"].astype(np.float64))


@needs_safetensors
def test_checkpoint_errors_name_the_tensor_or_field(tmp_path: Path) -> None:
    arrays = tiny_arrays()
    missing = {n: a for n, a in arrays.items() if n != "model.layers.1.mlp.up_proj.weight"}
    save_checkpoint(tmp_path / "missing", TINY, missing)
    with pytest.raises(ModelError, match=r"missing tensor\(s\) model.layers.1.mlp.up_proj.weight"):
        load_checkpoint(tmp_path / "missing")
    wrong = dict(arrays, **{"model.norm.weight": arrays["model.norm.weight"][:-1]})
    save_checkpoint(tmp_path / "wrong", TINY, wrong)
    with pytest.raises(ModelError, match="'model.norm.weight' has shape"):
        load_checkpoint(tmp_path / "wrong")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "config.json").write_text(json.dumps({"hidden_size": 64}))
    with pytest.raises(ModelError, match="intermediate_size"):
        load_checkpoint(tmp_path / "bad")
    for field, value in (("rope_scaling", {"type": "yarn", "factor": 4.0}), ("model_type", "qwen2"),
                         ("attention_bias", True), ("hidden_act", "gelu")):
        with pytest.raises(ModelError, match=f"field '{field}' is"):
            Qwen3Config.from_dict({**TINY.to_dict(), field: value})
    assert Qwen3Config.from_dict({**TINY.to_dict(), "rope_scaling": None, "model_type": "qwen3"}) == TINY
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "config.json").write_text(json.dumps(TINY.to_dict()))
    with pytest.raises(ModelError, match="no .safetensors file"):
        load_checkpoint(tmp_path / "empty")


def test_presets_have_the_published_shapes() -> None:
    # Hugging Face Qwen/Qwen3-{0.6B,1.7B,4B,8B} config.json
    shapes = {name: (c.hidden_size, c.num_hidden_layers, c.num_attention_heads, c.num_key_value_heads, c.head_dim,
                     c.intermediate_size, c.vocab_size, c.tie_word_embeddings) for name, c in PRESETS.items()}
    assert shapes["qwen3-0.6b"] == (1024, 28, 16, 8, 128, 3072, 151936, True)
    assert shapes["qwen3-1.7b"] == (2048, 28, 16, 8, 128, 6144, 151936, True)
    assert shapes["qwen3-4b"] == (2560, 36, 32, 8, 128, 9728, 151936, True)
    assert shapes["qwen3-8b"] == (4096, 36, 32, 8, 128, 12288, 151936, False)
    # about 0.6, 1.7, 4 and 8 billion parameters (the tied ones counting the embedding once)
    params = {name: PRESETS[name].weight_bytes() / 2e9 for name in ("qwen3-0.6b", "qwen3-1.7b", "qwen3-4b", "qwen3-8b")}
    assert 0.55 < params["qwen3-0.6b"] < 0.65 and 1.6 < params["qwen3-1.7b"] < 2.1
    assert 3.9 < params["qwen3-4b"] < 4.1 and 8.0 < params["qwen3-8b"] < 8.3


# -- the command line ---------------------------------------------------------------------


def run_cli(*arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "examples.llm.generate", *arguments], capture_output=True, text=True,
                          timeout=600, cwd=ROOT, env=dict(os.environ))


def test_the_command_line_runs_the_tiny_config_and_reports_its_timings() -> None:
    done = run_cli("--tiny", "--prompt-lens", "6,3", "--new-tokens", "4", "--progress")
    several = run_cli("--tiny", "--new-tokens", "6", "--sync-every", "2", "--no-roofline")
    assert several.returncode == 0 and "2 steps per replay" in several.stdout, several.stdout + several.stderr
    assert "decode by CUDA graph replays of dependent launches" in several.stdout
    plain = run_cli("--tiny", "--new-tokens", "3", "--no-dependent-launches", "--no-roofline")
    assert plain.returncode == 0 and "decode by CUDA graph replays\n" in plain.stdout, plain.stdout + plain.stderr
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert f"on the {cutile.backend()} backend" in out
    assert "batch 2, prompt lengths [6, 3], 4 new tokens per sequence" in out
    for label in ("prefill: ", "decode: ", "ms/token", "roofline: ", "% of it", "sequence 1: "):
        assert label in out, out
    assert "decode [" in done.stderr and "3/3" in done.stderr
    assert "Traceback" not in done.stderr


@needs_safetensors
def test_the_command_line_reads_a_checkpoint_and_samples(tmp_path: Path) -> None:
    save_checkpoint(tmp_path, TINY, tiny_arrays())
    done = run_cli("--checkpoint", str(tmp_path), "--prompt-ids", "1,2,3", "--new-tokens", "3", "--temperature",
                   "0.7", "--top-k", "5", "--no-roofline")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "prompt lengths [3]" in done.stdout and "roofline" not in done.stdout


def test_the_command_line_reports_bad_arguments_without_a_traceback() -> None:
    done = run_cli("--random-weights")
    assert done.returncode == 2 and "needs --config" in done.stderr and "Traceback" not in done.stderr
    done = run_cli("--tiny", "--prompt-ids", "1,x")
    assert done.returncode == 2 and "--prompt-ids" in done.stderr


class WordTokenizer:
    """A stand-in for ``tokenizers.Tokenizer`` of a word-level vocabulary (the package's
    calls: ``from_file``, ``encode(text).ids``, ``decode(ids)``)."""

    def __init__(self, vocab: dict[str, int]) -> None:
        self.vocab, self.words = vocab, {i: w for w, i in vocab.items()}

    @classmethod
    def from_file(cls, path: str) -> WordTokenizer:
        return cls(json.loads(Path(path).read_text())["model"]["vocab"])

    def encode(self, text: str) -> Any:
        return type("Encoding", (), {"ids": [self.vocab[w] for w in text.split()]})()

    def decode(self, ids: list[int]) -> str:
        return " ".join(self.words.get(i, "?") for i in ids)


def write_word_tokenizer(path: Path, words: int) -> None:
    path.write_text(json.dumps({"model": {"type": "WordLevel", "vocab": {f"w{i}": i for i in range(words)},
                                          "unk_token": "w0"}}))


def test_the_command_line_tokenizes_the_prompt_and_decodes_the_output(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    from examples.llm.generate import main

    write_word_tokenizer(tmp_path / "tokenizer.json", TINY.vocab_size)
    monkeypatch.setitem(sys.modules, "tokenizers", type(sys)("tokenizers"))
    sys.modules["tokenizers"].Tokenizer = WordTokenizer  # type: ignore[attr-defined]
    assert main(["--tiny", "--tokenizer", str(tmp_path / "tokenizer.json"), "--prompt", "w5 w17 w300",
                 "--new-tokens", "3", "--no-roofline"]) == 0
    out = capsys.readouterr().out
    assert "prompt lengths [3]" in out
    tokens = [int(t) for t in out.split("sequence 0: ")[1].split("\n")[0].split()]
    assert f"sequence 0 text: {' '.join(f'w{t}' for t in tokens)!r}" in out
    assert main(["--tiny", "--prompt", "w1"]) == 2
    assert "needs --tokenizer" in capsys.readouterr().err


def test_a_tokenizer_without_the_package_is_refused_by_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    from examples.llm.generate import main

    write_word_tokenizer(tmp_path / "tokenizer.json", 8)
    monkeypatch.setitem(sys.modules, "tokenizers", None)  # import tokenizers raises ImportError
    assert main(["--tiny", "--tokenizer", str(tmp_path / "tokenizer.json"), "--prompt", "w1"]) == 2
    assert "needs the 'tokenizers' package" in capsys.readouterr().err
    assert main(["--tiny", "--tokenizer", str(tmp_path / "nothing.json"), "--prompt", "w1"]) == 2
    assert "no file" in capsys.readouterr().err


def test_a_real_tokenizer_json_round_trips(tmp_path: Path) -> None:
    tokenizers = pytest.importorskip("tokenizers", reason="the optional 'tokenizers' package is not installed")
    model = tokenizers.models.WordLevel({f"w{i}": i for i in range(TINY.vocab_size)}, unk_token="w0")
    tokenizer = tokenizers.Tokenizer(model)
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    done = run_cli("--tiny", "--tokenizer", str(tmp_path / "tokenizer.json"), "--prompt", "w3 w9", "--new-tokens",
                   "2", "--no-roofline")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "prompt lengths [2]" in done.stdout and "sequence 0 text: 'w" in done.stdout


# -- the GPU: the 0.6B shapes against torch -----------------------------------------------


def torch_logits(torch: Any, config: Qwen3Config, weights: Qwen3Weights, ids: list[int]) -> Any:
    """The logits of every position of one sequence by a torch Qwen3 (SDPA), f32."""
    F = torch.nn.functional
    t = lambda x: torch.from_dlpack(x)  # noqa: E731  (the same device memory as the cutile model's)
    c = config
    n, heads, kv, dim = len(ids), c.num_attention_heads, c.num_key_value_heads, c.head_dim

    def norm(x: Any, w: Any) -> Any:
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + c.rms_norm_eps) * t(w).float()).bfloat16()

    positions = torch.arange(n, device="cuda", dtype=torch.float32)
    freqs = c.rope_theta ** (-torch.arange(0, dim, 2, device="cuda", dtype=torch.float32) / dim)
    angles = positions[:, None] * freqs
    cos, sin = torch.cat([angles.cos()] * 2, -1)[None], torch.cat([angles.sin()] * 2, -1)[None]

    def rope(x: Any) -> Any:  # x (heads, n, dim)
        x1, x2 = x[..., : dim // 2], x[..., dim // 2:]
        return (x.float() * cos + torch.cat([-x2, x1], -1).float() * sin).bfloat16()

    hidden = t(weights.embed_tokens)[torch.tensor(ids, device="cuda")]
    for layer in weights.layers:
        x = norm(hidden, layer.input_layernorm)
        q = (x @ t(layer.q_proj).T).view(n, heads, dim).transpose(0, 1)
        k = (x @ t(layer.k_proj).T).view(n, kv, dim).transpose(0, 1)
        v = (x @ t(layer.v_proj).T).view(n, kv, dim).transpose(0, 1)
        q, k = rope(norm(q, layer.q_norm)), rope(norm(k, layer.k_norm))
        k, v = k.repeat_interleave(heads // kv, 0), v.repeat_interleave(heads // kv, 0)
        attended = F.scaled_dot_product_attention(q[None], k[None], v[None], is_causal=True)[0]
        hidden = hidden + attended.transpose(0, 1).reshape(n, heads * dim) @ t(layer.o_proj).T
        x = norm(hidden, layer.post_attention_layernorm)
        hidden = hidden + (F.silu(x @ t(layer.gate_proj).T) * (x @ t(layer.up_proj).T)) @ t(layer.down_proj).T
    return norm(hidden, weights.norm).float() @ t(weights.lm_head).float().T


@pytest.mark.gpu
def test_qwen3_0_6b_shapes_match_torch_on_the_gpu() -> None:
    torch = pytest.importorskip("torch")
    config = PRESETS["qwen3-0.6b"]
    weights = random_weights(config, 0)
    model = Qwen3Model(config, weights)
    rng = np.random.default_rng(1)
    prompts = [rng.integers(0, config.vocab_size, n).tolist() for n in (70, 33)]
    result = generate(model, prompts, 8)
    for b, prompt in enumerate(prompts):
        expected = torch_logits(torch, config, weights, prompt)[-1].cpu().numpy().astype(np.float64)
        assert_logits_close(result.first_logits[b].astype(np.float64), expected)
        # each decode step's choice is torch's argmax, or within bf16 noise of it
        ids = list(prompt)
        for token in result.tokens[b]:
            logits = torch_logits(torch, config, weights, ids)[-1].cpu().numpy()
            assert logits[token] >= logits.max() - 0.03 * np.abs(logits).max(), (b, len(ids))
            ids.append(token)


@pytest.mark.gpu
def test_qwen3_0_6b_graph_replays_match_eager_steps_on_the_gpu() -> None:
    # The real capture: a CUDA graph refuses allocations, uploads and module loads inside it.
    config = PRESETS["qwen3-0.6b"]
    model = Qwen3Model(config, random_weights(config, 0))
    prompts = [np.random.default_rng(2).integers(0, config.vocab_size, n).tolist() for n in (40, 17, 64)]
    eager = generate(model, prompts, 17, graph=False)
    one = generate(model, prompts, 17)
    several = generate(model, prompts, 17, sync_every=8)
    assert one.tokens == eager.tokens and several.tokens == eager.tokens
    sampled = [generate(model, prompts, 6, temperature=0.8, top_k=20, seed=3, graph=g).tokens for g in (True, False)]
    assert sampled[0] == sampled[1]
