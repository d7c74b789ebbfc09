"""attention (flash attention forward) against numpy float64 on the interpreter: dense and
varlen layouts, causal and not, GQA, f16 and bf16, sequence tails, poisoned outputs, bad
arguments; compiles for sm_90 and sm_100; on the GPU (marked ``gpu``) at (4, 32, 4096, 128)."""

from typing import Any

import numpy as np
import pytest
from cutile_kernels_testkit import f64, normal, poisoned

import cutile
from cutile import api
from cutile.core import bf16, f16, i32
from cutile_kernels._attention import DEFAULT, SPACE, TUNER, attention, dense_kernel, varlen_kernel

TOLERANCE = {"f16": 4e-3, "bf16": 2.5e-2}
SMALL = {"block_m": 32, "block_n": 16, "num_worker_warps": 4, "occupancy": 1}


def reference(q: Any, k: Any, v: Any, causal: bool, scale: float, diagonal: int = 0) -> Any:
    """(..., heads, seq, dim) attention in float64; causal keeps key j <= i + diagonal."""
    group = q.shape[-3] // k.shape[-3]
    k, v = np.repeat(k, group, axis=-3), np.repeat(v, group, axis=-3)
    s = q @ np.swapaxes(k, -1, -2) * scale
    if causal:
        rows, cols = s.shape[-2:]
        s = np.where(np.tril(np.ones((rows, cols), bool), k=diagonal), s, -np.inf)
    top = s.max(axis=-1, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    p = np.exp(s - top)
    total = p.sum(axis=-1, keepdims=True)
    return np.where(total > 0, (p / np.where(total > 0, total, 1.0)) @ v, 0.0)


def close(result: Any, expected: Any, dtype: str) -> None:
    got = f64(result.to_numpy() if isinstance(result, cutile.Tensor) else result)
    assert got.shape == expected.shape
    assert np.isfinite(got).all(), "an element was not written"
    np.testing.assert_allclose(got, expected, rtol=TOLERANCE[dtype], atol=TOLERANCE[dtype])


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("seq", [70, 33])
def test_dense_gqa_with_tails(dtype: str, causal: bool, seq: int) -> None:
    q = normal((2, 4, seq, 64), dtype, seed=1)
    k = normal((2, 2, seq, 64), dtype, seed=2)
    v = normal((2, 2, seq, 64), dtype, seed=3)
    out = poisoned((2, 4, seq, 64), dtype)
    result = attention(q, k, v, causal=causal, out=out, config=SMALL)
    assert result is out
    close(out, reference(f64(q), f64(k), f64(v), causal, 64 ** -0.5), dtype)


@pytest.mark.parametrize("causal", [False, True])
def test_dense_default_config_scale_and_a_longer_key_sequence(causal: bool) -> None:
    q = normal((1, 2, 33, 64), "f16", seed=4, scale=2.0)
    k = normal((1, 1, 150, 64), "f16", seed=5)
    v = normal((1, 1, 150, 64), "f16", seed=6)
    result = attention(q, k, v, causal=causal, scale=0.3)  # the default config (128 x 64 tiles)
    assert isinstance(result, np.ndarray) and result.dtype == np.float16
    close(result, reference(f64(q), f64(k), f64(v), causal, 0.3), "f16")


@pytest.mark.parametrize("scale", [-0.2, 0.0])
def test_a_scale_of_zero_or_below(scale: float) -> None:
    q, k, v = (normal((1, 2, 40, 64), "f16", seed=s) for s in (20, 21, 22))
    result = attention(q, k, v, causal=True, scale=scale, config=SMALL)
    close(result, reference(f64(q), f64(k), f64(v), True, scale), "f16")


def test_inputs_in_the_sequence_major_layout_are_read() -> None:
    # (batch, seq, heads, dim) memory seen as (batch, heads, seq, dim), as q.transpose(1, 2) gives
    q, k, v = (np.swapaxes(normal((2, 24, 2, 64), "bf16", seed=s), 1, 2) for s in (23, 24, 25))
    out = poisoned((2, 2, 24, 64), "bf16")
    attention(q, k, v, out=out, config=SMALL)
    close(out, reference(f64(q), f64(k), f64(v), False, 0.125), "bf16")
    with pytest.raises(cutile.ArgumentError, match="out of shape"):
        attention(q, k, v, out=np.swapaxes(np.zeros((2, 24, 2, 64), q.dtype), 1, 2))


def test_head_dim_128_and_cutile_tensors() -> None:
    q = api.from_numpy(normal((1, 2, 40, 128), "bf16", seed=7))
    k = api.from_numpy(normal((1, 2, 40, 128), "bf16", seed=8))
    v = api.from_numpy(normal((1, 2, 40, 128), "bf16", seed=9))
    result = attention(q, k, v, causal=True, config={"block_m": 16, "block_n": 32})
    assert isinstance(result, cutile.Tensor) and result.dtype == bf16
    close(result, reference(f64(q.to_numpy()), f64(k.to_numpy()), f64(v.to_numpy()), True, 128 ** -0.5), "bf16")


def _varlen_reference(q: Any, k: Any, v: Any, lens_q: list[int], lens_k: list[int], causal: bool) -> Any:
    """Each packed sequence alone; causal bottom-right aligned (flash-attn's)."""
    parts, sq, sk = [], 0, 0
    for lq, lk in zip(lens_q, lens_k):
        qs, ks, vs = (np.swapaxes(t, 0, 1) for t in (q[sq:sq + lq], k[sk:sk + lk], v[sk:sk + lk]))
        parts.append(np.swapaxes(reference(qs, ks, vs, causal, 64 ** -0.5, diagonal=lk - lq), 0, 1))
        sq, sk = sq + lq, sk + lk
    return np.concatenate(parts)


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("lens_q, lens_k", [([37, 5, 20], [37, 5, 20]), ([9, 40, 3], [30, 41, 3])])
def test_varlen_three_sequences(dtype: str, causal: bool, lens_q: list[int], lens_k: list[int]) -> None:
    tq, tk = sum(lens_q), sum(lens_k)
    q, k, v = normal((tq, 4, 64), dtype, seed=10), normal((tk, 2, 64), dtype, seed=11), normal((tk, 2, 64), dtype,
                                                                                                 seed=12)
    cu_q = np.concatenate([[0], np.cumsum(lens_q)]).astype(np.int32)
    cu_k = np.concatenate([[0], np.cumsum(lens_k)]).astype(np.int32)
    out = poisoned((tq, 4, 64), dtype)
    attention(q, k, v, causal=causal, out=out, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, config=SMALL)
    close(out, _varlen_reference(f64(q), f64(k), f64(v), lens_q, lens_k, causal), dtype)


def test_varlen_query_rows_without_keys_get_zeros() -> None:
    # causal, a sequence of 12 queries over 4 keys: its first 8 queries see no key (bottom-right)
    lens_q, lens_k = [12, 6], [4, 6]
    q, k, v = normal((18, 2, 64), "f16", seed=13), normal((10, 2, 64), "f16", seed=14), normal((10, 2, 64), "f16",
                                                                                                 seed=15)
    cu_q = np.array([0, 12, 18], np.int32)
    cu_k = np.array([0, 4, 10], np.int32)
    result = attention(q, k, v, causal=True, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, config=SMALL)
    expected = _varlen_reference(f64(q), f64(k), f64(v), lens_q, lens_k, True)
    assert not expected[:8].any()
    close(result, expected, "f16")


def test_varlen_offsets_past_the_keys_read_only_the_keys_there() -> None:
    q, k, v = normal((10, 2, 64), "f16", seed=30), normal((12, 2, 64), "f16", seed=31), normal((12, 2, 64), "f16",
                                                                                                 seed=32)
    cu_q, cu_k = np.array([0, 5, 10], np.int32), np.array([0, 4, 1 << 30], np.int32)
    result = attention(q, k, v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, config=SMALL)
    expected = _varlen_reference(f64(q), f64(k), f64(v), [5, 5], [4, 8], False)  # the second sees keys 4..11
    close(result, expected, "f16")


def test_launch_form_writes_out_and_requires_it() -> None:
    q = normal((1, 2, 20, 64), "f16", seed=16)
    out = poisoned((1, 2, 20, 64), "f16")
    pending = attention.launch(q, q, q, out=out, config=SMALL)
    assert pending.run() is out
    close(out, reference(f64(q), f64(q), f64(q), False, 0.125), "f16")
    with pytest.raises(cutile.ArgumentError, match="out is required"):
        attention.launch(q, q, q, out=None)


def _bad(**changes: Any) -> dict[str, Any]:
    arguments: dict[str, Any] = {"q": normal((1, 2, 8, 64), "f16", seed=0), "k": normal((1, 1, 8, 64), "f16", seed=1),
                                 "v": normal((1, 1, 8, 64), "f16", seed=2)}
    arguments.update(changes)
    return arguments


@pytest.mark.parametrize("changes, error, words", [
    ({"q": [1.0]}, cutile.ArgumentTypeError, "q must be a tensor"),
    ({"k": normal((1, 1, 8, 64), "bf16", seed=1)}, cutile.ArgumentTypeError, "k has dtype bf16; expected q's"),
    ({"q": normal((1, 2, 8, 64), "f32", seed=0)}, cutile.ArgumentTypeError, "q has dtype f32"),
    ({"q": normal((2, 8, 64), "f16", seed=0)}, cutile.ArgumentError, "q has shape \\[2, 8, 64\\]; expected 4 dims"),
    ({"v": normal((1, 1, 9, 64), "f16", seed=2)}, cutile.ArgumentError, "v has shape"),
    ({"q": normal((1, 3, 8, 64), "f16", seed=0), "k": normal((1, 2, 8, 64), "f16", seed=1),
      "v": normal((1, 2, 8, 64), "f16", seed=2)}, cutile.ArgumentError, "must divide q's 3"),
    ({"q": normal((1, 2, 8, 96), "f16", seed=0), "k": normal((1, 1, 8, 96), "f16", seed=1),
      "v": normal((1, 1, 8, 96), "f16", seed=2)}, cutile.ArgumentError, "head_dim"),
    ({"k": normal((2, 1, 8, 64), "f16", seed=1), "v": normal((2, 1, 8, 64), "f16", seed=2)}, cutile.ArgumentError,
     "k has batch 2"),
    ({"scale": float("nan")}, cutile.ArgumentError, "scale must be"),
    ({"causal": 1}, cutile.ArgumentError, "causal must be a bool"),
    ({"out": poisoned((1, 2, 8, 32), "f16")}, cutile.ArgumentError, "out has shape"),
    ({"out": poisoned((1, 2, 8, 64), "bf16")}, cutile.ArgumentTypeError, "out has dtype"),
    ({"config": {"block_m": 48}}, cutile.ArgumentError, "block_m must be a power of two"),
    ({"config": {"num_worker_warps": 6}}, cutile.ArgumentError, "num_worker_warps"),
    ({"config": {"tile": 6}}, cutile.ArgumentError, "unknown keys"),
    ({"cu_seqlens_q": np.array([0, 8], np.int32)}, cutile.ArgumentError, "cu_seqlens_q and cu_seqlens_k"),
])
def test_bad_arguments_name_the_parameter(changes: dict[str, Any], error: type, words: str) -> None:
    with pytest.raises(error, match=words):
        attention(**_bad(**changes))


def test_bad_offsets_and_overlap() -> None:
    q, k = normal((8, 2, 64), "f16", seed=0), normal((8, 1, 64), "f16", seed=1)
    cu = np.array([0, 8], np.int32)
    with pytest.raises(cutile.ArgumentTypeError, match="cu_seqlens_k has dtype i64"):
        attention(q, k, k, cu_seqlens_q=cu, cu_seqlens_k=cu.astype(np.int64))
    with pytest.raises(cutile.ArgumentError, match="cu_seqlens_k has 3 entries"):
        attention(q, k, k, cu_seqlens_q=cu, cu_seqlens_k=np.array([0, 4, 8], np.int32))
    with pytest.raises(cutile.ArgumentError, match="cu_seqlens_q has shape"):
        attention(q, k, k, cu_seqlens_q=np.array([0], np.int32), cu_seqlens_k=np.array([0], np.int32))
    with pytest.raises(cutile.ArgumentError, match="out shares memory with q"):
        attention(q, k, k, out=q, cu_seqlens_q=cu, cu_seqlens_k=cu)


def test_the_tuners_buckets_keep_causal_and_dtype_apart() -> None:
    """Rounding extents up to powers of two puts 0 and 1 in one bucket: the flags must
    stay whole, or a causal winner would serve non-causal calls (and f16 bf16)."""
    buckets = {TUNER.bucket((1, 32, 8, 2048, 2048, 128, causal, is_bf16)) for causal in (0, 1) for is_bf16 in (0, 1)}
    assert len(buckets) == 4
    assert TUNER.bucket((1, 32, 8, 2000, 2000, 128, 1, 1)) == TUNER.bucket((1, 32, 8, 2048, 2048, 128, 1, 1))


def test_the_tuner_searches_the_space_and_defaults_to_default() -> None:
    shape = (1, 2, 1, 20, 20, 64, 1, 0)  # batch, heads, kv heads, seq q, seq k, head dim, causal, bf16
    found = TUNER.tune(shape, warmup=1, reps=1, paired_reps=2, budget=20)
    assert found.best in SPACE.configs()
    assert all(trial.status in ("ok", "pruned") for trial in found.trials), found.trials
    assert TUNER.default == DEFAULT and DEFAULT in SPACE.configs()


@pytest.mark.parametrize("arch", ["sm_90", "sm_100"])
@pytest.mark.parametrize("causal", [False, True])
def test_kernels_compile(arch: str, causal: bool) -> None:
    hints = (("occupancy", 1), ("num_worker_warps", 8))
    d = 128
    dense = cutile.compile(dense_kernel(f16, causal, hints), api.meta([64, 4096, d], dtype=f16).partition([1, 128, d]),
                           api.meta([64, 4096, d], dtype=f16), api.meta([16, 4096, d], dtype=f16),
                           api.meta([16, 4096, d], dtype=f16), 0.1, 32, 8, 4, BN=DEFAULT["block_n"], arch=arch)
    assert dense.cubin
    if arch == "sm_90":
        assert "num_worker_warps_per_cta = 8" in dense.mlir
    packed = cutile.compile(varlen_kernel(bf16, causal, hints),
                            api.meta([32, 1000, d], dtype=bf16).partition([1, 128, d]),
                            api.meta([32, 1000, d], dtype=bf16), api.meta([8, 1000, d], dtype=bf16),
                            api.meta([8, 1000, d], dtype=bf16), api.meta([4], dtype=i32), api.meta([4], dtype=i32),
                            0.1, 4, BN=64, NB=4, arch=arch)
    assert packed.cubin


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("causal", [False, True])
def test_gpu_against_torch_sdpa(dtype: str, causal: bool) -> None:
    torch = pytest.importorskip("torch")
    torch_dtype = torch.float16 if dtype == "f16" else torch.bfloat16
    generator = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn((4, 32, 4096, 128), device="cuda", dtype=torch_dtype, generator=generator)
               for _ in range(3))
    out = torch.full_like(q, float("nan"))
    assert attention(q, k, v, causal=causal, out=out) is out
    expected = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal)
    torch.testing.assert_close(out.float(), expected, rtol=TOLERANCE[dtype], atol=TOLERANCE[dtype])


