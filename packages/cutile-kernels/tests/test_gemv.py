"""small_m_matmul (the GEMV path, M <= 16): numpy float64 references on random inputs with
tails in N and K, every dtype, epilogue and product method, both weight layouts (the
transposed view of an [N, K] weight and a [K, N] row-major one), poisoned outputs, splits
of K; argument errors; its config space, defaults and record (matmul reads it); compiles
for sm_90 and sm_100; GPU runs at real sizes."""

from typing import Any

import ml_dtypes
import numpy as np
import pytest

import cutile
from cutile import api
from cutile.core import bf16, f16, f32
from cutile import tune
from cutile.tune import Space
from cutile_kernels import _gemv, _splitk
from cutile_kernels._gemv import SPACE, default_config, prune_for, small_m_matmul
from matmul_testkit import assert_close, random
from matmul_testkit import reference as matmul_reference

N, K = 67, 300
SMALL = {"tile_n": 16, "tile_k": 64}  # small tiles: the interpreter runs them fast, with tails in N and K


def reference(a: Any, w_nk: Any, bias: Any = None, activation: str | None = None, residual: Any = None,
              alpha: float = 1.0) -> Any:
    """act(alpha * a @ w.T + bias) + residual in float64: the product with an [N, K] weight."""
    return matmul_reference(a, np.asarray(w_nk).T, bias, activation, residual, alpha)


def weight_view(w_nk: Any, stored_nk: bool) -> cutile.Tensor:
    """b = [K, N]: the transposed view of the [N, K] weight, or a [K, N] row-major copy."""
    return api.from_numpy(w_nk).T if stored_nk else api.from_numpy(np.ascontiguousarray(w_nk.T))


@pytest.mark.parametrize("splits", [1, 3])
@pytest.mark.parametrize("stored_nk", [True, False], ids=["w.T", "kn"])
@pytest.mark.parametrize("dtype", [f16, bf16, f32], ids=str)
@pytest.mark.parametrize("m", [1, 3, 16])
def test_full_epilogue_matches_float64(m: int, dtype: Any, stored_nk: bool, splits: int) -> None:
    rng = np.random.default_rng(m * 10 + splits)
    a, w = random(rng, (m, K), dtype), random(rng, (N, K), dtype)
    bias, residual = random(rng, (N,), dtype), random(rng, (m, N), dtype)
    out = api.full([m, N], np.nan, dtype=dtype)
    op = small_m_matmul(api.from_numpy(a), weight_view(w, stored_nk), out, bias=api.from_numpy(bias),
                        activation="gelu", residual=api.from_numpy(residual), alpha=0.75,
                        config={**SMALL, "split_k": splits})
    op.sync()
    assert_close(out.to_numpy(), reference(a, w, bias, "gelu", residual, 0.75), dtype)


@pytest.mark.parametrize("stored_nk", [True, False], ids=["w.T", "kn"])
@pytest.mark.parametrize("tile_m", [4, 16])  # 16: a's rows padded to the tile
@pytest.mark.parametrize("method", ["mma", "mma_t", "dot", "sum"])
@pytest.mark.parametrize("activation", [None, "relu", "gelu", "silu"])
def test_each_activation_method_and_layout(activation: str | None, method: str, tile_m: int,
                                           stored_nk: bool) -> None:
    rng = np.random.default_rng(7)
    a, w = random(rng, (3, K), bf16), random(rng, (N, K), bf16)
    out = api.full([3, N], np.nan, dtype=bf16)
    small_m_matmul(api.from_numpy(a), weight_view(w, stored_nk), out, activation=activation,
                   config={**SMALL, "method": method, "tile_m": tile_m, "latency": 3}).sync()
    assert_close(out.to_numpy(), reference(a, w, activation=activation), bf16)


