"""Split-K matmul for small M·N and large K, and the operand and config checks the GEMV path shares.

``split_k_matmul(a, b, out)`` computes ``out = act(alpha * (a @ b) + bias) + residual``
in two safe kernels: S blocks per output tile each compute the product over one slice
of K into a float32 workspace ``[S, M, N]`` (block (s, i, j) owns the workspace tile
(s, i, j), so nothing is shared), then a reduction kernel sums the S partial tiles of
each output tile and applies the epilogue. With one split the product kernel applies
the epilogue itself and no workspace is made.

The weight ``b`` ([K, N]) is read in its stored order: when it is the transposed view
of an [N, K] row-major matrix (its K axis has stride 1, as a linear layer's weight
passed as ``w.T``), the kernels take that [N, K] matrix and load [BN, BK] tiles
contiguous along K; otherwise they load [BK, BN] tiles of b as it is.

The tile product is ``mma`` (a's tile rows on the tensor cores' M side) or ``mma_t``
(``(w aᵀ)ᵀ``: the weight tile's columns of out there, for a small M). tileiras
(13.4, sm_90) uses the tensor cores (HGMMA) only when that M side has 64 rows or more.

Activations: ``"relu"``, ``"gelu"`` (the tanh approximation: ``0.5 x (1 + tanh(√(2/π)
(x + 0.044715 x³)))``), ``"silu"`` (``x / (1 + e^-x)``) or None. Products accumulate in
float32; bias and residual (any of f16, bf16, f32) are added in float32; the result is
rounded once to out's dtype.
"""

import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import cutile
from cutile import api
from cutile.core import (
    Constant,
    Mut,
    Tensor,
    bf16,
    cdiv,
    exp,
    f16,
    f32,
    get_tile_block_id,
    maximum,
    minimum,
    mma,
    tanh,
    transpose,
    zeros,
)
from cutile.tune import WORKER_WARPS, Space
from cutile_kernels._operands import check_no_overlap, cutile_tensor, derived, private_view, require_live

__all__ = ["ACTIVATIONS", "Operands", "check_operands", "default_config", "prune_for", "space", "split_k_matmul"]

ACTIVATIONS: dict[str | None, int] = {None: 0, "relu": 1, "gelu": 2, "silu": 3}
FLOAT_DTYPES = (f16, bf16, f32)
SM_COUNT = 132  # the H200's; a default only decides how many blocks to aim for
GELU_SCALE = math.sqrt(2.0 / math.pi)


# -- operands ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Operands:
    """A checked call: the shapes, the weight as the kernels read it, the epilogue."""

    m: int
    n: int
    k: int
    a: cutile.Tensor
    weight: cutile.Tensor      # [N, K] row-major when weight_nk, else b itself ([K, N])
    weight_nk: bool
    out: cutile.Tensor
    bias: cutile.Tensor        # a placeholder (a row of a) when has_bias is False
    residual: cutile.Tensor    # a placeholder (a itself) when has_residual is False
    has_bias: bool
    has_residual: bool
    activation: int
    alpha: float


def _float_dtype(tensor: cutile.Tensor, function: str, name: str) -> None:
    if tensor.dtype not in FLOAT_DTYPES:
        raise cutile.ArgumentTypeError(f"{function}: {name} has dtype {tensor.dtype}; expected f16, bf16 or f32")


def check_operands(function: str, a: Any, b: Any, out: Any, bias: Any, activation: Any, residual: Any,
                   alpha: Any) -> Operands:
    """The arguments of ``function`` checked (an `ArgumentError` or `ArgumentTypeError`
    naming the parameter), with the weight view the kernels read. What the checks find
    depends only on the operands' layouts and addresses (and the activation): a call
    with those of an earlier call skips them, and checks only what can change between
    calls (a consumed tensor, alpha)."""
    key = _layout_key(function, a, b, out, bias, activation, residual)
    found = _CHECKED.get(key) if key is not None else None
    if found is None:
        found = _checked_layout(function, a, b, out, bias, activation, residual, alpha)
        if key is not None:
            if len(_CHECKED) >= _CHECKED_SIZE:
                _CHECKED.clear()  # (a program that meets ever new addresses: keep it bounded)
            _CHECKED[key] = found
    else:
        for name, t in (("b", b), ("out", out)):
            if t is not a:  # (a goes to the kernels itself: the launch checks it)
                require_live(t, function, name)
        _check_alpha(function, alpha)
    m, n, k, weight_nk = found
    return Operands(m, n, k, a, derived(b, "T", lambda: b.T) if weight_nk else b, weight_nk, out,
                    bias if bias is not None else derived(a, "row", lambda: a[0]),
                    residual if residual is not None else a,
                    bias is not None, residual is not None, ACTIVATIONS[activation], float(alpha))


