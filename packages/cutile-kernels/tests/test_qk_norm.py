"""qk_norm and qk_norm_rope (one launch for q and k) against numpy float64 on the
interpreter: odd head counts, GQA, token tails, f32/f16/bf16, strided head slices of a
fused QKV output, other leading shapes, poisoned outputs, errors naming the parameter;
and their kernels compiled with tileiras for sm_90 and sm_100."""

import importlib
from typing import Any

import numpy as np
import pytest
from cutile_kernels_testkit import DTYPES, TOLERANCE, check, f64, normal, poisoned, rope_reference

import cutile
from cutile import api
from cutile.core import bf16, f16, f32, i32, i64
from cutile_kernels import qk_norm, qk_norm_rope, rope

qk_module = importlib.import_module("cutile_kernels._qk_norm")  # (the package's qk_norm is the function)


def rms_reference(x: Any, w: Any, eps: float) -> Any:
    return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps) * w




def close_rotated(result: Any, expected: Any, dtype: str) -> None:
    """Rotated heads to the dtype's precision; in f32 the angles' own error (computed in
    f32: position * 2**-24 radians) dominates."""
    rtol, atol = TOLERANCE[dtype]
    scale = 20.0 if dtype == "f32" else 4.0
    got = f64(result.to_numpy() if isinstance(result, cutile.Tensor) else result)
    assert np.isfinite(got).all(), "an element was not written"
    np.testing.assert_allclose(got, expected, rtol=rtol * scale, atol=atol * scale)


#: (q shape, k heads): odd q and k head counts with a token tail, GQA, one token, 4-D (batch, seq)
SHAPES = [((13, 5, 32), 3), ((9, 6, 64), 2), ((1, 16, 128), 8), ((2, 7, 4, 16), 1)]


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("q_shape, k_heads", SHAPES)
def test_qk_norm_normalizes_each_head_with_its_weight(dtype: str, q_shape: tuple[int, ...], k_heads: int) -> None:
    k_shape = (*q_shape[:-2], k_heads, q_shape[-1])
    q, k = normal(q_shape, dtype, seed=1, scale=3.0, shift=0.5), normal(k_shape, dtype, seed=2)
    qw, kw = normal(q_shape[-1:], dtype, seed=3), normal(q_shape[-1:], "f32", seed=4)  # k's weight of another dtype
    out = (poisoned(q_shape, dtype), poisoned(k_shape, dtype))
    qn, kn = qk_norm(q, k, qw, kw, 1e-5, out=out, config={"block_elems": 2048})  # a few tokens per block: a tail
    assert qn is out[0] and kn is out[1]
    check(qn, rms_reference(f64(q), f64(qw), 1e-5), dtype, scale=4.0)
    check(kn, rms_reference(f64(k), f64(kw), 1e-5), dtype, scale=4.0)


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("style", ["neox", "gptj"])
@pytest.mark.parametrize("q_shape, k_heads", SHAPES)
def test_qk_norm_rope_normalizes_then_rotates(dtype: str, style: str, q_shape: tuple[int, ...], k_heads: int) -> None:
    k_shape = (*q_shape[:-2], k_heads, q_shape[-1])
    q, k = normal(q_shape, dtype, seed=5, scale=2.0), normal(k_shape, dtype, seed=6, shift=-0.3)
    qw, kw = normal(q_shape[-1:], dtype, seed=7), normal(q_shape[-1:], dtype, seed=8)
    positions = np.random.default_rng(9).integers(0, 400, q_shape[:-2]).astype(np.int64)
    theta = 1e6
    out = (poisoned(q_shape, dtype), poisoned(k_shape, dtype))
    qr, kr = qk_norm_rope(q, k, qw, kw, positions, 1e-6, theta, style=style, out=out, config={"block_elems": 2048})
    close_rotated(qr, rope_reference(rms_reference(f64(q), f64(qw), 1e-6), positions, theta, style), dtype)
    close_rotated(kr, rope_reference(rms_reference(f64(k), f64(kw), 1e-6), positions, theta, style), dtype)
    # the numbers of the two calls it fuses, bit for bit
    qn, kn = qk_norm(q, k, qw, kw, 1e-6)
    q2, k2 = rope(qn, kn, positions, theta, style=style)
    np.testing.assert_array_equal(qr.to_numpy(), q2)
    np.testing.assert_array_equal(kr.to_numpy(), k2)


