"""``decode_attention(q, k_cache, v_cache, seq_lens)``: one new query token per sequence.

``q`` is ``(batch, q_heads, head_dim)``, the caches ``(batch, kv_heads, max_seq,
head_dim)`` (torch SDPA's layout, one head's positions contiguous), ``seq_lens`` the
``batch`` lengths, an i32 (or i64) tensor or a list of ints (copied to the device on
each call: a CUDA graph takes a device tensor): positions at or past a sequence's
length are ignored (never read into the result, whatever they hold). Grouped-query attention: q head
``h`` reads kv head ``h // (q_heads // kv_heads)``. f16 and bf16, f32 math; the result
has q's dtype. The caches may have any strides: a ``(batch, max_seq, kv_heads, head_dim)``
cache (`kv_cache_update`'s layout) is passed as its transposed view
(``k.transpose(1, 2)`` in torch, no copy); each tile then reads ``head_dim`` contiguous
elements per position.

One launch or two, of safe kernels (``decode_attention.launch(...)`` is one op to time
either way):

- one launch (``decode_whole``, a plan of one split): one block per (batch, kv head, part
  of its q heads) walks the whole context and writes the normalized result into ``out``
  (no workspace). A block takes ``heads_per_block`` q heads: the kv head's whole group by
  default (each K/V byte read once), fewer with ``head_blocks`` (more blocks for a small
  batch, each reading the kv head's context: its other blocks' reads of the same lines
  meet in L2).
- two launches, the second the first's continuation (``then``). Split: one block per
  (batch, kv head, split of the context). It loads the q heads of its kv head together
  (so each K/V byte is read once), walks its split's tiles up to the sequence's length
  and writes its partial result to an f32 workspace: the running maximum, the sum of
  exponentials and the weighted sum of V, per q head. Merge: one block per (batch, q
  head) combines the splits by log-sum-exp into ``out``.

Both walk tiles of ``tile_n`` positions with an online softmax (exp2, the scale folded
in). Their products are transposed (``K qᵀ`` and ``Vᵀ pᵀ``): the positions and head_dim
take the tensor cores' M side, which tileiras uses only from 64 rows, and the block's q
heads (padded to 8) the N side.

With ``splits`` 0 (the default) the split count fills the GPU: from the fewest that give
``waves`` blocks per SM over (batch, kv heads) up to twice that, the one whose blocks fill
their last round of resident blocks best, at most one per tile and `AUTO_MAX_SPLITS`;
then one launch replaces the two where a cost model (`_one_launch_wins`: rounds of
resident blocks, each one block's walk, against the HBM bandwidth and the second launch's
cost) expects it to be faster: always where the count is 1 (from batch 33 with 8 kv
heads), at short contexts otherwise. The plan depends on the shapes and the config only,
never on the lengths' values (a CUDA graph replays with new ones). The configs come from
`SPACE` through a `cutile.tune` record, else `DEFAULT`. A length
of 0 gives zeros. Lengths the host holds (a list, a numpy array, a tensor in host memory:
the interpreter's) are checked on the host: one past ``max_seq`` or negative is an
`ArgumentError` naming ``seq_lens``. Lengths in device memory are read only by the
kernel (the host reading them would wait for the device, and a CUDA graph replays with
new ones): there a bad length fails the kernels' assert, which on the GPU stops
the kernel, prints the assert's message on the device's output and makes the next
synchronizing call raise a `cutile.CudaError` (the kernel faulted), after which the CUDA
context is unusable (the process must restart), as after torch's device-side asserts.
"""

# No `from __future__ import annotations`: kernel annotations name the factory's dtypes, which cutile's
# mypy plugin cannot read (it takes literal dtypes such as f32): hence their `type: ignore[misc]`.

import functools
import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol, cast

import numpy as np

import cutile
from cutile import api, tune
import cutile.core as ct
from cutile.core import Constant, Mut, Tensor, arange, bid, cdiv, exp2, extract, f32, full, i32, maximum, minimum, \
    mma, where, zeros

from cutile_kernels._operands import (KeptPlans, as_tensor, derived, host_values, integer_values,
                                      memory_layout)
from cutile_kernels._pointwise import Pending, config_of
from cutile_kernels._records import record_path

