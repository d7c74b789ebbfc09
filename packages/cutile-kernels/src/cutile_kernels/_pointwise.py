"""Argument and output handling shared by the pointwise, gather and cache kernels.

Each library function takes cutile tensors or any DLPack / CUDA Array Interface array
(torch, CuPy; numpy on the interpreter), runs on cutile tensors sharing that memory,
and gives its result back as the caller's kind: a cutile `Tensor` for cutile tensors,
an array of the caller's library otherwise (its package's ``from_dlpack``; numpy gets
a copy through ``to_numpy``, the one way numpy takes bf16). ``out=`` is checked
(shape, dtype, writable kind) and written in place.

`Pending` is what every function's ``.launch(...)`` form returns: the launch (or op)
to run or time (``cutile.bench.do_bench(lambda: fn.launch(...).op)``) and how to make
the caller's result once it ran.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, cast

import numpy as np

import cutile
from cutile import api

#: the float dtypes the kernels compute on (in f32) and store back
FLOAT_DTYPES = ("f16", "bf16", "f32")
INT_DTYPES = ("i32", "i64")


@dataclass(frozen=True)
class Argument:
    """A caller's array as a cutile tensor, and how to give results back in its kind."""

    tensor: cutile.Tensor
    #: "cutile", "numpy", or the top-level module name of another producer (torch, cupy)
    kind: str
    original: Any

    @property
    def dtype(self) -> str:
        return str(self.tensor.dtype)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(int(n) for n in self.tensor.shape)


def as_argument(value: Any, function: str, name: str) -> Argument:
    """``value`` as a tensor of the backend, or an error naming ``function``'s ``name``."""
    if isinstance(value, cutile.Tensor):
        return Argument(value, "cutile", value)
    if isinstance(value, cutile.Partition):
        raise cutile.ArgumentTypeError(f"{function}(): parameter '{name}' is a Partition; pass the tensor "
                                       "(unpartition() gives it back)")
    if not (hasattr(value, "__dlpack__") or hasattr(value, "__cuda_array_interface__")):
        raise cutile.ArgumentTypeError(f"{function}(): parameter '{name}' must be a cutile Tensor or a DLPack / "
                                       f"CUDA Array Interface array, got {type(value).__name__}")
    try:
        tensor = api.from_dlpack(value)
    except cutile.CutileError as exc:
        raise cutile.InteropError(f"{function}(): parameter '{name}' cannot be used here: {exc}") from exc
    kind = "numpy" if isinstance(value, np.ndarray) else type(value).__module__.split(".")[0]
    return Argument(tensor, kind, value)


def check_dtype(argument: Argument, allowed: Sequence[str], function: str, name: str) -> None:
    if argument.dtype not in allowed:
        raise cutile.ArgumentTypeError(f"{function}(): parameter '{name}' has dtype {argument.dtype}; "
                                       f"expected one of {', '.join(allowed)}")


def check_same_dtype(a: Argument, b: Argument, function: str, name_a: str, name_b: str) -> None:
    if a.dtype != b.dtype:
        raise cutile.ArgumentTypeError(f"{function}(): parameters '{name_a}' ({a.dtype}) and '{name_b}' "
                                       f"({b.dtype}) must have the same dtype")


def check_rank(argument: Argument, ranks: Sequence[int], function: str, name: str) -> None:
    if len(argument.shape) not in ranks:
        allowed = " or ".join(str(r) for r in ranks)
        raise cutile.ArgumentError(f"{function}(): parameter '{name}' must have {allowed} dimensions, got shape "
                                   f"{list(argument.shape)}")


def reshaped(argument: Argument, shape: Sequence[int], function: str, name: str) -> cutile.Tensor:
    """A new view of the tensor with ``shape``: partitioning it (for a write) consumes
    the view, never the caller's tensor."""
    tensor = argument.tensor
    if tuple(tensor.shape) == tuple(shape):
        return tensor.permute(*range(tensor.ndim))
    if not tensor.is_contiguous:
        raise cutile.ArgumentError(f"{function}(): parameter '{name}' of shape {list(argument.shape)} must be "
                                   f"contiguous to be viewed as {list(shape)} (its strides are "
                                   f"{list(tensor.strides)})")
    return tensor.reshape(*shape)


@dataclass
class Output:
    """Where a kernel writes one result: a cutile tensor, and the caller's view of it."""

    tensor: cutile.Tensor
    #: the caller's ``out=`` array, or None: a new array of the inputs' kind is made
    given: Any
    like: Argument

    def result(self) -> Any:
        if self.given is not None:
            return self.given
        return export(self.tensor, self.like)


def export(tensor: cutile.Tensor, like: Argument) -> Any:
    """``tensor`` as an array of ``like``'s kind."""
    if like.kind == "cutile":
        return tensor
    if like.kind == "numpy":
        return tensor.to_numpy()
    module = sys.modules.get(like.kind) or importlib.import_module(like.kind)
    from_dlpack: Callable[[Any], Any] | None = getattr(module, "from_dlpack", None)
    if from_dlpack is None:  # a producer whose package has no from_dlpack: the cutile tensor
        return tensor
    return from_dlpack(tensor)


