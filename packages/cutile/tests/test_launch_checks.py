"""Launch-time checks on the interpreter (the GPU path's twins are in
test_gpu_host_path.py): scalars out of their dtype's range, partitions, graph
updates with tensors of another layout, and conflicts with scheduled launches."""

from __future__ import annotations

import numpy as np
import pytest

import cutile
from cutile import api
from cutile.core import Mut, Tensor, bool_, f16, f32, f64, load_tile_like


@cutile.entry
def scaled(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]], a: f32, h: f16, d: f64, on: bool_):
    z.store(load_tile_like(x, z) * a + h.astype(f32) + d.astype(f32) + on.astype(f32))


def _run(a: object = 1.0, h: object = 0.0, d: object = 0.0, on: object = False) -> np.ndarray:
    xs = np.random.default_rng(0).standard_normal(200).astype(np.float32)
    z, _ = scaled(api.zeros([200]).partition([64]), api.from_numpy(xs), a, h, d, on).sync()
    return z.to_numpy()


@pytest.mark.parametrize(("param", "value", "dtype"), [
    ("a", 1e300, "f32"), ("a", -1e39, "f32"), ("a", np.float64(1e300), "f32"), ("a", 10 ** 400, "f32"),
    ("a", 2 ** 200, "f32"), ("h", 1e6, "f16"), ("h", 65520.0, "f16"), ("h", np.float32(1e5), "f16"),
    ("d", 10 ** 400, "f64"),
])
def test_a_finite_float_scalar_that_would_overflow_is_refused(param: str, value: object, dtype: str) -> None:
    with pytest.raises(cutile.LaunchError, match=rf"scaled: parameter '{param}' is a {dtype} scalar; .* overflows it"):
        _run(**{param: value})


@pytest.mark.parametrize("value", [5, -1, 2, np.int64(7)])
def test_a_bool_scalar_other_than_0_or_1_is_refused(value: object) -> None:
    with pytest.raises(cutile.LaunchError, match=r"scaled: parameter 'on' is a bool scalar; -?\d+ is neither 0 nor 1"):
        _run(on=value)


def test_explicit_inf_nan_rounding_and_valid_bools_pass() -> None:
    assert np.isposinf(_run(a=0.0, h=float("inf"))).all()
    assert np.isnan(_run(d=float("nan"))).all()
    assert np.isneginf(_run(a=np.float32(-np.inf))[np.random.default_rng(0).standard_normal(200) > 0]).all()
    np.testing.assert_array_equal(_run(a=0.0, h=65519.0), np.full(200, 65504.0, np.float32))  # rounds to f16's max
    for flag, expected in ((True, 1.0), (1, 1.0), (np.bool_(True), 1.0), (0, 0.0), (False, 0.0)):
        np.testing.assert_array_equal(_run(a=0.0, on=flag), np.full(200, expected, np.float32))


@cutile.entry
def add(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]], y: Tensor[f32, [-1]]):
    z.store(load_tile_like(x, z) + load_tile_like(y, z))


@pytest.mark.parametrize(("tile", "message"), [
    ([0], r"tile dims must be positive powers of two, got 0"),
    ([-64], r"tile dims must be positive powers of two, got -64"),
    ([48], r"tile dims must be positive powers of two, got 48"),
    ([64.0], r"tile dims must be positive powers of two, got 64.0"),
    ([True], r"tile dims must be positive powers of two, got True"),
    ([64, 64], r"a rank-1 tensor \(shape \[100\]\) needs 1 tile dims, got 2"),
    ([], r"a rank-1 tensor \(shape \[100\]\) needs 1 tile dims, got 0"),
])
def test_a_bad_partition_is_refused_where_it_is_made(tile: list[object], message: str) -> None:
    """Both kinds of tensor check the tile shape in one place, naming the argument."""
    with pytest.raises(cutile.LaunchError, match=r"partition\(tile_shape=\[.*\]\): " + message):
        api.zeros([100]).partition(tile)
    with pytest.raises(cutile.LaunchError, match=r"partition\(tile_shape=\[.*\]\): " + message):
        api.meta([100]).partition(tile)


