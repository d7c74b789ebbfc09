"""``qk_norm_rope_cache``: `qk_norm_rope` that also writes the rotated keys and the values
into a KV cache at the tokens' positions, in the same launch (`kv_cache_update`'s write
fused in: one kernel fewer per attention layer).

The kernel walks three schedules, each block its share of each: q's output, a mapped
partition of ``(tokens, heads, head_dim)`` tiles as in `qk_norm_rope` (and k's, when a
``k_out`` is given); then the K and V caches, viewed ``(batch, max_seq, heads *
head_dim)`` and partitioned in tiles of one position and ``BHC`` whole heads, walked by
one ``tiles_within`` sub-grid the two caches share: the rows ``start .. start + count``
of every batch entry (``start`` read on the device from ``positions``). A cache tile's
heads are k's normalized and rotated as for k's output (the same numbers) and v's as
they are; nothing else of either cache is written, which the schedule proves.

Tokens to cache rows: the ``tokens`` rows of q, k and v are ``batch`` blocks of
``count = tokens // batch`` (``batch`` the caches' first dim, 1 for a 3-D cache), block
``b`` going to batch entry ``b`` at positions ``start .. start + count - 1``: a decode
step's one token per sequence, all at one position; a prefill of prompts of one length
from 0; one sequence's tokens into its own cache (``k_cache[b]``). So ``positions``,
which RoPE reads per token, must hold ``start + j`` for the ``j``-th token of every block.
Positions the host holds are checked on the host (an `ArgumentError` naming
``positions``); a device tensor is checked by the kernel (``tiles_within``'s asserts on
the range, one assert per written row that its token's position is that row), as
`kv_cache_update` does it.
"""

# No `from __future__ import annotations`: kernel annotations name the factory's dtypes.

import functools
import inspect
import math
from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np

import cutile
from cutile import api, tune
from cutile.core import Constant, Mut, Tensor, f32, i32

from cutile_kernels import _pointwise as pw
from cutile_kernels import _rows
from cutile_kernels._operands import KeptPlans, Operand, Output, as_tensor, host_values, memory_layout, output, overlaps
from cutile_kernels._qk_norm import _angles_at, _normed_heads, check_rope, tile_of
from cutile_kernels._rope import _rotated
from cutile_kernels._rows import Plan

#: block_elems: a tile's elements (whole heads of whole tokens; a cache tile holds one
#: token's heads); max_blocks: the launch's blocks at most; occupancy: blocks per SM
SPACE = tune.Space(block_elems=[128, 256, 512, 1024, 2048, 4096, 8192, 16384], max_blocks=[132, 264, 528, 1056],
                   occupancy=[1, 2, 4])
#: the configs where the record has no winner: qk_norm's sm_90 winners at Qwen3's shapes
#: (BENCHMARKS.md, run Q1), whose q and k tiles are this kernel's: a decode step's few
#: tokens (up to DECODE_TOKENS) small tiles on one block per SM, more tokens 1024-element
#: tiles at occupancy 4
DEFAULT = {"block_elems": 1024, "max_blocks": 528, "occupancy": 4}
DECODE_DEFAULT = {"block_elems": 256, "max_blocks": 528, "occupancy": 1}
DECODE_TOKENS = 8


