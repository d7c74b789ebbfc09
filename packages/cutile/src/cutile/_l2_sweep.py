"""The read sweep of `cutile.bench`'s clean L2 flush (``flush_l2="clean"``).

A memset over twice the L2 leaves it full of the flush buffer's dirty lines, which a
timed kernel reading its own data then writes back to memory while it reads: a
bandwidth-bound kernel over less than a few L2s of data is slowed by the flush itself.
After the memset, this kernel reads a second buffer of twice the L2 (each block sums
its rows into one element, so little is written): the dirty lines are written back
before the rep starts and the L2 holds clean lines of memory the rep does not touch.
"""

import math
from collections.abc import Callable
from typing import Any

import cutile
from cutile.core import Constant, Mut, Tensor, bid, f32, sum, zeros

COLS = 1024  # f32 elements a row: 4 KiB
ROWS = 8  # rows a tile: 32 KiB a load
MAX_BLOCKS = 512  # a few blocks per SM of a large GPU


@cutile.entry
def l2_read_sweep(out: Mut[Tensor[f32, [1, 1]]], x: Tensor[f32, [-1, -1]], tiles: Constant[int],
                  BM: Constant[int], BN: Constant[int]) -> None:  # noqa: N803 (the tile dims' names)
    acc = zeros((1, BN), f32)
    for i in range(tiles):
        acc = acc + sum(x.load(index=(bid(0) * tiles + i, 0), shape=(BM, BN)), axis=0, keepdims=True)
    out.store(sum(acc, axis=1, keepdims=True))


def sweep(l2_bytes: int, ordinal: int) -> Callable[[Any], None]:
    """A function running the sweep on a stream, for an L2 of ``l2_bytes`` on device
    ``ordinal`` (its buffers made here, read again on every call)."""
    from cutile import api

    rows = max(1, math.ceil(2 * l2_bytes / (4 * COLS)))
    blocks = max(1, min(MAX_BLOCKS, math.ceil(rows / ROWS)))
    tiles = math.ceil(rows / (ROWS * blocks))
    # (their values do not matter: the sweep is for the reads)
    source = api.empty([blocks * tiles * ROWS, COLS], dtype=f32, device=ordinal)
    sums = api.empty([blocks, 1], dtype=f32, device=ordinal)

    def run(stream: Any) -> None:
        l2_read_sweep(sums[...].partition([1, 1]), source, tiles=tiles, BM=ROWS, BN=COLS).sync_on(stream)

    return run