def test_compiling_with_a_zero_tile_is_a_launch_error_not_a_crash() -> None:
    with pytest.raises(cutile.LaunchError, match=r"^partition\(tile_shape=\[0\]\): tile dims must be positive powers of two, got 0$"):
        cutile.compile(add, api.meta([64]).partition([0]), api.meta([64]), api.meta([64]))
    with pytest.raises(cutile.LaunchError, match=r"at most 3 dims"):
        api.meta([2, 2, 2, 2]).partition([1, 1, 1, 1])
    with pytest.raises(cutile.LaunchError, match=r"at most 2\*\*24 = 16777216 elements, \[8192, 4096\] has"):
        api.meta([8192, 8192]).partition([8192, 4096])  # the compiler's tile rule, before any allocation
    z = api.zeros([100])
    with pytest.raises(cutile.LaunchError, match=r"^partition\(tile_shape=\[3\]\): tile dims must be positive powers of two, got 3$"):
        z.partition([3])
    part = z.partition([np.int64(32)])  # a refused partition consumed nothing
    assert part.tile_shape == (32,) and part.grid == (4,)


def _values(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(n).astype(np.float32)


def test_graph_inputs_say_which_parameter_and_layout_in_update_order() -> None:
    x, y = api.from_numpy(_values(1000, 1)), api.from_numpy(_values(1000, 2))
    graph = add(api.zeros([1000]).partition([128]), x, y).graph()
    assert [(i.label, str(i.layout)) for i in graph.inputs] == [
        ("parameter 'x' of launch of add", "f32[1000] (strides [1]) on cpu"),
        ("parameter 'y' of launch of add", "f32[1000] (strides [1]) on cpu")]
    assert graph.inputs[0].layout == x.layout() and graph.inputs[1].resource is y._storage.resource


@pytest.mark.parametrize(("make", "shown"), [
    (lambda: api.zeros([1000], dtype=cutile.core.i32), r"i32\[1000\] \(strides \[1\]\) on cpu"),
    (lambda: api.zeros([2000], dtype=f16), r"f16\[2000\] \(strides \[1\]\) on cpu"),
    (lambda: api.zeros([10, 100]), r"f32\[10, 100\] \(strides \[100, 1\]\) on cpu"),
    (lambda: api.zeros([2000])[::2], r"f32\[1000\] \(strides \[2\]\) on cpu"),
    (lambda: api.zeros([1001])[1:], r"f32\[1000\] \(strides \[1\], offset 1\) on cpu"),
    (lambda: api.zeros([100]), r"f32\[100\] \(strides \[1\]\) on cpu"),
])
def test_graph_update_refuses_a_tensor_of_another_layout(make: object, shown: str) -> None:
    """Another dtype, shape, strides or offset than the captured input's would be
    read as the captured one (garbage): refused, naming the parameter and both."""
    xs, ys = _values(1000, 3), _values(1000, 4)
    z = api.zeros([1000]).partition([128])
    graph = add(z, api.from_numpy(xs), api.from_numpy(ys)).graph()
    with pytest.raises(cutile.GraphUpdateError,
                       match=r"graph 'launch of add': input 1 \(parameter 'y' of launch of add\) was captured as "
                             r"f32\[1000\] \(strides \[1\]\) on cpu; the tensor given for it is " + shown):
        graph.update(None, make())  # type: ignore[operator]
    graph.launch().sync()  # nothing was staged
    np.testing.assert_array_equal(z.to_numpy(), xs + ys)


def test_graph_update_with_the_same_layout_replays_on_the_new_values() -> None:
    xs, ys, xs2, ys2 = (_values(1000, s) for s in (5, 6, 7, 8))
    z = api.zeros([1000]).partition([128])
    x = api.from_numpy(xs)
    graph = add(z, x, api.from_numpy(ys)).graph()
    graph.update(api.from_numpy(xs2))
    graph.launch().sync()
    np.testing.assert_allclose(z.to_numpy(), xs2.astype(np.float64) + ys, rtol=1e-6)
    graph.update(replace={x: api.from_numpy(ys2)})  # by tensor: x's memory is the input
    graph.launch().sync()
    np.testing.assert_allclose(z.to_numpy(), ys2.astype(np.float64) + ys, rtol=1e-6)
    bigger = api.from_numpy(np.concatenate([xs, xs]))
    with pytest.raises(cutile.GraphUpdateError, match=r"input 0 \(parameter 'x' of launch of add\): the tensor given "
                       r"for it has the captured layout .*, but its memory \(8000 bytes on cpu\) differs from the "
                       r"captured memory \(4000 bytes on cpu\)"):
        graph.update(bigger[:1000])  # a view of a larger buffer: the whole buffer would be copied
    with pytest.raises(cutile.GraphUpdateError, match=r"input 0 must be a tensor, got ndarray"):
        graph.update(xs)
    assert isinstance(cutile.GraphUpdateError("m"), cutile.CutileError)


@pytest.mark.gpu
def test_graph_update_on_a_gpu_checks_the_layout_and_replays_on_the_new_values() -> None:
    xs, ys, xs2 = (_values(1000, s) for s in (9, 10, 11))
    z = api.zeros([1000]).partition([128])
    x = api.from_numpy(xs)
    add(z, x, api.from_numpy(ys)).compile().sync()  # warm-up: loaded outside the capture
    graph = add(z, x, api.from_numpy(ys)).graph()
    for wrong in (api.zeros([1000], dtype=cutile.core.i32), api.zeros([10, 100]), api.zeros([2000], dtype=f16)):
        with pytest.raises(cutile.GraphUpdateError, match=r"input 0 \(parameter 'x' of launch of add\) was captured "
                                                          r"as f32\[1000\] \(strides \[1\]\) on "):
            graph.update(wrong)
    graph.update(api.from_numpy(xs2))
    graph.launch().sync()
    np.testing.assert_allclose(z.to_numpy(), xs2.astype(np.float64) + ys, rtol=1e-6)
    graph.close()


@cutile.entry
def scale(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]], a: f32):
    z.store(a * load_tile_like(x, z))


