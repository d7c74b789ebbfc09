"""split_k_matmul: numpy float64 references on random inputs with tails in M, N and K,
every dtype and epilogue, transposed and strided operand views, poisoned outputs and
workspaces, split counts from 1 to past K's chunk count; argument errors; its config
space and defaults; compiles for sm_90 and sm_100; a GPU run at M = N = 256, K = 16384."""

from typing import Any

import ml_dtypes
import numpy as np
import pytest

import cutile
from cutile import api
from cutile.core import bf16, f16, f32
from cutile.tune import Space
from cutile_kernels import _splitk
from cutile_kernels._splitk import default_config, prune_for, space, split_k_matmul
from matmul_testkit import assert_close, random, reference

M, N, K = 40, 67, 300
SMALL = {"tile_m": 16, "tile_n": 16, "tile_k": 32}  # 10 chunks of K, the last one a tail


@pytest.mark.parametrize("splits", [1, 2, 3, 7, 16])  # 7: the last splits empty; 16: more than K's 10 chunks
@pytest.mark.parametrize("dtype", [f16, bf16, f32], ids=str)
def test_full_epilogue_matches_float64(dtype: Any, splits: int) -> None:
    rng = np.random.default_rng(splits)
    a, w = random(rng, (M, K), dtype), random(rng, (N, K), dtype)
    bias, residual = random(rng, (N,), dtype), random(rng, (M, N), dtype)
    out = api.full([M, N], np.nan, dtype=dtype)
    split_k_matmul(api.from_numpy(a), api.from_numpy(w).T, out, bias=api.from_numpy(bias), activation="gelu",
                   residual=api.from_numpy(residual), alpha=-1.5, config={**SMALL, "split_k": splits}).sync()
    assert_close(out.to_numpy(), reference(a, w.T, bias, "gelu", residual, -1.5), dtype)


@pytest.mark.parametrize("method", ["mma", "mma_t"])
@pytest.mark.parametrize("activation", [None, "relu", "gelu", "silu"])
@pytest.mark.parametrize("m", [1, 3, 16])
def test_each_activation_method_and_small_m(m: int, activation: str | None, method: str) -> None:
    rng = np.random.default_rng(m)
    a, b = random(rng, (m, K), bf16), random(rng, (K, N), bf16)  # b row-major [K, N]: read along N
    out = api.full([m, N], np.nan, dtype=bf16)
    split_k_matmul(api.from_numpy(a), api.from_numpy(b), out, activation=activation,
                   config={**SMALL, "split_k": 4, "method": method}).sync()
    assert_close(out.to_numpy(), reference(a, b, activation=activation), bf16)


def test_operand_views_a_transposed_b_strided_out_in_a_wider_buffer() -> None:
    """a is the transposed view of a [K, M] array, b a column slice of a wider [K, 2N]
    array (strided, neither layout contiguous), out a slice of a NaN-poisoned buffer:
    its neighbours stay untouched."""
    rng = np.random.default_rng(9)
    a_km, b_wide = random(rng, (K, M), f32), random(rng, (K, 2 * N), f32)
    wide = api.full([M, N + 3], np.nan, dtype=f32)
    out = wide[:, 1:1 + N]
    split_k_matmul(api.from_numpy(a_km).T, api.from_numpy(b_wide)[:, ::2], out, bias=api.from_numpy(b_wide[0, :N]),
                   config={**SMALL, "split_k": 3}).sync()
    values = wide.to_numpy()
    assert_close(values[:, 1:1 + N], reference(a_km.T, b_wide[:, ::2], b_wide[0, :N]), f32)
    assert np.isnan(values[:, 0]).all() and np.isnan(values[:, 1 + N:]).all()


def test_mixed_dtypes_of_out_bias_and_residual() -> None:
    rng = np.random.default_rng(4)
    a, w = random(rng, (M, K), f16), random(rng, (N, K), f16)
    bias, residual = random(rng, (N,), bf16), random(rng, (M, N), f32)
    out = api.full([M, N], np.nan, dtype=f32)
    split_k_matmul(api.from_numpy(a), api.from_numpy(w).T, out, bias=api.from_numpy(bias),
                   residual=api.from_numpy(residual), activation="relu", config={**SMALL, "split_k": 5}).sync()
    assert_close(out.to_numpy(), reference(a, w.T, bias, "relu", residual), f32)


