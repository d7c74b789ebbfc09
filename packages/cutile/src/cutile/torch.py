"""PyTorch integration: cutile kernels and `cutile_kernels` functions as torch custom ops.

Importing this module imports torch (``import cutile`` never does). `custom_op`
registers a function that takes and returns torch tensors (a kernel wrapper, or a
`cutile_kernels` function such as ``cutile_kernels.softmax``) as a ``torch.library``
custom op with a fake implementation, so that ``torch.compile(fullgraph=True)``
traces it as one op and ``torch.cuda.graph`` records its kernels.

Inside the op, launches on torch's memory are queued on torch's current stream and
not waited for, and cutile's allocations (results, workspaces) come from torch's
caching allocator; under a torch CUDA graph capture they are recorded into torch's
graph. Stream order with torch outside ops: packages/cutile/README.md, "PyTorch".
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
import torch.utils.dlpack

import cuda_async
from cutile._errors import ArgumentError, ArgumentTypeError
from cutile._tensor import Tensor
from cutile._torch_streams import current_stream, single_stream_policy, torch_op_scope

__all__ = ["custom_op"]


def custom_op(fn: Callable[..., Any] | None = None, *, name: str, mutates_args: str | Iterable[str] = (),
              schema: str | None = None, fake: Callable[..., Any] | None = None,
              device_types: str | Sequence[str] | None = None) -> Any:
    """Registers ``fn`` as the torch custom op ``name`` (``"namespace::op"``) and returns it
    (a ``torch.library.CustomOpDef``: call it like ``fn``; ``torch.ops.namespace.op`` too).

    ``fn`` takes and returns torch tensors (and the scalars a schema allows); a cutile
    tensor it returns is handed back as a torch tensor over the same memory. A result
    must not be one of the inputs or a view of one (torch's rule for custom ops): an
    op that writes into an argument names it in ``mutates_args`` and returns None.

    Args:
        fn: the function; without it, `custom_op(name=...)` is a decorator.
        name: the op's qualified name, ``"namespace::op"``.
        mutates_args: the parameters ``fn`` writes into (``"unknown"``: any of them).
        schema: the op's torch schema, e.g. ``"(Tensor x, int dim) -> Tensor"``;
            by default inferred from ``fn``'s annotations (``torch.Tensor``, int, float...).
        fake: the fake (meta) implementation: same parameters, returns empty tensors of
            the results' shapes and dtypes (``torch.empty_like(x)``, ``x.new_empty(...)``);
            an op returning nothing needs none.
        device_types: as ``torch.library.custom_op``'s (default: every device; on the
            CPU the kernels run on cutile's interpreter).

    Raises:
        ArgumentError: ``name`` is not qualified, no schema can be inferred, or an op
            returning tensors was given no ``fake``.
        ArgumentTypeError: ``fn`` or ``fake`` is not callable.
    """
    if fn is None:
        return functools.partial(custom_op, name=name, mutates_args=mutates_args, schema=schema, fake=fake,
                                 device_types=device_types)
    if not callable(fn):
        raise ArgumentTypeError(f"custom_op: fn must be callable, got {type(fn).__name__}")
    if fake is not None and not callable(fake):
        raise ArgumentTypeError(f"custom_op: fake must be callable, got {type(fake).__name__}")
    if not isinstance(name, str) or name.count("::") != 1 or not all(name.split("::")):
        raise ArgumentError(f"custom_op: name must be 'namespace::op', got {name!r}")
    mutated: str | tuple[str, ...] = mutates_args if isinstance(mutates_args, str) else \
        tuple(mutates_args) if isinstance(mutates_args, Iterable) else (None,)
    if not isinstance(mutated, str) and not all(isinstance(a, str) for a in mutated):
        raise ArgumentTypeError(f"custom_op: mutates_args must be 'unknown' or parameter names, got {mutates_args!r}")
    if schema is not None and not isinstance(schema, str):
        raise ArgumentTypeError(f"custom_op: schema must be a str like '(Tensor x) -> Tensor', got "
                                f"{type(schema).__name__}")
    if schema is None:
        try:
            schema = torch.library.infer_schema(fn, mutates_args=mutated)
        except (ValueError, TypeError, AttributeError) as exc:  # (an object without a function's attributes)
            raise ArgumentError(
                f"custom_op: cannot infer the schema of {name} from {getattr(fn, '__qualname__', fn)!r}'s "
                f"annotations ({exc}); annotate it with torch types or pass schema='(Tensor x) -> Tensor'"
            ) from None
    returns = schema.rsplit("->", 1)[-1].strip()
    if fake is None and returns not in ("()", "None"):
        raise ArgumentError(
            f"custom_op: {name} returns {returns}, so it needs fake=: a function of the same arguments that "
            "returns empty tensors of the results' shapes and dtypes (e.g. lambda x: torch.empty_like(x))")

    @functools.wraps(fn)
    def implementation(*args: Any, **kwargs: Any) -> Any:
        ordinal = _cuda_device_of(args, kwargs)
        with contextlib.ExitStack() as scope:
            scope.enter_context(torch_op_scope())
            if ordinal is not None:  # ops that are not single launches (chains: then) run on torch's stream too
                scope.enter_context(cuda_async.using_policy(single_stream_policy(current_stream(ordinal))))
            return _as_torch(fn(*args, **kwargs))

    op = torch.library.custom_op(name, implementation, mutates_args=mutated, schema=schema,
                                 device_types=device_types)
    op.register_fake(fake if fake is not None else _returns_nothing)
    return op


def _cuda_device_of(args: tuple[Any, ...], kwargs: dict[str, Any]) -> int | None:
    """The device of the first torch CUDA tensor among the arguments (None: none is)."""
    for value in (*args, *kwargs.values()):
        if isinstance(value, torch.Tensor) and value.is_cuda:
            return int(value.device.index if value.device.index is not None else torch.cuda.current_device())
    return None


def _returns_nothing(*args: Any, **kwargs: Any) -> None:
    return None


def _as_torch(result: Any) -> Any:
    """``result`` with each cutile tensor in it as a torch tensor over its memory."""
    if isinstance(result, Tensor):
        return torch.utils.dlpack.from_dlpack(result)
    if isinstance(result, (tuple, list)):
        return type(result)(_as_torch(item) for item in result)
    return result
