"""The transformer pointwise, gather and cache functions (rope, silu_mul / gelu_mul and the
element-wise helpers, embedding, argmax, kv_cache_update) against numpy in float64 on
random inputs with tails, f16 / bf16 / f32, written into poisoned outputs; their
argument errors name the parameter. Each test runs on the interpreter, and on the GPU
too where one is (``gpu``); those marked ``interpreter_only`` check the interpreter's
own behaviour (numpy arrays in and out, its run-time assert messages)."""

import importlib
import math
import re
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import cutile
from cutile import _backend, api
from cutile_kernels import (
    add,
    argmax,
    div,
    embedding,
    gelu,
    gelu_mul,
    kv_cache_update,
    mul,
    relu,
    rope,
    sigmoid,
    silu,
    silu_mul,
    sub,
)
from cutile_kernels_testkit import rope_reference

RNG = np.random.default_rng(16)
DTYPES = ["f32", "f16", "bf16"]
#: dtype -> (rtol, atol) of a result computed in f32 and rounded once to the dtype
TOLERANCE = {"f32": (1e-5, 1e-5), "f16": (2e-3, 2e-3), "bf16": (1.6e-2, 1.6e-2)}


@pytest.fixture(autouse=True, params=["interpreter", pytest.param("gpu", marks=pytest.mark.gpu)])
def backend(request: pytest.FixtureRequest) -> Iterator[str]:
    if request.param == "gpu" and request.node.get_closest_marker("interpreter_only") is not None:
        pytest.skip("checks the interpreter's own behaviour")
    if request.param == "interpreter" and request.node.own_markers and any(
            m.name == "gpu" for m in request.node.own_markers):
        pytest.skip("a GPU test (torch tensors on the device)")
    _backend.reset_for_tests(request.param)
    yield str(request.param)
    _backend.reset_for_tests(None)


def tensor(values: np.ndarray, dtype: str) -> cutile.Tensor:
    return api.from_numpy(np.asarray(values, np.float32), dtype)


def stored(values: np.ndarray, dtype: str) -> np.ndarray:
    """values as the dtype holds them, in float64 (the reference's inputs)."""
    return np.asarray(tensor(values, dtype).to_numpy()).astype(np.float64)


def read(t: Any) -> np.ndarray:
    return np.asarray(t.to_numpy() if isinstance(t, cutile.Tensor) else t).astype(np.float64)


def poisoned(shape: tuple[int, ...], dtype: str) -> cutile.Tensor:
    return api.full(list(shape), np.nan, dtype=dtype)


def close(result: Any, expected: np.ndarray, dtype: str, scale: float = 1.0) -> None:
    rtol, atol = TOLERANCE[dtype]
    np.testing.assert_allclose(read(result), expected, rtol=rtol * scale, atol=atol * scale)


# -- rope ---------------------------------------------------------------------------------------


