"""Warm start (`_warm`): a new process compiling a kernel whose manifest is on disk
takes the cubin without running the front end or the lowering, and only while
every value the first compile read still holds there.

Each case runs the compile in child processes (a new interpreter each, sharing the
cache folder) and looks at what the child did: whether it warm-started, how many
times it ran the front end, and what it compiled."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

KERNEL = '''
from cutile_compiler import DeviceFunction
from cutile_compiler.language import Mut, Tensor, f32, load_tile_like

SCALE = {scale}
CFG = {cfg}


def _twice(t):
    return t {op} t


twice = DeviceFunction(_twice)


def scaled(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    z.store(twice(load_tile_like(x, z)) * {factor})
'''

CHILD = '''
import hashlib, json, sys
sys.path.insert(0, sys.argv[1])
import cutile_compiler as cc
from cutile_compiler import _pipeline
from cutile_compiler import dtypes as dt

runs = []
real = _pipeline.build_kernel_ir


def counting(*args, **kwargs):
    runs.append(1)
    return real(*args, **kwargs)


_pipeline.build_kernel_ir = counting
lowerings = []
real_lower = _pipeline.lower_kernel
_pipeline.lower_kernel = lambda *a, **k: lowerings.append(1) or real_lower(*a, **k)
import warm_kernel

signature = cc.parse_signature(warm_kernel.scaled)
spec = cc.specialize(signature, "scaled", {{"z": cc.TensorSpec(dt.f32, (1000,), (128,)),
                                           "x": cc.TensorSpec(dt.f32, (1000,))}})
compiled = cc.KernelCompiler(warm_kernel.scaled, signature).compile(spec, sys.argv[2],
                                                                    cc.CompileOptions(opt_level=int(sys.argv[3])))
facts = {{"warm": compiled.warm, "frontend": len(runs), "lowering": len(lowerings),
          "cubin": hashlib.sha256(compiled.cubin).hexdigest(), "name": compiled.name,
          "abi": [[a.param, a.kind, a.axis] for a in compiled.abi]}}
facts["reads_hold"] = compiled.reads.changed() is None
warm_kernel.SCALE = "rebound"  # the live reads are what launches check afterwards
facts["sees_rebinding"] = compiled.reads.changed() is not None
warm_kernel.SCALE = {scale}
facts["ir"] = compiled.ir_text  # built on demand by a warm start
print(json.dumps(facts))
'''


def kernel_source(scale: str = "2.0", factor: str = "SCALE", op: str = "+", cfg: str = "None") -> str:
    return KERNEL.format(scale=scale, factor=factor, op=op, cfg=cfg)


def run_child(folder: Path, arch: str = "sm_90", opt_level: int = 3, scale: str = "2.0") -> dict[str, Any]:
    script = folder / "child.py"
    script.write_text(CHILD.format(scale=scale))
    env = dict(os.environ)
    done = subprocess.run([sys.executable, str(script), str(folder), arch, str(opt_level)], capture_output=True,
                          text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    facts: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return facts


@pytest.fixture
def folder(tmp_path: Path, real_toolchain: object) -> Path:
    (tmp_path / "warm_kernel.py").write_text(kernel_source())
    return tmp_path


def write_kernel(folder: Path, source: str) -> None:
    path = folder / "warm_kernel.py"
    path.write_text(source)
    stat = path.stat()  # a new mtime even within the clock's resolution: no stale .pyc
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))


def manifests(cache: Path) -> list[Path]:
    return sorted((cache / "manifest-v1").rglob("*.manifest"))


def test_a_new_process_skips_the_front_end_and_lowering(folder: Path) -> None:
    cold = run_child(folder)
    assert not cold["warm"] and cold["frontend"] == 1 and cold["lowering"] == 1
    warm = run_child(folder)
    assert warm["warm"] and warm["frontend"] == 0 and warm["lowering"] == 0
    assert warm["cubin"] == cold["cubin"] and warm["name"] == cold["name"] and warm["abi"] == cold["abi"]
    assert warm["reads_hold"] and warm["sees_rebinding"]
    assert warm["ir"] == cold["ir"]  # the IR asked for afterwards is the one the cubin came from


@pytest.mark.parametrize("change", ["global", "device function", "options", "arch", "kernel"])
def test_what_the_bytecode_depends_on_changing_is_no_hit(folder: Path, change: str) -> None:
    cold = run_child(folder)
    arch, opt_level, scale = "sm_90", 3, "2.0"
    if change == "global":
        write_kernel(folder, kernel_source(scale="3.0"))
        scale = "3.0"
    elif change == "device function":
        write_kernel(folder, kernel_source(op="*"))
    elif change == "options":
        opt_level = 1
    elif change == "arch":
        arch = "sm_100"
    else:
        write_kernel(folder, kernel_source(factor="(SCALE + 1.0)"))
    again = run_child(folder, arch, opt_level, scale)
    assert not again["warm"] and again["frontend"] == 1
    if change == "global":
        assert "3.0" in again["ir"] and "3.0" not in cold["ir"]
    if change == "device function":
        assert "mul" in again["ir"] and again["ir"] != cold["ir"]
    if change in ("global", "device function", "kernel", "arch"):
        assert again["cubin"] != cold["cubin"]
    # ... and the manifest rewritten for the new inputs hits in the next process
    assert run_child(folder, arch, opt_level, scale)["warm"]


def test_a_read_a_new_process_cannot_check_writes_no_manifest(folder: Path) -> None:
    # CFG is an instance: its identity in another process means nothing
    write_kernel(folder, kernel_source(factor="CFG.scale", cfg="type('Cfg', (), {'scale': 2.0})()"))
    cache = Path(os.environ["CUTILE_CACHE_DIR"])
    first = run_child(folder)
    assert not first["warm"] and manifests(cache) == []
    second = run_child(folder)
    assert not second["warm"] and second["frontend"] == 1 and second["cubin"] == first["cubin"]


@pytest.mark.parametrize("damage", ["truncated", "flipped", "foreign", "garbage payload"])
def test_a_damaged_manifest_compiles_correctly(folder: Path, damage: str) -> None:
    from cutile_compiler import _cache

    cold = run_child(folder)
    cache = Path(os.environ["CUTILE_CACHE_DIR"])
    [path] = manifests(cache)
    data = path.read_bytes()
    if damage == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "flipped":
        path.write_bytes(data[:-3] + bytes([data[-3] ^ 0x20]) + data[-2:])
    elif damage == "foreign":  # a whole entry, of another key
        path.write_bytes(_cache._wrap("ab" * 32, data[_cache._HEADER.size:]))
    else:  # a whole entry of this key, whose content is not a manifest this process understands
        key = path.name.split(".")[0]
        path.write_bytes(_cache._wrap(key, json.dumps({"arch": "sm_90", "reads": [[0, "x", 1, 2]]}).encode()))
    again = run_child(folder)
    assert not again["warm"] and again["frontend"] == 1
    assert again["cubin"] == cold["cubin"] and again["ir"] == cold["ir"]
    assert run_child(folder)["warm"]  # rewritten


def test_a_manifest_pointing_at_a_missing_cubin_compiles(folder: Path) -> None:
    cold = run_child(folder)
    cache = Path(os.environ["CUTILE_CACHE_DIR"])
    for cubin in (cache / "cubin-v2").rglob("*.cubin"):
        cubin.unlink()
    again = run_child(folder)
    assert not again["warm"] and again["cubin"] == cold["cubin"]


def test_no_manifest_without_the_disk_cache(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUTILE_CACHE", "0")
    run_child(folder)
    assert not run_child(folder)["warm"]
    assert manifests(Path(os.environ["CUTILE_CACHE_DIR"])) == []


def test_the_manifest_records_reads_checkably() -> None:
    """In process: what a manifest records of each kind of read, and that a live
    re-read of a changed value disagrees with it."""
    from cutile_compiler import _warm

    assert _warm._serialize((1, 2.5, "a", b"b", None, True)) == [
        "tuple", [["int", "1"], ["float", (2.5).hex()], ["str", "a"], ["bytes", "62"], ["none"], ["bool", True]]]
    assert _warm._serialize(-0.0) != _warm._serialize(0.0)
    assert _warm._serialize(os) == ["module", "os"]
    assert _warm._matches(os, ["module", "os"]) and not _warm._matches(sys, ["module", "os"])
    for unchecked in ([1.0], {"a": 1}, object()):
        with pytest.raises(_warm.NotWarmCacheable):
            _warm._serialize(unchecked)
    from cutile_compiler import language

    assert _warm._serialize(language.load_tile_like)[0] == "language"
    assert _warm._matches(language.load_tile_like, _warm._serialize(language.load_tile_like))
    assert not _warm._matches(language.arange, _warm._serialize(language.load_tile_like))


# --- in process: a new KernelCompiler has nothing in memory, so it reads the manifest ---

from cutile_compiler import DeviceFunction  # noqa: E402
from cutile_compiler.language import Mut, Tensor, f32, load_tile_like  # noqa: E402


class Cfg:
    SCALE = 2.0


def _shifted(t, by=1.0):
    return t + by


shifted = DeviceFunction(_shifted)


def by_class_attribute(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    z.store(shifted(load_tile_like(x, z)) * Cfg.SCALE)


def make_closure_kernel(factor: float) -> Any:
    def by_closure(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
        z.store(load_tile_like(x, z) * factor)
    return by_closure


def compile_fresh(function: Any) -> Any:
    import cutile_compiler as cc
    from cutile_compiler import dtypes as dt

    signature = cc.parse_signature(function)
    spec = cc.specialize(signature, function.__name__, {"z": cc.TensorSpec(dt.f32, (1000,), (128,)),
                                                        "x": cc.TensorSpec(dt.f32, (1000,))})
    return cc.KernelCompiler(function, signature).compile(spec, "sm_90")


def test_attributes_of_a_class_and_device_function_defaults_are_checked(real_toolchain: object,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    cold = compile_fresh(by_class_attribute)
    warm = compile_fresh(by_class_attribute)
    assert not cold.warm and warm.warm and warm.cubin == cold.cubin
    monkeypatch.setattr(Cfg, "SCALE", 3.0)
    changed = compile_fresh(by_class_attribute)
    assert not changed.warm and "3.0" in changed.ir_text
    monkeypatch.setattr(_shifted, "__defaults__", (5.0,))
    defaults = compile_fresh(by_class_attribute)
    assert not defaults.warm and "5.0" in defaults.ir_text


def test_closure_variables_are_checked(real_toolchain: object) -> None:
    cold = compile_fresh(make_closure_kernel(2.0))
    warm = compile_fresh(make_closure_kernel(2.0))  # another function object, the same source and closure value
    assert not cold.warm and warm.warm and warm.cubin == cold.cubin
    assert warm.reads.changed() is None
    other = compile_fresh(make_closure_kernel(4.0))
    assert not other.warm and "4.0" in other.ir_text


def test_dumps_come_from_a_real_compile(real_toolchain: object, tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    compile_fresh(by_class_attribute)
    assert compile_fresh(by_class_attribute).warm
    monkeypatch.setenv("CUTILE_DUMP", "ir")
    monkeypatch.setenv("CUTILE_DUMP_DIR", str(tmp_path / "dumps"))
    dumped = compile_fresh(by_class_attribute)
    assert not dumped.warm and list((tmp_path / "dumps").glob("by_class_attribute-*.ir.txt"))


def test_the_fingerprint_covers_every_language_package_even_unimported(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """An edit of a language package's file (cutile's device functions are read by name)
    changes the fingerprint, and a package is found without being imported (cutile was
    left out, and a package imported after the first compile was never covered)."""
    from cutile_compiler import _warm

    package = tmp_path / "fingerprint_probe"
    package.mkdir()
    (package / "__init__.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(_warm, "_LANGUAGE_PACKAGES", ("fingerprint_probe",))
    monkeypatch.setattr(_warm, "_compiler_fingerprint", None)
    before = _warm.compiler_fingerprint()
    assert "fingerprint_probe" not in sys.modules
    (package / "__init__.py").write_text("X = 22\n")
    monkeypatch.setattr(_warm, "_compiler_fingerprint", None)
    assert _warm.compiler_fingerprint() != before


def test_cutile_is_fingerprinted() -> None:
    from cutile_compiler import _warm

    assert set(_warm._LANGUAGE_PACKAGES) >= {"cutile", "cutile_compiler", "cutile_ir"}
