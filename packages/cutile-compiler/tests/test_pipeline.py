"""The whole compile of one specialization: dumps, timings, the in-memory result."""

from pathlib import Path
from typing import Any

import pytest

import cutile_ir as ir
from cutile_compiler import TensorSpec, compile_kernel, parse_signature, specialize
from cutile_compiler._errors import TileCompilerError
from cutile_compiler import _dtypes as dt
from cutile_compiler.language import Mut, Tensor, f32, load_tile_like


def add(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]], y: Tensor[f32, [-1]]):
    z.store(load_tile_like(x, z) + load_tile_like(y, z))


def compiled_add(block: int = 128):
    signature = parse_signature(add)
    spec = specialize(signature, "add", {"z": TensorSpec(dt.f32, (1024,), (block,)),
                                         "x": TensorSpec(dt.f32, (1024,)), "y": TensorSpec(dt.f32, (1024,))})
    return compile_kernel(add, signature, spec, "sm_90")


def test_dumps_every_stage_and_reports_timings(real_toolchain: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("CUTILE_DUMP", "all")
    monkeypatch.setenv("CUTILE_DUMP_DIR", str(tmp_path))
    monkeypatch.setenv("CUTILE_JIT_TIMING", "1")
    monkeypatch.setenv("CUTILE_CACHE_DIR", str(tmp_path / "cache"))
    compiled = compiled_add(256)
    assert set(compiled.timings) == {"frontend", "tileiras"} and all(t > 0 for t in compiled.timings.values())
    files = {p.suffixes[-1] if p.suffixes[-1] != ".txt" else p.suffixes[-2] for p in tmp_path.iterdir() if p.is_file()}
    assert files == {".ast", ".ir", ".mlir", ".tileirbc"}
    dumped_bytecode = next(tmp_path.glob("*.tileirbc")).read_bytes()
    assert dumped_bytecode == compiled.bytecode
    assert "tile_store" in next(tmp_path.glob("*.ir.txt")).read_text()
    assert "entry @add" in next(tmp_path.glob("*.mlir")).read_text()
    err = capsys.readouterr().err
    assert "cutile: add for sm_90: front end" in err and "tileiras" in err
    compiled_add(256)  # the second compile of the same bytecode comes from the disk cache
    assert "disk cache" in capsys.readouterr().err


def test_the_result_reads_back_and_names_its_entry_parameters(real_toolchain: object) -> None:
    compiled = compiled_add()
    assert compiled.cubin.startswith(b"\x7fELF")
    module = ir.read_bytecode(compiled.bytecode)
    assert [f.name for f in module.functions] == ["add"]
    assert [(a.param, a.kind) for a in compiled.abi] == [
        ("z", "pointer"), ("z", "dim"), ("x", "pointer"), ("x", "dim"), ("y", "pointer"), ("y", "dim")]
    assert "tile_load" in compiled.ir_text and "entry @add" in compiled.mlir


@pytest.mark.parametrize("failure, expected", [
    # Exit 5 and nothing else: the toolchain explains what usually causes it.
    ("echo 'error: failed to compile Tile IR program' >&2; exit 5", r"exit code 5 .*CUDA_HOME"),
    # Stopped at its timeout: the message names the limit and the knob.
    ("$SLEEP 5", r"CUTILE_TILEIRAS_TIMEOUT"),
])
def test_a_failing_tileiras_is_reported_with_the_toolchains_explanation(
        fake_toolkit: Any, monkeypatch: pytest.MonkeyPatch, failure: str, expected: str) -> None:
    root = fake_toolkit("failing", compile=failure)
    monkeypatch.setenv("CUTILE_TILEIRAS", str(root / "bin" / "tileiras"))
    monkeypatch.setenv("CUTILE_TILEIRAS_TIMEOUT", "1")
    with pytest.raises(TileCompilerError, match=r"(?s)kernel add: .*" + expected) as info:
        compiled_add()
    assert "command (its temporary files are deleted)" in str(info.value) or "timeout" in str(info.value).lower()
