"""The docs site (scripts/build_docs.sh, run by run_all.sh): its index holds every
guide page and package README, its API reference every public surface, and its
configuration with warnings as errors fails on a broken docstring or a link to a
page the site lacks (so a green build means clean docstrings and links)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
# Public modules the reference leaves out, and why (every other one needs a page).
NOT_IN_THE_REFERENCE = {
    "cutile.core": "re-exports cutile_compiler.language, whose page says so",
    "cutile.mypy_plugin": "a mypy entry point, configured as the README says",
    "cuda_core.native": "the loader of cuda_core's C helpers, used by the launch paths",
}


def _public_modules() -> set[str]:
    """Every package's top module and its public (not ``_``-prefixed) submodules."""
    found = set()
    for package in sorted((ROOT / "packages").glob("*/src/*/__init__.py")):
        found.add(package.parent.name)
        found.update(f"{package.parent.name}.{module.stem}" for module in package.parent.glob("*.py")
                     if not module.name.startswith("_"))
    return found


def _toctree_entries() -> list[str]:
    blocks = re.findall(r"^```\{toctree\}\n(.*?)^```$", (DOCS / "index.md").read_text(), re.S | re.M)
    return [line for block in blocks for line in block.splitlines() if line and not line.startswith(":")]


def test_the_index_holds_every_guide_page_and_package_readme() -> None:
    entries = set(_toctree_entries())
    wanted = {"README", "ARCHITECTURE", "BENCHMARKS", "packages/cutile-compiler/LANGUAGE",
              *(str(p.relative_to(ROOT).with_suffix("")) for p in ROOT.glob("packages/*/README.md"))}
    assert wanted <= entries, f"missing from docs/index.md: {sorted(wanted - entries)}"
    pages = [entry for entry in entries if not entry.startswith("api/")]
    assert all((ROOT / f"{page}.md").is_file() for page in pages)


def test_the_api_reference_covers_every_public_surface() -> None:
    documented = {match for page in sorted((DOCS / "api").glob("*.rst"))
                  for match in re.findall(r"^\.\. automodule:: (\S+)$", page.read_text(), re.M)}
    public = _public_modules()
    assert set(NOT_IN_THE_REFERENCE) <= public  # (no stale exclusion)
    assert documented == public - set(NOT_IN_THE_REFERENCE)
    api_pages = {entry for entry in _toctree_entries() if entry.startswith("api/")}
    assert api_pages == {f"api/{page.stem}" for page in (DOCS / "api").glob("*.rst")}


def test_the_kernel_library_page_documents_every_name_it_exports() -> None:
    import cutile_kernels

    page = (DOCS / "api" / "cutile_kernels.rst").read_text()
    missing = [name for name in cutile_kernels.__all__ if not re.search(rf"cutile_kernels\.{name}\b", page)]
    assert not missing, f"docs/api/cutile_kernels.rst lacks {missing}"


def _build(source: Path) -> subprocess.CompletedProcess[str]:
    """Sphinx as build_docs.sh runs it, with the project's conf.py, over ``source``."""
    shutil.copy(DOCS / "conf.py", source / "conf.py")
    script = (ROOT / "scripts" / "build_docs.sh").read_text()
    assert "-m sphinx -b html -E -W --keep-going" in script  # the flags this test relies on
    return subprocess.run([sys.executable, "-m", "sphinx", "-b", "html", "-E", "-W", "--keep-going", "-q",
                           str(source), str(source / "_build")], capture_output=True, text=True, cwd=source,
                          env={"PYTHONPATH": str(source), "PATH": "/usr/bin:/bin"})


@pytest.fixture
def source(tmp_path: Path) -> Path:
    pytest.importorskip("sphinx")
    pytest.importorskip("myst_parser")
    folder = tmp_path / "src"
    folder.mkdir()
    return folder


def test_a_clean_page_and_docstring_build(source: Path) -> None:
    (source / "sample_module.py").write_text(textwrap.dedent('''\
        """A module."""


        def documented(x: int) -> int:
            """Returns ``x``; see `documented`.

            Args:
                x: a number.
            """
            return x
        '''))
    (source / "index.md").write_text("# Index\n\nSee [the API](api.rst).\n\n```{toctree}\napi\n```\n")
    (source / "api.rst").write_text("API\n===\n\n.. automodule:: sample_module\n")
    result = _build(source)
    assert result.returncode == 0, result.stderr
    assert "Returns" in (source / "_build" / "api.html").read_text()


def test_a_broken_docstring_fails_the_build(source: Path) -> None:
    (source / "broken_module.py").write_text(textwrap.dedent('''\
        """A module."""


        def broken() -> None:
            """Starts a paragraph
                then indents without a blank line
            and comes back (reST: a malformed definition list).
            """
        '''))
    (source / "index.md").write_text("# Index\n\n```{toctree}\napi\n```\n")
    (source / "api.rst").write_text("API\n===\n\n.. automodule:: broken_module\n")
    result = _build(source)
    assert result.returncode != 0
    assert "docstring of broken_module.broken" in result.stderr and "[docutils]" in result.stderr


def test_a_link_to_a_page_the_site_lacks_fails_the_build(source: Path) -> None:
    (source / "index.md").write_text("# Index\n\nSee [the notes](NOTES.md).\n")
    result = _build(source)
    assert result.returncode != 0
    assert "NOTES.md" in result.stderr
