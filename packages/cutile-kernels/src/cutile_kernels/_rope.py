"""Rotary position embedding (RoPE) of queries and keys, in place or out of place.

``rope(q, k, positions, theta)`` rotates each pair of features of every head of q and
k by the angle ``position * theta ** (-2 i / head_dim)``: the pairs are ``(x[i],
x[i + head_dim / 2])`` for ``style="neox"`` (GPT-NeoX, Llama, Qwen) and ``(x[2 i],
x[2 i + 1])`` for ``style="gptj"`` (GPT-J, interleaved). cos and sin are computed in the
kernel from the positions (f32), so positions may change between launches (decode)
with nothing on the host to update.

q and k are ``(tokens, heads, head_dim)`` (any strides) or ``(batch, seq, heads,
head_dim)`` (contiguous); positions has their leading shape (``(tokens,)`` or
``(batch, seq)``), i32 or i64. k may have fewer heads than q (GQA). One launch rotates
both: its written tensors are mapped partitions of one token's heads a tile, and each
block walks its share of the tokens through q's tiles, then the same tokens through k's.
neox rotates halves: its tiles are half heads, the halves axis owned by each item, so a
block loads a head's two halves as two tiles and stores the rotated halves as two tiles
(splitting a loaded head and joining the rotated halves with `cat` moved every element
through shared memory on sm_90, which held the kernel near half the copy bandwidth).
gptj's pairs are adjacent elements: its tiles are whole heads, split and joined in
registers. A tile holds one token: with several, sm_90's code broadcast their angles
over the heads through shared memory.

A call of at least `TABLE_TOKENS` tokens (a prefill) makes the cos and sin table of its
tokens first, one launch with one angle per thread, and rotates reading it: computed in
the rotation's layout, sin and cos are evaluated many times over per thread (about 40 on
sm_90, some 30 instructions an element), which kept such calls far below the copy
bandwidth. Both ways compute the same f32 angles, so they give the same results.
"""

# No `from __future__ import annotations`: kernel annotations name the factory's dtypes, which cutile's
# mypy plugin cannot read (it takes literal dtypes such as f32): hence their `type: ignore[misc]`.

import functools
import inspect
import math
from typing import Any

import cutile
from cutile import api, tune
from cutile.core import Constant, Mut, Tensor, arange, bid, cat, cos, exp, extract, f32, sin

from cutile_kernels import _pointwise as pw
from cutile_kernels._operands import Operand, as_tensor, derived, output

STYLES = ("neox", "gptj")
#: calls of this many tokens or more rotate by a table of their cos and sin (module doc)
TABLE_TOKENS = 64
TABLE_TILE_TOKENS = 16  # the table kernel's tokens per block
#: block_elems: the elements a block rotates (whole tokens of q's heads, a power of two of
#: them, walked one token at a time): it sets the launch's blocks; occupancy: blocks per SM
SPACE = tune.Space(block_elems=[2048, 4096, 8192, 16384, 32768, 65536], occupancy=[1, 2, 4])
DEFAULT = {"block_elems": 8192, "occupancy": 2}


def _rotated(x: Any, cos_t: Any, sin_t: Any, BT: int, H: int, D: int, NEOX: bool) -> Any:
    """x (BT, H, D) rotated, in f32; cos_t and sin_t broadcast over the split halves."""
    HALF = D // 2
    if NEOX:
        x4 = x.reshape((BT, H, 2, HALF))
        x1 = extract(x4, (0, 0, 0, 0), (BT, H, 1, HALF))
        x2 = extract(x4, (0, 0, 1, 0), (BT, H, 1, HALF))
    else:
        x4 = x.reshape((BT, H, HALF, 2))
        x1 = extract(x4, (0, 0, 0, 0), (BT, H, HALF, 1))
        x2 = extract(x4, (0, 0, 0, 1), (BT, H, HALF, 1))
    joined = cat(x1 * cos_t - x2 * sin_t, x2 * cos_t + x1 * sin_t, 2 if NEOX else 3)
    return joined.reshape((BT, H, D))


