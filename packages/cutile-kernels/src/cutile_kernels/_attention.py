"""Flash attention forward for prefill: ``attention(q, k, v, *, causal=False, scale=None, out=None)``.

Two layouts:
- dense, as torch SDPA takes them: q ``(batch, heads, seq_q, head_dim)``, k and v
  ``(batch, kv_heads, seq_k, head_dim)``; causal is top-left aligned (query i sees keys
  ``<= i``), as SDPA's ``is_causal``;
- varlen, as flash-attn's ``flash_attn_varlen_func``: q ``(total_q, heads, head_dim)``, k
  and v ``(total_k, kv_heads, head_dim)``, packed sequences delimited by ``cu_seqlens_q``
  and ``cu_seqlens_k`` (i32 prefix sums, ``batch + 1`` entries); causal is bottom-right
  aligned there (query i of a sequence sees keys ``<= i + len_k - len_q``), as
  flash-attn's; a query row with no key gets zeros.

GQA: kv_heads divides heads, and query head h reads kv head ``h // (heads // kv_heads)``.
f16 and bf16, head_dim 64 or 128; f32 accumulation, online softmax in log2 units (the
scale is folded into log2(e) and the exponentials are ``exp2``).

Both kernels are safe: each block owns one ``[BM, head_dim]`` tile of the output (a
partition of the output viewed ``(batch * heads, seq, head_dim)``, or ``(heads, total_q,
head_dim)`` for varlen) and reads K and V read-only. The dense kernel walks K/V through
partitions, the key tiles wholly inside the sequence (and below the diagonal) without a
mask and the others masked. The varlen kernel finds each row's sequence from the offsets
(a compare against ``cu_seqlens_q``), walks the keys of the sequences its rows belong to
with ``load(at=)`` and masks per row; a tile spanning several short sequences reads the
keys of all of them. The offsets' values are not checked on the host (that would read
device memory): reads outside the tensors are padded and the key range is clamped to
k's, so wrong offsets give wrong rows, never an out-of-bounds access or a longer walk.

Dense inputs are viewed ``(batch * heads, seq, head_dim)``; one whose batch and head dims
do not merge (a sequence-major ``(batch, seq, heads, dim)`` tensor transposed) is copied
first, and an ``out=`` must merge. ``num_worker_warps`` is an sm_90 hint (the others
apply to every arch).

Configs (`SPACE`): ``block_m``, ``block_n``, ``num_worker_warps``, ``occupancy``; a call
without ``config=`` takes `TUNER`'s for its shape (a cached winner, a search with
``CUTILE_TUNE=1``, else `DEFAULT`). Kernels are cached per dtype, causality and config
(the hints are in the entry). A varlen call with ``out=`` of cutile tensors keeps its plan
by the operands' layouts and memory (`_PLANS`, as the row kernels do): a call in them
again (a prefill's next layer, over the same buffers) skips the checks and launches on
views made once per tensor, checking only that none was consumed.
"""

# No `from __future__ import annotations`: kernel annotations name the factory's dtypes.


import builtins
import functools
import importlib
import inspect
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

import cutile
from cutile import api, tune
from cutile.core import (
    Constant, Mut, Tensor, arange, bf16, bid, cdiv, exp2, f16, f32, fma, full, gather, i32, max, maximum, min, minimum,
    mma, sum, where, zeros,
)

from cutile_kernels import _pointwise as pw
from cutile_kernels._operands import KeptPlans, derived, memory_layout, require_live
from cutile_kernels._pointwise import Pending

LOG2E = 1.4426950408889634
HEAD_DIMS = (64, 128)

#: the configs a search tries (the default first)
SPACE = tune.Space(block_m=[128, 64], block_n=[64, 128], num_worker_warps=[8, 4], occupancy=[1, 2])
DEFAULT: dict[str, int] = {"block_m": 128, "block_n": 64, "num_worker_warps": 8, "occupancy": 1}

Hints = tuple[tuple[str, int], ...]


def _hints(config: Mapping[str, Any]) -> Hints:
    return (("occupancy", int(config["occupancy"])), ("num_worker_warps", int(config["num_worker_warps"])))


def _entry(function: Any, name: str, annotations: dict[str, Any], hints: Hints) -> Any:
    function.__name__ = function.__qualname__ = name
    function.__annotations__ = {**annotations, "return": None}
    general = {k: v for k, v in hints if k != "num_worker_warps"}
    arch = {k: v for k, v in hints if k == "num_worker_warps"}  # sm_90's
    return cutile.entry(hints={**general, "sm_90": arch})(function)


