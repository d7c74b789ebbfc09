"""A transformer's row functions fused into the matmul that reads their output:
`rms_norm_matmul` (``rms_norm(x, norm_weight, eps) @ b``) and `silu_mul_matmul`
(``(silu(gate) * up) @ b``), each with matmul's epilogue.

At most 16 rows (decode) they are one GEMV launch (`_gemv`, with a prologue): each
block computes the left operand as it loads its tiles of x (rms_norm: after a first
pass over its rows for their mean square; x is at most 16 rows, read from L2), in
float32, rounded to x's dtype before the product, the numbers the row function would
have stored. With more rows (prefill) they run the row function into a new tensor,
then `matmul`: two launches, the same numbers.

The left operand and the weight have one dtype (f16, bf16, f32); ``b`` is ``[K, N]``,
a linear layer's ``[N, K]`` weight passed as ``w.T`` read as it is stored.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import cutile
from cutile import api
from cutile.core import bf16, f16, f32

from cutile_kernels import _gemv, _rows
from cutile_kernels._activations import silu_mul
from cutile_kernels._epilogue import check_epilogue
from cutile_kernels._matmul import matmul
from cutile_kernels._norms import rms_norm
from cutile_kernels._operands import Operand, as_tensor, check_no_overlap, dtype_named, tensor_of
from cutile_kernels._rows import Plan

__all__ = ["rms_norm_matmul", "silu_mul_matmul"]

FLOAT_DTYPES = (f16, bf16, f32)


def _float(tensor: cutile.Tensor, function: str, name: str) -> None:
    if tensor.dtype not in FLOAT_DTYPES:
        raise cutile.ArgumentTypeError(f"{function}: {name} has dtype {tensor.dtype}; expected f16, bf16 or f32")


def _rows_of(tensor: cutile.Tensor, function: str, name: str) -> tuple[int, int]:
    if tensor.ndim != 2:
        raise cutile.ArgumentError(f"{function}: {name} must be 2-D [rows, K], got shape {list(tensor.shape)}")
    _float(tensor, function, name)
    return int(tensor.shape[0]), int(tensor.shape[1])


def _output(function: str, left: Operand, name: str, k: int, b: cutile.Tensor, out: Any, out_dtype: Any,
            reads: Mapping[str, cutile.Tensor | None]) -> tuple[cutile.Tensor, Any]:
    """(the tensor the kernels write, what the call returns): b checked against the left
    operand (``name``, of K columns), then the caller's ``out=`` (checked against
    ``out_dtype`` and the prologue's operands, which the GEMV's checks do not see) or a
    new tensor of the left operand's kind."""
    if b.ndim != 2 or int(b.shape[0]) != k:
        raise cutile.ArgumentError(f"{function}: b must be [{k}, N] ({name} has {k} columns), got shape "
                                   f"{list(b.shape)}")
    if b.dtype != left.tensor.dtype:
        raise cutile.ArgumentTypeError(f"{function}: b has dtype {b.dtype} and {name} {left.tensor.dtype}; they "
                                       "must have one dtype")
    rows, n = int(left.tensor.shape[0]), int(b.shape[1])
    dtype = None if out_dtype is None else dtype_named(out_dtype, function, "out_dtype")
    if out is None:
        dtype = dtype or left.tensor.dtype
        if dtype not in FLOAT_DTYPES:
            raise cutile.ArgumentTypeError(f"{function}: out_dtype={dtype}; the output is f16, bf16 or f32")
        made, handed = left.empty_like_kind((rows, n), dtype)
        return made, left.result(made, handed)
    tensor = tensor_of(out, function, "out")
    if tuple(tensor.shape) != (rows, n):
        raise cutile.ArgumentError(f"{function}: out must have shape {[rows, n]}, got {list(tensor.shape)}")
    if dtype is not None and tensor.dtype != dtype:
        raise cutile.ArgumentTypeError(f"{function}: out has dtype {tensor.dtype}, out_dtype is {dtype}")
    check_no_overlap(function, tensor, reads)
    return tensor, out