@pytest.mark.parametrize("dtype", ["bf16", "f32"])
def test_head_slices_of_a_fused_qkv_output_are_read_in_place(dtype: str) -> None:
    tokens, heads, kv_heads, dim = 7, 6, 2, 64
    qkv = api.from_numpy(normal((tokens, (heads + 2 * kv_heads) * dim), dtype, seed=10, scale=2.0))
    heads_view = qkv.reshape(tokens, heads + 2 * kv_heads, dim)
    q, k = heads_view[:, :heads], heads_view[:, heads:heads + kv_heads]
    assert not q.is_contiguous and not k.is_contiguous
    all_heads = f64(qkv.to_numpy()).reshape(tokens, heads + 2 * kv_heads, dim)
    qw, kw = normal((dim,), dtype, seed=11), normal((dim,), dtype, seed=12)
    positions = api.from_numpy(np.arange(3, 3 + tokens, dtype=np.int32))
    qn, kn = qk_norm(q, k, qw, kw)
    check(qn, rms_reference(all_heads[:, :heads], f64(qw), 1e-6), dtype, scale=4.0)
    check(kn, rms_reference(all_heads[:, heads:heads + kv_heads], f64(kw), 1e-6), dtype, scale=4.0)
    # strided outputs too: q's and k's slices of two other buffers (one buffer's two slices
    # would span each other's bytes, which out= refuses)
    q_target = api.full([tokens, heads + 2 * kv_heads, dim], np.nan, dtype=DTYPES[dtype])
    k_target = api.full([tokens, heads + 2 * kv_heads, dim], np.nan, dtype=DTYPES[dtype])
    qk_norm_rope(q, k, qw, kw, positions, theta=1e4, out=(q_target[:, :heads], k_target[:, heads:heads + kv_heads]))
    expected = [rope_reference(rms_reference(all_heads[:, a:b], f64(w), 1e-6), np.arange(3, 3 + tokens), 1e4, "neox")
                for (a, b), w in (((0, heads), qw), ((heads, heads + kv_heads), kw))]
    q_written, k_written = q_target.to_numpy(), k_target.to_numpy()
    close_rotated(q_written[:, :heads], expected[0], dtype)
    close_rotated(k_written[:, heads:heads + kv_heads], expected[1], dtype)
    assert np.isnan(f64(q_written[:, heads:])).all() and np.isnan(f64(k_written[:, :heads])).all()  # only the views
    assert np.isnan(f64(k_written[:, heads + kv_heads:])).all()


@pytest.mark.gpu
@pytest.mark.parametrize("tokens", [1, 300])
def test_qk_norm_rope_reads_a_qkv_output_on_the_gpu(tokens: int) -> None:
    """Qwen3-0.6B's heads (16 q, 8 kv, 128) as slices of the stacked projection's output:
    a decode step's one token and a prefill's 300."""
    heads, kv_heads, dim = 16, 8, 128
    host = normal((tokens, (heads + 2 * kv_heads) * dim), "bf16", seed=20, scale=2.0)
    by_head = api.from_numpy(host).reshape(tokens, heads + 2 * kv_heads, dim)
    q, k = by_head[:, :heads], by_head[:, heads:heads + kv_heads]
    qw, kw = normal((dim,), "bf16", seed=21), normal((dim,), "bf16", seed=22)
    positions = np.arange(100, 100 + tokens, dtype=np.int32)
    qr, kr = qk_norm_rope(q, k, api.from_numpy(qw), api.from_numpy(kw), api.from_numpy(positions), 1e-6, 1e6)
    all_heads = f64(host).reshape(tokens, heads + 2 * kv_heads, dim)
    close_rotated(qr, rope_reference(rms_reference(all_heads[:, :heads], f64(qw), 1e-6), positions, 1e6, "neox"), "bf16")
    close_rotated(kr, rope_reference(rms_reference(all_heads[:, heads:heads + kv_heads], f64(kw), 1e-6), positions,
                                     1e6, "neox"), "bf16")


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_qk_norm_takes_other_layouts_and_head_dims(dtype: str) -> None:
    # (batch, heads, seq, head_dim) with GQA and a head dim that is no power of two
    q, k = normal((2, 4, 7, 40), dtype, seed=13, scale=3.0), normal((2, 2, 7, 40), dtype, seed=14)
    qw, kw = normal((40,), dtype, seed=15), normal((40,), dtype, seed=16)
    qn, kn = qk_norm(q, k, qw, kw, 1e-6)
    assert isinstance(qn, np.ndarray) and qn.shape == q.shape and kn.shape == k.shape
    check(qn, rms_reference(f64(q), f64(qw), 1e-6), dtype, scale=4.0)
    check(kn, rms_reference(f64(k), f64(kw), 1e-6), dtype, scale=4.0)
    # rows of any count (k here is not a sub-layout of q's)
    q2, k2 = normal((5, 12), dtype, seed=17), normal((3, 12), dtype, seed=18)
    w = normal((12,), dtype, seed=19)
    qn2, kn2 = qk_norm(q2, k2, w, w)
    check(qn2, rms_reference(f64(q2), f64(w), 1e-6), dtype, scale=4.0)
    check(kn2, rms_reference(f64(k2), f64(w), 1e-6), dtype, scale=4.0)


