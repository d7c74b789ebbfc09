"""``qk_norm`` and ``qk_norm_rope``: RMSNorm over the head dim of queries and keys (Qwen3's
q_norm / k_norm), each with its own weight, in one launch; ``qk_norm_rope`` rotates the
normalized heads by RoPE in the same launch.

One kernel does both tensors. q's and k's outputs are mapped partitions of
``(tokens, heads, head_dim)`` tiles (the head dim whole, as many heads, then tokens, as
the config's element budget holds; q and k each their own tile shape), and each block
walks its share of q's tiles, then of k's: any sizes in one launch. A tile's heads are
normalized in fp32 with q's or k's weight and stored rounded to the dtype. With RoPE,
the rounded heads are rotated as `rope` rotates them (cos and sin made in the kernel
from the tile's positions), so ``qk_norm_rope`` gives exactly what ``qk_norm`` followed
by ``rope`` gives, minus one launch and one round trip through memory.

Layouts. q and k are ``(tokens, heads, head_dim)`` with any strides (e.g. views of a
fused QKV projection's output: the head axis sliced) or ``(batch, seq, heads,
head_dim)`` contiguous; k may have fewer heads (GQA). ``qk_norm`` alone takes any
other leading shapes too (e.g. ``(batch, heads, seq, head_dim)``): the rows of each are
independent, so they are the heads of one token (an input of such a layout that is not
contiguous is copied first, an output must be contiguous).
"""

# No `from __future__ import annotations`: kernel annotations name the factory's dtypes.

import functools
import inspect
import math
from collections.abc import Mapping
from typing import Any

import cutile
from cutile import api, tune
from cutile.core import Constant, Mut, Tensor, arange, cos, exp, f32, rsqrt, sin, sum

from cutile_kernels import _pointwise as pw
from cutile_kernels import _rows
from cutile_kernels._operands import KeptPlans, Operand, Output, as_tensor, memory_layout, output
from cutile_kernels._rope import STYLES, _rotated
from cutile_kernels._rows import Plan

#: block_elems: a tile's elements (whole heads of whole tokens, powers of two of them);
#: max_blocks: the launch's blocks at most; occupancy: blocks per SM the compiler aims for
#: (a decode step has one token: its few heads need small tiles to spread over blocks)
SPACE = tune.Space(block_elems=[128, 256, 512, 1024, 2048, 4096, 8192, 16384], max_blocks=[132, 264, 528, 1056],
                   occupancy=[1, 2, 4])
DEFAULT = {"block_elems": 1024, "max_blocks": 528, "occupancy": 2}  # (larger tiles ran several times slower on sm_90)


def _normed_heads(x: Any, w: Any, t: Any, h: Any, eps: Any, inv_d: Any, BT: int, BH: int, D: int) -> Any:  # noqa: N803
    """Tile ``(t, h)`` of ``x``'s ``(BT, BH, D)`` tiles (tokens, heads, head_dim)
    RMS-normalized per head with weight ``w``, in fp32 (padding reads 0 and stays 0)."""
    x_tile = x.load(index=(t, h, 0), shape=(BT, BH, D)).astype(f32)
    scale = rsqrt(sum(x_tile * x_tile, axis=2, keepdims=True) * inv_d + eps)
    return x_tile * scale * w.load(index=(0,), shape=(D,)).astype(f32).reshape((1, 1, D))


def _angles_at(positions: Any, t: Any, freq_scale: Any, BT: int, D: int, NEOX: bool) -> tuple[Any, Any]:  # noqa: N803
    """cos and sin of token tile ``t``'s angles, shaped to broadcast over `_rotated`'s
    halves (`_rope._angles` for a tile of a schedule)."""
    HALF = D // 2
    pos = positions.load(index=(t,), shape=(BT,)).astype(f32)
    inv_freq = exp(arange(HALF).astype(f32) * freq_scale)
    shape = (BT, 1, 1, HALF) if NEOX else (BT, 1, HALF, 1)
    angle = pos.reshape((BT, 1)) * inv_freq.reshape((1, HALF))
    return cos(angle).reshape(shape), sin(angle).reshape(shape)