def _config(config: Mapping[str, Any] | None, rows: int, k: int, b: cutile.Tensor) -> Mapping[str, Any]:
    """The GEMV's config: the caller's (over the defaults), else the record's winner for
    the plain GEMV of this shape and layout (the prologue adds float32 work on a's
    tiles, not bytes)."""
    if config is not None:
        return config
    weight_nk = b.strides[0] == 1 and b.strides[1] != 1
    return _gemv.chosen(rows, int(b.shape[1]), k, b.dtype, weight_nk=weight_nk)


def _two_launches(function: str, config: Any, rows: int, n: int, bias: cutile.Tensor | None, activation: Any,
                  residual: cutile.Tensor | None, alpha: Any) -> None:
    """The checks of a call of more than 16 rows (the row function, then matmul), named
    for ``function``."""
    if config is not None:
        raise cutile.ArgumentError(f"{function}: config= is the GEMV's (at most {_gemv.MAX_M} rows); this call has "
                                   f"{rows} rows, which run the row function, then matmul")
    check_epilogue(function, (rows, n), bias=bias, activation=activation, residual=residual, alpha=alpha)


def _plan_rms_norm_matmul(x: Any, norm_weight: Any, b: Any, eps: float = 1e-6, *, out: Any = None,
                          bias: Any = None, activation: str | None = None, residual: Any = None, alpha: float = 1.0,
                          out_dtype: Any = None, config: Mapping[str, Any] | None = None) -> Plan:
    """``act(alpha * (rms_norm(x, norm_weight, eps) @ b) + bias) + residual``: the
    RMSNorm of x's rows as the matmul's left operand.

    At most 16 rows: one GEMV launch that normalizes x as it loads it (x's rows' mean
    square in float32, ``x * rsqrt(mean + eps) * norm_weight`` rounded to x's dtype: what
    `rms_norm` would store, up to the float32 order of the mean square's sum). More rows:
    `rms_norm` into a new tensor, then `matmul` (two launches).

    Args:
        x: [M, K], f16, bf16 or f32 (any strides).
        norm_weight: [K], f16, bf16 or f32.
        b: [K, N], x's dtype: a linear layer's [N, K] weight as ``w.T`` (read as stored).
        eps: added to the mean square (finite, >= 0).
        out: [M, N] (not the memory of any input); None: a new tensor of x's kind.
        bias: [N] or None. activation: None, "relu", "gelu" (tanh approximation),
            "silu". residual: [M, N] or None (not out's memory). alpha: the product's scale.
        out_dtype: f16, bf16 or f32 (default: out's dtype, else x's).
        config: the GEMV's config (`_gemv.small_m_matmul`'s keys), at most 16 rows only;
            default: the GEMV record's winner for the shape, else its default.
    Returns:
        out, or the new result.
    Raises:
        ArgumentError, ArgumentTypeError: a malformed argument, named.
    """
    function = "rms_norm_matmul"
    left = as_tensor(x, function, "x")
    tx = left.tensor
    rows, k = _rows_of(tx, function, "x")
    tw = tensor_of(norm_weight, function, "norm_weight")
    if tuple(tw.shape) != (k,):
        raise cutile.ArgumentError(f"{function}: norm_weight must have shape [{k}] (x's K), got {list(tw.shape)}")
    _float(tw, function, "norm_weight")
    eps = _rows.check_eps(eps, function)
    tb = tensor_of(b, function, "b")
    target, result = _output(function, left, "x", k, tb, out, out_dtype, {"x": tx, "norm_weight": tw})
    bias_t = None if bias is None else tensor_of(bias, function, "bias")
    residual_t = None if residual is None else tensor_of(residual, function, "residual")
    if rows <= _gemv.MAX_M:
        work = _gemv.prologue_matmul(function, tx, tb, target, _gemv.Prologue("rms_norm", tw, eps), bias=bias_t,
                                     activation=activation, residual=residual_t, alpha=alpha,
                                     config=_config(config, rows, k, tb))
        return Plan(work, lambda: result)
    _two_launches(function, config, rows, int(tb.shape[1]), bias_t, activation, residual_t, alpha)
    normed = api.empty([rows, k], dtype=tx.dtype)
    first = rms_norm.launch(tx, tw, eps, out=normed)
    return Plan(first.then(lambda _: matmul.launch(normed, tb, out=target, bias=bias_t, activation=activation,
                                                   residual=residual_t, alpha=alpha)), lambda: result)