@pytest.mark.parametrize("stored_nk", [True, False], ids=["w.T", "kn"])
@pytest.mark.parametrize("method", ["dot", "sum", "mma_t"])
@pytest.mark.parametrize("splits", [1, 2, 4, 5])  # 4: slices of 2 of the 5 K tiles, the last one empty
@pytest.mark.parametrize("dtype", [f16, bf16, f32], ids=str)
def test_methods_and_splits_with_tails_in_both_layouts(dtype: Any, splits: int, method: str,
                                                       stored_nk: bool) -> None:
    """Wide tiles of each layout's contiguous axis over N and K that are not multiples of
    them (the last strip and the last K tile are partial), K split evenly, unevenly and
    with an empty slice (it stores zeros), M = 1 and 16, the whole epilogue."""
    n, k = 83, 290
    tiles = {"tile_n": 64, "tile_k": 64} if not stored_nk else {"tile_n": 16, "tile_k": 64}
    for m in (1, 16):
        rng = np.random.default_rng(m + splits)
        a, w = random(rng, (m, k), dtype), random(rng, (n, k), dtype)
        bias, residual = random(rng, (n,), dtype), random(rng, (m, n), dtype)
        out = api.full([m, n], np.nan, dtype=dtype)
        tile_m = max(m, 8) if method == "mma_t" else m
        small_m_matmul(api.from_numpy(a), weight_view(w, stored_nk), out, bias=api.from_numpy(bias),
                       activation="silu", residual=api.from_numpy(residual), alpha=-1.5,
                       config={**tiles, "method": method, "tile_m": tile_m, "split_k": splits}).sync()
        assert_close(out.to_numpy(), reference(a, w, bias, "silu", residual, -1.5), dtype)


@pytest.mark.parametrize("epilogue", ["bias", "residual", "both"])
def test_bias_and_residual_alone_and_of_other_dtypes(epilogue: str) -> None:
    rng = np.random.default_rng(11)
    a, w = random(rng, (2, K), bf16), random(rng, (N, K), bf16)
    bias = random(rng, (N,), f32) if epilogue != "residual" else None
    residual = random(rng, (2, N), f16) if epilogue != "bias" else None
    out = api.full([2, N], np.nan, dtype=f32)  # a wider out than the inputs
    small_m_matmul(api.from_numpy(a), weight_view(w, True), out,
                   bias=None if bias is None else api.from_numpy(bias),
                   residual=None if residual is None else api.from_numpy(residual), activation="silu",
                   config=SMALL).sync()
    assert_close(out.to_numpy(), reference(a, w, bias, "silu", residual), f32)


def test_strided_views_and_a_tail_beside_out() -> None:
    """a is a transposed view, out a column slice of a wider poisoned buffer: the
    columns beside it stay untouched (stores are masked at N's tail)."""
    rng = np.random.default_rng(3)
    a_km, w = random(rng, (K, 5), f32), random(rng, (N, K), f32)
    wide = api.full([5, N + 9], np.nan, dtype=f32)
    out = wide[:, 4:4 + N]
    small_m_matmul(api.from_numpy(a_km).T, weight_view(w, True), out, config=SMALL).sync()
    values = wide.to_numpy()
    assert_close(values[:, 4:4 + N], reference(a_km.T, w), f32)
    assert np.isnan(values[:, :4]).all() and np.isnan(values[:, 4 + N:]).all()


def test_default_config_runs_and_the_call_returns_a_pending_launch() -> None:
    rng = np.random.default_rng(5)
    a, w = random(rng, (1, K), bf16), random(rng, (N, K), bf16)
    out = api.full([1, N], np.nan, dtype=bf16)
    launch = small_m_matmul(api.from_numpy(a), weight_view(w, True), out)
    assert isinstance(launch, cutile.Launch)
    with pytest.raises(cutile.OwnershipError):
        out.to_numpy()  # the pending launch holds out: nothing ran yet
    launch.sync()
    assert_close(out.to_numpy(), reference(a, w), bf16)
    # out stays usable: a second call writes it again
    a2 = random(rng, (1, K), bf16)
    small_m_matmul(api.from_numpy(a2), weight_view(w, True), out, alpha=2.0).sync()
    assert_close(out.to_numpy(), reference(a2, w, alpha=2.0), bf16)