#: (q shape, k heads): tokens with a tail, GQA, and a 4-D (batch, seq) layout; the last two
#: have enough tokens for the table of angles (`_rope.TABLE_TOKENS`)
ROPE_SHAPES = [((13, 6, 16), 2), ((2, 7, 4, 32), 4), ((1, 3, 64), 1), ((70, 4, 16), 2), ((3, 25, 2, 32), 1)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("style", ["neox", "gptj"])
@pytest.mark.parametrize("q_shape, k_heads", ROPE_SHAPES)
@pytest.mark.parametrize("inplace", [False, True])
def test_rope_rotates_q_and_k_at_their_positions(dtype: str, style: str, q_shape: tuple[int, ...], k_heads: int,
                                                 inplace: bool) -> None:
    k_shape = (*q_shape[:-2], k_heads, q_shape[-1])
    q, k = RNG.standard_normal(q_shape), RNG.standard_normal(k_shape)
    positions = RNG.integers(0, 400, q_shape[:-2])
    theta = 10000.0 if style == "neox" else 1e6
    pos = api.from_numpy(positions.astype(np.int64 if dtype == "f32" else np.int32))
    qt, kt = tensor(q, dtype), tensor(k, dtype)
    # angles are computed in f32: an error of position * 2**-24 radians
    scale = 1.0 if dtype != "f32" else 20.0
    if inplace:
        q_out, k_out = rope(qt, kt, pos, theta, style=style, inplace=True)
        assert q_out is qt and k_out is kt
    else:
        out_q, out_k = poisoned(q_shape, dtype), poisoned(k_shape, dtype)
        q_out, k_out = rope(qt, kt, pos, theta, style=style, out_q=out_q, out_k=out_k)
        assert q_out is out_q and k_out is out_k
        np.testing.assert_array_equal(read(qt), stored(q, dtype))  # inputs untouched
    close(q_out, rope_reference(stored(q, dtype), positions, theta, style), dtype, scale)
    close(k_out, rope_reference(stored(k, dtype), positions, theta, style), dtype, scale)


@pytest.mark.parametrize("inplace", [False, True])
@pytest.mark.parametrize("style", ["neox", "gptj"])
def test_rope_by_its_table_of_angles_equals_rope_computing_them(style: str, inplace: bool,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A call of many tokens makes its cos and sin table first (two launches): the same
    f32 angles as the one launch computing them, so the same bits."""
    from cutile_kernels import _rope

    assert 70 >= _rope.TABLE_TOKENS
    q, k = RNG.standard_normal((70, 4, 16)), RNG.standard_normal((70, 2, 16))
    pos = api.from_numpy(RNG.integers(0, 4000, 70).astype(np.int32))
    results = []
    for table_tokens in (_rope.TABLE_TOKENS, 10**9):
        monkeypatch.setattr(_rope, "TABLE_TOKENS", table_tokens)
        qt, kt = tensor(q, "bf16"), tensor(k, "bf16")
        pending = rope.launch(qt, kt, pos, 1e6, style=style, inplace=inplace)
        assert (pending.then is not None) == (table_tokens <= 70)  # the table's launch, then the rotation
        pending.run()
        results.append([read(t) for t in pending.finish()])
    for tabled, computed in zip(*results):
        np.testing.assert_array_equal(tabled, computed)


@pytest.mark.parametrize("style", ["neox", "gptj"])
@pytest.mark.parametrize("inplace", [False, True])
@pytest.mark.parametrize("tokens", [13, 67])  # angles computed, and from the table; a tail of the blocks' share
@pytest.mark.parametrize("pos_dtype", [np.int32, np.int64])
def test_rope_blocks_walking_several_tokens_each_rotate_every_one(style: str, inplace: bool, tokens: int,
                                                                   pos_dtype: Any) -> None:
    """A config of several tokens per block: each block's schedule walks them, through q's
    tiles and then k's (5 q heads, padded to 8, and 3 k heads: 4 tokens a block)."""
    q, k = RNG.standard_normal((tokens, 5, 32)), RNG.standard_normal((tokens, 3, 32))
    positions = RNG.integers(0, 3000, tokens)
    qt, kt, pos = tensor(q, "bf16"), tensor(k, "bf16"), api.from_numpy(positions.astype(pos_dtype))
    config = {"block_elems": 1024, "occupancy": 1}
    if inplace:
        q_out, k_out = rope(qt, kt, pos, 1e6, style=style, inplace=True, config=config)
    else:
        q_out, k_out = rope(qt, kt, pos, 1e6, style=style, out_q=poisoned(q.shape, "bf16"),
                            out_k=poisoned(k.shape, "bf16"), config=config)
    close(q_out, rope_reference(stored(q, "bf16"), positions, 1e6, style), "bf16")
    close(k_out, rope_reference(stored(k, "bf16"), positions, 1e6, style), "bf16")


def test_rope_reads_strided_q_and_k_and_returns_new_tensors() -> None:
    fused = RNG.standard_normal((9, 12, 16))  # q: heads 0-7, k: heads 8-11 of one projection
    qkv = tensor(fused, "f32")
    positions = np.arange(100, 109)
    q_out, k_out = rope(qkv.permute(0, 1, 2), api.from_numpy(fused[:, 8:].astype(np.float32)),
                        api.from_numpy(positions.astype(np.int32)))
    assert isinstance(q_out, cutile.Tensor) and q_out.shape == (9, 12, 16)
    close(q_out, rope_reference(fused, positions, 1e4, "neox"), "f32", 20.0)
    close(k_out, rope_reference(fused[:, 8:], positions, 1e4, "neox"), "f32", 20.0)


def test_rope_launch_form_is_pending_until_run() -> None:
    q, k = RNG.standard_normal((5, 2, 8)), RNG.standard_normal((5, 1, 8))
    qt, kt = tensor(q, "f32"), tensor(k, "f32")
    pending = rope.launch(qt, kt, api.from_numpy(np.arange(5, dtype=np.int32)), inplace=True)
    with pytest.raises(cutile.OwnershipError, match="held by the pending launch of rope_inplace"):
        qt.to_numpy()  # nothing ran yet; the launch holds q
    pending.op.sync()
    q_out, _ = pending.finish()
    close(q_out, rope_reference(q, np.arange(5), 1e4, "neox"), "f32", 20.0)


@pytest.mark.interpreter_only
def test_rope_gives_numpy_arrays_back_for_numpy_inputs() -> None:
    q = RNG.standard_normal((4, 2, 8)).astype(np.float32)
    q_out, k_out = rope(q, q[:, :1].copy(), np.arange(4))
    assert isinstance(q_out, np.ndarray) and isinstance(k_out, np.ndarray) and q_out.shape == (4, 2, 8)
    close(q_out, rope_reference(q.astype(np.float64), np.arange(4), 1e4, "neox"), "f32", 20.0)


def rope_arguments(**change: Any) -> dict[str, Any]:
    arguments: dict[str, Any] = {"q": tensor(np.zeros((4, 2, 8)), "f32"), "k": tensor(np.zeros((4, 1, 8)), "f32"),
                                 "positions": api.from_numpy(np.arange(4, dtype=np.int32))}
    arguments.update(change)
    return arguments


@pytest.mark.parametrize("change, error, words", [
    ({"style": "llama"}, cutile.ArgumentError, "'style' must be 'neox' or 'gptj'"),
    ({"theta": 0.5}, cutile.ArgumentError, "'theta' must be a finite number above 1"),
    ({"k": "k"}, cutile.ArgumentTypeError, "rope: k must be a tensor"),
    ({"k": api.zeros([4, 1, 8], dtype="f16")}, cutile.ArgumentTypeError, "'q' (f32) and 'k' (f16)"),
    ({"q": api.zeros([4, 2, 8], dtype="i32")}, cutile.ArgumentTypeError, "parameter 'q' has dtype i32"),
    ({"positions": api.zeros([4])}, cutile.ArgumentTypeError, "parameter 'positions' has dtype f32"),
    ({"positions": api.zeros([3], dtype="i32")}, cutile.ArgumentError, "'positions' has shape [3]"),
    ({"k": api.zeros([4, 1, 4])}, cutile.ArgumentError, "parameter 'k' of shape [4, 1, 4]"),
    ({"q": api.zeros([4, 2, 12]), "k": api.zeros([4, 1, 12])}, cutile.ArgumentError, "an even power of two"),
    ({"q": api.zeros([8])}, cutile.ArgumentError, "parameter 'q' must have 3 or 4 dimensions"),
    ({"q": api.zeros([0, 2, 8]), "k": api.zeros([0, 1, 8]), "positions": api.zeros([0], dtype="i32")},
     cutile.ArgumentError, "parameter 'q' of shape [0, 2, 8] is empty"),
    ({"k": api.zeros([4, 0, 8])}, cutile.ArgumentError, "parameter 'k' of shape [4, 0, 8] is empty"),
    ({"inplace": True, "out_q": api.zeros([4, 2, 8])}, cutile.ArgumentError, "do not pass out_q"),
    ({"out_q": api.zeros([4, 2, 4])}, cutile.ArgumentError, "out_q has shape [4, 2, 4]"),
    ({"out_k": api.zeros([4, 1, 8], dtype="bf16")}, cutile.ArgumentTypeError, "out_k has dtype bf16"),
])
def test_rope_refuses_bad_arguments_naming_them(change: dict[str, Any], error: type[Exception], words: str) -> None:
    with pytest.raises(error, match=re.escape(words)):
        rope(**rope_arguments(**change))


def test_rope_refuses_an_output_overlapping_its_input() -> None:
    q = tensor(np.zeros((4, 2, 8)), "f32")
    with pytest.raises(cutile.ArgumentError, match="out_q overlaps the memory of q"):
        rope(**rope_arguments(q=q, out_q=q.permute(0, 1, 2)))


# -- activations and element-wise helpers -----------------------------------------------------
def silu64(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


def gelu_tanh64(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def gelu_erf64(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))


GATED = {
    "silu_mul": (lambda g, u: silu_mul(g, u), lambda g, u: silu64(g) * u),
    "silu_mul out": (lambda g, u, out=None: silu_mul(g, u, out=out), lambda g, u: silu64(g) * u),
    "gelu_mul tanh": (lambda g, u, out=None: gelu_mul(g, u, out=out), lambda g, u: gelu_tanh64(g) * u),
    "gelu_mul none": (lambda g, u, out=None: gelu_mul(g, u, "none", out=out), lambda g, u: gelu_erf64(g) * u),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(GATED))
@pytest.mark.parametrize("shape", [(37, 300), (5, 3, 129), (1000,)])
def test_gated_activations_match_float64(dtype: str, name: str, shape: tuple[int, ...]) -> None:
    function, reference = GATED[name]
    g, u = 3 * RNG.standard_normal(shape), RNG.standard_normal(shape)
    if name.endswith("out") or "gelu" in name:
        out = poisoned(shape, dtype)
        result = function(tensor(g, dtype), tensor(u, dtype), out=out)
        assert result is out
    else:
        result = function(tensor(g, dtype), tensor(u, dtype))
        assert isinstance(result, cutile.Tensor) and result.shape == shape and str(result.dtype) == dtype
    close(result, reference(stored(g, dtype), stored(u, dtype)), dtype, 2.0)


def test_silu_mul_reads_the_halves_of_a_fused_projection() -> None:
    fused = RNG.standard_normal((10, 2 * 48))  # gate | up: each a strided view of one tensor
    x = tensor(fused, "bf16")
    result = silu_mul(x[:, :48], x[:, 48:])
    whole = stored(fused, "bf16")
    close(result, silu64(whole[:, :48]) * whole[:, 48:], "bf16", 2.0)


@pytest.mark.interpreter_only
def test_silu_mul_takes_strided_numpy_views() -> None:
    fused = RNG.standard_normal((10, 96)).astype(np.float32)
    result = silu_mul(fused[:, :48], fused[:, 48:])
    assert isinstance(result, np.ndarray) and result.shape == (10, 48)
    close(result, silu64(fused[:, :48].astype(np.float64)) * fused[:, 48:], "f32", 2.0)


UNARY = {"silu": (silu, silu64), "gelu": (gelu, gelu_erf64),
         "gelu tanh": (lambda x, out=None: gelu(x, approximate="tanh", out=out), gelu_tanh64),
         "sigmoid": (sigmoid, lambda x: 1.0 / (1.0 + np.exp(-x))), "relu": (relu, lambda x: np.maximum(x, 0.0))}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(UNARY))
def test_unary_helpers_match_float64(dtype: str, name: str) -> None:
    function, reference = UNARY[name]
    x = 4 * RNG.standard_normal((3, 7, 45))
    out = poisoned(x.shape, dtype)
    assert function(tensor(x, dtype), out=out) is out
    close(out, reference(stored(x, dtype)), dtype, 2.0)


BINARY = {"add": (add, np.add), "sub": (sub, np.subtract), "mul": (mul, np.multiply), "div": (div, np.divide)}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(BINARY))
@pytest.mark.parametrize("x_shape, y_shape", [((37, 300), (37, 300)), ((37, 300), (300,)), ((3, 5, 33), (33,)),
                                              ((3, 5, 33), (5, 33)), ((3, 5, 33), (1, 1, 33)), ((19,), (19,))])
def test_binary_helpers_broadcast_rows(dtype: str, name: str, x_shape: tuple[int, ...],
                                       y_shape: tuple[int, ...]) -> None:
    function, reference = BINARY[name]
    x = RNG.standard_normal(x_shape)
    y = RNG.uniform(0.5, 2.0, y_shape) * RNG.choice([-1.0, 1.0], y_shape)  # no division by ~0
    out = poisoned(x_shape, dtype)
    assert function(tensor(x, dtype), tensor(y, dtype), out=out) is out
    close(out, reference(stored(x, dtype), stored(y, dtype)), dtype)


@pytest.mark.parametrize("call, error, words", [
    (lambda: add(api.zeros([4, 8]), api.zeros([4, 1])), cutile.ArgumentError,
     "parameter 'y' of shape [4, 1] does not broadcast to 'x' [4, 8]"),
    (lambda: add(api.zeros([4, 8]), api.zeros([8, 4, 8])), cutile.ArgumentError, "does not broadcast"),
    (lambda: mul(api.zeros([4, 8]), api.zeros([4, 8], dtype="f16")), cutile.ArgumentTypeError,
     "'x' (f32) and 'y' (f16) must have the same dtype"),
    (lambda: silu_mul(api.zeros([4], dtype="i32"), api.zeros([4], dtype="i32")), cutile.ArgumentTypeError,
     "parameter 'gate' has dtype i32"),
    (lambda: gelu_mul(api.zeros([4]), api.zeros([4]), "erf"), cutile.ArgumentError, "'approximate' must be"),
    (lambda: gelu(api.zeros([4]), approximate="exact"), cutile.ArgumentError, "'approximate' must be"),
    (lambda: silu(api.zeros([4]), out=api.zeros([5])), cutile.ArgumentError, "out has shape [5]"),
    (lambda: silu(api.zeros([4]), out=api.zeros([4], dtype="bf16")), cutile.ArgumentTypeError,
     "out has dtype bf16; expected f32"),
    (lambda: relu(api.zeros([0, 4])), cutile.ArgumentError, "is empty"),
    (lambda: relu(api.zeros([4, 6, 2]).permute(1, 0, 2)), cutile.ArgumentError, "must be contiguous"),
    (lambda: relu([1.0, 2.0]), cutile.ArgumentTypeError, "relu: x must be a tensor"),
])
def test_element_wise_helpers_refuse_bad_arguments(call: Any, error: type[Exception], words: str) -> None:
    with pytest.raises(error, match=re.escape(words)):
        call()


def test_an_output_overlapping_an_input_is_refused() -> None:
    x = api.zeros([64])
    with pytest.raises(cutile.ArgumentError, match="out overlaps the memory of x"):
        silu(x, out=x)


# -- embedding ----------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("id_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("ids_shape, vocab, dim", [((37,), 1001, 200), ((3, 13), 50, 72), ((1,), 7, 8)])
def test_embedding_gathers_rows_and_zeros_outside_the_table(dtype: str, id_dtype: Any, ids_shape: tuple[int, ...],
                                                            vocab: int, dim: int) -> None:
    table = RNG.standard_normal((vocab, dim))
    ids = RNG.integers(0, vocab, ids_shape).astype(id_dtype)
    flat = ids.reshape(-1)
    flat[0] = vocab - 1
    if flat.size > 3:
        flat[[1, 2, 3]] = [-1, vocab, np.iinfo(id_dtype).min]  # outside: rows of zeros
    out = poisoned((*ids_shape, dim), dtype)
    assert embedding(api.from_numpy(ids), tensor(table, dtype), out=out) is out
    inside = (ids >= 0) & (ids < vocab)
    expected = np.where(inside[..., None], stored(table, dtype)[np.clip(ids, 0, vocab - 1)], 0.0)
    np.testing.assert_array_equal(read(out), expected)


def test_embedding_reads_a_strided_table_and_makes_its_output() -> None:
    wide = RNG.standard_normal((30, 64))
    ids = RNG.integers(0, 30, 9).astype(np.int32)
    table = tensor(wide, "f32")
    rows = embedding(api.from_numpy(ids), table.permute(0, 1))
    assert isinstance(rows, cutile.Tensor) and rows.shape == (9, 64)
    np.testing.assert_array_equal(read(rows), stored(wide, "f32")[ids])


@pytest.mark.parametrize("call, error, words", [
    (lambda: embedding(api.zeros([4]), api.zeros([5, 8])), cutile.ArgumentTypeError,
     "parameter 'ids' has dtype f32"),
    (lambda: embedding(api.zeros([4], dtype="i32"), api.zeros([5])), cutile.ArgumentError,
     "parameter 'table' must have 2 dimensions"),
    (lambda: embedding(api.zeros([4], dtype="i32"), api.zeros([5, 8], dtype="i32")), cutile.ArgumentTypeError,
     "parameter 'table' has dtype i32"),
    (lambda: embedding(api.zeros([4], dtype="i32"), api.zeros([5, 8]), out=api.zeros([4, 9])),
     cutile.ArgumentError, "out has shape [4, 9]; expected [4, 8]"),
    (lambda: embedding(api.zeros([0], dtype="i32"), api.zeros([5, 8])), cutile.ArgumentError, "must not be empty"),
])
def test_embedding_refuses_bad_arguments(call: Any, error: type[Exception], words: str) -> None:
    with pytest.raises(error, match=re.escape(words)):
        call()


# -- argmax -------------------------------------------------------------------------------------
ARGMAX_CONFIGS = [None, {"tile_rows": 2, "tile_cols": 512, "chunk_tiles": 1, "occupancy": 1},
                  {"tile_rows": 4, "tile_cols": 1024, "chunk_tiles": 4, "occupancy": 1},
                  {"tile_rows": 1, "tile_cols": 1024, "chunk_tiles": 16, "occupancy": 2}]  # (rows of 16 tiles: one pass)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(5, 3000), (3, 4, 129), (7,), (2, 9001)])
@pytest.mark.parametrize("config", ARGMAX_CONFIGS)
def test_argmax_matches_numpy_with_ties_to_the_lowest_index(dtype: str, shape: tuple[int, ...],
                                                            config: dict[str, Any] | None) -> None:
    x = RNG.integers(-20, 20, shape).astype(np.float64)  # many ties
    out = api.full(list(shape[:-1]), -7, dtype="i64")
    assert argmax(tensor(x, dtype), out=out, config=config) is out
    np.testing.assert_array_equal(out.to_numpy(), x.argmax(axis=-1))


@pytest.mark.parametrize("config", ARGMAX_CONFIGS)
def test_argmax_ranks_nan_first_and_handles_infinities(config: dict[str, Any] | None) -> None:
    x = RNG.standard_normal((5, 5000))
    x[0, [7, 4000]] = np.inf
    x[1, [100, 4900, 3000]] = [np.nan, np.nan, np.inf]
    x[2] = -np.inf
    x[3, 4999] = np.nan
    x[4, 2048] = 1e30
    result = argmax(tensor(x, "f32"), config=config)
    assert isinstance(result, cutile.Tensor) and str(result.dtype) == "i64"
    np.testing.assert_array_equal(result.to_numpy(), [7, 100, 0, 4999, 2048])  # torch.argmax's answers


def special_rows(cols: int) -> np.ndarray:
    """Rows whose answers hang on NaN, infinities, signed zeros and tile edges (values
    every dtype holds exactly)."""
    x = RNG.integers(-50, 50, (10, cols)).astype(np.float64)
    x[0, [0, 3000]] = np.nan  # a NaN first
    x[1, 1234], x[1, 2500] = -np.nan, np.nan  # a negative NaN is a NaN too
    x[2] = -np.inf
    x[3] = -np.abs(x[3]) - 1
    x[3, [100, 300]] = [0.0, -0.0]  # -0.0 equals 0.0: the first zero
    x[4] = -np.abs(x[4]) - 1
    x[4, [100, 300]] = [-0.0, 0.0]
    x[5, cols - 1] = np.inf  # the last column (in the last tile's tail)
    x[6, cols - 1] = np.nan
    x[7] = -np.abs(x[7]) - 1  # all negative: the least negative
    x[8, [2048, 4097]] = 1000.0  # the first tile's edge
    x[9, [1, 2]] = [np.inf, np.nan]  # NaN beats +inf
    return x


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("config", ARGMAX_CONFIGS)
def test_argmax_ranks_nan_signed_zeros_and_infinities_as_torch(dtype: str, config: dict[str, Any] | None) -> None:
    x = special_rows(5000)
    out = api.full([10], -7, dtype="i64")
    argmax(tensor(x, dtype), out=out, config=config)
    expected = [0, 1234, 0, 100, 100, 4999, 4999, int(x[7].argmax()), 2048, 2]  # torch.argmax's answers
    assert expected == x.argmax(-1).tolist()
    np.testing.assert_array_equal(out.to_numpy(), expected)


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_argmax_of_16_bit_values_orders_them_all(dtype: str) -> None:
    # each row: every value of the dtype up to a threshold (-inf for the others), shuffled,
    # so the answer is where the threshold lies only if no smaller value ranks above it
    bits = np.arange(2**16, dtype=np.uint16)
    every = bits.view(np.float16).astype(np.float32) if dtype == "f16" else \
        (bits.astype(np.uint32) << 16).view(np.float32)
    every = every[~np.isnan(every)].astype(np.float64)
    tiny = float(every[every > 0].min())  # the least subnormal
    largest = float(every[every < np.inf].max())
    thresholds = [-largest, -1.5, -tiny, 0.0, tiny, 1.0, largest, np.inf]
    rows = np.stack([RNG.permutation(np.where(every <= threshold, every, -np.inf)) for threshold in thresholds])
    np.testing.assert_array_equal(argmax(tensor(rows, dtype)).to_numpy(), rows.argmax(-1))


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("shape", [(3, 9001), (2, 4096)])
@pytest.mark.parametrize("chunk_tiles", [4, 16])
def test_argmax_of_chunks_of_several_groups(monkeypatch: pytest.MonkeyPatch, dtype: str, shape: tuple[int, int],
                                            chunk_tiles: int) -> None:
    from cutile_kernels import _argmax

    monkeypatch.setattr(_argmax, "GROUP_TILES", 2)  # groups of 2 tiles: a chunk of 4 or 16 has 2 or 8
    x = RNG.integers(-20, 20, shape).astype(np.float64)
    x[0, -1] = 100.0  # in the last group (of the last chunk: its later groups past the row's end)
    x[1, [700, 3000]] = [np.nan, 100.0]
    config = {"tile_rows": 1, "tile_cols": 512, "chunk_tiles": chunk_tiles, "occupancy": 1}
    np.testing.assert_array_equal(argmax(tensor(x, dtype), config=config).to_numpy(), x.argmax(-1))


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_argmax_groups_of_wide_tiles_fit_a_keys_columns(dtype: str) -> None:
    # tiles of 8192 columns: groups of 8 (65536 columns, what a key's low half holds)
    x = RNG.integers(-20, 20, (2, 140_000)).astype(np.float64)
    x[0, [65_535, 65_536, 139_999]] = 50.0
    x[1, 131_072] = np.nan
    config = {"tile_rows": 1, "tile_cols": 8192, "chunk_tiles": 16, "occupancy": 1}
    np.testing.assert_array_equal(argmax(tensor(x, dtype), config=config).to_numpy(), [65_535, 131_072])
    with pytest.raises(cutile.ArgumentError, match=re.escape("config['tile_cols'] of 131072 is more than the 65536")):
        argmax(tensor(x, dtype), config=dict(config, tile_cols=131_072))


@pytest.mark.parametrize("dtype", DTYPES)
def test_argmax_of_rows_of_one_chunk_is_one_launch(dtype: str) -> None:
    x = special_rows(5000)
    one_chunk = {"tile_rows": 2, "tile_cols": 512, "chunk_tiles": 16, "occupancy": 1}  # 10 tiles a row
    pending = argmax.launch(tensor(x, dtype), config=one_chunk)
    assert pending.then is None  # no second stage
    np.testing.assert_array_equal(pending.run().to_numpy(), x.argmax(-1))
    two_stages = argmax.launch(tensor(x, dtype), config=dict(one_chunk, chunk_tiles=8))
    assert two_stages.then is not None
    two_stages.cancel()


def test_argmax_over_a_long_row_splits_it_into_chunks() -> None:
    x = RNG.standard_normal((1, 152_000))
    x[0, 151_999] = 10.0
    x[0, 151_000] = 10.0
    assert argmax(tensor(x, "bf16"), keepdim=True).to_numpy().tolist() == [[151_000]]


@pytest.mark.interpreter_only
def test_argmax_of_a_numpy_array_is_a_numpy_int64_array() -> None:
    x = RNG.standard_normal((3, 4, 50)).astype(np.float32)
    result = argmax(x, dim=2)
    assert isinstance(result, np.ndarray) and result.dtype == np.int64
    np.testing.assert_array_equal(result, x.argmax(-1))


@pytest.mark.parametrize("winner_dtype", ["f32", "bf16"])
def test_argmax_f32_and_16_bit_rows_have_separate_buckets(tmp_path: Any, monkeypatch: pytest.MonkeyPatch,
                                                          winner_dtype: str) -> None:
    from cutile import tune
    from cutile_kernels import _argmax, _pointwise

    monkeypatch.setenv("CUTILE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("CUTILE_TUNE", raising=False)
    monkeypatch.setattr(_pointwise, "RECORDS", tmp_path / "records")
    fresh = {size: _pointwise.tuner(t.short_name, t.space, t.default, t.setup, t.source, t.bucket_of)
             for size, t in _argmax.TUNERS.items()}  # (no record read, no config answered yet)
    monkeypatch.setattr(_argmax, "TUNERS", fresh)
    assert fresh[4].record_path == fresh[2].record_path  # one record holds both element sizes
    x = special_rows(5000)
    size = 4 if winner_dtype == "f32" else 2
    assert _argmax.bucket((10, 5000, size)) == f"16x8192x{8 * size}bit"
    one_chunk: tune.Config = {"tile_rows": 2, "tile_cols": 512, "chunk_tiles": 16, "occupancy": 1}  # default: 3 chunks
    tune.Record(fresh[4].provenance, {_argmax.bucket((10, 5000, size)): tune.Winner(one_chunk, 0.1)}).save(
        fresh[4].record_path)
    for dtype in DTYPES:
        pending = argmax.launch(tensor(x, dtype))
        mine = (dtype == "f32") == (winner_dtype == "f32")  # f16 and bf16 share the 16-bit bucket
        assert (pending.then is None) == mine, dtype  # the winner's one launch, else the default's two stages
        np.testing.assert_array_equal(pending.run().to_numpy(), x.argmax(-1))
    other = 2 if size == 4 else 4
    assert fresh[size].config((10, 5000, size)) == one_chunk
    assert fresh[other].config((10, 5000, other)) == _argmax.DEFAULTS[other]


def test_argmax_searches_rows_of_the_buckets_dtype(monkeypatch: pytest.MonkeyPatch) -> None:
    from cutile_kernels import _argmax

    made: list[str] = []
    randn = api.randn

    def recording(shape: Any, dtype: Any, **options: Any) -> Any:
        made.append(str(dtype))
        return randn(shape, dtype, **options)

    monkeypatch.setattr(api, "randn", recording)
    for size in (4, 2):
        _argmax._setup(dict(_argmax.DEFAULTS[size]), (3, 100, size))().sync()
    assert made == ["f32", "bf16"]


def test_argmax_launch_form_is_one_op() -> None:
    x = RNG.standard_normal((4, 3000))
    pending = argmax.launch(tensor(x, "f32"), config=ARGMAX_CONFIGS[1])
    pending.op.sync()
    np.testing.assert_array_equal(pending.finish().to_numpy(), x.astype(np.float32).argmax(-1))


@pytest.mark.parametrize("call, error, words", [
    (lambda: argmax(api.zeros([4, 8]), dim=0), cutile.ArgumentError, "parameter 'dim' must be the last dim"),
    (lambda: argmax(api.zeros([4, 8], dtype="i32")), cutile.ArgumentTypeError, "parameter 'x' has dtype i32"),
    (lambda: argmax(api.zeros([4, 0])), cutile.ArgumentError, "is empty"),
    (lambda: argmax(api.zeros([4, 8]), out=api.zeros([4], dtype="i32")), cutile.ArgumentTypeError,
     "out has dtype i32; expected i64"),
    (lambda: argmax(api.zeros([4, 8]), keepdim=True, out=api.zeros([4], dtype="i64")), cutile.ArgumentError,
     "out has shape [4]; expected [4, 1]"),
])
def test_argmax_refuses_bad_arguments(call: Any, error: type[Exception], words: str) -> None:
    with pytest.raises(error, match=re.escape(words)):
        call()


# -- kv_cache_update ----------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cache_shape, tokens, start", [((50, 3, 24), 5, 7), ((2, 40, 2, 36), 1, 39),
                                                        ((3, 17, 1, 8), 17, 0), ((2, 64, 1, 8), 8, 20),
                                                        ((1, 64, 2, 8), 12, 4)])