@functools.lru_cache(maxsize=None)
def qk_norm_rope_cache_kernel(dtype: Any, q_wdtype: Any, k_wdtype: Any, pos_dtype: Any, with_k: bool,
                              occupancy: int) -> Any:
    """The kernel for one dtype, the weights' and the positions' dtypes, and whether k's
    rotated heads also go to a k output (``with_k``). q's (and k's) output are mapped
    partitions of ``(BT, BH, D)`` tiles; the caches ``(batch, max_seq, heads * D)``
    mapped in ``(1, 1, BW)`` tiles (``BW = BHC * D``), walked by one sub-grid schedule."""
    hints = {"occupancy": occupancy}
    normed_heads, rotated, angles_at = (cutile.function(f) for f in (_normed_heads, _rotated, _angles_at))

    def rotated_heads(x: Any, w: Any, positions: Any, t: Any, h: Any, eps: Any, inv_d: Any, freq_scale: Any, BT: int,
                      BH: int, D: int, NEOX: bool) -> Any:  # noqa: N803
        """Tile ``(t, h)`` of x's ``(BT, BH, D)`` tiles normalized, rounded to the dtype
        (what rope would read after qk_norm stored it), rotated and rounded again."""
        cos_t, sin_t = angles_at(positions, t, freq_scale, BT, D, NEOX)
        normed = normed_heads(x, w, t, h, eps, inv_d, BT, BH, D).astype(dtype).astype(f32)
        return rotated(normed, cos_t, sin_t, BT, BH, D, NEOX).astype(dtype)

    heads = cutile.function(rotated_heads)

    def write_cache_rows(k_cache: Any, v_cache: Any, k: Any, v: Any, k_weight: Any, positions: Any, count: Any,
                         eps: Any, inv_d: Any, freq_scale: Any, BHC: int, BW: int, D: int, NEOX: bool) -> None:  # noqa: N803
        """The cache loop of both forms: rows start .. start + count of every batch entry
        (token b * count + j at row start + j), one position and BHC heads a tile."""
        start = positions.load(index=(0,), shape=(1,)).reshape(()).astype(i32)
        for idx in k_cache.tiles_within((None, (start, count), None), v_cache):
            b, r, c = idx
            token = b * count + (r - start)
            here = positions.load(at=(token,), shape=(1,)).astype(i32)
            assert here == r, "qk_norm_rope_cache: positions must be start, start + 1, ... in every batch entry"
            rows = heads(k, k_weight, positions, token, c, eps, inv_d, freq_scale, 1, BHC, D, NEOX)
            k_cache.store(rows.reshape((1, 1, BW)), idx)
            v_cache.store(v.load(index=(token, c, 0), shape=(1, BHC, D)).reshape((1, 1, BW)), idx)

    cache_rows = cutile.function(write_cache_rows)

    kernel: Any
    if with_k:
        def qk_norm_rope_cache_heads(q_out: Any, k_out: Any, k_cache: Any, v_cache: Any, q: Any, k: Any, v: Any,
                                     q_weight: Any, k_weight: Any, positions: Any, count: Any, eps: Any, inv_d: Any,
                                     freq_scale: Any, BTQ: Any, BHQ: Any, BTK: Any, BHK: Any, BHC: Any, BW: Any,
                                     D: Any, NEOX: Any) -> None:  # noqa: N803
            for idx in q_out.tiles():
                t, h, _ = idx
                q_out.store(heads(q, q_weight, positions, t, h, eps, inv_d, freq_scale, BTQ, BHQ, D, NEOX), idx)
            for idx in k_out.tiles():
                t, h, _ = idx
                k_out.store(heads(k, k_weight, positions, t, h, eps, inv_d, freq_scale, BTK, BHK, D, NEOX), idx)
            cache_rows(k_cache, v_cache, k, v, k_weight, positions, count, eps, inv_d, freq_scale, BHC, BW, D, NEOX)
        kernel = qk_norm_rope_cache_heads
    else:
        def qk_norm_rope_cache_q(q_out: Any, k_cache: Any, v_cache: Any, q: Any, k: Any, v: Any, q_weight: Any,
                                 k_weight: Any, positions: Any, count: Any, eps: Any, inv_d: Any, freq_scale: Any,
                                 BTQ: Any, BHQ: Any, BHC: Any, BW: Any, D: Any, NEOX: Any) -> None:  # noqa: N803
            for idx in q_out.tiles():
                t, h, _ = idx
                q_out.store(heads(q, q_weight, positions, t, h, eps, inv_d, freq_scale, BTQ, BHQ, D, NEOX), idx)
            cache_rows(k_cache, v_cache, k, v, k_weight, positions, count, eps, inv_d, freq_scale, BHC, BW, D, NEOX)
        kernel = qk_norm_rope_cache_q
    annotations: dict[str, Any] = {
        "q_out": Mut[Tensor[dtype, ["BTQ", "BHQ", "D"]]], "k_out": Mut[Tensor[dtype, ["BTK", "BHK", "D"]]],
        "k_cache": Mut[Tensor[dtype, [1, 1, "BW"]]], "v_cache": Mut[Tensor[dtype, [1, 1, "BW"]]],
        "q": Tensor[dtype, [-1, -1, -1]], "k": Tensor[dtype, [-1, -1, -1]], "v": Tensor[dtype, [-1, -1, -1]],
        "q_weight": Tensor[q_wdtype, [-1]], "k_weight": Tensor[k_wdtype, [-1]], "positions": Tensor[pos_dtype, [-1]],
        "count": i32, "eps": f32, "inv_d": f32, "freq_scale": f32, "BTQ": Constant[int], "BHQ": Constant[int],
        "BTK": Constant[int], "BHK": Constant[int], "BHC": Constant[int], "BW": Constant[int], "D": Constant[int],
        "NEOX": Constant[bool]}
    kernel.__annotations__ = {name: annotations[name] for name in inspect.signature(kernel).parameters}
    kernel.__annotations__["return"] = None
    return cutile.entry(hints=hints)(kernel)


