"""The native launch path (``native/_native_launch.c``): the steady state of
``kernel(*args).sync()`` in C, so that a loop of launches costs little more than
the driver call.

The module is loaded at import (built once, then from the disk cache, by
`cuda_core.native.load_extension`, with cuda_async's batch API header,
`cuda_async.NATIVE_INCLUDE_DIR`), as it provides the C bases of `cutile.Kernel` and
`cutile.Launch`, fixed when those classes are defined. Where native code is not
wanted (under the default ``CUDA_CORE_NATIVE=auto``: no CUDA driver library, or
``CUTILE_BACKEND=interpreter``), or cannot be built (no C compiler, no Python
headers), or ``CUDA_CORE_NATIVE=0``, `KernelBase` and `LaunchBase` are plain classes, every
launch takes the Python path, and the GPU backend says so once (a warning of the
``cutile.backend`` logger).

What the C code does is a subset of the Python path's work, for one state
(the same objects as the kernel's last armed call, or, through `launch_bound`, new
objects over an armed binding's memory in its layouts; nothing else pending, inside a
batch's steady state or on idle memory); every other case, and every error, is the
Python code's.
"""

from __future__ import annotations

import logging
import struct
import sys
import weakref
from pathlib import Path
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from cuda_core import PARAM_CTYPES
from cuda_core.native import NativeUnavailable, enabled, entry_points, load_extension, on_driver_change

if TYPE_CHECKING:
    from cutile._gpu import LoadedKernel
    from cutile._binding import ObjectBinding
    from cutile._entry import Kernel

_SOURCE = Path(__file__).parent / "native" / "_native_launch.c"

# The C types scalar parameters are packed as (cuda_core's names, as cutile._gpu
# packs them) -> the codes of native/_native_launch.c's `enum { P_I8 = 1, ... }`,
# which names each P_ + the C type (test_native_codes.py checks the two agree).
_SCALAR_CODES = {"i8": 1, "i16": 2, "i32": 3, "i64": 4, "u8": 5, "u16": 6, "u32": 7, "u64": 8, "f32": 9, "f64": 10}
# Each C type as `struct` packs it into an 8-byte little-endian slot (as ctypes does).
_SLOT_FORMATS = {"i8": "b7x", "i16": "h6x", "i32": "i4x", "i64": "q", "u8": "B7x", "u16": "H6x", "u32": "I4x",
                 "u64": "Q", "f32": "f4x", "f64": "d", "ptr": "Q"}


_reason: str | None = None
try:
    from cuda_async import NATIVE_INCLUDE_DIR as _BATCH_HEADERS
    from cuda_async import native_batch_api as _batch_api

    _batch_api()  # cutile's extension calls cuda_async's: without it, neither
    module: Any = load_extension("cutile._native_launch", _SOURCE, (_BATCH_HEADERS,))
except (NativeUnavailable, OSError) as exc:
    module = None
    _reason = str(exc)

_configured_for: Any = None  # the driver entry points the module was configured with
#: called as hook(kernel, code, lasti) for a launch freed while pending (`configure_python`)
_never_run_hook: Callable[[Any, Any, int], None] | None = None
_told = False
_log = logging.getLogger("cutile.backend")


def unavailable_reason() -> str | None:
    """Why launches take the Python path (None when the native path is in use)."""
    return _reason


def note_if_unavailable() -> None:
    """Warns once (``cutile.backend`` logger) that the GPU backend launches through
    Python, unless the user turned native code off."""
    global _told
    if module is None and not _told and enabled():
        _told = True
        _log.warning("cutile: the native launch path is unavailable (%s); launches take the Python path, "
                     "which costs more host time per launch", _reason)


class _PythonKernelBase:
    """`Kernel`'s base without the native module: calls go to ``_call``."""

    _native_binding: Any = None  # (the C base's member: always None here)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        launch = self._call(*args, **kwargs)  # type: ignore[attr-defined]
        caller = sys._getframe(1)  # where the launch is made (for the warning if it never runs)
        launch._site_code, launch._site_lasti = caller.f_code, caller.f_lasti
        return launch


class _PythonOwned:
    """The base of `Tensor` and `Partition` without the native module (the C one
    keeps ``_consumed_by`` where the native path reads it)."""

    __slots__ = ("_consumed_by",)


class _PythonLaunchBase:
    """`Launch`'s base without the native module: ``sync`` is ``_sync_slow``, a
    launch freed with its claim gives it back, and one freed while pending warns."""

    # (the native base's C members: the claim, the positional arguments of a launch
    # made in C, done, pending, and where the launch was made)
    _claim: Any = None
    _args: Any = None
    _done = False
    _pending = False
    _site_code: Any = None
    _site_lasti = -1

    def sync(self) -> Any:
        """Runs the launch to completion and returns its tensor arguments (one as
        itself, several as a tuple)."""
        return self._sync_slow()  # type: ignore[attr-defined]

    def _detach(self) -> None:
        """Leaves the launch to the Python path (the native base's; nothing here)."""

    def _attach(self, fast: Any, values: tuple[Any, ...]) -> None:
        """Lets the native sync run the launch (the native base's; nothing here)."""

    def __del__(self) -> None:
        state = self.__dict__
        claim = state.get("_claim")
        if claim is not None:
            claim.drop()
        if state.get("_pending") and _never_run_hook is not None:
            _never_run_hook(state.get("kernel"), state.get("_site_code"), state.get("_site_lasti", -1))