@pytest.mark.parametrize("positions_kind", ["int", "list", "i32", "i64"])
def test_kv_cache_update_writes_only_the_new_rows(dtype: str, cache_shape: tuple[int, ...], tokens: int, start: int,
                                                  positions_kind: str) -> None:
    before = RNG.standard_normal(cache_shape)
    new_shape = (*cache_shape[:-3], tokens, *cache_shape[-2:])
    new = RNG.standard_normal(new_shape)
    cache = tensor(before, dtype)
    if positions_kind == "int":
        positions: Any = start
    elif positions_kind == "list":
        positions = list(range(start, start + tokens))
    else:
        positions = api.from_numpy(np.arange(start, start + tokens, dtype=np.dtype(positions_kind.replace("i", "int"))))
    # several column tiles with a tail, blocks looping, several rows per tile where the start allows
    config = {"tile_rows": 4, "tile_cols": 16, "max_blocks": 3}
    assert kv_cache_update(cache, tensor(new, dtype), positions, config=config) is cache
    expected = stored(before, dtype)
    expected[..., start:start + tokens, :, :] = stored(new, dtype)
    np.testing.assert_array_equal(read(cache), expected)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cache_shape, tokens, start", [((50, 3, 16), 5, 7), ((2, 40, 5, 8), 1, 39),
                                                        ((3, 17, 1, 32), 17, 0), ((2, 64, 2, 8), 8, 20)])
