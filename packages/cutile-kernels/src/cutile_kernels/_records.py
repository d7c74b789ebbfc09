"""Where the library's `cutile.tune` records live: ``records/<arch>/<name>.json`` in the
package, one folder per arch (package data), so each GPU reads the winners of its own."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from cutile import tune

RECORDS_DIR = Path(__file__).resolve().parent / "records"


def record_path(kernel: str, source: Any, space: tune.Space, *, file: str | None = None,
                folder: Path = RECORDS_DIR) -> Path:
    """``folder/<arch>/<file or kernel>.json`` for the arch kernels run on (asking
    chooses the backend: call it when a tuner is first needed, never at import)."""
    return folder / tune.Provenance.current(kernel, source, space).arch / f"{file or kernel}.json"


class RecordTuners:
    """A kernel family's `tune.Tuner` per records folder (made by ``make`` on first
    use) and the folder its calls read (`use`: the package's by default), for the
    families whose calls ask their record for a config (`choose`)."""

    def __init__(self, make: Callable[[Path], tune.Tuner]) -> None:
        self._make = make
        self._tuners: dict[str, tune.Tuner] = {}
        self.folder = RECORDS_DIR

    def get(self, records_dir: Path | str | None = None) -> tune.Tuner:
        """The tuner whose record is in ``records_dir`` (None: the folder `use` set)."""
        folder = Path(records_dir) if records_dir is not None else self.folder
        found = self._tuners.get(str(folder))
        if found is None:
            found = self._tuners[str(folder)] = self._make(folder)
        return found

    def use(self, records_dir: Path | str | None) -> None:
        """Calls read the records of ``records_dir`` (None: the package's), read again
        from disk."""
        self.folder = Path(records_dir) if records_dir is not None else RECORDS_DIR
        self._tuners.clear()

    def choose(self, shape: tuple[int, ...], fit: Callable[[dict[str, Any]], dict[str, Any]],
               default: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """The record's (or cache's, or a search's) winner of ``shape``'s bucket fitted
        to the call, else ``default()``; a stale record is refused (`StaleRecordError`)."""
        try:
            return fit(self.get().config(shape))
        except tune.StaleRecordError:
            raise
        except tune.TuneError:  # no winner for the bucket, no search asked for
            return default()
