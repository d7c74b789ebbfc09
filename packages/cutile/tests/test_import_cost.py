"""What ``import cutile`` and the interpreter backend must not do (import the
compiler's front end, op registry, lowering or toolchain run, cutile_ir's builder,
``cuda.bindings`` or torch; build or load a native extension), what loads them on
first use, and that the GPU backend still takes the native launch path where native
code is wanted."""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cuda_core import native
from fake_add_script import FAKE_ADD_PRELUDE

_INTERPRETER_SCRIPT = """
import json, sys
import numpy as np
import cutile
from cutile import _native, api
from cutile.core import Mut, Tensor, f32, load_tile_like

@cutile.entry
def twice(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    z.store(load_tile_like(x, z) + load_tile_like(x, z))

values = np.random.default_rng(7).standard_normal(384).astype(np.float32)
x = api.from_numpy(values)
z = api.full([384], float("nan"), dtype=f32).partition([128])
(z, _) = twice(z, x).sync()
assert np.array_equal(z.unpartition().to_numpy().astype(np.float64), values.astype(np.float64) * 2), "wrong result"
print(json.dumps({"backend": cutile.backend(), "reason": _native.unavailable_reason(),
                  "bindings": "cuda.bindings.driver" in sys.modules,
                  "native": sorted(m for m in sys.modules if m.endswith(("_native_batch", "_native_launch")))}))
"""


#: modules ``import cutile`` leaves to their first use (a package stands for its submodules)
DEFERRED = (
    "cutile_compiler._builtins", "cutile_compiler._opdefs", "cutile_compiler._frontend", "cutile_compiler._lowering",
    "cutile_compiler._pipeline", "cutile_compiler._warm", "cutile_compiler._mapped", "cutile_compiler._source",
    "cutile_ir._builder", "cutile_ir._ops", "cutile_ir._verifier", "cutile_ir._printer", "cutile_ir._attributes",
    "cutile_ir._bytecode_reader", "cutile_ir._bytecode_writer", "cutile._interpreter",
    "cuda.bindings", "torch",
)
#: of those, what the first ``@cutile.entry`` loads (a kernel's compiler: a warm start needs no more)
AT_FIRST_KERNEL = {"cutile_compiler._pipeline", "cutile_compiler._warm"}

_LOADED = """
def loaded():
    return sorted(m for m in sys.modules if any(m == d or m.startswith(d + ".") for d in {deferred!r}))
"""

_IMPORT_SCRIPT = """
import json, sys
""" + _LOADED + """
import cutile
from cutile import api
from cutile.core import Mut, Tensor, f32
import cutile.core as ct

after_import = loaded()

@cutile.entry
def twice(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    z.store(ct.load_tile_like(x, z) * 2)

after_kernel = loaded()
dsl_function = ct.load_tile_like  # the language's DSL functions: the registry
after_dsl = loaded()
x = api.from_numpy(__import__("numpy").arange(256, dtype="float32"))
z = api.zeros([256], dtype=f32).partition([128])
(z, _) = twice(z, x).sync()  # an interpreter run: the front end
assert z.unpartition().to_numpy()[255] == 510.0
print(json.dumps({{"import": after_import, "kernel": after_kernel, "dsl": after_dsl, "run": loaded()}}))
"""