@pytest.mark.parametrize("positions_kind", ["int", "list", "i32", "i64"])
def test_kv_cache_update_of_a_k_and_v_pair_from_a_fused_qkv_output(dtype: str, cache_shape: tuple[int, ...],
                                                                   tokens: int, start: int,
                                                                   positions_kind: str) -> None:
    """One launch writes both caches; k and v are head slices of one (..., tokens, q + 2 kv
    heads, head_dim) buffer (strided, read in place)."""
    heads, head_dim = cache_shape[-2:]
    lead = cache_shape[:-3]
    qkv = RNG.standard_normal((*lead, tokens, 3 + 2 * heads, head_dim))
    buffer = tensor(qkv, dtype)
    k, v = buffer[..., 3:3 + heads, :], buffer[..., 3 + heads:, :]
    assert not k.is_contiguous and not v.is_contiguous
    keys, values = RNG.standard_normal(cache_shape), RNG.standard_normal(cache_shape)
    k_cache, v_cache = tensor(keys, dtype), tensor(values, dtype)
    if positions_kind == "int":
        positions: Any = start
    elif positions_kind == "list":
        positions = list(range(start, start + tokens))
    else:
        positions = api.from_numpy(np.arange(start, start + tokens, dtype=np.dtype(positions_kind.replace("i", "int"))))
    # several head tiles with a tail (5 heads in tiles of 2), blocks looping, several rows per tile
    config = {"tile_rows": 4, "tile_cols": 16, "max_blocks": 3}
    caches = kv_cache_update((k_cache, v_cache), (k, v), positions, config=config)
    assert caches[0] is k_cache and caches[1] is v_cache
    written = stored(qkv, dtype)
    for cache, before, first in ((k_cache, keys, 3), (v_cache, values, 3 + heads)):
        expected = stored(before, dtype)
        expected[..., start:start + tokens, :, :] = written[..., first:first + heads, :]
        np.testing.assert_array_equal(read(cache), expected)


