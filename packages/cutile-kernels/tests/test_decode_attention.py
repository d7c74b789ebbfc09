"""decode_attention against a float64 numpy reference on the interpreter (GQA, ragged
lengths, several split counts, one launch and two, poisoned outputs and caches), its
plans, its argument errors, its kernels compiled for sm_90 and sm_100, and GPU runs at
the benchmark's shapes."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

import cutile
from cutile import api
from cutile.core import bf16, f16, f32, i32

from cutile_kernels._decode_attention import DEFAULT, Plan, decode_attention, decode_kernels, decode_whole_kernel, \
    distinct_launches, next_pow2, plan

ml_dtypes = pytest.importorskip("ml_dtypes")
NP_DTYPES = {"f16": np.float16, "bf16": ml_dtypes.bfloat16}


def inputs(batch: int, q_heads: int, kv_heads: int, max_seq: int, head_dim: int, dtype: str,
           lens: list[int], seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Random q and caches whose positions past each length hold NaN (they must not be read)."""
    rng = np.random.default_rng(seed)
    np_dtype = NP_DTYPES[dtype]
    q = rng.standard_normal((batch, q_heads, head_dim)).astype(np_dtype)
    k = rng.standard_normal((batch, kv_heads, max_seq, head_dim)).astype(np_dtype)
    v = rng.standard_normal((batch, kv_heads, max_seq, head_dim)).astype(np_dtype)
    for b, n in enumerate(lens):
        k[b, :, n:] = np.nan
        v[b, :, n:] = np.nan
    return q, k, v, np.array(lens, dtype=np.int32)


