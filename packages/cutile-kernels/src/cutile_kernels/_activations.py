"""Gated activations and element-wise helpers: ``silu_mul``, ``gelu_mul``, ``silu``,
``gelu``, ``sigmoid``, ``relu``, and ``add``/``sub``/``mul``/``div`` with broadcasting.

Every function computes in f32 and stores in its inputs' dtype (f16, bf16 or f32).
Binary operands have one dtype; the second may have the first's shape or broadcast
along leading dims (its shape, leading 1s aside, a suffix of the first's: a row
vector ``(N,)`` against ``(M, N)``, a ``(S, D)`` table against ``(B, S, D)``); the
result has the first's shape. ``gelu``'s ``approximate="none"`` evaluates erf by
Abramowitz and Stegun's 7.1.26 (absolute error below 1.5e-7, under f32 rounding at 1).

Tensors of the same shape and all contiguous run as one flat range of elements;
anything else as rows (the operands viewed 2-D: rank-2 operands with any strides,
such as the halves of a fused gate/up projection, higher ranks contiguous).
"""

# No `from __future__ import annotations`: kernel annotations name the factory's dtypes, which cutile's
# mypy plugin cannot read (it takes literal dtypes such as f32): hence their `type: ignore[misc]`.

import functools
import inspect
import math
from typing import Any

import cutile
from cutile import tune
from cutile.core import Constant, Mut, Tensor, bid, exp, f32, load_tile_like, maximum, tanh, where
from cutile.core import div as divide  # (this module's `div` is the library function)

from cutile_kernels import _pointwise as pw
from cutile_kernels._operands import Operand, as_tensor, output

SPACE = tune.Space(block_elems=[1024, 2048, 4096, 8192, 16384], occupancy=[1, 2, 4])
DEFAULT = {"block_elems": 4096, "occupancy": 2}

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_INV_SQRT_2 = 1.0 / math.sqrt(2.0)


# The logistic's division is approximate (a reciprocal and a product, within 2 ulp of f32):
# an IEEE division adds a range check and a slow-path call per element, which held
# silu_mul below the copy bandwidth; the error is under f16/bf16 rounding.
def _sigmoid(x: Any) -> Any:
    return divide(1.0, 1.0 + exp(-x), rounding="approx")


def _silu(x: Any) -> Any:
    return divide(x, 1.0 + exp(-x), rounding="approx")


def _gelu_tanh(x: Any) -> Any:
    return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))