@pytest.mark.parametrize("dtype", ["bf16", "f32"])
@pytest.mark.parametrize("cache_shape, tokens, start", [((50, 3, 16), 5, 7), ((2, 40, 5, 8), 1, 39)])
@pytest.mark.parametrize("positions_kind", ["int", "i32"])
def test_kv_cache_update_of_one_cache_reads_a_strided_head_slice(dtype: str, cache_shape: tuple[int, ...],
                                                                 tokens: int, start: int, positions_kind: str) -> None:
    heads = cache_shape[-2]
    qkv = RNG.standard_normal((*cache_shape[:-3], tokens, 1 + 2 * heads, cache_shape[-1]))
    v = tensor(qkv, dtype)[..., 1 + heads:, :]
    assert not v.is_contiguous
    before = RNG.standard_normal(cache_shape)
    cache = tensor(before, dtype)
    positions = start if positions_kind == "int" else api.from_numpy(np.arange(start, start + tokens, dtype=np.int32))
    assert kv_cache_update(cache, v, positions, config={"tile_rows": 4, "tile_cols": 16, "max_blocks": 3}) is cache
    expected = stored(before, dtype)
    expected[..., start:start + tokens, :, :] = stored(qkv, dtype)[..., 1 + heads:, :]
    np.testing.assert_array_equal(read(cache), expected)


