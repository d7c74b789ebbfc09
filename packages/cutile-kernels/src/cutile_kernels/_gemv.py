"""Matmul for a small M (1 to 16: decode), reading the weight once at bandwidth.

``small_m_matmul(a, b, out)`` computes ``out = act(alpha * (a @ b) + bias) + residual``
for a weight ``b`` in either layout:

- ``nk``: b is the transposed view of an [N, K] row-major weight (``w.T``, as a linear
  layer stores it): the kernels read that [N, K] matrix in [BN, BK] tiles, contiguous
  along K.
- ``kn``: b is [K, N] row-major (``x @ w``): [BK, BN] tiles, contiguous along N.

Block (s, j) owns the column strip j (``tile_n`` columns of out) and the s-th slice of
K (``split_k`` slices): it loops over its slice with [tile_m, tile_k] tiles of a (all M
rows at once, ``tile_m`` >= M, the extra rows read as zeros: tiny, and served from L2)
and weight tiles, so every byte of the weight is read by exactly one block, once. With
one slice the block applies the epilogue and stores out; with more, each stores its
float32 partial sums into a workspace ``[split_k, M, N]`` (its own tile: nothing is
shared) and a reduction kernel sums the slices of each output tile in a fixed order
(deterministic) and applies the epilogue (`_epilogue.apply_activation`).

The bandwidth arithmetic behind the defaults (`default_config`): an H200 streams HBM
at its copy bandwidth when each of its 132 SMs keeps about 32-64 KiB of loads in flight.
On sm_90 tileiras loads each weight tile by TMA into a shared-memory pipeline several
K steps deep, so a block keeps a few steps in flight and two blocks per SM
(`TARGET_BLOCKS`) reach that: a weight tile per K step is 8-16 KiB (``dot``: at most
DOT_ELEMENTS products in registers) or 32 KiB (``mma_t``), a tile's contiguous axis is
wide enough for 16-byte vectors on every lane (nk: a KiB of each weight row; kn: 512
bytes of each; under 64 bytes a row wastes DRAM sectors), and K is split until the grid
has at least TARGET_BLOCKS blocks.

The product of a block's tiles is a config key (``method``):

- ``dot``: float32 products on the CUDA cores, kept per element (a [tile_m, tile_n,
  tile_k] accumulator) and summed along K once at the end: no reduction across lanes
  in the loop; the default for M <= 2.
- ``sum``: the same products summed along K at every step (a [tile_m, tile_n]
  accumulator): fewer registers, so larger tiles.
- ``mma_t``: the product transposed, ``(w aᵀ)ᵀ``, so the weight tile's N side fills the
  tensor cores' M side (tileiras uses them from 64 weight columns and 8 rows of a,
  which ``tile_m`` pads); the default for M > 2.
- ``mma``: a's rows on the M side (below 64 rows tileiras computes it without tensor
  cores: accepted, not searched).

Configs come from the committed `cutile.tune` record ``records/<arch>/gemv.json``
(`tuner`, `choose`: one winner per bucket of layout, dtype size, M class and N, K
powers of two; made by ``scripts/bench_gemv.py --write``), else `default_config`.
"""

# (no `from __future__ import annotations`: the kernels' annotations name closure variables)

import functools
import inspect
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

import cutile
from cutile import api, tune
from cutile.core import Constant, Mut, Tensor, cdiv, f32, fma, get_tile_block_id, i32, minimum, mma, sum, \
    transpose, zeros
from cutile.tune import Config, Space

from cutile_kernels import _epilogue, _records, _splitk
from cutile_kernels._epilogue import apply_activation
from cutile_kernels._operands import derived
from cutile_kernels._splitk import (
    SM_COUNT,
    Choices,
    Operands,
    check_config,
    check_operands,
    entry_hints,
    hints_of,
    next_power_of_two,
)

__all__ = ["MAX_M", "SPACE", "choose", "default_config", "gemv_bucket", "prune", "prune_for", "small_m_matmul",
           "tuner", "use_records"]