@pytest.mark.parametrize("config", [{"block_elems": 2048, "max_blocks": 3}, {"block_elems": 2048, "max_blocks": 132}])
def test_tiles_over_heads_and_tokens_and_blocks_that_loop(config: dict[str, int]) -> None:
    """More heads than a tile holds (q's 40 heads of 128 in tiles of 16), q and k of
    different tile counts, fewer blocks than tiles (each walks several of q's, then k's)."""
    q, k = normal((11, 40, 128), "bf16", seed=23, scale=2.0), normal((11, 5, 128), "bf16", seed=24)
    qw, kw = normal((128,), "bf16", seed=25), normal((128,), "bf16", seed=26)
    positions = np.arange(20, 31, dtype=np.int32)
    qr, kr = qk_norm_rope(q, k, qw, kw, positions, 1e-6, 1e4, config=config)
    close_rotated(qr, rope_reference(rms_reference(f64(q), f64(qw), 1e-6), positions, 1e4, "neox"), "bf16")
    close_rotated(kr, rope_reference(rms_reference(f64(k), f64(kw), 1e-6), positions, 1e4, "neox"), "bf16")
    # rows of any count as one token's heads: 1000 and 999 rows of 64
    q2, k2 = normal((1000, 64), "f32", seed=27), normal((999, 64), "f32", seed=28)
    w = normal((64,), "f32", seed=29)
    qn, kn = qk_norm(q2, k2, w, w, config=config)
    check(qn, rms_reference(f64(q2), f64(w), 1e-6), "f32", scale=4.0)
    check(kn, rms_reference(f64(k2), f64(w), 1e-6), "f32", scale=4.0)


def test_one_launch_for_q_and_k() -> None:
    q, k = api.randn([4, 6, 64], "bf16", seed=1), api.randn([4, 2, 64], "bf16", seed=2)
    w = api.ones([64], "bf16")
    out = (api.empty([4, 6, 64], "bf16"), api.empty([4, 2, 64], "bf16"))
    launch = qk_norm.launch(q, k, w, w, out=out)
    assert isinstance(launch, cutile.Launch)  # one kernel, not an op of two
    launch.cancel()
    launch = qk_norm_rope.launch(q, k, w, w, api.arange(4, dtype="i32"), out=out)
    assert isinstance(launch, cutile.Launch)
    launch.cancel()


def test_empty_inputs_launch_nothing() -> None:
    q, k = np.ones((0, 4, 64), np.float32), np.ones((0, 2, 64), np.float32)
    w = np.ones(64, np.float32)
    qn, kn = qk_norm(q, k, w, w)
    assert qn.shape == (0, 4, 64) and kn.shape == (0, 2, 64)


Q = np.ones((3, 4, 16), np.float32)
K = np.ones((3, 2, 16), np.float32)
W = np.ones(16, np.float32)
P = np.arange(3, dtype=np.int32)