def test_kv_cache_update_of_one_cache_takes_strided_rows_only_of_a_power_of_two_head_dim() -> None:
    new = api.zeros([2, 4, 12])[:, :2]
    with pytest.raises(cutile.ArgumentError, match="parameter 'new' of shape \\[2, 2, 12\\] must be contiguous"):
        kv_cache_update(api.zeros([10, 2, 12]), new, 0)
    with pytest.raises(cutile.ArgumentError, match="parameter 'cache' of shape \\[10, 2, 8\\] must be contiguous"):
        kv_cache_update(api.zeros([10, 4, 8])[:, :2], api.zeros([2, 4, 8])[:, :2], 0)


def test_kv_cache_update_of_a_pair_is_one_launch() -> None:
    caches = api.zeros([2, 16, 2, 8]), api.zeros([2, 16, 2, 8])
    new = api.ones([2, 1, 2, 8]), api.ones([2, 1, 2, 8])
    pending = kv_cache_update.launch(caches, new, api.from_numpy(np.array([3], np.int32)))
    assert isinstance(pending.op, cutile.Launch)
    pending.cancel()


@pytest.mark.interpreter_only
def test_kv_cache_update_pair_kernel_asserts_device_positions() -> None:
    kernel = importlib.import_module("cutile_kernels._kv_cache").cache_update_pair_kernel(cutile.core.f32,
                                                                                          cutile.core.i32)
    new = api.ones([1, 3, 2, 8])
    for values, message in (([4, 5, 7], "positions must be consecutive"),
                            ([18, 19, 20], "tiles_within: the range of axis 1 passes the tile grid")):
        k_cache, v_cache = api.zeros([1, 20, 16]), api.zeros([1, 20, 16])
        with pytest.raises(cutile.KernelRuntimeError, match=re.escape(message)):
            kernel(k_cache.partition([1, 1, 16]).map([1, 1, 1], blocks=2),
                   v_cache.partition([1, 1, 16]).map([1, 1, 1], blocks=2), new, new,
                   api.from_numpy(np.array(values, np.int32)), BH=2).sync()


def zeros(*shape: int, dtype: str = "f32") -> cutile.Tensor:
    return api.zeros(list(shape), dtype=dtype)


def pair_update(cache: tuple[Any, ...] | Any = None, new: tuple[Any, ...] | Any = None, positions: Any = 0) -> Any:
    """kv_cache_update of the given caches and new rows, else fresh (10, 2, 8) caches and
    (2, 2, 8) new rows (made when called: on the test's backend)."""
    return kv_cache_update(cache if cache is not None else (zeros(10, 2, 8), zeros(10, 2, 8)),
                           new if new is not None else (zeros(2, 2, 8), zeros(2, 2, 8)), positions)


def shared_cache() -> Any:
    cache = zeros(10, 2, 8)
    return pair_update((cache, cache))


def new_in_cache() -> Any:
    cache = zeros(10, 2, 8)
    return pair_update((cache, zeros(10, 2, 8)), (cache[:2], zeros(2, 2, 8)))


@pytest.mark.parametrize("call, error, words", [
    (lambda: pair_update((zeros(10, 2, 8),) * 3), cutile.ArgumentError,
     "'cache' must be a tensor or a pair (k_cache, v_cache), got 3 items"),
    (lambda: pair_update(new=zeros(2, 2, 8)), cutile.ArgumentError, "takes a pair (k, v) for parameter 'new'"),
    (lambda: pair_update(zeros(10, 2, 8)), cutile.ArgumentError, "'new' is a pair"),
    (lambda: pair_update((zeros(10, 2, 8), zeros(10, 3, 8))), cutile.ArgumentError,
     "'cache[1]' is f32 [10, 3, 8]; the pair of caches must agree"),
    (lambda: pair_update(new=(zeros(2, 2, 8), zeros(3, 2, 8))), cutile.ArgumentError,
     "'new[1]' is f32 [3, 2, 8]; the pair of new tensors must agree"),
    (lambda: pair_update(new=(zeros(2, 2, 8), zeros(2, 2, 8, dtype="f16"))), cutile.ArgumentError,
     "'new[1]' is f16"),
    (shared_cache, cutile.ArgumentError, "share memory"),
    (new_in_cache, cutile.ArgumentError, "'new[0]' overlaps the memory of 'cache[0]'"),
    (lambda: pair_update((zeros(10, 4, 8)[:, :2], zeros(10, 2, 8))), cutile.ArgumentError,
     "'cache[0]' of shape [10, 2, 8] must be contiguous"),
    (lambda: pair_update((zeros(10, 2, 12), zeros(10, 2, 12)), (zeros(2, 2, 12), zeros(2, 2, 12))),
     cutile.ArgumentError, "a power of two, got 12"),
    (lambda: pair_update(positions=9), cutile.ArgumentError,
     "the 2 new tokens must fit in the cache's 10 positions"),
    (lambda: pair_update(positions=[4, 6]), cutile.ArgumentError, "must be consecutive"),
    (lambda: pair_update(new=(zeros(2, 2, 4), zeros(2, 2, 4))), cutile.ArgumentError,
     "parameter 'new[0]' of shape [2, 2, 4] must match 'cache[0]' [10, 2, 8]"),
])
def test_kv_cache_update_of_a_pair_refuses_bad_arguments(call: Any, error: type[Exception], words: str) -> None:
    with pytest.raises(error, match=re.escape(words)):
        call()


