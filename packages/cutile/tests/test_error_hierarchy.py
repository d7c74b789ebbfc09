"""One family of errors: every exception class cutile and its compiler define is a
`CutileError` exported by `cutile` (but for the few that never leave the package),
and the README's table lists exactly the exported classes."""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
import re
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

import cuda_async
import cuda_core
import cutile
import cutile_compiler
from cutile import api
from cutile.core import Mut, Tensor, f32, load_tile_like

README = Path(cutile.__file__).resolve().parents[2] / "README.md"

# Classes that never reach a user of either package, with where they end.
INTERNAL = {
    "cutile_compiler._opdefs._base.RuleError": "an op's typing rule; the front end raises it as a TileTypeError",
    "cutile_compiler._opdefs._base.Escape": "carries break/continue/return out of a nested block (control flow)",
    "cutile_compiler._config._Invalid": "a parser's complaint; Knob.get raises it as a ConfigError",
    "cutile_compiler._frontend._Retry": "the front end's retry of a loop (control flow)",
    "cutile_compiler._cache._Damaged": "a damaged disk-cache entry; DiskCache.get counts it as a miss",
    "cutile_compiler._warm.NotWarmCacheable": "a read a new process could not check; KernelCompiler writes no manifest",
    "cutile_compiler._cubin._NotACubin": "what cubin_problem finds; it returns it as text (a TileirasError's reason)",
    "cutile_compiler._opdefs._base.IntegerDivisionByZero": "an op's numpy meaning; the interpreter raises it as a KernelRuntimeError",
}


def _modules(package: ModuleType) -> list[ModuleType]:
    found = [package]
    for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        if info.name == "cutile.mypy_plugin" and importlib.util.find_spec("mypy") is None:
            continue  # mypy's plugin needs mypy (absent on the GPU machine); it defines no error class
        if info.name == "cutile.torch" and importlib.util.find_spec("torch") is None:
            continue  # the PyTorch integration needs torch (an optional interop); it defines no error class
        found.append(importlib.import_module(info.name))
    return found


def _defined_exceptions() -> dict[str, type[BaseException]]:
    classes: dict[str, type[BaseException]] = {}
    for package in (cutile, cutile_compiler):
        for module in _modules(package):
            for value in vars(module).values():
                if (isinstance(value, type) and issubclass(value, BaseException) and not issubclass(value, Warning)
                        and value.__module__ == module.__name__):
                    classes[f"{value.__module__}.{value.__qualname__}"] = value
    return classes


def _exported_exceptions() -> set[str]:
    return {name for name in cutile.__all__
            if isinstance(getattr(cutile, name), type) and issubclass(getattr(cutile, name), BaseException)
            and not issubclass(getattr(cutile, name), Warning)}


def test_every_error_class_is_a_cutile_error_exported_by_cutile() -> None:
    classes = _defined_exceptions()
    assert "cutile_compiler._toolchain.TileirasError" in classes and "cutile._errors.LaunchError" in classes
    assert set(INTERNAL) <= set(classes), "an internal class is gone: update INTERNAL"
    for qualified, cls in classes.items():
        if qualified in INTERNAL:
            continue
        assert issubclass(cls, cutile.CutileError), f"{qualified} is not a CutileError"
        assert getattr(cutile, cls.__name__, None) is cls and cls.__name__ in cutile.__all__, \
            f"{qualified} is not exported by cutile"


def test_one_compiler_error_base_and_the_builtins_still_catch() -> None:
    from cutile_compiler import _toolchain

    assert not hasattr(_toolchain, "CompilerError")  # one base, one name
    for cls in (cutile.ToolchainError, cutile.ArchError, cutile.TileirasError, cutile.TileirasTimeoutError):
        assert issubclass(cls, cutile.TileCompilerError) and issubclass(cls, cutile.TileError)
    for cls, builtin in [(cutile.ConfigError, ValueError), (cutile.HintError, ValueError),
                         (cutile.ArchError, ValueError), (cutile.LaunchError, ValueError),
                         (cutile.InteropError, TypeError), (cutile.SignatureError, TypeError),
                         (cutile.OwnershipError, cuda_async.OwnershipError),
                         (cutile.GraphCaptureError, cuda_async.GraphCaptureError),
                         (cutile.BatchError, cuda_async.BatchError)]:
        assert issubclass(cls, cutile.CutileError) and issubclass(cls, builtin), cls
    # The driver's errors are cuda_core's own family, exported by cutile as they are.
    assert cutile.CudaError is cuda_core.CudaError and not issubclass(cutile.CudaError, cutile.CutileError)
    assert issubclass(cutile.CudaOutOfMemoryError, MemoryError)


def _readme_table() -> list[str]:
    text = README.read_text()
    section = text[text.index("## Errors"):]
    section = section[:section.index("\n## ")] if "\n## " in section[3:] else section
    return re.findall(r"^\| `(\w+)` \|", section, re.MULTILINE)


def test_the_readme_table_lists_exactly_the_exported_classes() -> None:
    rows = _readme_table()
    assert len(rows) == len(set(rows)), "a class has two rows"
    assert set(rows) == _exported_exceptions()


