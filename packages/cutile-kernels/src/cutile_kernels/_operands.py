"""Operands of the library's functions: any tensor in, a result of the same kind out.

The one argument layer of every function of the library (matmul, GEMV and split-K, the
row kernels, the pointwise, gather and cache kernels):

- A function takes cutile tensors or any DLPack / CUDA Array Interface tensor (torch,
  CuPy; numpy on the interpreter backend). `as_tensor` gives the cutile tensor sharing
  its memory (no copy) and remembers the kind, so `Operand.as_kind` can hand back a
  result of that kind: a cutile tensor as it is, a numpy array over the same memory, or
  another library's tensor through its ``from_dlpack`` (sharing the memory too). A
  torch tensor's import is kept while the torch tensor lives (`_torch_import`), so calls
  on the same torch tensors reuse one cutile tensor each, and cutile's bindings with it.
  `cutile_tensor` is for the lower-level functions that take cutile tensors only.
- `output` checks an ``out=`` (shape, dtype, no byte shared with an input: `check_no_overlap`)
  or makes a new tensor; `Output.result` is what the caller gets back.
- `require_live` refuses a tensor consumed by ``partition()``; `dtype_named` parses dtypes.
- `integer_values` and `host_values` give the integers of an argument the host holds
  (lengths, positions), for checks on the host before a kernel reads them.
- `derived` keeps views made from a caller's cutile tensor while it lives.

Errors name the function and the parameter: ``"{function}: {parameter} ..."``.
"""

from __future__ import annotations

import functools
import importlib
import sys
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

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

    @classmethod
    def of(cls, tensor: cutile.Tensor) -> "Operand":
        """A cutile tensor the library made (a result's view) as an operand."""
        return cls(tensor, "cutile", tensor)

    @property
    def shape(self) -> tuple[int, ...]:
        return self.tensor.shape  # (a cutile tensor's shape is a tuple of ints)

    @property
    def dtype_name(self) -> str:
        return str(self.tensor.dtype)

    def as_kind(self, tensor: cutile.Tensor, function: str = "") -> Any:
        """``tensor`` (a new result) as this operand's kind.

        Raises:
            InteropError: the producer's package has no ``from_dlpack`` (pass out=).
        """
        if self.kind == "cutile":
            return tensor
        if self.kind == "numpy":
            return np.asarray(tensor)  # the shared host memory (bf16 through ml_dtypes)
        library = sys.modules.get(self.kind) or importlib.import_module(self.kind)
        from_dlpack = getattr(library, "from_dlpack", None)
        if not callable(from_dlpack):
            raise cutile.InteropError(f"{function}: cannot make a {type(self.original).__name__} result (its module "
                                      "has no from_dlpack); pass out=")
        return from_dlpack(tensor)

    def empty_like_kind(self, shape: tuple[int, ...], dtype: Any) -> tuple[cutile.Tensor, Any]:
        """A new tensor of ``shape`` and ``dtype`` for a result of this operand's kind:
        (the cutile tensor kernels write, the object handed back to the caller)."""
        if self.kind == "numpy":
            array = np.empty(shape, dtype=np.dtype(dtype.numpy_name))
            return api.from_dlpack(array), array
        if self.kind == "torch":
            found = _torch_empty(self.original, shape, dtype)
            if found is not None:
                return found
        made = api.empty(list(shape), dtype=dtype)
        return made, made

    def result(self, tensor: cutile.Tensor, handed: Any) -> Any:
        """``handed`` (from `empty_like_kind`) as this operand's kind."""
        if self.kind in ("cutile", "numpy") or handed is not tensor:  # (a torch result torch made)
            return handed
        return self.as_kind(tensor)