@pytest.mark.parametrize("kind", ["list", "numpy"])
def test_kv_cache_update_checks_host_positions_on_the_host(kind: str) -> None:
    cache, new = api.zeros([20, 2, 8]), api.ones([3, 2, 8])

    def positions(values: list[int]) -> Any:
        return values if kind == "list" else np.array(values, np.int32)
    with pytest.raises(cutile.ArgumentError, match=re.escape("'positions' must be consecutive (start, start + 1, "
                                                             "...); [2] is 7, expected 6")):
        kv_cache_update(cache, new, positions([4, 5, 7]))
    with pytest.raises(cutile.ArgumentError, match="'positions' starts at 18: the 3 new tokens must fit in the "
                                                   "cache's 20 positions"):
        kv_cache_update(cache, new, positions([18, 19, 20]))
    with pytest.raises(cutile.ArgumentError, match=re.escape("'positions' has shape [2]; expected [3]")):
        kv_cache_update(cache, new, positions([4, 5]))
    assert not read(cache).any()  # no kernel ran


@pytest.mark.interpreter_only
def test_kv_cache_update_checks_host_tensors_of_positions_on_the_host() -> None:
    cache, new = api.zeros([20, 2, 8]), api.ones([3, 2, 8])
    with pytest.raises(cutile.ArgumentError, match="'positions' must be consecutive"):
        kv_cache_update(cache, new, api.from_numpy(np.array([4, 5, 7], np.int64)))
    with pytest.raises(cutile.ArgumentTypeError, match="'positions' must hold ints"):
        kv_cache_update(cache, new, [4, 5, 6.0])


@pytest.mark.interpreter_only
def test_kv_cache_update_kernel_asserts_device_positions() -> None:
    """What a device tensor of positions meets (the host never reads it): the kernel's own
    checks, run here on the interpreter by launching the kernel itself."""
    kernel = importlib.import_module("cutile_kernels._kv_cache").cache_update_kernel(cutile.core.f32, cutile.core.i32)
    new = api.ones([1, 3, 16])
    for values, message in (([4, 5, 7], "positions must be consecutive"),
                            ([18, 19, 20], "tiles_within: the range of axis 1 passes the tile grid")):
        cache = api.zeros([1, 20, 16])
        with pytest.raises(cutile.KernelRuntimeError, match=re.escape(message)):
            kernel(cache.partition([1, 1, 16]).map([1, 1, 1], blocks=2), new,
                   api.from_numpy(np.array(values, np.int32))).sync()


@pytest.mark.interpreter_only
def test_kv_cache_update_writes_into_numpy_caches_in_place() -> None:
    cache = np.zeros((2, 10, 1, 4), np.float32)
    new = np.ones((2, 2, 1, 4), np.float32)
    assert kv_cache_update(cache, new, 3) is cache
    assert cache.sum() == 16 and cache[:, 3:5].min() == 1


@pytest.mark.parametrize("call, error, words", [
    (lambda: kv_cache_update(api.zeros([10, 2, 8]), api.zeros([2, 2, 8]), 9), cutile.ArgumentError,
     "the 2 new tokens must fit in the cache's 10 positions"),
    (lambda: kv_cache_update(api.zeros([10, 2, 8]), api.zeros([2, 2, 8]), -1), cutile.ArgumentError,
     "parameter 'positions' -1"),
    (lambda: kv_cache_update(api.zeros([10, 2, 8]), api.zeros([2, 3, 8]), 0), cutile.ArgumentError,
     "parameter 'new' of shape [2, 3, 8] must match 'cache' [10, 2, 8]"),
    (lambda: kv_cache_update(api.zeros([10, 2, 8]), api.zeros([2, 2, 8], dtype="f16"), 0), cutile.ArgumentTypeError,
     "'cache' (f32) and 'new' (f16)"),
    (lambda: kv_cache_update(api.zeros([10, 2, 8]), api.zeros([1, 2, 2, 8]), 0), cutile.ArgumentError,
     "must have the rank of 'cache'"),
    (lambda: kv_cache_update(api.zeros([10, 2, 8]), api.zeros([2, 2, 8]), api.zeros([3], dtype="i32")),
     cutile.ArgumentError, "'positions' has shape [3]; expected [2]"),
    (lambda: kv_cache_update(api.zeros([10, 2, 8]), api.zeros([2, 2, 8]), api.zeros([2])),
     cutile.ArgumentTypeError, "parameter 'positions' has dtype f32"),
    (lambda: kv_cache_update(api.zeros([10, 2, 8]), api.zeros([0, 2, 8]), 0), cutile.ArgumentError,
     "holds no tokens"),
])
def test_kv_cache_update_refuses_bad_arguments(call: Any, error: type[Exception], words: str) -> None:
    with pytest.raises(error, match=re.escape(words)):
        call()


# -- configs ------------------------------------------------------------------------------------
TUNED = {"rope": (9, 4, 2, 16), "activations": (300, 2, 30), "embedding": (9, 50, 40), "argmax": (3, 700, 4),
         "kv_cache": (2, 20, 3, 40)}


@pytest.mark.parametrize("module_name", list(TUNED))
def test_each_tuner_answers_its_default_and_can_time_a_config(module_name: str) -> None:
    module = importlib.import_module(f"cutile_kernels._{module_name}")
    default = module.TUNER.default  # (the module's DEFAULT; argmax's f32 one of its DEFAULTS)
    chosen = module.TUNER.config(TUNED[module_name])
    if not module.TUNER.record_path.exists():  # no record, no search: the default
        assert chosen == default
    assert set(chosen) == set(default)
    runner = module.TUNER.setup(dict(default), TUNED[module_name])
    runner().sync()  # the runner a search times: a pending op


@pytest.mark.parametrize("config", [{"block_elems": 1024, "occupancy": 1}, {"block_elems": 16384, "occupancy": 4}])
def test_every_config_of_a_function_gives_the_same_result(config: dict[str, Any]) -> None:
    x = RNG.standard_normal((7, 33, 32))
    q = tensor(x, "f32")
    close(silu(q, config=config), silu64(x), "f32", 2.0)
    q_out, _ = rope(q, q[:, :1], api.from_numpy(np.arange(7, dtype=np.int32)), config=config)
    close(q_out, rope_reference(x, np.arange(7), 1e4, "neox"), "f32", 20.0)


