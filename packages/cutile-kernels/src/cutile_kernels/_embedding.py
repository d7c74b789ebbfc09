"""Embedding lookup: ``embedding(ids, table)[..., :] = table[ids[...], :]``.

A bounds-checked gather of the read-only table (a safe kernel): nothing outside the
table is read, and an id outside ``[0, vocab)`` gives a row of zeros (torch's
``F.embedding`` raises a device-side assert there instead). ids are i32 or i64 of any
shape, the table ``(vocab, dim)`` f16, bf16 or f32 with any strides; the result has
shape ``ids.shape + (dim,)`` and the table's dtype.
"""

# No `from __future__ import annotations`: kernel annotations name the factory's dtypes, which cutile's
# mypy plugin cannot read (it takes literal dtypes such as f32): hence their `type: ignore[misc]`.

import functools
import inspect
import math
from typing import Any

import numpy as np

import cutile
from cutile import tune
from cutile.core import Constant, Mut, Tensor, arange, bid, gather, i32

from cutile_kernels import _pointwise as pw
from cutile_kernels._operands import Operand, as_tensor, output

SPACE = tune.Space(tile_rows=[1, 2, 4, 8, 16, 32], tile_cols=[128, 256, 512, 1024, 2048], occupancy=[1, 2, 4])
DEFAULT = {"tile_rows": 8, "tile_cols": 1024, "occupancy": 2}


@functools.lru_cache(maxsize=None)
def embedding_kernel(dtype: Any, id_dtype: Any, occupancy: int) -> Any:
    """The lookup kernel for one table dtype and id dtype."""
    def embedding(
            out: Mut[Tensor[dtype, ["BM", "BN"]]],  # type: ignore[misc]
            table: Tensor[dtype, [-1, -1]],  # type: ignore[misc]
            ids: Tensor[id_dtype, [-1]],  # type: ignore[misc]
            BM: Constant[int],
            BN: Constant[int],
    ) -> None:
        rows = ids.load(index=(bid(0),), shape=(BM,)).reshape((BM, 1))
        cols = (arange(BN, i32) + bid(1) * BN).reshape((1, BN))
        out.store(gather(table, (rows, cols)))
    return cutile.entry(hints={"occupancy": occupancy})(embedding)


def _setup(config: dict[str, Any], shape: tuple[int, ...]) -> Any:
    """A search's runner for one shape: (ids, vocab, dim), a bf16 table."""
    count, vocab, dim = shape
    table = cutile.api.randn([vocab, dim], "bf16", seed=1)
    ids = cutile.api.from_numpy(np.random.default_rng(0).integers(0, vocab, count).astype(np.int32))
    return lambda: embedding.launch(ids, table, config=config).op


TUNER = pw.tuner("embedding", SPACE, DEFAULT, _setup, inspect.getsource(embedding_kernel))


def _embedding_launch(ids: Any, table: Any, *, out: Any = None, config: dict[str, Any] | None = None) -> pw.Pending:
    """The rows of ``table`` at ``ids`` (zeros for ids outside the table).

    Args:
        ids: i32 or i64, any shape (contiguous when it has more than one dim).
        table: ``(vocab, dim)``, f16, bf16 or f32.
        out: an array of shape ``ids.shape + (dim,)`` and the table's dtype to write.
        config: a config of `SPACE` (default: the tuner's for this shape).
    """
    fn = "embedding"
    ia, ta = as_tensor(ids, fn, "ids"), as_tensor(table, fn, "table")
    pw.check_dtype(ia, pw.INT_DTYPES, fn, "ids")
    pw.check_dtype(ta, pw.FLOAT_DTYPES, fn, "table")
    pw.check_rank(ta, (2,), fn, "table")
    vocab, dim = ta.shape
    count = math.prod(ia.shape)
    if count == 0 or vocab == 0 or dim == 0:
        raise cutile.ArgumentError(f"{fn}(): 'ids' {list(ia.shape)} and 'table' {list(ta.shape)} must not be empty")
    result = output(out, (*ia.shape, dim), ta.tensor.dtype, ia, fn, "out", {"ids": ia.tensor, "table": ta.tensor})
    chosen = pw.config_of(fn, config, SPACE, DEFAULT) if config is not None else TUNER.config((count, vocab, dim))
    tile = [min(int(chosen["tile_rows"]), pw.next_pow2(count)), min(int(chosen["tile_cols"]), pw.next_pow2(dim))]
    flat_ids = pw.reshaped(ia, (count,), fn, "ids")
    rows = pw.reshaped(Operand.of(result.tensor), (count, dim), fn, "out")
    kernel = embedding_kernel(ta.tensor.dtype, ia.tensor.dtype, int(chosen["occupancy"]))
    launch = kernel(rows.partition(tile), ta.tensor, flat_ids)
    return pw.Pending(launch, result.result)


embedding = pw.library_function(_embedding_launch)
