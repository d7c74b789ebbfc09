"""Matmul for a small M (1 to 16: decode), reading the weight once at bandwidth.

``small_m_matmul(a, b, out)`` computes ``out = act(alpha * (a @ b) + bias) + residual``
with each block owning a slice of N: it loops over K with wide tiles, all M rows at
once (the a tile is [next power of two >= M, BK], tiny and cached), so every byte of the
weight is read by exactly one block, once. A linear layer's weight stored [N, K]
row-major and passed as its transposed view ``w.T`` is read as stored, along K.
When N / tile_n gives too few blocks to fill the GPU, ``split_k`` > 1 splits K among
blocks too: float32 partial sums into a workspace, then a reduction kernel with the
epilogue (the kernels of `cutile_kernels._splitk`).

The product of a block's tiles is a config key: ``mma`` (the tensor cores, a's rows
padded to the tile), ``mma_t`` (the same product transposed, ``(w aᵀ)ᵀ``, so the weight
tile's N rows fill the tensor cores' M side as a small-M GEMM wants) or ``dot`` (float32
products on the CUDA cores summed along K).
"""

import math
from collections.abc import Mapping
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
MAX_WEIGHT_TILE_BYTES = 32 * 1024  # a default's weight tile per K step (its stages share the SM's shared memory)


def space(dtype: Any) -> Space:
    """The search space for ``dtype`` (f16, bf16 or f32): tiles of N and K, splits of K,
    the product method and the hints. `prune_for` drops the configs pointless for a shape."""
    wide_k = [256, 512, 1024] if dtype in (f16, bf16) else [128, 256, 512]
    return Space(tile_m=[1, 2, 4, 8, 16], tile_n=[8, 16, 32, 64], tile_k=wide_k, split_k=[1, 2, 4],
                 method=list(METHODS), num_worker_warps=[4, 8], occupancy=[1, 2])


def default_config(m: int, n: int, k: int, dtype: Any) -> dict[str, Any]:
    """The config used when no record matches: K tiles of 1 KiB of a weight row (less when
    the weight tile would pass 32 KiB); the widest
    N tile that still gives two blocks per SM, but at least 4 rows of the weight per row of
    a (every block reads its a tile from L2 at each K step: with fewer, that traffic nears
    the weight's); splits of K when the N tiles alone give fewer blocks than that."""
    itemsize = 4 if dtype is f32 else 2
    rows = next_power_of_two(m)
    tile_k = min(1024 // itemsize, max(16, next_power_of_two(k)))
    tile_n = max(8, 4 * rows) if rows > 2 else 8
    for candidate in (64, 32, 16):
        if candidate > tile_n and math.ceil(n / candidate) >= TARGET_BLOCKS:
            tile_n = candidate
            break
    tile_n = min(tile_n, max(8, next_power_of_two(n)))
    tile_k = min(tile_k, max(16, MAX_WEIGHT_TILE_BYTES // (tile_n * itemsize)))  # wide N tiles: shorter K tiles
    blocks = math.ceil(n / tile_n)
    splits = 1 if blocks >= TARGET_BLOCKS else max(1, min(8, math.ceil(k / tile_k), math.ceil(TARGET_BLOCKS / blocks)))
    return {"tile_m": rows, "tile_n": tile_n, "tile_k": tile_k, "split_k": splits, "method": "mma",
            "num_worker_warps": 4}


def prune_for(m: int, n: int, k: int) -> Any:
    """A ``prune`` for `cutile.tune.search` over `space` at one shape: False for configs
    that cannot run or win there (a tile_m below M, a K tile past K's power of two,
    splits when N alone fills the GPU or past K's chunks, a ``dot`` tile too large for
    registers)."""
    rows = next_power_of_two(m)

    def keep(config: Config) -> bool:
        tile_n, tile_k, splits = int(config["tile_n"]), int(config["tile_k"]), int(config["split_k"])
        if int(config["tile_m"]) < rows:
            return False
        if tile_k > max(16, next_power_of_two(k)) or tile_n > max(8, next_power_of_two(n)):
            return False
        blocks = math.ceil(n / tile_n)
        if splits > 1 and (blocks >= TARGET_BLOCKS or splits > math.ceil(k / tile_k)):
            return False
        return not (config["method"] == "dot" and int(config["tile_m"]) * tile_n * tile_k > 16384)

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