# -- torch tensors in and out, on the GPU -----------------------------------------------------
@pytest.mark.gpu
def test_torch_tensors_in_give_torch_tensors_out() -> None:
    torch = pytest.importorskip("torch")
    q = torch.randn(33, 8, 64, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(33, 2, 64, device="cuda", dtype=torch.bfloat16)
    positions = torch.arange(33, device="cuda") * 7
    q_out, k_out = rope(q, k, positions)
    assert isinstance(q_out, torch.Tensor) and q_out.is_cuda and q_out.dtype == torch.bfloat16
    expected = rope_reference(q.double().cpu().numpy(), positions.cpu().numpy(), 1e4, "neox")
    np.testing.assert_allclose(q_out.double().cpu().numpy(), expected, rtol=1.6e-2, atol=1.6e-2)
    rope(q, k, positions, inplace=True)
    torch.cuda.synchronize()
    assert torch.equal(q, q_out)

    gate, up = torch.randn(17, 300, device="cuda"), torch.randn(17, 300, device="cuda")
    out = silu_mul(gate, up)
    assert isinstance(out, torch.Tensor)
    torch.testing.assert_close(out, torch.nn.functional.silu(gate) * up, rtol=1e-5, atol=1e-5)

    logits = torch.randn(3, 151936, device="cuda", dtype=torch.bfloat16)
    best = argmax(logits)
    assert best.dtype == torch.int64 and torch.equal(best, logits.argmax(-1))

    table = torch.randn(1000, 128, device="cuda", dtype=torch.float16)
    ids = torch.randint(0, 1000, (5, 7), device="cuda")
    assert torch.equal(embedding(ids, table), torch.nn.functional.embedding(ids, table))

    cache = torch.zeros(2, 64, 4, 32, device="cuda", dtype=torch.bfloat16)
    new = torch.randn(2, 3, 4, 32, device="cuda", dtype=torch.bfloat16)
    assert kv_cache_update(cache, new, torch.tensor([10, 11, 12], device="cuda")) is cache
    torch.cuda.synchronize()
    assert torch.equal(cache[:, 10:13], new) and cache[:, :10].abs().sum() == 0 and cache[:, 13:].abs().sum() == 0


def test_pending_work_of_two_launches_is_cancelled_or_run_whole() -> None:
    x = api.from_numpy(np.random.default_rng(3).standard_normal((4, 3000)).astype(np.float32))  # two chunks a row
    out = api.empty([4], dtype="i64")
    pending = argmax.launch(x, out=out)
    pending.cancel()  # the first launch dropped: its tensors are free again
    pending = argmax.launch(x, out=out)
    op = pending.op  # the chain made: from now on it runs whole or not at all
    with pytest.raises(cutile.OwnershipError, match="cannot be cancelled"):
        pending.cancel()
    assert pending.op is op
    pending.run()
    np.testing.assert_array_equal(out.to_numpy(), np.argmax(x.to_numpy(), axis=-1))


def test_do_bench_runs_a_functions_pending_work() -> None:
    # `.launch(...)` gives a Pending, which presents its op: do_bench times it (the output
    # is written), never a value it cannot run
    from cutile import bench

    x = api.from_numpy(np.linspace(-3, 3, 1000, dtype=np.float32))
    out = api.from_numpy(np.full(1000, np.nan, np.float32))
    bench.do_bench(lambda: silu.launch(x, out=out), warmup=1, reps=2)
    values = x.to_numpy().astype(np.float64)
    np.testing.assert_allclose(out.to_numpy(), values / (1 + np.exp(-values)), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("call, message", [
    (lambda x: silu(x, config={"foo": 1}), r"silu\(\): config key 'foo' is unknown"),
    (lambda x: silu(x, config={"block_elems": 0}), r"silu\(\): config\['block_elems'\] must be a power of two"),
    (lambda x: silu(x, config={"block_elems": "big"}), r"config\['block_elems'\] must be a power of two"),
    (lambda x: argmax(x, config={"tile_rows": -1}), r"argmax\(\): config\['tile_rows'\]"),
])
def test_bad_configs_are_refused_naming_the_key(call: Any, message: str) -> None:
    x = api.from_numpy(np.arange(100, dtype=np.float32))
    with pytest.raises(cutile.ArgumentError, match=message):
        call(x)


@pytest.mark.parametrize("positions_kind", ["int", "i32"])
def test_kv_cache_update_of_a_pair_in_known_layouts_takes_its_plan_and_still_checks_positions(
        positions_kind: str) -> None:
    """A pair update of cutile tensors keeps its plan by the operands' layouts and memory
    (and an int start): a call in them again (new values, new view objects) takes it and
    writes right; another start or stride is planned afresh; positions the host holds
    past the cache and a consumed cache are still refused."""
    kv_cache = importlib.import_module("cutile_kernels._kv_cache")
    max_seq, heads, dim, tokens = 24, 3, 16, 2
    k_cache, v_cache = tensor(np.zeros((max_seq, heads, dim)), "bf16"), tensor(np.zeros((max_seq, heads, dim)), "bf16")
    qkv = tensor(RNG.standard_normal((tokens, 1 + 2 * heads, dim)), "bf16")
    k, v = qkv[..., 1:1 + heads, :], qkv[..., 1 + heads:, :]  # strided head slices
    start = 5

    def positions_at(at: int) -> Any:
        return at if positions_kind == "int" else api.from_numpy(np.arange(at, at + tokens, dtype=np.int32))

    def check_written(at: int) -> None:
        written = qkv.to_numpy().astype(np.float64)
        for cache, first in ((k_cache, 1), (v_cache, 1 + heads)):
            np.testing.assert_array_equal(read(cache)[at:at + tokens], written[:, first:first + heads])

    kv_cache._PAIR_PLANS.clear()
    positions = positions_at(start)
    caches = kv_cache_update((k_cache, v_cache), (k, v), positions)
    assert caches[0] is k_cache and caches[1] is v_cache
    check_written(start)
    assert len(kv_cache._PAIR_PLANS) == 1
    kept = next(iter(kv_cache._PAIR_PLANS.values()))
    qkv.host_view()[...] = RNG.standard_normal(qkv.shape)  # new values in the same memory
    kv_cache_update((k_cache, v_cache), (qkv[..., 1:1 + heads, :], qkv[..., 1 + heads:, :]), positions)
    assert len(kv_cache._PAIR_PLANS) == 1 and next(iter(kv_cache._PAIR_PLANS.values())) is kept
    check_written(start)
    if positions_kind == "i32":  # the same tensor, a new position in it: checked and written there
        positions.host_view()[...] = [9, 10]
        kv_cache_update((k_cache, v_cache), (k, v), positions)
        check_written(9)
        positions.host_view()[...] = [max_seq - 1, max_seq]
        with pytest.raises(cutile.ArgumentError, match="positions"):
            kv_cache_update((k_cache, v_cache), (k, v), positions)
        positions.host_view()[...] = [start, start + 1]
    else:  # another start: its own plan
        kv_cache_update((k_cache, v_cache), (k, v), 9)
        check_written(9)
        assert len(kv_cache._PAIR_PLANS) == 2
        with pytest.raises(cutile.ArgumentError, match="positions"):
            kv_cache_update((k_cache, v_cache), (k, v), max_seq)
    contiguous_k = tensor(qkv.to_numpy()[..., 1:1 + heads, :].astype(np.float32), "bf16")  # another stride
    kv_cache_update((k_cache, v_cache), (contiguous_k, v), positions)
    check_written(start)
    taken = v_cache.partition([1, 1, dim])
    with pytest.raises(cutile.OwnershipError, match="consumed"):
        kv_cache_update((k_cache, v_cache), (k, v), positions)
    del taken
