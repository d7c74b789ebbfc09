"""``cutile_kernels.matmul``: GEMM with a fused epilogue on any tensor kind.

A call goes through three steps, the last two cached:

1. Operands: each tensor argument becomes a cutile tensor over the same memory
   (`_operands.as_tensor`); shapes, dtypes, the epilogue and ``out=`` are checked
   (every error names its parameter).
2. The plan, per call signature (shapes, strides, dtypes, epilogue, options): the
   path (`_choose_path`), the kernel (`_gemm.gemm_kernel`, cached per variant and
   hints), the config (`_configs.choose`: the record's winner or a default) and the
   launch's tile, map and block count. A signature seen before costs one dict lookup:
   the record is not asked again.
3. The launch: the output (a fresh view of it, so the caller's object is never
   consumed) partitioned and mapped by the plan, the kernel called. `matmul` waits
   for it and returns the output; `matmul.launch` returns the pending `cutile.Launch`.

A call with ``out=`` of 2-D cutile tensors whose layouts and memory an earlier call had
(a model's layers: a new weight view each, activations in kept buffers) takes that
call's plan by them (`_KEPT_CALLS`: the memory is in the key, as the
overlap checks depend on it) and checks only what can change: alpha, and that no
operand read through a cached view was consumed.

A call whose a, b, residual or out the kernels cannot read (or write) at speed, as the
compiler's layout facts show (`_staging`: a row stride or base address off 16 bytes,
a non-unit innermost stride), is staged: those operands are copied into aligned
temporaries of their shape, the call's kernels run on them as an ordinary aligned call
(`_Staged.inner`, planned by its own signature), and an output temporary is copied into
the caller's out; the copies and the GEMM are one op, chained by ``then``, which owns
what it uses of the caller's memory from the call (`_launch_staged`). The temporaries
are kept per caller's tensor and operand (`_staging.temporary`).
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass
from functools import partial
from collections.abc import Callable
from typing import Any, NamedTuple

import cutile
from cutile.core import bf16, f16, f32

from cutile_kernels import _configs, _gemv, _splitk, _splitk_tuning, _staging
from cutile_kernels._epilogue import Epilogue, check_epilogue
from cutile_kernels._gemm import Variant, gemm_kernel
from cutile_kernels._operands import FP8, Operand, as_tensor, check_no_overlap, dtype_named, tensor_of
from cutile_kernels._operands import KeptPlans, derived, memory_layout, private_view, require_live

OUT_DTYPES = (f16, bf16, f32)


#: a GEMM whose tiled schedule would give fewer 128x128 output tiles than this, with a
#: K this long or longer, is split along K (`_splitk`): too few blocks to fill the GPU
SPLIT_K_MAX_TILES = 66  # half the H200's SMs
SPLIT_K_MIN_K = 2048


def _choose_path(rows: int, n: int, k: int, rank: int, in_dtype: Any, acc: Any, scale_tensors: bool,
                 config: dict[str, Any] | None, *, weight_nk: bool = False, compare_records: bool = True) -> str:
    """Which kernel family computes the GEMM: ``"gemv"`` (`_gemv.small_m_matmul`: at
    most 16 rows, the weight streamed once), ``"split_k"`` (`_splitk.split_k_matmul`:
    few output tiles, a long K) or ``"tiled"`` (the persistent grouped GEMM of `_gemm`).
    The first two take one 2-D GEMM of f16, bf16 or f32 accumulated in f32 with scales
    folded into alpha; a ``config`` (the tiled GEMM's keys, as a tuning search passes)
    picks the tiled kernel. Where the tiled and the split-K records both hold the
    shape's bucket (``compare_records``), the family whose winner measured faster
    computes it (1024^3: split-K's one-pass kernel with 128x64 tiles); elsewhere the
    shape decides."""
    if config is not None or rank != 2 or in_dtype in FP8 or scale_tensors or acc != f32:
        return "tiled"
    if rows <= _gemv.MAX_M:
        return "gemv"
    if compare_records:
        faster = _faster_recorded(rows, n, k, in_dtype, weight_nk)
        if faster is not None:
            return faster
    if -(-rows // 128) * -(-n // 128) < SPLIT_K_MAX_TILES and k >= SPLIT_K_MIN_K:
        return "split_k"
    return "tiled"


def _faster_recorded(rows: int, n: int, k: int, in_dtype: Any, weight_nk: bool) -> str | None:
    """``"split_k"`` or ``"tiled"``: the family whose record's winner for the shape's
    bucket measured faster, when both records hold one (None otherwise)."""
    tiled = _configs.recorded(in_dtype, rows, n, k)
    split = _splitk_tuning.recorded(rows, n, k, in_dtype, weight_nk=weight_nk) if tiled is not None else None
    if tiled is None or split is None:
        return None
    return "split_k" if split.median_ms < tiled.median_ms else "tiled"


@dataclass(frozen=True)
class _Plan:
    """What a call signature launches (see the module docstring)."""

    # "tiled", "gemv", "split_k" (`_choose_path`); the fields below but config are the tiled one's. "staged": a
    # signature whose strides stage it: no kernel, only fold_batch (its calls launch their inner call's plan)
    path: str
    kernel: cutile.Kernel[Any, Any] | None
    config: dict[str, Any]
    tile: tuple[int, ...]
    map_shape: tuple[int, ...]
    blocks: int
    fold_batch: bool  # a batched call with b shared by every batch and folded to one GEMM
    a_transposed: bool  # a's rows are contiguous: passed as its transpose (`_gemm.Variant`)
    b_transposed: bool


_PLAN_LIMIT = 4096  # call signatures kept (then forgotten all at once)


@dataclass
class _Call:
    """One call's checked operands (cutile tensors in the kernel's rank) and its plan."""

    plan: _Plan | None  # None: an empty output, nothing to launch
    a: cutile.Tensor
    b: cutile.Tensor
    out: cutile.Tensor
    out_handed: Any
    result_kind: Operand | None  # None: out_handed is the result as it is (the caller's out=)
    epilogue: Epilogue
    scales: tuple[cutile.Tensor, cutile.Tensor] | None
    alpha: float
    positional: tuple[Any, ...] | None = None  # the tiled kernel's arguments, made on the first launch
    # the GEMV path's (kernel, arguments, constants) per launch, made on the first launch
    gemv_launches: tuple[tuple[Any, tuple[Any, ...], dict[str, int]], ...] | None = None
    gemv_kept: _GemvKept | None = None  # what a call in the same layouts keeps of it (`_KEPT_CALLS`)
    # the split-K path's (kernel, arguments, constants) per launch, made on the first launch
    split_k_launches: tuple[tuple[Any, tuple[Any, ...], dict[str, int]], ...] | None = None
    staged: _Staged | None = None  # the call through aligned temporaries; a, b, out above are the caller's


@dataclass(frozen=True)
class _Staged:
    """A staged call (see the module docstring): the copies into the temporaries, the
    call on them, the copy of its output into the caller's out. The temporaries are the
    caller's tensors' (per operand: every call staging one tensor in one role writes
    the same temporary); a launch meeting them held by another pending one takes
    ``unkept(call)``'s, made for it alone. The copies and the inner call reach the caller's
    memory only through views made here (`_private`), so a caller's object consumed
    after the call does not fail the op when it runs."""

    inner: _Call  # the call on the temporaries (and the operands that needed none): never staged itself
    # (operand, source, temporary) views, as the kernels read them
    copies_in: tuple[tuple[str, cutile.Tensor, cutile.Tensor], ...]
    copy_out: tuple[cutile.Tensor, cutile.Tensor] | None  # (output temporary, a view of the caller's out)
    originals: tuple[tuple[str, cutile.Tensor], ...]  # the caller's tensors reached through cached views
    reads: tuple[tuple[str, cutile.Tensor], ...]  # every caller's tensor the op reads, held as read at the call
    out: cutile.Tensor  # the caller's out (or its 2-D view), held as written at the call
    unkept: Callable[[_Call], _Staged]  # the same call on temporaries of its own (the call: no reference cycle)

    def temporaries(self) -> tuple[tuple[str, cutile.Tensor], ...]:
        """(operand, temporary) of every temporary the op writes."""
        written = [(f"staged {role}", target) for role, _, target in self.copies_in]
        return tuple(written + ([("staged out", self.copy_out[0])] if self.copy_out is not None else []))


class _GemvKept(NamedTuple):
    """What a checked GEMV-path call with ``out=`` of 2-D cutile tensors launches, from
    its operands' layouts alone: the problem's sizes, the weight's layout, the
    activation's code and the merged config."""

    m: int
    n: int
    k: int
    weight_nk: bool
    activation: int
    config: dict[str, Any]


# (the operands' layouts and memory, activation, dtypes, allow_tf32) -> a GEMV-path call's
# plan: a call of new objects in known layouts (a model's layers, each a weight's new .T view)
# skips the signature lookup and the checks (the memory is in the key: the overlap checks
# depend on it); nothing memory holds is kept
# The same for the tiled path (a prefill's layers: each a new weight, its activations in
# buffers kept across layers and calls) is the call's `_Plan` alone: one table holds both.
_KEPT_CALLS: KeptPlans[_GemvKept | _Plan] = KeptPlans(_PLAN_LIMIT)


def _tensor_key(t: Any) -> tuple[Any, ...] | None:
    return memory_layout(t) if type(t) is cutile.Tensor and t.ndim == 2 else None


def _gemv_key(a: Any, b: Any, out: Any, bias: Any, residual: Any, activation: Any, out_dtype: Any,
              accumulate_dtype: Any, allow_tf32: Any) -> tuple[Any, ...] | None:
    """The key of `_KEPT_CALLS` for a call of 2-D cutile tensors (bias 1-D) with out=,
    or None."""
    if type(activation) not in (str, type(None)) or type(allow_tf32) is not bool:
        return None
    layouts = (_tensor_key(a), _tensor_key(b), _tensor_key(out),
               None if residual is None else _tensor_key(residual))
    if None in layouts[:3] or (residual is not None and layouts[3] is None):
        return None
    if bias is None:
        bias_key: tuple[Any, ...] | None = None
    elif type(bias) is cutile.Tensor and bias.ndim == 1:
        bias_key = memory_layout(bias)
    else:
        return None
    key = (*layouts, bias_key, activation, out_dtype, accumulate_dtype, allow_tf32)
    try:
        hash(key)
    except TypeError:
        return None
    return key


def _gemv_launch(kept: _GemvKept, a: cutile.Tensor, b: cutile.Tensor, out: cutile.Tensor, bias: Any, residual: Any,
                 alpha: Any) -> Any:
    """The launch (or the partial sums, then their reduction) of a GEMV call in known
    layouts: what can change checked (alpha; b and out not consumed, as their cached
    views would not see it; a and the others the launch checks)."""
    alpha = _checked_alpha(alpha)
    require_live(b, "small_m_matmul", "b")
    require_live(out, "small_m_matmul", "out")
    ops = _splitk.Operands(kept.m, kept.n, kept.k, a, derived(b, "T", lambda: b.T) if kept.weight_nk else b,
                         kept.weight_nk, out, bias if bias is not None else derived(a, "row", lambda: a[0]),
                         residual if residual is not None else a, bias is not None, residual is not None,
                         kept.activation, alpha)
    return _splitk.run(_gemv._launches(ops, kept.config), _splitk.holding("small_m_matmul", a, b, out, bias, residual))


def _tiled_launch(plan: _Plan, a: cutile.Tensor, b: cutile.Tensor, out: cutile.Tensor, bias: Any,
                  residual: Any, alpha: Any) -> Any:
    """The launch of a tiled call in known layouts (`_KEPT_CALLS`) on the arguments
    `_kernel_arguments` makes: what can change checked (alpha; out, bias and a transposed
    a or b not consumed, as their cached views would not see it; the launch checks the
    operands it is given as they are)."""
    alpha_total = _checked_alpha(alpha)
    assert plan.kernel is not None
    require_live(out, "matmul", "out")
    if bias is not None:
        require_live(bias, "matmul", "bias")
    if plan.a_transposed:
        require_live(a, "matmul", "a")
    if plan.b_transposed:
        require_live(b, "matmul", "b")
    epilogue = Epilogue(bias, None, residual, alpha_total)  # (the activation is the plan's kernel's)
    arguments, constants = _kernel_arguments(_Call(plan, a, b, out, out, None, epilogue, None, alpha_total))
    return plan.kernel(*arguments, plan.tile[-2], plan.tile[-1], constants["BK"], constants["K"])




def _scales(scale_a: Any, scale_b: Any) -> tuple[float, tuple[cutile.Tensor, cutile.Tensor] | None]:
    """(the factor folded into alpha, the scale tensors read on the device or None)."""
    for name, s in (("scale_a", scale_a), ("scale_b", scale_b)):
        if isinstance(s, bool):
            raise cutile.ArgumentTypeError(f"matmul: {name} must be a number or a one-element f32 tensor, got {s!r}")
    numbers = [s for s in (scale_a, scale_b) if s is None or (isinstance(s, (int, float)) and not isinstance(s, bool))]
    if len(numbers) == 2:
        factor = 1.0
        for name, s in (("scale_a", scale_a), ("scale_b", scale_b)):
            if s is not None:
                if not math.isfinite(float(s)):
                    raise cutile.ArgumentError(f"matmul: {name} must be finite, got {s!r}")
                factor *= float(s)
        return factor, None
    tensors = []
    for name, s in (("scale_a", scale_a), ("scale_b", scale_b)):
        if s is None or isinstance(s, (int, float)):
            raise cutile.ArgumentError(f"matmul: {name} is a number while the other scale is a tensor; give both "
                                       "scales as one-element f32 tensors, or both as numbers")
        t = as_tensor(s, "matmul", name).tensor
        if t.size != 1 or t.dtype != f32:
            raise cutile.ArgumentError(f"matmul: {name} must be a one-element f32 tensor (a per-tensor scale), "
                                       f"got shape {list(t.shape)} of {t.dtype}")
        tensors.append(t.reshape(1) if t.is_contiguous else t[(0,) * t.ndim].broadcast_to(1))
    return 1.0, (tensors[0], tensors[1])


@dataclass(frozen=True)
class _Signature:
    """What the checks of a call signature settled, and its plan (None: empty output)."""

    out_shape: tuple[int, ...]
    out_dtype: Any
    batched: bool
    batch: int
    plan: _Plan | None
    #: (a, b, residual, out): whose strides make the call stage it (`_staging.strides_aligned`;
    #: base addresses are checked per call, `_stage_of`)
    stage: tuple[bool, bool, bool, bool] = (False, False, False, False)


_SIGNATURES: dict[tuple[Any, ...], _Signature] = {}


def _layout(t: cutile.Tensor | None) -> tuple[Any, ...] | None:
    return None if t is None else (t.shape, t.strides, t.dtype)


def _prepare(a: Any, b: Any, *, out: Any, bias: Any, activation: Any, residual: Any, alpha: Any, scale_a: Any,
             scale_b: Any, out_dtype: Any, accumulate_dtype: Any, allow_tf32: bool, config: Any,
             staging: bool = True) -> _Call:
    """The checked call (``staging`` False: the call a staged one makes on its
    temporaries, which are aligned: never staged again)."""
    a_op = as_tensor(a, "matmul", "a")
    ta, tb = a_op.tensor, tensor_of(b, "matmul", "b")
    bias_t = None if bias is None else tensor_of(bias, "matmul", "bias")
    residual_t = None if residual is None else tensor_of(residual, "matmul", "residual")
    out_op = None if out is None or type(out) is cutile.Tensor else as_tensor(out, "matmul", "out")
    out_t = out if out_op is None else out_op.tensor
    factor, scale_tensors = (1.0, None) if scale_a is None and scale_b is None else _scales(scale_a, scale_b)
    # Everything checked below but the memory (overlaps) and alpha depends only on this key:
    # a signature seen before skips those checks and finds its plan in one lookup.
    try:
        key: tuple[Any, ...] | None = (
            ta.shape, ta.strides, ta.dtype, tb.shape, tb.strides, tb.dtype, _layout(bias_t), _layout(residual_t),
            _layout(out_t), activation, out_dtype, accumulate_dtype, allow_tf32, scale_tensors is not None,
            tuple(sorted(config.items())) if isinstance(config, dict) else config)
        signature = _SIGNATURES.get(key)  # type: ignore[arg-type]
    except TypeError:  # an unhashable argument: checked (and refused) below
        key, signature = None, None
    if signature is None:
        signature = _check_signature(ta, tb, bias_t, residual_t, out_t, activation, out_dtype, accumulate_dtype,
                                     allow_tf32, scale_tensors is not None, config)
        if key is not None:
            if len(_SIGNATURES) >= _PLAN_LIMIT:
                _SIGNATURES.clear()
            _SIGNATURES[key] = signature
    epilogue = check_epilogue("matmul", signature.out_shape, bias=bias_t, activation=activation,
                              residual=residual_t, alpha=alpha) if signature.plan is None or key is None \
        else Epilogue(bias_t, activation, residual_t, _checked_alpha(alpha))
    if out_t is None:
        out_t, out_handed = a_op.empty_like_kind(signature.out_shape, signature.out_dtype)
        result_kind = a_op
    else:
        check_no_overlap("matmul", out_t, {"a": ta, "b": tb, "bias": bias_t, "residual": residual_t,
                                           "scale_a": scale_tensors[0] if scale_tensors else None,
                                           "scale_b": scale_tensors[1] if scale_tensors else None})
        result_kind, out_handed = None, out  # the caller's out= object, given back as it is
    alpha_total = epilogue.alpha * factor
    if not math.isfinite(alpha_total):
        raise cutile.ArgumentError("matmul: alpha * scale_a * scale_b is not finite")
    plan = signature.plan
    if plan is not None:
        # (the inner call of a staged one is on aligned temporaries: its plan is never "staged")
        assert staging or plan.path != "staged", "a staged call's inner call must be aligned"
        stage = _stage_of(signature.stage, ta, tb, residual_t, out_t) if staging else None
        if stage is not None:
            call = _Call(plan, ta, tb, out_t, out_handed, result_kind, epilogue, scale_tensors, alpha_total)
            # Temporaries are kept per caller's cutile tensor, not per import of a foreign one.
            owners = (ta if ta is a else None, tb if tb is b else None,
                      residual_t if residual_t is residual else None, out_t if out_t is out else None)
            call.staged = _staged(call, signature, stage, owners, activation=activation, alpha=alpha,
                                  scale_a=scale_a, scale_b=scale_b, accumulate_dtype=accumulate_dtype,
                                  allow_tf32=allow_tf32, config=config)
            call.plan = call.staged.inner.plan
            return call
        ta, tb, out_t, epilogue = _shaped(plan, signature.batched, signature.batch, ta, tb, out_t, epilogue)
    return _Call(plan, ta, tb, out_t, out_handed, result_kind, epilogue, scale_tensors, alpha_total)


def _stage_of(by_strides: tuple[bool, bool, bool, bool], ta: cutile.Tensor, tb: cutile.Tensor,
              residual: cutile.Tensor | None, out: cutile.Tensor) -> tuple[bool, bool, bool, bool] | None:
    """Which of (a, b, residual, out) a call stages: those whose strides the signature
    found off 16 bytes, and those whose element 0 lies off a 16-byte boundary (the base
    divisibility the compiler would be given); None: nothing to stage."""
    bases = ta.address() | tb.address() | out.address() | (0 if residual is None else residual.address())
    if not bases % _staging.ALIGNMENT and True not in by_strides:
        return None  # (the common case: one test)
    a_s, b_s, residual_s, out_s = by_strides
    stage = (a_s or not _staging.base_aligned(ta), b_s or not _staging.base_aligned(tb),
             residual is not None and (residual_s or not _staging.base_aligned(residual)),
             out_s or not _staging.base_aligned(out))
    return stage if True in stage else None


def _staged(call: _Call, signature: _Signature, stage: tuple[bool, bool, bool, bool],
            owners: tuple[cutile.Tensor | None, ...], *, activation: Any, alpha: Any, scale_a: Any, scale_b: Any,
            accumulate_dtype: Any, allow_tf32: bool, config: Any) -> _Staged:
    """The temporaries, copies and inner call of a checked ``call`` (the caller's
    operands) that stages the operands ``stage`` names. The inner call is an ordinary
    call on them, planned by its own signature, so it launches what an aligned call of
    those layouts launches (a batch the signature folds is staged as its 2-D GEMM of
    batch * m rows, so the temporaries fold alike). The temporaries are kept per
    caller's tensor and role (``owners``: a, b, residual, out; `_staging.temporary`)."""
    plan = signature.plan
    assert plan is not None
    a, b, out, residual = (_private(t, name) for name, t in (("a", call.a), ("b", call.b), ("out", call.out),
                                                             ("residual", call.epilogue.residual)))
    if plan.fold_batch:  # (a, out and residual are dense: their 2-D views share their memory)
        rows = signature.batch * a.shape[-2]
        a = a.reshape(rows, a.shape[-1])
        b = b if b.ndim == 2 else b[0]
        out = out.reshape(rows, out.shape[-1])
        residual = None if residual is None else residual.reshape(rows, residual.shape[-1])
    copies_in: list[tuple[str, cutile.Tensor, cutile.Tensor]] = []

    def input_temporary(role: str, t: cutile.Tensor, owner: cutile.Tensor | None) -> cutile.Tensor:
        made, source, target = _staging.staged(t, owner, role)
        copies_in.append((role, source, target))
        return made

    a = input_temporary("a", a, owners[0]) if stage[0] else a
    b = input_temporary("b", b, owners[1]) if stage[1] else b
    if stage[2]:
        # The kernels read a residual as it is, in out's orientation (never through its
        # transpose, as they read a or b): staged as it is.
        assert residual is not None
        source = residual
        residual = _staging.temporary(owners[2], "residual", source.shape, source.dtype, source)
        copies_in.append(("residual", source, residual))
    inner_out = _staging.temporary(owners[3], "out", out.shape, out.dtype, out) if stage[3] else out
    inner = _prepare(a, b, out=inner_out, bias=_private(call.epilogue.bias, "bias"), activation=activation,
                     residual=residual, alpha=alpha, scale_a=_private(scale_a, "scale_a"),
                     scale_b=_private(scale_b, "scale_b"),
                     out_dtype=signature.out_dtype,
                     accumulate_dtype=accumulate_dtype, allow_tf32=allow_tf32, config=config, staging=False)
    assert inner.plan is not None and inner.staged is None
    _prime(inner)
    originals = tuple((name, t) for name, t in (("a", call.a), ("b", call.b), ("residual", call.epilogue.residual),
                                                ("out", call.out)) if t is not None)
    # What the op uses of the caller's memory, held from the call (`cutile.hold`) by the
    # operand's name: every input, and out.
    reads = [(name, t) for name, t in (("a", call.a), ("b", call.b), ("residual", call.epilogue.residual),
                                       ("bias", call.epilogue.bias)) if t is not None]
    if call.scales is not None:
        reads += [("scale_a", call.scales[0]), ("scale_b", call.scales[1])]

    unkept = partial(_staged, signature=signature, stage=stage, owners=(None,) * len(owners), activation=activation,
                     alpha=alpha, scale_a=scale_a, scale_b=scale_b, accumulate_dtype=accumulate_dtype,
                     allow_tf32=allow_tf32, config=config)
    return _Staged(inner, tuple(copies_in), (inner_out, out) if stage[3] else None, originals, tuple(reads), out,
                   unkept)


def _private(t: Any, name: str) -> Any:
    """`private_view` of the caller's ``t`` (checked live first: a consumed tensor is
    refused naming its parameter): what a staged op's launches, made as it runs, are
    given in place of the caller's object."""
    if type(t) is cutile.Tensor:
        require_live(t, "matmul", name)
    return private_view(t)


def forget_plans() -> None:
    """Drops every cached plan and the remembered last call (the records changed: the
    next call of each signature asks for its config again)."""
    _SIGNATURES.clear()
    _KEPT_CALLS.clear()
    matmul._last = None


def _checked_alpha(alpha: Any) -> float:
    if isinstance(alpha, float) and math.isfinite(alpha):
        return alpha
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)):
        raise cutile.ArgumentTypeError(f"matmul: alpha must be a number, got {type(alpha).__name__}")
    if not math.isfinite(float(alpha)):
        raise cutile.ArgumentError(f"matmul: alpha must be finite, got {alpha!r}")
    return float(alpha)


