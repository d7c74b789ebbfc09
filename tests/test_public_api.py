"""Each package's public surface, the one the layers above use (tests/test_layering.py
checks they use nothing else): every name a public module lists in ``__all__`` exists,
and every class, function and module among them says what it is in its own docstring."""

from __future__ import annotations

import importlib
import inspect
import types

import pytest

PUBLIC_MODULES = (
    "cuda_core", "cuda_core.native", "cuda_async", "cutile_ir", "cutile_compiler", "cutile_compiler.dtypes",
    "cutile_compiler.config", "cutile_compiler.language", "cutile_kernels",
)


def undocumented(module: types.ModuleType) -> list[str]:
    missing = []
    for name in module.__all__:
        value = getattr(module, name)
        if not (inspect.isclass(value) or inspect.isfunction(value) or isinstance(value, types.ModuleType)):
            continue
        doc = (value.__doc__ or "").strip()
        if inspect.isclass(value) and doc.startswith(f"{value.__name__}("):  # a dataclass's generated one
            doc = ""
        if not doc:
            missing.append(name)
    return missing


@pytest.mark.parametrize("name", PUBLIC_MODULES)
def test_every_public_name_exists_and_is_documented(name: str) -> None:
    module = importlib.import_module(name)
    assert (module.__doc__ or "").strip(), f"{name} has no docstring"
    absent = [item for item in module.__all__ if not hasattr(module, item)]
    assert not absent, f"{name}.__all__ lists what it does not define: {absent}"
    assert len(set(module.__all__)) == len(module.__all__)
    missing = undocumented(module)
    assert not missing, f"{name} exports without a docstring: {missing}"


def test_the_checker_sees_an_undocumented_export() -> None:
    module = types.ModuleType("m", "a module")

    def bare() -> None: ...

    class Documented:
        """Says what it is."""

    module.bare, module.Documented = bare, Documented  # type: ignore[attr-defined]
    module.__all__ = ["bare", "Documented"]  # type: ignore[attr-defined]
    assert undocumented(module) == ["bare"]


def test_the_runtime_and_the_compiler_share_one_dtype_table() -> None:
    import cutile_compiler
    import cutile.core
    from cutile_compiler import _dtypes, dtypes

    assert dtypes.f32 is _dtypes.f32 is cutile.core.f32 and cutile_compiler.DType is _dtypes.DType
    assert cutile_compiler.numpy_dtype(dtypes.bf16).name == "bfloat16"
