"""qk_norm_rope_cache (QK-norm, RoPE and the K and V cache writes in one launch) against
numpy float64 on the interpreter: neox and gptj, GQA, odd head counts, batches of one
position, prefills into a batch entry's cache, strided head slices of a fused QKV output,
caches poisoned with NaN (the tokens' rows written and no other), the numbers of
`qk_norm_rope` followed by `kv_cache_update` bit for bit, errors naming the parameter,
the kernel's own checks of device positions; and its kernels compiled for sm_90."""

import importlib
import re
from typing import Any

import numpy as np
import pytest
from cutile_kernels_testkit import DTYPES, TOLERANCE, f64, normal, rope_reference

import cutile
from cutile import api
from cutile.core import bf16, f32, i32, i64
from cutile_kernels import kv_cache_update, qk_norm_rope, qk_norm_rope_cache

cache_module = importlib.import_module("cutile_kernels._qk_norm_cache")


def rms_reference(x: Any, w: Any, eps: float) -> Any:
    return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps) * w




def close(got: Any, expected: Any, dtype: str) -> None:
    """To the dtype's precision (in f32 the angles' own error dominates: position * 2**-24)."""
    rtol, atol = TOLERANCE[dtype]
    scale = 20.0 if dtype == "f32" else 4.0
    values = f64(got)
    assert np.isfinite(values).all(), "an element was not written"
    np.testing.assert_allclose(values, expected, rtol=rtol * scale, atol=atol * scale)


def nan_caches(shape: tuple[int, ...], dtype: str) -> tuple[cutile.Tensor, cutile.Tensor]:
    return api.full(list(shape), np.nan, dtype=DTYPES[dtype]), api.full(list(shape), np.nan, dtype=DTYPES[dtype])


def by_entry(cache: cutile.Tensor) -> Any:
    """A cache as float64 ``(batch, max_seq, heads, head_dim)``."""
    values = f64(cache.to_numpy())
    return values if values.ndim == 4 else values[None]


#: (q shape, k heads, cache shape, positions): a decode step of three sequences at one
#: position (odd head counts); one sequence's prefill into a 3-D cache from 4; a 4-D
#: (batch, seq) q; two prompts of 5 tokens packed as 10 tokens from 0
CASES = {
    "decode batch 3": ((3, 5, 32), 3, (3, 20, 3, 32), np.full(3, 7)),
    "prefill 3-D cache": ((13, 6, 64), 2, (24, 2, 64), np.arange(4, 17)),
    "4-D q": ((2, 5, 4, 16), 1, (2, 9, 1, 16), np.tile(np.arange(3, 8), (2, 1))),
    "packed equal prompts": ((10, 4, 64), 4, (2, 6, 4, 64), np.tile(np.arange(5), 2)),
}


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("style", ["neox", "gptj"])
@pytest.mark.parametrize("case", list(CASES))
def test_normalizes_rotates_and_writes_the_tokens_rows_only(dtype: str, style: str, case: str) -> None:
    q_shape, k_heads, cache_shape, positions = CASES[case]
    k_shape = (*q_shape[:-2], k_heads, q_shape[-1])
    dim = q_shape[-1]
    q, k = normal(q_shape, dtype, seed=1, scale=2.0), normal(k_shape, dtype, seed=2, shift=-0.3)
    v = normal(k_shape, dtype, seed=3)
    qw, kw = normal((dim,), dtype, seed=4), normal((dim,), "f32", seed=5)  # k's weight of another dtype
    positions = positions.astype(np.int32 if dtype == "bf16" else np.int64)
    caches = nan_caches(cache_shape, dtype)
    q_out = api.full(list(q_shape), np.nan, dtype=DTYPES[dtype])
    theta = 1e6
    got = qk_norm_rope_cache(q, k, v, qw, kw, positions, caches, 1e-6, theta, style=style, out=q_out)
    assert got is q_out
    close(q_out.to_numpy(), rope_reference(rms_reference(f64(q), f64(qw), 1e-6), positions, theta, style), dtype)

    # the cache rows: batch entry b takes its block of tokens at their positions, NaN elsewhere
    batch = cache_shape[0] if len(cache_shape) == 4 else 1
    count = int(np.prod(q_shape[:-2])) // batch
    rows = np.asarray(positions).reshape(batch, count)
    k_rotated = rope_reference(rms_reference(f64(k), f64(kw), 1e-6), positions, theta, style)
    k_rows, v_rows = k_rotated.reshape(batch, count, k_heads, dim), f64(v).reshape(batch, count, k_heads, dim)
    for cache, expected in zip(caches, (k_rows, v_rows)):
        values = by_entry(cache)
        written = np.zeros(values.shape[:2], bool)
        for b in range(batch):
            written[b, rows[b]] = True
            close(values[b, rows[b]], expected[b], dtype)
        assert np.isnan(values[~written]).all(), "a row outside the tokens' positions was written"
    np.testing.assert_array_equal(by_entry(caches[1])[written].reshape(v_rows.shape), v_rows)  # v as it is


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_the_numbers_of_qk_norm_rope_then_kv_cache_update_bit_for_bit(dtype: str) -> None:
    batch, heads, kv_heads, dim, max_seq = 4, 8, 2, 128, 12
    q, k = normal((batch, heads, dim), dtype, seed=6, scale=3.0), normal((batch, kv_heads, dim), dtype, seed=7)
    v = normal((batch, kv_heads, dim), dtype, seed=8)
    qw, kw = normal((dim,), dtype, seed=9), normal((dim,), dtype, seed=10)
    positions = np.full(batch, 9, np.int32)
    caches = nan_caches((batch, max_seq, kv_heads, dim), dtype)
    k_out = api.full([batch, kv_heads, dim], np.nan, dtype=DTYPES[dtype])
    q_fused = qk_norm_rope_cache(q, k, v, qw, kw, positions, caches, 1e-6, 1e6, k_out=k_out)
    q2, k2 = qk_norm_rope(q, k, qw, kw, positions, 1e-6, 1e6)
    expected = nan_caches((batch, max_seq, kv_heads, dim), dtype)
    kv_cache_update(expected, (k2[:, None], v[:, None]), positions[:1])
    np.testing.assert_array_equal(q_fused, q2)
    np.testing.assert_array_equal(k_out.to_numpy(), k2)
    for got, want in zip(caches, expected):
        np.testing.assert_array_equal(got.to_numpy().view(np.uint16), want.to_numpy().view(np.uint16))  # NaN alike


