"""Stream order with PyTorch, without importing it.

Memory imported from torch (`api.from_dlpack` of a torch CUDA tensor, which is what
cutile_kernels does with torch arguments) follows torch's stream order: a launch on
it runs on torch's current stream of its device, or, when a cutile batch or policy
puts it on a stream of its own, that stream waits for torch's current stream before
the kernel and torch's current stream waits for the kernel after it. Under a torch
CUDA graph capture, and inside a `cutile.torch.custom_op`, such a launch is queued
on torch's stream without a host wait (torch orders its stream and owns its memory).

torch is looked up in ``sys.modules`` only: nothing here imports it, and the
functions taking a torch object are only reached once one was seen.

`install_dynamo_skips` keeps torch.compile's tracer (dynamo) out of the stack's
code: a cutile call inside a compiled function is a graph break with dynamo's
"file is under skip directory" reason, and runs eagerly.
"""

from __future__ import annotations

import contextvars
import importlib.util
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

# Set inside a `cutile.torch.custom_op`'s implementation: launches on torch memory are
# queued on torch's current stream and not waited for, and cutile's allocations come
# from torch's caching allocator (so they may be made during a torch capture).
_in_torch_op: contextvars.ContextVar[bool] = contextvars.ContextVar("cutile_in_torch_op", default=False)

# Wrappers of torch's streams by (device, handle); cuda_async keeps its bookkeeping
# per Stream object, so one handle gets one wrapper.
_wrapped: dict[tuple[int, int], Any] = {}
_policies: dict[int, Any] = {}
_MAX_WRAPPED = 64


def is_torch_object(obj: Any) -> bool:
    """Whether ``obj`` is of a class of torch (a tensor, a parameter, a subclass of theirs)."""
    return any(klass.__module__.split(".", 1)[0] == "torch" for klass in type(obj).__mro__[:-1])


def torch_cuda_in_use() -> bool:
    """Whether torch is imported and has initialized CUDA (else it has no stream work,
    and no capture, to be ordered with)."""
    torch = sys.modules.get("torch")
    return torch is not None and bool(torch.cuda.is_initialized())


def current_stream(ordinal: int) -> Any:
    """torch's current stream on device ``ordinal``, as a `cuda_core.Stream` (borrowed)."""
    torch = sys.modules["torch"]
    handle = int(torch.cuda.current_stream(ordinal).cuda_stream)
    key = (ordinal, handle)
    stream = _wrapped.get(key)
    if stream is None:
        from cuda_core import Stream

        if len(_wrapped) >= _MAX_WRAPPED:  # a program making streams without end: start over
            _wrapped.clear()
            _policies.clear()
        stream = _wrapped[key] = Stream.wrap(handle, ordinal)
    return stream


def single_stream_policy(stream: Any) -> Any:
    """A `cuda_async.SingleStream` of ``stream`` (one per stream)."""
    policy = _policies.get(id(stream))
    if policy is None or policy.stream is not stream:
        import cuda_async

        policy = _policies[id(stream)] = cuda_async.SingleStream(stream)
    return policy


def is_capturing(stream: Any) -> bool:
    """Whether torch is recording ``stream`` into a CUDA graph (any capture of it)."""
    if int(stream.handle) == 0:  # the legacy default stream cannot be captured
        return False
    from cuda_core import is_capturing as stream_is_capturing

    return bool(stream_is_capturing(stream))


def queue_only() -> bool:
    """Whether launches on torch memory are queued without a host wait (inside a
    `cutile.torch.custom_op`)."""
    return _in_torch_op.get()


@contextmanager
def torch_op_scope() -> Iterator[None]:
    """The body of a `cutile.torch.custom_op` implementation."""
    token = _in_torch_op.set(True)
    try:
        yield
    finally:
        _in_torch_op.reset(token)


def allocate_from_torch(nbytes: int, ordinal: int) -> tuple[int, Any]:
    """``nbytes`` of torch's caching allocator on device ``ordinal`` (stream-ordered on
    torch's current stream, and legal during its captures): (address, owner)."""
    torch = sys.modules["torch"]
    owner = torch.empty(max(nbytes, 1), dtype=torch.uint8, device=f"cuda:{ordinal}")
    return int(owner.data_ptr()), owner


def dlpack_consumer_stream(ordinal: int, cutile_stream: int | None) -> int | None:
    """The stream cutile names to torch's ``__dlpack__``: cutile's own (torch makes it
    wait for its current stream), except while torch captures its current stream,
    where a wait from an uncaptured stream would pull that stream into the capture:
    then -1 (no wait; the launch runs on the captured stream itself)."""
    if cutile_stream is not None and torch_cuda_in_use() and is_capturing(current_stream(ordinal)):
        return -1
    return cutile_stream


# -- dynamo -------------------------------------------------------------------------------------
# The workspace's packages: dynamo skips their files (ours call one another and torch).
_STACK = ("cuda_core", "cuda_async", "cutile_ir", "cutile_compiler", "cutile", "cutile_kernels")
_TRACE_RULES = "torch._dynamo.trace_rules"


def _skip_stack(trace_rules: Any) -> None:
    add = getattr(trace_rules, "add", None)
    if callable(add):
        for name in _STACK:
            if importlib.util.find_spec(name) is not None:
                add(name)


class _AfterTraceRules:
    """A `sys.meta_path` finder that lets the usual finders load dynamo's trace rules,
    then adds the stack's packages to its skip list (once; it removes itself)."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != _TRACE_RULES:
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        loader: Any = getattr(spec, "loader", None)
        exec_module = getattr(loader, "exec_module", None)
        if spec is None or exec_module is None:
            return spec

        def exec_then_skip(module: Any) -> None:
            exec_module(module)
            del loader.exec_module  # (the instance attribute: back to the class's method)
            _skip_stack(module)

        loader.exec_module = exec_then_skip
        return spec


def install_dynamo_skips() -> None:
    """Makes dynamo skip the stack's files: now if its trace rules are loaded, else when
    they are (torch.compile loads them on first use). Imports nothing of torch."""
    loaded = sys.modules.get(_TRACE_RULES)
    if loaded is not None:
        _skip_stack(loaded)
    elif not any(isinstance(finder, _AfterTraceRules) for finder in sys.meta_path):
        sys.meta_path.insert(0, _AfterTraceRules())