def test_default_config_and_the_returned_op() -> None:
    rng = np.random.default_rng(8)
    a, w = random(rng, (M, K), bf16), random(rng, (N, K), bf16)
    out = api.full([M, N], np.nan, dtype=bf16)
    op = split_k_matmul(api.from_numpy(a), api.from_numpy(w).T, out)
    assert default_config(M, N, K, bf16)["split_k"] > 1
    with pytest.raises(cutile.OwnershipError, match="split_k_matmul"):
        out.to_numpy()  # held by the pending op from the call, as by a launch
    op.sync()
    assert_close(out.to_numpy(), reference(a, w.T), bf16)
    launch = split_k_matmul(api.from_numpy(a), api.from_numpy(w).T, out, config={"split_k": 1})
    assert isinstance(launch, cutile.Launch)
    with pytest.raises(cutile.OwnershipError):
        out.to_numpy()  # held by the pending launch
    launch.sync()
    assert_close(out.to_numpy(), reference(a, w.T), bf16)


def test_repeated_calls_reuse_out_and_refuse_a_second_pending_one() -> None:
    rng = np.random.default_rng(13)
    a, w = random(rng, (M, K), f32), random(rng, (N, K), f32)
    a_t, b_t = api.from_numpy(a), api.from_numpy(w).T
    out = api.full([M, N], np.nan, dtype=f32)
    for alpha in (1.0, -2.0, 0.5):  # the same objects each time: the cached views and workspace
        split_k_matmul(a_t, b_t, out, alpha=alpha, config={**SMALL, "split_k": 3}).sync()
        assert_close(out.to_numpy(), reference(a, w.T, alpha=alpha), f32)
    pending = split_k_matmul(a_t, b_t, out, config={**SMALL, "split_k": 3})
    with pytest.raises(cutile.OwnershipError):
        split_k_matmul(a_t, b_t, out, config={**SMALL, "split_k": 3})  # its workspace is held
    pending.sync()


@pytest.mark.parametrize(("arguments", "error", "words"), [
    (dict(config={"split_k": 65}), cutile.ArgumentError, "config['split_k'] must be an int from 1 to 64"),
    (dict(config={"split_k": 2.0}), cutile.ArgumentError, "config['split_k']"),
    (dict(config={"num_worker_warps": 4.0}), cutile.ArgumentError, "config['num_worker_warps']"),
    (dict(config={"tile_n": True}), cutile.ArgumentError, "config['tile_n']"),
    (dict(config={"tile_m": 24}), cutile.ArgumentError, "power of two"),
    (dict(config={"method": "dot"}), cutile.ArgumentError, "config['method'] must be one of ['mma', 'mma_t']"),
    (dict(config={"tile_q": 8}), cutile.ArgumentError, "'tile_q' is unknown"),
    (dict(config=[("split_k", 2)]), cutile.ArgumentTypeError, "config must be a dict"),
    (dict(activation="gelu_erf"), cutile.ArgumentError, "activation"),
    (dict(alpha="2"), cutile.ArgumentError, "alpha"),
    (dict(bias=np.zeros(N)), cutile.ArgumentTypeError, "bias must be a cutile.Tensor"),
])
def test_argument_errors_name_the_parameter(arguments: dict[str, Any], error: type[Exception], words: str) -> None:
    a, b, out = api.zeros([M, K]), api.zeros([K, N]), api.zeros([M, N])
    with pytest.raises(error, match=words.replace("[", r"\[").replace("]", r"\]")) as caught:
        split_k_matmul(a, b, out, **arguments)
    assert isinstance(caught.value, cutile.CutileError) and "split_k_matmul" in str(caught.value)


@pytest.mark.parametrize("consumed", ["b", "out"])
def test_a_consumed_tensor_is_refused(consumed: str) -> None:
    tensors = {"a": api.zeros([M, K]), "b": api.zeros([N, K]).T, "out": api.zeros([M, N])}
    split_k_matmul(tensors["a"], tensors["b"], tensors["out"], config={"split_k": 2}).sync()  # views now cached
    tensors[consumed].partition([16, 16])
    with pytest.raises(cutile.OwnershipError, match=f"split_k_matmul: {consumed}: .*consumed by"):
        split_k_matmul(tensors["a"], tensors["b"], tensors["out"], config={"split_k": 2})


def test_workspace_is_never_read_unwritten() -> None:
    """The interpreter's empty() workspace is NaN-poisoned: every split's tile is written
    before the reduction reads it, including the empty slices past K's chunks."""
    rng = np.random.default_rng(12)
    a, b = random(rng, (5, 64), f32), random(rng, (64, 20), f32)
    out = api.full([5, 20], np.nan, dtype=f32)
    split_k_matmul(api.from_numpy(a), api.from_numpy(b), out, config={**SMALL, "split_k": 9}).sync()  # 2 chunks, 9 splits
    assert_close(out.to_numpy(), reference(a, b), f32)


