"""The whole compile of one specialization: dumps, timings, the in-memory result."""

import logging
import time
from pathlib import Path
from typing import Any

import pytest

import cutile_ir as ir
from cutile_compiler import _pipeline
from cutile_compiler import TensorSpec, compile_kernel, parse_signature, specialize
from cutile_compiler._errors import TileCompilerError
from cutile_compiler import _dtypes as dt
from cutile_compiler._builtins import DeviceFunction
from cutile_compiler.language import Mut, Tensor, f8e4m3fn, f32, i32, load_tile_like


def add(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]], y: Tensor[f32, [-1]]):
    z.store(load_tile_like(x, z) + load_tile_like(y, z))


def compiled_add(block: int = 128):
    signature = parse_signature(add)
    spec = specialize(signature, "add", {"z": TensorSpec(dt.f32, (1024,), (block,)),
                                         "x": TensorSpec(dt.f32, (1024,)), "y": TensorSpec(dt.f32, (1024,))})
    return compile_kernel(add, signature, spec, "sm_90")


def test_dumps_every_stage_and_reports_timings(real_toolchain: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               caplog: pytest.LogCaptureFixture) -> None:
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
    # requested notes are warnings of the cutile.compiler logger (on stderr by default)
    notes = [(r.name, r.levelno, r.getMessage()) for r in caplog.records]
    assert {(name, level) for name, level, _ in notes} == {("cutile.compiler", logging.WARNING)}
    assert sum(text.startswith("cutile: dumped ") for _, _, text in notes) == 4
    timing = [text for _, _, text in notes if text.startswith("cutile: add for sm_90: front end")]
    assert len(timing) == 1 and " ms, tileiras " in timing[0]
    caplog.clear()
    compiled_add(256)  # the second compile of the same bytecode comes from the disk cache
    assert any(" ms, disk cache " in r.getMessage() for r in caplog.records)