@pytest.mark.parametrize("dtype", ["bf16", "f32"])
def test_head_slices_of_a_fused_qkv_output_are_read_in_place(dtype: str) -> None:
    tokens, heads, kv_heads, dim = 6, 6, 2, 64
    qkv = api.from_numpy(normal((tokens, (heads + 2 * kv_heads) * dim), dtype, seed=11, scale=2.0))
    by_head = qkv.reshape(tokens, heads + 2 * kv_heads, dim)
    q, k, v = by_head[:, :heads], by_head[:, heads:heads + kv_heads], by_head[:, heads + kv_heads:]
    assert not (q.is_contiguous or k.is_contiguous or v.is_contiguous)
    all_heads = f64(qkv.to_numpy()).reshape(tokens, heads + 2 * kv_heads, dim)
    qw, kw = normal((dim,), dtype, seed=12), normal((dim,), dtype, seed=13)
    positions = api.from_numpy(np.arange(3, 3 + tokens, dtype=np.int32))
    caches = nan_caches((16, kv_heads, dim), dtype)  # one sequence's prefill from 3, into its own cache
    k_out = api.full([tokens, kv_heads, dim], np.nan, dtype=DTYPES[dtype])
    q_rotated = qk_norm_rope_cache(q, k, v, qw, kw, positions, caches, theta=1e4, k_out=k_out)
    pos = np.arange(3, 3 + tokens)
    close(q_rotated.to_numpy(), rope_reference(rms_reference(all_heads[:, :heads], f64(qw), 1e-6), pos, 1e4, "neox"),
          dtype)
    k_expected = rope_reference(rms_reference(all_heads[:, heads:heads + kv_heads], f64(kw), 1e-6), pos, 1e4, "neox")
    close(k_out.to_numpy(), k_expected, dtype)
    k_cache, v_cache = f64(caches[0].to_numpy()), f64(caches[1].to_numpy())
    close(k_cache[3:9], k_expected, dtype)
    np.testing.assert_array_equal(v_cache[3:9], all_heads[:, heads + kv_heads:])
    assert np.isnan(k_cache[:3]).all() and np.isnan(k_cache[9:]).all()
    assert np.isnan(v_cache[:3]).all() and np.isnan(v_cache[9:]).all()


