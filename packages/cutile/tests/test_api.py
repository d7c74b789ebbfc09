"""Tensor constructors: made by tile kernels where the tensor lives."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import cutile
from cutile import api
from cutile.core import bf16, bool_, f16, f32, f64, i8, i32, i64, u8

BOTH_BACKENDS = True


@pytest.mark.parametrize("shape", [(1,), (1000,), (3, 333), (2, 3, 4097)])
@pytest.mark.parametrize("dtype", [f32, f16, bf16, f64, i32, i64, i8, u8], ids=str)
def test_full_zeros_ones(shape: tuple[int, ...], dtype: object) -> None:
    np_type = np.dtype(dtype.numpy_name)  # type: ignore[attr-defined]
    np.testing.assert_array_equal(api.zeros(shape, dtype).to_numpy(), np.zeros(shape, np_type))
    np.testing.assert_array_equal(api.ones(shape, dtype).to_numpy(), np.ones(shape, np_type))
    np.testing.assert_array_equal(api.full(shape, 7, dtype).to_numpy(), np.full(shape, 7, np_type))


def test_full_of_bool_and_bad_values() -> None:
    np.testing.assert_array_equal(api.full([5], True, bool_).to_numpy(), np.ones(5, bool))
    with pytest.raises(ValueError, match="not a i32 value"):
        api.full([4], 2.5, i32)


@pytest.mark.parametrize("arguments, dtype", [((10,), None), ((3, 1000, 7), None), ((5, -20, -3), i64),
                                              ((0.5, 4.0, 0.25), None), ((0, 2, 0.125), f16)])
def test_arange_like_numpy(arguments: tuple[float, ...], dtype: object) -> None:
    got = api.arange(*arguments, dtype=dtype).to_numpy()
    expected = np.arange(*arguments)
    np.testing.assert_allclose(got.astype(np.float64), expected, rtol=1e-3)
    assert got.shape == expected.shape


def test_random_values_are_seeded_and_well_distributed() -> None:
    a = api.rand([200_000], seed=11).to_numpy()
    b = api.rand([200_000], seed=11).to_numpy()
    c = api.rand([200_000], seed=12).to_numpy()
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    assert 0.0 <= a.min() and a.max() < 1.0 and abs(a.mean() - 0.5) < 0.01
    histogram, _ = np.histogram(a, bins=10, range=(0, 1))
    assert (abs(histogram / a.size - 0.1) < 0.01).all()
    n = api.randn([200_000], seed=3).to_numpy().astype(np.float64)
    assert abs(n.mean()) < 0.01 and abs(n.std() - 1) < 0.01 and np.isfinite(n).all()
    assert api.randn([64, 64], dtype=bf16, seed=1).to_numpy().dtype == ml_dtypes.bfloat16
    unseeded = api.rand([1000]).to_numpy(), api.rand([1000]).to_numpy()
    assert not np.array_equal(*unseeded)
    with pytest.raises(TypeError, match="floating-point dtype"):
        api.rand([4], i32)


def test_constructors_past_a_launchs_extent_run_in_chunks_with_the_same_values(monkeypatch: pytest.MonkeyPatch) -> None:
    # A tensor may hold more elements than a kernel's i32 extents: the fills, ranges, random
    # numbers and casts launch over slices of it (here slices of 1000, instead of 2^30).
    from cutile import _fill

    whole = {"rand": api.rand([5, 999], seed=9).to_numpy(), "randn": api.randn([4321], dtype=bf16, seed=4).to_numpy(),
             "arange": api.arange(3, 3 + 2 * 4321, 2, dtype=i64).to_numpy(), "full": api.full([4321], 2.5).to_numpy(),
             "astype": api.astype(api.arange(4321, dtype=f32), f16).to_numpy()}
    monkeypatch.setattr(_fill, "CHUNK", 1000)
    assert _fill.chunks(2500) == [(0, 1000), (1000, 2000), (2000, 2500)]
    sliced = {"rand": api.rand([5, 999], seed=9).to_numpy(), "randn": api.randn([4321], dtype=bf16, seed=4).to_numpy(),
              "arange": api.arange(3, 3 + 2 * 4321, 2, dtype=i64).to_numpy(), "full": api.full([4321], 2.5).to_numpy(),
              "astype": api.astype(api.arange(4321, dtype=f32), f16).to_numpy()}
    for name, values in whole.items():
        np.testing.assert_array_equal(sliced[name], values, err_msg=name)
    np.testing.assert_array_equal(whole["arange"], np.arange(3, 3 + 2 * 4321, 2))


def test_like_copy_astype_linspace_eye() -> None:
    values = np.arange(12, dtype=np.float32).reshape(3, 4)
    base = api.arange(12, dtype=f32).reshape(3, 4)
    np.testing.assert_array_equal(api.zeros_like(base).to_numpy(), np.zeros((3, 4), np.float32))
    np.testing.assert_array_equal(api.ones_like(base).to_numpy(), np.ones((3, 4), np.float32))
    np.testing.assert_array_equal(api.full_like(base, 3).to_numpy(), np.full((3, 4), 3, np.float32))
    np.testing.assert_array_equal(api.copy(base).to_numpy(), values)
    np.testing.assert_array_equal(api.clone(base).to_numpy(), values)
    np.testing.assert_array_equal(api.rand_like(base, seed=5).to_numpy(), api.rand([3, 4], seed=5).to_numpy())
    np.testing.assert_array_equal(api.randn_like(base, seed=5).to_numpy(), api.randn([3, 4], seed=5).to_numpy())
    cast = api.astype(base, i32).to_numpy()
    assert cast.dtype == np.int32
    np.testing.assert_array_equal(cast, values.astype(np.int32))
    np.testing.assert_allclose(api.linspace(0, 1, 5).to_numpy(), np.linspace(0, 1, 5))
    np.testing.assert_array_equal(api.eye(3).to_numpy(), np.eye(3, dtype=np.float32))
    empty = api.empty([7], f32)
    assert empty.shape == (7,) and empty.dtype == f32


def test_astype_refuses_a_consumed_tensor() -> None:
    t = api.ones([256], dtype=f32)
    t.partition([128])
    with pytest.raises(cutile.OwnershipError, match="consumed by"):
        api.astype(t, i32)


@pytest.mark.parametrize("source, target", [(f32, i32), (f32, bf16), (i32, f64), (f16, f32), (i64, i8)])
def test_astype_by_kernel_matches_numpy(source: object, target: object) -> None:
    values = np.random.default_rng(9).uniform(-100, 100, 1001)
    src = api.from_numpy(values.astype(np.dtype(source.numpy_name)))  # type: ignore[attr-defined]
    got = api.astype(src, target).to_numpy()
    expected = src.to_numpy().astype(np.float64)
    if target.is_integer:  # type: ignore[attr-defined]
        expected = np.trunc(expected)
    np.testing.assert_allclose(got.astype(np.float64),
                               expected.astype(np.dtype(target.numpy_name)).astype(np.float64))  # type: ignore[attr-defined]


def test_constructors_and_their_op_forms_take_the_same_arguments() -> None:
    from cutile.core import i32

    for value in (2, 2.0):  # an integral float is accepted for an integer dtype by both
        np.testing.assert_array_equal(api.full([5], value, i32).to_numpy(), np.full(5, 2, np.int32))
        np.testing.assert_array_equal(api.ops.full([5], value, i32).sync().to_numpy(), np.full(5, 2, np.int32))
    for make in (lambda: api.full([5], 2.5, i32), lambda: api.ops.full([5], 2.5, i32)):
        with pytest.raises(ValueError, match="2.5 is not a i32 value"):
            make()
    np.testing.assert_array_equal(api.rand([64], seed=3).to_numpy(), api.ops.rand([64], seed=3).sync().to_numpy())