def _setup(config: dict[str, Any], shape: tuple[int, ...]) -> Any:
    """A search's runner for one shape (tokens, q heads, k heads, head_dim), bf16: the
    tokens of one sequence from position 1000 (a batch of as many sequences at one
    position has the same tiles), q, k and v head slices of a fused QKV output."""
    tokens, heads_q, heads_k, head_dim = shape
    qkv = api.randn([tokens, heads_q + 2 * heads_k, head_dim], "bf16", seed=1)
    q, k, v = qkv[:, :heads_q], qkv[:, heads_q:heads_q + heads_k], qkv[:, heads_q + heads_k:]
    caches = tuple(api.zeros([1000 + tokens, heads_k, head_dim], "bf16") for _ in range(2))
    q_out, weight = api.empty([tokens, heads_q, head_dim], "bf16"), api.ones([head_dim], "bf16")
    positions = api.arange(1000, 1000 + tokens, dtype="i32")
    return lambda: qk_norm_rope_cache.launch(q, k, v, weight, weight, positions, caches, out=q_out, config=config)


_SOURCE = (inspect.getsource(_normed_heads) + inspect.getsource(_angles_at) + inspect.getsource(_rotated)
           + inspect.getsource(qk_norm_rope_cache_kernel))
TUNER = pw.tuner("qk_norm_rope_cache", SPACE, DEFAULT, _setup, _SOURCE)
#: the same record and cache (one name), with decode's default
DECODE_TUNER = pw.tuner("qk_norm_rope_cache", SPACE, DECODE_DEFAULT, _setup, _SOURCE)


def _as_tokens(tensor: cutile.Tensor) -> cutile.Tensor:
    """A ``(tokens, heads, head_dim)`` view (a fresh one: partitioning it consumes the
    view, never the caller's tensor); a 4-D tensor is contiguous (checked before)."""
    if tensor.ndim == 3:
        return tensor.permute(0, 1, 2)
    return tensor.reshape(math.prod(tensor.shape[:-2]), *tensor.shape[-2:])


