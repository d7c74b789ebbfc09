"""top_k against a numpy reference on the interpreter (the order torch.topk gives: values
in order, equal values by increasing index, NaN above every number, below for the
smallest): one-pass and chunked schedules with tails, many ties, -inf and NaN rows,
f16 / bf16 / f32, k = 1 against argmax, poisoned outputs, the caller's kinds back, bad
arguments naming the parameter; the kernels compiled for sm_90 and sm_100; the GPU
backend's host side (grids) on the fake driver; on the GPU (marked ``gpu``) against
torch.topk at a 152k vocabulary."""

import re
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import cutile
from cutile import api
from cutile.core import bf16, f16, f32, i64

import cutile_kernels
from cutile_kernels import argmax, top_k
from cutile_kernels._top_k import DEFAULT, MAX_CANDIDATES, MAX_K, MAX_TILE_COLS, TUNER, plan, top_k_kernels

RNG = np.random.default_rng(61)
DTYPES = ["f32", "f16", "bf16"]
NUMPY = {"f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16}
ONE_PASS = {"tile_rows": 2, "block_elems": 32768, "occupancy": 1}
#: several chunks of 1024 columns (a tail in the last), 2 or 4 rows per block
CHUNKED = {"tile_rows": 2, "block_elems": 2048, "occupancy": 1}
CHUNKED_4 = {"tile_rows": 4, "block_elems": 4096, "occupancy": 2}
CONFIGS = [ONE_PASS, CHUNKED, CHUNKED_4, None]


def reference(x: np.ndarray, k: int, largest: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """(values, indices) of each row's k best: values in order, ties by increasing index,
    NaN first for the largest and last for the smallest (torch.topk's answers)."""
    rows = x.reshape(-1, x.shape[-1]).astype(np.float64)
    nan = np.isnan(rows)
    value = np.where(nan, 0.0, rows)
    columns = np.broadcast_to(np.arange(rows.shape[1]), rows.shape)
    # lexsort: the last key is the primary one
    order = np.lexsort((columns, -value if largest else value, ~nan if largest else nan), axis=-1)[:, :k]
    values = np.take_along_axis(x.reshape(rows.shape), order, -1)
    return values.reshape(*x.shape[:-1], k), order.reshape(*x.shape[:-1], k)


def inputs(shape: tuple[int, ...], dtype: str, ties: bool = False) -> np.ndarray:
    values = RNG.integers(-20, 20, shape) if ties else RNG.standard_normal(shape) * 4
    return values.astype(NUMPY[dtype])


def check(got: Any, x: np.ndarray, k: int, largest: bool = True) -> None:
    values, indices = (np.asarray(t.to_numpy() if isinstance(t, cutile.Tensor) else t) for t in got)
    expected_values, expected_indices = reference(x, k, largest)
    assert indices.dtype == np.int64 and values.dtype == x.dtype
    np.testing.assert_array_equal(indices, expected_indices)
    # bit for bit the input's elements (NaN payloads, -0.0 included)
    assert values.view(np.uint8).tobytes() == expected_values.astype(x.dtype).view(np.uint8).tobytes()


def poisoned_pair(shape: tuple[int, ...], dtype: str) -> tuple[cutile.Tensor, cutile.Tensor]:
    return api.full(list(shape), np.nan, dtype=dtype), api.full(list(shape), -7, dtype="i64")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape, k", [((5, 3000), 7), ((3, 4, 129), 1), ((2, 9001), 64), ((77,), 33),
                                      ((6, 1025), 16)])
@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("largest", [True, False])
def test_matches_the_reference_with_ties_to_the_lowest_index(dtype: str, shape: tuple[int, ...], k: int,
                                                             config: dict[str, Any] | None, largest: bool) -> None:
    x = inputs(shape, dtype, ties=True)  # 40 distinct values: ties in every row
    out = poisoned_pair((*shape[:-1], k), dtype)
    got = top_k(api.from_numpy(x), k, largest=largest, out=out, config=config)
    assert got[0] is out[0] and got[1] is out[1]
    check(got, x, k, largest)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("config", [ONE_PASS, CHUNKED])
def test_random_rows_with_tails(dtype: str, config: dict[str, Any]) -> None:
    x = inputs((9, 2047), dtype)
    check(top_k(api.from_numpy(x), 50, config=config), x, 50)
    check(top_k(api.from_numpy(x), 50, largest=False, config=config), x, 50, largest=False)


