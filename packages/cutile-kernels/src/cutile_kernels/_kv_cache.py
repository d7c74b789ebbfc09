"""``kv_cache_update(cache, new, positions)``: write new tokens' rows into a KV cache.

The cache is ``(max_seq, heads, head_dim)`` or ``(batch, max_seq, heads, head_dim)``
(contiguous), ``new`` the same but with its token count in place of ``max_seq``, and
``positions`` where those tokens go: an int (the first position), a list of ints, or
an i32 / i64 tensor of the consecutive positions ``start, start + 1, ...`` (one per new
token, shared by every batch entry; the kernel reads the start of a tensor on the
device, so a decode loop or a CUDA graph replay moves it without touching the host).
Only the new rows are written: the cache is a mapped partition of tiles of whole new
rows (one token per tile, or up to ``tile_rows`` when an int start and the count are
multiples of it) and the kernel walks the sub-range ``tiles_within`` gives it, a safe
kernel.

``kv_cache_update((k_cache, v_cache), (k, v), positions)`` writes a layer's keys and
values in one launch: the two caches (one shape and dtype, contiguous, head_dim a power
of two) are partitioned alike and walked by one ``tiles_within`` schedule they share,
each tile ``BH`` whole heads; k and v may have any strides (head slices of a fused QKV
projection's output are read in place). One cache takes new rows of any strides the same
way (`cache_update_heads_kernel`) when head_dim is a power of two.

Positions the host holds (an int, a list, a numpy array, a tensor in host memory: the
interpreter's) are checked on the host: positions that are not consecutive, or that
pass the cache's end, are an `ArgumentError` naming ``positions``. A positions tensor in
device memory is read only by the kernel (the host reading it would wait for the
device), which checks it: ``tiles_within``'s asserts on its range and one assert per
row that the positions are consecutive. On the GPU a failed assert stops the kernel,
prints its message on the device's output and makes the next synchronizing call raise
a `cutile.CudaError` (the kernel faulted), after which the CUDA context is unusable
(the process must restart), as after torch's device-side asserts.
"""

# No `from __future__ import annotations`: kernel annotations name the factory's dtypes, which cutile's
# mypy plugin cannot read (it takes literal dtypes such as f32): hence their `type: ignore[misc]`.

import functools
import inspect
import math
from typing import Any, NamedTuple

import numpy as np

import cutile
from cutile import api, tune
from cutile.core import Constant, Mut, Tensor, i32

from cutile_kernels import _pointwise as pw
from cutile_kernels._operands import KeptPlans, Operand, as_tensor, host_values, integer_values, memory_layout, overlaps

#: tile_rows: new tokens per tile at most; an int start takes the largest power of two up to it
#: that divides both the start and the token count (tiles of whole new rows), a tensor 1
SPACE = tune.Space(tile_rows=[1, 4, 16], tile_cols=[256, 512, 1024, 2048, 4096], max_blocks=[132, 264, 528, 1056])
DEFAULT = {"tile_rows": 16, "tile_cols": 1024, "max_blocks": 528}