@pytest.mark.gpu
def test_gpu_varlen_gqa() -> None:
    torch = pytest.importorskip("torch")
    lens = [1000, 3000, 96]
    total = sum(lens)
    generator = torch.Generator(device="cuda").manual_seed(1)
    q = torch.randn((total, 32, 128), device="cuda", dtype=torch.bfloat16, generator=generator)
    k = torch.randn((total, 8, 128), device="cuda", dtype=torch.bfloat16, generator=generator)
    v = torch.randn((total, 8, 128), device="cuda", dtype=torch.bfloat16, generator=generator)
    cu = torch.tensor([0, *np.cumsum(lens)], device="cuda", dtype=torch.int32)
    result = attention(q, k, v, causal=True, cu_seqlens_q=cu, cu_seqlens_k=cu)
    start = 0
    for length in lens:
        part = [t[start:start + length].transpose(0, 1).float() for t in (q, k, v)]
        expected = torch.nn.functional.scaled_dot_product_attention(*part, is_causal=True, enable_gqa=True)
        torch.testing.assert_close(result[start:start + length].transpose(0, 1).float(), expected, rtol=2.5e-2,
                                   atol=2.5e-2)
        start += length


def test_varlen_calls_in_known_layouts_take_their_kept_plan_and_refuse_what_changed() -> None:
    """A prefill's layers call attention(q, k, v, out=o, cu_seqlens_q=c, cu_seqlens_k=c)
    on the same buffers: the plan is kept by the operands' layouts and memory, so a call
    of new objects over the same memory takes it (new values computed right); another
    flag is planned afresh; an out sharing q's memory and a consumed operand are still
    refused."""
    from cutile_kernels import _attention

    lens = [7, 12]
    qn, kn, vn = normal((19, 4, 64), "bf16", seed=40), normal((19, 2, 64), "bf16", seed=41), \
        normal((19, 2, 64), "bf16", seed=42)
    q, k, v = api.from_numpy(qn), api.from_numpy(kn), api.from_numpy(vn)
    cu = api.from_numpy(np.array([0, 7, 19], np.int32))
    out = api.from_numpy(poisoned((19, 4, 64), "bf16"))
    _attention._PLANS.clear()
    attention(q, k, v, causal=True, out=out, cu_seqlens_q=cu, cu_seqlens_k=cu)
    close(out, _varlen_reference(f64(qn), f64(kn), f64(vn), lens, lens, True), "bf16")
    assert len(_attention._PLANS) == 1
    new_q = normal((19, 4, 64), "bf16", seed=50)
    q.host_view()[...] = new_q
    out.host_view()[...] = np.nan
    attention(q[...], k[...], v[...], causal=True, out=out[...], cu_seqlens_q=cu[...], cu_seqlens_k=cu)
    assert len(_attention._PLANS) == 1  # new objects over the same memory: the kept plan
    close(out, _varlen_reference(f64(new_q), f64(kn), f64(vn), lens, lens, True), "bf16")
    attention(q, k, v, out=out, cu_seqlens_q=cu, cu_seqlens_k=cu)  # not causal: its own plan
    close(out, _varlen_reference(f64(new_q), f64(kn), f64(vn), lens, lens, False), "bf16")
    assert len(_attention._PLANS) == 2
    with pytest.raises(cutile.ArgumentError, match="out shares memory with q"):
        attention(q, k, v, causal=True, out=q, cu_seqlens_q=cu, cu_seqlens_k=cu)
    for name, tensor in (("out", out), ("q", q)):  # (each stays consumed: q's checked before out's)
        taken = tensor.partition([1, 1, 64])
        with pytest.raises(cutile.OwnershipError, match=f"attention: {name}: .*consumed"):
            attention(q, k, v, causal=True, out=out, cu_seqlens_q=cu, cu_seqlens_k=cu)
        del taken
