"""Release hygiene, checked on the source tree: one version for the six packages, each
package's ``__version__`` (from its metadata, or its pyproject.toml when the source tree
is not installed), siblings pinned to that version, the toolchain extra pinned to the
one CUDA minor the tests use, the LICENSE each distribution ships, the CHANGELOG and
the guides the README links. (tests/test_install.py builds and installs the wheels.)"""

from __future__ import annotations

import importlib
import re
import tomllib
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
# folder under packages/ -> import name
PACKAGES = {"cuda-core": "cuda_core", "cuda-async": "cuda_async", "cutile-ir": "cutile_ir",
            "cutile-compiler": "cutile_compiler", "cutile": "cutile", "cutile-kernels": "cutile_kernels"}
TOOLCHAIN = ("nvidia-cuda-tileiras", "nvidia-cuda-nvcc", "nvidia-nvvm")


def _project(folder: str) -> dict[str, Any]:
    with (ROOT / "packages" / folder / "pyproject.toml").open("rb") as file:
        project: dict[str, Any] = tomllib.load(file)["project"]
    return project


def _name_and_spec(requirement: str) -> tuple[str, str, str]:
    """(name, version specifier, marker) of a PEP 508 line such as ``a==1.0; sys_platform == 'linux'``."""
    text, _, marker = requirement.partition(";")
    match = re.fullmatch(r"\s*([A-Za-z0-9_.-]+)\s*(\[[^]]*\])?\s*(.*?)\s*", text)
    assert match is not None, requirement
    return match.group(1).lower().replace("_", "-"), match.group(3).replace(" ", ""), marker.strip()


VERSION = _project("cutile")["version"]
DISTRIBUTIONS = {_project(folder)["name"] for folder in PACKAGES}


def test_the_six_packages_share_one_version() -> None:
    assert {folder: _project(folder)["version"] for folder in PACKAGES} == dict.fromkeys(PACKAGES, VERSION)
    assert re.fullmatch(r"\d+\.\d+\.\d+", VERSION)


@pytest.mark.parametrize("folder", PACKAGES)
def test_version_is_the_distribution_s(folder: str) -> None:
    module = importlib.import_module(PACKAGES[folder])
    assert module.__version__ == VERSION
    name = _project(folder)["name"]
    try:
        assert metadata.version(name) == VERSION  # installed (the uv workspace)
    except metadata.PackageNotFoundError:
        pass  # a source tree on PYTHONPATH (run_all.sh --system): the pyproject's version, checked above


@pytest.mark.parametrize("folder", PACKAGES)
def test_siblings_are_pinned_to_the_same_version(folder: str) -> None:
    siblings = [_name_and_spec(r) for r in _project(folder).get("dependencies", [])
                if _name_and_spec(r)[0] in DISTRIBUTIONS]
    assert all(spec == f"=={VERSION}" and not marker for _, spec, marker in siblings), siblings
    expected = {"cuda-core": 0, "cuda-async": 1, "cutile-ir": 0, "cutile-compiler": 1, "cutile": 4, "cutile-kernels": 1}
    assert len(siblings) == expected[folder]


def test_cuda_bindings_is_bounded_and_only_where_it_has_wheels() -> None:
    (requirement,) = [r for r in _project("cuda-core")["dependencies"] if r.startswith("cuda-bindings")]
    _, spec, marker = _name_and_spec(requirement)
    assert set(spec.split(",")) == {">=13.0", "<14"}
    assert "sys_platform == 'linux'" in marker and "sys_platform == 'win32'" in marker  # evaluated in test_install.py