# (function, operand layouts and addresses, activation) -> (m, n, k, weight_nk) of a call that passed the checks
_CHECKED: dict[tuple[Any, ...], tuple[int, int, int, bool]] = {}
_CHECKED_SIZE = 1024


def _layout(t: Any) -> tuple[Any, ...]:
    return (t.dtype, t.shape, t.strides, t.device, t.address())


def _layout_key(function: str, a: Any, b: Any, out: Any, bias: Any, activation: Any,
                residual: Any) -> tuple[Any, ...] | None:
    """What `_checked_layout` depends on, for cutile tensors (None for anything else)."""
    tensor = cutile.Tensor
    if type(a) is not tensor or type(b) is not tensor or type(out) is not tensor or not (
            activation is None or type(activation) is str):
        return None
    if (bias is not None and type(bias) is not tensor) or (residual is not None and type(residual) is not tensor):
        return None
    return (function, _layout(a), _layout(b), _layout(out), bias if bias is None else _layout(bias),
            residual if residual is None else _layout(residual), activation)


def _check_alpha(function: str, alpha: Any) -> None:
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not math.isfinite(alpha):
        raise cutile.ArgumentError(f"{function}: alpha must be a finite number, got {alpha!r}")


def _checked_layout(function: str, a: Any, b: Any, out: Any, bias: Any, activation: Any, residual: Any,
                    alpha: Any) -> tuple[int, int, int, bool]:
    """Every check of `check_operands`: (m, n, k, whether b is an [N, K] weight's transpose)."""
    a = cutile_tensor(a, function, "a")
    b = cutile_tensor(b, function, "b")
    out = cutile_tensor(out, function, "out")
    for name, t in (("a", a), ("b", b), ("out", out)):
        if t is not a:  # (a goes to the kernels itself: the launch checks it)
            require_live(t, function, name)
        if t.ndim != 2:
            raise cutile.ArgumentError(f"{function}: {name} must be 2-D, got shape {list(t.shape)}")
        _float_dtype(t, function, name)
    if a.dtype is not b.dtype:
        raise cutile.ArgumentTypeError(f"{function}: a and b must have one dtype, got {a.dtype} and {b.dtype}")
    (m, k), (k2, n) = a.shape, b.shape
    if k != k2:
        raise cutile.ArgumentError(f"{function}: a is {list(a.shape)} and b {list(b.shape)}: their K differ")
    if out.shape != (m, n):
        raise cutile.ArgumentError(f"{function}: out must have shape {[m, n]}, got {list(out.shape)}")
    if 0 in (m, n, k):
        raise cutile.ArgumentError(f"{function}: empty operands (a {list(a.shape)}, b {list(b.shape)})")
    if activation not in ACTIVATIONS:
        raise cutile.ArgumentError(f"{function}: activation must be None, 'relu', 'gelu' or 'silu', got {activation!r}")
    _check_alpha(function, alpha)
    if bias is not None:
        bias = cutile_tensor(bias, function, "bias")
        _float_dtype(bias, function, "bias")
        if bias.shape != (n,):
            raise cutile.ArgumentError(f"{function}: bias must have shape {[n]}, got {list(bias.shape)}")
    if residual is not None:
        residual = cutile_tensor(residual, function, "residual")
        _float_dtype(residual, function, "residual")
        if residual.shape != (m, n):
            raise cutile.ArgumentError(f"{function}: residual must have shape {[m, n]}, got {list(residual.shape)}")
    check_no_overlap(function, out, {"a": a, "b": b, "bias": bias, "residual": residual})
    # Stride 1 along K: b is the transposed view of an [N, K] matrix; read that.
    return m, n, k, b.strides[0] == 1 and b.strides[1] != 1


