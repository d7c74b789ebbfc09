"""The ``cutile`` command: ``info`` (on cuda_core's fake driver where a driver is needed),
``cache list|clear|prune`` over a cache folder of the test's own, usage errors and
failures as one line with the documented exit codes (0 done, 1 failed, 2 usage), and
``python -m cutile`` running the same command."""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import cutile
import cutile_compiler
from cuda_core.testing import FakeDriver, use_fake_driver
from cutile import _backend
from cutile.__main__ import EXIT_FAILED, EXIT_OK, EXIT_USAGE, _size, main

# distribution -> import name
DISTRIBUTIONS = {"cutile": "cutile", "cutile-compiler": "cutile_compiler", "cutile-ir": "cutile_ir",
                 "cutile-cuda-async": "cuda_async", "cutile-cuda-core": "cuda_core", "cutile-kernels": "cutile_kernels"}


def _installed(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv("CUTILE_CACHE_DIR", str(folder))
    monkeypatch.delenv("CUTILE_CACHE_MAX_BYTES", raising=False)
    monkeypatch.delenv("CUTILE_CACHE", raising=False)
    return folder


@pytest.fixture
def undecided() -> Iterator[None]:
    """The backend not chosen yet in this process, as in a fresh ``cutile info``."""
    _backend.reset_for_tests(None)
    yield


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    status = main(argv)
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def _info(capsys: pytest.CaptureFixture[str]) -> dict:  # type: ignore[type-arg]
    status, out, err = _run(["info", "--json"], capsys)
    assert status == EXIT_OK and err == ""
    report: dict = json.loads(out)  # type: ignore[type-arg]
    return report


def _fill(per_kind: dict[str, list[int]]) -> dict[str, list[Path]]:
    """Entries of the given payload sizes in each disk cache, oldest first (one second apart)."""
    made: dict[str, list[Path]] = {}
    caches = cutile_compiler.disk_caches()
    clock = 1_700_000_000
    for kind, sizes in per_kind.items():
        made[kind] = []
        for i, size in enumerate(sizes):
            key = hashlib.sha256(f"{kind} {i}".encode()).hexdigest()
            assert caches[kind].put(key, bytes([i % 256]) * size)
            path = caches[kind].path(key)
            clock += 1
            os.utime(path, (clock, clock))
            made[kind].append(path)
    return made


# --- info --------------------------------------------------------------------------------


@pytest.mark.parametrize("in_use", [True, False])
def test_info_says_whether_launches_take_the_native_path(in_use: bool, cache_dir: Path, undecided: None,
                                                         capsys: pytest.CaptureFixture[str],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    from cutile import _native

    monkeypatch.setattr(_native, "_tried", True)  # (as after a first launch, which loaded it or said why not)
    if in_use:
        monkeypatch.setattr(_native, "module", SimpleNamespace(__file__="/somewhere/_cutile_native.so"))
    else:
        monkeypatch.setattr(_native, "module", None)
        monkeypatch.setattr(_native, "_reason", "the compiler is missing (a test's reason)")
    with use_fake_driver(FakeDriver()):
        native = _info(capsys)["native_launch_path"]
        _, text, _ = _run(["info"], capsys)
    lines = dict(line.split(None, 1) for line in text.splitlines() if not line.startswith(" "))
    if in_use:
        assert native["in_use"] is True and native["module"] == "/somewhere/_cutile_native.so"
        assert "why" not in native
        assert lines["native"].split(None, 1)[1] == "built, in use (/somewhere/_cutile_native.so)"
    else:
        assert native == {"in_use": False, "why": "the compiler is missing (a test's reason)",
                          "cache": native["cache"]}
        assert lines["native"].split(None, 1)[1] == (
            "unavailable, launches take the Python path: the compiler is missing (a test's reason)")
    assert native["cache"]


def test_info_on_a_machine_with_two_gpus(cache_dir: Path, undecided: None,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    _fill({"cubins": [100, 200], "manifests": [10], "probes": []})
    with use_fake_driver(FakeDriver(devices=2)):
        report = _info(capsys)
        status, text, _ = _run(["info"], capsys)
    assert status == EXIT_OK
    # (installed, their metadata's version; a source tree on PYTHONPATH, its pyproject's)
    assert report["packages"] == {name: importlib.import_module(module).__version__
                                  for name, module in DISTRIBUTIONS.items()}
    assert all(_installed(name) in (None, version) for name, version in report["packages"].items())
    assert report["packages"]["cutile"] == cutile.__version__
    assert report["python"]["version"] == ".".join(map(str, sys.version_info[:3]))
    assert report["python"]["executable"] == sys.executable
    assert report["numpy"] == np.__version__ and report["ml_dtypes"] == ml_dtypes.__version__
    assert report["cuda_bindings"] is not None and report["cuda_bindings"] == _installed("cuda-bindings")

    driver = report["driver"]
    assert driver["cuda_version"] == "13.0" and "problem" not in driver
    assert [(g["ordinal"], g["name"], g["arch"], g["sms"], g["memory_bytes"]) for g in driver["gpus"]] == [
        (0, "Fake H200", "sm_90", 132, 141 * 1024**3), (1, "Fake H200", "sm_90", 132, 141 * 1024**3)]
    assert report["backend"] == {"backend": "gpu", "why": "CUTILE_BACKEND=auto and a GPU is present"}
    assert _backend._chosen is None  # info tells what would be chosen, and chooses nothing

    cache = report["cache"]
    assert cache["folder"] == str(cache_dir) and cache["enabled"] is True
    assert cache["max_bytes_per_folder"] == 1024**3
    counts = {kind: facts["count"] for kind, facts in cache["kinds"].items()}
    probes = len(list((cache_dir / "toolchain-v1").rglob("*.probe")))  # (info's own look for tileiras records one)
    assert counts == {"cubins": 2, "manifests": 1, "probes": probes}
    assert cache["kinds"]["cubins"]["bytes"] == sum(p.stat().st_size for p in (cache_dir / "cubin-v2").rglob("*.cubin"))

    lines = dict(line.split(None, 1) for line in text.splitlines() if not line.startswith(" "))
    assert lines["packages"].startswith(f"cutile {cutile.__version__}, cutile-compiler ")
    assert lines["driver"] == "supports CUDA 13.0"
    assert lines["gpus"].startswith("0: Fake H200 (sm_90, 132 SMs, 141.0 GiB)")
    assert "1: Fake H200 (sm_90" in text
    assert lines["backend"] == "gpu: CUTILE_BACKEND=auto and a GPU is present"
    assert lines["cache"].startswith(f"{cache_dir} (on; at most 1.0 GiB per folder)")
    assert "cubins 2 entries" in text and "manifests 1 entries" in text


def test_info_names_the_toolchain_it_finds_and_how(cache_dir: Path, undecided: None,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    try:
        chain = cutile_compiler.find_toolchain()
    except cutile_compiler.ToolchainError as exc:
        pytest.skip(f"no tileiras here: {exc}")
    with use_fake_driver(FakeDriver(devices=1)):
        report = _info(capsys)
        status, text, _ = _run(["info"], capsys)
    toolchain = report["toolchain"]
    assert toolchain["found"] is True
    assert (toolchain["version"], toolchain["tileiras"], toolchain["found_by"]) == (
        chain.release, str(chain.tileiras), chain.found_by)
    assert toolchain["ptxas"] == str(chain.ptxas) and toolchain["libnvvm"] == str(chain.libnvvm)
    assert "sm_90" in toolchain["gpu_names"]
    assert report["driver"]["gpus"][0]["tileiras_compiles_for_it"] is True
    assert f"tileiras {chain.release} at {chain.tileiras} (found via {chain.found_by})" in text


def test_info_without_toolchain_driver_or_gpu_says_why_and_succeeds(
        cache_dir: Path, undecided: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("CUTILE_TILEIRAS", str(tmp_path / "no-tileiras"))
    with use_fake_driver(FakeDriver(devices=0)):
        report = _info(capsys)
        status, text, err = _run(["info"], capsys)
    assert status == EXIT_OK and err == ""
    assert report["toolchain"]["found"] is False
    assert f"CUTILE_TILEIRAS={tmp_path / 'no-tileiras'} does not exist" in report["toolchain"]["problem"]
    assert report["driver"]["cuda_version"] == "13.0" and report["driver"]["gpus"] == []
    assert "sees no GPU" in report["driver"]["problem"]
    assert report["backend"]["backend"] == "interpreter"
    assert report["backend"]["why"].startswith("CUTILE_BACKEND=auto and no GPU is available: the NVIDIA driver")
    assert "toolchain      none: CUTILE_TILEIRAS=" in text
    assert "gpus           none: the NVIDIA driver is installed but sees no GPU" in text


def test_info_without_a_driver(cache_dir: Path, undecided: None, capsys: pytest.CaptureFixture[str]) -> None:
    fake = FakeDriver()
    fake.init_exception = RuntimeError("libcuda.so.1 not found")

    def no_library() -> tuple[object, int]:
        raise RuntimeError("libcuda.so.1 not found")

    fake.cuDriverGetVersion = no_library  # type: ignore[method-assign]
    with use_fake_driver(fake):
        report = _info(capsys)
        status, text, _ = _run(["info"], capsys)
    assert report["driver"]["cuda_version"] is None and report["driver"]["gpus"] == []
    assert report["driver"]["problem"].startswith("no NVIDIA driver was found on this machine")
    assert "libcuda.so.1 not found" in report["driver"]["problem"]
    assert "gpus           none (no driver)" in text


@pytest.mark.parametrize("requested, chosen, why", [
    ("interpreter", "interpreter", "CUTILE_BACKEND=interpreter"),
    ("gpu", None, "CUTILE_BACKEND=gpu but no GPU can be used: the NVIDIA driver is installed but sees no GPU"),
    ("tpu", None, "environment variable CUTILE_BACKEND='tpu' is invalid: expected one of auto, gpu, interpreter"),
])
def test_info_explains_the_backend_choice(requested: str, chosen: str | None, why: str, cache_dir: Path,
                                          undecided: None, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("CUTILE_BACKEND", requested)
    with use_fake_driver(FakeDriver(devices=0)):
        report = _info(capsys)
        _, text, _ = _run(["info"], capsys)
    assert report["backend"]["backend"] == chosen
    assert report["backend"]["why"].startswith(why)
    assert f"backend        {chosen or 'none (launches fail)'}: {why}" in text


def test_info_reports_a_malformed_cache_variable_and_succeeds(cache_dir: Path, undecided: None,
                                                              monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("CUTILE_CACHE_MAX_BYTES", "lots")
    with use_fake_driver(FakeDriver(devices=1)):
        report = _info(capsys)
    assert report["cache"] == {"problem": "environment variable CUTILE_CACHE_MAX_BYTES='lots' is invalid: "
                                          "expected a size in bytes, e.g. 1073741824, 512MiB or 2G"}


# --- cache -------------------------------------------------------------------------------


def test_cache_list_shows_every_entry_most_recent_first(cache_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    made = _fill({"cubins": [100, 300, 200], "manifests": [50], "probes": [70, 80]})
    status, out, err = _run(["cache", "list", "--json"], capsys)
    assert status == EXIT_OK and err == ""
    report = json.loads(out)
    for kind, paths in made.items():
        facts = report["kinds"][kind]
        root = cache_dir / {"cubins": "cubin-v2", "manifests": "manifest-v1", "probes": "toolchain-v1"}[kind]
        assert facts["folder"] == str(root)
        assert [e["name"] for e in facts["entries"]] == [str(p.relative_to(root)) for p in reversed(paths)]
        assert [e["bytes"] for e in facts["entries"]] == [p.stat().st_size for p in reversed(paths)]
        assert facts["count"] == len(paths) and facts["bytes"] == sum(p.stat().st_size for p in paths)

    status, text, _ = _run(["cache", "list"], capsys)
    lines = text.splitlines()
    assert lines[0] == f"{cache_dir} (caching on; at most 1.0 GiB per folder)"
    cubins = lines.index(f"cubins: 3 entries, {_size(_bytes(made['cubins']))} in {cache_dir / 'cubin-v2'}")
    names = [line.split()[-1] for line in lines[cubins + 1:cubins + 4]]
    assert names == [str(p.relative_to(cache_dir / "cubin-v2")) for p in reversed(made["cubins"])]
    assert f"manifests: 1 entries, {made['manifests'][0].stat().st_size} B in {cache_dir / 'manifest-v1'}" in lines


def _bytes(paths: list[Path]) -> int:
    return sum(p.stat().st_size for p in paths)


def test_sizes_read_as_people_write_them() -> None:
    assert [_size(n) for n in (0, 1023, 1024, 1536, 5 * 1024**2, 141 * 1024**3, 4096 * 1024**3)] == [
        "0 B", "1023 B", "1.0 KiB", "1.5 KiB", "5.0 MiB", "141.0 GiB", "4096.0 GiB"]


def test_cache_list_of_an_empty_or_missing_folder(cache_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = _run(["cache", "list", "--json"], capsys)
    assert status == EXIT_OK
    assert {k: (f["count"], f["bytes"]) for k, f in json.loads(out)["kinds"].items()} == {
        "cubins": (0, 0), "manifests": (0, 0), "probes": (0, 0)}
    assert not cache_dir.exists()  # listing creates nothing


def test_cache_clear_deletes_every_entry_and_nothing_else(cache_dir: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    made = _fill({"cubins": [100, 200], "manifests": [50], "probes": [70]})
    foreign = [cache_dir / "notes.txt", cache_dir / "cubin-v1" / "ab" / "old.cubin", cache_dir / "cubin-v2" / "x.txt"]
    for path in foreign:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("not cutile's current cache")
    total = sum(p.stat().st_size for paths in made.values() for p in paths)
    status, out, err = _run(["cache", "clear"], capsys)
    assert status == EXIT_OK and err == ""
    assert out == f"removed 4 entries ({_size(total)}) from {cache_dir}: cubins 2, manifests 1, probes 1\n"
    assert not any(p.exists() for paths in made.values() for p in paths)
    assert all(p.exists() for p in foreign)
    assert all(not cache.entries() for cache in cutile_compiler.disk_caches().values())
    status, out, _ = _run(["cache", "clear"], capsys)
    assert status == EXIT_OK and out.startswith("removed 0 entries (0 B)")


def test_cache_prune_keeps_the_most_recently_used_under_the_cap(cache_dir: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    made = _fill({"cubins": [1000, 1000, 1000, 1000], "manifests": [1000, 1000], "probes": [10]})
    entry = made["cubins"][0].stat().st_size
    status, out, _ = _run(["cache", "prune", "--max-bytes", str(2 * entry + 1)], capsys)
    assert status == EXIT_OK
    assert out == f"removed 2 entries ({_size(2 * entry)}) from {cache_dir}: cubins 2, manifests 0, probes 0\n"
    assert [p.exists() for p in made["cubins"]] == [False, False, True, True]  # oldest first
    assert all(p.exists() for p in made["manifests"] + made["probes"])

    status, out, _ = _run(["cache", "prune", "--max-bytes", "2KiB"], capsys)  # room for one entry of 1080 B
    assert status == EXIT_OK and "cubins 1, manifests 1, probes 0" in out
    assert [p.exists() for p in made["cubins"]] == [False, False, False, True]
    assert [p.exists() for p in made["manifests"]] == [False, True]


def test_cache_prune_defaults_to_the_configured_cap(cache_dir: Path, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    made = _fill({"cubins": [1000, 1000, 1000], "manifests": [], "probes": []})
    monkeypatch.setenv("CUTILE_CACHE_MAX_BYTES", str(made["cubins"][0].stat().st_size))
    status, out, _ = _run(["cache", "prune"], capsys)
    assert status == EXIT_OK and "removed 2 entries" in out
    assert [p.exists() for p in made["cubins"]] == [False, False, True]


@pytest.mark.parametrize("argv, status, complaint", [
    (["cache", "prune", "--max-bytes", "12 parsecs"], EXIT_USAGE,
     "cutile: error: --max-bytes '12 parsecs' is invalid: expected a size in bytes, e.g. 1073741824, 512MiB or 2G"),
    (["cache", "prune", "--max", "1"], EXIT_USAGE, "cutile: error: unrecognized arguments: --max 1"),
    (["cache", "purge"], EXIT_USAGE, "cutile: error: argument ACTION: invalid choice: 'purge'"),
    (["cache"], EXIT_USAGE, "cutile: error: the following arguments are required: ACTION"),
    (["inf"], EXIT_USAGE, "cutile: error: argument COMMAND: invalid choice: 'inf'"),
    (["info", "--jsn"], EXIT_USAGE, "cutile: error: unrecognized arguments: --jsn"),
    ([], EXIT_USAGE, "cutile: error: the following arguments are required: COMMAND"),
])
def test_usage_errors_are_one_line_with_exit_status_2(argv: list[str], status: int, complaint: str, cache_dir: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(argv, capsys)
    assert code == status and out == ""
    assert len(err.splitlines()) == 1 and err.startswith(complaint), err


@pytest.mark.parametrize("variable, value", [("CUTILE_CACHE_MAX_BYTES", "lots"), ("CUTILE_CACHE", "maybe")])
def test_a_malformed_variable_fails_the_cache_commands_in_one_line(variable: str, value: str, cache_dir: Path,
                                                                   monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv(variable, value)
    for argv in (["cache", "list"], ["cache", "prune"], ["cache", "clear"]):
        code, out, err = _run(argv, capsys)
        if variable == "CUTILE_CACHE" and argv[1] != "list":
            assert code == EXIT_OK  # only the listing says whether caching is on
            continue
        assert code == EXIT_FAILED and out == ""
        assert err == f"cutile: error: environment variable {variable}={value!r} is invalid: " + (
            "expected a size in bytes, e.g. 1073741824, 512MiB or 2G\n" if variable == "CUTILE_CACHE_MAX_BYTES"
            else "expected 1 or 0 (also true/false, yes/no, on/off)\n")


def test_a_cache_folder_that_is_a_file_fails_in_one_line(cache_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cache_dir.mkdir()
    (cache_dir / "cubin-v2").write_text("a file where the folder should be")
    code, out, err = _run(["cache", "list"], capsys)
    assert code == EXIT_FAILED and out == ""
    assert len(err.splitlines()) == 1 and err.startswith("cutile: error: ") and "cubin-v2" in err


def test_version_and_help(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(["--version"], capsys)
    assert code == EXIT_OK and out == f"cutile {cutile.__version__}\n"
    code, out, _ = _run(["--help"], capsys)
    assert code == EXIT_OK and "info" in out and "cache" in out and "Exit status: 0 done, 1" in out
    code, out, _ = _run(["cache", "prune", "--help"], capsys)
    assert code == EXIT_OK and "--max-bytes SIZE" in out


def test_python_dash_m_cutile_is_the_same_command(tmp_path: Path) -> None:
    env = dict(os.environ, CUTILE_CACHE_DIR=str(tmp_path / "cache"))
    done = subprocess.run([sys.executable, "-m", "cutile", "--version"], capture_output=True, text=True,
                          timeout=300, env=env)
    assert done.returncode == EXIT_OK and done.stdout == f"cutile {cutile.__version__}\n"
    done = subprocess.run([sys.executable, "-m", "cutile", "cache", "list", "--json"], capture_output=True,
                          text=True, timeout=300, env=env)
    assert done.returncode == EXIT_OK, done.stderr
    assert json.loads(done.stdout)["folder"] == str(tmp_path / "cache")
    done = subprocess.run([sys.executable, "-m", "cutile", "bogus"], capture_output=True, text=True, timeout=300,
                          env=env)
    assert done.returncode == EXIT_USAGE and done.stdout == "" and len(done.stderr.splitlines()) == 1
