"""print, assert, assume, gather/scatter, atomics, custom reductions and the
grid-dependency ops inside kernels, against numpy; on the interpreter, and on the GPU where one is."""

import contextlib
import ctypes
import sys
from typing import Any

import numpy as np
import pytest

import cutile
import cutile.core as ct
from cutile import api
from cutile.core import Constant, Mut, Tensor, f32, i32, i64, load_tile_like, u32

BOTH_BACKENDS = True
RNG = np.random.default_rng(77)


def flushed(capfd: pytest.CaptureFixture[str]) -> str:
    """Everything printed so far, the device's printf included (C stdio is flushed)."""
    sys.stdout.flush()
    ctypes.CDLL(None).fflush(None)
    return capfd.readouterr().out


@cutile.entry
def prints(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]], n: i32):
    t = load_tile_like(x, z)
    print("n=%d hex=%x neg=%u t=%.2f wide=%5d", n, n * 255, n - 8, t, n.astype(i64) * 1000000000)
    ct.printf("sum=%g|", t.sum())
    print(" 100%% done, flag=%d", t.sum() > 0)
    z.store(t)


def test_print_formats_scalars_and_tiles(capfd: pytest.CaptureFixture[str]) -> None:
    x = np.array([1.5, -2.0, 0.25, 3.0], dtype=np.float32)
    z = api.zeros([4]).partition([4])  # one block: no block prefix on the interpreter
    flushed(capfd)
    prints(z, api.from_numpy(x), 7).sync()
    out = flushed(capfd)
    assert out == ("n=7 hex=6f9 neg=4294967295 t=[1.50, -2.00, 0.25, 3.00] wide=7000000000\n"
                   "sum=2.75| 100% done, flag=1\n")


@cutile.entry
def tile_prints(z: Mut[Tensor[i32, ["R", "C"]]]):
    t = ct.reshape(ct.arange(8), (2, 4))
    print("%d", t)
    z.store(t)


def test_print_of_a_2d_tile_nests_rows(capfd: pytest.CaptureFixture[str]) -> None:
    flushed(capfd)
    tile_prints(api.zeros([2, 4], dtype=i32).partition([2, 4])).sync()
    assert flushed(capfd) == "[[0, 1, 2, 3], [4, 5, 6, 7]]\n"


@cutile.entry
def checked(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]], limit: f32):
    t = load_tile_like(x, z)
    assert t.sum() < limit, "the tile sum is too big"
    assert t < 100.0, "an element is too big"
    z.store(ct.assume(ct.bid(0) * 64, div_by=64, lower=0).astype(f32) + t)