Choices = tuple[Any, ...] | range | None


def check_config(function: str, config: Mapping[str, Any] | None, defaults: dict[str, Any],
                 allowed: Mapping[str, Choices]) -> dict[str, Any]:
    """``defaults`` updated by ``config``: unknown keys and bad values are `ArgumentError`s.
    ``allowed`` gives each key's choices (a tuple, a range of ints, None: a power of two >= 1)."""
    if config is None:
        return defaults
    if not isinstance(config, Mapping):
        raise cutile.ArgumentTypeError(f"{function}: config must be a dict, got {type(config).__name__}")
    merged = dict(defaults)
    for key, value in config.items():
        if key not in allowed:
            raise cutile.ArgumentError(f"{function}: config key {key!r} is unknown; the keys are {sorted(allowed)}")
        choices = allowed[key]
        integer = isinstance(value, int) and not isinstance(value, bool)
        if choices is None:
            if not integer or value < 1 or value & (value - 1):
                raise cutile.ArgumentError(f"{function}: config[{key!r}] must be a power of two >= 1, got {value!r}")
        elif isinstance(choices, range):
            if not integer or value not in choices:
                raise cutile.ArgumentError(f"{function}: config[{key!r}] must be an int from {choices.start} to "
                                           f"{choices.stop - 1}, got {value!r}")
        elif value not in choices or type(value) is not type(choices[0]):  # (4.0 == 4, True == 1: not choices)
            raise cutile.ArgumentError(f"{function}: config[{key!r}] must be one of {list(choices)}, got {value!r}")
        merged[key] = value
    return merged


def next_power_of_two(x: int) -> int:
    return 1 << max(0, (x - 1).bit_length())


def hints_of(config: Mapping[str, Any]) -> tuple[tuple[str, int], ...]:
    """The hints a config names (a hashable key for the kernel caches): the kernel's
    ``num_worker_warps`` and ``occupancy``, the weight loads' ``latency`` (0: none)."""
    return tuple((name, int(config[name])) for name in ("num_worker_warps", "occupancy", "latency")
                 if config.get(name))


def entry_hints(hints: tuple[tuple[str, int], ...]) -> dict[str, int]:
    return {name: value for name, value in hints if name != "latency"}


# -- kernels ------------------------------------------------------------------------------------
# Built per dtype, weight layout and epilogue (closure constants: each combination is one kernel,
# its untaken branches folded away at compile time) and per hints (the entry's, so that
# repeated calls keep the launch fast path).

def _product_loop(weight_nk: bool, method: str, latency: int | None) -> Any:
    """The device function summing a[bm-tile, k] @ weight[k, bn-tile] over k chunks
    [first, last) into a float32 [BM, BN] tile (``latency``: the weight loads' hint)."""
    if method == "mma_t" and weight_nk:  # the weight tile as mma's left operand: (w a^T)^T
        @cutile.function
        def product(a: Any, w: Any, bm: Any, bn: Any, first: Any, last: Any, BM: int, BN: int, BK: int) -> Any:
            acc = zeros((BN, BM), f32)
            for k in range(first, last):
                acc = mma(w.load(index=(bn, k), shape=(BN, BK), latency=latency), transpose(a.load(index=(bm, k), shape=(BM, BK))), acc)
            return transpose(acc)
    elif method == "mma_t":
        @cutile.function
        def product(a: Any, w: Any, bm: Any, bn: Any, first: Any, last: Any, BM: int, BN: int, BK: int) -> Any:
            acc = zeros((BN, BM), f32)
            for k in range(first, last):
                acc = mma(transpose(w.load(index=(k, bn), shape=(BK, BN), latency=latency)), transpose(a.load(index=(bm, k), shape=(BM, BK))),
                          acc)
            return transpose(acc)
    elif method == "mma" and weight_nk:
        @cutile.function
        def product(a: Any, w: Any, bm: Any, bn: Any, first: Any, last: Any, BM: int, BN: int, BK: int) -> Any:
            acc = zeros((BM, BN), f32)
            for k in range(first, last):
                acc = mma(a.load(index=(bm, k), shape=(BM, BK)), transpose(w.load(index=(bn, k), shape=(BN, BK), latency=latency)), acc)
            return acc
    else:  # "mma"
        @cutile.function
        def product(a: Any, w: Any, bm: Any, bn: Any, first: Any, last: Any, BM: int, BN: int, BK: int) -> Any:
            acc = zeros((BM, BN), f32)
            for k in range(first, last):
                acc = mma(a.load(index=(bm, k), shape=(BM, BK)), w.load(index=(k, bn), shape=(BK, BN), latency=latency), acc)
            return acc
    return product


