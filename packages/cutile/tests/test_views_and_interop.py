"""Views (slices, reshape, permute) and zero-copy exchange with other libraries."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import cutile
from cutile import api
from cutile.core import Mut, Tensor, f32, load_tile_like

BOTH_BACKENDS = True


@cutile.entry
def scale2d(z: Mut[Tensor[f32, ["BM", "BN"]]], x: Tensor[f32, [-1, -1]]):
    z.store(load_tile_like(x, z) * 2)


def test_views_match_numpy() -> None:
    values = np.arange(6 * 8, dtype=np.float32).reshape(6, 8)
    t = api.from_numpy(values)
    for key in [(slice(1, 5), slice(None, None, 2)), (2,), (Ellipsis, 3), (slice(None, None, -1), 0), (-1, slice(2, 7))]:
        np.testing.assert_array_equal(t[key].to_numpy(), values[key])
    np.testing.assert_array_equal(t.T.to_numpy(), values.T)
    np.testing.assert_array_equal(t.reshape(4, -1).to_numpy(), values.reshape(4, -1))
    np.testing.assert_array_equal(t.permute(1, 0)[1:3].to_numpy(), values.T[1:3])
    with pytest.raises(ValueError, match="not contiguous"):
        t.T.reshape(48)
    with pytest.raises(IndexError, match="out of bounds for axis 0"):
        t[6]


def test_kernel_reads_a_strided_view_and_writes_a_sub_block() -> None:
    values = np.random.default_rng(3).standard_normal((64, 96)).astype(np.float32)
    source = api.from_numpy(values)[8:40, 16:64]        # 32 x 48, outer stride 96: accepted as it is
    target = api.full([64, 64], -1.0)
    window = target[16:48, 8:56]                        # 32 x 48 view inside a bigger tensor
    z = window.partition([16, 16])
    z, _ = scale2d(z, source).sync()
    result = target.to_numpy()
    expected = np.full((64, 64), -1.0, np.float32)
    expected[16:48, 8:56] = values[8:40, 16:64] * 2
    np.testing.assert_array_equal(result, expected)


@pytest.mark.parametrize("view", ["step 2", "transposed", "column"])
def test_kernels_take_views_whose_innermost_stride_is_not_one(view: str) -> None:
    values = np.random.default_rng(4).standard_normal((40, 96)).astype(np.float32)
    whole = api.from_numpy(values)
    source, expected = {
        "step 2": (whole[3:35, ::2], values[3:35, ::2]),               # 32 x 48, inner stride 2
        "transposed": (whole[:, 8:56].T, values[:, 8:56].T),           # 48 x 40, inner stride 96
        "column": (whole[:, 5:6], values[:, 5:6]),                     # a last dim of one element
    }[view]
    z, _ = scale2d(api.full(list(expected.shape), np.nan).partition([16, 16]), source).sync()
    np.testing.assert_array_equal(z.to_numpy(), expected * 2)
    # A Mut output that is itself a transposed view (z.T written through its strides)
    target = api.full([expected.shape[1], expected.shape[0]], np.nan)
    out, _ = scale2d(target.T.partition([16, 16]), source).sync()
    np.testing.assert_array_equal(out.to_numpy(), expected * 2)


def test_views_with_negative_strides_are_refused_before_any_work() -> None:
    values = np.random.default_rng(5).standard_normal((40, 96)).astype(np.float32)
    whole = api.from_numpy(values)
    with pytest.raises(cutile.LaunchError, match=r"parameter 'x' has a negative stride \[-96, -3\].*api.copy"):
        scale2d(api.zeros([40, 32]).partition([16, 16]), whole[::-1, ::-3])
    with pytest.raises(cutile.LaunchError, match="parameter 'z' has a negative stride"):
        scale2d(api.zeros([40, 32])[::-1].partition([16, 16]), whole[:, :32])
    copied = api.copy(whole[::-1, ::-3])  # a copy is dense: accepted
    z, _ = scale2d(api.zeros([40, 32]).partition([16, 16]), copied).sync()
    np.testing.assert_array_equal(z.to_numpy(), values[::-1, ::-3] * 2)


@pytest.mark.interpreter_only
def test_the_entry_takes_the_innermost_stride_only_when_it_is_not_one() -> None:
    values = api.from_numpy(np.zeros((64, 96), np.float32))
    z = api.meta([32, 48]).partition([16, 16])
    unit = cutile.compile(scale2d, z, values[8:40, 16:64])  # tileiras compiles both
    strided = cutile.compile(scale2d, api.meta([32, 48]).partition([16, 16]), values[8:40, ::2])
    strides = lambda compiled: [(a.param, a.axis) for a in compiled.abi if a.kind == "stride"]  # noqa: E731
    assert strides(unit) == [("z", 0), ("x", 0)]
    assert strides(strided) == [("z", 0), ("x", 0), ("x", 1)]
    assert unit.cubin and strided.cubin


@pytest.mark.interpreter_only
@pytest.mark.parametrize("dtype", ["float8_e4m3fn", "float8_e5m2", "bfloat16"])
def test_strided_views_of_ml_dtypes_come_back_to_numpy(dtype: str) -> None:
    import ml_dtypes

    values = np.arange(-24, 24, dtype=np.float32).reshape(6, 8).astype(getattr(ml_dtypes, dtype))
    tensor = api.from_numpy(values)
    view = tensor[1::2, ::3]  # strided both ways
    got = view.to_numpy()
    assert got.dtype == values.dtype
    np.testing.assert_array_equal(got.astype(np.float32), values[1::2, ::3].astype(np.float32))


def test_numpy_round_trip_without_copies(backend: str) -> None:
    array = np.arange(16, dtype=np.float32)
    if backend == "gpu":  # host memory is not where the GPU's kernels run: refused, with the way out
        with pytest.raises(cutile.InteropError, match=r"host memory .* api\.from_numpy"):
            api.from_dlpack(array)
        return
    t = api.from_dlpack(array)
    array[3] = 42.0
    assert t.to_numpy()[3] == 42.0  # shared memory, not a copy
    back = np.from_dlpack(t)
    assert np.shares_memory(back, array)
    strided = api.from_dlpack(array[::4])
    np.testing.assert_array_equal(strided.to_numpy(), array[::4])


def test_interop_errors_are_clear(backend: str) -> None:
    if backend == "interpreter":
        with pytest.raises(AttributeError, match="host memory"):
            _ = api.zeros([4]).__cuda_array_interface__
    with pytest.raises(cutile.CutileError, match="supports neither __dlpack__ nor __cuda_array_interface__"):
        api.from_dlpack([1, 2, 3])


@pytest.mark.gpu
def test_pytorch_tensors_in_and_out_without_copies() -> None:
    torch = pytest.importorskip("torch")
    x = torch.randn(300, 64, device="cuda")
    out = torch.zeros(300, 64, device="cuda")
    z = api.from_dlpack(out).partition([64, 64])
    z, _ = scale2d(z, api.from_dlpack(x)).sync()
    torch.cuda.synchronize()
    assert torch.equal(out, x * 2)  # the kernel wrote PyTorch's memory
    mine = api.randn([128, 64], seed=5)
    shared = torch.from_dlpack(mine)
    assert shared.data_ptr() == api.from_dlpack(shared).__cuda_array_interface__["data"][0]
    np.testing.assert_array_equal(shared.cpu().numpy(), mine.to_numpy())
    cai = torch.as_tensor(mine, device="cuda")  # through __cuda_array_interface__
    assert cai.data_ptr() == shared.data_ptr()


@pytest.mark.gpu
def test_cupy_exchange() -> None:
    cupy = pytest.importorskip("cupy")
    x = cupy.arange(64 * 64, dtype=cupy.float32).reshape(64, 64)
    z = api.zeros([64, 64]).partition([32, 32])
    z, _ = scale2d(z, api.from_dlpack(x)).sync()
    back = cupy.from_dlpack(z.unpartition())
    assert bool((back == x * 2).all())


_JAX_SCRIPT = """
import sys
import numpy as np
import jax, jax.numpy as jnp
device = jax.devices()[0]
print("JAX-READY", device.platform, flush=True)
import cutile
from cutile import api
from cutile.core import Mut, Tensor, f32, load_tile_like

