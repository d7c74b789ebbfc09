"""What the pointwise, gather and cache kernels share: their checks, the call, the tuners.

Arguments and results go through `_operands` (any DLPack / CUDA Array Interface array
in, the caller's kind out, ``out=`` checked and written in place); the checks here
(dtype, rank, a view of another shape) take its `Operand`.

`Pending` is what every function's ``.launch(...)`` form returns: the launch (or op)
to run or time (``cutile.bench.do_bench(lambda: fn.launch(...).op)``) and how to make
the caller's result once it ran.
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast


import cutile
from cutile_kernels._operands import Operand
from cutile_kernels._records import RECORDS_DIR, record_path

#: the float dtypes the kernels compute on (in f32) and store back
FLOAT_DTYPES = ("f16", "bf16", "f32")
INT_DTYPES = ("i32", "i64")


def check_dtype(argument: Operand, allowed: Sequence[str], function: str, name: str) -> None:
    if argument.dtype_name not in allowed:
        raise cutile.ArgumentTypeError(f"{function}(): parameter '{name}' has dtype {argument.dtype_name}; "
                                       f"expected one of {', '.join(allowed)}")


def check_same_dtype(a: Operand, b: Operand, function: str, name_a: str, name_b: str) -> None:
    if a.dtype_name != b.dtype_name:
        raise cutile.ArgumentTypeError(f"{function}(): parameters '{name_a}' ({a.dtype_name}) and '{name_b}' "
                                       f"({b.dtype_name}) must have the same dtype")


def check_rank(argument: Operand, ranks: Sequence[int], function: str, name: str) -> None:
    if len(argument.shape) not in ranks:
        allowed = " or ".join(str(r) for r in ranks)
        raise cutile.ArgumentError(f"{function}(): parameter '{name}' must have {allowed} dimensions, got shape "
                                   f"{list(argument.shape)}")


def rows_over_last_dim(argument: Operand, dim: Any, function: str) -> tuple[int, int]:
    """(rows, columns) of a reduction of ``x`` over its last dim, the only ``dim`` taken."""
    shape = argument.shape
    if not shape:
        raise cutile.ArgumentError(f"{function}(): parameter 'x' must have at least one dimension")
    if isinstance(dim, bool) or not isinstance(dim, int) or dim not in (-1, len(shape) - 1):
        raise cutile.ArgumentError(f"{function}(): parameter 'dim' must be the last dim (-1 or {len(shape) - 1}), "
                                   f"got {dim!r}")
    return math.prod(shape[:-1]), shape[-1]


def reshaped(argument: Operand, shape: Sequence[int], function: str, name: str) -> cutile.Tensor:
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


def config_of(function: str, config: Any, space: Any, default: dict[str, Any]) -> dict[str, Any]:
    """A caller's ``config=``: `default` updated by it, each key one of ``space``'s (else
    an `ArgumentError` naming the key). Values as the space's kind: a power of two where
    the space's are all powers of two (tile sizes), else an int from the space's least;
    strings one of the space's. (Counts like ``max_blocks`` take any int from 1.)"""
    from cutile_kernels._splitk import check_config

    allowed: dict[str, Any] = {}
    for key, values in space.params.items():
        if any(isinstance(v, str) for v in values):
            allowed[key] = tuple(values)
        elif all(v >= 1 and v & (v - 1) == 0 for v in values):
            allowed[key] = None  # (check_config: a power of two >= 1)
        else:
            allowed[key] = range(0 if min(values) == 0 else 1, 2**31)
    return check_config(f"{function}()", config, dict(default), allowed)


def next_pow2(n: int) -> int:
    return 1 << max(0, math.ceil(math.log2(max(1, n))))


@dataclass
class Pending:
    """A function's work, not yet run: ``launch`` (a cutile Launch), ``then`` (the rest of
    the work after it, as `cuda_async.DeviceOp.then` takes it, or None) and ``finish``,
    which makes the caller's result once it ran. The op chaining them is made when first
    asked for, so until then the work can still be cancelled."""

    launch: Any
    finish: Callable[[], Any]
    then: Callable[[Any], Any] | None = None
    _op: Any = None

    @property
    def op(self) -> Any:
        """What `cutile.bench.do_bench` takes to time the work on the device alone."""
        if self.then is None:
            return self.launch
        if self._op is None:
            self._op = self.launch.then(self.then)
        return self._op

    def __device_op__(self) -> Any:
        """The op, for what takes any op (`cutile.bench.do_bench`, ``then``, ``zip``)."""
        return self.op

    def run(self) -> Any:
        self.op.sync()
        return self.finish()

    def cancel(self) -> None:
        """Drops the work unrun, giving its tensors back (refused once its op is made)."""
        if self._op is not None:
            raise cutile.OwnershipError("the work is part of an op (its .op was taken); it cannot be cancelled")
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
RECORDS = RECORDS_DIR


class ArchTuner:
    """A `cutile.tune.Tuner` made on first use, when the arch is known: its record is that
    arch's file; the other attributes are the tuner's. Its config is the committed
    record's winner for the shape's bucket, else a cached winner, else the default; a stale
    record is logged and not used, so a new toolchain never makes a call fail."""

    def __init__(self, name: str, space: Any, default: dict[str, Any], setup: Callable[..., Any],
                 source: Any, bucket: Callable[[Sequence[int]], str] | None = None) -> None:
        self.short_name, self.space, self.default, self.setup, self.source = name, space, default, setup, source
        self.bucket_of = bucket

    @functools.cached_property
    def tuner(self) -> Any:
        from cutile import tune

        name = f"cutile_kernels_{self.short_name}"
        record = record_path(name, self.source, self.space, file=self.short_name, folder=RECORDS)
        return tune.Tuner(name, self.space, self.setup, source=self.source, record=record, default=self.default,
                          on_stale="warn", bucket=self.bucket_of or tune.shape_bucket)

    def config(self, shape: Sequence[int]) -> dict[str, Any]:
        return dict(self.tuner.config(shape))

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self.tuner, attribute)


def tuner(name: str, space: Any, default: dict[str, Any], setup: Callable[..., Any], source: Any,
          bucket: Callable[[Sequence[int]], str] | None = None) -> ArchTuner:
    """The tuner of one function (see `ArchTuner`); ``bucket`` as `cutile.tune.Tuner`'s
    (default: each extent rounded up to a power of two)."""
    return ArchTuner(name, space, default, setup, source, bucket)