@pytest.mark.parametrize("dtype", [f16, bf16, f32], ids=str)
def test_every_config_of_the_space_is_accepted(dtype: Any) -> None:
    sp = space(dtype)
    assert isinstance(sp, Space)
    defaults = default_config(256, 256, 16384, dtype)
    for config in sp.configs():
        assert _splitk.check_config("split_k_matmul", config, defaults, _splitk.CONFIG_KEYS) == {**defaults, **config}


@pytest.mark.parametrize(("m", "n", "k"), [(256, 256, 16384), (64, 128, 65536), (16, 4096, 8192)])
def test_defaults_split_to_fill_the_gpu(m: int, n: int, k: int) -> None:
    config = default_config(m, n, k, bf16)
    tiles = -(-m // config["tile_m"]) * -(-n // config["tile_n"])
    assert tiles * config["split_k"] >= _splitk.SM_COUNT or config["split_k"] == 32
    assert config["split_k"] <= -(-k // config["tile_k"])
    assert default_config(8192, 8192, 8192, bf16)["split_k"] == 1  # a large M·N fills the GPU alone
    # the tensor cores' side has 64 rows: M's tiles, or N's when a small M is transposed onto the other side
    assert (config["tile_m"] if config["method"] == "mma" else config["tile_n"]) >= _splitk.TENSOR_CORE_ROWS
    assert prune_for(m, n, k)(config)


def test_defaults_transpose_a_small_m() -> None:
    config = default_config(16, 4096, 8192, bf16)
    assert config["method"] == "mma_t" and config["tile_m"] == 16 and config["tile_n"] == 64
    assert default_config(256, 256, 16384, bf16)["method"] == "mma"


def test_prune_drops_tiles_without_tensor_cores() -> None:
    keep = prune_for(256, 256, 16384)
    base = {"tile_m": 64, "tile_n": 64, "tile_k": 64, "split_k": 8, "method": "mma", "num_worker_warps": 4}
    assert keep(base)
    assert not keep({**base, "tile_m": 16})
    assert keep({**base, "tile_m": 16, "method": "mma_t"})
    assert not keep({**base, "tile_n": 32, "method": "mma_t"})
    assert keep({**base, "tile_k": 128, "split_k": 32})  # 128 chunks of K: 32 splits fit
    assert not prune_for(256, 256, 1024)({**base, "split_k": 32})  # 16 chunks of K


@pytest.mark.parametrize("arch", ["sm_90", "sm_100"])
def test_compiles_at_real_sizes(arch: str) -> None:
    m = n = 256
    k = 16384
    config = default_config(m, n, k, bf16)
    tm, tn, splits = config["tile_m"], config["tile_n"], config["split_k"]
    partial = _splitk.partial_kernel(bf16, True, "mma", _splitk.hints_of(config))
    compiled = cutile.compile(partial, api.zeros([splits, m, n], dtype=f32).partition([1, tm, tn]),
                              api.zeros([m, k], dtype=bf16), api.zeros([n, k], dtype=bf16), BK=config["tile_k"],
                              SPLITS=splits, arch=arch)
    assert compiled.cubin[:4] == b"\x7fELF"
    rm, rn = _splitk.reduce_tiles(m, n)
    reduce = _splitk.reduce_kernel(bf16, bf16, f32, 3, True, True)
    compiled = cutile.compile(reduce, api.zeros([m, n], dtype=bf16).partition([rm, rn]),
                              api.zeros([splits, m, n], dtype=f32), api.zeros([n], dtype=bf16),
                              api.zeros([m, n], dtype=f32), 1.0, arch=arch)
    assert compiled.cubin[:4] == b"\x7fELF"


@pytest.mark.gpu
def test_gpu_split_k_at_real_size() -> None:
    rng = np.random.default_rng(1)
    m = n = 256
    k = 16384
    a = random(rng, (m, k), bf16)
    w = (random(rng, (n, k), bf16) * 0.05).astype(ml_dtypes.bfloat16)
    residual = random(rng, (m, n), bf16)
    out = api.full([m, n], np.nan, dtype=bf16)
    split_k_matmul(api.from_numpy(a), api.from_numpy(w).T, out, residual=api.from_numpy(residual),
                   activation="relu").sync()
    assert_close(out.to_numpy(), reference(a, w.T, activation="relu", residual=residual), bf16)
