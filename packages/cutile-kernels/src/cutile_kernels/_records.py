"""Where the library's `cutile.tune` records live: ``records/<arch>/<name>.json`` in the
package, one folder per arch (package data), so each GPU reads the winners of its own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cutile import tune

RECORDS_DIR = Path(__file__).resolve().parent / "records"


def record_path(kernel: str, source: Any, space: tune.Space, *, file: str | None = None,
                folder: Path = RECORDS_DIR) -> Path:
    """``folder/<arch>/<file or kernel>.json`` for the arch kernels run on (asking
    chooses the backend: call it when a tuner is first needed, never at import)."""
    return folder / tune.Provenance.current(kernel, source, space).arch / f"{file or kernel}.json"
