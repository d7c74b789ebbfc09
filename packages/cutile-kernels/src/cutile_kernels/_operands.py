"""Operands of the library's functions: any tensor in, a result of the same kind out.

A function takes cutile tensors or any DLPack / CUDA Array Interface tensor (torch,
CuPy; numpy on the interpreter backend). `as_tensor` gives the cutile tensor sharing
its memory (no copy) and remembers the kind, so `Operand.result` can hand back an
output of that kind: a cutile tensor as it is, a numpy array over the same memory, or
another library's tensor through its ``from_dlpack`` (sharing the memory too).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

import numpy as np

import cutile
from cutile import api
from cutile.core import bf16, f8e4m3fn, f8e5m2, f16, f32

#: the dtypes the library's GEMMs take, by every name a user may spell them with
_DTYPES = {d: d for d in (f16, bf16, f32, f8e4m3fn, f8e5m2)}
DTYPE_NAMES: dict[str, Any] = {}
for _d in _DTYPES:
    DTYPE_NAMES[_d.name] = _d
    DTYPE_NAMES[_d.numpy_name] = _d
DTYPE_NAMES.update({"fp16": f16, "half": f16, "fp32": f32, "float": f32, "e4m3": f8e4m3fn, "e5m2": f8e5m2,
                    "float8_e4m3": f8e4m3fn, "fp8_e4m3": f8e4m3fn, "fp8_e5m2": f8e5m2})

FP8 = (f8e4m3fn, f8e5m2)


def dtype_named(value: Any, function: str, parameter: str) -> Any:
    """The cutile dtype ``value`` names: a cutile dtype, a name (``"bf16"``,
    ``"bfloat16"``), a numpy or ml_dtypes dtype, or a torch dtype (``torch.float16``)."""
    if value in _DTYPES:
        return value
    name = value if isinstance(value, str) else None
    if name is None:
        text = str(value)
        if text.startswith("torch."):  # torch.float16, torch.float8_e4m3fn
            name = text.removeprefix("torch.")
        else:
            try:
                name = np.dtype(value).name
            except TypeError:
                name = None
    found = DTYPE_NAMES.get(name) if name is not None else None
    if found is None:
        raise cutile.ArgumentTypeError(f"{function}: {parameter}={value!r} is not a dtype it takes "
                                       "(f16, bf16, f32, f8e4m3fn, f8e5m2)")
    return found


@dataclass(frozen=True)
class Operand:
    """A tensor argument as cutile sees it, and where it came from.

    ``kind`` is ``"cutile"``, ``"numpy"`` or the producing module's top-level name
    (``"torch"``, ``"cupy"``); ``original`` is what the caller passed."""

    tensor: cutile.Tensor
    kind: str
    original: Any

    def empty_like_kind(self, shape: tuple[int, ...], dtype: Any) -> tuple[cutile.Tensor, Any]:
        """A new tensor of ``shape`` and ``dtype`` for a result of this operand's kind:
        (the cutile tensor kernels write, the object handed back to the caller)."""
        if self.kind == "numpy":
            array = np.empty(shape, dtype=np.dtype(dtype.numpy_name))
            return api.from_dlpack(array), array
        made = api.empty(list(shape), dtype=dtype)
        return made, made

    def result(self, tensor: cutile.Tensor, handed: Any) -> Any:
        """``handed`` (from `empty_like_kind`) as this operand's kind."""
        if self.kind in ("cutile", "numpy"):
            return handed
        library = importlib.import_module(self.kind)
        return library.from_dlpack(tensor)


def tensor_of(value: Any, function: str, parameter: str) -> cutile.Tensor:
    """`as_tensor`'s tensor alone (for arguments whose kind nothing follows)."""
    if type(value) is cutile.Tensor:  # the common case, without an Operand
        return value
    return as_tensor(value, function, parameter).tensor


def as_tensor(value: Any, function: str, parameter: str) -> Operand:
    """``value`` as a cutile tensor sharing its memory.

    Raises:
        ArgumentTypeError: not a tensor (naming the parameter).
        InteropError: a tensor cutile cannot share (wrong device for the backend, dtype).
    """
    if isinstance(value, cutile.Tensor):
        return Operand(value, "cutile", value)
    if isinstance(value, cutile.Partition):
        raise cutile.ArgumentTypeError(f"{function}: {parameter} is a partition; pass the tensor "
                                       "(partition.unpartition())")
    if isinstance(value, np.ndarray):
        kind = "numpy"
    elif hasattr(value, "__dlpack__") or hasattr(value, "__cuda_array_interface__"):
        kind = type(value).__module__.split(".")[0]
    else:
        raise cutile.ArgumentTypeError(f"{function}: {parameter} must be a tensor (a cutile tensor, or a torch, "
                                       f"CuPy or numpy array), got {type(value).__name__}")
    try:
        tensor = api.from_dlpack(value)
    except cutile.InteropError as exc:
        raise cutile.InteropError(f"{function}: {parameter}: {exc}") from None
    return Operand(tensor, kind, value)


def span(tensor: cutile.Tensor) -> tuple[str, int, int]:
    """The device and absolute [start, end) byte addresses ``tensor`` touches."""
    start, end = tensor.byte_range()
    base = tensor.address() - tensor.offset * tensor.dtype.itemsize
    return tensor.device, base + start, base + end


def check_no_overlap(function: str, out: cutile.Tensor, others: dict[str, cutile.Tensor | None]) -> None:
    """Raises `ArgumentError` naming ``out`` and the input whose memory it overlaps."""
    device, start, end = span(out)
    if start == end:
        return
    for name, other in others.items():
        if other is None:
            continue
        o_device, o_start, o_end = span(other)
        if o_device == device and start < o_end and o_start < end:
            raise cutile.ArgumentError(f"{function}: out overlaps the memory of {name}; the output must not "
                                       "share memory with an input (give another out= or none)")