MAX_M = 16
METHODS = ("dot", "sum", "mma_t", "mma")
CONFIG_KEYS: dict[str, Choices] = {
    "tile_m": (1, 2, 4, 8, 16), "tile_n": None, "tile_k": None, "split_k": range(1, 65), "method": METHODS,
    "num_worker_warps": tune.WORKER_WARPS, "occupancy": range(1, 33), "latency": range(11),
}
TARGET_BLOCKS = 2 * SM_COUNT  # two blocks per SM keep enough loads in flight
MAX_WEIGHT_TILE_BYTES = 32 * 1024  # an mma_t block's weight tile per K step (staged in shared memory)
DOT_ELEMENTS = 8192  # float32 products a dot block keeps: 64 registers a thread at 4 warps, no spills
ROW_BYTES = {True: 1024, False: 512}  # bytes of the contiguous axis per tile row (nk: along K; kn: along N)
MIN_CONTIGUOUS_BYTES = 64  # a narrower contiguous axis wastes DRAM sectors: pruned
MIN_STEPS_PER_SPLIT = 2  # K is not split into slices of fewer tile steps
REDUCE_ELEMENTS = 4096  # the reduction's tile at most (memory bound, spread over the SMs)

#: the tuning space of the records (one for every dtype: the record's buckets hold the
#: dtype's size); `prune_for` drops what cannot run or win at a shape
SPACE = Space(method=["dot", "sum", "mma_t"], tile_m=[1, 2, 8, 16], tile_n=[8, 16, 32, 64, 128, 256, 512],
              tile_k=[16, 32, 64, 128, 256, 512, 1024], split_k=[1, 2, 3, 4, 6, 8, 12, 16, 24, 32],
              num_worker_warps=[4, 8], occupancy=[1, 2, 4], latency=[0, 3, 6])


# -- kernels ------------------------------------------------------------------------------------
# Built per dtype, weight layout, method and epilogue (closure constants: each combination is one
# kernel, its untaken branches folded away) and per hints. K is read from a's shape at run time,
# so one kernel serves every K; the tiles come from the output's partition and BK.

def _product(weight_nk: bool, method: str, latency: int | None) -> Any:
    """The device function summing a[:, k-chunk] @ weight[k-chunk, bn-strip] over the K
    chunks [first, last) into a float32 [BM, BN] tile."""
    if method == "mma_t" and weight_nk:
        @cutile.function
        def product(a: Any, w: Any, bn: Any, first: Any, last: Any, BM: int, BN: int, BK: int) -> Any:
            acc = zeros((BN, BM), f32)
            for k in range(first, last):
                acc = mma(w.load(index=(bn, k), shape=(BN, BK), latency=latency),
                          transpose(a.load(index=(0, k), shape=(BM, BK))), acc)
            return transpose(acc)
    elif method == "mma_t":
        @cutile.function
        def product(a: Any, w: Any, bn: Any, first: Any, last: Any, BM: int, BN: int, BK: int) -> Any:
            acc = zeros((BN, BM), f32)
            for k in range(first, last):
                acc = mma(transpose(w.load(index=(k, bn), shape=(BK, BN), latency=latency)),
                          transpose(a.load(index=(0, k), shape=(BM, BK))), acc)
            return transpose(acc)
    elif method == "mma" and weight_nk:
        @cutile.function
        def product(a: Any, w: Any, bn: Any, first: Any, last: Any, BM: int, BN: int, BK: int) -> Any:
            acc = zeros((BM, BN), f32)
            for k in range(first, last):
                acc = mma(a.load(index=(0, k), shape=(BM, BK)),
                          transpose(w.load(index=(bn, k), shape=(BN, BK), latency=latency)), acc)
            return acc
    elif method == "mma":
        @cutile.function
        def product(a: Any, w: Any, bn: Any, first: Any, last: Any, BM: int, BN: int, BK: int) -> Any:
            acc = zeros((BM, BN), f32)
            for k in range(first, last):
                acc = mma(a.load(index=(0, k), shape=(BM, BK)), w.load(index=(k, bn), shape=(BK, BN), latency=latency),
                          acc)
            return acc
    elif method == "dot" and weight_nk:  # products kept per element, summed along K once at the end
        @cutile.function
        def product(a: Any, w: Any, bn: Any, first: Any, last: Any, BM: int, BN: int, BK: int) -> Any:
            acc = zeros((BM, BN, BK), f32)
            for k in range(first, last):
                x = a.load(index=(0, k), shape=(BM, BK)).astype(f32).reshape((BM, 1, BK))
                wt = w.load(index=(bn, k), shape=(BN, BK), latency=latency).astype(f32).reshape((1, BN, BK))
                acc = fma(x, wt, acc)  # one FFMA a product (acc + x * wt is not contracted)
            return sum(acc, axis=2)
    elif method == "dot":
        @cutile.function
        def product(a: Any, w: Any, bn: Any, first: Any, last: Any, BM: int, BN: int, BK: int) -> Any:
            acc = zeros((BM, BK, BN), f32)
            for k in range(first, last):
                x = a.load(index=(0, k), shape=(BM, BK)).astype(f32).reshape((BM, BK, 1))
                wt = w.load(index=(k, bn), shape=(BK, BN), latency=latency).astype(f32).reshape((1, BK, BN))
                acc = fma(x, wt, acc)
            return sum(acc, axis=1)
    elif weight_nk:  # "sum": summed along K at every step
        @cutile.function
        def product(a: Any, w: Any, bn: Any, first: Any, last: Any, BM: int, BN: int, BK: int) -> Any:
            acc = zeros((BM, BN), f32)
            for k in range(first, last):
                x = a.load(index=(0, k), shape=(BM, BK)).astype(f32).reshape((BM, 1, BK))
                wt = w.load(index=(bn, k), shape=(BN, BK), latency=latency).astype(f32).reshape((1, BN, BK))
                acc = acc + sum(x * wt, axis=2)
            return acc
    else:
        @cutile.function
        def product(a: Any, w: Any, bn: Any, first: Any, last: Any, BM: int, BN: int, BK: int) -> Any:
            acc = zeros((BM, BN), f32)
            for k in range(first, last):
                x = a.load(index=(0, k), shape=(BM, BK)).astype(f32).reshape((BM, BK, 1))
                wt = w.load(index=(k, bn), shape=(BK, BN), latency=latency).astype(f32).reshape((1, BK, BN))
                acc = acc + sum(x * wt, axis=1)
            return acc
    return product