@pytest.mark.parametrize("config", [ONE_PASS, CHUNKED])
@pytest.mark.parametrize("largest", [True, False])
def test_nan_and_infinite_rows(config: dict[str, Any], largest: bool) -> None:
    x = RNG.standard_normal((7, 3000)).astype(np.float32)
    x[0] = -np.inf
    x[1] = np.nan
    x[2, [5, 2999, 1024, 7]] = [np.nan, np.nan, np.inf, -np.inf]
    x[3] = np.inf
    x[3, [10, 2500]] = np.nan
    x[4, :] = 0.0
    x[4, ::3] = -0.0  # equal to 0.0: ties by index, each element read back with its sign
    x[5, 1500:] = np.nan  # more NaNs than k in a chunk of its own
    x[6, 2000] = -np.inf
    for k in (1, 5, 64):
        check(top_k(x, k, largest=largest, config=config), x, k, largest)


@pytest.mark.parametrize("dtype", DTYPES)
def test_k_of_one_is_argmax(dtype: str) -> None:
    x = inputs((4, 5000), dtype, ties=True)
    x[1, 4321] = np.nan
    values, indices = top_k(api.from_numpy(x), 1, config=CHUNKED)
    np.testing.assert_array_equal(indices.to_numpy()[:, 0], argmax(api.from_numpy(x)).to_numpy())
    assert tuple(values.shape) == (4, 1)


def test_numpy_in_numpy_out_and_a_3d_input() -> None:
    x = inputs((2, 3, 600), "f32")
    values, indices = top_k(x, 10, dim=2)
    assert isinstance(values, np.ndarray) and isinstance(indices, np.ndarray)
    assert values.shape == indices.shape == (2, 3, 10)
    check((values, indices), x, 10)


def test_a_strided_view_is_read_in_place() -> None:
    base = inputs((600, 9), "bf16")
    x = base.T  # (9, 600), its rows strided
    check(top_k(x, 12, config=CHUNKED), np.ascontiguousarray(x), 12)
    check(top_k(x, 12, config=ONE_PASS), np.ascontiguousarray(x), 12)


def test_sorted_false_is_accepted_and_gives_the_sorted_result() -> None:
    x = inputs((3, 400), "f16")
    check(top_k(x, 9, sorted=False), x, 9)


@pytest.mark.parametrize("config", [ONE_PASS, CHUNKED])
def test_launch_form_is_one_op(config: dict[str, Any]) -> None:
    x = inputs((4, 3000), "f32")
    pending = top_k.launch(api.from_numpy(x), 8, config=config)
    pending.op.sync()
    check(pending.finish(), x, 8)
    pending = top_k.launch(api.from_numpy(x), 8, config=config)
    pending.cancel()  # dropped unrun: its tensors are free


def test_long_rows_grow_the_chunks_to_keep_the_candidates_in_one_tile() -> None:
    # 152k columns, k 64: 149 chunks of 1024 would make 9536 candidates; chunks of 2048 make 4800
    assert plan({"tile_rows": 1, "block_elems": 1024}, 1, 151_936, 64) == (1, 2048, 75, 64)
    assert plan({"tile_rows": 4, "block_elems": 4096}, 3, 100, 5) == (4, 128, 1, 8)
    assert plan({"tile_rows": 4, "block_elems": 4096}, 30, 5000, 5) == (4, 1024, 5, 8)
    assert plan({"tile_rows": 4, "block_elems": 4096}, 30, 151_936, 64) == (2, 2048, 75, 64)  # grown: 2 rows
    longest = MAX_CANDIDATES // 64 * MAX_TILE_COLS
    assert plan(DEFAULT, 1, longest, 64)[1] == MAX_TILE_COLS
    with pytest.raises(cutile.ArgumentError, match=f"parameter 'x' has rows of {longest + 1} elements; with k=64"):
        plan(DEFAULT, 1, longest + 1, 64)


def test_a_vocabulary_row() -> None:
    x = inputs((1, 151_936), "bf16")
    x[0, 151_935] = 100.0
    x[0, 3] = 100.0
    got = top_k(x, 50)
    check(got, x, 50)
    assert got[1][0, :2].tolist() == [3, 151_935]


def test_the_tuner_answers_its_default_and_times_a_config() -> None:
    chosen = TUNER.config((3, 700, 5))
    if not TUNER.record_path.exists():
        assert chosen == DEFAULT
    assert set(chosen) == set(DEFAULT)
    TUNER.setup(dict(DEFAULT), (3, 700, 5))().sync()


def zeros(shape: list[int], dtype: str = "f32") -> cutile.Tensor:
    return api.zeros(shape, dtype=dtype)


def overlapping_out() -> Any:
    x = zeros([4, 100])
    return top_k(x, 2, out=(x[:, :2], zeros([4, 2], "i64")))


