"""Installing cutile as a user does, outside the repository.

``scripts/build_wheels.sh`` builds a wheel and an sdist of every package; each carries
the LICENSE, cutile's sdist the language guides, and their metadata pins the siblings
and bounds cuda-bindings to the platforms with its wheels. Then plain pip, in a fresh
virtual environment outside the repository, installs them with the README's command
(``pip install --find-links dist "cutile[tileiras]"``), and there, from a folder of its
own: the README's quick start runs on the interpreter, ``cutile.compile`` compiles it
for sm_90 with the toolchain the extra brought, ``cutile info`` and ``python -m cutile``
answer, and without cuda-bindings the quick start still runs on the interpreter.

Needs uv (which scripts/run_all.sh installs) and a package index (pip's cache makes a
second run quick); the GPU machine, which has neither, skips it.
"""

from __future__ import annotations

import email.message
import email.parser
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
INSTALL = 'pip install --find-links dist "cutile[tileiras]"'
FOLDERS = ("cuda-core", "cuda-async", "cutile-ir", "cutile-compiler", "cutile", "cutile-kernels")

def _index_reachable() -> bool:
    """Whether pip can reach its package index (the wheels' dependencies come from it)."""
    import socket

    try:
        socket.create_connection(("pypi.org", 443), timeout=5).close()
    except OSError:
        return False
    return True


pytestmark = [
    pytest.mark.skipif(shutil.which("uv") is None, reason="building the wheels needs uv (scripts/run_all.sh installs it)"),
    pytest.mark.skipif(not _index_reachable(), reason="no package index reachable (pip installs the dependencies from it)"),
]


def _project(folder: str) -> dict:  # type: ignore[type-arg]
    with (ROOT / "packages" / folder / "pyproject.toml").open("rb") as file:
        project: dict = tomllib.load(file)["project"]  # type: ignore[type-arg]
    return project


VERSION = _project("cutile")["version"]
NAMES = {folder: _project(folder)["name"] for folder in FOLDERS}