#: splits 0: chosen from the batch and context, one launch or two (see the module doc); 1: one
#: launch; more: two. waves: blocks per SM wanted (read with splits 0 only); head_blocks: in one
#: launch, at least this many blocks share a kv head, each with a part of its q heads (read by one
#: launch only); latency: the K and V loads' hint (0: none); tile_n below 64 leaves the tensor cores
#: unused. The order is the search's (the last varies fastest): a search cut short by its budget
#: has tried the launch forms first, the hints last.
SPACE = tune.Space(num_worker_warps=[4, 8], latency=[0, 4], tile_n=[64, 128], occupancy=[2, 4, 1], waves=[2, 4],
                   head_blocks=[1, 2, 4], splits=[0, 1, 2, 4, 8, 16, 32, 64])
DEFAULT = {"num_worker_warps": 4, "latency": 0, "tile_n": 64, "occupancy": 2, "waves": 2, "head_blocks": 1,
           "splits": 0}
SMS = 132  # the H200's SM count: the grid the automatic split count fills
AUTO_MAX_SPLITS = 64
MAX_SPLITS = 128  # the merge holds a head's splits in one tile
# What splits 0 weighs one launch against two by (H200 estimates; a record's winner, timed, decides
# at its shapes): the second launch, the gap before it and the merge cost SECOND_LAUNCH_US (2.6 us
# of merge and ~2 us of gap in the Qwen3-4B decode step); a block walks its positions of K and V
# at BLOCK_GBS (a 64-position tile of d 128 in 1.4 us: a split kernel of one tile per block takes
# 5.4 us where a small kernel takes ~2.5, and later tiles' loads overlap some of the math) and all
# blocks together at most at HBM_GBS.
SECOND_LAUNCH_US = 4.5
BLOCK_GBS = 24.0
HBM_GBS = 4000.0
_LOG2E = 1.4426950408889634
_DTYPES = ("f16", "bf16")
_INDEX_DTYPES = ("i32", "i64")


def _length(seq_lens: Any, b: Any, k: Any) -> Any:
    """(Kernel code, inlined.) Sequence ``b``'s length, checked against the cache."""
    seq_len = seq_lens.load(at=(b,), shape=(1,)).reshape(()).astype(i32)
    assert seq_len >= 0, "decode_attention: seq_lens must not be negative"
    assert seq_len <= k.shape[2], "decode_attention: seq_lens must not exceed the caches' max_seq"
    return seq_len


def _walk(q_cols: Any, k: Any, v: Any, b: Any, h: Any, first: Any, last: Any, seq_len: Any, scale_log2: Any,
          load_latency: Any, GP: int, D: int, BN: int) -> Any:
    """(Kernel code, inlined.) The online softmax of the ``GP`` q columns ``q_cols``
    (``(D, GP)``) over tiles ``first`` to ``last`` of BN positions of kv head (b, h):
    the running maximum and sum of exponentials ``(1, GP)`` and the weighted sum of V
    ``(D, GP)``, positions from ``seq_len`` on left out."""
    # transposed products (positions, q heads): the tile's BN positions and head_dim take
    # the tensor cores' M side, which tileiras fills only from 64 rows (the group is 1-16 heads)
    col_max = full((1, GP), -float("inf"), f32)
    col_sum = zeros((1, GP), f32)
    acc = zeros((D, GP), f32)
    for n in range(first, last):
        kt = k.load(index=(b, h, n, 0), shape=(1, 1, BN, D), latency=load_latency).reshape((BN, D))
        s = mma(kt, q_cols, zeros((BN, GP), f32)) * scale_log2
        valid = (arange(BN, i32) + n * BN).reshape((BN, 1)) < seq_len
        s = where(valid, s, -float("inf"))
        new_max = maximum(col_max, ct.max(s, axis=0, keepdims=True))  # finite: position n * BN is valid
        p = exp2(s - new_max)
        alpha = exp2(col_max - new_max)
        col_sum = col_sum * alpha + ct.sum(p, axis=0, keepdims=True)
        vt = v.load(index=(b, h, n, 0), shape=(1, 1, BN, D), latency=load_latency).reshape((BN, D))
        # a cache past the length may hold anything (NaN): 0 * NaN would reach the sum
        vt = where(valid, vt, zeros((BN, D), v.dtype))
        acc = mma(vt.T, p.astype(v.dtype), acc * alpha)
        col_max = new_max
    return col_max, col_sum, acc