def _epilogue(activation: int, has_bias: bool, has_residual: bool, out_dtype: Any) -> Any:
    """The device function taking the float32 product tile to out's tile:
    act(alpha * acc + bias) + residual, rounded to out's dtype."""
    @cutile.function
    def epilogue(acc: Any, alpha: Any, bias: Any, residual: Any, bm: Any, bn: Any, BM: int, BN: int) -> Any:
        y = acc * alpha
        if has_bias:
            y = y + bias.load(index=(bn,), shape=(BN,)).astype(f32).reshape((1, BN))
        if activation == 1:
            y = maximum(y, 0.0)
        elif activation == 2:
            y = 0.5 * y * (1.0 + tanh(GELU_SCALE * (y + 0.044715 * y * y * y)))
        elif activation == 3:
            y = y / (1.0 + exp(-y))
        if has_residual:
            y = y + residual.load(index=(bm, bn), shape=(BM, BN)).astype(f32)
        return y.astype(out_dtype)
    return epilogue


def _weight_annotation(in_dtype: Any, weight_nk: bool) -> Any:
    return Tensor[in_dtype, [-1, "K"]] if weight_nk else Tensor[in_dtype, ["K", -1]]


@functools.cache
def direct_kernel(in_dtype: Any, out_dtype: Any, bias_dtype: Any, residual_dtype: Any, weight_nk: bool, method: str,
                  activation: int, has_bias: bool, has_residual: bool,
                  hints: tuple[tuple[str, int], ...]) -> cutile.Kernel[..., Any]:
    """One block per [BM, BN] tile of out: the whole K loop, then the epilogue."""
    product = _product_loop(weight_nk, method, dict(hints).get("latency"))
    epilogue = _epilogue(activation, has_bias, has_residual, out_dtype)

    @cutile.entry(hints=entry_hints(hints))
    def matmul_direct(out: Mut[Tensor[out_dtype, ["BM", "BN"]]], a: Tensor[in_dtype, [-1, "K"]],  # type: ignore[misc, name-defined]  # dtypes of the factory
                      w: _weight_annotation(in_dtype, weight_nk),  # type: ignore[valid-type]
                      bias: Tensor[bias_dtype, [-1]], residual: Tensor[residual_dtype, [-1, -1]], alpha: f32,  # type: ignore[misc]  # dtypes of the factory
                      BM: Constant[int], BN: Constant[int], BK: Constant[int], K: Constant[int]) -> None:
        bm, bn, _ = get_tile_block_id()
        acc = product(a, w, bm, bn, 0, cdiv(K, BK), BM, BN, BK)
        out.store(epilogue(acc, alpha, bias, residual, bm, bn, BM, BN))

    return matmul_direct