def _run(script: str, folder: Path, **settings: str | None) -> dict[str, object]:
    """Runs ``script`` (written into ``folder``: kernels need a source file) with
    the environment changed by ``settings`` (None: unset); its last line, as JSON."""
    path = folder / "script.py"
    path.write_text(script)
    env = dict(os.environ)
    for name, value in settings.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    done = subprocess.run([sys.executable, str(path)], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_import_cutile_leaves_the_compiler_bindings_and_torch_to_their_first_use(tmp_path: Path) -> None:
    result = _run(_IMPORT_SCRIPT.format(deferred=DEFERRED), tmp_path, CUTILE_BACKEND="interpreter")
    # importing cutile, its language and api loads none of them
    assert result["import"] == []
    # the first kernel makes its compiler: the pipeline and the warm start, no front end
    assert set(result["kernel"]) == AT_FIRST_KERNEL
    # the first DSL function asked for loads the op registry (and what it declares with)
    assert {"cutile_compiler._builtins", "cutile_compiler._opdefs"} <= set(result["dsl"])
    assert "cutile_compiler._frontend" not in result["dsl"]
    # the first run loads the front end and the interpreter, still without bindings or torch
    assert {"cutile_compiler._frontend", "cutile._interpreter"} <= set(result["run"])
    assert not [m for m in result["run"] if m.startswith(("cuda.bindings", "torch"))]


def test_the_lazy_exports_are_the_declared_ones() -> None:
    # Each package's ``__getattr__`` serves exactly the names of its ``__all__``,
    # every one resolving (the imports under TYPE_CHECKING are the one declaration).
    import cutile_compiler
    import cutile_ir

    for package in (cutile_ir, cutile_compiler):
        exports = package._EXPORTS  # type: ignore[attr-defined]
        assert set(exports) == set(package.__all__), package.__name__
        for name in package.__all__:
            getattr(package, name)  # imports its module (an absent name raises)
            assert name in vars(package), name  # and keeps it: later reads are plain lookups
        assert set(package.__all__) <= set(dir(package))
        with pytest.raises(AttributeError, match=f"module '{package.__name__}' has no attribute 'no_such_name'"):
            getattr(package, "no_such_name")
    # The two packages' helpers are one text (neither may import the other's privates).
    sources = [Path(package.__file__).with_name("_lazy.py").read_text() for package in (cutile_ir, cutile_compiler)]
    assert sources[0].replace("cutile_ir", "cutile_compiler") == sources[1]


def _built_cache() -> Path:
    """The native cache of this test session, with both extensions built in it."""
    import cuda_async
    from cutile import _native

    if not native.enabled():
        pytest.skip("native code is turned off (CUDA_CORE_NATIVE=0)")
    cuda_async.native_batch_api()  # (required where a compiler is: test_native.py says why not)
    assert _native.load() is not None, _native.unavailable_reason()
    folder = native.cache_dir()
    assert any(folder.rglob("_native_launch*")), folder
    return folder


def test_the_interpreter_backend_neither_builds_nor_loads_native_code(tmp_path: Path) -> None:
    # A cache holding both extensions: CUTILE_BACKEND=interpreter does not even load them.
    result = _run(_INTERPRETER_SCRIPT, tmp_path, CUTILE_BACKEND="interpreter", CUDA_CORE_NATIVE=None,
                  CUDA_CORE_NATIVE_DIR=str(_built_cache()))
    assert result["backend"] == "interpreter"
    assert result["native"] == [] and result["bindings"] is False
    assert "not loaded yet" in str(result["reason"])  # (not even tried)
    # An empty cache and a compiler that cannot run: nothing is compiled (nor tried).
    empty = tmp_path / "native"
    result = _run(_INTERPRETER_SCRIPT, tmp_path, CUTILE_BACKEND="interpreter", CUDA_CORE_NATIVE=None,
                  CUDA_CORE_NATIVE_DIR=str(empty), CC="/nonexistent/cc")
    assert result["native"] == [] and not empty.exists()
    assert "not loaded yet" in str(result["reason"])


def _driver_library_loads() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


@pytest.mark.skipif(_driver_library_loads(), reason="a CUDA driver library is here: auto builds native code")
def test_auto_without_a_driver_library_builds_and_loads_nothing(tmp_path: Path) -> None:
    empty = tmp_path / "native"
    result = _run(_INTERPRETER_SCRIPT, tmp_path, CUTILE_BACKEND=None, CUDA_CORE_NATIVE=None, CUDA_CORE_NATIVE_DIR=str(empty),
                  CC="/nonexistent/cc")
    assert result["backend"] == "interpreter"  # (auto, no GPU)
    assert result["native"] == [] and not empty.exists()
    assert "not loaded yet" in str(result["reason"])  # (not even tried: the interpreter)
    # The cache built: still not loaded where no GPU can use it.
    result = _run(_INTERPRETER_SCRIPT, tmp_path, CUTILE_BACKEND=None, CUDA_CORE_NATIVE=None,
                  CUDA_CORE_NATIVE_DIR=str(_built_cache()))
    assert result["native"] == []


_FAKE_GPU_SCRIPT = """
import json, sys
""" + FAKE_ADD_PRELUDE + """
with use_fake_driver() as fake:
    _backend.reset_for_tests("gpu")
    with cuda_async.using_policy(cuda_async.SingleStream()):
        z, x, first = first_add(fake)
        del first
        with cutile.batch():
            for _ in range(10):
                z, x = add(z, x).sync()
        armed = add._native_binding is not None
        launches = len(fake.launches)
        del z, x
        add.clear_cache()
print(json.dumps({"reason": _native.unavailable_reason(), "armed": armed, "launches": launches,
                  "stats": list(_native.module.stats()) if _native.module else None}))
"""


def test_the_gpu_backend_on_the_fake_driver_takes_the_native_path(tmp_path: Path) -> None:
    result = _run(_FAKE_GPU_SCRIPT, tmp_path, CUDA_CORE_NATIVE="1", CUDA_CORE_NATIVE_DIR=str(_built_cache()),
                  CUTILE_BACKEND="gpu")
    # (the first launch runs in Python, loads the module and arms the binding; the nine after it are C's)
    assert result == {"reason": None, "armed": True, "launches": 10, "stats": [9, 9]}


_FIRST_USE_SCRIPT = """
import json, os, sys
from pathlib import Path

def native_modules():
    return sorted(m for m in sys.modules if m.endswith(("_native_batch", "_native_launch")))

def cached():
    return sorted(p.name for p in Path(os.environ["CUDA_CORE_NATIVE_DIR"]).rglob("*") if p.is_file())

import cutile_kernels
""" + FAKE_ADD_PRELUDE + """
report = {"import": native_modules(), "import_cache": cached(), "reason": _native.unavailable_reason()}

with use_fake_driver() as fake:
    _backend.reset_for_tests("gpu")
    with cuda_async.using_policy(cuda_async.SingleStream()):
        z, x, launch = first_add(fake)
        report["before_run"] = native_modules()
        z, x = launch.sync()  # the first launch run on the GPU backend: built, loaded, armed
        report["first_run"] = native_modules()
        report["cache"] = len(cached())
        before = _native.module.stats()
        for _ in range(5):
            z, x = add(z, x).sync()
        after = _native.module.stats()
        report["native"] = [after[0] - before[0], after[1] - before[1]]
        report["launches"] = len(fake.launches)
        del z, x, launch
        add.clear_cache()
print(json.dumps(report))
"""


def test_native_code_is_built_and_loaded_at_the_first_gpu_launch_not_at_import(tmp_path: Path) -> None:
    if not native.enabled():
        pytest.skip("native code is turned off (CUDA_CORE_NATIVE=0)")
    cache = tmp_path / "native"
    result = _run(_FIRST_USE_SCRIPT, tmp_path, CUDA_CORE_NATIVE="1", CUDA_CORE_NATIVE_DIR=str(cache),
                  CUTILE_BACKEND="gpu")
    # importing cutile and its kernel library, and a kernel's first call: nothing built or loaded
    assert result["import"] == [] and result["import_cache"] == [] and result["before_run"] == []
    assert "not loaded yet" in str(result["reason"])
    # the first run builds both extensions (into the cache) and loads them; the kernel
    # made before then takes the C path from its next call on: 5 launches made and run in C
    assert result["first_run"] == ["cuda_async._native_batch", "cutile._native_launch"]
    assert result["cache"] == 2
    assert result["native"] == [5, 5] and result["launches"] == 6