@functools.lru_cache(maxsize=None)
def qk_norm_kernel(dtype: Any, q_wdtype: Any, k_wdtype: Any, pos_dtype: Any, occupancy: int) -> Any:
    """The kernel for one dtype, the weights' dtypes and, with RoPE, the positions'
    dtype (``pos_dtype`` None: the norm alone). q's and k's outputs are mapped
    partitions of ``(BT, BH, D)`` tiles, each with its own tile shape; every block walks
    its share of q's tiles, then of k's (one launch for both, whatever their sizes)."""
    hints = {"occupancy": occupancy}
    normed_heads = cutile.function(_normed_heads)
    tensors = {"q_out": Mut[Tensor[dtype, ["BTQ", "BHQ", "D"]]], "k_out": Mut[Tensor[dtype, ["BTK", "BHK", "D"]]],
               "q": Tensor[dtype, [-1, -1, -1]], "k": Tensor[dtype, [-1, -1, -1]],
               "q_weight": Tensor[q_wdtype, [-1]], "k_weight": Tensor[k_wdtype, [-1]]}
    constants = {"BTQ": Constant[int], "BHQ": Constant[int], "BTK": Constant[int], "BHK": Constant[int],
                 "D": Constant[int]}
    if pos_dtype is None:
        def qk_norm_heads(q_out: Any, k_out: Any, q: Any, k: Any, q_weight: Any, k_weight: Any, eps: Any,
                          inv_d: Any, BTQ: Any, BHQ: Any, BTK: Any, BHK: Any, D: Any) -> None:  # noqa: N803
            for idx in q_out.tiles():
                t, h, _ = idx
                q_out.store(normed_heads(q, q_weight, t, h, eps, inv_d, BTQ, BHQ, D).astype(dtype), idx)
            for idx in k_out.tiles():
                t, h, _ = idx
                k_out.store(normed_heads(k, k_weight, t, h, eps, inv_d, BTK, BHK, D).astype(dtype), idx)
        qk_norm_heads.__annotations__ = {**tensors, "eps": f32, "inv_d": f32, **constants, "return": None}
        return cutile.entry(hints=hints)(qk_norm_heads)

    rotated, angles_at = cutile.function(_rotated), cutile.function(_angles_at)

    def qk_norm_rope_heads(q_out: Any, k_out: Any, q: Any, k: Any, q_weight: Any, k_weight: Any, positions: Any,
                           eps: Any, inv_d: Any, freq_scale: Any, BTQ: Any, BHQ: Any, BTK: Any, BHK: Any, D: Any,
                           NEOX: Any) -> None:  # noqa: N803
        # each head rounded to the dtype before its rotation: what rope reads after qk_norm stored it
        for idx in q_out.tiles():
            t, h, _ = idx
            cos_t, sin_t = angles_at(positions, t, freq_scale, BTQ, D, NEOX)
            normed = normed_heads(q, q_weight, t, h, eps, inv_d, BTQ, BHQ, D).astype(dtype).astype(f32)
            q_out.store(rotated(normed, cos_t, sin_t, BTQ, BHQ, D, NEOX).astype(dtype), idx)
        for idx in k_out.tiles():
            t, h, _ = idx
            cos_t, sin_t = angles_at(positions, t, freq_scale, BTK, D, NEOX)
            normed = normed_heads(k, k_weight, t, h, eps, inv_d, BTK, BHK, D).astype(dtype).astype(f32)
            k_out.store(rotated(normed, cos_t, sin_t, BTK, BHK, D, NEOX).astype(dtype), idx)
    qk_norm_rope_heads.__annotations__ = {**tensors, "positions": Tensor[pos_dtype, [-1]], "eps": f32, "inv_d": f32,
                                          "freq_scale": f32, **constants, "NEOX": Constant[bool], "return": None}
    return cutile.entry(hints=hints)(qk_norm_rope_heads)