@functools.cache
def partial_kernel(in_dtype: Any, weight_nk: bool, method: str,
                   hints: tuple[tuple[str, int], ...]) -> cutile.Kernel[..., Any]:
    """Block (s, i, j) sums K chunks [s * per, (s + 1) * per) of tile (i, j) into the
    workspace tile (s, i, j), float32 and without epilogue (an empty slice stores zeros)."""
    product = _product_loop(weight_nk, method, dict(hints).get("latency"))

    @cutile.entry(hints=entry_hints(hints))
    def matmul_partial(partial: Mut[Tensor[f32, [1, "BM", "BN"]]], a: Tensor[in_dtype, [-1, "K"]],  # type: ignore[misc, name-defined]  # dtypes of the factory
                       w: _weight_annotation(in_dtype, weight_nk),  # type: ignore[valid-type]
                       BM: Constant[int], BN: Constant[int], BK: Constant[int], K: Constant[int],
                       SPLITS: Constant[int]) -> None:
        split, bm, bn = get_tile_block_id()
        steps = cdiv(K, BK)
        per_split = cdiv(steps, SPLITS)
        acc = product(a, w, bm, bn, minimum(split * per_split, steps), minimum((split + 1) * per_split, steps),
                      BM, BN, BK)
        partial.store(acc.reshape((1, BM, BN)))

    return matmul_partial


@functools.cache
def reduce_kernel(out_dtype: Any, bias_dtype: Any, residual_dtype: Any, activation: int, has_bias: bool,
                  has_residual: bool) -> cutile.Kernel[..., Any]:
    """One block per [BM, BN] tile of out: the sum of the SPLITS partial tiles, then the
    epilogue."""
    epilogue = _epilogue(activation, has_bias, has_residual, out_dtype)

    @cutile.entry
    def matmul_reduce(out: Mut[Tensor[out_dtype, ["BM", "BN"]]], partial: Tensor[f32, ["SPLITS", -1, -1]],  # type: ignore[misc, name-defined]  # dtypes of the factory
                      bias: Tensor[bias_dtype, [-1]], residual: Tensor[residual_dtype, [-1, -1]], alpha: f32,  # type: ignore[misc]  # dtypes of the factory
                      BM: Constant[int], BN: Constant[int], SPLITS: Constant[int]) -> None:
        bm, bn, _ = get_tile_block_id()
        acc = zeros((BM, BN), f32)
        for s in range(SPLITS):
            acc = acc + partial.load(index=(s, bm, bn), shape=(1, BM, BN)).reshape((BM, BN))
        out.store(epilogue(acc, alpha, bias, residual, bm, bn, BM, BN))

    return matmul_reduce