def test_errors_of_the_environment_and_hints_are_cutile_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    from cutile_compiler import _config
    from cutile_compiler._hints import KernelHints

    monkeypatch.setenv("CUTILE_CACHE_MAX_BYTES", "lots")
    with pytest.raises(cutile.ConfigError, match="CUTILE_CACHE_MAX_BYTES='lots'") as info:
        _config.CACHE_MAX_BYTES.get()
    assert isinstance(info.value, cutile.CutileError) and isinstance(info.value, ValueError)
    with pytest.raises(cutile.CutileError, match="unknown hint 'warps'"):
        KernelHints.parse({"warps": 4}, "test")


@cutile.entry
def double(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    z.store(load_tile_like(x, z) * 2)


def test_the_toolchain_error_reaches_the_user_with_its_class() -> None:
    x = api.from_numpy(np.zeros(256, np.float32))
    with pytest.raises(cutile.ArchError, match="arch 'hopper' is not a GPU name tileiras accepts") as info:
        cutile.compile(double, api.meta([256]).partition([128]), x, arch="hopper")
    assert isinstance(info.value, cutile.TileCompilerError) and isinstance(info.value, ValueError)


@pytest.mark.parametrize("arch", ["sm90", "sm_", "hopper", "sm_9x"])
def test_a_malformed_arch_gets_the_compilers_one_message_in_cutile(arch: str) -> None:
    expected = str(pytest.raises(cutile.ArchError, cutile_compiler.parse_arch, arch).value)
    x = api.from_numpy(np.zeros(256, np.float32))
    with pytest.raises(cutile.ArchError) as compiled:
        cutile.compile(double, api.meta([256]).partition([128]), x, arch=arch)
    assert str(compiled.value) == expected
    keyed = expected.replace("arch ", "hints key ", 1)
    with pytest.raises(cutile.SignatureError) as entry:
        cutile.entry(hints={arch: {"occupancy": 2}})(double.function)
    assert str(entry.value) == f"@cutile.entry of double: {keyed}"
    z = api.from_numpy(np.zeros(256, np.float32)).partition([128])
    with pytest.raises(cutile.LaunchError) as launch:
        double(z, x).compile_options(hints={arch: {"occupancy": 2}})
    assert str(launch.value) == f"double.compile_options: {keyed}"


def _bad_calls() -> list[tuple[str, object, type[BaseException], type[BaseException]]]:
    from cutile_compiler import TensorSpec
    from cutile_compiler._cache import DiskCache, LRUCache
    from cutile_compiler._toolchain import CompileOptions
    from cutile.core import bool_, f16

    t = api.arange(12, dtype=f32)
    return [
        ("a negative shape", lambda: api.zeros([-1]), cutile.ArgumentError, ValueError),
        ("an arange step of 0", lambda: api.arange(0, 4, 0), cutile.ArgumentError, ValueError),
        ("a fill value overflowing f16", lambda: api.full([4], 1e6, f16), cutile.ArgumentError, ValueError),
        ("a bool fill value of 5", lambda: api.full([4], 5, bool_), cutile.ArgumentError, ValueError),
        ("randn of an int dtype", lambda: api.randn([4], dtype=np.int32), cutile.ArgumentTypeError, TypeError),
        ("a seed of another kind", lambda: api.rand([4], seed="s"), cutile.ArgumentTypeError, TypeError),
        ("an unknown dtype", lambda: api.zeros([4], dtype=object), cutile.ArgumentTypeError, TypeError),
        ("a reshape of the wrong size", lambda: t.reshape(5), cutile.ArgumentError, ValueError),
        ("two -1 in a reshape", lambda: t.reshape(-1, -1), cutile.ArgumentError, ValueError),
        ("a permute that is no permutation", lambda: t.reshape(3, 4).permute(0, 0), cutile.ArgumentError, ValueError),
        ("an index out of bounds", lambda: t[12], cutile.TensorIndexError, IndexError),
        ("too many indices", lambda: t[1, 2], cutile.TensorIndexError, IndexError),
        ("an index of another kind", lambda: t["a"], cutile.TensorIndexError, IndexError),
        ("a partition tile not a power of two", lambda: api.zeros([12]).partition([3]), cutile.LaunchError, ValueError),
        ("compile of a plain function", lambda: cutile.compile(print), cutile.ArgumentTypeError, TypeError),
        ("an opt_level of 7", lambda: CompileOptions(opt_level=7), cutile.ArgumentError, ValueError),
        ("a bad TensorSpec fact", lambda: TensorSpec(f32, (4,), base_divisibility=3), cutile.ArgumentError, ValueError),
        ("an LRU cache of size 0", lambda: LRUCache(0), cutile.ArgumentError, ValueError),
        ("a disk-cache key that is no key", lambda: DiskCache("/nonexistent", 10).path("k"), cutile.ArgumentError,
         ValueError),
    ]


BAD_CALLS = _bad_calls()


@pytest.mark.parametrize("what, call, cls, builtin", BAD_CALLS, ids=[c[0] for c in BAD_CALLS])
def test_a_bad_argument_outside_kernels_is_a_cutile_error(what: str, call: object, cls: type[BaseException],
                                                          builtin: type[BaseException]) -> None:
    """Each is the family's class and still the builtin callers caught before."""
    with pytest.raises(cls) as info:
        call()  # type: ignore[operator]
    assert isinstance(info.value, cutile.CutileError) and isinstance(info.value, builtin)
