"""The GEMM epilogue, shared by every matmul path (tiled, split-K, GEMV).

The order is fixed and documented once: ``out = act(alpha * (a @ b) * scale_a *
scale_b + bias) + residual``, computed in f32 on the accumulator, then rounded to the
output dtype. `check_epilogue` checks the host-side arguments (shapes, dtypes, the
activation's name) and returns an `Epilogue` every kernel path reads: ``bias`` of
shape ``[N]`` broadcast over rows, ``residual`` of the output's shape, ``activation``
one of `ACTIVATIONS`, ``alpha`` a finite float. `apply_activation` is the device
function of the activations, so every kernel computes them alike.

GELU is the tanh approximation (PyTorch's ``gelu(approximate="tanh")``):
``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``; SiLU is ``x * sigmoid(x)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import cutile
from cutile.core import bf16, exp, f16, f32, maximum, tanh

#: activation name -> the code kernels branch on at compile time
ACTIVATIONS: dict[str | None, int] = {None: 0, "relu": 1, "gelu": 2, "silu": 3}

#: the dtypes a bias or residual may have (read as f32 in the epilogue)
EPILOGUE_DTYPES = (f16, bf16, f32)

GELU_C = math.sqrt(2.0 / math.pi)


@dataclass(frozen=True)
class Epilogue:
    """A checked epilogue: what a kernel path fuses after its accumulation."""

    bias: cutile.Tensor | None
    activation: str | None
    residual: cutile.Tensor | None
    alpha: float

    @property
    def activation_code(self) -> int:
        return ACTIVATIONS[self.activation]

    def key(self) -> tuple[Any, ...]:
        """What a kernel's code depends on (dtypes, activation), for kernel caches."""
        return (self.bias.dtype if self.bias is not None else None, self.activation_code,
                self.residual.dtype if self.residual is not None else None)


def check_epilogue(function: str, out_shape: tuple[int, ...], *, bias: cutile.Tensor | None,
                   activation: str | None, residual: cutile.Tensor | None, alpha: Any) -> Epilogue:
    """The epilogue of an output of ``out_shape`` (``[..., M, N]``), checked.

    Raises:
        ArgumentError: a bias that is not ``[N]``, a residual not of ``out_shape``, an
            unknown activation, a non-finite alpha (each names the parameter).
        ArgumentTypeError: a bias or residual of a dtype the epilogue does not read,
            an alpha that is not a number.
    """
    if activation not in ACTIVATIONS:
        names = ", ".join(repr(a) for a in ACTIVATIONS)
        raise cutile.ArgumentError(f"{function}: activation={activation!r} is not one of {names}")
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)):
        raise cutile.ArgumentTypeError(f"{function}: alpha must be a number, got {type(alpha).__name__}")
    if not math.isfinite(float(alpha)):
        raise cutile.ArgumentError(f"{function}: alpha must be finite, got {alpha!r}")
    n = out_shape[-1]
    if bias is not None:
        if bias.shape != (n,):
            raise cutile.ArgumentError(f"{function}: bias must have shape [{n}] (one value per output column), "
                                       f"got {list(bias.shape)}")
        _check_dtype(function, "bias", bias)
    if residual is not None:
        if residual.shape != tuple(out_shape):
            raise cutile.ArgumentError(f"{function}: residual must have the output's shape {list(out_shape)}, "
                                       f"got {list(residual.shape)}")
        _check_dtype(function, "residual", residual)
    return Epilogue(bias, activation, residual, float(alpha))


def _check_dtype(function: str, name: str, tensor: cutile.Tensor) -> None:
    if tensor.dtype not in EPILOGUE_DTYPES:
        raise cutile.ArgumentTypeError(f"{function}: {name} has dtype {tensor.dtype}; it must be f16, bf16 or f32")


@cutile.function
def apply_activation(x: Any, code: int) -> Any:
    """``x`` (an f32 tile) through the activation of ``code`` (`ACTIVATIONS`; a
    compile-time constant, so only the chosen branch is compiled)."""
    if code == 1:
        x = maximum(x, 0.0)
    elif code == 2:
        x = 0.5 * x * (1.0 + tanh(GELU_C * (x + 0.044715 * x * x * x)))
    elif code == 3:
        x = x / (1.0 + exp(-x))
    return x


def activation_reference(x: Any, activation: str | None) -> Any:
    """The activation on numpy arrays (the tests' reference, in the kernels' formulas)."""
    import numpy as np

    if activation == "relu":
        return np.maximum(x, 0.0)
    if activation == "gelu":
        return 0.5 * x * (1.0 + np.tanh(GELU_C * (x + 0.044715 * x ** 3)))
    if activation == "silu":
        return x / (1.0 + np.exp(-x))
    return x
