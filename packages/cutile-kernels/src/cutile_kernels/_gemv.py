"""Matmul for a small M (1 to 16: decode), reading the weight once at bandwidth.

``small_m_matmul(a, b, out)`` computes ``out = act(alpha * (a @ b) + bias) + residual``
with each block owning a slice of N: it loops over K with wide tiles, all M rows at
once (the a tile is [tile_m, BK], tile_m >= M with its extra rows read as zeros: tiny,
and served from L2), so every byte of the weight is read by exactly one block, once. A linear layer's weight stored [N, K]
row-major and passed as its transposed view ``w.T`` is read as stored, along K.
When N / tile_n gives too few blocks to fill the GPU, ``split_k`` > 1 splits K among
blocks too: float32 partial sums into a workspace, then a reduction kernel with the
epilogue (the kernels of `cutile_kernels._splitk`).

The product of a block's tiles is a config key: ``mma_t`` (the product transposed,
``(w aᵀ)ᵀ``, so the weight tile's N rows fill the tensor cores' M side: tileiras uses
them for 64 or more weight rows and 8 or more rows of a, which ``tile_m`` pads), ``dot``
(float32 products on the CUDA cores, kept per element and summed along K once; the
choice for M <= 2) or ``mma`` (a's rows on the M side: below 64 rows tileiras computes
it without tensor cores, so it is accepted but not searched).
"""

import math
from collections.abc import Callable, Mapping
from typing import Any

import cutile
from cutile.core import bf16, f16, f32
from cutile.tune import Config, Space

from cutile_kernels._splitk import (
    METHODS,
    SM_COUNT,
    Choices,
    check_config,
    check_operands,
    hints_of,
    next_power_of_two,
    run_matmul,
)

__all__ = ["MAX_M", "default_config", "prune_for", "small_m_matmul", "space"]

MAX_M = 16
CONFIG_KEYS: dict[str, Choices] = {
    "tile_m": (1, 2, 4, 8, 16), "tile_n": None, "tile_k": None, "split_k": range(1, 65), "method": METHODS,
    "num_worker_warps": (1, 2, 4, 8, 16, 32), "occupancy": range(1, 33), "latency": range(11),
}
TARGET_BLOCKS = 2 * SM_COUNT  # two blocks per SM keep enough loads in flight
MAX_WEIGHT_TILE_BYTES = 32 * 1024  # an mma_t default's weight tile per K step (its stages share shared memory)
DOT_ELEMENTS = 8192  # float32 products a dot block keeps: 64 registers a thread at 4 warps, no spills


def space(dtype: Any) -> Space:
    """The search space for ``dtype`` (f16, bf16 or f32): tiles, splits of K, the product
    method (``mma_t`` and ``dot``: ``mma`` puts a's few rows on the tensor cores' M side,
    which tileiras then computes without them) and the hints. `prune_for` drops the
    configs pointless for a shape."""
    wide_k = [128, 256, 512, 1024] if dtype in (f16, bf16) else [64, 128, 256, 512]
    return Space(tile_m=[1, 2, 4, 8, 16], tile_n=[8, 16, 32, 64, 128], tile_k=wide_k, split_k=[1, 2, 4, 8],
                 method=["mma_t", "dot"], num_worker_warps=[4, 8], occupancy=[1, 2])


def _splits(n: int, k: int, tile_n: int, tile_k: int) -> int:
    """Splits of K for about TARGET_BLOCKS blocks (at most 8, at most K's chunks)."""
    blocks = math.ceil(n / tile_n)
    if blocks >= TARGET_BLOCKS:
        return 1
    return max(1, min(8, math.ceil(k / tile_k), math.ceil(TARGET_BLOCKS / blocks)))