def _files(name: str) -> tuple[str, str]:
    stem = name.replace("-", "_")
    return f"{stem}-{VERSION}-py3-none-any.whl", f"{stem}-{VERSION}.tar.gz"


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    (out / "cutile-0.0.1-py3-none-any.whl").write_bytes(b"a stale build")  # the script clears old builds
    done = subprocess.run(["bash", str(ROOT / "scripts" / "build_wheels.sh"), "--out", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1] == f"built 12 distributions into {out}/"
    return out


def _metadata(wheel: Path) -> email.message.Message:
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        return email.parser.Parser().parsestr(archive.read(name).decode())


def test_every_wheel_and_sdist_is_built_and_carries_the_license(dist: Path) -> None:
    built = sorted(p.name for p in dist.iterdir() if p.suffix in (".whl", ".gz"))
    assert built == sorted(f for name in NAMES.values() for f in _files(name))
    license_text = (ROOT / "LICENSE").read_bytes()
    for folder, name in NAMES.items():
        wheel, sdist = (dist / f for f in _files(name))
        with zipfile.ZipFile(wheel) as archive:
            stem = wheel.name.split("-py3")[0]
            assert archive.read(f"{stem}.dist-info/licenses/LICENSE") == license_text, wheel.name
        with tarfile.open(sdist) as archive:
            top = sdist.name.removesuffix(".tar.gz")
            member = archive.extractfile(f"{top}/LICENSE")
            assert member is not None and member.read() == license_text, sdist.name
            names = archive.getnames()
            if folder == "cutile":
                for guide, home in (("BASICS.md", "cutile"), ("LANGUAGE.md", "cutile-compiler")):
                    text = archive.extractfile(f"{top}/{guide}")
                    assert text is not None and text.read() == (ROOT / "packages" / home / guide).read_bytes()
            if folder == "cutile-compiler":
                assert f"{top}/LANGUAGE.md" in names
        assert _metadata(wheel)["License-Expression"] == "Apache-2.0"


def test_the_wheels_metadata_pins_the_siblings_and_bounds_cuda_bindings(dist: Path) -> None:
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    linux = {"sys_platform": "linux", "platform_machine": "x86_64", "platform_system": "Linux"}
    places = {
        "linux x86_64": (linux, True),
        "linux aarch64": ({**linux, "platform_machine": "aarch64"}, True),
        "windows": ({"sys_platform": "win32", "platform_machine": "AMD64", "platform_system": "Windows"}, True),
        "macos arm64": ({"sys_platform": "darwin", "platform_machine": "arm64", "platform_system": "Darwin"}, False),
        "linux ppc64le": ({**linux, "platform_machine": "ppc64le"}, False),
    }
    siblings = set(NAMES.values())
    for folder, name in NAMES.items():
        meta = _metadata(dist / _files(name)[0])
        assert meta["Version"] == VERSION and meta["Requires-Python"] == ">=3.11"
        assert meta.get_all("Project-URL") and "Typing :: Typed" in (meta.get_all("Classifier") or [])
        project = _project(folder)
        declared = {canonicalize_name(Requirement(line).name) for line in project.get("dependencies", [])}
        declared |= {canonicalize_name(Requirement(line).name)
                     for lines in project.get("optional-dependencies", {}).values() for line in lines}
        lines = meta.get_all("Requires-Dist") or []
        assert {canonicalize_name(Requirement(line).name) for line in lines} == declared, name
        for line in lines:
            requirement = Requirement(line)
            if requirement.name in siblings:
                assert str(requirement.specifier) == f"=={VERSION}" and requirement.marker is None, line
            elif requirement.name == "cuda-bindings":
                assert requirement.specifier.contains("13.5") and not requirement.specifier.contains("14.0"), line
                assert requirement.marker is not None
                for place, (environment, has_wheels) in places.items():
                    assert requirement.marker.evaluate(environment) is has_wheels, (place, line)
            elif requirement.name.startswith("nvidia-"):
                assert name == "cutile" and str(requirement.specifier) == "==13.4.*", line
                assert requirement.marker is not None
                for place, (environment, has_wheels) in places.items():
                    assert requirement.marker.evaluate({**environment, "extra": "tileiras"}) is has_wheels, place
                    assert requirement.marker.evaluate({**environment, "extra": ""}) is False, place
    cutile = _metadata(dist / _files("cutile")[0])
    assert cutile.get_all("Provides-Extra") == ["tileiras"]
    with zipfile.ZipFile(dist / _files("cutile")[0]) as archive:
        assert "cutile = cutile.__main__:main" in archive.read(f"cutile-{VERSION}.dist-info/entry_points.txt").decode()
        assert "cutile/native/_native_launch.c" in archive.namelist()  # built on the user's machine


def _environment(work: Path, venv: Path) -> dict[str, str]:
    """The user's environment: nothing of this workspace (its venv, its settings)."""
    workspace_bin = str(Path(sys.executable).parent)
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("CUTILE_", "CUDA_CORE_", "VIRTUAL_ENV", "PYTHON", "UV_", "CUDA_TOOLKIT_PATH",
                                  "CUDA_HOME", "CONDA"))}
    path = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p and p != workspace_bin]
    env["PATH"] = os.pathsep.join([str(venv / "bin"), *path])
    env["CUTILE_CACHE_DIR"] = str(work / "cache")
    env["CUDA_CORE_NATIVE_DIR"] = str(work / "native")
    return env