@functools.lru_cache(maxsize=None)
def decode_kernels(dtype: Any, index_dtype: Any, occupancy: int, num_worker_warps: int = 4,
                   latency: int = 0) -> tuple[Any, Any]:
    """The split and merge kernels for one cache dtype and seq_lens dtype, with the
    split kernel's hints (``latency`` 0: its loads have none)."""
    entry = cutile.entry(hints={"occupancy": occupancy, "num_worker_warps": num_worker_warps})
    load_latency = latency if latency > 0 else None

    def decode_split(
            part_acc: Mut[Tensor[f32, [1, 1, "GD"]]],
            part_max: Mut[Tensor[f32, [1, 1, "GP"]]],
            part_sum: Mut[Tensor[f32, [1, 1, "GP"]]],
            q: Tensor[dtype, [-1, -1, "D"]],  # type: ignore[misc]
            k: Tensor[dtype, [-1, -1, -1, "D"]],  # type: ignore[misc]
            v: Tensor[dtype, [-1, -1, -1, "D"]],  # type: ignore[misc]
            seq_lens: Tensor[index_dtype, [-1]],  # type: ignore[misc]
            scale_log2: f32,
            tiles_per_split: i32,
            KV_HEADS: Constant[int],
            GROUP: Constant[int],
            GD: Constant[int],
            GP: Constant[int],
            D: Constant[int],
            BN: Constant[int],
    ) -> None:
        b = bid(0) // KV_HEADS
        h = bid(0) % KV_HEADS
        seq_len = _length(seq_lens, b, k)
        # q heads past the group (GP > GROUP) read other heads or padding: their results are never merged
        q_cols = q.load(at=(b, h * GROUP, 0), shape=(1, GP, D)).reshape((GP, D)).T
        first = bid(1) * tiles_per_split
        last = minimum(first + tiles_per_split, cdiv(seq_len, BN))
        col_max, col_sum, acc = _walk(q_cols, k, v, b, h, first, last, seq_len, scale_log2, load_latency, GP, D, BN)
        part_acc.store(acc.T.reshape((1, 1, GD)))
        part_max.store(col_max.reshape((1, 1, GP)))
        part_sum.store(col_sum.reshape((1, 1, GP)))

    def decode_merge(
            out: Mut[Tensor[dtype, [1, 1, "D"]]],  # type: ignore[misc]
            part_acc: Tensor[f32, [-1, -1, -1]],
            part_max: Tensor[f32, [-1, -1, -1]],
            part_sum: Tensor[f32, [-1, -1, -1]],
            KV_HEADS: Constant[int],
            GROUP: Constant[int],
            SP: Constant[int],
            D: Constant[int],
    ) -> None:
        b = bid(0)
        head = bid(1)
        bh = b * KV_HEADS + head // GROUP
        g = head % GROUP
        # splits past the count read as padding: maximum -inf, sum and V 0
        split_max = part_max.load(at=(bh, 0, g), shape=(1, SP, 1), padding="neg_inf").reshape((SP, 1))
        split_sum = part_sum.load(at=(bh, 0, g), shape=(1, SP, 1)).reshape((SP, 1))
        split_acc = part_acc.load(at=(bh, 0, g * D), shape=(1, SP, D)).reshape((SP, D))
        top = ct.max(split_max, axis=0, keepdims=True)
        weight = where(split_max == -float("inf"), 0.0, exp2(split_max - top))  # empty splits weigh 0
        total = ct.sum(weight * split_sum, axis=0, keepdims=True)
        summed = ct.sum(split_acc * weight, axis=0, keepdims=True)
        result = where(total > 0.0, summed / where(total > 0.0, total, 1.0), 0.0)  # a length of 0: zeros
        out.store(result.astype(dtype).reshape((1, 1, D)))

    return entry(decode_split), cutile.entry(decode_merge)