def test_split_call_is_one_op() -> None:
    rng = np.random.default_rng(6)
    a, w = random(rng, (4, K), f16), random(rng, (N, K), f16)
    out = api.full([4, N], np.nan, dtype=f16)
    bias = api.from_numpy(random(rng, (N,), f16))
    op = small_m_matmul(api.from_numpy(a), weight_view(w, True), out, bias=bias, config={**SMALL, "split_k": 8})
    assert not isinstance(op, cutile.Launch)
    with pytest.raises(cutile.OwnershipError, match="small_m_matmul \\(parameter 'out'\\)"):
        out.to_numpy()  # held by the op from the call, as by one launch (the reduction is made when it runs)
    with pytest.raises(cutile.OwnershipError, match="small_m_matmul \\(parameter 'bias'\\)"):
        bias.host_view()  # (a write to what the reduction reads)
    op.sync()
    assert_close(out.to_numpy(), reference(a, w, bias.to_numpy()), f16)


def test_a_split_op_runs_when_the_caller_consumes_its_tensors_after_the_call() -> None:
    """Its launches are made as it runs, on views made at the call: the caller's objects
    consumed (``partition()``) while it is pending do not fail it (directly, and through
    matmul.launch, whose default for 4x64x4096 splits K)."""
    from cutile_kernels import _matmul, matmul

    rng = np.random.default_rng(7)
    for through_matmul in (False, True):
        n, k = (64, 4096) if through_matmul else (N, K)
        a, w, r = random(rng, (4, k), f16), random(rng, (n, k), f16), random(rng, (4, n), f16)
        x, weight, residual = api.from_numpy(a), weight_view(w, True), api.from_numpy(r)
        out = api.full([4, n], np.nan, dtype=f16)
        if through_matmul:
            op = matmul.launch(x, weight, out=out, residual=residual)
            last = matmul._last
            assert last is not None and isinstance(last.call, _matmul._Call) and last.call.plan is not None
            assert last.call.plan.path == "gemv" and last.call.plan.config["split_k"] > 1
        else:
            op = small_m_matmul(x, weight, out, residual=residual, config={**SMALL, "split_k": 8})
        assert not isinstance(op, cutile.Launch)
        taken = [t.partition([4, 4]) for t in (x, weight, residual)]
        op.sync()
        assert_close(out.to_numpy(), reference(a, w, r), f16)
        del taken


@pytest.mark.parametrize("splits", [1, 2])
def test_a_decode_loop_with_the_same_tensors(splits: int) -> None:
    rng = np.random.default_rng(14)
    w = random(rng, (N, K), bf16)
    weight = api.from_numpy(w).T
    out = api.full([1, N], np.nan, dtype=f32)
    bias = api.from_numpy(random(rng, (N,), f32))
    for _ in range(3):  # a new x each step; the weight, bias and out objects stay (their views are cached)
        a = random(rng, (1, K), bf16)
        small_m_matmul(api.from_numpy(a), weight, out, bias=bias, config={**SMALL, "split_k": splits}).sync()
        assert_close(out.to_numpy(), reference(a, w, bias.to_numpy()), bf16)


def _args(m: int = 2, k: int = K, n: int = N, dtype: Any = f32) -> tuple[cutile.Tensor, cutile.Tensor, cutile.Tensor]:
    return api.zeros([m, k], dtype=dtype), api.zeros([k, n], dtype=dtype), api.zeros([m, n], dtype=dtype)