@pytest.mark.gpu
@pytest.mark.parametrize("tokens, batch", [(4, 4), (300, 1)], ids=["decode batch 4", "prefill 300"])
def test_qwen3_shapes_on_the_gpu(tokens: int, batch: int) -> None:
    """Qwen3-4B's heads (32 q, 8 kv, 128) as slices of the stacked projection's output,
    positions on the device: a decode step of 4 sequences at one position, and a prefill
    of 300 tokens into one sequence's cache with k's output too."""
    heads, kv_heads, dim, max_seq = 32, 8, 128, 512
    host = normal((tokens, (heads + 2 * kv_heads) * dim), "bf16", seed=30, scale=2.0)
    by_head = api.from_numpy(host).reshape(tokens, heads + 2 * kv_heads, dim)
    q, k, v = by_head[:, :heads], by_head[:, heads:heads + kv_heads], by_head[:, heads + kv_heads:]
    qw, kw = normal((dim,), "bf16", seed=31), normal((dim,), "bf16", seed=32)
    count = tokens // batch
    pos = np.tile(np.arange(100, 100 + count), batch)
    shape = (batch, max_seq, kv_heads, dim) if batch > 1 else (max_seq, kv_heads, dim)
    caches = nan_caches(shape, "bf16")
    k_out = api.full([tokens, kv_heads, dim], np.nan, dtype=bf16) if batch == 1 else None
    q_rotated = qk_norm_rope_cache(q, k, v, api.from_numpy(qw), api.from_numpy(kw),
                                   api.from_numpy(pos.astype(np.int32)), caches, 1e-6, 1e6, k_out=k_out)
    all_heads = f64(host).reshape(tokens, heads + 2 * kv_heads, dim)
    close(q_rotated.to_numpy(), rope_reference(rms_reference(all_heads[:, :heads], f64(qw), 1e-6), pos, 1e6,
                                                "neox"), "bf16")
    k_expected = rope_reference(rms_reference(all_heads[:, heads:heads + kv_heads], f64(kw), 1e-6), pos, 1e6, "neox")
    if k_out is not None:
        close(k_out.to_numpy(), k_expected, "bf16")
    k_cache, v_cache = by_entry(caches[0]), by_entry(caches[1])
    rows = slice(100, 100 + count)
    close(k_cache[:, rows], k_expected.reshape(batch, count, kv_heads, dim), "bf16")
    np.testing.assert_array_equal(v_cache[:, rows], all_heads[:, heads + kv_heads:].reshape(batch, count, kv_heads,
                                                                                             dim))
    assert np.isnan(k_cache[:, :100]).all() and np.isnan(k_cache[:, 100 + count:]).all()
    assert np.isnan(v_cache[:, :100]).all() and np.isnan(v_cache[:, 100 + count:]).all()


@pytest.mark.parametrize("config", [{"block_elems": 256, "max_blocks": 3}, {"block_elems": 2048, "max_blocks": 132}])
def test_cache_tiles_of_a_few_heads_and_blocks_that_loop(config: dict[str, int]) -> None:
    """5 kv heads of 128 in cache tiles of 2 (a tail), 40 q heads; 3 blocks walk many of
    q's tiles, then the caches'; or one block per tile."""
    batch, heads, kv_heads, dim, max_seq = 2, 40, 5, 128, 8
    q, k = normal((batch, heads, dim), "bf16", seed=14, scale=2.0), normal((batch, kv_heads, dim), "bf16", seed=15)
    v = normal((batch, kv_heads, dim), "bf16", seed=16)
    qw, kw = normal((dim,), "bf16", seed=17), normal((dim,), "bf16", seed=18)
    positions = np.full(batch, max_seq - 1, np.int32)  # the cache's last row
    caches = nan_caches((batch, max_seq, kv_heads, dim), "bf16")
    q_rotated = qk_norm_rope_cache(q, k, v, qw, kw, positions, caches, 1e-6, 1e4, config=config)
    close(q_rotated, rope_reference(rms_reference(f64(q), f64(qw), 1e-6), positions, 1e4, "neox"), "bf16")
    k_cache, v_cache = by_entry(caches[0]), by_entry(caches[1])
    close(k_cache[:, -1], rope_reference(rms_reference(f64(k), f64(kw), 1e-6), positions, 1e4, "neox"), "bf16")
    np.testing.assert_array_equal(v_cache[:, -1], f64(v))
    assert np.isnan(k_cache[:, :-1]).all() and np.isnan(v_cache[:, :-1]).all()


