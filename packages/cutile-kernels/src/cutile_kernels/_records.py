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
    """A kernel family's `tune.Tuner` per records folder (made on first use, its record
    ``<folder>/<arch>/<name>.json``) and the folder its calls read (`use`: the
    package's by default), for the families whose calls ask their record for a config
    (`choose`). A search on first use (``CUTILE_TUNE=1``) is bounded to two minutes a
    shape; a stale record is refused with a warning at call time."""

    def __init__(self, name: str, space: tune.Space, setup: Callable[..., Any], *, source: Callable[[], str],
                 reference: Callable[..., Any], bucket: Callable[[Any], str],
                 prune: Callable[[Any], bool]) -> None:
        self._name, self._space, self._setup, self._source = name, space, setup, source
        self._options: dict[str, Any] = {"reference": reference, "bucket": bucket, "on_stale": "warn",
                                         "search_options": {"prune": prune, "budget": 120.0}}
        self._tuners: dict[str, tune.Tuner] = {}
        self.folder = RECORDS_DIR

    def _make(self, folder: Path) -> tune.Tuner:
        source = self._source()  # (hashed when first needed: inspect is slow at import)
        return tune.Tuner(self._name, self._space, self._setup, source=source,
                          record=record_path(self._name, source, self._space, folder=folder), **self._options)

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

    def winner(self, shape: tuple[int, ...]) -> tune.Winner | None:
        """The known winner of ``shape``'s bucket with its measured time, or None (a
        stale record is refused with a warning, as at call time)."""
        return self.get().winner(shape)
