"""A staged matmul compiles for sm_90 the tiled kernel specialization of an aligned call
over padded views (every tensor with 16-byte base and stride facts), where the call as
given would have specialized on 2-byte ones; the staging copy kernels compile for sm_90
and sm_100 (tileiras, no GPU)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import cutile
from cutile import api
from cutile._binding import describe_call
from cutile.core import bf16, f8e4m3fn, f16, f32

from cutile_kernels import _matmul, _staging

pytestmark = pytest.mark.skipif(cutile.backend() != "interpreter", reason="interpreter tensors compiled ahead of time")


def _call(a: cutile.Tensor, b: cutile.Tensor, out: cutile.Tensor, residual: cutile.Tensor | None = None) -> Any:
    return _matmul._prepare(a, b, out=out, bias=None, activation="gelu" if residual is not None else None,
                            residual=residual, alpha=1.0, scale_a=None, scale_b=None, out_dtype=None,
                            accumulate_dtype=f32, allow_tf32=False, config=None)


def _specialization(call: Any) -> Any:
    arguments, constants = _matmul._kernel_arguments(call)
    kernel = call.plan.kernel
    bound = kernel._python_signature.bind_partial(*arguments, **constants)
    spec, _ = describe_call(kernel, dict(bound.arguments), None)
    return kernel, spec, arguments, constants


@pytest.mark.parametrize("dtype", [f16, bf16, f32])
def test_a_staged_call_compiles_the_aligned_specialization_of_its_padded_views(dtype: Any) -> None:
    m, n, k = 130, 45, 29  # 130 rows: the tiled path; rows of 45 and 29 elements: off 16 bytes for each dtype
    per_row = 16 // dtype.itemsize
    padded_n, padded_k = -(-n // per_row) * per_row, -(-k // per_row) * per_row
    a, b = api.zeros([m, k], dtype=dtype), api.zeros([k, n], dtype=dtype)
    out, residual = api.zeros([m, n], dtype=dtype), api.zeros([m, n], dtype=dtype)
    staged = _call(a, b, out, residual)
    assert staged.staged is not None and staged.plan.path == "tiled"
    # The same call a user would make over views of padded buffers (aligned: not staged).
    views = (api.zeros([m, padded_k], dtype=dtype)[:, :k], api.zeros([k, padded_n], dtype=dtype)[:, :n],
             api.zeros([m, padded_n], dtype=dtype)[:, :n], api.zeros([m, padded_n], dtype=dtype)[:, :n])
    aligned = _call(*views)
    assert aligned.staged is None
    kernel, spec, arguments, constants = _specialization(staged.staged.inner)
    aligned_kernel, aligned_spec, _, _ = _specialization(aligned)
    assert kernel is aligned_kernel and spec == aligned_spec
    for name, tensor in spec.tensors:
        if name in ("out", "a", "b", "residual"):
            assert tensor.base_divisibility == 16 and tensor.unit_inner_stride
            assert all(fact * dtype.itemsize >= 16 for fact in tensor.stride_divisibility[:-1]), name
    # As given, the call's a would have been specialized on its 2-byte (f32: 4-byte) row stride.
    assert a.spec().stride_divisibility[0] * dtype.itemsize < 16
    compiled = cutile.compile(kernel, *arguments, arch="sm_90", **constants)
    assert compiled.cubin
    assert compiled.mlir.count("assume div_by<16>") >= 8  # the four tensors' base and row stride


@pytest.mark.parametrize("arch", ["sm_90", "sm_100"])
@pytest.mark.parametrize("dtype", [f16, bf16, f32, f8e4m3fn])
@pytest.mark.parametrize("rank", [2, 3])
def test_the_staging_copies_compile(dtype: Any, rank: int, arch: str) -> None:
    shape = (8191, 8191) if rank == 2 else (3, 37, 45)
    source = api.meta(list(shape), dtype=dtype)
    target = api.meta(list(shape), dtype=dtype).partition(_staging.copy_tile(shape))
    compiled = cutile.compile(_staging.copy_kernel(dtype, rank), target, source, arch=arch)
    assert compiled.cubin and "occupancy = 2" in compiled.mlir


def test_a_staged_call_compiles_through_the_tuning_precompile_hook() -> None:
    a, b, out = api.zeros([130, 29], dtype=f16), api.zeros([29, 45], dtype=f16), api.zeros([130, 45], dtype=f16)
    call = _matmul._prepare(a, b, out=out, bias=None, activation=None, residual=None, alpha=1.0, scale_a=None,
                            scale_b=None, out_dtype=None, accumulate_dtype=f32, allow_tf32=False,
                            config={"tile_m": 64, "tile_n": 64, "tile_k": 32})
    assert call.staged is not None and len(call.staged.copies_in) == 2 and call.staged.copy_out is not None
    _matmul._compile_call(call, "sm_90")  # the copies and the inner GEMM: no error
    np.testing.assert_array_equal(out.to_numpy(), 0)  # compiled, not run