def default_config(m: int, n: int, k: int, dtype: Any) -> dict[str, Any]:
    """The config used when no record matches.

    M <= 2: ``dot``, float32 products kept per element (no more than DOT_ELEMENTS of
    them per block) over K tiles of 1 KiB of a weight row, with the widest N tile that
    still gives two blocks per SM. M > 2: ``mma_t``, the weight tile on the tensor cores'
    M side (tileiras uses them from 64 weight rows and 8 rows of a: a is padded to 8),
    weight tiles of 32 KiB. Either way K is split when the N tiles alone give fewer than
    two blocks per SM."""
    itemsize = 4 if dtype is f32 else 2
    rows = next_power_of_two(m)
    k_cap = max(16, next_power_of_two(k))
    if rows <= 2:
        tile_k = min(1024 // itemsize, k_cap)
        tile_n = 8
        for candidate in (32, 16):
            if rows * candidate * tile_k <= DOT_ELEMENTS and math.ceil(n / candidate) >= TARGET_BLOCKS:
                tile_n = candidate
                break
        method, tile_m = "dot", rows
    else:
        tile_n = 128 if math.ceil(n / 128) >= TARGET_BLOCKS else 64
        tile_k = min(MAX_WEIGHT_TILE_BYTES // (tile_n * itemsize), k_cap)
        method, tile_m = "mma_t", max(8, rows)
    return {"tile_m": tile_m, "tile_n": tile_n, "tile_k": tile_k, "split_k": _splits(n, k, tile_n, tile_k),
            "method": method, "num_worker_warps": 4}


def prune_for(m: int, n: int, k: int) -> Callable[[Config], bool]:
    """A ``prune`` for `cutile.tune.search` over `space` at one shape: False for configs
    that cannot run or win there (a tile_m below M, a K tile past K's power of two,
    splits when N alone fills the GPU or past K's chunks, ``mma_t`` tiles tileiras
    computes without tensor cores, ``dot`` tiles whose products pass DOT_ELEMENTS)."""
    rows = next_power_of_two(m)

    def keep(config: Config) -> bool:
        tile_m, tile_n, tile_k = int(config["tile_m"]), int(config["tile_n"]), int(config["tile_k"])
        splits = int(config["split_k"])
        if tile_m < rows or tile_k > max(16, next_power_of_two(k)) or tile_n > max(8, next_power_of_two(n)):
            return False
        if splits > 1 and (math.ceil(n / tile_n) >= TARGET_BLOCKS or splits > math.ceil(k / tile_k)):
            return False
        if config["method"] == "mma_t":
            return tile_n >= 64 and tile_m >= 8
        if config["method"] == "dot":
            return tile_m * tile_n * tile_k <= DOT_ELEMENTS
        return True

    return keep


def small_m_matmul(a: cutile.Tensor, b: cutile.Tensor, out: cutile.Tensor, *, bias: cutile.Tensor | None = None,
                   activation: str | None = None, residual: cutile.Tensor | None = None, alpha: float = 1.0,
                   config: Mapping[str, Any] | None = None) -> Any:
    """``out = act(alpha * (a @ b) + bias) + residual`` for 1 <= M <= 16, streaming the
    weight b once.

    Args:
        a: [M, K], f16, bf16 or f32 (any strides), M from 1 to 16.
        b: [K, N], a's dtype: usually a weight stored [N, K] and passed as ``w.T``, which
            is read as stored (contiguous along K); a [K, N] row-major b is read along N.
        out: [M, N], f16, bf16 or f32 (written; the call keeps it usable).
        bias: [N] or None. activation: None, "relu", "gelu" (tanh approximation), "silu".
        residual: [M, N] or None (not out's memory). alpha: the product's scale.
        config: keys ``tile_m`` (rows of a per block: M's power of two, or more, padded,
            up to 16), ``tile_n``, ``tile_k`` (powers of two), ``split_k`` (1-64),
            ``method`` ("mma", "mma_t" or "dot"), ``num_worker_warps``, ``occupancy``,
            ``latency`` (the weight loads' hint, 1-10; 0: none); missing keys
            from `default_config`.
    Returns:
        The pending launch (``split_k`` 1; it holds out from the call) or op (the
        partials, then the reduction, whose launch is made and claims out when the
        partials have been enqueued), not yet run: ``.sync()``, ``await``,
        ``.schedule()`` or `cutile.bench.do_bench` run it.
    Raises:
        ArgumentError, ArgumentTypeError: a malformed argument (named in the message),
            including an M outside 1-16.
    """
    ops = check_operands("small_m_matmul", a, b, out, bias, activation, residual, alpha)
    if ops.m > MAX_M:
        raise cutile.ArgumentError(f"small_m_matmul: a has {ops.m} rows; this path takes 1 to {MAX_M} "
                                   "(use split_k_matmul or matmul)")
    cfg = check_config("small_m_matmul", config, default_config(ops.m, ops.n, ops.k, ops.a.dtype), CONFIG_KEYS)
    if cfg["tile_m"] < ops.m:
        raise cutile.ArgumentError(f"small_m_matmul: config['tile_m'] is {cfg['tile_m']}; a block takes all "
                                   f"{ops.m} rows of a, so it must be at least {next_power_of_two(ops.m)}")
    return run_matmul(ops, cfg["tile_m"], cfg["tile_n"], cfg["tile_k"], cfg["split_k"], cfg["method"],
                      hints_of(cfg))