def tile_of(config: Mapping[str, Any], tokens: int, heads: int, head_dim: int) -> tuple[int, int, int]:
    """The ``(tokens, heads, head_dim)`` tile within the config's element budget: the
    head dim whole, as many heads as fit (all when they do), then as many tokens
    (powers of two)."""
    budget, dp = int(config["block_elems"]), pw.next_pow2(head_dim)
    bh = min(pw.next_pow2(heads), _floor_pow2(max(1, budget // dp)))
    bt = min(pw.next_pow2(tokens), _floor_pow2(max(1, budget // (bh * dp))))
    return bt, bh, dp


def _floor_pow2(n: int) -> int:
    return 1 << (n.bit_length() - 1)


def _setup(config: dict[str, Any], shape: tuple[int, ...]) -> Any:
    """A search's runner for one shape (tokens, q heads, k heads, head_dim), bf16 with
    RoPE (the decode and prefill form)."""
    tokens, heads_q, heads_k, head_dim = shape
    q = api.randn([tokens, heads_q, head_dim], "bf16", seed=1)
    k = api.randn([tokens, heads_k, head_dim], "bf16", seed=2)
    q_out, k_out = api.empty([tokens, heads_q, head_dim], "bf16"), api.empty([tokens, heads_k, head_dim], "bf16")
    weight = api.ones([head_dim], "bf16")
    positions = api.arange(tokens, dtype="i32")
    return lambda: qk_norm_rope.launch(q, k, weight, weight, positions, out=(q_out, k_out), config=config)


TUNER = pw.tuner("qk_norm", SPACE, DEFAULT, _setup, inspect.getsource(_normed_heads) + inspect.getsource(_angles_at)
                 + inspect.getsource(_rotated) + inspect.getsource(qk_norm_kernel))


class _Heads:
    """q or k as the kernel's ``(tokens, heads, head_dim)`` view, and its output's."""

    def __init__(self, view: cutile.Tensor, out_view: cutile.Tensor) -> None:
        self.view, self.out_view = view, out_view

    @property
    def heads(self) -> int:
        return int(self.view.shape[1])


def _token_layout(q: Operand, k: Operand) -> bool:
    """q and k are ``(tokens, heads, D)`` or ``(batch, seq, heads, D)`` with the same
    leading dims (the layout RoPE takes)."""
    return q.tensor.ndim in (3, 4) and q.tensor.ndim == k.tensor.ndim and q.shape[:-2] == k.shape[:-2]


class _Planned:
    """What a checked call of (tokens, heads, head_dim) cutile tensors with both outputs
    given launches, made from its layouts alone (`_layout_key`): the kernel, the tiles
    and block count, and the kernel's constant scalars."""

    __slots__ = ("kernel", "tiles", "blocks", "inv_dim", "freq_scale", "neox")

    def __init__(self, kernel: Any, tiles: list[tuple[int, ...]], blocks: int, inv_dim: float,
                 freq_scale: float | None, neox: bool) -> None:
        self.kernel, self.tiles, self.blocks = kernel, tiles, blocks
        self.inv_dim, self.freq_scale, self.neox = inv_dim, freq_scale, neox


# (fn, the operands' layouts and addresses, RoPE's theta and style) -> a call's launch plan:
# what the checks, the config and the tiles came to for them (the memory is in the key: the
# outputs' overlap checks depend on it)
_PLANS: KeptPlans[_Planned] = KeptPlans()


def _layout_key(fn: str, q: Any, k: Any, q_weight: Any, k_weight: Any, rope: tuple[Any, float, str] | None,
                out: Any, config: Mapping[str, Any] | None) -> tuple[Any, ...] | None:
    """The key of `_PLANS` for a call of cutile tensors, q and k 3-D, both outputs given
    and no config= (None for any other call: it takes the checks every time)."""
    if config is not None or type(out) is not tuple or len(out) != 2:
        return None
    tensors = (q, k, q_weight, k_weight, out[0], out[1]) + ((rope[0],) if rope is not None else ())
    layouts = tuple(map(memory_layout, tensors))
    if None in layouts or q.ndim != 3:
        return None
    theta, style = (rope[1], rope[2]) if rope is not None else (None, None)
    if type(style) not in (str, type(None)) or type(theta) not in (int, float, type(None)):
        return None
    return (fn, layouts, type(theta), theta, style)


def _plan(fn: str, q: Any, k: Any, q_weight: Any, k_weight: Any, eps: float, rope: tuple[Any, float, str] | None,
          out: Any, config: Mapping[str, Any] | None) -> Plan:
    key = _layout_key(fn, q, k, q_weight, k_weight, rope, out, config)
    planned = _PLANS.get(key) if key is not None else None
    if planned is not None:  # every check but those of what can change (eps, consumed tensors) came out so
        eps = _rows.check_eps(eps, fn)
        q_out, k_out = out
        views = (q_out.permute(0, 1, 2), k_out.permute(0, 1, 2))  # (a view refuses a consumed tensor)
        mapped = [view.partition(list(tile)).map([1, 1, 1], blocks=planned.blocks)
                  for view, tile in zip(views, planned.tiles)]
        inputs = (q.permute(0, 1, 2), k.permute(0, 1, 2), q_weight, k_weight)
        finish = lambda: (q_out, k_out)  # noqa: E731
        if rope is None:
            return Plan(planned.kernel(*mapped, *inputs, eps, planned.inv_dim), finish)
        return Plan(planned.kernel(*mapped, *inputs, rope[0].permute(0), eps, planned.inv_dim, planned.freq_scale,
                                   NEOX=planned.neox), finish)
    made = _checked_plan(fn, q, k, q_weight, k_weight, eps, rope, out, config)
    plan, planned = made
    if key is not None and planned is not None:
        _PLANS.keep(key, planned)
    return plan


def _checked_plan(fn: str, q: Any, k: Any, q_weight: Any, k_weight: Any, eps: float,
                  rope: tuple[Any, float, str] | None, out: Any,
                  config: Mapping[str, Any] | None) -> tuple[Plan, _Planned | None]:
    """The call checked and planned, and what `_plan` keeps of it for a call in the same
    layouts (None: nothing to keep)."""
    qa, ka = as_tensor(q, fn, "q"), as_tensor(k, fn, "k")
    dtype = _rows.float_dtype(qa.tensor, fn, "q")
    _rows.float_dtype(ka.tensor, fn, "k")
    if str(ka.tensor.dtype) != str(dtype):
        raise cutile.ArgumentTypeError(f"{fn}: k has dtype {ka.tensor.dtype} and q {dtype}; they must agree")
    for operand, name in ((qa, "q"), (ka, "k")):
        if operand.tensor.ndim == 0:
            raise cutile.ArgumentError(f"{fn}: {name} is a scalar; expected (..., head_dim)")
    head_dim = qa.shape[-1]
    if ka.shape[-1] != head_dim:
        raise cutile.ArgumentError(f"{fn}: q's head dim is {head_dim} and k's {ka.shape[-1]}; they must agree")
    if head_dim == 0 and qa.tensor.size:
        raise cutile.ArgumentError(f"{fn}: q has rows of length 0 (its last dim)")
    wq = _rows.vector(q_weight, head_dim, fn, "q_weight")
    wk = _rows.vector(k_weight, head_dim, fn, "k_weight")
    eps = _rows.check_eps(eps, fn)
    given = _rows.outputs(out, 2, fn, "q_out, k_out")
    reads = {"q": qa.tensor, "k": ka.tensor, "q_weight": wq, "k_weight": wk}
    q_result = output(given[0], qa.shape, dtype, qa, fn, "out[0] (q)", reads)
    k_result = output(given[1], ka.shape, dtype, ka, fn, "out[1] (k)", {**reads, "out[0] (q)": q_result.tensor})
    finish = lambda: (q_result.result(), k_result.result())  # noqa: E731

    positions: cutile.Tensor | None = None
    if rope is not None:
        positions = check_rope(fn, qa, ka, rope)
        if qa.tensor.ndim == 4:  # batch and seq merged into tokens: RoPE needs the token axis
            for tensor, name in ((qa.tensor, "q"), (ka.tensor, "k"), (q_result.tensor, "out[0] (q)"),
                                 (k_result.tensor, "out[1] (k)")):
                if not tensor.is_contiguous:
                    raise cutile.ArgumentError(f"{fn}: {name} of shape {list(tensor.shape)} must be contiguous "
                                               "(a (batch, seq, heads, head_dim) input; (tokens, heads, head_dim) "
                                               "ones may have any strides)")
    if qa.tensor.size == 0 or ka.tensor.size == 0:
        if qa.tensor.size or ka.tensor.size:
            raise cutile.ArgumentError(f"{fn}: q {list(qa.shape)} and k {list(ka.shape)} must both hold rows or "
                                       "both be empty")
        return Plan(None, finish), None

    q_heads, k_heads = _views(fn, qa, ka, q_result, k_result)
    shape_key = (int(q_heads.view.shape[0]), q_heads.heads, k_heads.heads, head_dim)
    chosen = pw.config_of(fn, config, SPACE, DEFAULT) if config is not None else TUNER.config(shape_key)
    targets, tile_shapes = [], []
    for heads in (q_heads, k_heads):
        tile = tile_of(chosen, int(heads.view.shape[0]), heads.heads, head_dim)
        tile_shapes.append(tuple(tile))
        targets.append(heads.out_view.partition(list(tile)))
    tiles = [math.prod(target.grid) for target in targets]
    blocks = max(1, min(max(tiles), int(chosen["max_blocks"])))  # each block: its share of q's tiles, then k's
    mapped = [target.map([1, 1, 1], blocks=blocks) for target in targets]
    inputs = (q_heads.view, k_heads.view, wq, wk)
    occupancy = int(chosen["occupancy"])
    if positions is None:
        kernel = qk_norm_kernel(dtype, wq.dtype, wk.dtype, None, occupancy)
        launch = kernel(*mapped, *inputs, eps, 1.0 / head_dim)
        freq_scale = None
    else:
        assert rope is not None
        freq_scale = -2.0 * math.log(float(rope[1])) / head_dim
        kernel = qk_norm_kernel(dtype, wq.dtype, wk.dtype, positions.dtype, occupancy)
        launch = kernel(*mapped, *inputs, positions, eps, 1.0 / head_dim, freq_scale, NEOX=rope[2] == "neox")
    # Kept for a call in the same layouts only where it reads its operands as they are
    # (3-D q and k, positions 1-D, the weights as given).
    kept = None
    reads_as_given = wq is q_weight and wk is k_weight and qa.tensor is q and ka.tensor is k
    if qa.tensor.ndim == 3 and _token_layout(qa, ka) and reads_as_given and (rope is None or rope[0].ndim == 1):
        kept = _Planned(kernel, tile_shapes, blocks, 1.0 / head_dim, freq_scale,
                        rope is not None and rope[2] == "neox")
    return Plan(launch, finish), kept


def check_rope(fn: str, qa: Operand, ka: Operand, rope: tuple[Any, float, str]) -> cutile.Tensor:
    """RoPE's arguments ``(positions, theta, style)`` checked against q and k (their
    layout, an even power-of-two head dim): the positions as a 1-D tensor, one per token."""
    pos_value, theta, style = rope
    if style not in STYLES:
        raise cutile.ArgumentError(f"{fn}: parameter 'style' must be 'neox' or 'gptj', got {style!r}")
    if not isinstance(theta, (int, float)) or isinstance(theta, bool) or not theta > 1.0 or math.isinf(theta):
        raise cutile.ArgumentError(f"{fn}: parameter 'theta' must be a finite number above 1, got {theta!r}")
    if not _token_layout(qa, ka):
        raise cutile.ArgumentError(f"{fn}: q {list(qa.shape)} and k {list(ka.shape)} must be (tokens, heads, "
                                   "head_dim) or (batch, seq, heads, head_dim) with the same leading dims")
    head_dim = qa.shape[-1]
    if head_dim < 2 or head_dim & (head_dim - 1):
        raise cutile.ArgumentError(f"{fn}: head_dim (the last dim of 'q') must be an even power of two, got "
                                   f"{head_dim}")
    pa = as_tensor(pos_value, fn, "positions")
    pw.check_dtype(pa, pw.INT_DTYPES, fn, "positions")
    if pa.shape != qa.shape[:-2]:
        raise cutile.ArgumentError(f"{fn}: parameter 'positions' has shape {list(pa.shape)}; expected q's "
                                   f"leading shape {list(qa.shape[:-2])} (one position per token)")
    return pw.reshaped(pa, (math.prod(pa.shape),), fn, "positions")


def _views(fn: str, qa: Operand, ka: Operand, q_result: Output, k_result: Output) -> tuple[_Heads, _Heads]:
    """The kernel's ``(tokens, heads, D)`` views of q, k and their outputs: 3-D q and k
    of one token count as they are (any strides), contiguous ``(batch, seq, heads, D)``
    ones with batch and seq merged, else the rows of each as the heads of one token."""
    if _token_layout(qa, ka):
        pairs = ((qa, q_result), (ka, k_result))
        if qa.tensor.ndim == 3:
            q_heads, k_heads = (_Heads(a.tensor.permute(0, 1, 2), r.tensor.permute(0, 1, 2)) for a, r in pairs)
            return q_heads, k_heads
        if all(t.is_contiguous for t in (qa.tensor, ka.tensor, q_result.tensor, k_result.tensor)):
            tokens = math.prod(qa.shape[:-2])
            q_heads, k_heads = (_Heads(a.tensor.reshape(tokens, *a.shape[-2:]), r.tensor.reshape(tokens, *a.shape[-2:]))
                                for a, r in pairs)
            return q_heads, k_heads
    made = []
    for operand, result, name in ((qa, q_result, "q"), (ka, k_result, "k")):
        tensor = operand.tensor if operand.tensor.is_contiguous else api.copy(operand.tensor)  # read-only: as good
        if not result.tensor.is_contiguous:
            raise cutile.ArgumentError(f"{fn}: out ({name}) of shape {list(result.tensor.shape)} is not contiguous; "
                                       "an output of this layout must be (only (tokens, heads, head_dim) outputs "
                                       "may have any strides)")
        shape = (1, tensor.size // operand.shape[-1], operand.shape[-1])  # its rows as the heads of one token
        made.append(_Heads(tensor.reshape(*shape), result.tensor.reshape(*shape)))
    return made[0], made[1]


def _plan_qk_norm(q: Any, k: Any, q_weight: Any, k_weight: Any, eps: float = 1e-6, *, out: Any = None,
                  config: Mapping[str, Any] | None = None) -> Plan:
    """RMSNorm over the head dim of queries and keys (Qwen3's q_norm / k_norm), one launch
    for both.

    Args:
        q, k: ``(tokens, heads, head_dim)`` (any strides: e.g. head slices of a fused QKV
            output), or any leading shape (``(batch, heads, seq, head_dim)``,
            ``(batch, seq, heads, head_dim)``: the head dim is last); k may have fewer
            heads than q; one dtype (f16, bf16, f32).
        q_weight, k_weight: shape ``(head_dim,)``, f16, bf16 or f32.
        out: None or a tuple ``(q_out, k_out)`` (either may be None).
        config: a config of `SPACE` (``block_elems``, ``max_blocks``, ``occupancy``) instead of
            the tuned one.
    Returns:
        ``(q_normed, k_normed)``, of q's and k's kinds.
    """
    return _plan("qk_norm", q, k, q_weight, k_weight, eps, None, out, config)


def _plan_qk_norm_rope(q: Any, k: Any, q_weight: Any, k_weight: Any, positions: Any, eps: float = 1e-6,
                       theta: float = 10000.0, *, style: str = "neox", out: Any = None,
                       config: Mapping[str, Any] | None = None) -> Plan:
    """`qk_norm` then `rope` in one launch: each head of q and k RMS-normalized with its
    weight, rounded to the dtype and rotated at its token's position (the same numbers
    as the two calls).

    Args:
        q, k: ``(tokens, heads, head_dim)`` (any strides) or ``(batch, seq, heads,
            head_dim)`` (contiguous), one dtype; k may have fewer heads (GQA);
            head_dim an even power of two.
        q_weight, k_weight: shape ``(head_dim,)``.
        positions: i32 or i64, q's leading shape (one position per token).
        eps: the norm's epsilon.
        theta: RoPE's frequency base (1e6 in Qwen3).
        style: ``"neox"`` (halves) or ``"gptj"`` (interleaved pairs).
        out: None or a tuple ``(q_out, k_out)`` (either may be None; not overlapping q or k).
        config: a config of `SPACE` instead of the tuned one.
    Returns:
        ``(q_rotated, k_rotated)``, of q's and k's kinds.
    """
    return _plan("qk_norm_rope", q, k, q_weight, k_weight, eps, (positions, theta, style), out, config)


qk_norm = _rows.row_function(_plan_qk_norm)
qk_norm_rope = _rows.row_function(_plan_qk_norm_rope)