BAD: list[tuple[str, Any, type[Exception], str]] = [
    ("k too large", lambda: top_k(zeros([4, 100]), MAX_K + 1), cutile.ArgumentError,
     f"parameter 'k' is {MAX_K + 1}; expected 1 to {MAX_K} (top_k takes at most {MAX_K})"),
    ("k past the row", lambda: top_k(zeros([4, 10]), 11), cutile.ArgumentError,
     "parameter 'k' is 11; expected 1 to 10 (the rows have 10 elements)"),
    ("k zero", lambda: top_k(zeros([4, 100]), 0), cutile.ArgumentError, "parameter 'k' is 0"),
    ("k float", lambda: top_k(zeros([4, 100]), 2.0), cutile.ArgumentTypeError, "parameter 'k' must be an int"),
    ("k bool", lambda: top_k(zeros([4, 100]), True), cutile.ArgumentTypeError, "parameter 'k' must be an int"),
    ("dim", lambda: top_k(zeros([4, 100]), 2, dim=0), cutile.ArgumentError, "parameter 'dim' must be the last dim"),
    ("dtype", lambda: top_k(zeros([4, 8], "i32"), 2), cutile.ArgumentTypeError, "parameter 'x' has dtype i32"),
    ("empty", lambda: top_k(zeros([0, 8]), 2), cutile.ArgumentError, "is empty"),
    ("scalar", lambda: top_k(api.from_numpy(np.float32(1.0)), 1), cutile.ArgumentError,
     "must have at least one dimension"),
    ("largest", lambda: top_k(zeros([4, 100]), 2, largest=1), cutile.ArgumentTypeError, "parameter 'largest' must be a bool"),
    ("sorted", lambda: top_k(zeros([4, 100]), 2, sorted=None), cutile.ArgumentTypeError, "parameter 'sorted' must be a bool"),
    ("out single", lambda: top_k(zeros([4, 100]), 2, out=zeros([4, 2])), cutile.ArgumentTypeError,
     "parameter 'out' must be a (values, indices) pair"),
    ("out values shape", lambda: top_k(zeros([4, 100]), 2, out=(zeros([4, 3]), zeros([4, 2], "i64"))), cutile.ArgumentError,
     "out[0] has shape [4, 3]; expected [4, 2]"),
    ("out indices dtype", lambda: top_k(zeros([4, 100]), 2, out=(zeros([4, 2]), zeros([4, 2], "i32"))), cutile.ArgumentTypeError,
     "out[1] has dtype i32; expected i64"),
    ("out values dtype", lambda: top_k(zeros([4, 100]), 2, out=(zeros([4, 2], "f16"), zeros([4, 2], "i64"))),
     cutile.ArgumentTypeError, "out[0] has dtype f16; expected f32"),
    ("out overlaps x", lambda: overlapping_out(), cutile.ArgumentError, "out[0] overlaps the memory of x"),
    ("config", lambda: top_k(zeros([4, 100]), 2, config={"tile_cols": 8}), cutile.ArgumentError,
     "config key 'tile_cols' is unknown"),
    ("config zero rows", lambda: top_k(zeros([4, 100]), 2, config={"tile_rows": 0}), cutile.ArgumentError,
     "config['tile_rows'] must be a power of two >= 1, got 0"),
    ("config not a number", lambda: top_k(zeros([4, 100]), 2, config={"block_elems": "x"}), cutile.ArgumentError,
     "config['block_elems'] must be a power of two >= 1, got 'x'"),
    ("not a tensor", lambda: top_k([1.0, 2.0], 1), cutile.ArgumentTypeError, "x must be a tensor"),
]


@pytest.mark.parametrize("name, call, error, words", BAD, ids=[case[0] for case in BAD])
def test_bad_arguments_name_the_parameter(name: str, call: Any, error: type[Exception], words: str) -> None:
    with pytest.raises(error, match=re.escape(words)):
        call()


def test_exported_with_its_launch_form() -> None:
    assert cutile_kernels.top_k is top_k and callable(top_k.launch)
    assert "top_k" in cutile_kernels.__all__ and top_k.__doc__