def _angles(positions: Any, t: Any, freq_scale: Any, D: int, NEOX: bool) -> tuple[Any, Any]:
    """cos and sin of ``position * exp(i * freq_scale)`` for token ``t``, shaped to
    broadcast over a tile's halves (neox: ``(1, 1, HALF)``, the tiles of either half;
    gptj: `_rotated`'s) (``freq_scale = -2 ln(theta) / head_dim``)."""
    HALF = D // 2
    pos = positions.load(index=(t,), shape=(1,)).astype(f32)
    inv_freq = exp(arange(HALF).astype(f32) * freq_scale)
    shape = (1, 1, HALF) if NEOX else (1, 1, HALF, 1)
    angle = pos.reshape((1, 1)) * inv_freq.reshape((1, HALF))
    return cos(angle).reshape(shape), sin(angle).reshape(shape)


def _tabled_angles(table: Any, t: Any, freq_scale: Any, D: int, NEOX: bool) -> tuple[Any, Any]:
    """`_angles` read from a table of ``(tokens, D)``: each token's cos then sin
    (``freq_scale`` is the table's, unused: `_angles`' parameters)."""
    HALF = D // 2
    shape = (1, 1, HALF) if NEOX else (1, 1, HALF, 1)
    cos_t = table.load(index=(t, 0), shape=(1, HALF)).reshape(shape)
    sin_t = table.load(index=(t, 1), shape=(1, HALF)).reshape(shape)
    return cos_t, sin_t


def _tile_at(x: Any, index: Any, H: int, DT: int, INPLACE: bool) -> Any:
    """``x``'s ``(1, H, DT)`` tile at ``index``, in f32 (in place ``x`` is the mapped
    partition written: its tile is loaded at the schedule's index, no shape given)."""
    if INPLACE:
        tile = x.load(index)
    else:
        tile = x.load(index=index, shape=(1, H, DT))
    return tile.astype(f32)


def _rotate_tile(out: Any, x: Any, idx: Any, cos_t: Any, sin_t: Any, H: int, DT: int, NEOX: bool,
                 INPLACE: bool) -> None:
    """Schedule item ``idx`` of ``out`` (a mapped partition of ``(1, H, DT)`` tiles) made
    from the same tile of ``x`` (``out`` itself in place). neox: ``DT`` is half the head
    dim and the halves axis is owned (its two tiles are the halves): each half is loaded
    and stored as a tile of its own, with no split or join of registers (a join moved
    the data through shared memory). gptj: whole heads, split and joined by `_rotated`."""
    t, h, _ = idx
    if NEOX:
        x1 = _tile_at(x, (t, h, 0), H, DT, INPLACE)
        x2 = _tile_at(x, (t, h, 1), H, DT, INPLACE)
        out.store((x1 * cos_t - x2 * sin_t).astype(out.dtype), (t, h, 0))
        out.store((x2 * cos_t + x1 * sin_t).astype(out.dtype), (t, h, 1))
    else:
        whole = _tile_at(x, idx, H, DT, INPLACE)
        out.store(_rotated(whole, cos_t, sin_t, 1, H, DT, NEOX).astype(out.dtype), idx)


@functools.lru_cache(maxsize=None)
def angle_table_kernel(pos_dtype: Any) -> Any:
    """The kernel writing each token's cos and sin (``(tokens, head_dim)`` f32: the
    half-dim angles' cos, then their sin), `_angles`' values."""
    def rope_angle_table(table: Any, positions: Any, freq_scale: Any, BT: Any, D: Any) -> None:
        HALF = D // 2
        pos = positions.load(index=(bid(0),), shape=(BT,)).astype(f32)
        angle = pos.reshape((BT, 1)) * exp(arange(HALF).astype(f32) * freq_scale).reshape((1, HALF))
        table.store(cat(cos(angle), sin(angle), 1))
    rope_angle_table.__annotations__ = {"table": Mut[Tensor[f32, ["BT", "D"]]], "positions": Tensor[pos_dtype, [-1]],
                                        "freq_scale": f32, "BT": Constant[int], "D": Constant[int], "return": None}
    return cutile.entry(rope_angle_table)