@functools.lru_cache(maxsize=None)
def decode_whole_kernel(dtype: Any, index_dtype: Any, occupancy: int, num_worker_warps: int = 4,
                        latency: int = 0) -> Any:
    """The one-launch kernel for one cache dtype and seq_lens dtype, with its hints
    (``latency`` 0: its loads have none)."""
    entry = cutile.entry(hints={"occupancy": occupancy, "num_worker_warps": num_worker_warps})
    load_latency = latency if latency > 0 else None

    def decode_whole(
            out: Mut[Tensor[dtype, [1, "HB", "D"]]],  # type: ignore[misc]
            q: Tensor[dtype, [-1, -1, "D"]],  # type: ignore[misc]
            k: Tensor[dtype, [-1, -1, -1, "D"]],  # type: ignore[misc]
            v: Tensor[dtype, [-1, -1, -1, "D"]],  # type: ignore[misc]
            seq_lens: Tensor[index_dtype, [-1]],  # type: ignore[misc]
            scale_log2: f32,
            GROUP: Constant[int],
            HB: Constant[int],
            GP: Constant[int],
            D: Constant[int],
            BN: Constant[int],
    ) -> None:
        b = bid(0)
        head = bid(1) * HB  # the block's first q head; its HB heads share kv head h (HB divides GROUP)
        h = head // GROUP
        seq_len = _length(seq_lens, b, k)
        # q heads past the block's (GP > HB) read other heads or padding: their columns are never stored
        q_cols = q.load(at=(b, head, 0), shape=(1, GP, D)).reshape((GP, D)).T
        _, col_sum, acc = _walk(q_cols, k, v, b, h, 0, cdiv(seq_len, BN), seq_len, scale_log2, load_latency, GP, D,
                                BN)
        total = col_sum.T
        result = where(total > 0.0, acc.T / where(total > 0.0, total, 1.0), 0.0)  # a length of 0: zeros
        out.store(extract(result, (0, 0), (HB, D)).astype(dtype).reshape((1, HB, D)))

    return entry(decode_whole)


def next_pow2(n: int) -> int:
    return 1 << max(0, math.ceil(math.log2(max(1, n))))


@dataclass(frozen=True)
class Plan:
    """How a call walks the context: tiles of ``tile_n`` positions, ``tiles_per_split`` of
    them per block, ``splits`` blocks per (batch, kv head) and q-head group. One split is
    one launch, whose blocks each take ``heads_per_block`` q heads of a kv head; more are
    two (split, then merge), whose split blocks each take a kv head's whole group."""

    tile_n: int
    tiles_per_split: int
    splits: int
    heads_per_block: int

    @property
    def one_launch(self) -> bool:
        return self.splits == 1