def _erf(x: Any) -> Any:
    """erf by Abramowitz and Stegun 7.1.26 (|error| < 1.5e-7)."""
    a = where(x < 0.0, -x, x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    y = 1.0 - poly * exp(-a * a)
    return where(x < 0.0, -y, y)


def _gelu_erf(x: Any) -> Any:
    return 0.5 * x * (1.0 + erf_fn(x * 0.7071067811865476))


def _relu(x: Any) -> Any:
    return maximum(x, 0.0)


def _add(x: Any, y: Any) -> Any:
    return x + y


def _sub(x: Any, y: Any) -> Any:
    return x - y


def _mul(x: Any, y: Any) -> Any:
    return x * y


def _div(x: Any, y: Any) -> Any:
    return x / y


def _silu_mul(gate: Any, up: Any) -> Any:
    return divide(gate, 1.0 + exp(-gate), rounding="approx") * up


def _gelu_tanh_mul(gate: Any, up: Any) -> Any:
    return gelu_tanh_fn(gate) * up


def _gelu_erf_mul(gate: Any, up: Any) -> Any:
    return gelu_erf_fn(gate) * up


erf_fn = cutile.function(_erf)
gelu_tanh_fn = cutile.function(_gelu_tanh)
gelu_erf_fn = cutile.function(_gelu_erf)

#: op name -> (arity, the device function over f32 tiles)
OPS: dict[str, tuple[int, Any]] = {
    "sigmoid": (1, cutile.function(_sigmoid)),
    "silu": (1, cutile.function(_silu)),
    "gelu_tanh": (1, gelu_tanh_fn),
    "gelu": (1, gelu_erf_fn),
    "relu": (1, cutile.function(_relu)),
    "add": (2, cutile.function(_add)),
    "sub": (2, cutile.function(_sub)),
    "mul": (2, cutile.function(_mul)),
    "div": (2, cutile.function(_div)),
    "silu_mul": (2, cutile.function(_silu_mul)),
    "gelu_tanh_mul": (2, cutile.function(_gelu_tanh_mul)),
    "gelu_mul": (2, cutile.function(_gelu_erf_mul)),
}


@functools.lru_cache(maxsize=None)
def pointwise_kernel(op: str, dtype: Any, form: str, occupancy: int) -> Any:
    """The kernel of ``op`` over ``dtype``; ``form`` is ``flat`` (1-D, same shapes),
    ``rows`` (2-D, same shapes) or ``row_broadcast`` (2-D, y one row)."""
    arity, fn = OPS[op]
    entry = cutile.entry(hints={"occupancy": occupancy})
    if arity == 1:
        if form == "flat":
            def unary_flat(
                    z: Mut[Tensor[dtype, ["B"]]],  # type: ignore[misc]
                    x: Tensor[dtype, [-1]],  # type: ignore[misc]
                    B: Constant[int],
            ) -> None:
                z.store(fn(load_tile_like(x, z).astype(f32)).astype(z.dtype))
            return entry(unary_flat)

        def unary_rows(
                z: Mut[Tensor[dtype, ["BM", "BN"]]],  # type: ignore[misc]
                x: Tensor[dtype, [-1, -1]],  # type: ignore[misc]
                BM: Constant[int],
                BN: Constant[int],
        ) -> None:
            z.store(fn(load_tile_like(x, z).astype(f32)).astype(z.dtype))
        return entry(unary_rows)
    if form == "flat":
        def binary_flat(
                z: Mut[Tensor[dtype, ["B"]]],  # type: ignore[misc]
                x: Tensor[dtype, [-1]],  # type: ignore[misc]
                y: Tensor[dtype, [-1]],  # type: ignore[misc]
                B: Constant[int],
        ) -> None:
            z.store(fn(load_tile_like(x, z).astype(f32), load_tile_like(y, z).astype(f32)).astype(z.dtype))
        return entry(binary_flat)
    if form == "rows":
        def binary_rows(
                z: Mut[Tensor[dtype, ["BM", "BN"]]],  # type: ignore[misc]
                x: Tensor[dtype, [-1, -1]],  # type: ignore[misc]
                y: Tensor[dtype, [-1, -1]],  # type: ignore[misc]
                BM: Constant[int],
                BN: Constant[int],
        ) -> None:
            z.store(fn(load_tile_like(x, z).astype(f32), load_tile_like(y, z).astype(f32)).astype(z.dtype))
        return entry(binary_rows)

    def binary_row_broadcast(
            z: Mut[Tensor[dtype, ["BM", "BN"]]],  # type: ignore[misc]
            x: Tensor[dtype, [-1, -1]],  # type: ignore[misc]
            y: Tensor[dtype, [1, -1]],  # type: ignore[misc]
            BM: Constant[int],
            BN: Constant[int],
    ) -> None:
        row = y.load(index=(0, bid(1)), shape=(1, BN)).astype(f32)
        z.store(fn(load_tile_like(x, z).astype(f32), row).astype(z.dtype))
    return entry(binary_row_broadcast)


#: a small tensor's blocks under the default config: at least this many, of at least
#: SMALLEST_BLOCK elements (a decode step's [1, 9728] gate in the default's three blocks
#: is latency-bound: a few blocks each work through thousands of elements)
MIN_BLOCKS, SMALLEST_BLOCK = 16, 256


def spread(config: dict[str, Any], elements: int) -> dict[str, Any]:
    """The default config with its block shrunk so that ``elements`` make `MIN_BLOCKS`
    blocks where they can; a record's winner (any other config) as it is."""
    if config != DEFAULT:
        return config
    block = max(SMALLEST_BLOCK, pw.next_pow2(-(-elements // MIN_BLOCKS)))
    return {**config, "block_elems": min(int(config["block_elems"]), block)}


def tile_shape(config: dict[str, Any], rows: int, cols: int) -> list[int]:
    """The config's element budget as a (rows, cols) tile: whole rows where they fit."""
    budget = int(config["block_elems"])
    bn = min(pw.next_pow2(cols), budget)
    bm = min(max(1, budget // bn), pw.next_pow2(rows))
    return [bm, bn]


def _broadcast_width(x: tuple[int, ...], y: tuple[int, ...]) -> int | None:
    """N when y broadcasts to x as rows of N elements (y's shape without leading 1s is
    a proper suffix of x's), else None."""
    core = list(y)
    while core and core[0] == 1:
        core.pop(0)
    if len(core) >= len(x) or tuple(core) != x[len(x) - len(core):]:
        return None
    return math.prod(core)


def _launch(op: str, operands: list[tuple[Any, str]], out: Any, config: dict[str, Any] | None,
            function: str) -> pw.Pending:
    arguments = [as_tensor(value, function, name) for value, name in operands]
    first = arguments[0]
    pw.check_dtype(first, pw.FLOAT_DTYPES, function, operands[0][1])
    for argument, (_, name) in zip(arguments[1:], operands[1:]):
        pw.check_same_dtype(first, argument, function, operands[0][1], name)
    shape = first.shape
    width: int | None = None
    if len(arguments) == 2 and arguments[1].shape != shape:
        width = _broadcast_width(shape, arguments[1].shape)
        if width is None:
            raise cutile.ArgumentError(
                f"{function}(): parameter '{operands[1][1]}' of shape {list(arguments[1].shape)} does not "
                f"broadcast to '{operands[0][1]}' {list(shape)} (it must equal it, or be a suffix of it after "
                "leading 1s)")
    result = output(out, shape, first.tensor.dtype, first, function, "out",
                    {name: a.tensor for a, (_, name) in zip(arguments, operands)})
    target = Operand.of(result.tensor)
    chosen = pw.config_of(function, config, SPACE, DEFAULT) if config is not None else \
        spread(TUNER.config((math.prod(shape), len(arguments), width or 0)), math.prod(shape))
    occupancy = int(chosen["occupancy"])
    every = [target, *arguments]
    if math.prod(shape) == 0:
        raise cutile.ArgumentError(f"{function}(): parameter '{operands[0][1]}' is empty (shape {list(shape)})")
    if width is None and all(a.tensor.is_contiguous for a in every):
        n = math.prod(shape)
        flat = [pw.reshaped(a, (n,), function, name) for a, name in zip(every, ["out", *[o[1] for o in operands]])]
        block = min(int(chosen["block_elems"]), pw.next_pow2(n))
        kernel = pointwise_kernel(op, first.tensor.dtype, "flat", occupancy)
        launch = kernel(flat[0].partition([block]), *flat[1:])
        return pw.Pending(launch, result.result)
    if width is not None:
        cols = width
        rows = math.prod(shape) // cols
    else:
        cols = shape[-1] if shape else 1
        rows = math.prod(shape) // cols
    names = ["out", *[o[1] for o in operands]]
    views = [pw.reshaped(a, (rows, cols), function, name) for a, name in zip(every[:2], names[:2])]
    if len(arguments) == 2:
        views.append(pw.reshaped(arguments[1], (1, cols) if width is not None else (rows, cols), function, names[2]))
    kernel = pointwise_kernel(op, first.tensor.dtype, "row_broadcast" if width is not None else "rows", occupancy)
    launch = kernel(views[0].partition(tile_shape(chosen, rows, cols)), *views[1:])
    return pw.Pending(launch, result.result)


def _setup(config: dict[str, Any], shape: tuple[int, ...]) -> Any:
    """A search's runner for one shape: (elements, operands, broadcast row width or 0), bf16."""
    n, arity, width = shape
    x = cutile.api.randn([n], "bf16", seed=1)
    if arity == 1:
        return lambda: silu.launch(x, config=config).op
    y = cutile.api.randn([width or n], "bf16", seed=2)
    if width:
        rows = x.reshape(n // width, width)
        return lambda: mul.launch(rows, y, config=config).op
    return lambda: silu_mul.launch(x, y, config=config).op


TUNER = pw.tuner("pointwise", SPACE, DEFAULT, _setup, inspect.getsource(pointwise_kernel))


def _silu_mul_launch(gate: Any, up: Any, *, out: Any = None, config: dict[str, Any] | None = None) -> pw.Pending:
    """``silu(gate) * up`` (SwiGLU's gate): gate and up of one shape and dtype (up may
    broadcast as in `mul`)."""
    return _launch("silu_mul", [(gate, "gate"), (up, "up")], out, config, "silu_mul")


def _gelu_mul_launch(gate: Any, up: Any, approximate: str = "tanh", *, out: Any = None,
                     config: dict[str, Any] | None = None) -> pw.Pending:
    """``gelu(gate) * up`` (GeGLU): ``approximate="tanh"`` (the tanh form) or ``"none"``
    (erf)."""
    if approximate not in ("tanh", "none"):
        raise cutile.ArgumentError(f"gelu_mul(): parameter 'approximate' must be 'tanh' or 'none', got "
                                   f"{approximate!r}")
    op = "gelu_tanh_mul" if approximate == "tanh" else "gelu_mul"
    return _launch(op, [(gate, "gate"), (up, "up")], out, config, "gelu_mul")


def _silu_launch(x: Any, *, out: Any = None, config: dict[str, Any] | None = None) -> pw.Pending:
    """``x * sigmoid(x)``."""
    return _launch("silu", [(x, "x")], out, config, "silu")


def _gelu_launch(x: Any, approximate: str = "none", *, out: Any = None,
                 config: dict[str, Any] | None = None) -> pw.Pending:
    """``x * Phi(x)``: ``approximate="none"`` (erf, torch's default) or ``"tanh"``."""
    if approximate not in ("tanh", "none"):
        raise cutile.ArgumentError(f"gelu(): parameter 'approximate' must be 'tanh' or 'none', got {approximate!r}")
    return _launch("gelu_tanh" if approximate == "tanh" else "gelu", [(x, "x")], out, config, "gelu")


def _sigmoid_launch(x: Any, *, out: Any = None, config: dict[str, Any] | None = None) -> pw.Pending:
    """``1 / (1 + exp(-x))``."""
    return _launch("sigmoid", [(x, "x")], out, config, "sigmoid")


def _relu_launch(x: Any, *, out: Any = None, config: dict[str, Any] | None = None) -> pw.Pending:
    """``max(x, 0)``."""
    return _launch("relu", [(x, "x")], out, config, "relu")


def _add_launch(x: Any, y: Any, *, out: Any = None, config: dict[str, Any] | None = None) -> pw.Pending:
    """``x + y``, y of x's shape or broadcasting as rows (a suffix of x's shape)."""
    return _launch("add", [(x, "x"), (y, "y")], out, config, "add")


def _sub_launch(x: Any, y: Any, *, out: Any = None, config: dict[str, Any] | None = None) -> pw.Pending:
    """``x - y``, broadcasting as `add`."""
    return _launch("sub", [(x, "x"), (y, "y")], out, config, "sub")


def _mul_launch(x: Any, y: Any, *, out: Any = None, config: dict[str, Any] | None = None) -> pw.Pending:
    """``x * y``, broadcasting as `add`."""
    return _launch("mul", [(x, "x"), (y, "y")], out, config, "mul")


def _div_launch(x: Any, y: Any, *, out: Any = None, config: dict[str, Any] | None = None) -> pw.Pending:
    """``x / y``, broadcasting as `add`."""
    return _launch("div", [(x, "x"), (y, "y")], out, config, "div")


silu_mul = pw.library_function(_silu_mul_launch)
gelu_mul = pw.library_function(_gelu_mul_launch)
silu = pw.library_function(_silu_launch)
gelu = pw.library_function(_gelu_launch)
sigmoid = pw.library_function(_sigmoid_launch)
relu = pw.library_function(_relu_launch)
add = pw.library_function(_add_launch)
sub = pw.library_function(_sub_launch)
mul = pw.library_function(_mul_launch)
div = pw.library_function(_div_launch)