def test_asserts_that_hold_let_the_kernel_run() -> None:
    x = RNG.uniform(0, 1, 200).astype(np.float32)
    z = api.zeros([200]).partition([64])
    z, _ = checked(z, api.from_numpy(x), 1000.0).sync()
    np.testing.assert_allclose(z.to_numpy(), x + (np.arange(200) // 64 * 64))


@cutile.entry
def dependent_scale(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    ct.grid_dependency_control_launch_dependents()
    ct.grid_dependency_control_wait()  # (nothing to wait for: this launch is no programmatic dependent)
    z.store(load_tile_like(x, z) * 3.0)


def test_the_grid_dependency_ops_run_where_no_launch_is_pending() -> None:
    x = RNG.uniform(-1, 1, 300).astype(np.float32)
    z, _ = dependent_scale(api.full([300], -7.0).partition([128]), api.from_numpy(x)).sync()
    np.testing.assert_allclose(z.to_numpy(), 3.0 * x, rtol=1e-6)


@cutile.entry
def add_one(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    z.store(load_tile_like(x, z) + 1.0)


@cutile.entry
def add_one_placed(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    one = (ct.bid(0) * 0 + 1).astype(f32)  # computed before the wait: no memory touched
    ct.grid_dependency_control_launch_dependents()
    ct.grid_dependency_control_wait()
    z.store(load_tile_like(x, z) + one)


@pytest.mark.parametrize("kernel", [add_one, add_one_placed], ids=["plain", "placed"])
def test_a_chain_of_dependent_launches_sees_each_predecessors_writes(backend: str, kernel: Any) -> None:
    """Each launch reads what the one before wrote and writes what it read (two
    buffers in turn), in a batch and as a replayed graph: every one waits for its
    predecessor. On the GPU enough blocks for several waves, so the kernels overlap."""
    n = (1 << 22) + 3 if backend == "gpu" else 3000
    start = RNG.integers(0, 100, n).astype(np.float32)
    steps = 24
    step = kernel
    a, b = api.from_numpy(start), api.full([n], np.nan)
    with cutile.dependent_launches():
        with cutile.batch():
            for _ in range(steps // 2):
                bp, a = step(b.partition([1024]), a).sync()
                b = bp.unpartition()
                ap, b = step(a.partition([1024]), b).sync()
                a = ap.unpartition()
        with cutile.graph_scope("chain") as scope:
            for _ in range(steps // 2):
                bp, a = step(b.partition([1024]), a).sync()
                b = bp.unpartition()
                ap, b = step(a.partition([1024]), b).sync()
                a = ap.unpartition()
    graph = scope.graph
    for _ in range(3):
        graph.launch().sync()
    graph.close()
    runs = 4 if backend == "gpu" else 5  # the batch, three replays (and the interpreter's capture runs them)
    expected = start.astype(np.float64) + runs * steps
    np.testing.assert_allclose(a.to_numpy(), expected.astype(np.float32), rtol=1e-6)


@cutile.entry
def add_weight_early(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]], w: Tensor[f32, [-1]]):
    early = load_tile_like(w, z)  # before the wait: w is frozen, nothing writes it
    ct.grid_dependency_control_wait()
    z.store(load_tile_like(x, z) + early)


def test_a_dependent_launch_reads_frozen_memory_before_its_wait(backend: str) -> None:
    n = (1 << 22) + 5 if backend == "gpu" else 2500
    start = RNG.integers(0, 100, n).astype(np.float32)
    w = api.from_numpy(RNG.integers(1, 4, n).astype(np.float32))
    a, b = api.from_numpy(start), api.full([n], np.nan)
    with cutile.dependent_launches():
        bp = b.partition([1024])
        with pytest.raises(cutile.LaunchError, match=r"add_weight_early: parameter 'w' is read before "
                                                     r"grid_dependency_control_wait\(\) in a dependent launch.*must "
                                                     r"be frozen \(tensor.freeze\(\)\)"):
            add_weight_early(bp, a, w).sync()
        b = bp.unpartition()
        w.freeze()
        with cutile.batch():
            for _ in range(8):
                bp, a, w = add_weight_early(b.partition([1024]), a, w).sync()
                b = bp.unpartition()
                ap, b, w = add_weight_early(a.partition([1024]), b, w).sync()
                a = ap.unpartition()
    np.testing.assert_array_equal(a.to_numpy(), start + 16 * w.to_numpy())


def test_frozen_memory_is_written_by_nothing(backend: str) -> None:
    x = api.from_numpy(RNG.standard_normal(300).astype(np.float32))
    view = x[10:50]
    assert view.freeze() is view
    written = x.partition([128])
    with pytest.raises(cutile.LaunchError, match=r"parameter 'z' is Mut\[\.\.\.\] but its memory is read-only"):
        add_one(written, api.zeros([300]))  # the whole storage is frozen, not the view alone
    x = written.unpartition()
    if backend == "interpreter":
        with pytest.raises(cutile.InteropError, match=r"host_view\(\): the tensor's memory is frozen"):
            x.host_view()
    z = api.zeros([300])
    for capture in (contextlib.nullcontext(), cutile.graph_scope("reads x")):  # (loaded before the capture)
        with capture as scope:
            z, x = add_one(z.partition([128]), x).sync()
            z = z.unpartition()
    with pytest.raises(cutile.GraphUpdateError, match=r"Graph.update: parameter 'x' of launch of add_one is frozen "
                                                      r"memory \(Tensor.freeze\)"):
        scope.graph.update(api.zeros([300]))
    scope.graph.close()


def test_freeze_refuses_memory_a_pending_launch_writes(backend: str) -> None:
    z = api.zeros([300])
    view = z[100:200]  # another object over the memory the launch writes
    pending = add_one(z.partition([128]), api.zeros([300]))
    with pytest.raises(cutile.OwnershipError, match=r"freeze\(\): the tensor is held by the pending launch of "
                                                    r"add_one \(parameter 'z'\), which writes it"):
        view.freeze()
    pending.cancel()
    assert view.freeze()._storage.frozen  # given back: it freezes


@pytest.mark.gpu
def test_freeze_refuses_memory_handed_to_another_library(backend: str) -> None:
    shared = api.zeros([300])
    shared.__dlpack__()  # (a consumer may now write it on its own streams)
    with pytest.raises(cutile.InteropError, match=r"freeze\(\): the tensor's memory was handed to another library"):
        shared.freeze()


def test_dependent_launches_takes_a_bool() -> None:
    with pytest.raises(cutile.ArgumentTypeError, match=r"dependent_launches\(\): parameter 'enabled' must be a "
                                                       r"bool, got 1"):
        with cutile.dependent_launches(1):  # type: ignore[arg-type]
            pass


@cutile.entry(unsafe=True)
def gather_scatter(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1, -1]], rows: Tensor[i32, [-1]],
                   cols: Tensor[i32, [-1]], B: Constant[int]):
    r = load_tile_like(rows, z)
    c = load_tile_like(cols, z)
    inside = ct.arange(B) + ct.bid(0) * B < rows.shape[0]
    picked = ct.gather(x, (r, c), mask=inside, padding=-1.0)
    # scatter in reverse order inside the tile: z[start + B - 1 - i] = picked[i]
    target = ct.bid(0) * B + (B - 1) - ct.arange(B)
    ct.scatter(z, target, picked * 2.0, mask=(target < z.shape[0]) & inside)


def test_gather_and_scatter_by_index_tiles() -> None:
    x = RNG.standard_normal((30, 20)).astype(np.float32)
    rows = RNG.integers(0, 30, 128).astype(np.int32)
    cols = RNG.integers(0, 20, 128).astype(np.int32)
    z = api.full([128], np.nan).partition([32])
    z, *_ = gather_scatter(z, api.from_numpy(x), api.from_numpy(rows), api.from_numpy(cols)).sync()
    expected = (x[rows, cols] * 2).reshape(4, 32)[:, ::-1].reshape(-1)
    np.testing.assert_array_equal(z.to_numpy(), expected)


@cutile.entry(unsafe=True)
def histogram(h: Mut[Tensor[i32, ["B"]]], values: Tensor[i32, [-1]], B: Constant[int]):
    v = values.load(index=(ct.bid(0),), shape=(B,))
    inside = ct.arange(B) + ct.bid(0) * B < values.shape[0]
    ct.atomic_add(h, v, 1, mask=inside)


def test_atomic_add_counts_duplicates_across_blocks() -> None:
    values = RNG.integers(0, 16, 1000).astype(np.int32)
    h = api.zeros([16], dtype=i32).partition([16])
    h, _ = histogram(h, api.from_numpy(values)).grid(63).sync()  # 63 blocks of 16 values (B is h's tile)
    np.testing.assert_array_equal(h.to_numpy(), np.bincount(values, minlength=16))


@cutile.entry(unsafe=True)
def atomics(out: Mut[Tensor[i32, ["B"]]], old: Mut[Tensor[i32, [-1]]], f: Mut[Tensor[f32, [-1]]],
            arg: Tensor[i32, [-1]], MODE: Constant[int]):
    a = arg.load(index=(0,), shape=(16,))
    idx = ct.arange(16)
    if MODE == 0:
        before = ct.atomic_max(out, idx, a)
    elif MODE == 1:
        before = ct.atomic_min(out, idx, a, order="acq_rel", scope="device")
    elif MODE == 2:
        before = ct.atomic_and(out, idx, a)
    elif MODE == 3:
        before = ct.atomic_or(out, idx, a)
    elif MODE == 4:
        before = ct.atomic_xor(out, idx, a)
    elif MODE == 5:
        before = ct.atomic_xchg(out, idx, a, order="release")
    else:
        before = ct.atomic_cas(out, idx, idx * 10, a, order="acquire", scope="sys")
    ct.scatter(old, idx, before)
    ct.atomic_add(f, idx % 4, a.astype(f32) * 0.5)


@pytest.mark.parametrize("mode, update", [
    (0, np.maximum), (1, np.minimum), (2, np.bitwise_and), (3, np.bitwise_or), (4, np.bitwise_xor),
    (5, lambda old, a: a), (6, lambda old, a: np.where(old == np.arange(16) * 10, a, old)),
])
def test_atomic_modes_return_the_old_values(mode: int, update: Any) -> None:
    start = np.where(np.arange(16) % 2 == 0, np.arange(16) * 10, -5).astype(np.int32)
    arg = RNG.integers(-100, 100, 16).astype(np.int32)
    out = api.from_numpy(start).partition([16])
    old = api.zeros([16], dtype=i32).partition([16])
    f = api.zeros([4]).partition([4])
    out, old, f, _ = atomics(out, old, f, api.from_numpy(arg), MODE=mode).sync()
    np.testing.assert_array_equal(out.to_numpy(), update(start, arg))
    np.testing.assert_array_equal(old.to_numpy(), start)
    np.testing.assert_allclose(f.to_numpy(), (arg.reshape(4, 4).astype(np.float64) * 0.5).sum(axis=0))


@cutile.entry
def own_tile_atomics(z: Mut[Tensor[i32, ["B"]]], w: Mut[Tensor[u32, ["B"]]], x: Tensor[i32, [-1]]):
    t = load_tile_like(x, z)
    old = z.atomic_add(t)
    z.atomic_max(old * 3)
    w.atomic_or(t.astype(u32))
    w.atomic_cas(ct.full((64,), 7, u32), ct.full((64,), 1, u32))


def test_safe_kernels_update_their_own_tile_atomically() -> None:
    x = RNG.integers(0, 8, 150).astype(np.int32)
    z = api.from_numpy(np.full(150, 2, np.int32)).partition([64])
    w = api.from_numpy(np.full(150, 4, np.uint32), u32).partition([64])
    z, w, _ = own_tile_atomics(z, w, api.from_numpy(x)).sync()
    np.testing.assert_array_equal(z.to_numpy(), np.maximum(2 + x, 6))
    ored = (4 | x).astype(np.uint32)
    np.testing.assert_array_equal(w.to_numpy(), np.where(ored == 7, 1, ored))


@cutile.function
def larger(acc: Any, x: Any) -> Any:
    return ct.maximum(acc, x)


@cutile.entry
def custom_reductions(out: Mut[Tensor[f32, ["R", 4]]], x: Tensor[f32, [-1, 32]]):
    t = load_tile_like(x, out) if False else x.load(index=(ct.bid(0), 0), shape=(16, 32))
    biggest = ct.reduce(t, 1, larger, -float("inf"))
    product = ct.reduce(t, 1, lambda acc, v: acc * v, 1.0)
    cols = ct.broadcast_to(ct.reshape(ct.arange(32), (1, 32)), (16, 32))
    best, where = ct.reduce((t, cols), 1, lambda acc, v: (ct.where(v[0] > acc[0], v[0], acc[0]),
                                                          ct.where(v[0] > acc[0], v[1], acc[1])), (-float("inf"), 0))
    running = ct.scan(t, 1, lambda acc, v: ct.maximum(acc, v), -float("inf"), reverse=True)
    out.store(ct.cat(ct.cat(ct.reshape(biggest, (16, 1)), ct.reshape(product, (16, 1)), 1),
                     ct.cat(ct.reshape(where.astype(f32), (16, 1)), ct.extract(running, (0, 0), (16, 1)), 1), 1))


def test_reduce_and_scan_with_a_combining_function() -> None:
    x = RNG.uniform(0.5, 1.5, (40, 32)).astype(np.float32)
    out = api.full([40, 4], np.nan).partition([16, 4])
    out, _ = custom_reductions(out, api.from_numpy(x)).sync()
    got = out.to_numpy()
    np.testing.assert_array_equal(got[:, 0], x.max(axis=1))
    np.testing.assert_allclose(got[:, 1], x.astype(np.float64).prod(axis=1), rtol=1e-5)
    np.testing.assert_array_equal(got[:, 2], x.argmax(axis=1))
    np.testing.assert_array_equal(got[:, 3], x.max(axis=1))  # reverse running max at column 0


@cutile.entry(hints={"sm_90": {"num_worker_warps": 4}, "occupancy": 2})
def hinted(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    z.store(load_tile_like(x, z, latency=2, allow_tma=False) * 2)


def test_hinted_kernels_compute_the_same() -> None:
    x = RNG.standard_normal(300).astype(np.float32)
    z = api.zeros([300]).partition([128])
    z, _ = hinted(z, api.from_numpy(x)).compile_options(hints={"sm_100": {"num_ctas": 2}}).sync()
    np.testing.assert_array_equal(z.to_numpy(), x * 2)


MODES = ("nearest_even", "zero", "negative_inf", "positive_inf")


@cutile.entry
def rounded(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]], y: Tensor[f32, [-1]], OP: Constant[int],
            MODE: Constant[int]):
    a = load_tile_like(x, z)
    b = load_tile_like(y, z)
    mode = MODES[MODE]
    if OP == 0:
        r = ct.add(a, b, rounding=mode)
    elif OP == 1:
        r = ct.mul(a, b, rounding=mode)
    elif OP == 2:
        r = ct.div(a, b, rounding=mode, flush_to_zero=True)
    else:
        narrowing = "zero" if mode == "zero" else "nearest_even"  # conversions take these two
        r = ct.fma(a, b, a, rounding=mode).astype(ct.f16, rounding=narrowing).astype(f32)
    z.store(r)


def directed(exact: Any, mode: str, kind: Any) -> Any:
    """The float of ``kind`` that rounding the rational ``exact`` in ``mode`` gives."""
    from fractions import Fraction

    r = kind(float(exact))
    lo, hi = (r, np.nextafter(r, kind(np.inf))) if Fraction(float(r)) <= exact else (np.nextafter(r, kind(-np.inf)), r)
    if Fraction(float(lo)) == exact or mode == "negative_inf" or (mode == "zero" and exact > 0):
        return lo if mode != "nearest_even" else r
    if mode == "nearest_even":
        return r
    return hi


@pytest.mark.parametrize("mode", range(4), ids=MODES)
@pytest.mark.parametrize("op", range(4), ids=["add", "mul", "div_ftz", "fma_to_f16"])
def test_rounding_modes_round_in_their_direction(op: int, mode: int) -> None:
    from fractions import Fraction

    x = (RNG.standard_normal(128) * 100).astype(np.float32)
    y = (RNG.standard_normal(128) * 3).astype(np.float32)
    z = api.zeros([128]).partition([128])
    z, _, _ = rounded(z, api.from_numpy(x), api.from_numpy(y), OP=op, MODE=mode).sync()
    got = z.to_numpy()
    for a, b, r in zip(x, y, got):
        fa, fb = Fraction(float(a)), Fraction(float(b))
        if op == 0:
            expected = directed(fa + fb, MODES[mode], np.float32)
        elif op == 1:
            expected = directed(fa * fb, MODES[mode], np.float32)
        elif op == 2:
            expected = directed(fa / fb, MODES[mode], np.float32)
        else:
            f32_result = directed(fa * fb + fa, MODES[mode], np.float32)
            narrowing = "zero" if MODES[mode] == "zero" else "nearest_even"
            expected = np.float32(directed(Fraction(float(f32_result)), narrowing, np.float16))
        assert r == expected, (a, b, r, expected)


@cutile.entry
def low_precision_mma(z: Mut[Tensor[f32, ["BM", "BN"]]], a8: Tensor[ct.f8e4m3fn, [-1, -1]],
                      b8: Tensor[ct.f8e5m2, [-1, -1]], a: Tensor[f32, [-1, -1]], b: Tensor[f32, [-1, -1]],
                      BM: Constant[int], BN: Constant[int]):
    i, j, _ = ct.get_tile_block_id()
    fp8 = ct.mma(a8.load(index=(i, 0), shape=(BM, 64)), a8.load(index=(0, j), shape=(64, BN)), z.load())
    fp8 = ct.mma(b8.load(index=(i, 0), shape=(BM, 64)), b8.load(index=(0, j), shape=(64, BN)), fp8)
    tf32 = ct.mma(a.load(index=(i, 0), shape=(BM, 64)).astype(ct.tf32),
                  b.load(index=(0, j), shape=(64, BN)).astype(ct.tf32), ct.zeros((BM, BN), f32))
    z.store(fp8 + tf32)


def test_fp8_and_tf32_inputs_to_mma() -> None:
    import ml_dtypes

    a8 = RNG.uniform(-2, 2, (64, 64)).astype(ml_dtypes.float8_e4m3fn)
    b8 = RNG.uniform(-2, 2, (64, 64)).astype(ml_dtypes.float8_e5m2)
    a, b = RNG.standard_normal((64, 64)).astype(np.float32), RNG.standard_normal((64, 64)).astype(np.float32)
    z = api.zeros([64, 64]).partition([64, 64])
    z, *_ = low_precision_mma(z, api.from_numpy(a8, ct.f8e4m3fn), api.from_numpy(b8, ct.f8e5m2),
                              api.from_numpy(a), api.from_numpy(b)).sync()
    exact8 = a8.astype(np.float64) @ a8.astype(np.float64) + b8.astype(np.float64) @ b8.astype(np.float64)
    np.testing.assert_allclose(z.to_numpy(), exact8 + a.astype(np.float64) @ b, rtol=0, atol=0.1)
    # tf32 keeps 10 mantissa bits: far from f32 accuracy, far better than nothing
    assert np.abs(z.to_numpy() - exact8 - a.astype(np.float64) @ b).max() > 1e-6