def _finish(activation: int, has_bias: bool, has_residual: bool, out_dtype: Any) -> Any:
    """The device function taking the float32 product tile of column strip ``bn`` to
    out's tile: act(alpha * acc + bias) + residual, rounded once to out's dtype."""
    @cutile.function
    def finish(acc: Any, alpha: Any, bias: Any, residual: Any, bn: Any, BM: int, BN: int) -> Any:
        y = acc * alpha
        if has_bias:
            y = y + bias.load(index=(bn,), shape=(BN,)).astype(f32).reshape((1, BN))
        y = apply_activation(y, activation)
        if has_residual:
            y = y + residual.load(index=(0, bn), shape=(BM, BN)).astype(f32)
        return y.astype(out_dtype)
    return finish


def _weight_annotation(in_dtype: Any) -> Any:
    return Tensor[in_dtype, [-1, -1]]


@functools.cache
def direct_kernel(in_dtype: Any, out_dtype: Any, bias_dtype: Any, residual_dtype: Any, weight_nk: bool, method: str,
                  activation: int, has_bias: bool, has_residual: bool,
                  hints: tuple[tuple[str, int], ...]) -> cutile.Kernel[..., Any]:
    """One block per column strip of out: the whole K loop, then the epilogue."""
    product = _product(weight_nk, method, dict(hints).get("latency"))
    finish = _finish(activation, has_bias, has_residual, out_dtype)

    @cutile.entry(hints=entry_hints(hints))
    def gemv_direct(out: Mut[Tensor[out_dtype, ["BM", "BN"]]], a: Tensor[in_dtype, [-1, -1]],  # type: ignore[misc, name-defined]  # dtypes of the factory
                    w: _weight_annotation(in_dtype),  # type: ignore[valid-type]
                    bias: Tensor[bias_dtype, [-1]], residual: Tensor[residual_dtype, [-1, -1]], alpha: f32,  # type: ignore[misc]  # dtypes of the factory
                    BM: Constant[int], BN: Constant[int], BK: Constant[int]) -> None:
        _, bn, _ = get_tile_block_id()
        acc = product(a, w, bn, 0, cdiv(a.shape[1], BK), BM, BN, BK)
        out.store(finish(acc, alpha, bias, residual, bn, BM, BN))

    return gemv_direct