def _plan_silu_mul_matmul(gate_up: Any, b: Any, *, out: Any = None, bias: Any = None,
                          activation: str | None = None, residual: Any = None, alpha: float = 1.0,
                          out_dtype: Any = None, config: Mapping[str, Any] | None = None) -> Plan:
    """``act(alpha * ((silu(gate) * up) @ b) + bias) + residual``: SwiGLU's gated
    activation as the matmul's left operand (an MLP's down projection).

    At most 16 rows: one GEMV launch computing ``gate / (1 + exp(-gate)) * up`` in
    float32 as it loads them, rounded to their dtype (what `silu_mul` would store).
    More rows: `silu_mul` into a new tensor, then `matmul` (two launches).

    Args:
        gate_up: [M, 2I], gate the first I columns and up the last I (a stacked gate
            and up projection's output, read in place), or a pair ``(gate, up)`` of
            [M, I] tensors; f16, bf16 or f32, one dtype (any strides).
        b: [I, N], their dtype: a linear layer's [N, I] weight as ``w.T``.
        out, bias, activation, residual, alpha, out_dtype, config: as `rms_norm_matmul`'s.
    Returns:
        out, or the new result.
    Raises:
        ArgumentError, ArgumentTypeError: a malformed argument, named.
    """
    function = "silu_mul_matmul"
    if isinstance(gate_up, (tuple, list)):
        if len(gate_up) != 2:
            raise cutile.ArgumentError(f"{function}: gate_up must be one [M, 2I] tensor or a pair (gate, up), got "
                                       f"a sequence of {len(gate_up)}")
        left = as_tensor(gate_up[0], function, "gate")
        gate, up = left.tensor, tensor_of(gate_up[1], function, "up")
        rows, inner = _rows_of(gate, function, "gate")
        _rows_of(up, function, "up")
        if up.shape != gate.shape:
            raise cutile.ArgumentError(f"{function}: gate and up must have one shape, got {list(gate.shape)} and "
                                       f"{list(up.shape)}")
        if up.dtype != gate.dtype:
            raise cutile.ArgumentTypeError(f"{function}: gate and up must have one dtype, got {gate.dtype} and "
                                           f"{up.dtype}")
        reads = {"gate": gate, "up": up}
    else:
        left = as_tensor(gate_up, function, "gate_up")
        both = left.tensor
        rows, width = _rows_of(both, function, "gate_up")
        if width % 2:
            raise cutile.ArgumentError(f"{function}: gate_up must have an even number of columns (gate, then up), "
                                       f"got shape {list(both.shape)}")
        inner = width // 2
        gate, up = both[:, :inner], both[:, inner:]
        reads = {"gate_up": both}
    tb = tensor_of(b, function, "b")
    target, result = _output(function, left, "gate" if isinstance(gate_up, (tuple, list)) else "gate_up",
                             inner, tb, out, out_dtype, reads)
    bias_t = None if bias is None else tensor_of(bias, function, "bias")
    residual_t = None if residual is None else tensor_of(residual, function, "residual")
    if rows <= _gemv.MAX_M:
        work = _gemv.prologue_matmul(function, gate, tb, target, _gemv.Prologue("silu_mul", up), bias=bias_t,
                                     activation=activation, residual=residual_t, alpha=alpha,
                                     config=_config(config, rows, inner, tb))
        return Plan(work, lambda: result)
    _two_launches(function, config, rows, int(tb.shape[1]), bias_t, activation, residual_t, alpha)
    act = api.empty([rows, inner], dtype=gate.dtype)
    first = silu_mul.launch(gate, up, out=act).op
    return Plan(first.then(lambda _: matmul.launch(act, tb, out=target, bias=bias_t, activation=activation,
                                                   residual=residual_t, alpha=alpha)), lambda: result)


rms_norm_matmul = _rows.row_function(_plan_rms_norm_matmul)
silu_mul_matmul = _rows.row_function(_plan_silu_mul_matmul)