@pytest.mark.parametrize(("change", "error", "words"), [
    (lambda a, b, o: dict(a=api.zeros([17, K]), out=api.zeros([17, N])), cutile.ArgumentError, "17 rows"),
    (lambda a, b, o: dict(b=api.zeros([K + 1, N])), cutile.ArgumentError, "K differ"),
    (lambda a, b, o: dict(out=api.zeros([2, N + 1])), cutile.ArgumentError, "out must have shape"),
    (lambda a, b, o: dict(b=api.zeros([K, N], dtype=f16)), cutile.ArgumentTypeError, "one dtype"),
    (lambda a, b, o: dict(a=api.zeros([2, K], dtype=cutile.core.i32)), cutile.ArgumentTypeError, "a has dtype"),
    (lambda a, b, o: dict(a=np.zeros((2, K), np.float32)), cutile.ArgumentTypeError, "a must be a cutile.Tensor"),
    (lambda a, b, o: dict(bias=api.zeros([N + 1])), cutile.ArgumentError, "bias must have shape"),
    (lambda a, b, o: dict(residual=api.zeros([N])), cutile.ArgumentError, "residual must have shape"),
    (lambda a, b, o: dict(activation="tanh"), cutile.ArgumentError, "activation"),
    (lambda a, b, o: dict(alpha=float("nan")), cutile.ArgumentError, "alpha"),
    (lambda a, b, o: dict(config={"tile_m": 1}), cutile.ArgumentError, "at least 2"),
    (lambda a, b, o: dict(config={"tile_m": 32}), cutile.ArgumentError, "config['tile_m']"),
    (lambda a, b, o: dict(config={"tile_q": 16}), cutile.ArgumentError, "'tile_q' is unknown"),
    (lambda a, b, o: dict(config={"tile_k": 48}), cutile.ArgumentError, "power of two"),
    (lambda a, b, o: dict(config={"method": "fma"}), cutile.ArgumentError, "config['method']"),
    (lambda a, b, o: dict(config={"split_k": 0}), cutile.ArgumentError, "config['split_k']"),
])
def test_argument_errors_name_the_parameter(change: Any, error: type[Exception], words: str) -> None:
    a, b, out = _args()
    arguments: dict[str, Any] = dict(a=a, b=b, out=out)
    arguments.update(change(a, b, out))
    with pytest.raises(error, match=words.replace("[", r"\[").replace("]", r"\]")) as caught:
        small_m_matmul(arguments.pop("a"), arguments.pop("b"), arguments.pop("out"), **arguments)
    assert isinstance(caught.value, cutile.CutileError)
    assert "small_m_matmul" in str(caught.value)


@pytest.mark.parametrize("config", [{"split_k": 1}, {"split_k": 2}])
def test_operands_sharing_out_are_refused_at_the_call(config: dict[str, int]) -> None:
    a, b, out = _args()
    wide = api.zeros([2, 2 * N])
    with pytest.raises(cutile.ArgumentError, match="out overlaps the memory of residual"):
        small_m_matmul(a, b, out, residual=out, config=config)
    with pytest.raises(cutile.ArgumentError, match="out overlaps the memory of bias"):
        small_m_matmul(a, b, wide[:, :N], bias=wide[1, N - 1:2 * N - 1], config=config)
    small_m_matmul(a, b, wide[:, :N], bias=wide[1, N:], config=config).sync()  # beside it: fine


def test_every_config_of_the_space_is_accepted() -> None:
    assert isinstance(SPACE, Space)
    defaults = default_config(1, 4096, 4096, bf16)
    for config in SPACE.configs()[::7]:  # (a seventh of them: every value of every key, in many combinations)
        assert _splitk.check_config("small_m_matmul", config, defaults, _gemv.CONFIG_KEYS) == {**defaults, **config}
    assert set(defaults) <= set(_gemv.CONFIG_KEYS)
    for name, values in SPACE.params.items():
        assert all(_splitk.check_config("small_m_matmul", {name: v}, defaults, _gemv.CONFIG_KEYS) for v in values)


LLM_SHAPES = [(4096, 4096), (11008, 4096), (4096, 11008), (14336, 4096), (151936, 2560)]


