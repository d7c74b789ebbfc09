"""Each GEMM kernel variant compiles for sm_90 and sm_100 (tileiras, no GPU), with its
config's hints in the bytecode."""

from __future__ import annotations

from typing import Any

import pytest

import cutile
from cutile import api
from cutile.core import bf16, f16, f32, f8e4m3fn, f8e5m2

from cutile_kernels._gemm import Variant, gemm_kernel

VARIANTS = {
    "f16": Variant(2, f16, f16, f32, False, 0, None, None, False),
    "bf16_bias_gelu_residual": Variant(2, bf16, bf16, f32, False, 2, f32, bf16, False),
    "f32_exact_silu": Variant(2, f32, f32, f32, False, 3, None, None, False),
    "f32_tf32": Variant(2, f32, f32, f32, True, 0, f32, None, False),
    "e4m3_scales_relu": Variant(2, f8e4m3fn, bf16, f32, False, 1, bf16, None, True),
    "e5m2_f16_acc": Variant(2, f8e5m2, f16, f16, False, 0, None, None, False),
    "batched_f16_bias_residual": Variant(3, f16, f16, f32, False, 2, f16, f16, False),
    "bf16_weight_transposed": Variant(2, bf16, bf16, f32, False, 0, None, None, False, b_transposed=True),
    "batched_f16_both_transposed": Variant(3, f16, f16, f32, False, 0, None, None, False, True, True),
}


def _arguments(v: Variant, m: int = 512, n: int = 512, k: int = 256, tm: int = 128, tn: int = 128) -> list[Any]:
    a_shape, b_shape = ([k, m] if v.a_transposed else [m, k]), ([n, k] if v.b_transposed else [k, n])
    if v.rank == 2:
        z = api.meta([m, n], dtype=v.out_dtype).partition([tm, tn]).map([8, 1], blocks=132)
        a, b, res = api.meta(a_shape, dtype=v.in_dtype), api.meta(b_shape, dtype=v.in_dtype), [m, n]
    else:
        z = api.meta([4, m, n], dtype=v.out_dtype).partition([1, tm, tn]).map([1, 8, 1], blocks=132)
        a, b, res = api.meta([4, *a_shape], dtype=v.in_dtype), api.meta([4, *b_shape], dtype=v.in_dtype), [4, m, n]
    ones = [1] * v.rank

    def operand(dtype: Any, shape: list[int]) -> Any:  # a's stand-in where the variant has none
        return a if dtype is None else api.meta(shape, dtype=dtype)

    scale = f32 if v.scale_tensors else None
    return [z, a, b, operand(v.bias_dtype, ones[:-1] + [n]), operand(v.residual_dtype, res), operand(scale, ones),
            operand(scale, ones), 1.0]


@pytest.mark.parametrize("arch", ["sm_90", "sm_100"])
@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_variant_compiles(name: str, arch: str) -> None:
    variant = VARIANTS[name]
    compiled = cutile.compile(gemm_kernel(variant, 8, 1), *_arguments(variant), BK=64, K=256, arch=arch)
    assert compiled.cubin
    if arch == "sm_90":
        assert "num_worker_warps_per_cta = 8" in compiled.mlir
    assert "occupancy = 1" in compiled.mlir
