"""Decode attention against prefill attention on the same KV cache: the cache is built
with `kv_cache_update` (a prompt per sequence at an int start, then next tokens at
positions tensors), `attention` (causal prefill) runs over the cache's first positions,
and `decode_attention` of a query over the cache gives the prefill's row of that query:
the last row for the next token, and every row when the query of position t is decoded
over the first t + 1 positions. The cache past each length holds NaN (never read).
GQA, ragged lengths, f16 and bf16; small shapes on the interpreter, the benchmark's
heads and a long prompt on the GPU (marked ``gpu``)."""

from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import cutile
from cutile import api

from cutile_kernels import attention, decode_attention, kv_cache_update

NUMPY = {"f16": np.float16, "bf16": ml_dtypes.bfloat16}
#: both kernels compute in f32 and round once to the dtype: a few of its ulps apart
TOLERANCE = {"f16": 4e-3, "bf16": 2e-2}


@dataclass(frozen=True)
class Shape:
    q_heads: int
    kv_heads: int
    head_dim: int
    max_seq: int
    prompts: tuple[int, ...]  # one prompt length per sequence (the batch)
    steps: int  # next tokens appended and decoded
    rows: tuple[int, ...]  # prompt positions whose query is decoded over the prompt's start (sequence 0)


SMALL = Shape(q_heads=4, kv_heads=2, head_dim=64, max_seq=48, prompts=(37, 20, 1), steps=3,
              rows=tuple(range(37)))
LARGE = Shape(q_heads=32, kv_heads=8, head_dim=128, max_seq=2048, prompts=(1000, 777, 1, 1500), steps=2,
              rows=(0, 1, 63, 64, 65, 500, 999))


class Sequences:
    """A batch of sequences: each one's queries (heads, tokens, head_dim) on the host and
    its keys and values in one KV cache ``(batch, max_seq, kv_heads, head_dim)``."""

    def __init__(self, shape: Shape, dtype: str, seed: int) -> None:
        self.shape, self.dtype = shape, dtype
        self.rng = np.random.default_rng(seed)
        batch = len(shape.prompts)
        cache_shape = [batch, shape.max_seq, shape.kv_heads, shape.head_dim]
        self.k_cache = api.full(cache_shape, np.nan, dtype=dtype)
        self.v_cache = api.full(cache_shape, np.nan, dtype=dtype)
        self.lengths = [0] * batch
        self.queries = [np.zeros((shape.q_heads, 0, shape.head_dim), NUMPY[dtype]) for _ in range(batch)]
        for b, tokens in enumerate(shape.prompts):
            self.append(b, tokens, at_int=True)

    def random(self, *dims: int) -> np.ndarray:
        return self.rng.standard_normal(dims).astype(NUMPY[self.dtype])

    def append(self, b: int, tokens: int, at_int: bool = False) -> None:
        """Writes ``tokens`` new keys and values of sequence b at its end (an int start, or a
        positions tensor) and adds their queries."""
        start = self.lengths[b]
        positions: Any = start if at_int else api.from_numpy(np.arange(start, start + tokens, dtype=np.int32))
        for cache in (self.k_cache, self.v_cache):
            new = api.from_numpy(self.random(tokens, self.shape.kv_heads, self.shape.head_dim), self.dtype)
            kv_cache_update(cache[b], new, positions)
        self.queries[b] = np.concatenate([self.queries[b], self.random(self.shape.q_heads, tokens,
                                                                         self.shape.head_dim)], axis=1)
        self.lengths[b] += tokens

    def prefill(self, b: int) -> np.ndarray:
        """Causal attention of sequence b's queries over its cached positions: (heads, tokens, head_dim)."""
        n = self.lengths[b]
        q = api.from_numpy(self.queries[b][None], self.dtype)
        k, v = (cache[b:b + 1, :n].permute(0, 2, 1, 3) for cache in (self.k_cache, self.v_cache))
        return f64(attention(q, k, v, causal=True))[0]

    def decode_last(self) -> np.ndarray:
        """Each sequence's last query over its whole cache: (batch, heads, head_dim)."""
        q = np.stack([queries[:, -1] for queries in self.queries])
        return self.decode(q, self.k_cache, self.v_cache, self.lengths)

    def decode_rows(self, b: int, rows: tuple[int, ...]) -> np.ndarray:
        """Sequence b's query of each position t in ``rows`` over its first t + 1 positions,
        one decode batch entry per row (the cache broadcast, no copy)."""
        q = np.stack([self.queries[b][:, t] for t in rows])
        shape = [len(rows), *self.k_cache.shape[1:]]
        k, v = (cache[b:b + 1].broadcast_to(shape) for cache in (self.k_cache, self.v_cache))
        return self.decode(q, k, v, [t + 1 for t in rows])

    def decode(self, q: np.ndarray, k_cache: cutile.Tensor, v_cache: cutile.Tensor, lengths: list[int]) -> np.ndarray:
        seq_lens = api.from_numpy(np.array(lengths, dtype=np.int32))
        out = api.full(list(q.shape), np.nan, dtype=self.dtype)
        decode_attention(api.from_numpy(q, self.dtype), k_cache.permute(0, 2, 1, 3), v_cache.permute(0, 2, 1, 3),
                         seq_lens, out=out)
        return f64(out)


def f64(t: Any) -> np.ndarray:
    return np.asarray(t.to_numpy() if isinstance(t, cutile.Tensor) else t).astype(np.float64)


def close(decoded: np.ndarray, prefilled: np.ndarray, dtype: str) -> None:
    assert np.isfinite(decoded).all() and np.isfinite(prefilled).all()  # nothing past a length was read
    np.testing.assert_allclose(decoded, prefilled, atol=TOLERANCE[dtype], rtol=0)


def decode_matches_prefill(shape: Shape, dtype: str) -> None:
    sequences = Sequences(shape, dtype, seed=len(shape.prompts))
    for step in range(shape.steps + 1):
        if step:  # the next token of every sequence
            for b in range(len(shape.prompts)):
                sequences.append(b, 1)
        decoded = sequences.decode_last()
        for b in range(len(shape.prompts)):
            close(decoded[b], sequences.prefill(b)[:, -1], dtype)
    first = Sequences(shape, dtype, seed=7)
    close(first.decode_rows(0, shape.rows), first.prefill(0)[:, list(shape.rows)].transpose(1, 0, 2), dtype)


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_decode_equals_the_prefill_rows_of_the_same_queries(dtype: str) -> None:
    decode_matches_prefill(SMALL, dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_gpu_decode_equals_the_prefill_rows_at_the_benchmark_heads(dtype: str) -> None:
    decode_matches_prefill(LARGE, dtype)