def plan(config: dict[str, Any], shape: tuple[int, ...]) -> Plan:
    """The walk of a (batch, q_heads, kv_heads, max_seq, head_dim) call under ``config``."""
    batch, q_heads, kv_heads, max_seq, head_dim = shape
    tile_n = min(int(config["tile_n"]), max(16, next_pow2(max_seq)))
    tiles = -(-max_seq // tile_n)
    wanted = int(config["splits"])
    group = q_heads // kv_heads
    heads_per_block = _heads_per_block(group, int(config.get("head_blocks", 1)))
    if wanted == 0:
        heads, occupancy = batch * kv_heads, int(config.get("occupancy", 1))
        wanted = _auto_splits(heads, tiles, int(config["waves"]), occupancy)
        if wanted > 1 and _one_launch_wins(heads, group // heads_per_block, tiles, wanted, occupancy,
                                           tile_n * head_dim * 4):
            wanted = 1
    splits = max(1, min(wanted, tiles, MAX_SPLITS))
    per_split = -(-tiles // splits)
    splits = -(-tiles // per_split)
    return Plan(tile_n, per_split, splits, heads_per_block if splits == 1 else group)


def _heads_per_block(group: int, head_blocks: int) -> int:
    """The q heads of one block of a one-launch grid: the largest power of two (a tile's
    extent) that divides the group into at least ``head_blocks`` parts (1 for a group of 3)."""
    most = max(1, group // max(1, head_blocks))
    heads = 1
    while group % (heads * 2) == 0 and heads * 2 <= most:
        heads *= 2
    return heads


def _auto_splits(heads: int, tiles: int, waves: int, occupancy: int) -> int:
    """The split count of ``splits`` 0 for two launches: from the fewest giving ``waves``
    blocks per SM up to twice that, the one whose blocks fill their last round of ``SMS *
    occupancy`` resident blocks best (the fewest splits among equals): 320 blocks on 264
    places run as two rounds, the second a fifth full, where 512 run as two full ones."""
    slots = SMS * max(1, occupancy)
    fewest = min(AUTO_MAX_SPLITS, -(-waves * SMS // heads))
    best, best_fill = 1, -1.0
    for wanted in range(max(1, fewest), min(2 * max(1, fewest), AUTO_MAX_SPLITS) + 1):
        per_split = -(-tiles // min(wanted, tiles))
        blocks = heads * -(-tiles // per_split)
        fill = blocks / (-(-blocks // slots) * slots)
        if fill > best_fill + 1e-9:
            best, best_fill = wanted, fill
    return best


def _one_launch_wins(heads: int, head_blocks: int, tiles: int, splits: int, occupancy: int, tile_bytes: int) -> bool:
    """Whether one launch (``head_blocks`` blocks per (batch, kv head), each walking the
    whole context) is expected to beat ``splits`` blocks per (batch, kv head) and a merge:
    each form takes its rounds of ``SMS * occupancy`` resident blocks, each round one
    block's walk, or the whole cache's read at HBM bandwidth if longer (a kv head's blocks
    share their reads in L2); two launches add SECOND_LAUNCH_US. With 8 kv heads of d 128
    and a block per kv head, one launch wins at batch 1 to 8 up to 256 positions, at batch
    16 up to 512, from batch 32 always."""
    slots = SMS * max(1, occupancy)
    per_split = -(-tiles // min(splits, tiles))
    floor_us = heads * tiles * tile_bytes / (HBM_GBS * 1e3)
    walk_us = tile_bytes / (BLOCK_GBS * 1e3)  # one tile by one block

    def rounds(blocks: int) -> int:
        return -(-blocks // slots)
    one = max(floor_us, rounds(heads * head_blocks) * tiles * walk_us)
    two = max(floor_us, rounds(heads * -(-tiles // per_split)) * per_split * walk_us) + SECOND_LAUNCH_US
    return one <= two


class _Tuner:
    """The `cutile.tune.Tuner` of decode attention, made on first use (when the arch is
    known): its record is ``records/<arch>/decode_attention.json``; without a record's
    winner for the shape's bucket, a cached winner, else `DEFAULT`."""

    NAME = "cutile_kernels_decode_attention"

    @functools.cached_property
    def tuner(self) -> Any:
        source = "".join(inspect.getsource(f) for f in (_length, _walk, decode_kernels, decode_whole_kernel))
        record = record_path(self.NAME, source, SPACE, file="decode_attention")
        return _DecodeTuner(self.NAME, SPACE, _setup, source=source, record=record, default=DEFAULT,
                            on_stale="warn")

    def config(self, shape: tuple[int, ...]) -> dict[str, Any]:
        return dict(self.tuner.config(shape))

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self.tuner, attribute)


class _DecodeTuner(tune.Tuner):
    """A search of one shape times each distinct launch once: configs that give the same
    plan and hints (``waves`` with a given split count, ``head_blocks`` with two launches,
    split counts past the tile count) are pruned after the first."""

    def tune(self, shape: Any, **options: Any) -> tune.SearchResult:
        return super().tune(shape, **{"prune": distinct_launches(tuple(int(n) for n in shape)), **options})


def distinct_launches(shape: tuple[int, ...]) -> Callable[[dict[str, Any]], bool]:
    """A search's prune for ``shape``: True for the first config of each launch (plan and
    hints) in the order asked."""
    seen: set[tuple[Any, ...]] = set()

    def worth_timing(config: dict[str, Any]) -> bool:
        launch = (plan(config, shape), int(config["occupancy"]), int(config["num_worker_warps"]),
                  int(config["latency"]))
        if launch in seen:
            return False
        seen.add(launch)
        return True
    return worth_timing


@functools.lru_cache(maxsize=1)
def _search_inputs(shape: tuple[int, ...]) -> tuple[Any, ...]:
    """One shape's inputs, made once for all the configs a search times (a 64 x 32k
    cache is 8 GiB)."""
    batch, q_heads, kv_heads, max_seq, head_dim = shape
    q = api.randn([batch, q_heads, head_dim], "bf16", seed=1)
    k = api.randn([batch, kv_heads, max_seq, head_dim], "bf16", seed=2)
    v = api.randn([batch, kv_heads, max_seq, head_dim], "bf16", seed=3)
    lens = api.from_numpy(np.full(batch, max_seq, dtype=np.int32))
    return q, k, v, lens


def _setup(config: dict[str, Any], shape: tuple[int, ...]) -> Callable[[], Any]:
    """A search's runner for one shape: (batch, q_heads, kv_heads, max_seq, head_dim), bf16,
    every sequence full."""
    batch, q_heads, _, _, head_dim = shape
    q, k, v, lens = _search_inputs(shape)
    out = api.empty([batch, q_heads, head_dim], dtype="bf16")
    return lambda: decode_attention.launch(q, k, v, lens, out=out, config=config).op


TUNER = _Tuner()


def _fail(parameter: str, message: str, kind: type[cutile.CutileError] = cutile.ArgumentError) -> cutile.CutileError:
    return kind(f"decode_attention(): parameter '{parameter}' {message}")


def _dtype_of(tensor: cutile.Tensor) -> str:
    return str(tensor.dtype)


def _spans_overlap(a: cutile.Tensor, b: cutile.Tensor) -> bool:
    def span(t: cutile.Tensor) -> tuple[int, int]:
        start = int(t.address())
        last = sum((int(n) - 1) * int(s) for n, s in zip(t.shape, t.strides))
        return start, start + (last + 1) * t.dtype.itemsize
    if a.size == 0 or b.size == 0 or str(a.device) != str(b.device):
        return False
    (a0, a1), (b0, b1) = span(a), span(b)
    return a0 < b1 and b0 < a1


class _Kept(NamedTuple):
    """What a checked call launches, from its operands' layouts alone: the split plan,
    its kernels' hints and constants, the scores' factor and the caches' max_seq."""

    split: Plan
    hints: tuple[int, int, int]
    batch: int
    kv_heads: int
    group: int
    head_dim: int
    max_seq: int
    scale_log2: float


# (the operands' layouts and memory, scale) -> the plan of a call in them (the memory is in
# the key: out's overlap checks depend on it); only for cutile tensors and no config=
_PLANS: KeptPlans[_Kept] = KeptPlans()


def _key(q: Any, k_cache: Any, v_cache: Any, seq_lens: Any, scale: Any, out: Any, config: Any) -> tuple[Any, ...] | None:
    if config is not None or type(scale) not in (float, int, type(None)):
        return None
    layouts = tuple(map(memory_layout, (q, k_cache, v_cache, seq_lens, out)))
    return None if None in layouts else (*layouts, type(scale), scale)


def _check_lengths(lens_values: Any, max_seq: int) -> None:
    wrong = np.flatnonzero((lens_values < 0) | (lens_values > max_seq))
    if wrong.size:
        raise _fail("seq_lens", f"holds {int(lens_values[wrong[0]])} at [{int(wrong[0])}]; each length must be "
                                f"from 0 to the caches' max_seq {max_seq}")


def _launch_kept(kept: _Kept, qa: cutile.Tensor, ka: cutile.Tensor, va: cutile.Tensor, la: cutile.Tensor,
                 oa: cutile.Tensor, out: Any) -> Pending:
    """The launch (or the split launch, then the merge) of a checked call."""
    split, group, head_dim = kept.split, kept.group, kept.head_dim
    target = oa.permute(0, 1, 2)  # (first: a view refuses a consumed out before anything is launched)
    if split.one_launch:  # the whole context per block, normalized into out: no workspace, no merge
        heads = split.heads_per_block
        whole = decode_whole_kernel(qa.dtype, la.dtype, *kept.hints)
        launch = whole(target.partition([1, heads, head_dim]), qa, ka, va, la, kept.scale_log2,
                       GROUP=group, GP=max(8, heads), BN=split.tile_n)
        return Pending(launch, lambda: out)
    batch, kv_heads = kept.batch, kept.kv_heads
    rows = max(8, next_pow2(group))  # the products' q-head columns: the group, padded to 8
    # One workspace per out and split plan (made on the first call, so a warmed-up call
    # allocates nothing and can be captured in a CUDA graph); a second call while the
    # first is pending is refused by out's hold, so the workspace is never shared.
    # (keyed by every extent of it: out's shape fixes the batch but not the kv heads)
    part_acc, part_max, part_sum = derived(oa, ("workspace", batch * kv_heads, split.splits, rows, head_dim), lambda: (
        api.empty([batch * kv_heads, split.splits, rows * head_dim], dtype="f32"),
        api.empty([batch * kv_heads, split.splits, rows], dtype="f32"),
        api.empty([batch * kv_heads, split.splits, rows], dtype="f32")))
    split_kernel, merge_kernel = decode_kernels(qa.dtype, la.dtype, *kept.hints)
    first = split_kernel(part_acc.permute(0, 1, 2).partition([1, 1, rows * head_dim]),
                         part_max.permute(0, 1, 2).partition([1, 1, rows]),
                         part_sum.permute(0, 1, 2).partition([1, 1, rows]),
                         qa, ka, va, la, kept.scale_log2, split.tiles_per_split,
                         KV_HEADS=kv_heads, GROUP=group, BN=split.tile_n)
    return Pending(first, lambda: out, then=lambda _: merge_kernel(
        target.partition([1, 1, head_dim]), part_acc, part_max, part_sum, KV_HEADS=kv_heads, GROUP=group,
        SP=next_pow2(split.splits)))


def _decode_attention_launch(q: Any, k_cache: Any, v_cache: Any, seq_lens: Any, *, scale: float | None = None,
                             out: Any, config: dict[str, Any] | None = None) -> Pending:
    """Attention of one query token per sequence over its cached keys and values.

    Args:
        q: ``(batch, q_heads, head_dim)``, f16 or bf16; head_dim 64 or 128.
        k_cache, v_cache: ``(batch, kv_heads, max_seq, head_dim)`` of q's dtype, kv_heads
            dividing q_heads (any strides).
        seq_lens: i32 or i64 of shape ``(batch,)``, or a list of ints: each sequence's
            valid length, 0 to max_seq (checked on the host when the host holds them; a
            device tensor's are checked by the kernel's assert, see the module doc).
        scale: the scores' factor (default ``1 / sqrt(head_dim)``).
        out: ``(batch, q_heads, head_dim)`` of q's dtype, written (not overlapping an input).
        config: a config of `SPACE` (default: the tuner's for this shape).
    """
    key = _key(q, k_cache, v_cache, seq_lens, scale, out, config)
    kept = _PLANS.get(key) if key is not None else None
    if kept is not None:  # every check but the lengths' values (on the host) came out so for these layouts
        lens_values = host_values(seq_lens)
        if lens_values is not None:
            _check_lengths(lens_values, kept.max_seq)
        return _launch_kept(kept, q, k_cache, v_cache, seq_lens, out, out)
    qa = as_tensor(q, "decode_attention()", "q").tensor
    ka = as_tensor(k_cache, "decode_attention()", "k_cache").tensor
    va = as_tensor(v_cache, "decode_attention()", "v_cache").tensor
    lens_values = integer_values(seq_lens, "decode_attention", "seq_lens")
    if lens_values is not None:  # a host argument no kernel reads in place: uploaded
        la = api.from_numpy(lens_values, device=None if qa.device == "cpu" else qa.device)
    else:
        la = as_tensor(seq_lens, "decode_attention()", "seq_lens").tensor
        lens_values = host_values(la)
    if _dtype_of(qa) not in _DTYPES:
        raise _fail("q", f"has dtype {_dtype_of(qa)}; expected f16 or bf16", cutile.ArgumentTypeError)
    for name, tensor in (("k_cache", ka), ("v_cache", va)):
        if _dtype_of(tensor) != _dtype_of(qa):
            raise _fail(name, f"has dtype {_dtype_of(tensor)}; expected q's {_dtype_of(qa)}", cutile.ArgumentTypeError)
    if _dtype_of(la) not in _INDEX_DTYPES:
        raise _fail("seq_lens", f"has dtype {_dtype_of(la)}; expected i32 or i64", cutile.ArgumentTypeError)
    if qa.ndim != 3:
        raise _fail("q", f"must be (batch, q_heads, head_dim), got shape {list(qa.shape)}")
    batch, q_heads, head_dim = (int(n) for n in qa.shape)
    if head_dim not in (64, 128):
        raise _fail("q", f"has head_dim {head_dim}; expected 64 or 128")
    if ka.ndim != 4:
        raise _fail("k_cache", f"must be (batch, kv_heads, max_seq, head_dim), got shape {list(ka.shape)}")
    kv_heads, max_seq = int(ka.shape[1]), int(ka.shape[2])
    if (int(ka.shape[0]), int(ka.shape[3])) != (batch, head_dim):
        raise _fail("k_cache", f"of shape {list(ka.shape)} must have q's batch {batch} and head_dim {head_dim}")
    if tuple(va.shape) != tuple(ka.shape):
        raise _fail("v_cache", f"has shape {list(va.shape)}; expected k_cache's {list(ka.shape)}")
    if kv_heads == 0 or q_heads % kv_heads:
        raise _fail("k_cache", f"has {kv_heads} kv heads, which must divide q's {q_heads} heads")
    if batch == 0 or q_heads == 0 or max_seq == 0:
        raise _fail("k_cache", f"of shape {list(ka.shape)} (with q {list(qa.shape)}) is empty")
    if max_seq >= 2**31:
        raise _fail("k_cache", f"has max_seq {max_seq}, past 2**31 - 1")
    if tuple(la.shape) != (batch,):
        raise _fail("seq_lens", f"has shape {list(la.shape)}; expected [{batch}] (one length per sequence)")
    if lens_values is not None:
        _check_lengths(lens_values, max_seq)
    if scale is None:
        scale = 1.0 / math.sqrt(head_dim)
    elif isinstance(scale, bool) or not isinstance(scale, (int, float, np.floating)) or not math.isfinite(scale):
        raise _fail("scale", f"must be a finite number, got {scale!r}", cutile.ArgumentTypeError)
    if out is None:
        raise _fail("out", "is required by decode_attention.launch (decode_attention(...) makes one)")
    oa = as_tensor(out, "decode_attention()", "out").tensor
    if tuple(oa.shape) != tuple(qa.shape):
        raise _fail("out", f"has shape {list(oa.shape)}; expected q's {list(qa.shape)}")
    if _dtype_of(oa) != _dtype_of(qa):
        raise _fail("out", f"has dtype {_dtype_of(oa)}; expected q's {_dtype_of(qa)}", cutile.ArgumentTypeError)
    for name, tensor in (("q", qa), ("k_cache", ka), ("v_cache", va), ("seq_lens", la)):
        if _spans_overlap(oa, tensor):
            raise _fail("out", f"overlaps the memory of parameter '{name}'; pass a separate array")
    if config is not None:
        chosen = config_of("decode_attention", config, SPACE, DEFAULT)
    else:
        chosen = TUNER.config((batch, q_heads, kv_heads, max_seq, head_dim))
    group = q_heads // kv_heads
    split = plan(chosen, (batch, q_heads, kv_heads, max_seq, head_dim))
    hints = (int(chosen["occupancy"]), int(chosen["num_worker_warps"]), int(chosen["latency"]))
    kept = _Kept(split, hints, batch, kv_heads, group, head_dim, max_seq, float(scale) * _LOG2E)
    if key is not None:  # (cutile tensors: read as they are, as the kept plan reads them)
        _PLANS.keep(key, kept)
    return _launch_kept(kept, qa, ka, va, la, oa, out)


def _decode_attention(q: Any, k_cache: Any, v_cache: Any, seq_lens: Any, *, scale: float | None = None,
                      out: Any = None, config: dict[str, Any] | None = None) -> Any:
    """Attention of one query token per sequence over its cache (see the module doc).

    Takes the arguments of `decode_attention.launch` (``out`` optional: a new array of
    q's kind is made) and returns ``out``."""
    if out is None:
        operand = as_tensor(q, "decode_attention()", "q")
        shape = [int(n) for n in operand.tensor.shape]
        made, handed = operand.empty_like_kind(tuple(shape), operand.tensor.dtype) if operand.tensor.ndim == 3 \
            else (None, None)
        if made is None:
            raise _fail("q", f"must be (batch, q_heads, head_dim), got shape {shape}")
        _decode_attention_launch(q, k_cache, v_cache, seq_lens, scale=scale, out=made, config=config).run()
        return operand.result(made, handed)
    return _decode_attention_launch(q, k_cache, v_cache, seq_lens, scale=scale, out=out, config=config).run()


class DecodeAttention(Protocol):
    """`decode_attention`'s type: the call, and ``.launch(...)`` giving the `Pending` work."""

    def __call__(self, q: Any, k_cache: Any, v_cache: Any, seq_lens: Any, *, scale: float | None = None,
                 out: Any = None, config: dict[str, Any] | None = None) -> Any: ...

    def launch(self, q: Any, k_cache: Any, v_cache: Any, seq_lens: Any, *, scale: float | None = None,
               out: Any, config: dict[str, Any] | None = None) -> Pending: ...


_decode_attention.__name__ = _decode_attention.__qualname__ = "decode_attention"
_decode_attention.launch = _decode_attention_launch  # type: ignore[attr-defined]
decode_attention = cast(DecodeAttention, _decode_attention)