@functools.lru_cache(maxsize=None)
def rope_kernel(dtype: Any, pos_dtype: Any, neox: bool, inplace: bool, occupancy: int, tabled: bool = False) -> Any:
    """The RoPE kernel for one dtype, positions dtype, style and form; ``tabled``: its
    angles read from `angle_table_kernel`'s table (passed for the positions).

    The written tensors (q_out and k_out, or q and k in place) are mapped partitions of
    one token's heads a tile, ``(1, HQ or HK, DT)`` (`partitions`): each block rotates
    its share of q's tokens, then the same share of k's (both have a tile per token and
    the launch's blocks, so the same tokens: the angles read again come from L1 or L2).
    ``D`` is the head dim, ``DT`` a tile's share of it (`_rotate_tile`)."""
    hints = {"occupancy": occupancy}
    rotate_tile, angles = cutile.function(_rotate_tile), cutile.function(_tabled_angles if tabled else _angles)
    # the parameters both forms take after their tensors
    shared = {"positions": Tensor[f32, [-1, "D"]] if tabled else Tensor[pos_dtype, [-1]], "freq_scale": f32,
              "HQ": Constant[int], "HK": Constant[int], "DT": Constant[int], "D": Constant[int],
              "NEOX": Constant[bool], "return": None}
    if inplace:
        def rope_inplace(q: Any, k: Any, positions: Any, freq_scale: Any, HQ: Any, HK: Any, DT: Any, D: Any,
                         NEOX: Any) -> None:
            for idx in q.tiles():
                cos_t, sin_t = angles(positions, idx[0], freq_scale, D, NEOX)
                rotate_tile(q, q, idx, cos_t, sin_t, HQ, DT, NEOX, True)
            for idx in k.tiles():
                cos_t, sin_t = angles(positions, idx[0], freq_scale, D, NEOX)
                rotate_tile(k, k, idx, cos_t, sin_t, HK, DT, NEOX, True)
        rope_inplace.__annotations__ = {"q": Mut[Tensor[dtype, [1, "HQ", "DT"]]],
                                        "k": Mut[Tensor[dtype, [1, "HK", "DT"]]], **shared}
        return cutile.entry(hints=hints)(rope_inplace)

    def rope(q_out: Any, k_out: Any, q: Any, k: Any, positions: Any, freq_scale: Any, HQ: Any, HK: Any, DT: Any,
             D: Any, NEOX: Any) -> None:
        for idx in q_out.tiles():
            cos_t, sin_t = angles(positions, idx[0], freq_scale, D, NEOX)
            rotate_tile(q_out, q, idx, cos_t, sin_t, HQ, DT, NEOX, False)
        for idx in k_out.tiles():
            cos_t, sin_t = angles(positions, idx[0], freq_scale, D, NEOX)
            rotate_tile(k_out, k, idx, cos_t, sin_t, HK, DT, NEOX, False)
    rope.__annotations__ = {"q_out": Mut[Tensor[dtype, [1, "HQ", "DT"]]], "k_out": Mut[Tensor[dtype, [1, "HK", "DT"]]],
                            "q": Tensor[dtype, [-1, -1, -1]], "k": Tensor[dtype, [-1, -1, -1]], **shared}
    return cutile.entry(hints=hints)(rope)