@functools.cache
def dense_kernel(dtype: Any, causal: bool, hints: Hints, positive: bool = True) -> Any:
    """One (batch * head, query tile) per block over ``(batch * heads, seq, D)`` views;
    ``positive``: the scale is > 0 (the unmasked tiles then fold it into one fma)."""
    def attention_dense(o: Any, q: Any, k: Any, v: Any, qk_scale: Any, heads: Any, kv_heads: Any, group: Any,
                        BM: Any, BN: Any, D: Any) -> None:  # noqa: N803 (the tile dims' names)
        bh = bid(0)
        m = bid(1)
        batch = bh // heads
        kv = batch * kv_heads + (bh - batch * heads) // group
        qt = q.load(index=(bh, m, 0), shape=(1, BM, D)).reshape((BM, D))
        part_k = k.partition([1, BN, D])
        part_v = v.partition([1, BN, D])
        seq_k = k.shape[1]
        row_max = full((BM, 1), -float("inf"), f32)
        row_sum = zeros((BM, 1), f32)
        acc = zeros((BM, D), f32)
        if causal:
            unmasked = minimum((m * BM + 1) // BN, seq_k // BN)  # key tiles every row of the block sees whole
            end = minimum(cdiv((m + 1) * BM, BN), cdiv(seq_k, BN))
        else:
            unmasked = seq_k // BN
            end = cdiv(seq_k, BN)
        for n in range(unmasked):
            kt = part_k.load([kv, n, 0]).reshape((BN, D))
            s = mma(qt, kt.T, zeros((BM, BN), f32))
            if positive:  # the scale goes into the exponential's fma: max(s * c) = max(s) * c
                new_max = maximum(row_max, max(s, axis=1, keepdims=True) * qk_scale)
                p = exp2(fma(s, qk_scale, -new_max))
            else:
                s = s * qk_scale
                new_max = maximum(row_max, max(s, axis=1, keepdims=True))
                p = exp2(s - new_max)
            alpha = exp2(row_max - new_max)
            row_sum = row_sum * alpha + sum(p, axis=1, keepdims=True)
            vt = part_v.load([kv, n, 0]).reshape((BN, D))
            acc = mma(p.astype(dtype), vt, acc * alpha)
            row_max = new_max
        rows = (arange(BM, i32) + m * BM).reshape((BM, 1))
        for n in range(unmasked, end):
            kt = part_k.load([kv, n, 0]).reshape((BN, D))
            s = mma(qt, kt.T, zeros((BM, BN), f32)) * qk_scale
            cols = (arange(BN, i32) + n * BN).reshape((1, BN))
            if causal:
                s = where((cols <= rows) & (cols < seq_k), s, -float("inf"))
            else:
                s = where(cols < seq_k, s, -float("inf"))
            new_max = maximum(row_max, max(s, axis=1, keepdims=True))
            p = exp2(s - new_max)
            alpha = exp2(row_max - new_max)
            row_sum = row_sum * alpha + sum(p, axis=1, keepdims=True)
            vt = part_v.load([kv, n, 0]).reshape((BN, D))
            acc = mma(p.astype(dtype), vt, acc * alpha)
            row_max = new_max
        o.store((acc * (1.0 / row_sum)).astype(dtype).reshape((1, BM, D)))
    annotations = {
        "o": Mut[Tensor[dtype, [1, "BM", "D"]]],
        "q": Tensor[dtype, [-1, -1, "D"]],
        "k": Tensor[dtype, [-1, -1, "D"]],
        "v": Tensor[dtype, [-1, -1, "D"]],
        "qk_scale": f32,
        "heads": i32,
        "kv_heads": i32,
        "group": i32,
        "BM": Constant[int],
        "BN": Constant[int],
        "D": Constant[int],
    }
    name = f"attention{'_causal' if causal else ''}{'' if positive else '_any_scale'}_{dtype}"
    return _entry(attention_dense, name, annotations, hints)


@functools.cache
def varlen_kernel(dtype: Any, causal: bool, hints: Hints) -> Any:
    """One (head, packed query tile) per block over ``(heads, total, D)`` views."""
    def attention_varlen(o: Any, q: Any, k: Any, v: Any, cu_q: Any, cu_k: Any, qk_scale: Any, group: Any,
                         BM: Any, BN: Any, D: Any, NB: Any) -> None:  # noqa: N803 (the tile dims' names)
        h = bid(0)
        m = bid(1)
        kv = h // group
        qt = q.load(index=(h, m, 0), shape=(1, BM, D)).reshape((BM, D))
        batch = cu_q.shape[0] - 1
        rows = arange(BM, i32) + m * BM
        # each row's sequence: how many sequences end at or before it (the last one for rows past the end)
        ends = cu_q.load(at=(1,), shape=(NB,)).reshape((1, NB))
        real = (arange(NB, i32) < batch).reshape((1, NB))
        seq = sum(where((ends <= rows.reshape((BM, 1))) & real, 1, 0), axis=1)
        seq = minimum(seq, batch - 1)
        q_end = gather(cu_q, (seq + 1,)).reshape((BM, 1))
        k_start = gather(cu_k, (seq,)).reshape((BM, 1))
        k_end = gather(cu_k, (seq + 1,)).reshape((BM, 1))
        if causal:
            limit = minimum(k_end, rows.reshape((BM, 1)) + (k_end - q_end) + 1)  # keys below this one
        else:
            limit = k_end
        limit = minimum(limit, k.shape[1])  # clamped: offsets out of range read no key past k's
        first = maximum(min(k_start), 0)
        last = max(limit)
        row_max = full((BM, 1), -float("inf"), f32)
        row_sum = zeros((BM, 1), f32)
        acc = zeros((BM, D), f32)
        for n in range(cdiv(maximum(last - first, 0), BN)):
            start = first + n * BN
            kt = k.load(at=(kv, start, 0), shape=(1, BN, D)).reshape((BN, D))
            s = mma(qt, kt.T, zeros((BM, BN), f32)) * qk_scale
            cols = (arange(BN, i32) + start).reshape((1, BN))
            s = where((cols >= k_start) & (cols < limit), s, -float("inf"))
            new_max = maximum(row_max, max(s, axis=1, keepdims=True))
            base = where(new_max == -float("inf"), 0.0, new_max)  # a row with no key yet: no NaN
            p = exp2(s - base)
            alpha = exp2(row_max - base)
            row_sum = row_sum * alpha + sum(p, axis=1, keepdims=True)
            vt = v.load(at=(kv, start, 0), shape=(1, BN, D)).reshape((BN, D))
            acc = mma(p.astype(dtype), vt, acc * alpha)
            row_max = new_max
        out = where(row_sum > 0.0, acc * (1.0 / where(row_sum > 0.0, row_sum, 1.0)), 0.0)
        o.store(out.astype(dtype).reshape((1, BM, D)))
    annotations = {
        "o": Mut[Tensor[dtype, [1, "BM", "D"]]],
        "q": Tensor[dtype, [-1, -1, "D"]],
        "k": Tensor[dtype, [-1, -1, "D"]],
        "v": Tensor[dtype, [-1, -1, "D"]],
        "cu_q": Tensor[i32, [-1]],
        "cu_k": Tensor[i32, [-1]],
        "qk_scale": f32,
        "group": i32,
        "BM": Constant[int],
        "BN": Constant[int],
        "D": Constant[int],
        "NB": Constant[int],
    }
    return _entry(attention_varlen, f"attention_varlen{'_causal' if causal else ''}_{dtype}", annotations, hints)


# -- arguments --------------------------------------------------------------------------------

FUNCTION = "attention"


@dataclass(frozen=True)
class _Operand:
    tensor: cutile.Tensor
    kind: str  # "cutile", "numpy" or the producing library's top-level module name


def _operand(value: Any, name: str) -> _Operand:
    if isinstance(value, cutile.Tensor):
        return _Operand(value, "cutile")
    if isinstance(value, cutile.Partition):
        raise cutile.ArgumentTypeError(f"{FUNCTION}: {name} is a partition; pass the tensor (unpartition() it)")
    if not (hasattr(value, "__dlpack__") or hasattr(value, "__cuda_array_interface__")):
        raise cutile.ArgumentTypeError(f"{FUNCTION}: {name} must be a tensor (a cutile tensor, or a DLPack / CUDA "
                                       f"Array Interface array), got {type(value).__name__}")
    try:
        tensor = api.from_dlpack(value)
    except cutile.CutileError as exc:
        raise cutile.InteropError(f"{FUNCTION}: {name}: {exc}") from None
    kind = "numpy" if isinstance(value, np.ndarray) else type(value).__module__.split(".")[0]
    return _Operand(tensor, kind)


def _converter(kind: str) -> Callable[[cutile.Tensor], Any]:
    if kind == "cutile":
        return lambda tensor: tensor
    if kind == "numpy":
        return lambda tensor: np.asarray(tensor, copy=False)
    library = importlib.import_module(kind)
    return lambda tensor: library.from_dlpack(tensor)


def _span(tensor: cutile.Tensor) -> tuple[str, int, int]:
    start, end = tensor.byte_range()
    base = tensor.address() - tensor.offset * tensor.dtype.itemsize
    return tensor.device, base + start, base + end


def _check_distinct(out: cutile.Tensor, reads: Mapping[str, cutile.Tensor]) -> None:
    device, start, end = _span(out)
    for name, read in reads.items():
        o_device, o_start, o_end = _span(read)
        if device == o_device and start < o_end and o_start < end and out.size and read.size:
            raise cutile.ArgumentError(f"{FUNCTION}: out shares memory with {name}; pass a distinct tensor")


def _viewed(tensor: cutile.Tensor, shape: tuple[int, ...], name: str, writable: bool) -> cutile.Tensor:
    """``tensor`` reshaped to ``shape`` (a read-only input that cannot be is copied first)."""
    try:
        return tensor.reshape(*shape)
    except cutile.CutileError:
        if writable:
            raise cutile.ArgumentError(f"{FUNCTION}: out of shape {list(tensor.shape)} cannot be viewed as "
                                       f"{list(shape)} (its batch and head dims must be contiguous)") from None
        return api.copy(tensor).reshape(*shape)


def _tuning_setup(config: tune.Config, shape: tuple[int, ...]) -> Any:
    """A search's runner for one shape key (`_shape_key`'s): random inputs, the launch form."""
    batch, heads, kv_heads, seq_q, seq_k, head_dim, causal, is_bf16 = shape
    dtype = bf16 if is_bf16 else f16
    q = api.randn([batch, heads, seq_q, head_dim], dtype, seed=0)
    k = api.randn([batch, kv_heads, seq_k, head_dim], dtype, seed=1)
    v = api.randn([batch, kv_heads, seq_k, head_dim], dtype, seed=2)
    out = api.empty([batch, heads, seq_q, head_dim], dtype)
    return lambda: attention.launch(q, k, v, out=out, causal=bool(causal), config=config).op


def _shape_key(batch: int, heads: int, kv_heads: int, seq_q: int, seq_k: int, head_dim: int, causal: bool,
               dtype: Any) -> tuple[int, ...]:
    return (batch, heads, kv_heads, seq_q, seq_k, head_dim, int(causal), int(dtype == bf16))


#: the configs per shape: the committed record's winner for the shape's bucket
#: (``records/<arch>/attention.json``, made by ``scripts/bench_attention.py --record``), else
#: the disk cache's winner (``CUTILE_CACHE_DIR/tune``), else a search on first use with
#: ``CUTILE_TUNE=1``, else `DEFAULT` (varlen calls take the dense shape
#: ``(1, heads, kv_heads, total_q, total_k, ...)``'s)
def _bucket(shape: Sequence[int]) -> str:
    """A shape key's bucket: the extents rounded up to powers of two, the causal and dtype
    flags kept (rounding would put 0 and 1 in one bucket)."""
    return f"{tune.shape_bucket(shape[:6])}x{'causal' if shape[6] else 'full'}x{'bf16' if shape[7] else 'f16'}"


TUNER = pw.tuner("attention", SPACE, DEFAULT, _tuning_setup,
                 "\n".join(inspect.getsource(f.__wrapped__) for f in (dense_kernel, varlen_kernel)), bucket=_bucket)


def _config(config: Mapping[str, Any] | None, shape: tuple[int, ...]) -> dict[str, int]:
    chosen: dict[str, Any] = dict(DEFAULT)
    if config is None:
        config = TUNER.config(shape)
    if config is not None:
        unknown = set(config) - set(DEFAULT)
        if unknown:
            raise cutile.ArgumentError(f"{FUNCTION}: config has unknown keys {sorted(unknown)}; expected "
                                       f"{sorted(DEFAULT)}")
        chosen.update(config)
    for key, value in chosen.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise cutile.ArgumentError(f"{FUNCTION}: config {key} must be a positive int, got {value!r}")
    for key in ("block_m", "block_n"):
        if chosen[key] & (chosen[key] - 1) or chosen[key] < 16:
            raise cutile.ArgumentError(f"{FUNCTION}: config {key} must be a power of two >= 16, got {chosen[key]}")
    if chosen["num_worker_warps"] not in tune.WORKER_WARPS:
        raise cutile.ArgumentError(f"{FUNCTION}: config num_worker_warps must be one of {list(tune.WORKER_WARPS)}, "
                                   f"got {chosen['num_worker_warps']}")
    return chosen


def _scale(scale: Any, head_dim: int) -> float:
    if scale is None:
        return 1.0 / math.sqrt(head_dim)
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale):
        raise cutile.ArgumentError(f"{FUNCTION}: scale must be a finite number or None, got {scale!r}")
    return float(scale)