def _check_signature(ta: cutile.Tensor, tb: cutile.Tensor, bias_t: cutile.Tensor | None,
                     residual_t: cutile.Tensor | None, out_t: cutile.Tensor | None, activation: Any, out_dtype: Any,
                     accumulate_dtype: Any, allow_tf32: Any, scale_tensors: bool, config: Any) -> _Signature:
    """The checks of a call signature (each error names its parameter), and its plan."""
    for name, t in (("a", ta), ("b", tb)):
        if t.ndim not in (2, 3):
            raise cutile.ArgumentError(f"matmul: {name} must be a matrix [rows, cols] or a batch of them "
                                       f"[batch, rows, cols], got shape {list(t.shape)}")
    if ta.dtype not in (f16, bf16, f32, *FP8):
        raise cutile.ArgumentTypeError(f"matmul: a has dtype {ta.dtype}; matmul takes f16, bf16, f32, f8e4m3fn, f8e5m2")
    if tb.dtype != ta.dtype:
        raise cutile.ArgumentTypeError(f"matmul: b has dtype {tb.dtype} and a {ta.dtype}; both operands must have "
                                       "one dtype")
    m, k = ta.shape[-2:]
    k_b, n = tb.shape[-2:]
    if k_b != k:
        raise cutile.ArgumentError(f"matmul: b has {k_b} rows but a has {k} columns ({list(ta.shape)} @ "
                                   f"{list(tb.shape)})")
    batch_a = ta.shape[0] if ta.ndim == 3 else 1
    batch_b = tb.shape[0] if tb.ndim == 3 else 1
    if batch_a != batch_b and 1 not in (batch_a, batch_b):
        raise cutile.ArgumentError(f"matmul: the batch sizes of a ({batch_a}) and b ({batch_b}) differ and neither "
                                   "is 1 (broadcast)")
    batched = ta.ndim == 3 or tb.ndim == 3
    batch = max(batch_a, batch_b)
    out_shape = (batch, m, n) if batched else (m, n)
    in_dtype = ta.dtype
    if out_t is not None and out_t.shape != out_shape:
        raise cutile.ArgumentError(f"matmul: out has shape {list(out_t.shape)}, the product is {list(out_shape)}")
    if out_dtype is None:
        chosen_out = out_t.dtype if out_t is not None else (bf16 if in_dtype in FP8 else in_dtype)
    else:
        chosen_out = dtype_named(out_dtype, "matmul", "out_dtype")
    if chosen_out not in OUT_DTYPES:
        what = f"out has dtype {chosen_out}" if out_dtype is None else f"out_dtype={chosen_out}"
        raise cutile.ArgumentTypeError(f"matmul: {what}; the output is f16, bf16 or f32")
    if out_t is not None and out_t.dtype != chosen_out:
        raise cutile.ArgumentTypeError(f"matmul: out has dtype {out_t.dtype}, out_dtype is {chosen_out}")
    acc = dtype_named(accumulate_dtype, "matmul", "accumulate_dtype")
    if acc not in (f32, f16) or (acc == f16 and in_dtype not in (f16, *FP8)):
        raise cutile.ArgumentTypeError(f"matmul: accumulate_dtype={acc} with {in_dtype} inputs; f32 always, "
                                       "f16 only for f16 and fp8 inputs")
    if not isinstance(allow_tf32, bool):
        raise cutile.ArgumentTypeError(f"matmul: allow_tf32 must be a bool, got {type(allow_tf32).__name__}")
    if config is not None:
        _configs.check_config(config, "matmul")
    # alpha does not reach the kernel's code: any valid one checks the rest of the epilogue
    epilogue = check_epilogue("matmul", out_shape, bias=bias_t, activation=activation, residual=residual_t, alpha=1.0)
    if 0 in out_shape:
        return _Signature(out_shape, chosen_out, batched, batch, None)
    out_dense = out_t is None or out_t.is_contiguous  # (the output a call allocates is dense)
    # Inputs as the kernels read them (a transposed one through its transpose); out and
    # residual as they are; the output a call allocates is dense.
    stage = (not _staging.strides_aligned(_staging.reading_view(ta)),
             not _staging.strides_aligned(_staging.reading_view(tb)),
             residual_t is not None and not _staging.strides_aligned(residual_t),
             not (_staging.strides_aligned(out_t) if out_t is not None else _staging.dense_aligned(out_shape, chosen_out)))
    if True in stage:  # every call stages: its inner call (aligned) has the plan; no record asked for this one
        plan = _Plan("staged", None, {}, (), (), 0, _folds(ta, tb, out_dense, epilogue, batched), False, False)
    else:
        plan = _make_plan(ta, tb, out_dense, epilogue, in_dtype, chosen_out, acc, allow_tf32, scale_tensors, batched,
                          batch, m, n, k, config)
    return _Signature(out_shape, chosen_out, batched, batch, plan, stage)


