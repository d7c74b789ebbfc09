"""The two programs of the design document run as written and give the right answer."""

from __future__ import annotations

import numpy as np
import pytest

import cutile
from cutile import api
from cutile.core import Constant, Mut, Tensor, f16, f32, get_tile_block_id, load_tile_like, mma

BOTH_BACKENDS = True


@cutile.entry
def add(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]], y: Tensor[f32, [-1]]):
    tx = load_tile_like(x, z)
    ty = load_tile_like(y, z)
    z.store(tx + ty)


@cutile.entry
def gemm(z: Mut[Tensor[f32, ["BM", "BN"]]], x: Tensor[f16, [-1, "K"]], y: Tensor[f16, ["K", -1]],
         BM: Constant[int], BN: Constant[int], BK: Constant[int], K: Constant[int]):
    part_x = x.partition([BM, BK])
    part_y = y.partition([BK, BN])
    bm, bn, _ = get_tile_block_id()
    acc = z.load()
    for k in range(K // BK):
        acc = mma(part_x.load([bm, k]), part_y.load([k, bn]), acc)
    z.store(acc)


def test_add_as_written() -> None:
    x = api.ones([1024], dtype=f32)
    y = api.ones([1024], dtype=f32)
    z = api.zeros([1024], dtype=f32).partition([128])
    z, x, y = add(z, x, y).sync()
    assert isinstance(z, cutile.Partition)
    np.testing.assert_array_equal(z.to_numpy(), np.full(1024, 2.0, np.float32))


@pytest.mark.parametrize("n, tile", [(1000, 128), (1, 64), (129, 128), (4096, 1024)])
def test_add_random_with_tails(n: int, tile: int) -> None:
    rng = np.random.default_rng(n)
    xs, ys = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    z = api.full([n], np.nan, dtype=f32).partition([tile])  # poisoned: every element must be written
    z, _, _ = add(z, api.from_numpy(xs), api.from_numpy(ys)).sync()
    np.testing.assert_array_equal(z.to_numpy(), xs + ys)


def test_gemm_as_written() -> None:
    x = api.randn([1024, 512], dtype=f16)
    y = api.randn([512, 2048], dtype=f16)
    z = api.zeros([1024, 2048], dtype=f32).partition([128, 128])
    z, x, y = gemm(z, x, y, BK=64).sync()
    reference = x.to_numpy().astype(np.float64) @ y.to_numpy().astype(np.float64)
    error = np.linalg.norm(z.to_numpy() - reference) / np.linalg.norm(reference)
    assert error < 1e-6


def test_gemm_with_tails_accumulates_into_z() -> None:
    rng = np.random.default_rng(7)
    m, n, k = 200, 136, 96
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    c = rng.standard_normal((m, n)).astype(np.float32)
    z = api.from_numpy(c).partition([64, 64])
    z, _, _ = gemm(z, api.from_numpy(a), api.from_numpy(b), BK=32).sync()
    reference = c + a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(z.to_numpy(), reference, rtol=1e-5, atol=1e-4)


def test_the_readme_quick_start_runs_as_written(tmp_path: object) -> None:
    import re
    import runpy
    from pathlib import Path

    readme = Path(__file__).resolve().parents[3] / "README.md"
    code = re.findall(r"```python\n(.*?)```", readme.read_text(), re.S)[0]
    script = Path(str(tmp_path)) / "readme_quick_start.py"  # kernels need a source file
    script.write_text(code)
    namespace = runpy.run_path(str(script))
    np.testing.assert_array_equal(namespace["z"].to_numpy(), np.full(1024, 2.0, np.float32))
