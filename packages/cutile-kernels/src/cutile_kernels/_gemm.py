# mypy: disable-error-code="misc, valid-type"
# (the kernels' dtypes are the factory's closure variables, which the cutile mypy plugin, reading
# dtypes by name, cannot resolve; the compiler checks every annotation when a kernel is made)
"""The tiled GEMM kernels: a persistent grouped schedule on a mapped partition, with
the epilogue fused (safe kernels: no ``unsafe``).

`gemm_kernel(variant, num_worker_warps, occupancy)` makes (once, then from its cache)
the `cutile.Kernel` of one variant, with that config's hints in its
``cutile.entry(hints=...)``. The variant fixes what the code depends on: rank (2: one
GEMM; 3: batched, the batch on the output's first axis), dtypes, accumulator, tf32,
activation, and which epilogue operands exist. Tile shapes and the group size reach
the kernel through its launch (the output's partition tile and map shape; ``BK`` and
``K`` as constants), so one kernel object serves every tile shape of a config's hints.
An operand whose rows are contiguous (a transposed view: a weight stored ``[N, K]``
read as ``w.T``) is passed as its transpose, contiguous again, and its tiles are
transposed in registers (``a_transposed``, ``b_transposed``); other strides are read
through the view as they are.

The launch passes every parameter, each of the kernel's rank (a bias ``[N]`` as a
``[1, N]`` view, a scale as ``[1, 1]``); an operand the call lacks (bias, residual,
scale tensors) is given ``a`` itself as a stand-in the code never reads (the variant
compiles its branch out), so a variant has one signature and a call makes no view for
what it lacks.

Tails need no code: tile loads pad past a tensor's end with zeros (so a K tail adds
nothing) and stores mask at its edges.
"""

# (no `from __future__ import annotations`: the kernels' annotations name closure variables)

from dataclasses import dataclass
from typing import Any

import cutile
from cutile.core import Constant, Mut, Tensor, cdiv, f32, mma, tf32, zeros

from cutile_kernels._epilogue import apply_activation


@dataclass(frozen=True)
class Variant:
    """What a GEMM kernel's code depends on (one compiled family per variant)."""

    rank: int  # 2: [M, K] @ [K, N]; 3: [B, M, K] @ [B, K, N]
    in_dtype: Any
    out_dtype: Any
    acc_dtype: Any
    tf32: bool
    activation: int  # _epilogue.ACTIVATIONS code
    bias_dtype: Any  # None: no bias
    residual_dtype: Any  # None: no residual
    scale_tensors: bool  # per-tensor scales read from device memory (fp8)
    a_transposed: bool = False  # a passed as its transpose [K, M], contiguous along M (a column-major a)
    b_transposed: bool = False  # b passed as its transpose [N, K] (a weight stored [N, K], read as w.T)

    def stand_in_dtype(self, dtype: Any) -> Any:
        """The annotation dtype of an operand: its own, or the input's for a stand-in."""
        return self.in_dtype if dtype is None else dtype


_KERNELS: dict[tuple[Variant, int, int], cutile.Kernel[Any, Any]] = {}


def gemm_kernel(variant: Variant, num_worker_warps: int, occupancy: int) -> cutile.Kernel[Any, Any]:
    """The kernel of ``variant`` with these hints (``num_worker_warps`` for sm_90, where
    it decides the speed of large tiles; ``occupancy`` everywhere)."""
    key = (variant, num_worker_warps, occupancy)
    kernel = _KERNELS.get(key)
    if kernel is None:
        hints = {"occupancy": occupancy, "sm_90": {"num_worker_warps": num_worker_warps}}
        make = _make_2d if variant.rank == 2 else _make_3d
        kernel = cutile.entry(hints=hints)(make(variant))
        _KERNELS[key] = kernel
    return kernel


