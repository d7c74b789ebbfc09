"""The public surface for the native (C) launch paths of the layers above.

A layer that keeps a steady-state path in C builds its extension with
`load_extension` (compiled once with the system C compiler, cached by
source, Python build and compiler), asks `entry_points` for the addresses of the
driver functions it calls, maps a failing driver code to cuda_core's error with
`raise_driver_error`, and forgets handles taken from one driver when
`on_driver_change` says another is in use (a test's fake driver, say).
``CUDA_CORE_NATIVE=0`` turns native code off (`enabled`); under the default
``auto`` extensions are built and loaded only where a CUDA driver library is and
no layer said the process needs none (`not_needed`); every function here
that cannot do its job raises `NativeUnavailable`, and callers take their
Python path.

`PARAM_CTYPES` (the ctypes type of each scalar kernel parameter type, by short
name: ``"i32"``, ``"f64"``...) is in the package root: it is not native-only.
"""

from __future__ import annotations

from typing import Any

from cuda_core import _driver
from cuda_core._driver import on_driver_change
from cuda_core._native import (EntryPoints, NativeUnavailable, cache_dir, enabled, entry_points, load_extension,
                               not_needed)

__all__ = [
    "EntryPoints",
    "NativeUnavailable",
    "cache_dir",
    "enabled",
    "entry_points",
    "load_extension",
    "not_needed",
    "on_driver_change",
    "raise_driver_error",
]


def raise_driver_error(code: int, call: str) -> None:
    """Raises the `cuda_core.CudaError` subclass for the non-success driver result
    ``code`` (a ``CUresult`` as an int, as C code has it) of the driver call ``call``."""
    result: Any = _driver.api().CUresult(code)
    _driver.raise_error(result, call)