def test_sequences_at_different_positions_write_their_own_caches() -> None:
    """A ragged decode step: one call per sequence, each into its batch entry's cache
    (``k_cache[b]``) at its own position; the other entries' rows stay untouched."""
    batch, heads, kv_heads, dim, max_seq = 3, 4, 2, 64, 10
    q, k = normal((batch, heads, dim), "f32", seed=19), normal((batch, kv_heads, dim), "f32", seed=20)
    v = normal((batch, kv_heads, dim), "f32", seed=21)
    w = normal((dim,), "f32", seed=22)
    positions = api.from_numpy(np.array([6, 0, 9], np.int32))
    k_cache, v_cache = nan_caches((batch, max_seq, kv_heads, dim), "f32")
    q_all = api.full([batch, heads, dim], np.nan, dtype=f32)
    q_t, k_t, v_t = api.from_numpy(q), api.from_numpy(k), api.from_numpy(v)
    for b in range(batch):
        qk_norm_rope_cache(q_t[b:b + 1], k_t[b:b + 1], v_t[b:b + 1], w, w, positions[b:b + 1],
                           (k_cache[b], v_cache[b]), out=q_all[b:b + 1])
    pos = np.array([6, 0, 9])
    close(q_all.to_numpy(), rope_reference(rms_reference(f64(q), f64(w), 1e-6), pos, 1e4, "neox"), "f32")
    k_expected = rope_reference(rms_reference(f64(k), f64(w), 1e-6), pos, 1e4, "neox")
    k_values, v_values = f64(k_cache.to_numpy()), f64(v_cache.to_numpy())
    for b, p in enumerate(pos):
        close(k_values[b, p], k_expected[b], "f32")
        np.testing.assert_array_equal(v_values[b, p], f64(v[b]))
        others = np.arange(max_seq) != p
        assert np.isnan(k_values[b, others]).all() and np.isnan(v_values[b, others]).all()
    # one call for the whole batch needs one position for all: refused on the host
    with pytest.raises(cutile.ArgumentError, match=re.escape("token 1 (entry 1, token 0) is at 0, expected 6")):
        qk_norm_rope_cache(q, k, v, w, w, positions, (k_cache, v_cache))


def test_one_launch_and_its_kernel_names() -> None:
    q, k, v = api.randn([2, 6, 64], "bf16", seed=1), api.randn([2, 2, 64], "bf16", seed=2), api.randn([2, 2, 64],
                                                                                                     "bf16", seed=3)
    w = api.ones([64], "bf16")
    caches = (api.zeros([2, 8, 2, 64], "bf16"), api.zeros([2, 8, 2, 64], "bf16"))
    positions = api.full([2], 3, dtype="i32")
    for k_out, name in ((None, "qk_norm_rope_cache_q"), (api.empty([2, 2, 64], "bf16"), "qk_norm_rope_cache_heads")):
        launch = qk_norm_rope_cache.launch(q, k, v, w, w, positions, caches, out=api.empty([2, 6, 64], "bf16"),
                                           k_out=k_out)
        assert isinstance(launch, cutile.Launch)  # one kernel, not an op of several
        assert launch.kernel.name == name
        launch.cancel()