@pytest.mark.parametrize(("n", "k"), LLM_SHAPES)
def test_defaults_for_m1_are_dot_tiles_filling_the_gpu_without_splits(n: int, k: int) -> None:
    config = default_config(1, n, k, bf16)
    assert config["method"] == "dot" and config["tile_m"] == 1 and config["split_k"] == 1
    assert -(-n // config["tile_n"]) >= _gemv.TARGET_BLOCKS
    assert config["tile_k"] * 2 == 1024  # a KiB of each weight row per load
    assert config["tile_n"] * config["tile_k"] <= _gemv.DOT_ELEMENTS
    assert prune_for(1, n, k)(config)


@pytest.mark.parametrize(("n", "k"), LLM_SHAPES)
def test_defaults_for_m16_are_transposed_mma_tiles_split_to_fill_the_gpu(n: int, k: int) -> None:
    config = default_config(16, n, k, bf16)
    assert config["method"] == "mma_t" and config["tile_m"] == 16 and config["tile_n"] >= 64
    assert config["tile_n"] * config["tile_k"] * 2 == _gemv.MAX_WEIGHT_TILE_BYTES
    assert -(-n // config["tile_n"]) * config["split_k"] >= _gemv.TARGET_BLOCKS
    assert prune_for(16, n, k)(config)
    assert default_config(3, n, k, bf16)["tile_m"] == 8  # a padded to the tensor cores' 8 columns


@pytest.mark.parametrize(("n", "k"), LLM_SHAPES)
def test_defaults_for_a_kn_weight_read_512_bytes_of_each_row_and_split_k_to_fill_the_gpu(n: int, k: int) -> None:
    """A [K, N] row-major weight is read along N: each tile row is 512 bytes (16-byte
    vectors on 32 lanes), and K is split until the strips give two blocks per SM, each
    slice at least two K tiles and none empty."""
    for m, method in ((1, "dot"), (16, "mma_t")):
        config = default_config(m, n, k, bf16, weight_nk=False)
        assert config["method"] == method
        strips, steps = -(-n // config["tile_n"]), -(-k // config["tile_k"])
        if method == "dot":
            assert config["tile_n"] * 2 == 512 and config["tile_m"] * config["tile_n"] * config["tile_k"] <= \
                _gemv.DOT_ELEMENTS
        else:
            assert config["tile_n"] >= 64 and config["tile_n"] * config["tile_k"] * 2 == _gemv.MAX_WEIGHT_TILE_BYTES
        assert strips * config["split_k"] >= _gemv.TARGET_BLOCKS
        per = _gemv.steps_per_split(k, config["tile_k"], config["split_k"])
        assert per >= _gemv.MIN_STEPS_PER_SPLIT and (config["split_k"] - 1) * per < steps  # no empty slice
        assert prune_for(m, n, k, weight_nk=False)(config)
    assert default_config(1, 64, 40, f32, weight_nk=False) == {
        "tile_m": 1, "tile_n": 64, "tile_k": 64, "split_k": 1, "method": "dot", "num_worker_warps": 4}


def test_defaults_split_k_when_n_is_small() -> None:
    config = default_config(1, 512, 16384, bf16)
    blocks = -(-512 // config["tile_n"])
    assert blocks < _gemv.TARGET_BLOCKS and config["split_k"] > 1
    assert blocks * config["split_k"] >= _gemv.TARGET_BLOCKS
    assert default_config(1, 20, 40, f32)["tile_k"] == 64  # never past K's power of two


def test_prune_drops_configs_that_cannot_win() -> None:
    keep = prune_for(1, 4096, 4096)
    base = {"tile_m": 1, "tile_n": 16, "tile_k": 512, "split_k": 1, "method": "dot", "num_worker_warps": 4,
            "occupancy": 1}
    assert keep(base)
    assert not keep({**base, "tile_n": 8, "split_k": 2})  # N alone gives 512 blocks
    assert not keep({**base, "tile_n": 64})  # 64 x 512 products in registers
    assert keep({**base, "tile_n": 64, "method": "sum"})  # summed at each step: fewer registers
    assert not prune_for(1, 4096, 4096, weight_nk=False)(base)  # 16 columns of a [K, N] weight: 32-byte rows
    assert prune_for(1, 4096, 4096, weight_nk=False)({**base, "tile_n": 256, "tile_k": 32, "split_k": 16})
    assert not keep({**base, "method": "mma_t"})  # 16 weight rows: no tensor cores
    assert not keep({**base, "method": "mma_t", "tile_n": 64})  # 1 row of a: no tensor cores
    assert keep({**base, "method": "mma_t", "tile_n": 64, "tile_m": 8})
    assert not prune_for(3, 4096, 4096)(base)  # one row per block, three rows of a
    assert prune_for(3, 4096, 4096)({**base, "tile_m": 4, "tile_k": 128})
    small = prune_for(1, 512, 300)
    assert not small({**base, "tile_k": 1024})  # past K's power of two
    assert small({**base, "tile_k": 128, "split_k": 2})
    assert not small({**base, "tile_k": 256, "split_k": 4})  # more splits than K chunks


@pytest.mark.parametrize("arch", ["sm_90", "sm_100"])
def test_compiles_at_decode_sizes(arch: str) -> None:
    """Kernels for M = 1 and M = 16 at N = K = 4096 bf16 (the defaults of both layouts,
    with hints), the searched product methods, and a split's partial and reduction
    kernels, compile for both archs, with the full epilogue. Real (host) tensors, not
    `api.meta`: their alignment facts let tileiras use TMA, as on the GPU (without them
    it builds slow element loads, and slowly)."""
    n = k = 4096
    cases = [(1, True, {**default_config(1, n, k, bf16), "num_worker_warps": 8, "occupancy": 2}),
             (1, False, default_config(1, n, k, bf16, weight_nk=False)),
             (16, False, {**default_config(16, n, k, bf16, weight_nk=False), "latency": 6}),
             (16, True, {**default_config(16, n, k, bf16), "split_k": 1}),
             (1, True, {"method": "sum", "tile_m": 1, "tile_n": 32, "tile_k": 512, "split_k": 1}),
             (1, False, {"method": "sum", "tile_m": 1, "tile_n": 256, "tile_k": 64, "split_k": 8}),
             (1, False, {"method": "mma_t", "tile_m": 8, "tile_n": 128, "tile_k": 128, "split_k": 8})]
    for m, stored_nk, config in cases:
        weight = api.zeros([n, k] if stored_nk else [k, n], dtype=bf16)
        a, out = api.zeros([m, k], dtype=bf16), api.zeros([m, n], dtype=bf16)
        ops, cfg = _gemv._checked("test", a, weight.T if stored_nk else weight, out, api.zeros([n], dtype=bf16),
                                  "gelu", api.zeros([m, n], dtype=f32), 1.0, config)
        launches = _gemv._launches(ops, cfg)
        assert len(launches) == (1 if cfg["split_k"] == 1 else 2)
        for kernel, arguments, constants in launches:
            compiled = cutile.compile(kernel, *arguments, arch=arch, **constants)
            assert compiled.cubin[:4] == b"\x7fELF"
        assert ("latency = 6" in cutile.compile(launches[0][0], *launches[0][1], arch=arch, **launches[0][2]).mlir) \
            == ("latency" in config)


def test_reduction_tiles_spread_over_the_sms() -> None:
    for m, n in ((1, 4096), (16, 4096), (1, 151936), (16, 151936), (3, 67), (1, 20)):
        tile_m, tile_n = _gemv.reduce_tiles(m, n)
        assert tile_m == _splitk.next_power_of_two(m) and tile_m * tile_n <= max(_gemv.REDUCE_ELEMENTS, 16 * tile_m)
        assert tile_n >= 16 and tile_n & (tile_n - 1) == 0
        if n >= 16 * _gemv.TARGET_BLOCKS:
            assert -(-n // tile_n) >= _gemv.TARGET_BLOCKS // 2 or tile_m * tile_n == _gemv.REDUCE_ELEMENTS


# -- the record: buckets, fitting, matmul's choice ---------------------------------------------------

def test_buckets_and_fit() -> None:
    assert _gemv.gemv_bucket((1, 4096, 4096, 2, 1)) == "nk_e2_m1_n4096_k4096"
    assert _gemv.gemv_bucket((16, 11008, 4096, 2, 0)) == "kn_e2_m16_n16384_k4096"
    assert _gemv.gemv_bucket((3, 14336, 4096, 2, 0)) == "kn_e2_m16_n16384_k4096"  # M 2-16 share a class
    assert _gemv.gemv_bucket((1, 20, 5, 4, 1)) == "nk_e4_m1_n64_k64"
    winner = {"method": "mma_t", "tile_m": 8, "tile_n": 128, "tile_k": 256, "split_k": 12, "num_worker_warps": 4,
              "occupancy": 1, "latency": 0}
    fitted = _gemv.fit(winner, 16, 100, 300)
    assert fitted["tile_m"] == 16 and fitted["tile_n"] == 128 and fitted["tile_k"] == 256
    assert fitted["split_k"] == 2  # no more slices than K tiles
    assert _gemv.fit(winner, 3, 4096, 4096) == winner


def _write_record(folder: Any, winners: dict[str, dict[str, Any]], source: str | None = None) -> None:
    gemv_tuner = _gemv.tuner(records_dir=folder)
    provenance = gemv_tuner.provenance
    if source is not None:
        provenance = tune.Provenance.current("gemv", source, SPACE)
    record = tune.Record(provenance, {b: tune.Winner(c, 0.01) for b, c in winners.items()})
    assert gemv_tuner.record_path is not None
    record.save(gemv_tuner.record_path)


@pytest.mark.parametrize("stored_nk", [True, False], ids=["w.T", "kn"])
def test_matmul_takes_the_records_winner_for_each_layout(tmp_path: Any, stored_nk: bool) -> None:
    from cutile_kernels import _matmul, matmul

    n, k = 70, 200
    layout = "nk" if stored_nk else "kn"
    winner = {"method": "sum", "tile_m": 1, "tile_n": 64, "tile_k": 64, "split_k": 3, "num_worker_warps": 4,
              "occupancy": 1, "latency": 3}
    _write_record(tmp_path, {f"{layout}_e2_m1_n128_k256": winner})
    try:
        _gemv.use_records(tmp_path)
        assert _gemv.choose(1, n, k, bf16, weight_nk=stored_nk) == winner
        assert _gemv.choose(1, n, k, bf16, weight_nk=not stored_nk) == default_config(1, n, k, bf16,
                                                                                       weight_nk=not stored_nk)
        rng = np.random.default_rng(21)
        a, w = random(rng, (1, k), bf16), random(rng, (n, k), bf16)
        bias = random(rng, (n,), bf16)
        out = api.full([1, n], np.nan, dtype=bf16)
        matmul(api.from_numpy(a), weight_view(w, stored_nk), out=out, bias=api.from_numpy(bias), activation="relu")
        assert_close(out.to_numpy(), reference(a, w, bias, "relu"), bf16)
        plans = [s.plan for s in _matmul._SIGNATURES.values() if s.plan is not None and s.plan.path == "gemv"]
        assert plans and plans[-1].config == winner
    finally:
        _gemv.use_records(None)


def test_a_stale_record_is_refused_with_its_reason_and_never_applied(tmp_path: Any,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    winner = {"method": "sum", "tile_m": 1, "tile_n": 64, "tile_k": 64, "split_k": 3, "num_worker_warps": 4,
              "occupancy": 1, "latency": 3}
    _write_record(tmp_path, {"nk_e2_m1_n128_k256": winner}, source="other kernels")
    try:
        _gemv.use_records(tmp_path)
        with caplog.at_level("WARNING", logger="cutile.tune"):
            assert _gemv.choose(1, 70, 200, bf16, weight_nk=True) == default_config(1, 70, 200, bf16)
        assert "source_hash" in caplog.text
    finally:
        _gemv.use_records(None)


@pytest.mark.parametrize("stored_nk", [True, False], ids=["w.T", "kn"])
@pytest.mark.parametrize("dtype", [f16, bf16, f32], ids=str)
@pytest.mark.parametrize("m", [1, 3, 16])
def test_matmul_routes_small_m_to_these_kernels_for_both_layouts(m: int, dtype: Any, stored_nk: bool) -> None:
    from cutile_kernels import _matmul, matmul

    n, k = 75, 130
    rng = np.random.default_rng(m)
    a, w = random(rng, (m, k), dtype), random(rng, (n, k), dtype)
    residual = random(rng, (m, n), dtype)
    out = api.full([m, n], np.nan, dtype=dtype)
    b = weight_view(w, stored_nk)
    matmul(api.from_numpy(a), b, out=out, residual=api.from_numpy(residual), activation="gelu", alpha=0.5)
    assert_close(out.to_numpy(), reference(a, w, None, "gelu", residual, 0.5), dtype)
    assert _matmul._choose_path(m, n, k, 2, dtype, f32, False, None) == "gemv"
    assert _gemv.choose(m, n, k, dtype, weight_nk=stored_nk) == default_config(m, n, k, dtype, weight_nk=stored_nk)


def test_the_tuner_searches_a_shape_gated_and_pruned() -> None:
    """`tuner().tune` (what CUTILE_TUNE=1 runs on first use) times configs the shape's
    prune keeps, gated against float64 at sampled columns; the others are invalid with
    the reason."""
    from cutile.tune import Space as TuneSpace

    result = _gemv.tuner().tune((1, 40, 70, 2, 0), budget=30.0, warmup=1, reps=1, paired_reps=1,
                                prune=lambda c: c["tile_n"] in (64, 128) and c["tile_k"] in (16, 64)
                                and c["split_k"] in (1, 2) and c["num_worker_warps"] == 4 and c["occupancy"] == 1
                                and c["latency"] == 0 and c["tile_m"] in (1, 8))
    assert isinstance(_gemv.SPACE, TuneSpace)
    ok = [t for t in result.trials if t.status == "ok"]
    assert ok and all(prune_for(1, 40, 70, weight_nk=False)(t.config) for t in ok)
    assert any(t.status == "invalid" and "cannot run or win" in (t.reason or "") for t in result.trials)


# -- on the GPU, at real sizes ------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("stored_nk", [True, False], ids=["w.T", "kn"])
@pytest.mark.parametrize("m", [1, 16])
def test_gpu_decode_layer(m: int, stored_nk: bool) -> None:
    rng = np.random.default_rng(m)
    n, k = 4096 + 24, 4096 + 40  # tails past the wide tiles
    a, w = random(rng, (m, k), bf16), (random(rng, (n, k), bf16) * 0.05).astype(ml_dtypes.bfloat16)
    bias = random(rng, (n,), bf16)
    out = api.full([m, n], np.nan, dtype=bf16)
    small_m_matmul(api.from_numpy(a), weight_view(w, stored_nk), out, bias=api.from_numpy(bias),
                   activation="silu").sync()
    assert_close(out.to_numpy(), reference(a, w, bias, "silu"), bf16)
    from cutile_kernels import matmul

    again = api.full([m, n], np.nan, dtype=bf16)  # through matmul: the record's config (or the default)
    matmul(api.from_numpy(a), weight_view(w, stored_nk), out=again, bias=api.from_numpy(bias), activation="silu")
    assert_close(again.to_numpy(), reference(a, w, bias, "silu"), bf16)


@pytest.mark.gpu
def test_gpu_decode_layer_other_configs() -> None:
    rng = np.random.default_rng(2)
    n, k = 1024, 8192
    a, w = random(rng, (1, k), bf16), (random(rng, (n, k), bf16) * 0.05).astype(ml_dtypes.bfloat16)
    for config in ({"split_k": 4}, {"method": "dot", "tile_n": 8, "tile_k": 512},
                   {"method": "mma_t", "tile_m": 8, "tile_n": 64, "tile_k": 256}, {"tile_m": 2},
                   {"method": "sum", "tile_n": 32, "tile_k": 512},
                   {"num_worker_warps": 8, "occupancy": 2, "latency": 4}):
        out = api.full([1, n], np.nan, dtype=f32)
        small_m_matmul(api.from_numpy(a), api.from_numpy(w).T, out, config=config).sync()
        assert_close(out.to_numpy(), reference(a, w), bf16)  # f32 out; the error is f32 accumulation's
    for config in ({"method": "dot", "tile_n": 256, "tile_k": 32, "split_k": 8},
                   {"method": "sum", "tile_n": 256, "tile_k": 64, "split_k": 4},
                   {"method": "mma_t", "tile_m": 8, "tile_n": 128, "tile_k": 128, "split_k": 6}):
        out = api.full([1, n], np.nan, dtype=f32)
        small_m_matmul(api.from_numpy(a), weight_view(w, False), out, config=config).sync()
        assert_close(out.to_numpy(), reference(a, w), bf16)
