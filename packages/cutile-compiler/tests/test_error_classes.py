"""The toolchain's errors are `TileCompilerError`s and reach the caller of a compile
with their own class, placed at the kernel."""

from typing import Any

import pytest

from cutile_compiler import TensorSpec, compile_kernel, parse_signature, specialize
from cutile_compiler import _dtypes as dt
from cutile_compiler._errors import CutileError, TileCompilerError
from cutile_compiler._toolchain import ArchError, TileirasError, ToolchainError
from cutile_compiler.language import Mut, Tensor, f32, load_tile_like


def double(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    z.store(load_tile_like(x, z) * 2)


def _compile(arch: str = "sm_90") -> Any:
    signature = parse_signature(double)
    spec = specialize(signature, "double", {"z": TensorSpec(dt.f32, (1000,), (128,)), "x": TensorSpec(dt.f32, (1000,))})
    return compile_kernel(double, signature, spec, arch)


def test_a_failing_tileiras_is_a_tileiras_error_at_the_kernel(fake_toolkit: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    root = fake_toolkit("failing", compile="echo 'error: boom' >&2; exit 3")
    monkeypatch.setenv("CUTILE_TILEIRAS", str(root / "bin" / "tileiras"))
    with pytest.raises(TileirasError, match=r"(?s)kernel double: .*exit code 3") as info:
        _compile()
    error = info.value
    assert isinstance(error, TileCompilerError) and isinstance(error, CutileError)
    assert error.returncode == 3 and "boom" in error.stderr  # the toolchain's attributes survive
    assert error.location is not None and error.location.line == double.__code__.co_firstlineno
    assert str(error).startswith(f"{error.location}: kernel double: ")


def test_no_toolchain_and_a_bad_arch_keep_their_classes(fake_toolkit: Any, monkeypatch: pytest.MonkeyPatch,
                                                        tmp_path: Any) -> None:
    monkeypatch.setenv("CUTILE_TILEIRAS", str(tmp_path / "missing" / "tileiras"))
    with pytest.raises(ToolchainError, match="CUTILE_TILEIRAS=") as missing:
        _compile()
    assert isinstance(missing.value, TileCompilerError)
    root = fake_toolkit("good")
    monkeypatch.setenv("CUTILE_TILEIRAS", str(root / "bin" / "tileiras"))
    with pytest.raises(ArchError, match="sm_900") as arch:
        _compile("sm_900")
    assert isinstance(arch.value, TileCompilerError) and isinstance(arch.value, ValueError)