@pytest.mark.interpreter_only
def test_the_kernel_asserts_device_positions() -> None:
    """What a device tensor of positions meets (the host never reads it): the kernel's own
    checks, run here on the interpreter by launching the kernel itself."""
    kernel = cache_module.qk_norm_rope_cache_kernel(f32, f32, f32, i32, False, 1)
    q, kv = api.ones([4, 2, 8]), api.ones([4, 1, 8])
    w = api.ones([8])
    for values, message in (([5, 5, 6, 5], "positions must be start, start + 1, ... in every batch entry"),
                            ([9, 9, 9, 9], "tiles_within: the range of axis 1 passes the tile grid")):
        k_cache, v_cache = api.zeros([4, 9, 8]), api.zeros([4, 9, 8])
        with pytest.raises(cutile.KernelRuntimeError, match=re.escape(message)):
            kernel(api.empty([4, 2, 8]).partition([4, 2, 8]).map([1, 1, 1], blocks=2),
                   k_cache.partition([1, 1, 8]).map([1, 1, 1], blocks=2),
                   v_cache.partition([1, 1, 8]).map([1, 1, 1], blocks=2), q, kv, kv, w, w,
                   api.from_numpy(np.array(values, np.int32)), 1, 1e-6, 1 / 8, -0.5, BHC=1, NEOX=True).sync()


Q = np.ones((4, 4, 16), np.float32)
K = np.ones((4, 2, 16), np.float32)
W = np.ones(16, np.float32)
P = np.full(4, 3, np.int32)


def caches(shape: tuple[int, ...] = (4, 8, 2, 16), dtype: Any = np.float32) -> tuple[Any, Any]:
    return np.zeros(shape, dtype), np.zeros(shape, dtype)


def call(q: Any = Q, k: Any = K, v: Any = K, positions: Any = P, kv_cache: Any = None, **options: Any) -> Any:
    return qk_norm_rope_cache(q, k, v, W, W, positions, caches() if kv_cache is None else kv_cache, **options)


SHARED = np.zeros((2, 4, 8, 2, 16), np.float32)


@pytest.mark.parametrize("thunk, error, message", [
    (lambda: call(positions=np.full(4, 8, np.int32)), cutile.ArgumentError,
     "'positions' starts at 8: the 1 tokens of each batch entry must fit in the cache's 8 positions (start from 0 "
     "to 7)"),
    (lambda: call(positions=np.full(4, 8, np.int32) - 9), cutile.ArgumentError, "'positions' starts at -1"),
    (lambda: call(positions=np.array([3, 3, 4, 3], np.int32)), cutile.ArgumentError,
     "token 2 (entry 2, token 0) is at 4, expected 3"),
    (lambda: call(Q[:2], K[:2], K[:2], P[:2], kv_cache=caches((8, 2, 16)), ), cutile.ArgumentError,
     "token 1 (entry 0, token 1) is at 3, expected 4"),
    (lambda: call(positions=P[:3]), cutile.ArgumentError, "'positions' has shape [3]"),
    (lambda: call(positions=P.astype(np.float32)), cutile.ArgumentTypeError, "positions"),
    (lambda: call(kv_cache=caches((4, 8, 3, 16))), cutile.ArgumentError,
     "'kv_cache[0]' has shape [4, 8, 3, 16]; expected (max_seq, 2, 16) or (batch, max_seq, 2, 16)"),
    (lambda: call(kv_cache=caches((4, 8, 2, 16), np.float16)), cutile.ArgumentTypeError,
     "'kv_cache[0]' has dtype f16; expected q's f32"),
    (lambda: call(kv_cache=(np.zeros((4, 8, 2, 16), np.float32), np.zeros((4, 9, 2, 16), np.float32))),
     cutile.ArgumentError, "'kv_cache[1]' has shape [4, 9, 2, 16] and 'kv_cache[0]' [4, 8, 2, 16]"),
    (lambda: call(kv_cache=(SHARED[0], SHARED[0])), cutile.ArgumentError, "share memory"),
    (lambda: call(kv_cache=(np.zeros((4, 8, 4, 16), np.float32)[:, :, :2], np.zeros((4, 8, 2, 16), np.float32))),
     cutile.ArgumentError, "'kv_cache[0]' of shape [4, 8, 2, 16] must be contiguous"),
    (lambda: call(kv_cache=caches()[0]), cutile.ArgumentError, "'kv_cache' must be a pair (k_cache, v_cache)"),
    (lambda: call(kv_cache=caches((3, 8, 2, 16))), cutile.ArgumentError,
     "q's 4 tokens must be a positive multiple of the caches' batch 3"),
    (lambda: call(kv_cache=caches((1, 3, 2, 16)), positions=np.arange(4, dtype=np.int32)), cutile.ArgumentError,
     "4 tokens per batch entry do not fit in the cache's 3 positions"),
    (lambda: call(np.ones((2, 2, 4, 16), np.float32), np.ones((2, 2, 2, 16), np.float32),
                  np.ones((2, 2, 2, 16), np.float32), np.zeros((2, 2), np.int32)), cutile.ArgumentError,
     "has 2 batch entries and the caches [4, 8, 2, 16] 4"),
    (lambda: call(v=np.ones((4, 1, 16), np.float32)), cutile.ArgumentError, "v has shape [4, 1, 16]; expected k's"),
    (lambda: call(v=K.astype(np.float16)), cutile.ArgumentTypeError, "v has dtype f16 and q f32"),
    (lambda: call(k=np.ones((4, 2, 8), np.float32)), cutile.ArgumentError, "must have one head dim"),
    (lambda: call(style="llama"), cutile.ArgumentError, "'style' must be 'neox' or 'gptj'"),
    (lambda: call(theta=0.5), cutile.ArgumentError, "'theta' must be a finite number above 1"),
    (lambda: call(out=np.ones((4, 4, 8), np.float32)), cutile.ArgumentError, "out has shape"),
    (lambda: call(k_out=np.ones((4, 1, 16), np.float32)), cutile.ArgumentError, "k_out has shape"),
    (lambda: call(out=SHARED[0, 0].reshape(4, 4, 16), kv_cache=(SHARED[0], SHARED[1])), cutile.ArgumentError,
     "'kv_cache[0]' overlaps the memory of out"),
    (lambda: call(kv_cache=(SHARED[0], SHARED[1]), k=SHARED[1, :, 0]), cutile.ArgumentError,
     "'kv_cache[1]' overlaps the memory of k"),
    (lambda: call(config={"tile_rows": 4}), cutile.ArgumentError, "tile_rows"),
])
def test_errors_name_the_parameter(thunk: Any, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=re.escape(message)):
        thunk()