def configure_python(call: Callable[..., Any], sync: Callable[[Any], Any],
                     never_run: Callable[[Any, Any, int], None]) -> None:
    """Hands the native bases what they call: ``call(kernel, *args, **kwargs)``, the
    Python path of a call; ``sync(launch)``, that of a sync; and ``never_run(kernel,
    code, lasti)`` for a launch freed while pending, with the code object and
    instruction offset of the call that made it (None, -1 when unknown). The Python
    bases call the same methods by name."""
    global _never_run_hook
    _never_run_hook = never_run
    if module is not None:
        module.configure_python(call, sync, never_run)


if TYPE_CHECKING:
    KernelBase = _PythonKernelBase
    LaunchBase = _PythonLaunchBase
    Owned = _PythonOwned
elif module is not None:
    module.use_api(_batch_api().API)
    # A kernel armed under one driver (a test's fake, say) must not launch through another.
    on_driver_change(module.invalidate)
    KernelBase = module.KernelBase
    LaunchBase = module.LaunchBase
    Owned = module.Owned
else:
    KernelBase = _PythonKernelBase
    LaunchBase = _PythonLaunchBase
    Owned = _PythonOwned


def disable_for_devices() -> None:
    """Makes every binding armed so far miss: a device other than 0 is in use, and the
    C path cannot check that the default policy's stream is on the tensors' device
    (`cutile._gpu.note_device_used` arms no binding from then on)."""
    if module is not None:
        module.invalidate()


def _configure() -> None:
    """Points the module at the driver in use (the real one or a test driver)."""
    global _configured_for
    points = entry_points()
    if points is _configured_for:
        return
    from cuda_core.native import raise_driver_error

    module.configure(points.launch_kernel, points.ctx_get_current, points.ctx_set_current,
                     points.stream_synchronize, raise_driver_error)
    _configured_for = points


def arm(kernel: Kernel, binding: ObjectBinding, loaded: LoadedKernel, context: int) -> None:
    """Gives ``kernel`` a native binding for ``binding`` (which has just launched
    ``loaded`` with default options), when every parameter is of a kind the C path
    packs; otherwise the kernel keeps the Python path."""
    if module is None or binding.torch_ordered:  # (torch's memory: its stream order, the Python path)
        return
    prepared = loaded.prepared
    config = prepared.config
    if config.extended or loaded.converts_scalars:
        return
    types = loaded._param_types
    if any(t not in PARAM_CTYPES for t in types):  # (raw bytesN scalars: the Python path)
        return
    try:
        _configure()
    except NativeUnavailable:
        return
    from cutile import _gpu
    from cutile._launch import Launch  # (it imports this module, for LaunchBase)

    layout = loaded.native_layout
    if layout is None:  # (per loaded kernel: its scalars' slots, and its parameters' packing)
        layout = loaded.native_layout = (
            {param: index for index, (param, code, _, _) in enumerate(loaded.recipe) if code == _gpu._SCALAR},
            struct.Struct("<" + "".join(_SLOT_FORMATS[t] for t in types)))
    slot_of, slots = layout
    checks: list[tuple[Any, ...]] = []  # (kind, target, value, packed_as, slot, range): one shape for the C parser
    for index, (kind, *rest) in enumerate(binding.checks):
        name = kernel._param_names[index]
        if kind == 0:  # a tensor (its object may be gone: then only `launch_bound` matches it)
            checks.append((kind, rest[0], None, 0, 0, 0))
        elif kind == 1:  # a constant
            checks.append((kind, rest[0], rest[1], 0, 0, 0))
        else:
            slot = slot_of.get(name)
            if slot is None or rest[0] not in (int, float):
                return
            # Packed as the cubin declares it (small integers may be widened), checked
            # against what its dtype holds.
            packed_as = _SCALAR_CODES.get(types[slot])
            accepts = _SCALAR_CODES.get(_gpu._PARAM_TYPES[kernel._scalar_params[name]])
            if packed_as is None or accepts is None:
                return
            checks.append((kind, rest[0], None, packed_as, slot, accepts))
    # One 8-byte slot per parameter, little-endian like the device.
    try:
        packed = slots.pack(*binding.packed)
    except (struct.error, OverflowError):  # (a value struct refuses where ctypes converts: ctypes's bytes)
        packed = b"".join(bytes(PARAM_CTYPES[t](v)).ljust(8, b"\0") for t, v in zip(types, binding.packed))
    run = binding.run_holds  # a synchronous run's holds
    # The binding's grid (the prepared launch's is the last launch's of this kernel, which
    # may be another binding's: a binding armed at its call has not launched yet).
    grid = binding.plan.grid if binding.plan is not None else config.grid
    results = binding.tensor_positions
    fast = module.NativeObjectBinding(
        weakref.ref(binding), binding.accesses, binding.claim_plan, run, kernel._launch_description, Launch, tuple(checks), results,
        int(prepared.function.handle), context, tuple(grid), tuple(config.block),
        config.shared_memory, packed, loaded.reads.entries)
    kernel._native_binding = fast
    binding.fast = fast


def launch_bound(kernel: Kernel, binding: ObjectBinding, values: tuple[Any, ...]) -> Any:
    """The launch, made in C, of a call of ``kernel`` with every parameter's value in
    order (``values``) whose memory, layouts and constants are ``binding``'s (its
    `cutile._binding.layout_key`) when its native binding may run it (every object
    unconsumed, the scalars of its types and in range, nothing else holding the memory);
    otherwise None."""
    fast = binding.fast
    if fast is None:
        return None
    return module.launch_bound(kernel, fast, values)