def _offsets(value: Any, name: str) -> cutile.Tensor:
    tensor = _operand(value, name).tensor
    if tensor.dtype != i32:
        raise cutile.ArgumentTypeError(f"{FUNCTION}: {name} has dtype {tensor.dtype}; expected i32 (prefix sums)")
    if tensor.ndim != 1 or tensor.shape[0] < 2:
        raise cutile.ArgumentError(f"{FUNCTION}: {name} has shape {list(tensor.shape)}; expected [batch + 1] "
                                   "with batch >= 1")
    return tensor


def _next_pow2(n: int) -> int:
    return 1 << builtins.max(0, n - 1).bit_length()


def _tile_rows(block_m: int, rows: int) -> int:
    """The query tile: ``block_m``, smaller for short sequences (16 at least, mma's)."""
    return builtins.min(block_m, builtins.max(16, _next_pow2(rows)))


class _Kept(NamedTuple):
    """What a checked varlen call launches, from its operands' layouts alone: the kernel
    and its arguments but the tensors."""

    kernel: Any
    qk_scale: float
    group: int
    tile_m: int
    block_n: int
    head_dim: int
    nb: int


# (the operands' layouts and memory, causal, scale) -> the plan of a varlen call with out=
# in them (a prefill's layers: the same buffers each layer; the memory is in the key, as
# out's overlap checks depend on it); only for cutile tensors and no config=
_PLANS: KeptPlans[_Kept] = KeptPlans()


