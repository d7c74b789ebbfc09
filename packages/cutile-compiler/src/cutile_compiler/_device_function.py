"""`DeviceFunction`: a Python function that kernels call (``@cutile.function``).

Its own module, without the DSL's registry, so that decorating one imports nothing
of the front end: the call is inlined when a kernel calling it is compiled.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from cutile_compiler._errors import HostCallError


class DeviceFunction:
    """A Python function called from kernels, inlined at each call (``@cutile.function``)."""

    def __init__(self, function: Callable[..., Any]) -> None:
        functools.update_wrapper(self, function)
        self.python_function = function

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise HostCallError(f"{self.python_function.__qualname__} is a device function: call it from a kernel")

    def __repr__(self) -> str:
        return f"<cutile device function {self.python_function.__qualname__}>"