def test_the_tileiras_extra_pins_the_tested_minor() -> None:
    from cutile_compiler._toolchain import RECOMMENDED_RELEASE

    extra = [_name_and_spec(r) for r in _project("cutile")["optional-dependencies"]["tileiras"]]
    assert sorted(name for name, _, _ in extra) == sorted(TOOLCHAIN)
    assert {spec for _, spec, _ in extra} == {f"=={RECOMMENDED_RELEASE}.*"}
    # ... the minor the tests run with: the workspace's dev group pins one release of it
    with (ROOT / "pyproject.toml").open("rb") as file:
        dev = [_name_and_spec(r) for r in tomllib.load(file)["dependency-groups"]["dev"]]
    tested = {name: spec for name, spec, _ in dev if name in TOOLCHAIN}
    assert sorted(tested) == sorted(TOOLCHAIN)
    assert all(spec.startswith(f"=={RECOMMENDED_RELEASE}.") for spec in tested.values()), tested
    # the same markers as cuda-bindings: the toolchain is useless where the driver layer is absent
    (bindings,) = [r for r in _project("cuda-core")["dependencies"] if r.startswith("cuda-bindings")]
    assert {marker for _, _, marker in extra} == {_name_and_spec(bindings)[2]}


@pytest.mark.parametrize("folder", PACKAGES)
def test_every_package_ships_the_license(folder: str) -> None:
    project = _project(folder)
    assert project["license"] == "Apache-2.0" and project["license-files"] == ["LICENSE"]
    assert (ROOT / "packages" / folder / "LICENSE").read_bytes() == (ROOT / "LICENSE").read_bytes()
    classifiers = project["classifiers"]
    assert not [c for c in classifiers if c.startswith("License ::")]  # the license expression says it
    assert "Programming Language :: Python :: 3.11" in classifiers and "Typing :: Typed" in classifiers
    assert project["urls"] and all(url.startswith("https://") for url in project["urls"].values())
    assert (ROOT / "packages" / folder / "src" / PACKAGES[folder] / "py.typed").is_file()


def test_the_license_is_the_apache_2_0_text() -> None:
    text = (ROOT / "LICENSE").read_text()
    assert text.split()[:4] == ["Apache", "License", "Version", "2.0,"]
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    assert "END OF TERMS AND CONDITIONS" in text and len(text.splitlines()) == 202


def test_the_changelog_has_an_entry_for_this_version() -> None:
    text = (ROOT / "CHANGELOG.md").read_text()
    assert re.search(rf"^## {re.escape(VERSION)}\b", text, re.M), "a '## <version>' section"


def test_the_readme_links_the_guides_and_the_sdist_carries_them() -> None:
    readme = (ROOT / "README.md").read_text()
    for target in ("packages/cutile/BASICS.md", "packages/cutile-compiler/LANGUAGE.md", "CHANGELOG.md", "LICENSE"):
        assert f"]({target})" in readme, target
        assert (ROOT / target).is_file()
    with (ROOT / "packages" / "cutile" / "pyproject.toml").open("rb") as file:
        included = tomllib.load(file)["tool"]["uv"]["build-backend"]["source-include"]
    assert sorted(included) == ["BASICS.md", "LANGUAGE.md"]
    assert (ROOT / "packages/cutile/LANGUAGE.md").read_bytes() == (ROOT / "packages/cutile-compiler/LANGUAGE.md").read_bytes()


# The GPU machine takes the working tree, the repacked toolchain and the peer wheel (~53 MiB) in one
# transfer of at most 64 MiB: the tracked files must stay small.
TRACKED_BYTES_LIMIT = 5 * 1024**2


def test_the_tracked_files_stay_within_the_gpu_machines_transfer_budget() -> None:
    import shutil
    import subprocess

    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: the tracked files are unknown")
    names = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    paths = [ROOT / name for name in names.decode().split("\0") if name]
    total = sum(path.lstat().st_size for path in paths if path.exists())
    assert len(paths) > 100 and total > 1024**2  # (the listing worked)
    largest = sorted(paths, key=lambda path: path.lstat().st_size if path.exists() else 0)[-3:]
    assert total <= TRACKED_BYTES_LIMIT, (
        f"the tracked files total {total / 1024**2:.2f} MiB (limit {TRACKED_BYTES_LIMIT / 1024**2:.0f} MiB); "
        f"largest: {[str(p.relative_to(ROOT)) for p in largest]}")