def _key(q: Any, k: Any, v: Any, out: Any, cu_q: Any, cu_k: Any, causal: Any, scale: Any,
         config: Any) -> tuple[Any, ...] | None:
    if config is not None or type(causal) is not bool or type(scale) not in (float, int, type(None)):
        return None
    layouts = tuple(map(memory_layout, (q, k, v, out, cu_q, cu_k)))
    return None if None in layouts else (*layouts, causal, type(scale), scale)


def _launch_kept(kept: _Kept, q: cutile.Tensor, k: cutile.Tensor, v: cutile.Tensor, out: cutile.Tensor,
                 cu_q: cutile.Tensor, cu_k: cutile.Tensor) -> Pending:
    """The launch of a checked varlen call, every argument by position (the native
    launch path's call) and its views made once per tensor (`derived`): the same objects
    each call, so the launch reuses its binding. What their caching would hide is checked
    here: none of q, k, v and out consumed."""
    for name, tensor in (("q", q), ("k", k), ("v", v), ("out", out)):
        require_live(tensor, FUNCTION, name)
    by_head = "permute(1, 0, 2)"
    o3 = derived(out, (by_head, kept.tile_m), lambda: out.permute(1, 0, 2).partition([1, kept.tile_m, kept.head_dim]))
    q3, k3, v3 = (derived(t, by_head, functools.partial(t.permute, 1, 0, 2)) for t in (q, k, v))
    launch = kept.kernel(o3, q3, k3, v3, cu_q, cu_k, kept.qk_scale, kept.group, kept.tile_m, kept.block_n,
                         kept.head_dim, kept.nb)
    return Pending(launch, lambda: out)