def output(out: Any, shape: Sequence[int], dtype: Any, like: Argument, function: str,
           name: str = "out") -> Output:
    """The tensor a kernel writes: ``out`` checked, or a new one of ``shape`` and ``dtype``."""
    shape = tuple(int(n) for n in shape)
    if out is None:
        return Output(api.empty(list(shape), dtype=dtype), None, like)
    given = as_argument(out, function, name)
    if given.shape != shape:
        raise cutile.ArgumentError(f"{function}(): parameter '{name}' has shape {list(given.shape)}; expected "
                                   f"{list(shape)}")
    if given.dtype != str(dtype):
        raise cutile.ArgumentTypeError(f"{function}(): parameter '{name}' has dtype {given.dtype}; expected "
                                       f"{dtype}")
    return Output(given.tensor, out, like)


def check_no_overlap(out: Output, inputs: Sequence[tuple[Argument, str]], function: str, name: str) -> None:
    """An ``out=`` sharing memory with an input would be read while written (a race)."""
    if out.given is None:
        return
    low, high = _span(out.tensor)
    for argument, input_name in inputs:
        a, b = _span(argument.tensor)
        if a < high and low < b and str(out.tensor.device) == str(argument.tensor.device):
            raise cutile.ArgumentError(f"{function}(): parameter '{name}' overlaps the memory of parameter "
                                       f"'{input_name}'; pass a separate array (or use the in-place form where "
                                       "the function has one)")


def _span(tensor: cutile.Tensor) -> tuple[int, int]:
    """The [start, end) addresses a view touches (strides are never negative)."""
    if tensor.size == 0:
        return (0, 0)
    itemsize = tensor.nbytes // tensor.size
    start = int(tensor.address())
    last = sum((int(n) - 1) * int(s) for n, s in zip(tensor.shape, tensor.strides))
    return start, start + (last + 1) * itemsize


def next_pow2(n: int) -> int:
    return 1 << max(0, math.ceil(math.log2(max(1, n))))


def positive_int(value: Any, function: str, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or int(value) < 1:
        raise cutile.ArgumentError(f"{function}(): parameter '{name}' must be a positive int, got {value!r}")
    return int(value)


@dataclass
class Pending:
    """A function's work, not yet run: ``launch`` (a cutile Launch, or an op chaining
    several) and ``finish``, which makes the caller's result once it ran."""

    launch: Any
    finish: Callable[[], Any]

    @property
    def op(self) -> Any:
        """What `cutile.bench.do_bench` takes to time the work on the device alone."""
        return self.launch

    def run(self) -> Any:
        self.launch.sync()
        return self.finish()

    def cancel(self) -> None:
        self.launch.cancel()


class LibraryFunction(Protocol):
    """A library function: calling it runs the work and returns the result;
    ``.launch(...)`` (same arguments) returns the `Pending` work, for timing or batching."""

    __name__: str

    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...

    def launch(self, *args: Any, **kwargs: Any) -> Pending: ...


def library_function(prepare: Callable[..., Pending]) -> LibraryFunction:
    """The function that runs ``prepare``'s work (a plain function, so that ``help`` and
    the docs show its signature and docstring), with ``prepare`` as its ``launch``."""
    name = prepare.__name__.lstrip("_").removesuffix("_launch")

    @functools.wraps(prepare)
    def run(*args: Any, **kwargs: Any) -> Any:
        return prepare(*args, **kwargs).run()

    run.__name__ = run.__qualname__ = name
    run.__signature__ = inspect.signature(prepare).replace(return_annotation=Any)  # type: ignore[attr-defined]
    run.launch = prepare  # type: ignore[attr-defined]
    del run.__wrapped__  # the signature above is the one to show
    return cast(LibraryFunction, run)


#: committed tuning records: ``records/<arch>/<name>.json`` (made on a GPU of that arch
#: with ``TUNER.make_record``, or ``scripts/bench_pointwise.py --record``)
RECORDS = Path(__file__).resolve().parent / "records"


class ArchTuner:
    """A `cutile.tune.Tuner` made on first use, when the arch is known: its record is that
    arch's file; the other attributes are the tuner's. Its config is the committed
    record's winner for the shape's bucket, else a cached winner, else the default; a stale
    record is logged and not used, so a new toolchain never makes a call fail."""

    def __init__(self, name: str, space: Any, default: dict[str, Any], setup: Callable[..., Any],
                 source: Any) -> None:
        self.short_name, self.space, self.default, self.setup, self.source = name, space, default, setup, source

    @functools.cached_property
    def tuner(self) -> Any:
        from cutile import tune

        name = f"cutile_kernels_{self.short_name}"
        arch = tune.Provenance.current(name, self.source, self.space).arch
        return tune.Tuner(name, self.space, self.setup, source=self.source,
                          record=RECORDS / arch / f"{self.short_name}.json", default=self.default, on_stale="warn")

    def config(self, shape: Sequence[int]) -> dict[str, Any]:
        return dict(self.tuner.config(shape))

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self.tuner, attribute)


def tuner(name: str, space: Any, default: dict[str, Any], setup: Callable[..., Any], source: Any) -> ArchTuner:
    """The tuner of one function (see `ArchTuner`)."""
    return ArchTuner(name, space, default, setup, source)
