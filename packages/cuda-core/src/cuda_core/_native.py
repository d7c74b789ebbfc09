"""Native (C) helpers: building the small CPython extensions of the layers above,
and the driver entry points they call.

A Python launch through cuda-bindings costs more than the driver call itself
(packing, argument objects); the layers above keep their steady-state launch
path in C. Their sources ship with the packages and are compiled once
with the system C compiler (as Triton builds its launchers), into a cache keyed
by the source, the Python build and the compiler, written atomically.

``CUDA_CORE_NATIVE`` says when native code is used: ``auto`` (the default) builds
and loads extensions only where they can serve a GPU, i.e. where the CUDA driver
library loads and no layer above said the process runs on the CPU (`not_needed`),
so an interpreter-only process never runs the C compiler nor loads an extension;
``1`` builds and loads them wherever a compiler is (a test driver's launches take
the native path too); ``0`` turns native code off. Callers then say so and take
their Python path. ``CUDA_CORE_NATIVE_DIR`` moves the cache (default
``$XDG_CACHE_HOME/cuda_core/native``, i.e. ``~/.cache/cuda_core/native``).
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib.machinery
import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading
from pathlib import Path
from types import ModuleType
from typing import Any

from cuda_core import _driver

_lock = threading.Lock()
_loaded: dict[str, ModuleType] = {}
_COMPILE_TIMEOUT_S = 120


class NativeUnavailable(RuntimeError):
    """A native extension could not be built or loaded; the message says why."""


def _setting() -> str:
    return os.environ.get("CUDA_CORE_NATIVE", "auto").strip().lower()


def enabled() -> bool:
    """Whether native code may be used (``CUDA_CORE_NATIVE`` is not ``0``)."""
    return _setting() not in ("0", "false", "no", "off")


_not_needed: str | None = None
_driver_library_error: str | None = None
_driver_library_probed = False


def not_needed(reason: str) -> None:
    """Says that this process runs no GPU work (``reason``, in words, e.g. a layer
    above chose a CPU backend): under ``CUDA_CORE_NATIVE=auto``, `load_extension`
    then builds and loads nothing. Only extensions loaded after the call are spared."""
    global _not_needed
    _not_needed = reason


def _unwanted_reason() -> str | None:
    """Why `load_extension` must not build or load here (None when it may)."""
    global _driver_library_error, _driver_library_probed
    if not enabled():
        return "native code is turned off (CUDA_CORE_NATIVE=0)"
    if _setting() not in ("auto", ""):
        return None  # asked for everywhere
    if _not_needed is not None:
        return f"not needed in this process ({_not_needed}; CUDA_CORE_NATIVE=1 uses it anyway)"
    if not _driver_library_probed:
        try:
            ctypes.CDLL("libcuda.so.1")  # (the library cuda-bindings and `entry_points` load)
        except OSError as exc:
            _driver_library_error = str(exc)
        _driver_library_probed = True
    if _driver_library_error is not None:
        return (f"no CUDA driver library here ({_driver_library_error}), so no GPU to serve "
                "(CUDA_CORE_NATIVE=1 uses it anyway)")
    return None


def cache_dir() -> Path:
    """Where built extensions are cached: ``CUDA_CORE_NATIVE_DIR``, else
    ``$XDG_CACHE_HOME/cuda_core/native``."""
    configured = os.environ.get("CUDA_CORE_NATIVE_DIR")
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "cuda_core" / "native"


def _compiler() -> list[str]:
    """``$CC`` if set (it must exist), else the compiler Python was built with, else cc, gcc or clang."""
    chosen = os.environ.get("CC")
    if chosen:
        command = shlex.split(chosen)
        if not command or shutil.which(command[0]) is None:
            raise NativeUnavailable(f"the C compiler CC={chosen!r} is not found")
        return command
    command = shlex.split(sysconfig.get_config_var("CC") or "")
    if command and shutil.which(command[0]):
        return command
    for fallback in ("cc", "gcc", "clang"):
        if shutil.which(fallback):
            return [fallback]
    raise NativeUnavailable("no C compiler found (tried the one Python was built with, cc, gcc, clang; set CC)")


def load_extension(name: str, source: Path, include_dirs: tuple[Path, ...] = ()) -> ModuleType:
    """The CPython extension module ``name`` built from the C file ``source``, with
    the headers of ``include_dirs`` (compiled once per source and headers, Python
    build and compiler, then loaded from the cache).

    Raises `NativeUnavailable` with the reason when native code is off or not
    wanted here (``CUDA_CORE_NATIVE``, `not_needed`), no compiler or Python headers
    are found, or the compile fails.
    """
    with _lock:
        module = _loaded.get(name)
        if module is not None:
            return module
        unwanted = _unwanted_reason()
        if unwanted is not None:
            raise NativeUnavailable(unwanted)
        text = source.read_bytes() + b"".join(
            header.read_bytes() for folder in include_dirs for header in sorted(folder.glob("*.h")))
        include = sysconfig.get_paths()["include"]
        if not os.path.exists(os.path.join(include, "Python.h")):
            raise NativeUnavailable(f"the Python headers are missing (no Python.h in {include}; install python3-dev)")
        compiler = _compiler()
        suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
        key = hashlib.sha256(b"\0".join([text, sys.version.encode(), suffix.encode(), " ".join(compiler).encode(),
                                         " ".join(_FLAGS).encode()])).hexdigest()[:20]
        target = cache_dir() / key / f"{name.rpartition('.')[2]}{suffix}"
        includes = [include, *map(str, include_dirs)]
        if not target.exists():
            _build(compiler, source, includes, target)
        try:
            module = _import(name, target)
        except NativeUnavailable:
            _build(compiler, source, includes, target)  # a damaged cache entry: built again, once
            module = _import(name, target)
        _loaded[name] = module
        return module


def _import(name: str, target: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, target)
    if spec is None or spec.loader is None:
        raise NativeUnavailable(f"cannot load {target}")
    try:
        module = importlib.util.module_from_spec(spec)  # (an extension is loaded here)
        spec.loader.exec_module(module)
    except ImportError as exc:
        raise NativeUnavailable(f"cannot load {target}: {exc}") from None
    return module


_FLAGS = ("-O2", "-shared", "-fPIC", "-fvisibility=hidden")


def _build(compiler: list[str], source: Path, includes: list[str], target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(suffix=target.suffix, dir=target.parent)
    os.close(handle)
    command = [*compiler, *_FLAGS, *(f"-I{i}" for i in includes), str(source), "-o", temporary]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=_COMPILE_TIMEOUT_S)
        if done.returncode != 0:
            raise NativeUnavailable(
                f"compiling {source.name} failed ({' '.join(command)}):\n{done.stderr.strip()[-2000:]}")
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temporary, 0o755 & ~umask)  # mkstemp made it private; a shared cache must be loadable
        os.replace(temporary, target)  # atomic: a concurrent build writes the same bytes
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NativeUnavailable(f"compiling {source.name} failed: {exc}") from None
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)


# The driver functions native launch paths call, as C function addresses.
class EntryPoints:
    """Addresses of ``cuLaunchKernel``, ``cuCtxGetCurrent``, ``cuCtxSetCurrent`` and
    ``cuStreamSynchronize`` of the driver in use (the real one, or a test driver's
    stand-ins)."""

    __slots__ = ("launch_kernel", "ctx_get_current", "ctx_set_current", "stream_synchronize", "_keep")

    def __init__(self, launch_kernel: int, ctx_get_current: int, ctx_set_current: int, stream_synchronize: int,
                 keep: Any = None) -> None:
        self.launch_kernel = launch_kernel
        self.ctx_get_current = ctx_get_current
        self.ctx_set_current = ctx_set_current
        self.stream_synchronize = stream_synchronize
        self._keep = keep  # whatever keeps the functions alive (ctypes callbacks)


_real_entry_points: EntryPoints | None = None


def entry_points() -> EntryPoints:
    """The C entry points of the driver in use: the CUDA driver library's own, or,
    under `cuda_core.testing.use_fake_driver`, the fake driver's (``native_entry_points``)."""
    global _real_entry_points
    api = _driver.api()
    provider = getattr(api, "native_entry_points", None)
    if callable(provider):
        points: EntryPoints = provider()
        return points
    if _real_entry_points is None:
        try:
            library = ctypes.CDLL("libcuda.so.1")
        except OSError as exc:
            raise NativeUnavailable(f"cannot open the CUDA driver library: {exc}") from None

        def address(symbol: str) -> int:
            value = ctypes.cast(getattr(library, symbol), ctypes.c_void_p).value
            if not value:
                raise NativeUnavailable(f"the CUDA driver library has no {symbol}")
            return value

        _real_entry_points = EntryPoints(address("cuLaunchKernel"), address("cuCtxGetCurrent"),
                                         address("cuCtxSetCurrent"), address("cuStreamSynchronize"), library)
    return _real_entry_points