@pytest.mark.parametrize("arch", ["sm_90", "sm_100"])
@pytest.mark.parametrize("dtype, largest", [(bf16, True), (f16, False), (f32, True)])
def test_the_kernels_compile(arch: str, dtype: Any, largest: bool) -> None:
    """The benchmark's decode shape: 64 rows of a 151936 vocabulary, k = 50 (64 slots),
    38 chunks of 4096; and one pass over short rows."""
    one_pass, chunks, rows = top_k_kernels(dtype, largest, 2)
    meta = api.meta
    candidates = meta([64, 38 * 64], dtype=i64)
    compiled = [
        cutile.compile(chunks, candidates.partition([1, 64]), meta([64, 151_936], dtype=dtype), BN=4096, K=50,
                       arch=arch),
        cutile.compile(rows, meta([64, 50], dtype=dtype).partition([1, 64]), meta([64, 50], dtype=i64)
                       .partition([1, 64]), candidates, meta([64, 151_936], dtype=dtype), CP=4096, K=50, arch=arch),
        cutile.compile(one_pass, meta([100, 5], dtype=dtype).partition([2, 8]), meta([100, 5], dtype=i64)
                       .partition([2, 8]), meta([100, 3000], dtype=dtype), BN=4096, K=5, arch=arch),
    ]
    assert all(kernel.cubin for kernel in compiled)
    assert "occupancy = 2" in compiled[0].mlir


# -- on the GPU, torch tensors against torch.topk ---------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
@pytest.mark.parametrize("rows, k", [(1, 50), (64, 50), (128, 8), (3, 64)])
def test_gpu_matches_torch_topk(dtype: str, rows: int, k: int) -> None:
    torch = pytest.importorskip("torch")
    generator = torch.Generator(device="cuda").manual_seed(rows * k)
    x = torch.randn(rows, 151_936, device="cuda", generator=generator).to(getattr(torch, dtype))
    x[0, 77] = float("nan")
    for largest in (True, False):
        values, indices = top_k(x, k, largest=largest)
        assert isinstance(values, torch.Tensor) and values.is_cuda and indices.dtype == torch.int64
        peer = torch.topk(x, k, largest=largest)
        torch.cuda.synchronize()
        # torch's CUDA topk leaves the order of equal values open: the values must agree exactly,
        # the indices with the reference's order (ties by increasing index)
        assert torch.equal(values.float().nan_to_num(7.5), peer.values.float().nan_to_num(7.5))
        host = x.float().cpu().numpy().astype(NUMPY[{"bfloat16": "bf16", "float16": "f16", "float32": "f32"}[dtype]])
        np.testing.assert_array_equal(indices.cpu().numpy(), reference(host, k, largest)[1])


# -- the GPU backend's host side, on cuda_core's fake driver ----------------------------------------
@pytest.fixture
def fake() -> Any:
    """cutile's GPU backend on a fake driver (kernels compile with tileiras for its sm_90;
    launches are recorded, not run), the kernel cache emptied before and after."""
    from host_path_testkit import fake_gpu

    with fake_gpu(top_k_kernels) as driver:
        yield driver


def register(fake: Any, launch: Any) -> None:
    """Gives the fake the parameter layout of a launch's kernel, and drops the launch."""
    from host_path_testkit import register_layout

    register_layout(fake, launch)
    launch.cancel()


def test_gpu_host_path_grids(fake: Any) -> None:
    """A decode batch over a 152k vocabulary: one block per (row, chunk), then one per row;
    a short row: the one-pass kernel, a block per row tile. The caller's tensors stay usable."""
    rows, vocab, k = 3, 151_936, 50
    x = api.empty([rows, vocab], dtype="bf16")
    one_pass, chunks, row_kernel = top_k_kernels(bf16, True, 2)
    candidates = api.empty([rows, 38 * 64], dtype="i64")
    values, indices = api.empty([rows, k], dtype="bf16"), api.empty([rows, k], dtype="i64")
    register(fake, chunks(candidates.permute(0, 1).partition([1, 64]), x, BN=4096, K=k))
    register(fake, row_kernel(values.permute(0, 1).partition([1, 64]), indices.permute(0, 1).partition([1, 64]),
                              candidates, x, CP=4096, K=k))
    got = top_k(x, k, out=(values, indices), config=DEFAULT)
    assert got[0] is values and got[1] is indices
    assert fake.launches[-2]["grid"] == (rows, 38, 1) and fake.launches[-1]["grid"] == (rows, 1, 1)
    short = api.empty([5, 300], dtype="bf16")
    register(fake, one_pass(values.permute(0, 1).partition([2, 8]), indices.permute(0, 1).partition([2, 8]), short,
                            BN=512, K=5))
    top_k(short, 5, config={"tile_rows": 2, "block_elems": 2048, "occupancy": 2})
    assert fake.launches[-1]["grid"] == (3, 1, 1)
    top_k.launch(x, k, out=(values, indices), config=DEFAULT).cancel()  # the tensors were given back