def _caches(fn: str, kv_cache: Any, dtype: Any, heads: int, head_dim: int) -> tuple[Operand, Operand]:
    """The ``(k_cache, v_cache)`` pair: one shape and q's dtype, ``(max_seq, heads,
    head_dim)`` or ``(batch, max_seq, heads, head_dim)``, contiguous, not sharing memory."""
    if not isinstance(kv_cache, (tuple, list)) or len(kv_cache) != 2:
        raise cutile.ArgumentError(f"{fn}: parameter 'kv_cache' must be a pair (k_cache, v_cache)")
    kc, vc = as_tensor(kv_cache[0], fn, "kv_cache[0]"), as_tensor(kv_cache[1], fn, "kv_cache[1]")
    for operand, name in ((kc, "kv_cache[0]"), (vc, "kv_cache[1]")):
        if str(operand.tensor.dtype) != str(dtype):
            raise cutile.ArgumentTypeError(f"{fn}: parameter '{name}' has dtype {operand.tensor.dtype}; expected "
                                           f"q's {dtype}")
        if operand.tensor.ndim not in (3, 4) or operand.shape[-2:] != (heads, head_dim):
            raise cutile.ArgumentError(f"{fn}: parameter '{name}' has shape {list(operand.shape)}; expected (max_seq, "
                                       f"{heads}, {head_dim}) or (batch, max_seq, {heads}, {head_dim}) (k's heads "
                                       "and head dim)")
        if not operand.tensor.is_contiguous:
            raise cutile.ArgumentError(f"{fn}: parameter '{name}' of shape {list(operand.shape)} must be contiguous "
                                       f"(its strides are {list(operand.tensor.strides)})")
    if vc.shape != kc.shape:
        raise cutile.ArgumentError(f"{fn}: parameter 'kv_cache[1]' has shape {list(vc.shape)} and 'kv_cache[0]' "
                                   f"{list(kc.shape)}; the pair of caches must agree")
    if overlaps(kc.tensor, vc.tensor):
        raise cutile.ArgumentError(f"{fn}: parameters 'kv_cache[0]' and 'kv_cache[1]' share memory; K and V need "
                                   "caches of their own")
    if kc.shape[-3] >= 2**31:
        raise cutile.ArgumentError(f"{fn}: a cache of {kc.shape[-3]} positions is longer than 2**31 - 1")
    return kc, vc


def _check_positions(fn: str, values: Any, batch: int, count: int, max_seq: int) -> None:
    """Host positions: each batch entry's ``count`` tokens at ``start, start + 1, ...``
    (one start for all), inside the cache."""
    rows = np.asarray(values, dtype=np.int64).reshape(batch, count)
    start = int(rows[0, 0])
    wrong = np.argwhere(rows != start + np.arange(count))
    if wrong.size:
        b, j = (int(n) for n in wrong[0])
        raise cutile.ArgumentError(f"{fn}: parameter 'positions' must be start, start + 1, ... for the tokens of "
                                   f"every batch entry (of {count} each); token {b * count + j} (entry {b}, token "
                                   f"{j}) is at {int(rows[b, j])}, expected {start + j}")
    if not 0 <= start <= max_seq - count:
        raise cutile.ArgumentError(f"{fn}: parameter 'positions' starts at {start}: the {count} tokens of each batch "
                                   f"entry must fit in the cache's {max_seq} positions (start from 0 to "
                                   f"{max_seq - count})")


class _Kept(NamedTuple):
    """What a checked call of 3-D cutile tensors with ``out`` given launches, from its
    layouts alone: the kernel, the output tiles, the cache tile's heads, the block count,
    the caches' view and the kernel's constants."""

    kernel: Any
    tiles: tuple[tuple[int, ...], ...]  # q's out, then k_out's when given
    bhc: int
    blocks: int
    caches_shape: tuple[int, int, int]  # (batch, max_seq, heads * head_dim)
    per_entry: int  # tokens per batch entry
    inv_dim: float
    freq_scale: float
    neox: bool


# (the operands' layouts and memory, theta, style) -> the plan of a call in them (the memory
# is in the key: the overlap checks depend on it); only for cutile tensors and no config=
_PLANS: KeptPlans[_Kept] = KeptPlans()