def _torch_empty(like: Any, shape: tuple[int, ...], dtype: Any) -> tuple[cutile.Tensor, Any] | None:
    """A new torch tensor of ``shape`` and ``dtype`` on ``like``'s device, made by torch
    (its caching allocator, on its current stream) and its import; None where torch has no
    such dtype or the result is empty. A result cutile allocated would go back through
    DLPack, and an export of cutile's memory waits for the whole device first (its writer
    may have run on any stream of cutile's pool); torch's memory needs no wait: launches
    on it follow torch's stream (`cutile._torch_streams`)."""
    torch = sys.modules.get("torch")
    if torch is None or 0 in shape:  # (an empty result: cutile's, as before; no memory to share)
        return None
    torch_dtype = getattr(torch, dtype.numpy_name, None)
    device = getattr(like, "device", None)
    if torch_dtype is None or device is None:
        return None
    made = torch.empty(shape, dtype=torch_dtype, device=device)
    return _torch_import(made), made


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
        tensor = _torch_import(value) if kind == "torch" else api.from_dlpack(value)
    except cutile.InteropError as exc:
        raise cutile.InteropError(f"{function}: {parameter}: {exc}") from None
    return Operand(tensor, kind, value)


# The cutile tensors of torch tensors passed before, by the torch tensor's id, with a weak
# reference to it (its entry goes with it) and what the import depends on. A call given
# the same torch tensors again takes the same cutile tensors, and with them the launch
# bindings cutile keeps per tensor object: a fresh import and binding a call cost ~400 us
# of host time for a 3-tensor matmul on the CI machine's fake driver, against 50-90 us.
_TORCH_IMPORTS: dict[int, tuple[weakref.ref[Any], tuple[Any, ...], cutile.Tensor]] = {}


def _torch_layout(value: Any) -> tuple[Any, ...]:
    """What a torch tensor's import depends on: its memory, layout and dtype (``set_``,
    ``resize_`` or ``.data =`` change them), and whether it requires grad (its export is
    refused then)."""
    return (value.data_ptr(), tuple(value.shape), tuple(value.stride()), value.dtype, value.device,
            bool(value.requires_grad))


def _torch_import(value: Any) -> cutile.Tensor:
    """``value``'s cutile tensor: the one made for it before when its layout is the same
    and that tensor object was not consumed (``partition()``), else a new import (kept
    for the next call where ``value`` can be referenced weakly).

    Streams need no import-time order here: every launch on torch's memory runs on
    torch's current stream or waits for it (`cutile._torch_streams`)."""
    key = id(value)
    try:
        layout = _torch_layout(value)
    except (AttributeError, TypeError, RuntimeError):  # (not a strided torch.Tensor: imported each time)
        return api.from_dlpack(value)
    found = _TORCH_IMPORTS.get(key)
    if found is not None:
        reference, seen, tensor = found
        if reference() is value and seen == layout and tensor.consumed_by is None:
            return tensor
    try:
        reference = weakref.ref(value, functools.partial(_forget_import, _TORCH_IMPORTS, key))
    except TypeError:  # (a torch-like object without weak references: not kept)
        return api.from_dlpack(value)
    # The cache must not keep the torch tensor alive: the import holds a capsule, not the
    # object, and the capsule is of a detached alias (same memory, its own TensorImpl): a
    # capsule of ``value`` itself would hold its TensorImpl, and torch keeps a tensor's Python
    # object alive while its TensorImpl is referenced, so the weak reference would never die.
    # (A tensor requiring grad is exported as it is: torch refuses that, as without the cache.)
    detach = getattr(value, "detach", None)
    exported = detach() if callable(detach) and not value.requires_grad else value
    tensor = api.from_dlpack(exported, keep_producer=False)
    del exported
    _TORCH_IMPORTS[key] = (reference, layout, tensor)
    return tensor


def _forget_import(imports: dict[int, Any], key: int, _: Any) -> None:
    """A weak reference's callback: its torch tensor is gone (``imports`` is bound at the
    call, so a tensor outliving the module at shutdown finds it)."""
    imports.pop(key, None)