def partitions(q: cutile.Tensor, k: cutile.Tensor, blocks: int, neox: bool) -> tuple[cutile.Partition, cutile.Partition]:
    """q and k (``(tokens, heads, head_dim)``, written) as `rope_kernel`'s mapped
    partitions on ``blocks`` blocks: a tile is one token's heads, the head dim whole
    (gptj) or halved, the halves axis owned (neox). One token a tile: with several,
    sm_90's code broadcast their angles over the heads through shared memory."""
    width, halves = (q.shape[2] // 2, cutile.OWNED) if neox else (q.shape[2], 1)
    return (q.partition([1, pw.next_pow2(q.shape[1]), width]).map([1, 1, halves], blocks=blocks),
            k.partition([1, pw.next_pow2(k.shape[1]), width]).map([1, 1, halves], blocks=blocks))


def tokens_per_block(config: dict[str, Any], heads: int, head_dim: int, tokens: int) -> int:
    """The config's element budget per block in whole tokens (a power of two): the
    tokens each block walks."""
    per_token = pw.next_pow2(heads) * head_dim
    budget = max(1, int(config["block_elems"]) // per_token)
    return min(1 << (budget.bit_length() - 1), pw.next_pow2(tokens))


def block_count(config: dict[str, Any], heads: int, head_dim: int, tokens: int) -> int:
    """The launch's blocks for a config: ``tokens`` over `tokens_per_block`."""
    return -(-tokens // tokens_per_block(config, heads, head_dim, tokens))


def _setup(config: dict[str, Any], shape: tuple[int, ...]) -> Any:
    """A search's runner for one shape (bf16, the dtype models run in; the bucket does not
    hold the dtype)."""
    tokens, heads_q, heads_k, head_dim = shape
    q = cutile.api.randn([tokens, heads_q, head_dim], "bf16", seed=1)
    k = cutile.api.randn([tokens, heads_k, head_dim], "bf16", seed=2)
    positions = cutile.api.arange(tokens, dtype="i32")
    return lambda: rope.launch(q, k, positions, config=config).op


TUNER = pw.tuner("rope", SPACE, DEFAULT, _setup, inspect.getsource(_rotated) + inspect.getsource(_angles)
                 + inspect.getsource(_tabled_angles) + inspect.getsource(_tile_at) + inspect.getsource(_rotate_tile)
                 + inspect.getsource(angle_table_kernel) + inspect.getsource(rope_kernel)
                 + inspect.getsource(partitions) + inspect.getsource(tokens_per_block)
                 + inspect.getsource(block_count) + f"TABLE_TOKENS={TABLE_TOKENS} TABLE_TILE_TOKENS={TABLE_TILE_TOKENS}")


def _rope_launch(q: Any, k: Any, positions: Any, theta: float = 10000.0, *, style: str = "neox",
                 out_q: Any = None, out_k: Any = None, inplace: bool = False,
                 config: dict[str, Any] | None = None) -> pw.Pending:
    """RoPE of q and k at ``positions``: returns ``(q_rotated, k_rotated)`` (q and k
    themselves with ``inplace=True``; ``out_q``/``out_k`` when given).

    Args:
        q: ``(tokens, heads, head_dim)`` or ``(batch, seq, heads, head_dim)``; f16, bf16
            or f32; head_dim an even power of two.
        k: the same layout and dtype, with any number of heads (GQA).
        positions: i32 or i64, shaped as q's leading dims (one position per token).
        theta: the base of the frequencies (10000 in most models; 1e6 in Qwen2+).
        style: ``"neox"`` (halves) or ``"gptj"`` (interleaved pairs).
        out_q, out_k: arrays to write (out of place; not overlapping q or k).
        inplace: rotate q and k in their own memory (no out_q / out_k then).
        config: a config of `SPACE` (default: the tuner's for this shape).
    """
    fn = "rope"
    if style not in STYLES:
        raise cutile.ArgumentError(f"{fn}(): parameter 'style' must be 'neox' or 'gptj', got {style!r}")
    if not isinstance(theta, (int, float)) or isinstance(theta, bool) or not theta > 1.0 or math.isinf(theta):
        raise cutile.ArgumentError(f"{fn}(): parameter 'theta' must be a finite number above 1, got {theta!r}")
    if inplace and (out_q is not None or out_k is not None):
        raise cutile.ArgumentError(f"{fn}(): 'inplace=True' writes q and k themselves; do not pass out_q / out_k")
    qa, ka = as_tensor(q, fn, "q"), as_tensor(k, fn, "k")
    pa = as_tensor(positions, fn, "positions")
    pw.check_dtype(qa, pw.FLOAT_DTYPES, fn, "q")
    pw.check_same_dtype(qa, ka, fn, "q", "k")
    pw.check_dtype(pa, pw.INT_DTYPES, fn, "positions")
    pw.check_rank(qa, (3, 4), fn, "q")
    if len(ka.shape) != len(qa.shape):
        raise cutile.ArgumentError(f"{fn}(): parameters 'q' {list(qa.shape)} and 'k' {list(ka.shape)} must have "
                                   "the same number of dimensions")
    lead, head_dim = qa.shape[:-2], qa.shape[-1]
    if ka.shape[:-2] != lead or ka.shape[-1] != head_dim:
        raise cutile.ArgumentError(f"{fn}(): parameter 'k' of shape {list(ka.shape)} must match q's "
                                   f"{list(qa.shape)} but for its number of heads")
    if head_dim < 2 or head_dim & (head_dim - 1):
        raise cutile.ArgumentError(f"{fn}(): head_dim (the last dim of 'q') must be an even power of two, got "
                                   f"{head_dim}")
    if pa.shape != lead:
        raise cutile.ArgumentError(f"{fn}(): parameter 'positions' has shape {list(pa.shape)}; expected q's "
                                   f"leading shape {list(lead)} (one position per token)")
    for operand, name in ((qa, "q"), (ka, "k")):
        if math.prod(operand.shape) == 0:  # (a mapped partition has a tile per axis at least)
            raise cutile.ArgumentError(f"{fn}(): parameter '{name}' of shape {list(operand.shape)} is empty; rope "
                                       "rotates at least one token of at least one head")
    tokens = math.prod(lead)
    heads_q, heads_k = qa.shape[-2], ka.shape[-2]
    q3 = pw.reshaped(qa, (tokens, heads_q, head_dim), fn, "q")
    k3 = pw.reshaped(ka, (tokens, heads_k, head_dim), fn, "k")
    p1 = pw.reshaped(pa, (tokens,), fn, "positions")
    chosen = pw.config_of(fn, config, SPACE, DEFAULT) if config is not None else TUNER.config((tokens, heads_q, heads_k, head_dim))
    blocks = block_count(chosen, max(heads_q, heads_k), head_dim, tokens)
    tabled = tokens >= TABLE_TOKENS
    kernel = rope_kernel(qa.tensor.dtype, pa.tensor.dtype, style == "neox", inplace, int(chosen["occupancy"]), tabled)
    freq_scale = -2.0 * math.log(float(theta)) / head_dim
    neox = style == "neox"
    if inplace:
        written, finish = qa.tensor, (lambda: (q, k))
    else:
        oq = output(out_q, qa.shape, qa.tensor.dtype, qa, fn, "out_q", {"q": qa.tensor, "k": ka.tensor})
        ok = output(out_k, ka.shape, ka.tensor.dtype, ka, fn, "out_k",
                    {"q": qa.tensor, "k": ka.tensor, "out_q": oq.tensor})
        q3o = pw.reshaped(Operand.of(oq.tensor), (tokens, heads_q, head_dim), fn, "out_q")
        k3o = pw.reshaped(Operand.of(ok.tensor), (tokens, heads_k, head_dim), fn, "out_k")
        written, finish = oq.tensor, (lambda: (oq.result(), ok.result()))

    def rotate(angles: Any) -> Any:
        if inplace:
            return kernel(*partitions(q3, k3, blocks, neox), angles, freq_scale, D=head_dim, NEOX=neox)
        return kernel(*partitions(q3o, k3o, blocks, neox), q3, k3, angles, freq_scale, D=head_dim, NEOX=neox)

    if not tabled:
        return pw.Pending(rotate(p1), finish)
    # The table per written tensor (made once: a warmed-up call allocates nothing, so it can
    # be captured in a CUDA graph; that tensor's hold keeps two pending calls from sharing it).
    table = derived(written, ("rope_table", tokens, head_dim), lambda: api.empty([tokens, head_dim], dtype=f32))
    first = angle_table_kernel(pa.tensor.dtype)(table[...].partition([TABLE_TILE_TOKENS, head_dim]), p1,
                                                freq_scale)
    return pw.Pending(first, finish, then=lambda _: rotate(table))


rope = pw.library_function(_rope_launch)
