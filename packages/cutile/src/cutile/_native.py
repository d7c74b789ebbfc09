"""The native launch path (``native/_native_launch.c``): the steady state of
``kernel(*args).sync()`` in C, so that a loop of launches costs little more than
the driver call.

Importing cutile builds and loads nothing native. The module is built (once, then
loaded from the disk cache, by `cuda_core.native.load_extension`, with cuda_async's
batch API header, `cuda_async.NATIVE_INCLUDE_DIR`) and loaded by `load`, at the first
launch run on the GPU backend (`arm`, which that run calls to give the kernel its
native binding): the interpreter never reaches it. Loading hands the module
cutile's classes, which are plain Python classes with ``__slots__`` for the fields
its C reads (`cutile.Kernel`'s native binding, `cutile.Launch`'s state, the consumer
of a tensor or partition); the module installs its fast paths on them (Kernel's call
slot, ``Launch.sync``, Launch's finalizer), so that every kernel and launch, made
before or after, takes them. Where native code is not wanted (under the default
``CUDA_CORE_NATIVE=auto``: no CUDA driver library, or ``CUTILE_BACKEND=interpreter``),
or cannot be built (no C compiler, no Python headers), or ``CUDA_CORE_NATIVE=0``, the
classes keep their Python methods, every launch takes the Python path, and the first
GPU launch says so once (a warning of the ``cutile.backend`` logger).

What the C code does is a subset of the Python path's work, for one state
(the same objects as the kernel's last armed call, or, through `launch_bound`, new
objects over an armed binding's memory in its layouts; nothing else pending, inside a
batch's steady state or on idle memory); every other case, and every error, is the
Python code's.
"""

from __future__ import annotations

import logging
import struct
import weakref
from pathlib import Path
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


#: the loaded module (None until `load` has loaded it, and where it cannot be)
module: Any = None
_reason: str | None = None  # why `load` could not
_tried = False
_configured_for: Any = None  # the driver entry points the module was configured with
_told = False
_log = logging.getLogger("cutile.backend")


def unavailable_reason() -> str | None:
    """Why launches take the Python path (None when the native path is in use)."""
    if not _tried:
        return "not loaded yet (it is built and loaded at the first launch on the GPU backend)"
    return _reason


def note_if_unavailable() -> None:
    """Warns once (``cutile.backend`` logger) that the GPU backend launches through
    Python, unless the user turned native code off."""
    global _told
    if not _told and enabled():  # (called where loading failed)
        _told = True
        _log.warning("cutile: the native launch path is unavailable (%s); launches take the Python path, "
                     "which costs more host time per launch", _reason)


def load() -> Any:
    """The native module, built and loaded at the first call (then the same one), with
    cutile's classes handed over; None where it is unavailable (`unavailable_reason`
    says why; the first call warns, `note_if_unavailable`)."""
    global module, _reason, _tried
    if _tried:
        return module
    _tried = True
    try:
        from cuda_async import NATIVE_INCLUDE_DIR, native_batch_api

        batch = native_batch_api()  # cutile's extension calls cuda_async's: without it, neither
        loaded = load_extension("cutile._native_launch", _SOURCE, (NATIVE_INCLUDE_DIR,))
    except (NativeUnavailable, OSError) as exc:
        _reason = str(exc)
        note_if_unavailable()
        return None
    from cutile._entry import Kernel
    from cutile._launch import Launch, warn_never_run
    from cutile._tensor import Owned

    # Its C reads these classes' slots and installs its paths on them; for every call
    # and sync it does not run, it calls their Python paths.
    loaded.configure_classes(batch.API, Kernel, Launch, Owned, Kernel._call, Launch._sync_slow, warn_never_run)
    # A kernel armed under one driver (a test's fake, say) must not launch through another.
    on_driver_change(loaded.invalidate)
    module = loaded
    return module


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
    ``loaded`` with default options, or is about to: `cutile._gpu.arm_at_call`), when
    every parameter is of a kind the C path packs; otherwise the kernel keeps the
    Python path. The first call loads the module (`load`)."""
    if load() is None or binding.torch_ordered:  # (torch's memory: its stream order, the Python path)
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
        weakref.ref(binding), binding.accesses, binding.claim_plan, run, kernel._launch_description, tuple(checks), results,
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
    if fast is None:  # (armed: the module is loaded)
        return None
    return module.launch_bound(kernel, fast, values)