def _venv(venv: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "venv", str(venv)], capture_output=True, text=True, timeout=300)
    if done.returncode != 0 and "ensurepip" in done.stdout + done.stderr:
        # A Python without ensurepip (Debian's without python3-venv): uv makes the venv, with pip in it.
        shutil.rmtree(venv, ignore_errors=True)
        done = subprocess.run(["uv", "venv", "--seed", "--python", sys.executable, str(venv)],
                              capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr


QUICK_START_CHECK = '''
import numpy as np
assert cutile.backend() == "interpreter"
assert np.array_equal(z.to_numpy(), np.full(1024, 2.0, np.float32)), z.to_numpy()
print("quick start OK on", cutile.backend(), "from", cutile.__file__)
'''

COMPILE = '''
import json
import cuda_async, cuda_core, cutile, cutile_compiler, cutile_ir
from cutile import api
from cutile.core import Mut, Tensor, f32, load_tile_like

@cutile.entry
def add(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]], y: Tensor[f32, [-1]]):
    z.store(load_tile_like(x, z) + load_tile_like(y, z))

compiled = cutile.compile(add, api.meta([4096], dtype=f32).partition([1024]), api.meta([4096]), api.meta([4096]),
                          arch="sm_90")
assert compiled.cubin.startswith(b"\\x7fELF") and compiled.arch == "sm_90" and "entry @add" in compiled.mlir
chain = cutile_compiler.find_toolchain()
print(json.dumps({"found_by": chain.found_by, "tileiras": str(chain.tileiras), "cubin": len(compiled.cubin),
                  "modules": {m.__name__: [m.__file__, m.__version__]
                              for m in (cutile, cutile_compiler, cutile_ir, cuda_core, cuda_async)}}))
'''


def test_pip_installs_the_wheels_into_a_fresh_venv_where_cutile_works(dist: Path, tmp_path: Path) -> None:
    assert INSTALL in README.read_text(), "the README's install command is the one tested here"
    venv, work = tmp_path / "venv", tmp_path / "work"
    work.mkdir()
    assert not work.resolve().is_relative_to(ROOT)
    _venv(venv)
    python, env = str(venv / "bin" / "python"), _environment(work, venv)

    def run(*command: str, **extra: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(list(command), capture_output=True, text=True, timeout=900, cwd=work,
                              env={**env, **extra})
        assert done.returncode == 0, f"{command}:\n{done.stdout}\n{done.stderr}"
        return done

    # The README's command, with its dist/ where this test built it (--no-compile: the
    # modules a run imports are compiled when imported; the rest would only cost time).
    arguments = [a.strip('"') for a in INSTALL.split()[2:]]
    arguments[arguments.index("dist")] = str(dist)
    run(python, "-m", "pip", "install", "--disable-pip-version-check", "--quiet", "--no-compile", *arguments)

    # The quick start, as the README writes it, on the interpreter.
    quick_start = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)[0]
    (work / "quick_start.py").write_text(quick_start + QUICK_START_CHECK)
    done = run(python, "quick_start.py", CUTILE_BACKEND="interpreter")
    assert "quick start OK on interpreter" in done.stdout and str(venv) in done.stdout

    # cutile.compile for sm_90, with the tileiras the extra installed; every module from the venv.
    (work / "compile.py").write_text(COMPILE)
    compiled = json.loads(run(python, "compile.py").stdout)
    assert compiled["found_by"] == "pip" and Path(compiled["tileiras"]).is_relative_to(venv) and compiled["cubin"]
    for module, (file, version) in compiled["modules"].items():
        assert Path(file).is_relative_to(venv) and version == VERSION, (module, file, version)

    # The console script, and python -m cutile.
    report = json.loads(run(str(venv / "bin" / "cutile"), "info", "--json").stdout)
    assert report["packages"]["cutile"] == VERSION and report["packages"]["cutile-kernels"] is None
    assert report["python"]["executable"].startswith(str(venv))
    assert report["toolchain"]["found_by"] == "pip" and report["toolchain"]["version"].startswith("13.4.")
    assert report["cache"]["folder"] == str(work / "cache") and report["cache"]["kinds"]["cubins"]["count"] == 1
    assert run(python, "-m", "cutile", "--version").stdout == f"cutile {VERSION}\n"

    # An interpreter-only install, as where cuda-bindings has no wheels: the quick start
    # runs on the interpreter, saying so.
    run(python, "-m", "pip", "uninstall", "--yes", "--quiet", "cuda-bindings")
    done = run(python, "quick_start.py")
    assert "quick start OK on interpreter" in done.stdout
    assert "running kernels on the CPU interpreter" in done.stderr
    report = json.loads(run(python, "-m", "cutile", "info", "--json").stdout)
    assert report["cuda_bindings"] is None and "cuda-bindings is not importable" in report["driver"]["problem"]
    assert report["backend"]["backend"] == "interpreter"