@pytest.mark.parametrize("call, error, message", [
    (lambda: qk_norm(Q, np.ones((3, 2, 8), np.float32), W, W), cutile.ArgumentError, "q's head dim is 16 and k's 8"),
    (lambda: qk_norm(Q, K.astype(np.float16), W, W), cutile.ArgumentTypeError, "k has dtype f16 and q f32"),
    (lambda: qk_norm(Q, K, np.ones(8, np.float32), W), cutile.ArgumentError, "q_weight has shape \\[8\\]"),
    (lambda: qk_norm(Q, K, W, np.ones(16, np.int32)), cutile.ArgumentTypeError, "k_weight has dtype i32"),
    (lambda: qk_norm(Q, K, W, W, eps=-1.0), cutile.ArgumentError, "eps must be a finite number"),
    (lambda: qk_norm(Q, K, W, W, out=Q), cutile.ArgumentError, "out must be a tuple of 2"),
    (lambda: qk_norm(Q, K, W, W, out=(np.ones((3, 4, 8), np.float32), None)), cutile.ArgumentError,
     "out\\[0\\] \\(q\\) has shape"),
    (lambda: qk_norm(Q, K, W, W, out=(Q, None)), cutile.ArgumentError, "out\\[0\\] \\(q\\) overlaps the memory of q"),
    (lambda: qk_norm(Q, K, W, W, config={"tile_rows": 4}), cutile.ArgumentError, "tile_rows"),
    (lambda: qk_norm(np.ones((3, 0), np.float32), np.ones((2, 1), np.float32), W[:0], W[:0]), cutile.ArgumentError,
     "head dim is 0 and k's 1"),
    (lambda: qk_norm(np.ones((3, 16), np.float32), np.ones((0, 16), np.float32), W, W), cutile.ArgumentError,
     "must both hold rows or both be empty"),
    (lambda: qk_norm(np.float32(1.0), K, W, W), cutile.ArgumentTypeError, "q must be a tensor"),
    (lambda: qk_norm_rope(Q, K, W, W, P, style="llama"), cutile.ArgumentError, "'style' must be 'neox' or 'gptj'"),
    (lambda: qk_norm_rope(Q, K, W, W, P, theta=1.0), cutile.ArgumentError, "'theta' must be a finite number"),
    (lambda: qk_norm_rope(Q, K, W, W, P[:2]), cutile.ArgumentError, "'positions' has shape \\[2\\]"),
    (lambda: qk_norm_rope(Q, K, W, W, P.astype(np.float32)), cutile.ArgumentTypeError, "positions"),
    (lambda: qk_norm_rope(np.ones((3, 4, 12), np.float32), np.ones((3, 2, 12), np.float32), W[:12], W[:12], P),
     cutile.ArgumentError, "even power of two, got 12"),
    (lambda: qk_norm_rope(np.ones((2, 4, 3, 16), np.float32), np.ones((2, 2, 3, 16), np.float32), W, W,
                          np.zeros((2, 4), np.int32)), cutile.ArgumentError, "must be \\(tokens, heads, head_dim\\)"),
])
def test_errors_name_the_parameter(call: Any, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        call()


def test_a_strided_batch_seq_layout_is_refused_for_rope() -> None:
    q = api.from_numpy(np.ones((2, 3, 8, 16), np.float32))[:, :, :4]
    k = api.from_numpy(np.ones((2, 3, 2, 16), np.float32))
    with pytest.raises(cutile.ArgumentError, match="q of shape \\[2, 3, 4, 16\\] must be contiguous"):
        qk_norm_rope(q, k, W, W, np.zeros((2, 3), np.int32))


meta = api.meta


@pytest.mark.parametrize("arch", ["sm_90", "sm_100"])
@pytest.mark.parametrize("case", ["norm bf16", "norm f16 odd dim", "rope neox", "rope gptj f32"])
def test_the_kernels_compile(case: str, arch: str) -> None:
    if case == "norm bf16":  # the decode shape: Qwen3's 16 q and 8 kv heads
        kernel = qk_module.qk_norm_kernel(bf16, bf16, bf16, None, 2)
        arguments: tuple[Any, ...] = (
            meta([1, 16, 128], dtype=bf16).partition([1, 16, 128]).map([1, 1, 1], blocks=1),
            meta([1, 8, 128], dtype=bf16).partition([1, 8, 128]).map([1, 1, 1], blocks=1),
            meta([1, 16, 128], dtype=bf16), meta([1, 8, 128], dtype=bf16), meta([128], dtype=bf16),
            meta([128], dtype=bf16), 1e-6, 1 / 128)
        constants: dict[str, Any] = {}
    elif case == "norm f16 odd dim":
        kernel = qk_module.qk_norm_kernel(f16, f32, f16, None, 1)
        arguments = (meta([300, 5, 40], dtype=f16).partition([8, 8, 64]).map([1, 1, 1], blocks=38),
                     meta([1, 900, 40], dtype=f16).partition([1, 128, 64]).map([1, 1, 1], blocks=38), meta([300, 5, 40], dtype=f16),
                     meta([1, 900, 40], dtype=f16), meta([40], dtype=f32), meta([40], dtype=f16), 1e-6, 1 / 40)
        constants = {}
    else:
        neox = case == "rope neox"
        dtype = bf16 if neox else f32
        kernel = qk_module.qk_norm_kernel(dtype, dtype, dtype, i32 if neox else i64, 2)
        arguments = (meta([4096, 32, 128], dtype=dtype).partition([2, 32, 128]).map([1, 1, 1], blocks=528),
                     meta([4096, 8, 128], dtype=dtype).partition([8, 8, 128]).map([1, 1, 1], blocks=528), meta([4096, 32, 128], dtype=dtype),
                     meta([4096, 8, 128], dtype=dtype), meta([128], dtype=dtype), meta([128], dtype=dtype),
                     meta([4096], dtype=i32 if neox else i64), 1e-6, 1 / 128, -0.2)
        constants = {"NEOX": neox}
    compiled = cutile.compile(kernel, *arguments, arch=arch, **constants)
    assert compiled.cubin


@pytest.mark.parametrize("dtype", ["bf16", "f32"])
def test_a_call_in_known_layouts_takes_its_plan_and_still_checks_what_can_change(dtype: str) -> None:
    """qk_norm_rope of cutile tensors with both outputs given keeps its plan by the
    operands' layouts and memory: a call in them again (new values in the same memory,
    new view objects) takes it and computes right; another dtype, stride or memory is
    planned afresh; a bad eps or a consumed output is still refused."""
    tokens, heads, kv_heads, dim, theta = 5, 4, 2, 64, 1e6
    arrays = [normal((tokens, heads, dim), dtype, seed=21), normal((tokens, kv_heads, dim), dtype, seed=22)]
    q, k = (api.from_numpy(a) for a in arrays)
    qw, kw = api.from_numpy(normal((dim,), dtype, seed=23)), api.from_numpy(normal((dim,), dtype, seed=24))
    positions_n = np.arange(3, 3 + tokens).astype(np.int32)
    positions = api.from_numpy(positions_n)
    out = (poisoned((tokens, heads, dim), dtype), poisoned((tokens, kv_heads, dim), dtype))
    qk_module._PLANS.clear()

    def expect(q_values: Any, k_values: Any) -> tuple[Any, Any]:
        return tuple(rope_reference(rms_reference(f64(x), f64(w.to_numpy()), 1e-6), positions_n, theta, "neox")
                     for x, w in ((q_values, qw), (k_values, kw)))

    qk_norm_rope(q, k, qw, kw, positions, 1e-6, theta, out=out)
    assert len(qk_module._PLANS) == 1
    planned = next(iter(qk_module._PLANS.values()))
    for result, expected in zip(out, expect(*arrays)):
        close_rotated(result, expected, dtype)
    # New values in the same memory, poisoned outputs, new view objects: the kept plan, right results.
    new_q, new_k = normal(q.shape, dtype, seed=25, scale=2.0), normal(k.shape, dtype, seed=26)
    q.host_view()[...], k.host_view()[...] = new_q, new_k
    for t in out:
        t.host_view()[...] = np.nan
    views = (out[0][...], out[1][...])
    qk_norm_rope(q[...], k[...], qw, kw, positions[...], 1e-6, theta, out=views)
    assert len(qk_module._PLANS) == 1 and next(iter(qk_module._PLANS.values())) is planned
    for result, expected in zip(out, expect(new_q, new_k)):
        close_rotated(result, expected, dtype)
    # Another dtype of the weight, strided head slices, other memory: planned afresh (and right).
    other_w = api.from_numpy(normal((dim,), "f32", seed=27))
    qk_norm_rope(q, k, other_w, kw, positions, 1e-6, theta, out=out)
    close_rotated(out[0], rope_reference(rms_reference(f64(new_q), f64(other_w.to_numpy()), 1e-6), positions_n,
                                         theta, "neox"), dtype)
    wide = api.from_numpy(normal((tokens, heads + 2 * kv_heads, dim), dtype, seed=28))
    q_slice, k_slice = wide[:, :heads], wide[:, heads:heads + kv_heads]
    qk_norm_rope(q_slice, k_slice, qw, kw, positions, 1e-6, theta, out=out)
    expected = expect(wide.to_numpy()[:, :heads], wide.to_numpy()[:, heads:heads + kv_heads])
    close_rotated(out[0], expected[0], dtype)
    close_rotated(out[1], expected[1], dtype)
    assert len(qk_module._PLANS) == 3
    # Another theta: not the kept plan's rotation.
    qk_norm_rope(q, k, qw, kw, positions, 1e-6, 1e4, out=out)
    close_rotated(out[0], rope_reference(rms_reference(f64(new_q), f64(qw.to_numpy()), 1e-6), positions_n, 1e4,
                                         "neox"), dtype)
    assert len(qk_module._PLANS) == 4
    # What can change between calls in known layouts is still checked.
    with pytest.raises(cutile.ArgumentError, match="eps must be a finite number"):
        qk_norm_rope(q, k, qw, kw, positions, -1.0, theta, out=out)
    taken = out[1].partition([1, 1, dim])
    with pytest.raises(cutile.OwnershipError, match="consumed"):
        qk_norm_rope(q, k, qw, kw, positions, 1e-6, theta, out=out)
    del taken