def test_a_conflict_with_a_scheduled_launch_is_refused_at_the_call_naming_both_parameters() -> None:
    xs, ys = _values(300, 12), _values(300, 13)
    x, y = api.from_numpy(xs), api.from_numpy(ys)
    z = api.zeros([300]).partition([128])
    pending = add(z, x, y).schedule()  # runs, and holds z (written) and x, y (read) until observed
    with pytest.raises(cutile.OwnershipError, match=r"is written by the pending op launch of add \(parameter 'z'\); "
                                                    r"launch of scale \(parameter 'x'\) may not read it"):
        scale(api.zeros([300]).partition([128]), z._tensor, 2.0)  # the call itself is refused
    with pytest.raises(cutile.OwnershipError, match=r"is read by the pending op launch of add \(parameter 'y'\); "
                                                    r"launch of scale \(parameter 'z'\) may not write it"):
        scale(y.partition([128]), api.zeros([300]), 2.0)
    u, _ = scale(api.zeros([300]).partition([128]), x, 2.0).sync()  # reading what it reads is fine
    np.testing.assert_allclose(u.to_numpy(), 2.0 * xs.astype(np.float64), rtol=1e-6)
    z, _, _ = pending.result()
    w, _ = scale(api.zeros([300]).partition([128]), z.unpartition(), 0.5).sync()  # observed: free again
    np.testing.assert_allclose(w.to_numpy(), 0.5 * (xs.astype(np.float64) + ys), rtol=1e-6)


def test_a_launch_made_inside_its_own_job_or_batch_is_no_conflict() -> None:
    xs, ys = _values(256, 14), _values(256, 15)
    x, y = api.from_numpy(xs), api.from_numpy(ys)
    t = api.zeros([256]).partition([128])
    chained = add(t, x, y).then(lambda r: scale(api.zeros([256]).partition([128]), r[0].unpartition(), 3.0))
    u, _ = chained.sync()  # the second launch is made while the job holds t
    np.testing.assert_allclose(u.to_numpy(), 3.0 * (xs.astype(np.float64) + ys), rtol=1e-5)
    z = api.zeros([256]).partition([128])
    with cutile.batch():
        for _ in range(3):  # each launch is made while the batch holds z
            z, x, y = add(z, x, y).sync()
    np.testing.assert_allclose(z.to_numpy(), xs.astype(np.float64) + ys, rtol=1e-6)


def test_a_scheduled_launch_conflict_inside_a_graph_replay_names_the_parameter() -> None:
    x, y = api.ones([256]), api.ones([256])
    z = api.zeros([256]).partition([128])
    graph = add(z, x, y).graph()
    replay = graph.launch().schedule()  # the replay holds x, y (read) and z (written)
    with pytest.raises(cutile.OwnershipError, match=r"by the pending op 'replay of launch of add'; "
                                                    r"launch of scale \(parameter 'z'\) may not write it"):
        scale(x.partition([128]), api.ones([256]), 1.0)
    replay.result()