def _make_2d(v: Variant) -> Any:
    in_dt, out_dt, acc_dt, use_tf32, act = v.in_dtype, v.out_dtype, v.acc_dtype, v.tf32, v.activation
    has_bias, has_residual, has_scales = v.bias_dtype is not None, v.residual_dtype is not None, v.scale_tensors
    bias_dt, res_dt = v.stand_in_dtype(v.bias_dtype), v.stand_in_dtype(v.residual_dtype)
    scale_dt = f32 if has_scales else in_dt
    a_t, b_t = v.a_transposed, v.b_transposed

    def matmul_2d(out: Mut[Tensor[out_dt, ["BM", "BN"]]], a: Tensor[in_dt, [-1, -1]], b: Tensor[in_dt, [-1, -1]],
                  bias: Tensor[bias_dt, [-1, -1]], residual: Tensor[res_dt, [-1, -1]],
                  scale_a: Tensor[scale_dt, [-1, -1]], scale_b: Tensor[scale_dt, [-1, -1]], alpha: f32,
                  BM: Constant[int], BN: Constant[int], BK: Constant[int], K: Constant[int]) -> None:
        if a_t:  # a is [K, M]: its tiles are loaded [BK, BM] and transposed in registers
            part_a = a.partition([BK, BM])
        else:
            part_a = a.partition([BM, BK])
        if b_t:  # b is [N, K]
            part_b = b.partition([BN, BK])
        else:
            part_b = b.partition([BK, BN])
        for idx in out.tiles():  # this block's tiles, in the map's grouped order
            bm, bn = idx
            acc = zeros((BM, BN), acc_dt)
            for k in range(cdiv(K, BK)):
                if a_t:
                    ta = part_a.load([k, bm]).T
                else:
                    ta = part_a.load([bm, k])
                if b_t:
                    tb = part_b.load([bn, k]).T
                else:
                    tb = part_b.load([k, bn])
                if use_tf32:
                    ta = ta.astype(tf32)
                    tb = tb.astype(tf32)
                acc = mma(ta, tb, acc)
            tile = acc.astype(f32) * alpha
            if has_scales:
                tile = tile * (scale_a.load(index=(0, 0), shape=(1, 1)) * scale_b.load(index=(0, 0), shape=(1, 1)))
            if has_bias:
                tile = tile + bias.load(index=(0, bn), shape=(1, BN)).astype(f32)
            tile = apply_activation(tile, act)
            if has_residual:
                tile = tile + residual.load(index=idx, shape=(BM, BN)).astype(f32)
            out.store(tile.astype(out_dt), idx)

    return matmul_2d


def _make_3d(v: Variant) -> Any:
    in_dt, out_dt, acc_dt, use_tf32, act = v.in_dtype, v.out_dtype, v.acc_dtype, v.tf32, v.activation
    has_bias, has_residual, has_scales = v.bias_dtype is not None, v.residual_dtype is not None, v.scale_tensors
    bias_dt, res_dt = v.stand_in_dtype(v.bias_dtype), v.stand_in_dtype(v.residual_dtype)
    scale_dt = f32 if has_scales else in_dt
    a_t, b_t = v.a_transposed, v.b_transposed

    def matmul_3d(out: Mut[Tensor[out_dt, [1, "BM", "BN"]]], a: Tensor[in_dt, [-1, -1, -1]],
                  b: Tensor[in_dt, [-1, -1, -1]], bias: Tensor[bias_dt, [-1, -1, -1]],
                  residual: Tensor[res_dt, [-1, -1, -1]], scale_a: Tensor[scale_dt, [-1, -1, -1]],
                  scale_b: Tensor[scale_dt, [-1, -1, -1]], alpha: f32,
                  BM: Constant[int], BN: Constant[int], BK: Constant[int], K: Constant[int]) -> None:
        if a_t:  # a is [B, K, M]
            part_a = a.partition([1, BK, BM])
        else:
            part_a = a.partition([1, BM, BK])
        if b_t:  # b is [B, N, K]
            part_b = b.partition([1, BN, BK])
        else:
            part_b = b.partition([1, BK, BN])
        for idx in out.tiles():  # batch-major, grouped within each batch's output
            i, bm, bn = idx
            acc = zeros((BM, BN), acc_dt)
            for k in range(cdiv(K, BK)):
                if a_t:
                    ta = part_a.load([i, k, bm]).reshape((BK, BM)).T
                else:
                    ta = part_a.load([i, bm, k]).reshape((BM, BK))
                if b_t:
                    tb = part_b.load([i, bn, k]).reshape((BN, BK)).T
                else:
                    tb = part_b.load([i, k, bn]).reshape((BK, BN))
                if use_tf32:
                    ta = ta.astype(tf32)
                    tb = tb.astype(tf32)
                acc = mma(ta, tb, acc)
            tile = acc.astype(f32) * alpha
            if has_scales:
                scale = scale_a.load(index=(0, 0, 0), shape=(1, 1, 1)) * scale_b.load(index=(0, 0, 0), shape=(1, 1, 1))
                tile = tile * scale.reshape((1, 1))
            if has_bias:
                tile = tile + bias.load(index=(0, 0, bn), shape=(1, 1, BN)).reshape((1, BN)).astype(f32)
            tile = apply_activation(tile, act)
            if has_residual:
                tile = tile + residual.load(index=idx, shape=(1, BM, BN)).reshape((BM, BN)).astype(f32)
            out.store(tile.reshape((1, BM, BN)).astype(out_dt), idx)

    return matmul_3d