def _foldable(t: cutile.Tensor | None) -> bool:
    return t is None or t.is_contiguous


_column_major = _staging.column_major  # (a transposed layout: the kernels read its transpose)


def _folds(ta: cutile.Tensor, tb: cutile.Tensor, out_dense: bool, epilogue: Epilogue, batched: bool) -> bool:
    """Whether a batched call is one GEMM of batch * m rows: b shared by every batch, a,
    out and residual contiguous."""
    return batched and (tb.ndim == 2 or tb.shape[0] == 1) and ta.ndim == 3 and _foldable(ta) \
        and out_dense and _foldable(epilogue.residual)


def _make_plan(ta: cutile.Tensor, tb: cutile.Tensor, out_dense: bool, epilogue: Epilogue, in_dtype: Any,
               out_dtype: Any, acc: Any, allow_tf32: bool, scale_tensors: bool, batched: bool, batch: int,
               m: int, n: int, k: int, config: dict[str, Any] | None) -> _Plan:
    fold = _folds(ta, tb, out_dense, epilogue, batched)
    rank = 2 if not batched or fold else 3
    rows = batch * m if batched else m
    weight_nk = tb.strides[-2] == 1 and tb.strides[-1] != 1  # (K contiguous: a w.T view)
    path = _choose_path(rows, n, k, rank, in_dtype, acc, scale_tensors, config, weight_nk=weight_nk)
    if path == "gemv":  # the record's winner for the weight's layout, else a default
        return _Plan(path, None, _gemv.choose(rows, n, k, in_dtype, weight_nk=weight_nk), (), (), 0, fold, False,
                     False)
    if path == "split_k":  # the record's winner, else a default
        return _Plan(path, None, _splitk_tuning.choose(rows, n, k, in_dtype, weight_nk=weight_nk), (), (), 0, fold,
                     False, False)
    found = _configs.choose(in_dtype, rows, n, k) if config is None else \
        {**_configs.default_config(rows, n, k, in_dtype), **config}
    chosen = _configs.fit_to_problem(found, rows if rank == 2 else m, n, k)  # (a batch's own rows: its tiles')
    a_t, b_t = _column_major(ta), _column_major(tb)
    variant = Variant(rank, in_dtype, out_dtype, acc, allow_tf32 and in_dtype == f32, epilogue.activation_code,
                      epilogue.bias.dtype if epilogue.bias is not None else None,
                      epilogue.residual.dtype if epilogue.residual is not None else None, scale_tensors, a_t, b_t)
    try:
        kernel = gemm_kernel(variant, int(chosen["num_worker_warps"]), int(chosen["occupancy"]))
    except cutile.SignatureError as exc:  # hints the compiler refuses: the config's fault
        raise cutile.ArgumentError(f"matmul: config {chosen} cannot be used: {exc}") from None
    tm, tn, group = int(chosen["tile_m"]), int(chosen["tile_n"]), int(chosen["group_size"])
    tiles = -(-(rows if rank == 2 else m) // tm) * -(-n // tn) * (1 if rank == 2 else batch)
    default_blocks = _default_blocks(tiles)
    blocks = max(1, min(tiles, int(chosen["blocks_per_sm"]) * default_blocks))
    tile = (tm, tn) if rank == 2 else (1, tm, tn)
    map_shape = (group, 1) if rank == 2 else (1, group, 1)
    return _Plan(path, kernel, chosen, tile, map_shape, blocks, fold, a_t, b_t)


def _default_blocks(tiles: int) -> int:
    """The map's default block count for ``tiles`` output tiles: one per SM of the
    device kernels run on, or the tile count when smaller. (Asked of a mapped stride-0
    view of a new one-element tensor, ``tiles`` tiles of one element: made once per
    plan, it holds no caller's memory, so no pending launch can refuse it.)"""
    one = cutile.api.empty([1], dtype=f32).broadcast_to(tiles)
    blocks = one.partition((1,)).map((1,)).blocks
    assert blocks is not None
    return blocks


def _shaped(plan: _Plan, batched: bool, batch: int, ta: cutile.Tensor, tb: cutile.Tensor, out_t: cutile.Tensor,
            epilogue: Epilogue) -> tuple[cutile.Tensor, cutile.Tensor, cutile.Tensor, Epilogue]:
    """The operands in the kernel's rank: folded to one GEMM, broadcast to the batch, or as they are."""
    if not batched:
        return ta, tb, out_t, epilogue
    m, k = ta.shape[-2:]
    n = tb.shape[-1]
    residual = epilogue.residual
    if plan.fold_batch:
        b2 = tb if tb.ndim == 2 else tb[0]
        res2 = residual.reshape(batch * m, n) if residual is not None else None
        return (ta.reshape(batch * m, k), b2, out_t.reshape(batch * m, n),
                Epilogue(epilogue.bias, epilogue.activation, res2, epilogue.alpha))
    return ta.broadcast_to(batch, m, k), tb.broadcast_to(batch, k, n), out_t, epilogue


_transpose = _staging.transpose


def _kernel_arguments(call: _Call) -> tuple[list[Any], dict[str, int]]:
    """The kernel's positional arguments for ``call`` (the output partitioned and mapped
    through a fresh view) and its constants."""
    plan = call.plan
    assert plan is not None
    # Views are made once per caller tensor (`derived`): a loop over the same tensors passes
    # the same objects, so the launch reuses its binding (the native fast path).
    a, b, epilogue = call.a, call.b, call.epilogue
    k = a.shape[-1]
    if plan.a_transposed:
        a = derived(a, "T", partial(_transpose, a))
    if plan.b_transposed:
        b = derived(b, "T", partial(_transpose, b))
    ones = [1] * a.ndim
    bias = a if epilogue.bias is None else derived(
        epilogue.bias, ("row", a.ndim), partial(epilogue.bias.broadcast_to, ones[:-1] + [epilogue.bias.shape[0]]))
    scale_a, scale_b = (a, a) if call.scales is None else (
        derived(s, ("scale", a.ndim), partial(s.broadcast_to, ones)) for s in call.scales)
    z = derived(call.out, ("z", plan.tile, plan.map_shape, plan.blocks), lambda: _mapped_output(call.out, plan))
    residual = epilogue.residual if epilogue.residual is not None else a
    return [z, a, b, bias, residual, scale_a, scale_b, call.alpha], {"BK": int(plan.config["tile_k"]), "K": k}


def _mapped_output(out: cutile.Tensor, plan: _Plan) -> Any:
    """``out`` partitioned and mapped by the plan, through a view of it (the caller's
    object is never consumed)."""
    return out[...].partition(plan.tile).map(plan.map_shape, blocks=plan.blocks)


def _launch_call(call: _Call, hold: bool = True) -> Any:
    """The pending launch of ``call`` (a `cutile.Launch`, or a `cuda_async.DeviceOp`
    for a K split in two kernels or a staged call). ``hold``: a two-kernel op holds the
    caller's tensors from the call (False for a staged call's inner call: the staged op
    holds them and checked them at the call, its temporaries are still to be written by
    its copies, and it reaches the caller's tensors through its own views)."""
    if call.staged is not None:
        return _launch_staged(call)
    plan = call.plan
    assert plan is not None
    if plan.kernel is None:
        assert plan.path in ("gemv", "split_k"), f"matmul: a plan of path {plan.path!r} has no kernel to launch"
        function = "small_m_matmul" if plan.path == "gemv" else "split_k_matmul"
        steps = call.gemv_launches if plan.path == "gemv" else call.split_k_launches
        if steps is None:
            steps = _prime(call)
        elif hold:  # (made once: only the consumable operands checked again, as check_operands does for a known layout)
            require_live(call.b, function, "b")
            require_live(call.out, function, "out")
        assert steps is not None
        return _splitk.run(steps, _splitk.holding(function, call.a, call.b, call.out, call.epilogue.bias,
                                                  call.epilogue.residual) if hold else None)
    if call.positional is None:
        _prime(call)
    elif hold:  # the arguments made the first time are views: a consumed tensor is refused here (as `_tiled_launch`)
        require_live(call.out, "matmul", "out")
        if call.epilogue.bias is not None:
            require_live(call.epilogue.bias, "matmul", "bias")
        if plan.a_transposed:
            require_live(call.a, "matmul", "a")
        if plan.b_transposed:
            require_live(call.b, "matmul", "b")
    assert call.positional is not None
    return plan.kernel(*call.positional)


Steps = tuple[tuple[Any, tuple[Any, ...], dict[str, int]], ...]  # (kernel, positional arguments, constants) each


def _prime(call: _Call) -> Steps | None:
    """Makes what the launch of ``call`` needs, once: the tiled kernel's arguments, or
    the GEMV or split-K path's kernels with their arguments, views and workspace (those
    returned). A call's launches depend on its operands' layouts and addresses and its
    epilogue alone, fixed for the call. A staged call primes its inner call when it is
    made, so that the inner call's launch, made while the staged op is being enqueued,
    allocates nothing (an allocation waits for cutile's stream, which `cutile.bench`
    keeps shut while it enqueues a rep)."""
    plan, epilogue = call.plan, call.epilogue
    assert plan is not None
    if plan.kernel is not None:
        if call.positional is None:
            arguments, constants = _kernel_arguments(call)
            # Every parameter by position (the tile's BM, BN too): the call the native launch path takes.
            call.positional = (*arguments, plan.tile[-2], plan.tile[-1], constants["BK"], constants["K"])
        return None
    if plan.path == "gemv":
        if call.gemv_launches is None:
            ops, cfg = _gemv._checked("small_m_matmul", call.a, call.b, call.out, epilogue.bias,
                                      epilogue.activation, epilogue.residual, call.alpha, plan.config)
            call.gemv_launches = _gemv._launches(ops, cfg)
            call.gemv_kept = _GemvKept(ops.m, ops.n, ops.k, ops.weight_nk, ops.activation, cfg)
        return call.gemv_launches
    assert plan.path == "split_k", f"matmul: a plan of path {plan.path!r} has no kernel to launch"
    if call.split_k_launches is None:
        call.split_k_launches = _splitk.checked_launches(call.a, call.b, call.out, bias=epilogue.bias,
                                                         activation=epilogue.activation, residual=epilogue.residual,
                                                         alpha=call.alpha, config=plan.config)
    return call.split_k_launches


def _launch_staged(call: _Call) -> Any:
    """The op of a staged call: the copies into the temporaries, the inner call's
    launch (or op), the copy into out, in that order on one stream.

    Everything it uses is claimed at the call, as an aligned launch claims its
    arguments (a conflict refused now, a conflicting use refused while it is pending):
    `cutile.hold` claims the caller's inputs as read and out as written, by the
    operand's name, and a second one the temporaries. The launches are made as the step
    before is enqueued (``then``: each reads what the one before writes, which a claim
    made now would meet as a pending write); they join the op's job, which holds all of
    it by then. Temporaries held by another pending launch (two launches staging one
    tensor, both pending) are left to it: this op takes temporaries of its own."""
    staged = call.staged
    assert staged is not None
    for name, t in staged.originals:
        require_live(t, "matmul", name)
    # The temporaries first: taking unkept ones (which plans and maps the inner call's
    # views) must meet none of this op's own holds.
    try:
        temporaries = cutile.hold("matmul", writes=staged.temporaries())
    except cutile.OwnershipError:
        staged = staged.unkept(call)
        temporaries = cutile.hold("matmul", writes=staged.temporaries())
    try:
        holds = cutile.hold("matmul", reads=staged.reads, writes=(("out", staged.out),))
    except BaseException:
        del temporaries  # (its claim given back now, not when the traceback is freed)
        raise
    op = holds.then(temporaries)
    for _, source, target in staged.copies_in:
        op = op.then(_after(partial(_staging.copy, source, target)))
    op = op.then(_after(partial(_launch_call, staged.inner, False)))
    if staged.copy_out is not None:
        op = op.then(_after(partial(_staging.copy, *staged.copy_out)))
    return op


def _after(step: Callable[[], Any]) -> Callable[[Any], Any]:
    return lambda _: step()


def _compile_call(call: _Call, arch: str) -> None:
    """Compiles what ``call`` would launch, for ``arch``, without launching it (filling
    the compile caches, as a tuning search does ahead of timing)."""
    if call.staged is not None:
        copy_out = (call.staged.copy_out,) if call.staged.copy_out is not None else ()
        for source, target in [(source, target) for _, source, target in call.staged.copies_in] + list(copy_out):
            _staging.compile_copy(source, target, arch)
        call = call.staged.inner
    assert call.plan is not None and call.plan.kernel is not None  # (a config picks the tiled kernel)
    arguments, constants = _kernel_arguments(call)
    cutile.compile(call.plan.kernel, *arguments, arch=arch, **constants)


class _LastCall:
    """The last call on cutile tensors with ``out=`` given: its tensor arguments (weakly) and its other
    arguments, and what they made. A loop that passes the same objects again skips the
    operands' conversion, the checks and the plan lookup (all decided by those objects,
    whose shapes, strides and memory do not change) and launches the kernel on the very
    arguments of last time; what can change (a consumed tensor, a pending launch holding
    the memory) is still checked by the launch."""

    __slots__ = ("tensors", "others", "call")

    def __init__(self, tensors: tuple[Any, ...], others: tuple[Any, ...], call: _Call) -> None:
        self.tensors = tuple(None if t is None else weakref.ref(t) for t in tensors)
        self.others = others
        self.call = call

    def matches(self, tensors: tuple[Any, ...], others: tuple[Any, ...]) -> bool:
        for ref, t in zip(self.tensors, tensors):
            if (t is not None if ref is None else ref() is not t):
                return False
        return others == self.others  # (alpha is a run-time scalar: 1 and 1.0, 0.0 and -0.0 launch alike)


def _remember(tensors: tuple[Any, ...], others: tuple[Any, ...], call: _Call) -> _LastCall | None:
    try:
        return _LastCall(tensors, others, call)
    except TypeError:  # an argument that takes no weak reference: not remembered
        return None


class Matmul:
    """``matmul(a, b, ...)``: see `matmul.__call__`; ``matmul.launch(...)``: the same
    call's launch, pending (for `cutile.bench.do_bench`, `cutile.batch`, graphs)."""

    def __init__(self) -> None:
        self._last: _LastCall | None = None

    def _call(self, a: Any, b: Any, out: Any, bias: Any, activation: Any, residual: Any, alpha: Any, scale_a: Any,
              scale_b: Any, out_dtype: Any, accumulate_dtype: Any, allow_tf32: Any, config: Any) -> _Call:
        """The checked call: the last one again when its objects and arguments are."""
        tensors = (a, b, out, bias, residual, scale_a if not isinstance(scale_a, (int, float)) else None,
                   scale_b if not isinstance(scale_b, (int, float)) else None)
        last = self._last
        if out is not None and config is None and last is not None:
            others = (activation, alpha, scale_a if tensors[5] is None else None,
                      scale_b if tensors[6] is None else None, out_dtype, accumulate_dtype, allow_tf32)
            if last.matches(tensors, others):
                return last.call
        call = _prepare(a, b, out=out, bias=bias, activation=activation, residual=residual, alpha=alpha,
                        scale_a=scale_a, scale_b=scale_b, out_dtype=out_dtype, accumulate_dtype=accumulate_dtype,
                        allow_tf32=allow_tf32, config=config)
        # Only calls on cutile tensors are remembered: a foreign tensor (torch, CuPy) is
        # imported on every call, and its import orders cutile's stream after the work its
        # producer queued since (the DLPack / CUDA Array Interface stream handshake).
        if out is not None and config is None and call.plan is not None and all(
                t is None or type(t) is cutile.Tensor for t in tensors):
            others = (activation, alpha, scale_a if tensors[5] is None else None,
                      scale_b if tensors[6] is None else None, out_dtype, accumulate_dtype, allow_tf32)
            self._last = _remember(tensors, others, call)
        else:
            self._last = None
        return call

    def __call__(self, a: Any, b: Any, *, out: Any = None, bias: Any = None, activation: str | None = None,
                 residual: Any = None, alpha: float = 1.0, scale_a: Any = None, scale_b: Any = None,
                 out_dtype: Any = None, accumulate_dtype: Any = f32, allow_tf32: bool = False,
                 config: dict[str, Any] | None = None) -> Any:
        """``act(alpha * (a @ b) * scale_a * scale_b + bias) + residual``, waited for.

        Args:
            a, b: ``[M, K]`` and ``[K, N]``, or batches ``[B, M, K]`` and ``[B, K, N]``
                (either batch may be 1 or absent: it is shared by every batch). Any
                strides (transposed views are read in place; an operand, residual or
                out whose row stride or base is off 16 bytes is staged through an
                aligned copy, `_staging`). cutile tensors, or any
                DLPack / CUDA Array Interface tensor (torch, CuPy; numpy on the
                interpreter). dtypes f16, bf16, f32, f8e4m3fn, f8e5m2 (both the same).
            out: where the result goes (its shape ``[..., M, N]`` and dtype checked; it
                must not share memory with an input). None: a new tensor of a's kind.
            bias: ``[N]``, added to every row. residual: the output's shape, added last.
            activation: None, ``"relu"``, ``"gelu"`` (tanh approximation), ``"silu"``.
            alpha: scales the product. scale_a, scale_b: per-tensor scales (fp8):
                numbers, or one-element f32 tensors read on the device.
            out_dtype: f16, bf16 or f32; default out's dtype, else bf16 for fp8 inputs
                and the input dtype otherwise.
            accumulate_dtype: f32 (f16 allowed for f16 and fp8 inputs).
            allow_tf32: f32 inputs multiplied as tf32 (faster, 10-bit mantissa); by
                default f32 products are exact f32.
            config: a tuning config (keys of `cutile_kernels.GEMM_SPACE`) over the
                chosen one; by default the record's winner for the shape, or a default.
        Returns:
            ``out``, or the new result (a cutile tensor, numpy array, torch or CuPy
            tensor as ``a`` is).
        Raises:
            ArgumentError, ArgumentTypeError, InteropError: a bad argument, named.
        """
        key = None
        if out is not None and config is None and scale_a is None and scale_b is None:
            key = _gemv_key(a, b, out, bias, residual, activation, out_dtype, accumulate_dtype, allow_tf32)
            kept = _KEPT_CALLS.get(key) if key is not None else None
            if isinstance(kept, _GemvKept):
                _gemv_launch(kept, a, b, out, bias, residual, alpha).sync()
                return out
            if kept is not None:
                _tiled_launch(kept, a, b, out, bias, residual, alpha).sync()
                return out
        call = self._call(a, b, out, bias, activation, residual, alpha, scale_a, scale_b, out_dtype,
                          accumulate_dtype, allow_tf32, config)
        if call.plan is not None:
            _launch_call(call).sync()
            # (2-D cutile tensors as given, no scales: what `_gemv_launch` and `_tiled_launch` take)
            if key is not None and call.staged is None and call.a is a and call.b is b and call.out is out \
                    and call.epilogue.bias is bias and call.epilogue.residual is residual:
                if call.gemv_kept is not None:
                    _KEPT_CALLS.keep(key, call.gemv_kept)
                elif call.plan.kernel is not None:
                    _KEPT_CALLS.keep(key, call.plan)
        return call.out_handed if call.result_kind is None else call.result_kind.result(call.out, call.out_handed)

    def launch(self, a: Any, b: Any, *, out: Any = None, bias: Any = None, activation: str | None = None,
               residual: Any = None, alpha: float = 1.0, scale_a: Any = None, scale_b: Any = None,
               out_dtype: Any = None, accumulate_dtype: Any = f32, allow_tf32: bool = False,
               config: dict[str, Any] | None = None) -> Any:
        """The launch of ``matmul(...)`` (same arguments), not run (a `cutile.Launch`,
        or for a K split in two kernels or a staged call a `cuda_async.DeviceOp`): ``.sync()``,
        ``.schedule()``, ``await``, a `cutile.batch` or `cutile.bench.do_bench` runs it.
        Pass ``out=`` to read the result (the launch gives back its kernel's tensors,
        the output's partition first).

        Raises:
            ArgumentError: an empty output (nothing to launch), or a bad argument.
        """
        call = self._call(a, b, out, bias, activation, residual, alpha, scale_a, scale_b, out_dtype,
                          accumulate_dtype, allow_tf32, config)
        if call.plan is None:
            raise cutile.ArgumentError(f"matmul.launch: the output {list(call.out.shape)} is empty; there is "
                                       "nothing to launch (matmul(...) returns it as it is)")
        return _launch_call(call)


matmul = Matmul()