def test_compile_timings_are_debug_records_unless_asked_for(real_toolchain: object, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("CUTILE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("CUTILE_JIT_TIMING", raising=False)
    monkeypatch.setattr(_pipeline, "SLOW_COMPILE_NOTE_S", 3600.0)  # (a loaded machine's compile is no slow one)
    compiled_add(512)
    assert not [r for r in caplog.records if r.name.startswith("cutile")]  # nothing at the default level
    with caplog.at_level(logging.DEBUG, logger="cutile"):
        compiled_add(512)
    timing = [r for r in caplog.records if r.getMessage().startswith("cutile: add for sm_90: front end")]
    assert len(timing) == 1 and timing[0].levelno == logging.DEBUG
    caplog.clear()
    monkeypatch.setenv("CUTILE_JIT_TIMING", "1")
    logging.getLogger("cutile").setLevel(logging.ERROR)  # the application's opt-out silences asked-for notes too
    try:
        compiled_add(512)
    finally:
        logging.getLogger("cutile").setLevel(logging.NOTSET)
    assert not [r for r in caplog.records if r.name.startswith("cutile")]


def _slowed_compile(monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
    """Makes every tileiras compile (or disk-cache lookup) take ``seconds`` longer."""
    real = _pipeline.cached_compile

    def slow(*args: Any, **kwargs: Any) -> Any:
        time.sleep(seconds)
        return real(*args, **kwargs)

    monkeypatch.setattr(_pipeline, "cached_compile", slow)


def test_a_slow_compile_says_so_once_while_it_runs(real_toolchain: object, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("CUTILE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("CUTILE_JIT_TIMING", raising=False)
    monkeypatch.setattr(_pipeline, "SLOW_COMPILE_NOTE_S", 0.2)
    _slowed_compile(monkeypatch, 0.6)
    compiled_add(256)
    notes = [(r.name, r.levelno, r.getMessage()) for r in caplog.records if r.name.startswith("cutile")]
    assert notes == [("cutile.compiler", logging.WARNING, "cutile: compiling add for sm_90\u2026")]
    caplog.clear()
    monkeypatch.setattr(_pipeline, "SLOW_COMPILE_NOTE_S", 3600.0)  # a compile under the threshold: nothing
    compiled_add(256)
    time.sleep(0.1)
    assert not [r for r in caplog.records if r.name.startswith("cutile")]


_SLOW_COMPILE_SCRIPT = """
import time
from cutile_compiler import _pipeline
import test_pipeline

real = _pipeline.cached_compile
_pipeline.cached_compile = lambda *a, **k: (time.sleep(0.6), real(*a, **k))[1]
_pipeline.SLOW_COMPILE_NOTE_S = 0.2
test_pipeline.compiled_add(128)
print("compiled")
"""


def test_a_slow_compile_note_shows_without_any_logging_setup(real_toolchain: object, tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    env = dict(os.environ, CUTILE_CACHE_DIR=str(tmp_path / "cache"),
               PYTHONPATH=os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]))
    env.pop("CUTILE_JIT_TIMING", None)
    done = subprocess.run([sys.executable, "-c", _SLOW_COMPILE_SCRIPT], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "compiled"
    assert done.stderr.strip() == "cutile: compiling add for sm_90\u2026"  # one line, from Python's default handler


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


# -- a tileiras rejection points at the op it names -------------------------------------------
@DeviceFunction
def squash(t):  # type: ignore[no-untyped-def]
    narrow = t.astype(f8e4m3fn)  # <- squash
    return narrow.astype(f32)


def via_f8(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]], n: i32):
    t = load_tile_like(x, z) * 2.0
    u = t.astype(f8e4m3fn)  # <- body op
    t = u.astype(f32)
    for i in range(n):
        if i > 2:
            t = squash(t)
    z.store(t)


def via_device_function(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]], n: i32):
    t = load_tile_like(x, z)
    for i in range(n):
        if i > 2:
            t = squash(t)
    z.store(t)


def f8_output(x: Tensor[f32, [-1]],
              z: Mut[Tensor[f8e4m3fn, ["B"]]]):  # <- parameter
    z.store(load_tile_like(x, z).astype(f8e4m3fn))


def _line(marker: str) -> int:
    lines = Path(__file__).read_text().splitlines()
    return next(number for number, text in enumerate(lines, start=1) if text.rstrip().endswith(f"# <- {marker}"))


def _compile(function: Any, arch: str, z_dtype: dt.DType = dt.f32) -> Any:
    signature = parse_signature(function)
    arguments: dict[str, Any] = {"z": TensorSpec(z_dtype, (256,), (64,)), "x": TensorSpec(dt.f32, (256,))}
    if "n" in [p.name for p in signature.parameters]:
        arguments["n"] = dt.i32
    return compile_kernel(function, signature, specialize(signature, function.__name__, arguments), arch)


@pytest.mark.parametrize("function, z_dtype, marker, column, in_function", [
    (via_f8, dt.f32, "body op", "t.astype(f8e4m3fn)", "via_f8"),
    (via_device_function, dt.f32, "squash", "t.astype(f8e4m3fn)", "squash"),
    (f8_output, dt.f8e4m3fn, "parameter", "z: Mut", "f8_output"),
])
def test_a_tileiras_rejection_points_at_the_op_it_names(real_toolchain: object, function: Any, z_dtype: dt.DType,
                                                        marker: str, column: str, in_function: str) -> None:
    # sm_80 has no f8 type: tileiras refuses the first op (or entry view) that makes one.
    with pytest.raises(TileCompilerError) as info:
        _compile(function, "sm_80", z_dtype)
    error = info.value
    line = _line(marker)
    text = Path(__file__).read_text().splitlines()[line - 1]
    assert error.location is not None
    assert (error.location.line, error.location.column, error.location.function) == \
        (line, text.index(column), in_function), str(error)
    message = str(error)
    assert message.startswith(f"{__file__}:{line}:{text.index(column) + 1}: kernel {function.__name__}: tileiras failed")
    assert f"{__file__}:{line}:{text.index(column) + 1}: error: Incompatibility with architecture 'sm_80'" in message
    assert message.splitlines()[-2] == text and message.splitlines()[-1].lstrip().startswith("^")
    _compile(function, "sm_90", z_dtype)  # where f8 exists it compiles


RECORDED = (  # what tileiras 13.4 prints for an op on sm_80, its file and place replaced
    '#cuda_tile.di_loc<loc("{file}":{line}:{column}) in #cuda_tile.di_subprogram<file = <"{name}" in "{folder}">, '
    'line = 1, name = "add", linkageName = "add", compileUnit = <file = <"{name}" in "{folder}">>, '
    "scopeLine = 1>>: error: Incompatibility with architecture 'sm_80': unsupported type 'f8E4M3FN'\n"
    "error: failed to compile Tile IR program\n"
)


@pytest.mark.parametrize("recorded, column, expected", [
    (RECORDED, 5, "the store"),  # the store op's own location, with its extent
    (RECORDED, 9, "as named"),  # no op there: the place tileiras names
    ("note: n\n" + RECORDED.replace("error: Inc", "warning: Inc", 1), 5, "the def"),  # no located error
    ("error: input does not correspond to Tile IR bytecode\n", 5, "the def"),
])
def test_a_recorded_diagnostic_is_mapped_to_its_op(fake_toolkit: Any, monkeypatch: pytest.MonkeyPatch,
                                                   tmp_path: Path, recorded: str, column: int, expected: str) -> None:
    store_line = next(i for i, text in enumerate(Path(__file__).read_text().splitlines(), start=1)
                      if "z.store(load_tile_like(x, z) + load_tile_like(y, z))" in text)
    stderr = tmp_path / "stderr.txt"
    stderr.write_text(recorded.format(file=__file__, line=store_line, column=column, name=Path(__file__).name,
                                      folder=Path(__file__).parent))
    root = fake_toolkit("rejecting", compile=f"cat '{stderr}' >&2; exit 5")
    monkeypatch.setenv("CUTILE_TILEIRAS", str(root / "bin" / "tileiras"))
    monkeypatch.setenv("CUTILE_CACHE", "0")
    with pytest.raises(TileCompilerError) as info:
        compiled_add()
    location = info.value.location
    assert location is not None and location.function == "add"
    if expected == "the store":
        whole = Path(__file__).read_text().splitlines()[store_line - 1].rstrip()
        assert (location.line, location.column, location.end_column) == (store_line, 4, len(whole))
    elif expected == "as named":
        assert (location.line, location.column, location.end_column) == (store_line, 8, None)
    else:
        assert (location.line, location.column) == (store_line - 1, 0)