def integer_values(value: Any, function: str, parameter: str) -> np.ndarray[Any, Any] | None:
    """The integers of a host argument no kernel can read in place: a list or tuple of
    ints, or a numpy array on the GPU backend (the caller uploads it, or uses its values);
    None for anything else (a tensor to import with `as_tensor`).

    Raises:
        ArgumentTypeError: a list holding something other than ints (naming the parameter).
    """
    if isinstance(value, (list, tuple)):
        if not all(isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)) for v in value):
            raise cutile.ArgumentTypeError(f"{function}(): parameter '{parameter}' must hold ints, got {value!r}")
        try:
            return np.array(value, dtype=np.int64).reshape(len(value))
        except OverflowError:
            raise cutile.ArgumentError(f"{function}(): parameter '{parameter}' holds an int past 64 bits") from None
    if isinstance(value, np.ndarray) and cutile.backend() == "gpu":
        return value
    return None


def host_values(tensor: cutile.Tensor) -> np.ndarray[Any, Any] | None:
    """The values of a tensor the host holds (the interpreter's memory), for a function to
    check before its kernel runs; None for device memory, which the host does not read
    (that would wait for the device, and a CUDA graph replays without the host)."""
    return np.asarray(tensor.to_numpy()) if tensor.device == "cpu" else None


def cutile_tensor(value: Any, function: str, parameter: str) -> cutile.Tensor:
    """``value`` itself, for a function that takes cutile tensors only."""
    if not isinstance(value, cutile.Tensor):
        raise cutile.ArgumentTypeError(f"{function}: {parameter} must be a cutile.Tensor, got {type(value).__name__}")
    return value


def require_live(tensor: cutile.Tensor, function: str, parameter: str) -> None:
    """An `OwnershipError` naming ``parameter`` when the tensor was consumed (``partition()``):
    a kernel given a cached view of it (`derived`) would not see that."""
    if tensor.consumed_by is not None:
        raise cutile.OwnershipError(f"{function}: {parameter}: this tensor object was consumed by "
                                    f"{tensor.consumed_by}; use the object that call returned")


def check_same(tensor: cutile.Tensor, shape: Sequence[int], dtype: Any, function: str, parameter: str) -> None:
    """``tensor`` has ``shape`` and ``dtype`` (an out=, or an input that must match another)."""
    if tuple(tensor.shape) != tuple(shape):
        raise cutile.ArgumentError(f"{function}: {parameter} has shape {list(tensor.shape)}; expected {list(shape)}")
    if str(tensor.dtype) != str(dtype):
        raise cutile.ArgumentTypeError(f"{function}: {parameter} has dtype {tensor.dtype}; expected {dtype}")


@dataclass
class Output:
    """Where a kernel writes one result: the cutile tensor, and what the caller gets back."""

    tensor: cutile.Tensor
    #: the caller's ``out=`` object, or None: the result is made of ``like``'s kind
    given: Any
    like: Operand
    function: str = ""
    #: a new result made as ``like``'s kind already (a torch tensor torch allocated), or None
    made: Any = None

    def result(self) -> Any:
        if self.given is not None:
            return self.given
        return self.made if self.made is not None else self.like.as_kind(self.tensor, self.function)


def output(given: Any, shape: Sequence[int], dtype: Any, like: Operand, function: str, parameter: str = "out",
           reads: Mapping[str, cutile.Tensor | None] | None = None) -> Output:
    """The caller's ``out=`` (checked: shape, dtype, no memory shared with ``reads``) or a new
    tensor of ``shape`` and ``dtype``, its result of ``like``'s kind."""
    shape = tuple(int(n) for n in shape)
    if given is None:
        if like.kind == "torch":
            tensor, handed = like.empty_like_kind(shape, dtype)
            if handed is not tensor:
                return Output(tensor, None, like, function, handed)
        return Output(api.empty(list(shape), dtype=dtype), None, like, function)
    tensor = as_tensor(given, function, parameter).tensor
    check_same(tensor, shape, dtype, function, parameter)
    check_no_overlap(function, tensor, reads or {}, parameter)
    return Output(tensor, given, like, function)