@functools.cache
def partial_kernel(in_dtype: Any, weight_nk: bool, method: str,
                   hints: tuple[tuple[str, int], ...]) -> cutile.Kernel[..., Any]:
    """Block (s, 0, j) sums the K chunks [s * steps_per_split, (s + 1) * steps_per_split)
    of column strip j into the workspace tile (s, 0, j), float32 and without epilogue (an
    empty slice stores zeros)."""
    product = _product(weight_nk, method, dict(hints).get("latency"))

    @cutile.entry(hints=entry_hints(hints))
    def gemv_partial(partial: Mut[Tensor[f32, [1, "BM", "BN"]]], a: Tensor[in_dtype, [-1, -1]],  # type: ignore[misc, name-defined]  # dtypes of the factory
                     w: _weight_annotation(in_dtype),  # type: ignore[valid-type]
                     steps_per_split: i32, BM: Constant[int], BN: Constant[int], BK: Constant[int]) -> None:
        split, _, bn = get_tile_block_id()
        steps = cdiv(a.shape[1], BK)
        acc = product(a, w, bn, minimum(split * steps_per_split, steps),
                      minimum((split + 1) * steps_per_split, steps), BM, BN, BK)
        partial.store(acc.reshape((1, BM, BN)))

    return gemv_partial


@functools.cache
def reduce_kernel(out_dtype: Any, bias_dtype: Any, residual_dtype: Any, activation: int, has_bias: bool,
                  has_residual: bool) -> cutile.Kernel[..., Any]:
    """One block per [BM, BN] tile of out: the workspace's slices of it summed in slice
    order, then the epilogue."""
    finish = _finish(activation, has_bias, has_residual, out_dtype)

    @cutile.entry
    def gemv_reduce(out: Mut[Tensor[out_dtype, ["BM", "BN"]]], partial: Tensor[f32, [-1, -1, -1]],  # type: ignore[misc, name-defined]  # dtypes of the factory
                    bias: Tensor[bias_dtype, [-1]], residual: Tensor[residual_dtype, [-1, -1]], alpha: f32,  # type: ignore[misc]  # dtypes of the factory
                    BM: Constant[int], BN: Constant[int]) -> None:
        _, bn, _ = get_tile_block_id()
        acc = zeros((BM, BN), f32)
        for s in range(partial.shape[0]):
            acc = acc + partial.load(index=(s, 0, bn), shape=(1, BM, BN)).reshape((BM, BN))
        out.store(finish(acc, alpha, bias, residual, bn, BM, BN))

    return gemv_reduce


