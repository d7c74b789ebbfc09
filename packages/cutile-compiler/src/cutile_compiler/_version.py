"""cutile_compiler's version, ``cutile_compiler.__version__``, read on first use: the installed
distribution's metadata, or, for a source tree imported without being installed (the
packages' ``src/`` folders on ``PYTHONPATH``, as ``scripts/run_all.sh --system`` runs
them), the version its ``pyproject.toml`` declares."""

from __future__ import annotations

from pathlib import Path

DISTRIBUTION = "cutile-compiler"
UNKNOWN = "0+unknown"


def package_version() -> str:
    """The version of `DISTRIBUTION`, or `UNKNOWN` when neither its metadata nor its
    source tree says."""
    from importlib import metadata  # tens of milliseconds to import: only when asked

    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return source_tree_version(Path(__file__).resolve().parents[2] / "pyproject.toml") or UNKNOWN


def source_tree_version(pyproject: Path) -> str | None:
    """The version ``pyproject`` declares for `DISTRIBUTION`; None if it is missing,
    unreadable or another project's."""
    import tomllib

    try:
        with pyproject.open("rb") as file:
            project = tomllib.load(file).get("project", {})
    except (OSError, tomllib.TOMLDecodeError):
        return None
    version = project.get("version")
    return str(version) if project.get("name") == DISTRIBUTION and isinstance(version, str) else None