def reduce_tiles(m: int, n: int) -> tuple[int, int]:
    """The reduction's tile: all of a small M, and about 4096 elements (memory bound)."""
    tile_m = min(next_power_of_two(m), 16)
    return tile_m, min(max(4096 // tile_m, 16), next_power_of_two(n))


Launches = tuple[tuple[Any, tuple[Any, ...], dict[str, int]], ...]


def launches(ops: Operands, tile_m: int, tile_n: int, tile_k: int, splits: int, method: str,
             hints: tuple[tuple[str, int], ...]) -> Launches:
    """What `run` launches: (kernel, positional arguments, constants) per kernel,
    in order, the views and the workspace made (so that a caller may make them ahead of
    the launches: `_matmul`'s staged calls, whose launches are made while their op is
    being enqueued, where an allocation would wait for the stream)."""
    in_dtype, out = ops.a.dtype, ops.out

    def out_tiles(tile: tuple[int, int]) -> Any:
        # A partition of a view of out: out itself is not consumed, so the caller keeps using it.
        return derived(out, ("tiles", tile), lambda: out[...].partition(list(tile)))

    if splits == 1:
        kernel = direct_kernel(in_dtype, out.dtype, ops.bias.dtype, ops.residual.dtype, ops.weight_nk, method,
                               ops.activation, ops.has_bias, ops.has_residual, hints)
        return ((kernel, (out_tiles((tile_m, tile_n)), ops.a, ops.weight, ops.bias, ops.residual, ops.alpha),
                 {"BK": tile_k}),)
    # One workspace per out and split shape: a second call while the first is pending is refused
    # (the workspace is held), as it would be for out.
    workspace = derived(out, ("workspace", splits), lambda: api.empty([splits, ops.m, ops.n], dtype=f32))
    workspace_tiles = derived(workspace, ("tiles", tile_m, tile_n),
                              lambda: workspace[...].partition([1, tile_m, tile_n]))
    partial = partial_kernel(in_dtype, ops.weight_nk, method, hints)
    reduce = reduce_kernel(out.dtype, ops.bias.dtype, ops.residual.dtype, ops.activation, ops.has_bias,
                           ops.has_residual)
    return ((partial, (workspace_tiles, ops.a, ops.weight), {"BK": tile_k, "SPLITS": splits}),
            (reduce, (out_tiles(reduce_tiles(ops.m, ops.n)), workspace, ops.bias, ops.residual, ops.alpha), {}))


Holding = tuple[str, list[tuple[str, cutile.Tensor]], list[tuple[str, cutile.Tensor]]]


def run(steps: Launches, holding: Holding | None) -> Any:
    """The launch of `launches`' one kernel, or the op of its two: the reduction's launch
    made once the partials are enqueued (it reads their workspace). Those launches claim
    nothing until made, so ``holding`` (the op's name, the caller's tensors read, those
    written) is held from the call by a `cutile.hold` first in the chain: the op owns
    them while pending, as one launch would. None inside an op holding them already (a
    staged matmul's, whose temporaries its own copies are still to write). The first
    launch and the reduction, made later, are given views of the caller's tensors
    (`private_view`): a tensor consumed after the call does not fail the op."""
    kernel, arguments, constants = steps[0]
    if len(steps) == 1:
        return kernel(*arguments, **constants)
    reduce, reduce_arguments, reduce_constants = steps[1]
    if holding is None:
        first = kernel(*arguments, **constants)
    else:
        name, reads, writes = holding
        held = cutile.hold(name, reads=reads, writes=writes)
        # (made after the hold, which names a consumed tensor's parameter)
        arguments = tuple(private_view(argument) for argument in arguments)
        reduce_arguments = tuple(private_view(argument) for argument in reduce_arguments)
        first = held.then(lambda _: kernel(*arguments, **constants))
    return first.then(lambda _: reduce(*reduce_arguments, **reduce_constants))


def holding(function: str, a: cutile.Tensor, b: cutile.Tensor, out: cutile.Tensor, bias: cutile.Tensor | None,
            residual: cutile.Tensor | None) -> Holding:
    """What a two-launch op of ``function`` holds from the call: a, the weight, the bias
    and residual where it has them (read), and out (written)."""
    reads = [(name, t) for name, t in (("a", a), ("b", b), ("bias", bias), ("residual", residual)) if t is not None]
    return function, reads, [("out", out)]


def _checked(a: Any, b: Any, out: Any, bias: Any, activation: Any, residual: Any, alpha: Any,
             config: Mapping[str, Any] | None) -> tuple[Operands, Launches]:
    ops = check_operands("split_k_matmul", a, b, out, bias, activation, residual, alpha)
    cfg = check_config("split_k_matmul", config, default_config(ops.m, ops.n, ops.k, ops.a.dtype), CONFIG_KEYS)
    return ops, launches(ops, cfg["tile_m"], cfg["tile_n"], cfg["tile_k"], cfg["split_k"], cfg["method"],
                         hints_of(cfg))


def checked_launches(a: cutile.Tensor, b: cutile.Tensor, out: cutile.Tensor, *, bias: cutile.Tensor | None,
                     activation: str | None, residual: cutile.Tensor | None, alpha: float,
                     config: Mapping[str, Any] | None) -> Launches:
    """`split_k_matmul`'s checks, then its `launches` (to `run`)."""
    return _checked(a, b, out, bias, activation, residual, alpha, config)[1]


# -- split-K: configs ---------------------------------------------------------------------------

CONFIG_KEYS: dict[str, Choices] = {
    "tile_m": None, "tile_n": None, "tile_k": None, "split_k": range(1, 65), "method": ("mma", "mma_t"),
    "num_worker_warps": WORKER_WARPS, "occupancy": range(1, 33), "latency": range(11),
}
TENSOR_CORE_ROWS = 64  # tileiras uses the tensor cores for an mma whose M side has 64 rows or more


def space(dtype: Any) -> Space:
    """The split-K search space for ``dtype`` (f16, bf16 or f32); `prune_for` drops the
    configs pointless for a shape."""
    wide = dtype in (f16, bf16)
    return Space(tile_m=[16, 64, 128], tile_n=[32, 64, 128], tile_k=[32, 64, 128] if wide else [16, 32, 64],
                 split_k=[1, 2, 4, 8, 16, 32], method=["mma", "mma_t"], num_worker_warps=[4, 8])


def prune_for(m: int, n: int, k: int) -> Callable[[Mapping[str, Any]], bool]:
    """A ``prune`` for `cutile.tune.search` over `space` at one shape: False for configs
    tileiras computes without tensor cores (``mma`` below 64 rows of a tile, ``mma_t``
    below 64 columns), tiles past the shape's powers of two, more splits than K chunks."""
    def keep(config: Mapping[str, Any]) -> bool:
        tile_m, tile_n, tile_k = int(config["tile_m"]), int(config["tile_n"]), int(config["tile_k"])
        on_m_side = tile_m if config["method"] == "mma" else tile_n
        if on_m_side < TENSOR_CORE_ROWS:
            return False
        if tile_m > max(16, next_power_of_two(m)) or tile_n > max(32, next_power_of_two(n)):
            return False
        return int(config["split_k"]) <= math.ceil(k / tile_k)

    return keep


def default_config(m: int, n: int, k: int, dtype: Any) -> dict[str, Any]:
    """The config used when no record matches: 64x64 output tiles (the tensor cores need 64
    rows: a smaller M is padded, or with M <= 16 and N >= 64 the product is transposed,
    ``mma_t``, so N's 64 take that side), K chunks of 64 (f32: 32), and enough splits of K
    for about two blocks per SM."""
    small_m = m <= 16 and n >= TENSOR_CORE_ROWS
    tile_m = max(8, next_power_of_two(m)) if small_m else TENSOR_CORE_ROWS
    tile_n = TENSOR_CORE_ROWS if small_m else min(64, max(32, next_power_of_two(n)))
    tile_k = 64 if dtype in (f16, bf16) else 32
    tiles = math.ceil(m / tile_m) * math.ceil(n / tile_n)
    steps = math.ceil(k / tile_k)
    splits = max(1, min(32, steps, math.ceil(2 * SM_COUNT / tiles)))
    return {"tile_m": tile_m, "tile_n": tile_n, "tile_k": tile_k, "split_k": splits,
            "method": "mma_t" if small_m else "mma", "num_worker_warps": 4}


def split_k_matmul(a: cutile.Tensor, b: cutile.Tensor, out: cutile.Tensor, *, bias: cutile.Tensor | None = None,
                   activation: str | None = None, residual: cutile.Tensor | None = None, alpha: float = 1.0,
                   config: Mapping[str, Any] | None = None) -> Any:
    """``out = act(alpha * (a @ b) + bias) + residual`` with K split among ``split_k``
    blocks per output tile (partial sums in a float32 workspace, then a reduction kernel
    applying the epilogue).

    Args:
        a: [M, K], f16, bf16 or f32 (any strides).
        b: [K, N], a's dtype; the transposed view of an [N, K] weight is read as stored.
        out: [M, N], f16, bf16 or f32 (written; the call keeps it usable).
        bias: [N] or None. activation: None, "relu", "gelu" (tanh approximation), "silu".
        residual: [M, N] or None (not out's memory). alpha: the product's scale.
        config: keys ``tile_m``, ``tile_n``, ``tile_k`` (powers of two), ``split_k`` (1-64),
            ``method`` ("mma", or "mma_t": the product transposed, for a small M),
            ``num_worker_warps``, ``occupancy``, ``latency`` (the weight loads' hint, 1-10;
            0: none); missing keys from `default_config`.
    Returns:
        The pending launch (``split_k`` 1) or op (the partials, then the
        reduction), not yet run, holding its operands and out from the call: ``.sync()``, ``await``,
        ``.schedule()`` or `cutile.bench.do_bench` run it.
    Raises:
        ArgumentError, ArgumentTypeError: a malformed argument (named in the message).
    """
    ops, steps = _checked(a, b, out, bias, activation, residual, alpha, config)
    return run(steps, holding("split_k_matmul", ops.a, ops.weight, ops.out, ops.bias if ops.has_bias else None,
                              ops.residual if ops.has_residual else None))
