"""Building native extensions (cuda_core._native) and the driver entry points
native launch paths call, on the fake driver."""

from __future__ import annotations

import ctypes
import os
import stat
from pathlib import Path

import pytest

from cuda_core import _native, native
from cuda_core.testing import FakeDriver, use_fake_driver

_SOURCE = """
#include <Python.h>
static PyObject *answer(PyObject *m, PyObject *unused) { return PyLong_FromLong(%d); }
static PyMethodDef methods[] = {{"answer", answer, METH_NOARGS, NULL}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef def = {PyModuleDef_HEAD_INIT, "%s", NULL, -1, methods, NULL, NULL, NULL, NULL};
PyMODINIT_FUNC PyInit_%s(void) { return PyModule_Create(&def); }
"""


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    if not _native.enabled():
        pytest.skip("native code is turned off (CUDA_CORE_NATIVE=0)")
    monkeypatch.setenv("CUDA_CORE_NATIVE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _write(folder: Path, name: str, answer: int) -> Path:
    source = folder / f"{name}.c"
    source.write_text(_SOURCE % (answer, f"cuda_core_test.{name}", name))
    return source


def test_an_extension_is_built_once_then_loaded_from_the_cache(cache: Path, tmp_path: Path) -> None:
    source = _write(tmp_path, "first", 42)
    module = _native.load_extension("cuda_core_test.first", source)
    assert module.answer() == 42
    assert _native.load_extension("cuda_core_test.first", source) is module
    built = list(cache.rglob("first*.so"))
    assert len(built) == 1
    _native._loaded.pop("cuda_core_test.first")  # as a new process would: the cached file is loaded
    stamp = built[0].stat().st_mtime_ns
    assert _native.load_extension("cuda_core_test.first", source).answer() == 42
    assert built[0].stat().st_mtime_ns == stamp
    _native._loaded.pop("cuda_core_test.first")
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(built[0].stat().st_mode) == 0o755 & ~umask  # loadable by others sharing the cache


def test_a_damaged_cache_entry_is_built_again(cache: Path, tmp_path: Path) -> None:
    import subprocess
    import sys

    source = _write(tmp_path, "fourth", 4)
    build = f"from cuda_core import _native; from pathlib import Path; _native.load_extension('cuda_core_test.fourth', Path({str(source)!r}))"
    subprocess.run([sys.executable, "-c", build], check=True, env=dict(os.environ), timeout=120)
    (built,) = cache.rglob("fourth*.so")  # built by another process, never loaded in this one
    built.write_bytes(b"not a shared object")
    assert _native.load_extension("cuda_core_test.fourth", source).answer() == 4
    _native._loaded.pop("cuda_core_test.fourth")


def test_a_failing_build_says_why(cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    broken = tmp_path / "broken.c"
    broken.write_text("this is not C\n")
    with pytest.raises(_native.NativeUnavailable, match=r"(?s)compiling broken.c failed .*error: unknown type name"):
        _native.load_extension("cuda_core_test.broken", broken)
    assert not list(cache.rglob("*.so")) and not list(cache.rglob("*.tmp*"))  # nothing half-written left
    monkeypatch.setenv("CC", "/nonexistent/cc")
    with pytest.raises(_native.NativeUnavailable, match="CC='/nonexistent/cc' is not found"):
        _native.load_extension("cuda_core_test.second", _write(tmp_path, "second", 1))
    monkeypatch.delenv("CC")
    monkeypatch.setenv("CUDA_CORE_NATIVE", "0")
    with pytest.raises(_native.NativeUnavailable, match="turned off"):
        _native.load_extension("cuda_core_test.third", _write(tmp_path, "third", 1))


def test_the_fake_drivers_entry_points_record_launches_from_c() -> None:
    with use_fake_driver(FakeDriver()) as fake:
        fake.kernels["k"] = [(0, 8), (8, 4)]
        handle = int(fake.cuModuleGetFunction(1, b"k")[1])
        points = _native.entry_points()
        launch = ctypes.CFUNCTYPE(ctypes.c_int, *([ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3))(
            points.launch_kernel)
        pointer, count = ctypes.c_uint64(0xABC), ctypes.c_int32(7)
        params = (ctypes.c_void_p * 2)(ctypes.addressof(pointer), ctypes.addressof(count))
        assert launch(handle, 2, 1, 1, 128, 1, 1, 0, 0x1001, ctypes.addressof(params), None) == 0
        (record,) = fake.launches
        assert record["function"] == "k" and record["grid"] == (2, 1, 1) and record["stream"] == 0x1001
        assert record["params"] == [(0xABC).to_bytes(8, "little"), (7).to_bytes(4, "little")]
        set_current = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)(points.ctx_set_current)
        get_current = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)(points.ctx_get_current)
        assert set_current(0xC0) == 0
        out = ctypes.c_void_p()
        assert get_current(ctypes.addressof(out)) == 0 and out.value == 0xC0


def test_the_readme_names_every_variable_cuda_core_reads() -> None:
    import re

    root = Path(__file__).resolve().parents[3]
    source = "\n".join(p.read_text() for p in (root / "packages/cuda-core/src/cuda_core").glob("*.py"))
    read = set(re.findall(r"""environ(?:\.get)?[\[(]["']([A-Z_]+)["']""", source))
    assert {"CUDA_CORE_NATIVE", "CUDA_CORE_NATIVE_DIR", "CC"} <= read
    readme = (root / "README.md").read_text()
    assert not [name for name in read if f"`{name}`" not in readme]


def test_auto_builds_only_where_a_driver_library_is_and_no_layer_declined(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_native, "_not_needed", None)
    monkeypatch.setattr(_native, "_driver_library_probed", True)
    monkeypatch.setenv("CUDA_CORE_NATIVE", "auto")
    monkeypatch.setattr(_native, "_driver_library_error", None)  # a driver library loads
    assert _native._unwanted_reason() is None
    monkeypatch.setattr(_native, "_driver_library_error", "libcuda.so.1: cannot open shared object file")
    reason = _native._unwanted_reason()
    assert reason is not None and reason.startswith("no CUDA driver library here (libcuda.so.1: cannot open")
    monkeypatch.delenv("CUDA_CORE_NATIVE")  # (auto is the default)
    assert _native._unwanted_reason() == reason
    monkeypatch.setenv("CUDA_CORE_NATIVE", "1")  # asked for: built anyway
    assert _native._unwanted_reason() is None
    monkeypatch.setenv("CUDA_CORE_NATIVE", "auto")
    monkeypatch.setattr(_native, "_driver_library_error", None)
    native.not_needed("a CPU backend")
    assert _native._unwanted_reason() == "not needed in this process (a CPU backend; CUDA_CORE_NATIVE=1 uses it anyway)"
    with pytest.raises(_native.NativeUnavailable, match=r"not needed in this process \(a CPU backend"):
        native.load_extension("cuda_core_test.declined", Path(__file__))
    monkeypatch.setenv("CUDA_CORE_NATIVE", "0")
    assert _native._unwanted_reason() == "native code is turned off (CUDA_CORE_NATIVE=0)"
