"""The current device: where constructors put tensors and where launches without
tensor arguments run (``cutile.device(i)``, per thread and asyncio task).

A launch with tensor arguments runs on its tensors' device, whatever the current
one is. The interpreter has one device, 0.
"""

from __future__ import annotations

import contextvars
import numbers
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from cutile import _backend
from cutile._errors import ArgumentError, ArgumentTypeError

_current: contextvars.ContextVar[int] = contextvars.ContextVar("cutile_device", default=0)


def current_device() -> int:
    """The ordinal of the current device (0 unless inside a `device` block)."""
    return _current.get()


def checked(device: Any, what: str, parameter: str = "device") -> int:
    """``device`` (an ordinal, a ``"cuda:N"`` string, or None for the current device)
    as an ordinal the backend has, or an error naming ``parameter`` of ``what``."""
    if device is None:
        return _current.get()
    given: Any = device
    if isinstance(device, str):
        text = device.strip()
        if text == "cuda":
            return _current.get()
        if not text.startswith("cuda:") or not text[5:].isdigit():
            raise ArgumentError(f"{what}: {parameter} must be an int ordinal or 'cuda:N', got {device!r}")
        given = int(text[5:])
    if isinstance(given, bool) or not isinstance(given, numbers.Integral):
        raise ArgumentTypeError(f"{what}: {parameter} must be an int ordinal, got {type(device).__name__}")
    ordinal = int(given)
    if ordinal < 0:
        raise ArgumentError(f"{what}: {parameter} must be a non-negative ordinal, got {ordinal}")
    if _backend.current() == "interpreter":
        if ordinal != 0:
            raise ArgumentError(f"{what}: {parameter}={ordinal}, but the interpreter backend has one device, 0")
        return 0
    from cuda_core import device_count

    count = device_count()
    if ordinal >= count:
        raise ArgumentError(f"{what}: {parameter}={ordinal} is out of range: {count} GPU(s) visible")
    return ordinal


def ordinal_of(storage_device: str) -> int | None:
    """The ordinal of a storage's device string (``"cuda:1"`` -> 1; host memory: None)."""
    return int(storage_device[5:]) if storage_device.startswith("cuda:") else None


@contextmanager
def device(ordinal: int | str) -> Iterator[int]:
    """Makes ``ordinal`` the current device inside the block (per thread and asyncio
    task): constructors without ``device=`` make tensors there, and ops scheduled in
    the block without a policy of their own run on that device's stream pool."""
    chosen = checked(ordinal, "cutile.device", "ordinal")
    previous = _current.get()
    token = _current.set(chosen)
    try:
        if _backend.current() == "gpu" and chosen != previous:
            import cuda_async

            from cutile import _gpu

            _gpu.note_device_used(chosen)
            with cuda_async.using_policy(_gpu.device_policy(chosen)):
                yield chosen
        else:
            yield chosen
    finally:
        _current.reset(token)