@functools.lru_cache(maxsize=None)
def cache_update_kernel(dtype: Any, pos_dtype: Any) -> Any:
    """The update kernel for one dtype; ``pos_dtype`` None takes the start as a scalar."""
    if pos_dtype is None:
        def cache_update_at(
                cache: Mut[Tensor[dtype, [1, "BS", "BW"]]],  # type: ignore[misc]
                new: Tensor[dtype, [-1, -1, -1]],  # type: ignore[misc]
                first_tile: i32,
                BS: Constant[int],
                BW: Constant[int],
        ) -> None:
            for idx in cache.tiles_within((None, (first_tile, new.shape[1] // BS), None)):
                b, r, c = idx
                cache.store(new.load(index=(b, r - first_tile, c), shape=(1, BS, BW)), idx)
        return cutile.entry(cache_update_at)

    def cache_update(
            cache: Mut[Tensor[dtype, [1, 1, "BW"]]],  # type: ignore[misc]
            new: Tensor[dtype, [-1, -1, -1]],  # type: ignore[misc]
            positions: Tensor[pos_dtype, [-1]],  # type: ignore[misc]
            BW: Constant[int],
    ) -> None:
        start = positions.load(index=(0,), shape=(1,)).reshape(()).astype(i32)
        for idx in cache.tiles_within((None, (start, new.shape[1]), None)):
            b, r, c = idx
            here = positions.load(at=(r - start,), shape=(1,)).astype(i32)
            assert here == r, "kv_cache_update: positions must be consecutive (start, start + 1, ...)"
            cache.store(new.load(index=(b, r - start, c), shape=(1, 1, BW)), idx)
    return cutile.entry(cache_update)


@functools.lru_cache(maxsize=None)
def cache_update_pair_kernel(dtype: Any, pos_dtype: Any) -> Any:
    """The update of a K and a V cache in one launch: the caches as ``(batch, max_seq,
    heads * head_dim)`` in tiles of ``BH`` whole heads (``BW = BH * D``) that one sub-grid
    schedule gives both; the new rows ``(batch, tokens, heads, head_dim)`` are read with
    any strides as ``(1, BS, BH, D)`` tiles. ``pos_dtype`` None takes the start as a
    scalar."""
    if pos_dtype is None:
        def cache_update_pair_at(
                k_cache: Mut[Tensor[dtype, [1, "BS", "BW"]]],  # type: ignore[misc]
                v_cache: Mut[Tensor[dtype, [1, "BS", "BW"]]],  # type: ignore[misc]
                k_new: Tensor[dtype, [-1, -1, -1, "D"]],  # type: ignore[misc]
                v_new: Tensor[dtype, [-1, -1, -1, "D"]],  # type: ignore[misc]
                first_tile: i32,
                BS: Constant[int],
                BW: Constant[int],
                BH: Constant[int],
                D: Constant[int],
        ) -> None:
            for idx in k_cache.tiles_within((None, (first_tile, k_new.shape[1] // BS), None), v_cache):
                b, r, c = idx
                at = (b, r - first_tile, c, 0)
                k_cache.store(k_new.load(index=at, shape=(1, BS, BH, D)).reshape((1, BS, BW)), idx)
                v_cache.store(v_new.load(index=at, shape=(1, BS, BH, D)).reshape((1, BS, BW)), idx)
        return cutile.entry(cache_update_pair_at)

    def cache_update_pair(
            k_cache: Mut[Tensor[dtype, [1, 1, "BW"]]],  # type: ignore[misc]
            v_cache: Mut[Tensor[dtype, [1, 1, "BW"]]],  # type: ignore[misc]
            k_new: Tensor[dtype, [-1, -1, -1, "D"]],  # type: ignore[misc]
            v_new: Tensor[dtype, [-1, -1, -1, "D"]],  # type: ignore[misc]
            positions: Tensor[pos_dtype, [-1]],  # type: ignore[misc]
            BW: Constant[int],
            BH: Constant[int],
            D: Constant[int],
    ) -> None:
        start = positions.load(index=(0,), shape=(1,)).reshape(()).astype(i32)
        for idx in k_cache.tiles_within((None, (start, k_new.shape[1]), None), v_cache):
            b, r, c = idx
            here = positions.load(at=(r - start,), shape=(1,)).astype(i32)
            assert here == r, "kv_cache_update: positions must be consecutive (start, start + 1, ...)"
            at = (b, r - start, c, 0)
            k_cache.store(k_new.load(index=at, shape=(1, 1, BH, D)).reshape((1, 1, BW)), idx)
            v_cache.store(v_new.load(index=at, shape=(1, 1, BH, D)).reshape((1, 1, BW)), idx)
    return cutile.entry(cache_update_pair)


@functools.lru_cache(maxsize=None)
def cache_update_heads_kernel(dtype: Any, pos_dtype: Any) -> Any:
    """`cache_update_pair_kernel`'s form for one cache: new rows of any strides (a head
    slice of a fused QKV output) in ``(1, BS, BH, D)`` tiles."""
    if pos_dtype is None:
        def cache_update_heads_at(
                cache: Mut[Tensor[dtype, [1, "BS", "BW"]]],  # type: ignore[misc]
                new: Tensor[dtype, [-1, -1, -1, "D"]],  # type: ignore[misc]
                first_tile: i32,
                BS: Constant[int],
                BW: Constant[int],
                BH: Constant[int],
                D: Constant[int],
        ) -> None:
            for idx in cache.tiles_within((None, (first_tile, new.shape[1] // BS), None)):
                b, r, c = idx
                cache.store(new.load(index=(b, r - first_tile, c, 0), shape=(1, BS, BH, D)).reshape((1, BS, BW)), idx)
        return cutile.entry(cache_update_heads_at)

    def cache_update_heads(
            cache: Mut[Tensor[dtype, [1, 1, "BW"]]],  # type: ignore[misc]
            new: Tensor[dtype, [-1, -1, -1, "D"]],  # type: ignore[misc]
            positions: Tensor[pos_dtype, [-1]],  # type: ignore[misc]
            BW: Constant[int],
            BH: Constant[int],
            D: Constant[int],
    ) -> None:
        start = positions.load(index=(0,), shape=(1,)).reshape(()).astype(i32)
        for idx in cache.tiles_within((None, (start, new.shape[1]), None)):
            b, r, c = idx
            here = positions.load(at=(r - start,), shape=(1,)).astype(i32)
            assert here == r, "kv_cache_update: positions must be consecutive (start, start + 1, ...)"
            cache.store(new.load(index=(b, r - start, c, 0), shape=(1, 1, BH, D)).reshape((1, 1, BW)), idx)
    return cutile.entry(cache_update_heads)


def _setup(config: dict[str, Any], shape: tuple[int, ...]) -> Any:
    """A search's runner for one shape: (batch, max_seq, new tokens, heads * head_dim), bf16."""
    batch, max_seq, count, width = shape
    cache = api.zeros([batch, max_seq, 1, width], dtype="bf16")
    new = api.randn([batch, count, 1, width], "bf16", seed=1)
    return lambda: kv_cache_update.launch(cache, new, max_seq - count, config=config).op


TUNER = pw.tuner("kv_cache_update", SPACE, DEFAULT, _setup, inspect.getsource(cache_update_kernel))


def _kv_cache_update_launch(cache: Any, new: Any, positions: Any, *,
                            config: dict[str, Any] | None = None) -> pw.Pending:
    """Writes ``new`` into ``cache`` at ``positions`` (in place) and returns the cache;
    given a pair of caches ``(k_cache, v_cache)`` and a pair ``(k, v)``, writes both in
    one launch and returns the pair of caches.

    Args:
        cache: ``(max_seq, heads, head_dim)`` or ``(batch, max_seq, heads, head_dim)``,
            f16, bf16 or f32, contiguous; or a pair ``(k_cache, v_cache)`` of one shape
            and dtype.
        new: the same layout and dtype with ``tokens`` for ``max_seq``; any strides when
            head_dim is a power of two (e.g. head slices of a fused QKV projection's
            output), else contiguous; for a pair of caches, a pair ``(k, v)``.
        positions: an int (the first position), or a list of ints or an i32 / i64
            tensor of shape ``(tokens,)`` holding consecutive positions (checked on the
            host when the host holds them; a device tensor by the kernel's asserts, see
            the module doc).
        config: a config of `SPACE` (default: the tuner's for this shape).
    """
    fn = "kv_cache_update"
    if isinstance(cache, (tuple, list)):
        return _pair_launch(fn, cache, new, positions, config)
    if isinstance(new, (tuple, list)):
        raise cutile.ArgumentError(f"{fn}(): parameter 'new' is a pair; a pair of new tensors goes with a pair of "
                                   "caches (k_cache, v_cache)")
    # What the checks below find depends on the layouts alone (and an int start's value):
    # a call with those of an earlier one skips them (positions the host holds are
    # checked on every call, their values may change).
    key = _checks_key(cache, new, positions) if config is None else None
    checked = _CHECKED.get(key) if key is not None else None
    if checked is not None:
        ca, na = Operand(cache, "cutile", cache), Operand(new, "cutile", new)
        batch, max_seq, tokens, start = checked
        pa = None if start is not None else Operand(positions, "cutile", positions)
    else:
        ca, na = as_tensor(cache, fn, "cache"), as_tensor(new, fn, "new")
        batch, max_seq, tokens = _check_layout(fn, ca, na, "cache", "new")
        start, pa = _positions(fn, positions, tokens, max_seq)
        if key is not None:
            if len(_CHECKED) >= 1024:
                _CHECKED.clear()
            _CHECKED[key] = (batch, max_seq, tokens, start)
    head_dim = ca.shape[-1]
    if not na.tensor.is_contiguous and head_dim & (head_dim - 1) == 0:  # read in place, in tiles of whole heads
        if not ca.tensor.is_contiguous:
            raise cutile.ArgumentError(f"{fn}(): parameter 'cache' of shape {list(ca.shape)} must be contiguous "
                                       f"(its strides are {list(ca.tensor.strides)})")
        return _heads_launch(fn, [ca], [na], (batch, max_seq, tokens), start, pa, config, lambda: cache)
    width = math.prod(ca.shape[-2:])
    cache3 = pw.reshaped(ca, (batch, max_seq, width), fn, "cache")
    new3 = pw.reshaped(na, (batch, tokens, width), fn, "new")
    chosen = pw.config_of(fn, config, SPACE, DEFAULT) if config is not None else TUNER.config((batch, max_seq, tokens, width))
    bw = min(int(chosen["tile_cols"]), pw.next_pow2(width))
    bs = _tile_rows(chosen, start, tokens)
    items = batch * (tokens // bs) * -(-width // bw)
    blocks = max(1, min(items, int(chosen["max_blocks"])))
    mapped = cache3.partition([1, bs, bw]).map([1, 1, 1], blocks=blocks)
    if start is not None:
        launch = cache_update_kernel(ca.tensor.dtype, None)(mapped, new3, start // bs)
    else:
        assert pa is not None
        launch = cache_update_kernel(ca.tensor.dtype, pa.tensor.dtype)(mapped, new3, pa.tensor)
    return pw.Pending(launch, lambda: cache)


# (cache layout, new layout, positions: an int's value or a device tensor's layout) -> what the checks found
_CHECKED: dict[tuple[Any, ...], tuple[int, int, int, int | None]] = {}


def _checks_key(cache: Any, new: Any, positions: Any) -> tuple[Any, ...] | None:
    tensor = cutile.Tensor
    if type(cache) is not tensor or type(new) is not tensor:
        return None
    if type(positions) is int:
        where: tuple[Any, ...] = (int, positions)
    elif type(positions) is tensor and positions.device != "cpu":  # (host values: checked per call)
        where = (tensor, positions.dtype, positions.shape)
    else:
        return None
    return (cache.dtype, cache.shape, cache.strides, new.dtype, new.shape, new.strides, where)


def _check_layout(fn: str, ca: Operand, na: Operand, cache_name: str, new_name: str) -> tuple[int, int, int]:
    """A cache and its new rows agree: (batch, max_seq, tokens)."""
    pw.check_dtype(ca, pw.FLOAT_DTYPES, fn, cache_name)
    pw.check_same_dtype(ca, na, fn, cache_name, new_name)
    pw.check_rank(ca, (3, 4), fn, cache_name)
    if len(na.shape) != len(ca.shape):
        raise cutile.ArgumentError(f"{fn}(): parameter '{new_name}' {list(na.shape)} must have the rank of "
                                   f"'{cache_name}' {list(ca.shape)}")
    batch = ca.shape[0] if len(ca.shape) == 4 else 1
    max_seq, tokens = ca.shape[-3], na.shape[-3]
    if na.shape[:-3] != ca.shape[:-3] or na.shape[-2:] != ca.shape[-2:]:
        raise cutile.ArgumentError(f"{fn}(): parameter '{new_name}' of shape {list(na.shape)} must match "
                                   f"'{cache_name}' {list(ca.shape)} but for its token count (dim {len(ca.shape) - 3})")
    if tokens == 0:
        raise cutile.ArgumentError(f"{fn}(): parameter '{new_name}' holds no tokens (shape {list(na.shape)})")
    if max_seq >= 2**31:
        raise cutile.ArgumentError(f"{fn}(): a cache of {max_seq} positions is longer than 2**31 - 1")
    return batch, max_seq, tokens


def _positions(fn: str, positions: Any, tokens: int, max_seq: int) -> tuple[int | None, Operand | None]:
    """The first position the host knows (an int start), or the tensor a kernel reads."""
    start: int | None = None
    pa: Operand | None = None
    listed = None if isinstance(positions, (int, np.integer)) else integer_values(positions, fn, "positions")
    if isinstance(positions, (int, np.integer)) and not isinstance(positions, bool):
        start = int(positions)
    elif listed is not None:  # host positions no kernel reads in place: the int start's kernel
        if listed.dtype.kind not in "iu":
            raise cutile.ArgumentTypeError(f"{fn}(): parameter 'positions' has dtype {listed.dtype}; expected "
                                           "i32 or i64")
        _check_positions(listed, tokens, max_seq)
        start = int(listed[0])
    else:
        pa = as_tensor(positions, fn, "positions")
        pw.check_dtype(pa, pw.INT_DTYPES, fn, "positions")
        if pa.shape != (tokens,):
            raise cutile.ArgumentError(f"{fn}(): parameter 'positions' has shape {list(pa.shape)}; expected "
                                       f"[{tokens}] (one position per new token)")
        held = host_values(pa.tensor)
        if held is not None:
            _check_positions(held, tokens, max_seq)
    if start is not None and not 0 <= start <= max_seq - tokens:
        raise cutile.ArgumentError(f"{fn}(): parameter 'positions' {start}: the {tokens} new tokens must fit in "
                                   f"the cache's {max_seq} positions (start from 0 to {max_seq - tokens})")
    return start, pa


def _tile_rows(chosen: dict[str, Any], start: int | None, tokens: int) -> int:
    """New tokens per tile: with an int start, the largest power of two up to the
    config's that divides the start and the count (whole tiles of new rows), else 1."""
    bs = 1
    if start is not None:
        while bs * 2 <= int(chosen["tile_rows"]) and start % (bs * 2) == 0 and tokens % (bs * 2) == 0:
            bs *= 2
    return bs


class _KeptPair(NamedTuple):
    """What a checked pair update launches, from its operands' layouts (and an int
    start's value) alone: the kernel, the shapes it views, the tile and block count."""

    kernel: Any
    sizes: tuple[int, int, int]  # batch, max_seq, new tokens
    width: int
    tile: tuple[int, int, int]
    blocks: int
    bh: int
    start_tile: int | None  # an int start, in tiles of new rows (None: the positions tensor)


# (the operands' layouts and memory, an int start) -> the plan of a pair update in them (the
# memory is in the key: the overlap checks depend on it); only for cutile tensors and no config=
_PAIR_PLANS: KeptPlans[_KeptPair] = KeptPlans()


def _pair_key(caches: Any, news: Any, positions: Any, config: Any) -> tuple[Any, ...] | None:
    if config is not None or type(caches) is not tuple or type(news) is not tuple or len(caches) != 2 \
            or len(news) != 2:
        return None
    start = positions if type(positions) is int else None
    layouts = (*map(memory_layout, caches), *map(memory_layout, news),
               memory_layout(positions) if start is None else ("start", start))
    return None if None in layouts else layouts


def _pair_launch(fn: str, caches: Any, news: Any, positions: Any, config: dict[str, Any] | None) -> pw.Pending:
    """K and V caches updated in one launch (`cache_update_pair_kernel`)."""
    key = _pair_key(caches, news, positions, config)
    kept = _PAIR_PLANS.get(key) if key is not None else None
    if kept is not None:  # every check but the positions' values (on the host) came out so for these layouts
        batch, max_seq, tokens = kept.sizes
        if kept.start_tile is None:
            held = host_values(positions)
            if held is not None:
                _check_positions(held, tokens, max_seq)
        targets = [c.reshape(batch, max_seq, kept.width) for c in caches]  # (a view refuses a consumed cache)
        sources = [n if n.ndim == 4 else n.broadcast_to(1, *n.shape) for n in news]
        mapped = [t.partition(list(kept.tile)).map([1, 1, 1], blocks=kept.blocks) for t in targets]
        last = kept.start_tile if kept.start_tile is not None else positions
        return pw.Pending(kept.kernel(*mapped, *sources, last, BH=kept.bh), lambda: caches)
    if len(caches) != 2:
        raise cutile.ArgumentError(f"{fn}(): parameter 'cache' must be a tensor or a pair (k_cache, v_cache), got "
                                   f"{len(caches)} items")
    if not isinstance(news, (tuple, list)) or len(news) != 2:
        raise cutile.ArgumentError(f"{fn}(): a pair of caches takes a pair (k, v) for parameter 'new'")
    kc, vc = as_tensor(caches[0], fn, "cache[0]"), as_tensor(caches[1], fn, "cache[1]")
    kn, vn = as_tensor(news[0], fn, "new[0]"), as_tensor(news[1], fn, "new[1]")
    batch, max_seq, tokens = _check_layout(fn, kc, kn, "cache[0]", "new[0]")
    if vc.shape != kc.shape or str(vc.tensor.dtype) != str(kc.tensor.dtype):
        raise cutile.ArgumentError(f"{fn}(): parameter 'cache[1]' is {vc.tensor.dtype} {list(vc.shape)}; the pair "
                                   f"of caches must agree ('cache[0]' is {kc.tensor.dtype} {list(kc.shape)})")
    if vn.shape != kn.shape or str(vn.tensor.dtype) != str(kn.tensor.dtype):
        raise cutile.ArgumentError(f"{fn}(): parameter 'new[1]' is {vn.tensor.dtype} {list(vn.shape)}; the pair "
                                   f"of new tensors must agree ('new[0]' is {kn.tensor.dtype} {list(kn.shape)})")
    for operand, name in ((kc, "cache[0]"), (vc, "cache[1]")):
        if not operand.tensor.is_contiguous:
            raise cutile.ArgumentError(f"{fn}(): parameter '{name}' of shape {list(operand.shape)} must be contiguous "
                                       f"(its strides are {list(operand.tensor.strides)})")
    if overlaps(kc.tensor, vc.tensor):
        raise cutile.ArgumentError(f"{fn}(): parameters 'cache[0]' and 'cache[1]' share memory; K and V need "
                                   "caches of their own")
    for cache_op, cache_name in ((kc, "cache[0]"), (vc, "cache[1]")):
        for new_op, new_name in ((kn, "new[0]"), (vn, "new[1]")):
            if overlaps(cache_op.tensor, new_op.tensor):
                raise cutile.ArgumentError(f"{fn}(): parameter '{new_name}' overlaps the memory of '{cache_name}'")
    start, pa = _positions(fn, positions, tokens, max_seq)
    if kc.shape[-1] & (kc.shape[-1] - 1):
        raise cutile.ArgumentError(f"{fn}(): a pair of caches takes a head_dim (their last dim) that is a power of "
                                   f"two, got {kc.shape[-1]}")
    as_given = all(op.tensor is t for op, t in zip((kc, vc, kn, vn), (*caches, *news)))
    return _heads_launch(fn, [kc, vc], [kn, vn], (batch, max_seq, tokens), start, pa, config, lambda: caches,
                         key if as_given and (pa is None or pa.tensor is positions) else None)


def _heads_launch(fn: str, caches: list[Operand], news: list[Operand], sizes: tuple[int, int, int],
                  start: int | None, pa: Operand | None, config: dict[str, Any] | None,
                  finish: Any, key: tuple[Any, ...] | None = None) -> pw.Pending:
    """One launch writing one cache or a K and V pair in tiles of whole heads, the new
    rows read with any strides (`cache_update_heads_kernel`, `cache_update_pair_kernel`)."""
    batch, max_seq, tokens = sizes
    heads, head_dim = caches[0].shape[-2:]
    width = heads * head_dim
    targets = [op.tensor.reshape(batch, max_seq, width) for op in caches]
    # 3-D new rows (any strides) as a batch of one: a read-only view with a leading dim
    sources = [op.tensor if op.tensor.ndim == 4 else op.tensor.broadcast_to(1, *op.shape) for op in news]
    chosen = (pw.config_of(fn, config, SPACE, DEFAULT) if config is not None
              else TUNER.config((batch, max_seq, tokens, width)))
    bh = min(pw.next_pow2(heads), max(1, int(chosen["tile_cols"]) // head_dim))  # whole heads per tile
    bs = _tile_rows(chosen, start, tokens)
    items = batch * (tokens // bs) * -(-heads // bh)
    blocks = max(1, min(items, int(chosen["max_blocks"])))
    mapped = [t.partition([1, bs, bh * head_dim]).map([1, 1, 1], blocks=blocks) for t in targets]
    factory = cache_update_pair_kernel if len(caches) == 2 else cache_update_heads_kernel
    dtype = caches[0].tensor.dtype
    kernel = factory(dtype, None if pa is None else pa.tensor.dtype)
    if start is not None:
        launch = kernel(*mapped, *sources, start // bs, BH=bh)
    else:
        assert pa is not None
        launch = kernel(*mapped, *sources, pa.tensor, BH=bh)
    if key is not None:  # (a pair of cutile tensors read as they are: what `_pair_launch` keeps)
        _PAIR_PLANS.keep(key, _KeptPair(kernel, sizes, width, (1, bs, bh * head_dim), blocks, bh,
                                        None if start is None else start // bs))
    return pw.Pending(launch, finish)


def _check_positions(values: Any, tokens: int, max_seq: int) -> None:
    """Host positions: one per new token, consecutive, inside the cache.

    Raises:
        ArgumentError: naming ``positions``.
    """
    fn = "kv_cache_update"
    if values.shape != (tokens,):
        raise cutile.ArgumentError(f"{fn}(): parameter 'positions' has shape {list(values.shape)}; expected "
                                   f"[{tokens}] (one position per new token)")
    start = int(values[0])
    apart = np.flatnonzero(values != np.arange(start, start + tokens))
    if apart.size:
        at = int(apart[0])
        raise cutile.ArgumentError(f"{fn}(): parameter 'positions' must be consecutive (start, start + 1, ...); "
                                   f"[{at}] is {int(values[at])}, expected {start + at}")
    if not 0 <= start <= max_seq - tokens:
        raise cutile.ArgumentError(f"{fn}(): parameter 'positions' starts at {start}: the {tokens} new tokens must "
                                   f"fit in the cache's {max_seq} positions (start from 0 to {max_seq - tokens})")


kv_cache_update = pw.library_function(_kv_cache_update_launch)