def _prepare(q: Any, k: Any, v: Any, *, causal: bool = False, scale: float | None = None, out: Any = None,
             cu_seqlens_q: Any = None, cu_seqlens_k: Any = None,
             config: Mapping[str, Any] | None = None) -> Pending:
    key = None if out is None else _key(q, k, v, out, cu_seqlens_q, cu_seqlens_k, causal, scale, config)
    if key is not None:
        kept = _PLANS.get(key)
        if kept is not None:  # every check came out so for these layouts and memory
            return _launch_kept(kept, q, k, v, out, cu_seqlens_q, cu_seqlens_k)
    if not isinstance(causal, bool):
        raise cutile.ArgumentError(f"{FUNCTION}: causal must be a bool, got {causal!r}")
    if (cu_seqlens_q is None) != (cu_seqlens_k is None):
        raise cutile.ArgumentError(f"{FUNCTION}: cu_seqlens_q and cu_seqlens_k go together (give both or neither)")
    varlen = cu_seqlens_q is not None
    operands = {"q": _operand(q, "q"), "k": _operand(k, "k"), "v": _operand(v, "v")}
    tensors = {name: o.tensor for name, o in operands.items()}
    rank = 3 if varlen else 4
    layout = "(total_tokens, heads, head_dim)" if varlen else "(batch, heads, seq, head_dim)"
    for name, tensor in tensors.items():
        if tensor.dtype not in (f16, bf16):
            raise cutile.ArgumentTypeError(f"{FUNCTION}: {name} has dtype {tensor.dtype}; expected f16 or bf16")
        if tensor.ndim != rank:
            raise cutile.ArgumentError(f"{FUNCTION}: {name} has shape {list(tensor.shape)}; expected {rank} dims "
                                       f"{layout}")
    qt, kt, vt = tensors["q"], tensors["k"], tensors["v"]
    dtype = qt.dtype
    for name in ("k", "v"):
        if tensors[name].dtype != dtype:
            raise cutile.ArgumentTypeError(f"{FUNCTION}: {name} has dtype {tensors[name].dtype}; expected q's "
                                           f"({dtype})")
    if tuple(kt.shape) != tuple(vt.shape):
        raise cutile.ArgumentError(f"{FUNCTION}: v has shape {list(vt.shape)}; expected k's {list(kt.shape)}")
    head_dim = qt.shape[-1]
    if head_dim not in HEAD_DIMS or kt.shape[-1] != head_dim:
        raise cutile.ArgumentError(f"{FUNCTION}: head_dim (q's last dim {head_dim}, k's {kt.shape[-1]}) must be "
                                   f"equal and one of {list(HEAD_DIMS)}")
    heads, kv_heads = (qt.shape[1], kt.shape[1]) if varlen else (qt.shape[1], kt.shape[1])
    if kv_heads == 0 or heads % kv_heads:
        raise cutile.ArgumentError(f"{FUNCTION}: k has {kv_heads} heads, which must divide q's {heads} (GQA)")
    if not varlen and qt.shape[0] != kt.shape[0]:
        raise cutile.ArgumentError(f"{FUNCTION}: k has batch {kt.shape[0]}; expected q's {qt.shape[0]}")
    seq_axis = 0 if varlen else 2
    if qt.size == 0 or kt.shape[seq_axis] == 0:
        raise cutile.ArgumentError(f"{FUNCTION}: q {list(qt.shape)} and k {list(kt.shape)} must not be empty")
    if varlen:
        shape_key = _shape_key(1, heads, kv_heads, qt.shape[0], kt.shape[0], head_dim, causal, dtype)
    else:
        shape_key = _shape_key(qt.shape[0], heads, kv_heads, qt.shape[2], kt.shape[2], head_dim, causal, dtype)
    chosen = _config(config, shape_key)
    qk_scale = _scale(scale, head_dim) * LOG2E
    convert = _converter(operands["q"].kind)
    if out is None:
        result = api.empty(list(qt.shape), dtype)
        given = None
    else:
        result = _operand(out, "out").tensor
        if tuple(result.shape) != tuple(qt.shape):
            raise cutile.ArgumentError(f"{FUNCTION}: out has shape {list(result.shape)}; expected q's "
                                       f"{list(qt.shape)}")
        if result.dtype != dtype:
            raise cutile.ArgumentTypeError(f"{FUNCTION}: out has dtype {result.dtype}; expected {dtype}")
        _check_distinct(result, tensors)
        given = out

    def finish() -> Any:
        return given if given is not None else convert(result)

    block_m, block_n, hints = chosen["block_m"], chosen["block_n"], _hints(chosen)
    if varlen:
        cu_q, cu_k = _offsets(cu_seqlens_q, "cu_seqlens_q"), _offsets(cu_seqlens_k, "cu_seqlens_k")
        if cu_q.shape[0] != cu_k.shape[0]:
            raise cutile.ArgumentError(f"{FUNCTION}: cu_seqlens_k has {cu_k.shape[0]} entries; expected "
                                       f"cu_seqlens_q's {cu_q.shape[0]}")
        total_q = qt.shape[0]
        tile_m = _tile_rows(block_m, total_q)
        o3 = result.permute(1, 0, 2)
        nb = _next_pow2(cu_q.shape[0] - 1)  # a power of two >= batch
        kernel = varlen_kernel(dtype, causal, hints)
        if key is not None:  # (cutile tensors: read as they are, as the kept plan reads them)
            kept = _Kept(kernel, qk_scale, heads // kv_heads, tile_m, block_n, head_dim, nb)
            _PLANS.keep(key, kept)
            return _launch_kept(kept, qt, kt, vt, result, cu_q, cu_k)
        launch = kernel(o3.partition([1, tile_m, head_dim]), qt.permute(1, 0, 2), kt.permute(1, 0, 2),
                        vt.permute(1, 0, 2), cu_q, cu_k, qk_scale, heads // kv_heads, BN=block_n, NB=nb)
        return Pending(launch, finish)
    batch, _, seq_q, _ = qt.shape
    seq_k = kt.shape[2]
    tile_m = _tile_rows(block_m, seq_q)
    q3 = _viewed(qt, (batch * heads, seq_q, head_dim), "q", False)
    k3 = _viewed(kt, (batch * kv_heads, seq_k, head_dim), "k", False)
    v3 = _viewed(vt, (batch * kv_heads, seq_k, head_dim), "v", False)
    o3 = _viewed(result, (batch * heads, seq_q, head_dim), "out", True)
    kernel = dense_kernel(dtype, causal, hints, qk_scale > 0)
    launch = kernel(o3.partition([1, tile_m, head_dim]), q3, k3, v3, qk_scale, heads, kv_heads, heads // kv_heads,
                    BN=block_n)
    return Pending(launch, finish)


class Attention:
    """`attention(q, k, v, ...)` runs and returns the output; `attention.launch(..., out=)`
    returns the pending launch (for `cutile.bench.do_bench` or batching)."""

    __name__ = "attention"

    def __call__(self, q: Any, k: Any, v: Any, *, causal: bool = False, scale: float | None = None, out: Any = None,
                 cu_seqlens_q: Any = None, cu_seqlens_k: Any = None,
                 config: Mapping[str, Any] | None = None) -> Any:
        """Scaled dot-product attention ``softmax(q k^T * scale [+ causal mask]) v``, forward.

        Args:
            q: ``(batch, heads, seq_q, head_dim)``, or ``(total_q, heads, head_dim)`` with the
                offsets; f16 or bf16; head_dim 64 or 128.
            k, v: ``(batch, kv_heads, seq_k, head_dim)`` (or ``(total_k, kv_heads, head_dim)``),
                q's dtype; kv_heads divides heads (GQA).
            causal: mask keys after the query (top-left aligned dense, bottom-right varlen).
            scale: the scores' factor; default ``1 / sqrt(head_dim)``.
            out: the result's tensor (q's shape and dtype); else a new one of q's kind.
            cu_seqlens_q, cu_seqlens_k: i32 prefix sums (``batch + 1`` entries) of the packed
                sequences' lengths: the varlen layout.
            config: `SPACE`'s keys (block_m, block_n, num_worker_warps, occupancy) over `DEFAULT`.
        Returns:
            the attention output, of q's kind (or ``out``).
        """
        return _prepare(q, k, v, causal=causal, scale=scale, out=out, cu_seqlens_q=cu_seqlens_q,
                        cu_seqlens_k=cu_seqlens_k, config=config).run()

    def launch(self, q: Any, k: Any, v: Any, *, out: Any, causal: bool = False, scale: float | None = None,
               cu_seqlens_q: Any = None, cu_seqlens_k: Any = None,
               config: Mapping[str, Any] | None = None) -> Pending:
        """The pending launch writing ``out`` (required); arguments as the call's."""
        if out is None:
            raise cutile.ArgumentError(f"{FUNCTION}.launch: out is required (the launch writes it)")
        return _prepare(q, k, v, causal=causal, scale=scale, out=out, cu_seqlens_q=cu_seqlens_q,
                        cu_seqlens_k=cu_seqlens_k, config=config)

    def __repr__(self) -> str:
        return "<cutile_kernels function attention>"


attention = Attention()