def _key(tensors: tuple[Any, ...], k_out: Any, theta: Any, style: Any, config: Any) -> tuple[Any, ...] | None:
    """The key of `_PLANS` for a call of cutile tensors, q 3-D and positions 1-D, out given
    and no config= (None for any other call: it takes the checks every time)."""
    if config is not None or type(theta) not in (int, float) or type(style) is not str:
        return None
    layouts = tuple(map(memory_layout, tensors)) + ((None,) if k_out is None else (memory_layout(k_out),))
    if None in layouts[:-1] or (k_out is not None and layouts[-1] is None):
        return None
    if tensors[0].ndim != 3 or tensors[5].ndim != 1:  # (q, positions)
        return None
    return (*layouts, type(theta), theta, style)


def _plan_qk_norm_rope_cache(q: Any, k: Any, v: Any, q_weight: Any, k_weight: Any, positions: Any, kv_cache: Any,
                             eps: float = 1e-6, theta: float = 10000.0, *, style: str = "neox", out: Any = None,
                             k_out: Any = None, config: Mapping[str, Any] | None = None) -> Plan:
    """`qk_norm_rope` of q and k, and the rotated k and v written into a KV cache at the
    tokens' positions, in one launch (the numbers of `qk_norm_rope` followed by
    `kv_cache_update`).

    Args:
        q, k, v: ``(tokens, heads, head_dim)`` (any strides: e.g. head slices of a fused
            QKV projection's output) or ``(batch, seq, heads, head_dim)`` (contiguous),
            one dtype (f16, bf16, f32); k and v of one shape (k may have fewer heads
            than q: GQA); head_dim an even power of two. v is written as it is.
        q_weight, k_weight: the norms' weights, shape ``(head_dim,)``.
        positions: i32 or i64, q's leading shape: each token's position (RoPE's angle
            and its cache row).
        kv_cache: ``(k_cache, v_cache)``, each ``(max_seq, heads, head_dim)`` or
            ``(batch, max_seq, heads, head_dim)``, k's heads and dtype, contiguous;
            written in place at the tokens' rows only. The tokens are ``batch``
            blocks of ``tokens // batch`` (a 4-D q: its batch entries), block ``b``
            going to batch entry ``b`` at ``start, start + 1, ...``: ``positions``
            must hold those (checked on the host when it holds them, else by the
            kernel's asserts; see the module doc).
        eps: the norms' epsilon.
        theta: RoPE's frequency base (1e6 in Qwen3).
        style: ``"neox"`` (halves) or ``"gptj"`` (interleaved pairs).
        out: None or a tensor of q's shape and dtype for q's rotated heads.
        k_out: None (k's rotated heads go to the cache only) or a tensor of k's shape
            and dtype that receives them too (e.g. for a prefill's attention over the
            packed tokens).
        config: a config of `SPACE` (``block_elems``, ``max_blocks``, ``occupancy``)
            instead of the tuned one.
    Returns:
        q's rotated heads, of q's kind (``out`` when given).

    Raises:
        ArgumentError / ArgumentTypeError: naming the parameter (shapes, dtypes, layouts,
            memory shared between a written tensor and another argument, host positions
            that are not consecutive per batch entry or pass the cache's end).
    """
    fn = "qk_norm_rope_cache"
    pair = tuple(kv_cache) if type(kv_cache) is tuple and len(kv_cache) == 2 else (None, None)
    key = _key((q, k, v, q_weight, k_weight, positions, *pair, out), k_out, theta, style, config)
    kept = _PLANS.get(key) if key is not None else None
    if kept is not None:  # every check but those of what can change (eps, host positions, liveness) came out so
        return _launch_kept(kept, fn, q, k, v, q_weight, k_weight, positions, pair, eps, out, k_out)
    qa, ka, va = as_tensor(q, fn, "q"), as_tensor(k, fn, "k"), as_tensor(v, fn, "v")
    dtype = _rows.float_dtype(qa.tensor, fn, "q")
    for operand, name in ((ka, "k"), (va, "v")):
        _rows.float_dtype(operand.tensor, fn, name)
        if str(operand.tensor.dtype) != str(dtype):
            raise cutile.ArgumentTypeError(f"{fn}: {name} has dtype {operand.tensor.dtype} and q {dtype}; they must "
                                           "agree")
    if qa.tensor.ndim == 0:
        raise cutile.ArgumentError(f"{fn}: q is a scalar; expected (tokens, heads, head_dim)")
    head_dim = qa.shape[-1]
    if ka.tensor.ndim == 0 or ka.shape[-1] != head_dim:
        raise cutile.ArgumentError(f"{fn}: q {list(qa.shape)} and k {list(ka.shape)} must have one head dim (their "
                                   "last)")
    if va.shape != ka.shape:
        raise cutile.ArgumentError(f"{fn}: v has shape {list(va.shape)}; expected k's {list(ka.shape)}")
    wq = _rows.vector(q_weight, head_dim, fn, "q_weight")
    wk = _rows.vector(k_weight, head_dim, fn, "k_weight")
    eps = _rows.check_eps(eps, fn)
    pos = check_rope(fn, qa, ka, (positions, theta, style))
    heads_q, heads_k = qa.shape[-2], ka.shape[-2]
    kc, vc = _caches(fn, kv_cache, dtype, heads_k, head_dim)

    reads = {"q": qa.tensor, "k": ka.tensor, "v": va.tensor, "q_weight": wq, "k_weight": wk, "positions": pos}
    q_result = output(out, qa.shape, dtype, qa, fn, "out", reads)
    k_result: Output | None = None
    if k_out is not None:
        k_result = output(k_out, ka.shape, dtype, ka, fn, "k_out", {**reads, "out": q_result.tensor})
    written = {"out": q_result.tensor, "k_out": None if k_result is None else k_result.tensor}
    for cache, name in ((kc, "kv_cache[0]"), (vc, "kv_cache[1]")):
        for other_name, other in {**reads, **written}.items():
            if other is not None and overlaps(cache.tensor, other):
                raise cutile.ArgumentError(f"{fn}: parameter '{name}' overlaps the memory of {other_name}")
    if qa.tensor.ndim == 4:  # batch and seq merged into tokens
        for tensor, name in ((qa.tensor, "q"), (ka.tensor, "k"), (va.tensor, "v"), (q_result.tensor, "out"),
                             (None if k_result is None else k_result.tensor, "k_out")):
            if tensor is not None and not tensor.is_contiguous:
                raise cutile.ArgumentError(f"{fn}: {name} of shape {list(tensor.shape)} must be contiguous (a (batch, "
                                           "seq, heads, head_dim) input; (tokens, heads, head_dim) ones may have "
                                           "any strides)")

    batch = kc.shape[0] if kc.tensor.ndim == 4 else 1
    max_seq, tokens = kc.shape[-3], math.prod(qa.shape[:-2])
    if qa.tensor.ndim == 4 and qa.shape[0] != batch:
        raise cutile.ArgumentError(f"{fn}: q {list(qa.shape)} has {qa.shape[0]} batch entries and the caches "
                                   f"{list(kc.shape)} {batch}; they must agree")
    if tokens == 0 or tokens % batch:
        raise cutile.ArgumentError(f"{fn}: q's {tokens} tokens must be a positive multiple of the caches' batch "
                                   f"{batch} (each batch entry takes tokens // batch of them)")
    count = tokens // batch
    if count > max_seq:
        raise cutile.ArgumentError(f"{fn}: {count} tokens per batch entry do not fit in the cache's {max_seq} "
                                   "positions")
    held = host_values(pos)
    if held is not None:
        _check_positions(fn, held, batch, count, max_seq)

    def finish() -> Any:
        return q_result.result()

    tuner = DECODE_TUNER if tokens <= DECODE_TOKENS else TUNER
    chosen = (pw.config_of(fn, config, SPACE, tuner.default) if config is not None
              else tuner.config((tokens, heads_q, heads_k, head_dim)))
    q_view, q_target = _as_tokens(qa.tensor), _as_tokens(q_result.tensor)
    targets = [q_target.partition(list(tile_of(chosen, tokens, heads_q, head_dim)))]
    if k_result is not None:
        targets.append(_as_tokens(k_result.tensor).partition(list(tile_of(chosen, tokens, heads_k, head_dim))))
    bhc = tile_of(chosen, 1, heads_k, head_dim)[1]  # whole heads of one token per cache tile
    caches = [op.tensor.reshape(batch, max_seq, heads_k * head_dim).partition([1, 1, bhc * head_dim])
              for op in (kc, vc)]
    items = [math.prod(target.grid) for target in targets] + [tokens * -(-heads_k // bhc)]
    blocks = max(1, min(max(items), int(chosen["max_blocks"])))
    mapped = [target.map([1, 1, 1], blocks=blocks) for target in targets + caches]
    kernel = qk_norm_rope_cache_kernel(dtype, wq.dtype, wk.dtype, pos.dtype, k_result is not None,
                                       int(chosen["occupancy"]))
    launch = kernel(*mapped, q_view, _as_tokens(ka.tensor), _as_tokens(va.tensor), wq, wk, pos, count, eps,
                    1.0 / head_dim, -2.0 * math.log(float(theta)) / head_dim, BHC=bhc, NEOX=style == "neox")
    as_given = all(op.tensor is t for op, t in zip((qa, ka, va, kc, vc), (q, k, v, *pair))) and wq is q_weight \
        and wk is k_weight
    if key is not None and as_given:  # (3-D cutile tensors read as they are: as `_launch_kept` reads them)
        _PLANS.keep(key, _Kept(kernel, tuple(tuple(target.tile_shape) for target in targets), bhc, blocks,
                               (batch, max_seq, heads_k * head_dim), count, 1.0 / head_dim,
                               -2.0 * math.log(float(theta)) / head_dim, style == "neox"))
    return Plan(launch, finish)


def _launch_kept(kept: _Kept, fn: str, q: cutile.Tensor, k: cutile.Tensor, v: cutile.Tensor,
                 q_weight: cutile.Tensor, k_weight: cutile.Tensor, positions: cutile.Tensor, caches: tuple[Any, ...],
                 eps: Any, out: cutile.Tensor, k_out: cutile.Tensor | None) -> Plan:
    """The launch of a call in known layouts: its views made again (each refuses a
    consumed tensor), eps and the positions the host holds checked."""
    eps = _rows.check_eps(eps, fn)
    batch, max_seq, width = kept.caches_shape
    held = host_values(positions)
    if held is not None:
        _check_positions(fn, held, batch, kept.per_entry, max_seq)
    outputs = [out] if k_out is None else [out, k_out]
    targets = [t.permute(0, 1, 2).partition(list(tile)) for t, tile in zip(outputs, kept.tiles)]
    cache_tile = [1, 1, kept.bhc * q.shape[-1]]  # whole heads of one token
    targets += [c.reshape(batch, max_seq, width).partition(cache_tile) for c in caches]
    mapped = [target.map([1, 1, 1], blocks=kept.blocks) for target in targets]
    launch = kept.kernel(*mapped, q.permute(0, 1, 2), k.permute(0, 1, 2), v.permute(0, 1, 2), q_weight, k_weight,
                         positions.permute(0), kept.per_entry, eps, kept.inv_dim, kept.freq_scale, BHC=kept.bhc,
                         NEOX=kept.neox)
    return Plan(launch, lambda: out)


qk_norm_rope_cache = _rows.row_function(_plan_qk_norm_rope_cache)