@cutile.entry
def scale2d(z: Mut[Tensor[f32, ["BM", "BN"]]], x: Tensor[f32, [-1, -1]]):
    z.store(load_tile_like(x, z) * 2)

values = np.random.default_rng(7).standard_normal((64, 96)).astype(np.float32)
x = api.from_dlpack(jax.device_put(jnp.asarray(values), device))
z, _ = scale2d(api.zeros([64, 96]).partition([32, 32]), x).sync()
back = jnp.from_dlpack(z.unpartition())
assert back.devices() == {device}, back.devices()
np.testing.assert_array_equal(np.asarray(back), values * 2)
try:
    scale2d(api.from_dlpack(jax.device_put(jnp.zeros((64, 96), jnp.float32), device)).partition([32, 32]), x)
except cutile.LaunchError as exc:
    assert "parameter 'z' is Mut" in str(exc) and "read-only" in str(exc), exc
else:
    sys.exit("a JAX array was accepted as a Mut output")
print("OK on", cutile.backend())
"""


def test_jax_arrays_in_and_out(backend: str, tmp_path: Any) -> None:
    """JAX arrays are immutable: they come in as read-only inputs (a Mut use is
    refused), and results go back to JAX through DLPack without a copy. Run in a
    child process: JAX claims the GPU its own way, and a JAX that cannot start its
    CUDA backend aborts the process."""
    import os
    import subprocess
    import sys

    pytest.importorskip("jax", reason="JAX is not installed (not a dependency of cutile)")
    env = dict(os.environ, CUTILE_BACKEND=backend, XLA_PYTHON_CLIENT_PREALLOCATE="false",
               JAX_PLATFORMS="cuda" if backend == "gpu" else "cpu")
    script = tmp_path / "jax_interop.py"  # kernels need a source file
    script.write_text(_JAX_SCRIPT)
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    if "JAX-READY" not in done.stdout:
        pytest.skip(f"JAX could not start its {env['JAX_PLATFORMS']} backend here: "
                    f"{(done.stderr.strip().splitlines() or ['exit ' + str(done.returncode)])[-1]}")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"OK on {backend}" in done.stdout


def test_broadcast_to_is_a_stride_zero_view_kernels_read_and_mut_refuses() -> None:
    values = np.arange(3 * 4, dtype=np.float32).reshape(1, 3, 4)
    t = api.from_numpy(values)
    wide = t.broadcast_to(2, 5, 3, 4)
    assert wide.shape == (2, 5, 3, 4) and wide.strides == (0, 0, 4, 1)
    np.testing.assert_array_equal(wide.to_numpy(), np.broadcast_to(values, (2, 5, 3, 4)))
    rows = api.from_numpy(np.arange(4, dtype=np.float32)).broadcast_to([6, 4])  # a read-only input, stride 0
    z, _ = scale2d(api.full([6, 4], np.nan).partition([2, 4]), rows).sync()
    np.testing.assert_array_equal(z.to_numpy(), np.broadcast_to(np.arange(4) * 2.0, (6, 4)))
    with pytest.raises(cutile.LaunchError):  # a Mut tensor whose elements share memory
        scale2d(api.zeros([4]).broadcast_to(6, 4).partition([2, 4]), rows)
    for bad in ([3, 5], [4], [-1, 3, 4]):
        with pytest.raises(cutile.ArgumentError, match="cannot broadcast"):
            t.broadcast_to(bad)


@pytest.mark.parametrize("name", ["float8_e4m3fn", "float8_e5m2", "bfloat16"])
def test_from_dlpack_shares_ml_dtypes_arrays_strided(name: str) -> None:
    if cutile.backend() != "interpreter":
        pytest.skip("host arrays are shared on the interpreter backend")
    import ml_dtypes

    values = np.arange(24, dtype=np.float32).reshape(4, 6).astype(getattr(ml_dtypes, name))
    view = values[:, ::2]
    t = api.from_dlpack(view)
    np.testing.assert_array_equal(t.to_numpy().astype(np.float32), view.astype(np.float32))