def reduce_tiles(m: int, n: int) -> tuple[int, int]:
    """The reduction's tile: all of M, and columns enough for about TARGET_BLOCKS blocks
    (at least 16, at most REDUCE_ELEMENTS elements a tile): it reads the workspace from
    L2, spread over the SMs."""
    tile_m = next_power_of_two(m)
    wanted = max(1, n // TARGET_BLOCKS)
    columns = 1 << (wanted.bit_length() - 1)  # the power of two at or below
    return tile_m, min(max(16, columns), max(16, REDUCE_ELEMENTS // tile_m), max(16, next_power_of_two(n)))


def steps_per_split(k: int, tile_k: int, splits: int) -> int:
    return math.ceil(math.ceil(k / tile_k) / splits)


def _launches(ops: Operands, config: Mapping[str, Any]) -> tuple[tuple[Any, tuple[Any, ...], dict[str, int]], ...]:
    """What a call launches: (kernel, positional arguments, constants) per kernel, in order."""
    tile_m, tile_n, tile_k, splits = (int(config[key]) for key in ("tile_m", "tile_n", "tile_k", "split_k"))
    method, hints, out = str(config["method"]), hints_of(config), ops.out

    def out_tiles(tile: tuple[int, int]) -> Any:
        # A partition of a view of out: out itself is not consumed, so the caller keeps using it.
        return derived(out, ("gemv_tiles", tile), lambda: out[...].partition(list(tile)))

    if splits == 1:
        kernel = direct_kernel(ops.a.dtype, out.dtype, ops.bias.dtype, ops.residual.dtype, ops.weight_nk, method,
                               ops.activation, ops.has_bias, ops.has_residual, hints)
        return ((kernel, (out_tiles((tile_m, tile_n)), ops.a, ops.weight, ops.bias, ops.residual, ops.alpha),
                 {"BK": tile_k}),)
    # One workspace per out and split count: a second call while the first is pending is
    # refused (the workspace is held), as it would be for out.
    workspace = derived(out, ("gemv_workspace", splits), lambda: api.empty([splits, ops.m, ops.n], dtype=f32))
    workspace_tiles = derived(workspace, ("gemv_tiles", tile_m, tile_n),
                              lambda: workspace[...].partition([1, tile_m, tile_n]))
    partial = partial_kernel(ops.a.dtype, ops.weight_nk, method, hints)
    reduce = reduce_kernel(out.dtype, ops.bias.dtype, ops.residual.dtype, ops.activation, ops.has_bias,
                           ops.has_residual)
    return ((partial, (workspace_tiles, ops.a, ops.weight, steps_per_split(ops.k, tile_k, splits)), {"BK": tile_k}),
            (reduce, (out_tiles(reduce_tiles(ops.m, ops.n)), workspace, ops.bias, ops.residual, ops.alpha), {}))


def _run(ops: Operands, config: Mapping[str, Any]) -> Any:
    """The launch (one slice of K) or the op (partial sums, then their reduction),
    holding the caller's tensors from the call (`_splitk.run`)."""
    return _splitk.run(_launches(ops, config), _splitk.holding(
        "small_m_matmul", ops.a, ops.weight, ops.out, ops.bias if ops.has_bias else None,
        ops.residual if ops.has_residual else None))


def _checked(function: str, a: Any, b: Any, out: Any, bias: Any, activation: Any, residual: Any, alpha: Any,
             config: Mapping[str, Any] | None) -> tuple[Operands, dict[str, Any]]:
    ops = check_operands(function, a, b, out, bias, activation, residual, alpha)
    if ops.m > MAX_M:
        raise cutile.ArgumentError(f"{function}: a has {ops.m} rows; this path takes 1 to {MAX_M} "
                                   "(use split_k_matmul or matmul)")
    # The merged config depends on the shape, dtype, weight layout and config= alone: a
    # call with those of an earlier one takes its (read-only) result.
    shape = (function, ops.m, ops.n, ops.k, ops.a.dtype, ops.weight_nk)
    key: tuple[Any, ...] | None = (*shape, None)
    if config is not None:
        try:
            # (values with their types: True == 1 and 16.0 == 16, which check_config refuses)
            key = (*shape, tuple((k, type(v), v) for k, v in config.items())) if type(config) is dict else None
            hash(key)
        except TypeError:  # an unhashable value: check_config names it
            key = None
    cfg = _CONFIGS.get(key) if key is not None else None
    if cfg is None:
        cfg = check_config(function, config, default_config(ops.m, ops.n, ops.k, ops.a.dtype,
                                                            weight_nk=ops.weight_nk), CONFIG_KEYS)
        if cfg["tile_m"] < ops.m:
            raise cutile.ArgumentError(f"{function}: config['tile_m'] is {cfg['tile_m']}; a block takes all "
                                       f"{ops.m} rows of a, so it must be at least {next_power_of_two(ops.m)}")
        if key is not None:
            if len(_CONFIGS) >= 1024:
                _CONFIGS.clear()
            _CONFIGS[key] = cfg
    return ops, cfg


_CONFIGS: dict[tuple[Any, ...], dict[str, Any]] = {}  # (function, shape, dtype, layout, config=) -> merged config


def small_m_matmul(a: cutile.Tensor, b: cutile.Tensor, out: cutile.Tensor, *, bias: cutile.Tensor | None = None,
                   activation: str | None = None, residual: cutile.Tensor | None = None, alpha: float = 1.0,
                   config: Mapping[str, Any] | None = None) -> Any:
    """``out = act(alpha * (a @ b) + bias) + residual`` for 1 <= M <= 16, streaming the
    weight b once.

    Args:
        a: [M, K], f16, bf16 or f32 (any strides), M from 1 to 16.
        b: [K, N], a's dtype: a weight stored [N, K] passed as ``w.T`` is read as stored
            (contiguous along K); a [K, N] row-major b is read along N.
        out: [M, N], f16, bf16 or f32 (written; the call keeps it usable).
        bias: [N] or None. activation: None, "relu", "gelu" (tanh approximation), "silu".
        residual: [M, N] or None (not out's memory). alpha: the product's scale.
        config: keys ``tile_m`` (rows of a per block: M's power of two, or more, padded,
            up to 16), ``tile_n``, ``tile_k`` (powers of two), ``split_k`` (1-64),
            ``method`` ("dot", "sum", "mma_t" or "mma"), ``num_worker_warps``,
            ``occupancy``, ``latency`` (the weight loads' hint, 1-10; 0: none); missing
            keys from `default_config`.
    Returns:
        The pending launch (``split_k`` 1) or op (the partials, then the
        reduction), not yet run, holding its operands and out from the call: ``.sync()``, ``await``,
        ``.schedule()`` or `cutile.bench.do_bench` run it.
    Raises:
        ArgumentError, ArgumentTypeError: a malformed argument (named in the message),
            including an M outside 1-16.
    """
    ops, cfg = _checked("small_m_matmul", a, b, out, bias, activation, residual, alpha, config)
    return _run(ops, cfg)


def launches_of(a: cutile.Tensor, b: cutile.Tensor, out: cutile.Tensor,
                config: Mapping[str, Any] | None) -> tuple[tuple[Any, tuple[Any, ...], dict[str, int]], ...]:
    """What ``small_m_matmul(a, b, out, config=config)`` would launch, not launched:
    (kernel, positional arguments, constants) per kernel, in order (a sweep makes them
    in one thread, then compiles them in several: `cutile.compile`)."""
    ops, cfg = _checked("small_m_matmul", a, b, out, None, None, None, 1.0, config)
    return _launches(ops, cfg)


# -- configs --------------------------------------------------------------------------------------

def _splits(n: int, k: int, tile_n: int, tile_k: int) -> int:
    """Slices of K for at least TARGET_BLOCKS blocks: at most about 32, each of at least
    MIN_STEPS_PER_SPLIT K tiles (none empty)."""
    strips = math.ceil(n / tile_n)
    steps = math.ceil(k / tile_k)
    if strips >= TARGET_BLOCKS or steps < 2 * MIN_STEPS_PER_SPLIT:
        return 1
    wanted = min(32, steps // MIN_STEPS_PER_SPLIT, math.ceil(TARGET_BLOCKS / strips))
    return math.ceil(steps / (steps // wanted))  # slices of steps // wanted tiles: at least `wanted` of them


def default_config(m: int, n: int, k: int, dtype: Any, *, weight_nk: bool = True) -> dict[str, Any]:
    """The config used when no record matches (see the module docstring's arithmetic).

    M <= 2: ``dot`` with DOT_ELEMENTS products per block. nk: K tiles of a KiB of each
    weight row, the widest N tile (8-32) that still gives two blocks per SM. kn: N tiles
    of 512 bytes of each weight row, K tiles filling the products. M > 2: ``mma_t``
    (tileiras uses the tensor cores from 64 weight columns and 8 rows of a: a is padded
    to 8), weight tiles of 32 KiB: nk 128 (or 64) weight rows of K, kn 128-column tiles.
    Either way K is split when the N strips alone give fewer than two blocks per SM."""
    itemsize = 4 if dtype is f32 else 2
    rows = next_power_of_two(m)
    k_cap, n_cap = max(16, next_power_of_two(k)), max(16, next_power_of_two(n))
    if rows <= 2:
        method, tile_m = "dot", rows
        if weight_nk:
            tile_k = min(ROW_BYTES[True] // itemsize, k_cap)
            tile_n = 8
            for candidate in (32, 16):
                if rows * candidate * tile_k <= DOT_ELEMENTS and math.ceil(n / candidate) >= TARGET_BLOCKS:
                    tile_n = candidate
                    break
        else:
            tile_n = min(ROW_BYTES[False] // itemsize, n_cap)
            tile_k = min(max(16, DOT_ELEMENTS // (rows * tile_n)), k_cap)
    else:
        method, tile_m = "mma_t", max(8, rows)
        if weight_nk:
            tile_n = 128 if math.ceil(n / 128) >= TARGET_BLOCKS else 64
        else:
            tile_n = min(128, n_cap) if n_cap >= 64 else 64
        tile_k = min(MAX_WEIGHT_TILE_BYTES // (tile_n * itemsize), k_cap)
    return {"tile_m": tile_m, "tile_n": tile_n, "tile_k": tile_k, "split_k": _splits(n, k, tile_n, tile_k),
            "method": method, "num_worker_warps": 4}


def prune(config: Mapping[str, Any]) -> bool:
    """The shape-free part of `prune_for`: ``mma_t`` with fewer than 64 weight columns or
    8 rows of a (no tensor cores), ``dot`` past twice DOT_ELEMENTS products (spills),
    ``sum`` past eight times."""
    tile_m, tile_n, tile_k = int(config["tile_m"]), int(config["tile_n"]), int(config["tile_k"])
    if config["method"] == "mma_t":
        return tile_n >= 64 and tile_m >= 8
    if config["method"] == "dot":
        return tile_m * tile_n * tile_k <= 2 * DOT_ELEMENTS
    if config["method"] == "sum":
        return tile_m * tile_n * tile_k <= 8 * DOT_ELEMENTS
    return True


def prune_for(m: int, n: int, k: int, *, weight_nk: bool = True, itemsize: int = 2) -> Callable[[Config], bool]:
    """A ``prune`` for `cutile.tune.search` at one shape and layout: False for configs
    that cannot run or win there (a tile_m below M or padding more than the tensor cores
    need, tiles past N's or K's power of two, a contiguous axis under 64 bytes, splits
    when N alone fills the GPU or past K's chunks), and those `prune` drops."""
    rows = next_power_of_two(m)

    def keep(config: Config) -> bool:
        tile_m, tile_n, tile_k = int(config["tile_m"]), int(config["tile_n"]), int(config["tile_k"])
        splits = int(config["split_k"])
        if tile_m < rows or tile_m > max(rows, 8 if config["method"] == "mma_t" else rows):
            return False
        if tile_k > max(16, next_power_of_two(k)) or tile_n > max(8, next_power_of_two(n)):
            return False
        if (tile_k if weight_nk else tile_n) * itemsize < MIN_CONTIGUOUS_BYTES:
            return False
        if splits > 1 and (math.ceil(n / tile_n) >= TARGET_BLOCKS or splits > math.ceil(k / tile_k)):
            return False
        return prune(config)

    return keep


def fit(config: Mapping[str, Any], m: int, n: int, k: int) -> dict[str, Any]:
    """A record's winner for the call: tile_m raised to M's power of two (a winner of the
    bucket's M class), tiles cut to the problem's powers of two, splits to K's chunks."""
    fitted = dict(config)
    fitted["tile_m"] = max(int(config["tile_m"]), next_power_of_two(m))
    fitted["tile_n"] = min(int(config["tile_n"]), max(16, next_power_of_two(n)))
    fitted["tile_k"] = min(int(config["tile_k"]), max(16, next_power_of_two(k)))
    fitted["split_k"] = max(1, min(int(config["split_k"]), math.ceil(k / fitted["tile_k"])))
    return fitted


def _class(n: int, low: int, high: int) -> int:
    return min(max(next_power_of_two(n), low), high)


def gemv_bucket(shape: Any) -> str:
    """The record bucket of a call ``(m, n, k, itemsize, weight_nk)``: the layout, the
    dtype's size (f16 and bf16 share winners: the same bytes), M's class (1, or 2-16:
    M = 1 takes the CUDA-core products, more rows the tensor cores), N and K rounded up
    to powers of two within [64, 262144] and [64, 65536]."""
    m, n, k, itemsize, weight_nk = (int(s) for s in shape)
    return (f"{'nk' if weight_nk else 'kn'}_e{itemsize}_m{1 if m == 1 else 16}_n{_class(n, 64, 262144)}"
            f"_k{_class(k, 64, 65536)}")


def kernel_source() -> str:
    """What the record's provenance hashes: the kernels, their products and epilogue
    (with the epilogue's activations), and how a config launches them; not the host
    code around them, whose changes leave every winner's timing as it was."""
    parts = (_product, _finish, _weight_annotation, direct_kernel, partial_kernel, reduce_kernel, reduce_tiles,
             steps_per_split, _launches)
    return "".join(inspect.getsource(part) for part in parts) + inspect.getsource(_epilogue)


# -- the tuner ------------------------------------------------------------------------------------

#: shape -> (host a, host weight as stored, device a, device b view, output): the latest one only
_INPUTS: dict[str, tuple[tuple[int, ...], Any, Any, cutile.Tensor, cutile.Tensor, cutile.Tensor]] = {}


def tuning_inputs(shape: tuple[int, ...]) -> tuple[Any, Any, cutile.Tensor, cutile.Tensor, cutile.Tensor]:
    """Random operands of a tuning shape ``(m, n, k, itemsize, weight_nk)`` (bf16 for
    2-byte dtypes, f32 for 4), made on the host and copied once: (host a, host weight in
    its stored layout, a, b, out)."""
    found = _INPUTS.get("latest")
    if found is None or found[0] != shape:
        m, n, k, itemsize, weight_nk = shape
        dtype = f32 if itemsize == 4 else cutile.core.bf16
        rng = np.random.default_rng(0)
        numpy_dtype = np.dtype(dtype.numpy_name)
        host_a = rng.standard_normal((m, k), dtype=np.float32).astype(numpy_dtype)
        host_w = rng.standard_normal((n, k) if weight_nk else (k, n), dtype=np.float32).astype(numpy_dtype)
        stored = api.from_numpy(host_w, dtype)
        out = api.empty([m, n], dtype=dtype)
        found = (shape, host_a, host_w, api.from_numpy(host_a, dtype), stored.T if weight_nk else stored, out)
        _INPUTS["latest"] = found
    return found[1:]


def _setup(config: Config, shape: tuple[int, ...]) -> Callable[[], Any]:
    m, n, k, itemsize, weight_nk = shape
    if not prune_for(m, n, k, weight_nk=bool(weight_nk), itemsize=itemsize)(config):
        raise cutile.ArgumentError(f"small_m_matmul: config {config} cannot run or win at shape {shape}")
    _, _, a, b, out = tuning_inputs(shape)
    chosen = dict(config)
    return lambda: small_m_matmul(a, b, out, config=chosen)


def check_sampled(out: cutile.Tensor, host_a: Any, host_w: Any, weight_nk: bool) -> bool:
    """Whether out holds a @ w (w as stored: [N, K] for nk, else [K, N]) at up to 256
    columns (the last among them), against float64: the tuning gate."""
    n = out.shape[1]
    cols = np.unique(np.linspace(0, n - 1, num=min(n, 256)).astype(np.int64))
    got = out.to_numpy().astype(np.float64)[:, cols]
    w_cols = host_w[cols, :].T if weight_nk else host_w[:, cols]
    expected = host_a.astype(np.float64) @ w_cols.astype(np.float64)
    scale = max(1.0, float(np.abs(expected).max()))
    tolerance = 1e-4 if out.dtype == f32 else 2e-2
    return bool(np.isfinite(got).all() and np.allclose(got, expected, rtol=0, atol=tolerance * scale))


def _reference(shape: tuple[int, ...]) -> Callable[[Any], bool]:
    def gate(_: Any) -> bool:
        host_a, host_w, _, _, out = tuning_inputs(shape)
        return check_sampled(out, host_a, host_w, bool(shape[4]))
    return gate


_TUNERS = _records.RecordTuners("gemv", SPACE, _setup, source=kernel_source, reference=_reference, bucket=gemv_bucket,
                                  prune=prune)


def tuner(*, records_dir: Path | str | None = None) -> tune.Tuner:
    """The tuner of the GEMV kernels: its record is this arch's ``gemv.json`` in
    ``records_dir`` (default: the folder `use_records` set, the package's records),
    its searches over `SPACE` gated by `check_sampled` (a search on first use,
    ``CUTILE_TUNE=1``, is bounded to two minutes a shape)."""
    return _TUNERS.get(records_dir)


def use_records(records_dir: Path | str | None) -> None:
    """Makes `choose` (and so matmul) read the records of ``records_dir`` (None: the
    package's), read again from disk; matmul's cached plans are forgotten."""
    from cutile_kernels import _matmul  # (it imports this module)

    _TUNERS.use(records_dir)
    _matmul.forget_plans()


def choose(m: int, n: int, k: int, dtype: Any, *, weight_nk: bool) -> dict[str, Any]:
    """The config of a call: the record's (or cache's, or a search's) winner of its
    bucket, fitted to the call (`fit`), else the default."""
    return _TUNERS.choose((m, n, k, 4 if dtype is f32 else 2, int(weight_nk)), lambda cfg: fit(cfg, m, n, k),
                          lambda: default_config(m, n, k, dtype, weight_nk=weight_nk))