def test_a_refused_call_writes_nothing() -> None:
    k_cache, v_cache = caches()
    with pytest.raises(cutile.ArgumentError, match="'positions' starts at 8"):
        call(positions=np.full(4, 8, np.int32), kv_cache=(k_cache, v_cache))
    assert not k_cache.any() and not v_cache.any()


meta = api.meta


@pytest.mark.parametrize("with_k", [False, True], ids=["q only", "with k_out"])
def test_the_kernels_compile(with_k: bool) -> None:
    """The decode form (Qwen3-4B's 32 q and 8 kv heads of 128, batch 4, i32 positions)
    and the prefill form with k's output (i64 positions, gptj)."""
    kernel = cache_module.qk_norm_rope_cache_kernel(bf16, bf16, bf16, i64 if with_k else i32, with_k, 2)
    tokens = 512 if with_k else 4
    arguments: list[Any] = [meta([tokens, 32, 128], dtype=bf16).partition([1, 8, 128]).map([1, 1, 1], blocks=64)]
    if with_k:
        arguments.append(meta([tokens, 8, 128], dtype=bf16).partition([1, 8, 128]).map([1, 1, 1], blocks=64))
    arguments += [meta([4, 4096, 1024], dtype=bf16).partition([1, 1, 1024]).map([1, 1, 1], blocks=64)
                  for _ in range(2)]
    arguments += [meta([tokens, 32, 128], dtype=bf16), meta([tokens, 8, 128], dtype=bf16),
                  meta([tokens, 8, 128], dtype=bf16), meta([128], dtype=bf16), meta([128], dtype=bf16),
                  meta([tokens], dtype=i64 if with_k else i32), tokens // 4, 1e-6, 1 / 128, -0.2]
    compiled = cutile.compile(kernel, *arguments, arch="sm_90", BHC=8, NEOX=not with_k)
    assert compiled.cubin


@pytest.mark.parametrize("with_k_out", [False, True], ids=["decode", "k_out"])
def test_a_call_in_known_layouts_takes_its_plan_and_still_checks_what_can_change(with_k_out: bool) -> None:
    """A call of cutile tensors with out given keeps its plan by the operands' layouts and
    memory: a call in them again (new values in the same memory, new view objects) takes
    it and computes right; another stride or theta is planned afresh; a bad eps, host
    positions past the cache and a consumed tensor are still refused."""
    batch, heads, kv_heads, dim, max_seq, theta = 3, 4, 2, 64, 12, 1e6
    arrays = [normal((batch, heads, dim), "bf16", seed=31), normal((batch, kv_heads, dim), "bf16", seed=32),
              normal((batch, kv_heads, dim), "bf16", seed=33)]
    q, k, v = (api.from_numpy(a) for a in arrays)
    qw, kw = api.from_numpy(normal((dim,), "bf16", seed=34)), api.from_numpy(normal((dim,), "bf16", seed=35))
    positions = api.from_numpy(np.full(batch, 4, np.int32))
    caches = nan_caches((batch, max_seq, kv_heads, dim), "bf16")
    out = api.full([batch, heads, dim], np.nan, dtype=bf16)
    k_out = api.full([batch, kv_heads, dim], np.nan, dtype=bf16) if with_k_out else None
    cache_module._PLANS.clear()

    def check(q_values: Any, k_values: Any, v_values: Any, at: int, used_theta: float = theta) -> None:
        pos = np.full(batch, at)
        close(out.to_numpy(), rope_reference(rms_reference(f64(q_values), f64(qw.to_numpy()), 1e-6), pos,
                                             used_theta, "neox"), "bf16")
        k_expected = rope_reference(rms_reference(f64(k_values), f64(kw.to_numpy()), 1e-6), pos, used_theta, "neox")
        if k_out is not None:
            close(k_out.to_numpy(), k_expected, "bf16")
        close(by_entry(caches[0])[:, at], k_expected, "bf16")
        np.testing.assert_array_equal(by_entry(caches[1])[:, at], f64(v_values))

    assert qk_norm_rope_cache(q, k, v, qw, kw, positions, caches, 1e-6, theta, out=out, k_out=k_out) is out
    check(*arrays, 4)
    assert len(cache_module._PLANS) == 1
    kept = next(iter(cache_module._PLANS.values()))
    new = [normal(a.shape, "bf16", seed=36 + i, scale=2.0) for i, a in enumerate(arrays)]
    for tensor, values in zip((q, k, v), new):
        tensor.host_view()[...] = values
    positions.host_view()[...] = 7  # a new position in the same memory: checked on the host, written there
    view = out[...]
    k_view = None if k_out is None else k_out[...]
    assert qk_norm_rope_cache(q[...], k[...], v[...], qw, kw, positions[...], (caches[0][...], caches[1][...]),
                              1e-6, theta, out=view, k_out=k_view) is view
    assert len(cache_module._PLANS) == 1 and next(iter(cache_module._PLANS.values())) is kept
    check(*new, 7)
    qk_norm_rope_cache(q, k, v, qw, kw, positions, caches, 1e-6, 1e4, out=out, k_out=k_out)  # another theta
    check(*new, 7, used_theta=1e4)
    wide = api.from_numpy(normal((batch, heads + 2 * kv_heads, dim), "bf16", seed=40))  # strided head slices
    q_s, k_s, v_s = wide[:, :heads], wide[:, heads:heads + kv_heads], wide[:, heads + kv_heads:]
    qk_norm_rope_cache(q_s, k_s, v_s, qw, kw, positions, caches, 1e-6, theta, out=out, k_out=k_out)
    whole = wide.to_numpy()
    check(whole[:, :heads], whole[:, heads:heads + kv_heads], whole[:, heads + kv_heads:], 7)
    assert len(cache_module._PLANS) == 3
    with pytest.raises(cutile.ArgumentError, match="eps must be a finite number"):
        qk_norm_rope_cache(q, k, v, qw, kw, positions, caches, -1.0, theta, out=out, k_out=k_out)
    positions.host_view()[...] = max_seq
    with pytest.raises(cutile.ArgumentError, match="parameter 'positions' starts at 12"):
        qk_norm_rope_cache(q, k, v, qw, kw, positions, caches, 1e-6, theta, out=out, k_out=k_out)
    positions.host_view()[...] = 7
    taken = out.partition([1, 1, dim])
    with pytest.raises(cutile.OwnershipError, match="consumed"):
        qk_norm_rope_cache(q, k, v, qw, kw, positions, caches, 1e-6, theta, out=out, k_out=k_out)
    del taken