def span(tensor: cutile.Tensor) -> tuple[str, int, int]:
    """The device and absolute [start, end) byte addresses ``tensor`` touches."""
    start, end = tensor.byte_range()  # within its storage, whose first byte lies `offset` elements before
    base = tensor.address() - tensor.offset * tensor.dtype.itemsize
    return tensor.device, base + start, base + end


def overlaps(x: cutile.Tensor, y: cutile.Tensor) -> bool:
    """Whether ``x`` and ``y`` touch a common byte (their byte ranges intersect)."""
    if not (x.size and y.size):
        return False
    (x_device, x0, x1), (y_device, y0, y1) = span(x), span(y)
    return x_device == y_device and x0 < y1 and y0 < x1


def check_no_overlap(function: str, out: cutile.Tensor, others: Mapping[str, cutile.Tensor | None],
                     parameter: str = "out") -> None:
    """Raises `ArgumentError` naming ``parameter`` and the input whose memory it overlaps:
    the kernels read the inputs while they write the output (a race)."""
    for name, other in others.items():
        if other is not None and overlaps(out, other):
            raise cutile.ArgumentError(f"{function}: {parameter} overlaps the memory of {name}; the output must not "
                                       "share memory with an input (give another out= or none)")


# Views and workspaces made from a caller's tensor, kept while it lives: a loop calling with the
# same tensors then passes the same objects to the kernels, which keeps the launch fast path.
_derived: "weakref.WeakKeyDictionary[cutile.Tensor, dict[Any, Any]]" = weakref.WeakKeyDictionary()


def derived(tensor: cutile.Tensor, key: Any, make: Callable[[], Any]) -> Any:
    """``make()``, made once per live ``tensor`` and ``key``.

    Only for cutile tensors: the caller's own, or those the library made. A foreign tensor
    (torch, CuPy) is imported by `as_tensor` on every call, so that its DLPack stream
    handshake orders cutile's stream after the producer's work each call; its import is a
    new object each time and must not be a key here (see `_matmul._LastCall`)."""
    made = _derived.get(tensor)
    if made is None:
        made = _derived[tensor] = {}
    value = made.get(key)
    if value is None:
        value = made[key] = make()
    return value


def private_view(t: Any) -> Any:
    """A view of the cutile tensor ``t``, made once per object (anything else as it is):
    what an op's launches made as it runs (after the call) are given in place of the
    caller's object, which the caller may consume (``partition()``) while the op it
    handed the tensor to is pending. Only for a tensor the call has checked live (and
    holds: `cutile.hold`)."""
    if type(t) is not cutile.Tensor:
        return t
    return derived(t, "private view", lambda: t[...])


def memory_layout(t: Any) -> tuple[Any, ...] | None:
    """What a plan kept by layout reads of an operand: a cutile tensor's dtype, shape,
    strides, device and address (the memory is part of it: overlap checks depend on it);
    None for anything else (plans are kept for cutile tensors only)."""
    if type(t) is not cutile.Tensor:
        return None
    return (t.dtype, t.shape, t.strides, t.device, t.address())


Kept = TypeVar("Kept")


class KeptPlans(Generic[Kept]):
    """Calls' plans by their operands' layouts (`memory_layout`), at most ``size`` of
    them: a program that meets ever new memory forgets them all at once rather than grow."""

    def __init__(self, size: int = 1024) -> None:
        self.size = size
        self._plans: dict[tuple[Any, ...], Kept] = {}

    def get(self, key: tuple[Any, ...]) -> Kept | None:
        return self._plans.get(key)

    def keep(self, key: tuple[Any, ...], plan: Kept) -> None:
        if len(self._plans) >= self.size:
            self._plans.clear()
        self._plans[key] = plan

    def clear(self) -> None:
        self._plans.clear()

    def __len__(self) -> int:
        return len(self._plans)

    def __contains__(self, key: object) -> bool:
        return key in self._plans

    def values(self) -> list[Kept]:
        return list(self._plans.values())