def reference(q: np.ndarray, k: np.ndarray, v: np.ndarray, lens: np.ndarray, scale: float) -> np.ndarray:
    batch, q_heads, head_dim = q.shape
    group = q_heads // k.shape[1]
    out = np.zeros((batch, q_heads, head_dim))
    for b in range(batch):
        n = int(lens[b])
        for h in range(q_heads):
            keys = k[b, h // group, :n].astype(np.float64)
            values = v[b, h // group, :n].astype(np.float64)
            s = keys @ q[b, h].astype(np.float64) * scale
            p = np.exp(s - s.max()) if n else s
            out[b, h] = p @ values / p.sum() if n else 0.0
    return out


def poisoned(shape: tuple[int, ...], dtype: str) -> np.ndarray:
    return np.full(shape, np.nan, dtype=NP_DTYPES[dtype])


SMALL = (3, 8, 2, 100, 64)
LENS = [1, 37, 100]


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_matches_float64_with_gqa_and_ragged_lengths(dtype: str) -> None:
    q, k, v, lens = inputs(*SMALL, dtype, LENS)
    out = poisoned(q.shape, dtype)
    result = decode_attention(q, k, v, lens, out=out)
    assert result is out
    tolerance = 2e-2 if dtype == "bf16" else 4e-3
    np.testing.assert_allclose(out.astype(np.float64), reference(q, k, v, lens, 1 / 8), atol=tolerance, rtol=0)


@pytest.mark.parametrize("config", [{"splits": 1, "tile_n": 32}, {"splits": 2, "tile_n": 16},
                                    {"splits": 3, "tile_n": 32}, {"splits": 128, "tile_n": 16},
                                    {"splits": 0, "tile_n": 64, "latency": 4, "num_worker_warps": 8, "occupancy": 1}])
def test_split_counts_give_the_same_result(config: dict[str, Any]) -> None:
    q, k, v, lens = inputs(*SMALL, "f16", LENS, seed=1)
    expected = decode_attention(q, k, v, lens, config={"splits": 1, "tile_n": 128}).astype(np.float64)
    got = decode_attention(q, k, v, lens, config=config).astype(np.float64)
    np.testing.assert_allclose(got, reference(q, k, v, lens, 1 / 8), atol=4e-3, rtol=0)
    np.testing.assert_allclose(got, expected, atol=2e-3, rtol=0)


def test_one_out_over_caches_of_other_kv_heads_gets_a_workspace_of_their_shape() -> None:
    """The split form's workspace is made once per out; out's shape fixes the batch but not
    the kv heads, so a call with more kv heads must not reuse a smaller workspace."""
    from cutile import api

    out = api.from_numpy(poisoned((2, 8, 64), "f16"))
    for kv_heads, seed in ((2, 3), (4, 4)):
        q, k, v, lens = inputs(2, 8, kv_heads, 32, 64, "f16", [32, 20], seed=seed)
        decode_attention(api.from_numpy(q), api.from_numpy(k), api.from_numpy(v), api.from_numpy(lens), out=out,
                         config={"splits": 2, "tile_n": 16})
        np.testing.assert_allclose(out.to_numpy().astype(np.float64), reference(q, k, v, lens, 1 / 8), atol=4e-3,
                                   rtol=0)


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("head_blocks", [1, 2, 4])
def test_one_launch_matches_float64(dtype: str, head_blocks: int) -> None:
    """One launch (splits 1): a block per 4, 2 or 1 q heads of a kv head walks the whole
    context (lengths 1, 37, 100 of 100: tails of tiles of 16 and 32) into a poisoned out."""
    q, k, v, lens = inputs(*SMALL, dtype, LENS, seed=6)
    out = poisoned(q.shape, dtype)
    for tile_n in (16, 32):
        out[:] = np.nan
        decode_attention(q, k, v, lens, out=out, config={"splits": 1, "tile_n": tile_n, "head_blocks": head_blocks})
        tolerance = 2e-2 if dtype == "bf16" else 4e-3
        np.testing.assert_allclose(out.astype(np.float64), reference(q, k, v, lens, 1 / 8), atol=tolerance, rtol=0)


def test_one_launch_with_a_group_of_three_a_zero_length_and_tokens_first_caches() -> None:
    """9 q heads over 3 kv heads (blocks of one q head), head_dim 128, a sequence of length
    0 (zeros), caches passed as transposed views of (batch, max_seq, kv_heads, head_dim)."""
    q, k, v, lens = inputs(3, 9, 3, 70, 128, "bf16", [0, 70, 33], seed=7)
    k_view = np.ascontiguousarray(k.transpose(0, 2, 1, 3)).transpose(0, 2, 1, 3)
    v_view = np.ascontiguousarray(v.transpose(0, 2, 1, 3)).transpose(0, 2, 1, 3)
    out = poisoned(q.shape, "bf16")
    decode_attention(q, k_view, v_view, lens.astype(np.int64), scale=0.2, out=out, config={"splits": 1, "tile_n": 32})
    assert np.all(out[0].astype(np.float64) == 0)
    np.testing.assert_allclose(out.astype(np.float64), reference(q, k, v, lens, 0.2), atol=2e-2, rtol=0)


def test_scale_and_odd_group_and_i64_lengths() -> None:
    # 6 q heads over 2 kv heads: a group of 3 (padded to the MMA's rows), head_dim 128
    q, k, v, lens = inputs(2, 6, 2, 45, 128, "bf16", [45, 20], seed=2)
    got = decode_attention(q, k, v, lens.astype(np.int64), scale=0.3, config={"splits": 2, "tile_n": 16})
    np.testing.assert_allclose(got.astype(np.float64), reference(q, k, v, lens, 0.3), atol=2e-2, rtol=0)


def test_a_zero_length_gives_zeros() -> None:
    q, k, v, lens = inputs(2, 4, 4, 20, 64, "f16", [0, 20], seed=3)
    got = decode_attention(q, k, v, lens).astype(np.float64)
    assert np.all(got[0] == 0)
    np.testing.assert_allclose(got, reference(q, k, v, lens, 1 / 8), atol=4e-3, rtol=0)


@pytest.mark.parametrize("kind", ["numpy", "list", "cutile"])
def test_lengths_the_host_holds_are_checked_on_the_host(kind: str) -> None:
    q, k, v, _ = inputs(2, 4, 1, 16, 64, "f16", [16, 16])

    def lens(values: list[int]) -> Any:
        return {"numpy": np.array(values, np.int32), "list": values,
                "cutile": api.from_numpy(np.array(values, np.int64))}[kind]
    for values, wrong in (([3, 17], "holds 17 at [1]"), ([-1, 2], "holds -1 at [0]")):
        with pytest.raises(cutile.ArgumentError, match=re.escape(f"parameter 'seq_lens' {wrong}; each length must "
                                                                 "be from 0 to the caches' max_seq 16")):
            decode_attention(q, k, v, lens(values))
    got = decode_attention(q, k, v, lens([16, 5])).astype(np.float64)
    np.testing.assert_allclose(got, reference(q, k, v, np.array([16, 5]), 1 / 8), atol=4e-3, rtol=0)


def test_a_list_of_lengths_must_hold_ints() -> None:
    q, k, v, _ = inputs(2, 4, 1, 16, 64, "f16", [16, 16])
    with pytest.raises(cutile.ArgumentTypeError, match="parameter 'seq_lens' must hold ints"):
        decode_attention(q, k, v, [3, 4.0])


def test_device_lengths_past_the_cache_fail_the_split_kernels_assert() -> None:
    """What a device tensor of lengths meets (the host never reads it): the split kernel's
    assert, run here on the interpreter by launching the kernel itself."""
    q, k, v, _ = inputs(1, 4, 1, 16, 64, "f16", [16])
    split_kernel, _ = decode_kernels(f16, i32, 1)
    rows = 8  # the group of 4 q heads padded to the products' 8 columns
    for length, message in ((17, "must not exceed"), (-1, "must not be negative")):
        acc, stats = api.empty([1, 1, rows * 64], dtype=f32), [api.empty([1, 1, rows], dtype=f32) for _ in range(2)]
        with pytest.raises(cutile.KernelRuntimeError, match=message):
            split_kernel(acc.partition([1, 1, rows * 64]), stats[0].partition([1, 1, rows]),
                         stats[1].partition([1, 1, rows]), api.from_numpy(q, f16), api.from_numpy(k, f16),
                         api.from_numpy(v, f16), api.from_numpy(np.array([length], np.int32)), 0.18, 1,
                         KV_HEADS=1, GROUP=4, BN=16).sync()


def test_device_lengths_past_the_cache_fail_the_one_launch_kernels_assert() -> None:
    q, k, v, _ = inputs(1, 4, 1, 16, 64, "f16", [16])
    whole = decode_whole_kernel(f16, i32, 1)
    for length, message in ((17, "must not exceed"), (-1, "must not be negative")):
        with pytest.raises(cutile.KernelRuntimeError, match=message):
            whole(api.empty([1, 4, 64], dtype=f16).partition([1, 4, 64]), api.from_numpy(q, f16),
                  api.from_numpy(k, f16), api.from_numpy(v, f16), api.from_numpy(np.array([length], np.int32)),
                  0.18, GROUP=4, GP=8, BN=16).sync()


def test_launch_form_on_cutile_tensors() -> None:
    q, k, v, lens = inputs(*SMALL, "bf16", LENS, seed=4)
    out = api.full(list(q.shape), np.nan, dtype=bf16)
    pending = decode_attention.launch(api.from_numpy(q, bf16), api.from_numpy(k, bf16), api.from_numpy(v, bf16),
                                      api.from_numpy(lens, i32), out=out)
    assert pending.run() is out
    np.testing.assert_allclose(out.to_numpy().astype(np.float64), reference(q, k, v, lens, 1 / 8), atol=2e-2,
                               rtol=0)


def test_plan_fills_the_gpu_and_covers_the_context() -> None:
    one = plan({"tile_n": 64, "splits": 0, "waves": 2}, (1, 32, 8, 32768, 128))
    # 2 waves over 8 kv heads want 33 splits of 512 tiles: 16 tiles each, so 32 splits (256 blocks)
    assert (one.splits, one.tiles_per_split) == (32, 16)
    many = plan({"tile_n": 64, "splits": 0, "waves": 2}, (64, 32, 8, 1024, 128))
    assert many == Plan(64, 16, 1, 4)  # one split: one launch, a block per kv head
    short = plan({"tile_n": 64, "splits": 8, "waves": 2}, (1, 1, 1, 100, 64))
    assert (short.splits, short.tiles_per_split) == (2, 1)
    # batch 8 x 8 kv heads at 2 blocks per SM: 5 splits (320 blocks) would run a second round
    # of 264 places a fifth full; 8 (512 blocks) fill two rounds
    eight = plan({"tile_n": 64, "splits": 0, "waves": 2, "occupancy": 2}, (8, 32, 8, 32768, 128))
    assert (eight.splits, eight.tiles_per_split) == (8, 64)


@pytest.mark.parametrize("batch,max_seq,splits", [(1, 256, 1), (1, 512, 8), (1, 1024, 16), (1, 32768, 32),
                                                  (8, 256, 1), (8, 1024, 4), (16, 512, 1), (16, 8192, 4),
                                                  (32, 1024, 1), (64, 32768, 1)])
def test_the_default_weighs_one_launch_against_two(batch: int, max_seq: int, splits: int) -> None:
    """splits 0: one launch where a block's walk of the whole context costs less than two
    launches' smaller walks plus the merge (the cost model's figures in the module)."""
    chosen = plan(DEFAULT, (batch, 32, 8, max_seq, 128))
    assert chosen.splits == splits
    assert chosen.one_launch == (splits == 1)
    assert chosen.tiles_per_split * chosen.splits * chosen.tile_n >= max_seq  # the context is covered


@pytest.mark.parametrize("group,head_blocks,heads", [(4, 1, 4), (4, 2, 2), (4, 4, 1), (4, 8, 1), (3, 1, 1),
                                                     (6, 1, 2), (6, 2, 2), (6, 4, 1), (1, 2, 1), (16, 4, 4)])
def test_one_launch_blocks_take_a_power_of_two_of_a_groups_heads(group: int, head_blocks: int, heads: int) -> None:
    one = plan({**DEFAULT, "splits": 1, "head_blocks": head_blocks}, (2, 2 * group, 2, 300, 64))
    assert (one.splits, one.heads_per_block) == (1, heads)
    two = plan({**DEFAULT, "splits": 2, "head_blocks": head_blocks}, (2, 2 * group, 2, 300, 64))
    assert (two.splits, two.heads_per_block) == (2, group)  # a split block takes the whole group


def test_a_search_times_each_distinct_launch_once() -> None:
    """At batch 1 x context 100 (2 tiles of 64): splits 2 to 64 are one plan, head_blocks
    matters for one launch only, waves for splits 0 only."""
    worth = distinct_launches((1, 8, 2, 100, 64))
    base = {**DEFAULT, "tile_n": 64}
    assert worth({**base, "splits": 2}) and not worth({**base, "splits": 64})
    assert worth({**base, "splits": 1}) and worth({**base, "splits": 1, "head_blocks": 2})
    assert not worth({**base, "splits": 2, "head_blocks": 2})
    assert not worth({**base, "splits": 2, "waves": 4})
    assert worth({**base, "splits": 2, "occupancy": 4})


BAD: list[tuple[str, dict[str, Any], str, type[Exception]]] = [
    ("q", {"q": "not a tensor"}, "q", cutile.ArgumentTypeError),
    ("q dtype", {"q": np.zeros((3, 8, 64), np.float32)}, "'q' has dtype f32", cutile.ArgumentTypeError),
    ("k dtype", {"k_cache": np.zeros((3, 2, 100, 64), np.float32)}, "'k_cache' has dtype",
     cutile.ArgumentTypeError),
    ("head_dim", {"q": np.zeros((3, 8, 32), np.float16)}, "'q' has head_dim 32", cutile.ArgumentError),
    ("kv heads", {"k_cache": np.zeros((3, 3, 100, 64), np.float16), "v_cache": np.zeros((3, 3, 100, 64), np.float16)},
     "'k_cache' has 3 kv heads", cutile.ArgumentError),
    ("v shape", {"v_cache": np.zeros((3, 2, 99, 64), np.float16)}, "'v_cache' has shape", cutile.ArgumentError),
    ("lens dtype", {"seq_lens": np.zeros(3, np.float32)}, "'seq_lens' has dtype", cutile.ArgumentTypeError),
    ("lens shape", {"seq_lens": np.zeros(2, np.int32)}, "'seq_lens' has shape", cutile.ArgumentError),
    ("scale", {"scale": float("nan")}, "'scale' must be a finite", cutile.ArgumentTypeError),
    ("out shape", {"out": np.zeros((3, 8, 32), np.float16)}, "'out' has shape", cutile.ArgumentError),
    ("out dtype", {"out": np.zeros((3, 8, 64), ml_dtypes.bfloat16)}, "'out' has dtype", cutile.ArgumentTypeError),
    ("config", {"config": {"split": 2}}, "config key 'split' is unknown", cutile.ArgumentError),
    ("config value", {"config": {"splits": "a"}}, r"config\['splits'\] must be an int", cutile.ArgumentError),
]


@pytest.mark.parametrize("name,change,message,error", BAD, ids=[case[0] for case in BAD])
def test_bad_arguments_name_the_parameter(name: str, change: dict[str, Any], message: str,
                                          error: type[Exception]) -> None:
    q, k, v, lens = inputs(*SMALL, "f16", LENS)
    arguments: dict[str, Any] = {"q": q, "k_cache": k, "v_cache": v, "seq_lens": lens, **change}
    with pytest.raises(error, match=message):
        decode_attention(**arguments)


def test_out_overlapping_an_input_is_refused() -> None:
    q, k, v, lens = inputs(*SMALL, "f16", LENS)
    with pytest.raises(cutile.ArgumentError, match="'out' overlaps the memory of parameter 'q'"):
        decode_attention(q, k, v, lens, out=q)


def test_launch_requires_out() -> None:
    q, k, v, lens = inputs(*SMALL, "f16", LENS)
    with pytest.raises(cutile.ArgumentError, match="'out' is required"):
        decode_attention.launch(q, k, v, lens, out=None)


@pytest.mark.parametrize("arch", ["sm_90", "sm_100"])
@pytest.mark.parametrize("dtype", [f16, bf16])
def test_kernels_compile(arch: str, dtype: Any) -> None:
    """The benchmark's shape: batch 8, 32 q / 8 kv heads, d=128, an 8k cache."""
    batch, q_heads, kv_heads, max_seq, head_dim, rows, splits = 8, 32, 8, 8192, 128, 8, 4
    split_kernel, merge_kernel = decode_kernels(dtype, i32, 2, 8, 4)
    meta = api.meta
    acc = meta([batch * kv_heads, splits, rows * head_dim], dtype=f32)
    stats = meta([batch * kv_heads, splits, rows], dtype=f32)
    split = cutile.compile(split_kernel, acc.partition([1, 1, rows * head_dim]), stats.partition([1, 1, rows]),
                           meta([batch * kv_heads, splits, rows], dtype=f32).partition([1, 1, rows]),
                           meta([batch, q_heads, head_dim], dtype=dtype),
                           meta([batch, kv_heads, max_seq, head_dim], dtype=dtype),
                           meta([batch, kv_heads, max_seq, head_dim], dtype=dtype), meta([batch], dtype=i32),
                           0.127, 32, KV_HEADS=kv_heads, GROUP=q_heads // kv_heads, BN=64, arch=arch)
    merge = cutile.compile(merge_kernel, meta([batch, q_heads, head_dim], dtype=dtype).partition([1, 1, head_dim]),
                           acc, stats, stats, KV_HEADS=kv_heads, GROUP=q_heads // kv_heads, SP=next_pow2(splits),
                           arch=arch)
    assert split.cubin and merge.cubin
    assert "occupancy = 2" in split.mlir
    if arch == "sm_90":
        assert "num_worker_warps_per_cta = 8" in split.mlir


@pytest.mark.parametrize("arch", ["sm_90", "sm_100"])
@pytest.mark.parametrize("heads", [4, 1])
def test_one_launch_kernel_compiles(arch: str, heads: int) -> None:
    """Batch 1 at the benchmark's heads, a 1k cache: a block per kv head or per q head."""
    batch, q_heads, kv_heads, max_seq, head_dim = 1, 32, 8, 1024, 128
    whole = decode_whole_kernel(bf16, i32, 1, 4, 4)
    meta = api.meta
    compiled = cutile.compile(whole, meta([batch, q_heads, head_dim], dtype=bf16).partition([1, heads, head_dim]),
                              meta([batch, q_heads, head_dim], dtype=bf16),
                              meta([batch, kv_heads, max_seq, head_dim], dtype=bf16),
                              meta([batch, kv_heads, max_seq, head_dim], dtype=bf16), meta([batch], dtype=i32),
                              0.127, GROUP=q_heads // kv_heads, GP=8, BN=64, arch=arch)
    assert compiled.cubin
    assert "occupancy = 1" in compiled.mlir


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("batch,max_seq", [(1, 1024), (8, 8192), (64, 1024), (1, 32768)])
def test_gpu_matches_torch_sdpa(dtype: str, batch: int, max_seq: int) -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA device")
    torch_dtype = {"f16": torch.float16, "bf16": torch.bfloat16}[dtype]
    generator = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(batch, 32, 128, device="cuda", dtype=torch_dtype, generator=generator)
    k = torch.randn(batch, 8, max_seq, 128, device="cuda", dtype=torch_dtype, generator=generator)
    v = torch.randn(batch, 8, max_seq, 128, device="cuda", dtype=torch_dtype, generator=generator)
    lens = torch.randint(1, max_seq, (batch,), device="cuda", dtype=torch.int32, generator=generator)
    lens[0] = max_seq - 1
    clean_k, clean_v = k.double(), v.double()
    k[:, :, -1] = float("nan")  # past every length: must not be read
    v[:, :, -1] = float("nan")
    out = torch.full_like(q, float("nan"))
    decode_attention(q, k, v, lens, out=out)
    torch.cuda.synchronize()
    mask = torch.arange(max_seq, device="cuda")[None, :] < lens[:, None].long()
    expected = torch.nn.functional.scaled_dot_product_attention(
        q.double()[:, :, None], clean_k, clean_v, attn_mask=mask[:, None, None, :],
        enable_gqa=True)[:, :, 0]
    torch.testing.assert_close(out.double(), expected, atol=2e-2 if dtype == "bf16" else 4e-3, rtol=0)


def test_a_cache_in_kv_cache_update_layout_through_a_transposed_view() -> None:
    """kv_cache_update's (batch, max_seq, kv_heads, head_dim) cache, passed as the
    (batch, kv_heads, max_seq, head_dim) view of it (strides, no copy)."""
    q, k, v, lens = inputs(*SMALL, "f16", LENS, seed=5)
    k_tokens_first = np.ascontiguousarray(k.transpose(0, 2, 1, 3))
    v_tokens_first = np.ascontiguousarray(v.transpose(0, 2, 1, 3))
    got = decode_attention(q, k_tokens_first.transpose(0, 2, 1, 3), v_tokens_first.transpose(0, 2, 1, 3), lens,
                           config={"splits": 3, "tile_n": 16})
    np.testing.assert_allclose(got.astype(np.float64), reference(q, k, v, lens, 1 / 8), atol=4e-3, rtol=0)


DEVICE_ASSERT = """
import numpy as np
import cutile
from cutile import api
from cutile_kernels import decode_attention, kv_cache_update

try:
    if {case!r} == "decode_attention":
        q, k = api.zeros([1, 4, 64], dtype="f16"), api.zeros([1, 1, 16, 64], dtype="f16")
        decode_attention(q, k, k, api.from_numpy(np.array([17], np.int32))).to_numpy()
    else:
        cache = api.zeros([20, 2, 8])
        kv_cache_update(cache, api.ones([3, 2, 8]), api.from_numpy(np.array([4, 5, 7], np.int32)))
        cache.to_numpy()
except cutile.CudaError as exc:
    print("CudaError:", exc)
else:
    print("no error")
"""


@pytest.mark.gpu
@pytest.mark.parametrize("case", ["decode_attention", "kv_cache_update"])
def test_gpu_device_tensors_out_of_range_fail_the_kernels_assert(case: str) -> None:
    """What the docstrings say of device lengths and positions: the kernel's assert fails
    and a synchronizing call raises cutile.CudaError (in a process of its own: the CUDA
    context is unusable afterwards)."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", DEVICE_ASSERT.format(case=case)], capture_output=True, text=True,
                          timeout=300)
    assert "CudaError:" in done.stdout, done.stdout + done.stderr


@pytest.mark.parametrize("shape, lens, new_lens", [(SMALL, LENS, [5, 100, 2]), ((1, 8, 2, 3000, 64), [2000], [2999])],
                         ids=["one_launch", "split"])
def test_a_call_in_known_layouts_takes_its_plan_and_still_checks_the_lengths(
        shape: tuple[int, ...], lens: list[int], new_lens: list[int]) -> None:
    """decode_attention of cutile tensors with out given keeps its plan by the operands'
    layouts and memory: a call in them again (new values in the same memory, new view
    objects) takes it and computes right; other caches (another stride) or another scale
    are planned afresh; lengths past the caches and a consumed out are still refused."""
    from cutile_kernels import _decode_attention as module

    q_n, k_n, v_n, lens_n = inputs(*shape, "bf16", lens, seed=3)
    q, k, v, lens = (api.from_numpy(a) for a in (q_n, k_n, v_n, lens_n))
    out = api.from_numpy(poisoned(q_n.shape, "bf16"))
    module._PLANS.clear()
    decode_attention(q, k, v, lens, out=out)
    np.testing.assert_allclose(out.to_numpy().astype(np.float64), reference(q_n, k_n, v_n, lens_n, 1 / 8),
                               atol=2e-2, rtol=0)
    assert len(module._PLANS) == 1
    kept = next(iter(module._PLANS.values()))
    assert kept.split.one_launch is (shape == SMALL)
    new_q, new_k, new_v, _ = inputs(*shape, "bf16", new_lens, seed=4)
    new_lens_n = np.array(new_lens, np.int32)
    for tensor, values in ((q, new_q), (k, new_k), (v, new_v), (lens, new_lens_n)):
        tensor.host_view()[...] = values
    out.host_view()[...] = np.nan
    view = out[...]
    assert decode_attention(q[...], k[...], v[...], lens[...], out=view) is view
    assert len(module._PLANS) == 1 and next(iter(module._PLANS.values())) is kept
    np.testing.assert_allclose(out.to_numpy().astype(np.float64), reference(new_q, new_k, new_v, new_lens_n, 1 / 8),
                               atol=2e-2, rtol=0)
    # The caches as a transposed view of (batch, max_seq, kv_heads, dim) memory: another stride.
    k_t = api.from_numpy(np.ascontiguousarray(new_k.transpose(0, 2, 1, 3))).transpose(1, 2)
    decode_attention(q, k_t, v, lens, out=out, scale=0.5)
    np.testing.assert_allclose(out.to_numpy().astype(np.float64), reference(new_q, new_k, new_v, new_lens_n, 0.5),
                               atol=2e-2, rtol=0)
    decode_attention(q, k, v, lens, out=out, scale=0.5)  # another scale over the known memory
    np.testing.assert_allclose(out.to_numpy().astype(np.float64), reference(new_q, new_k, new_v, new_lens_n, 0.5),
                               atol=2e-2, rtol=0)
    assert len(module._PLANS) == 3
    past = list(new_lens)
    past[-1] = shape[3] + 1  # past max_seq: refused on the host, as before any plan was kept
    lens.host_view()[...] = past
    with pytest.raises(cutile.ArgumentError, match=rf"seq_lens' holds {shape[3] + 1} at \[{len(past) - 1}\]"):
        decode_attention(q, k, v, lens, out=out)
    lens.host_view()[...] = new_lens_n
    taken = out.partition([1, 1, shape[4]])
    with pytest.raises(cutile.OwnershipError, match="consumed"):
        decode_attention(q, k, v, lens, out=out)
    del taken
