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
from typing import Any

import numpy as np

import cutile
from cutile import api, tune
from cutile.core import Constant, Mut, Tensor, i32

from cutile_kernels import _pointwise as pw
from cutile_kernels._operands import Operand, as_tensor, host_values, integer_values

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


def _setup(config: dict[str, Any], shape: tuple[int, ...]) -> Any:
    """A search's runner for one shape: (batch, max_seq, new tokens, heads * head_dim), bf16."""
    batch, max_seq, count, width = shape
    cache = api.zeros([batch, max_seq, 1, width], dtype="bf16")
    new = api.randn([batch, count, 1, width], "bf16", seed=1)
    return lambda: kv_cache_update.launch(cache, new, max_seq - count, config=config).op


TUNER = pw.tuner("kv_cache_update", SPACE, DEFAULT, _setup, inspect.getsource(cache_update_kernel))


def _kv_cache_update_launch(cache: Any, new: Any, positions: Any, *,
                            config: dict[str, Any] | None = None) -> pw.Pending:
    """Writes ``new`` into ``cache`` at ``positions`` (in place) and returns the cache.

    Args:
        cache: ``(max_seq, heads, head_dim)`` or ``(batch, max_seq, heads, head_dim)``,
            f16, bf16 or f32, contiguous.
        new: the same layout and dtype with ``tokens`` for ``max_seq`` (contiguous).
        positions: an int (the first position), or a list of ints or an i32 / i64
            tensor of shape ``(tokens,)`` holding consecutive positions (checked on the
            host when the host holds them; a device tensor by the kernel's asserts, see
            the module doc).
        config: a config of `SPACE` (default: the tuner's for this shape).
    """
    fn = "kv_cache_update"
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
        ca, na, pa, batch, max_seq, tokens, start = _checked(cache, new, positions)
        if key is not None:
            if len(_CHECKED) >= 1024:
                _CHECKED.clear()
            _CHECKED[key] = (batch, max_seq, tokens, start)
    width = math.prod(ca.shape[-2:])
    cache3 = pw.reshaped(ca, (batch, max_seq, width), fn, "cache")
    new3 = pw.reshaped(na, (batch, tokens, width), fn, "new")
    chosen = pw.config_of(fn, config, SPACE, DEFAULT) if config is not None else TUNER.config((batch, max_seq, tokens, width))
    bw = min(int(chosen["tile_cols"]), pw.next_pow2(width))
    bs = 1
    if start is not None:  # whole tiles of new rows: bs divides the start and the count
        while bs * 2 <= int(chosen["tile_rows"]) and start % (bs * 2) == 0 and tokens % (bs * 2) == 0:
            bs *= 2
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


def _checked(cache: Any, new: Any, positions: Any) -> tuple[Operand, Operand, Operand | None, int, int, int, int | None]:
    """The arguments checked: (cache, new, positions' tensor or None, batch, max_seq, tokens, an int start or None)."""
    fn = "kv_cache_update"
    ca, na = as_tensor(cache, fn, "cache"), as_tensor(new, fn, "new")
    pw.check_dtype(ca, pw.FLOAT_DTYPES, fn, "cache")
    pw.check_same_dtype(ca, na, fn, "cache", "new")
    pw.check_rank(ca, (3, 4), fn, "cache")
    if len(na.shape) != len(ca.shape):
        raise cutile.ArgumentError(f"{fn}(): parameter 'new' {list(na.shape)} must have the rank of 'cache' "
                                   f"{list(ca.shape)}")
    batched = len(ca.shape) == 4
    batch = ca.shape[0] if batched else 1
    max_seq, tokens = ca.shape[-3], na.shape[-3]
    if na.shape[:-3] != ca.shape[:-3] or na.shape[-2:] != ca.shape[-2:]:
        raise cutile.ArgumentError(f"{fn}(): parameter 'new' of shape {list(na.shape)} must match 'cache' "
                                   f"{list(ca.shape)} but for its token count (dim {len(ca.shape) - 3})")
    if tokens == 0:
        raise cutile.ArgumentError(f"{fn}(): parameter 'new' holds no tokens (shape {list(na.shape)})")
    if max_seq >= 2**31:
        raise cutile.ArgumentError(f"{fn}(): a cache of {max_seq} positions is longer than 2**31 - 1")
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
    return ca, na, pa, batch, max_seq, tokens, start


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
