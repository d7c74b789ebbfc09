"""cutile's notes (the backend it chose, the native launch path missing, the compile
notes CUTILE_JIT_TIMING asks for) are records of loggers under ``cutile``: warnings,
so that Python's last-resort handler prints their text on stderr when the application
configures no logging, and one setting on the ``cutile`` logger silences them all."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import cutile
from cutile import _backend, _native, api
from cutile.core import Mut, Tensor, f32, load_tile_like

pytestmark = pytest.mark.interpreter_only

NO_GPU_NOTE = "cutile: no GPU available (no NVIDIA driver was found); running kernels on the CPU interpreter"

# A fresh process that chooses the backend on a machine without a GPU, after the
# logging set-up named by its argument; it prints the choice on stdout.
_CHOOSING_SCRIPT = """
import logging, sys
setup = sys.argv[1]
if setup == "silenced":
    logging.getLogger("cutile").setLevel(logging.ERROR)
elif setup == "handler":
    logging.getLogger("cutile").addHandler(logging.NullHandler())
elif setup == "configured":
    logging.basicConfig(format="%(levelname)s %(name)s | %(message)s")
from cutile import _backend
_backend.gpu_unavailable_reason = lambda: "no NVIDIA driver was found"
print(_backend.current(), _backend.current())
"""


def _choose_in_a_new_process(setup: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, CUTILE_BACKEND="auto")
    done = subprocess.run([sys.executable, "-c", _CHOOSING_SCRIPT, setup], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "interpreter interpreter\n"
    return done


def test_a_new_process_says_once_on_stderr_that_it_runs_on_the_interpreter() -> None:
    assert _choose_in_a_new_process("default").stderr == NO_GPU_NOTE + "\n"


@pytest.mark.parametrize("setup", ["silenced", "handler"])
def test_the_cutile_logger_silences_the_note(setup: str) -> None:
    assert _choose_in_a_new_process(setup).stderr == ""


def test_an_application_that_configures_logging_gets_the_note_as_its_record() -> None:
    assert _choose_in_a_new_process("configured").stderr == f"WARNING cutile.backend | {NO_GPU_NOTE}\n"


@pytest.fixture
def native_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_native, "module", None)
    monkeypatch.setattr(_native, "_reason", "no C compiler found")
    monkeypatch.setattr(_native, "_told", False)
    monkeypatch.setattr(_native, "enabled", lambda: True)


@pytest.fixture
def silenced() -> Iterator[None]:
    logger = logging.getLogger("cutile")
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(logging.NOTSET)


def _cutile_records(caplog: pytest.LogCaptureFixture) -> list[tuple[str, int, str]]:
    return [(r.name, r.levelno, r.getMessage()) for r in caplog.records if r.name.startswith("cutile")]


def test_the_missing_native_path_is_noted_once(native_missing: None, caplog: pytest.LogCaptureFixture) -> None:
    _native.note_if_unavailable()
    _native.note_if_unavailable()
    assert _cutile_records(caplog) == [(
        "cutile.backend", logging.WARNING,
        "cutile: the native launch path is unavailable (no C compiler found); launches take the Python path, "
        "which costs more host time per launch")]


def test_the_missing_native_path_note_is_silenced(native_missing: None, silenced: None,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    _native.note_if_unavailable()
    assert _cutile_records(caplog) == []


def test_the_backend_note_is_silenced(monkeypatch: pytest.MonkeyPatch, silenced: None,
                                      caplog: pytest.LogCaptureFixture) -> None:
    _backend.reset_for_tests(None)
    monkeypatch.setenv("CUTILE_BACKEND", "auto")
    monkeypatch.setattr(_backend, "gpu_unavailable_reason", lambda: "no NVIDIA driver was found")
    assert _backend.current() == "interpreter"
    assert _cutile_records(caplog) == []


SCALE = 2.0


@cutile.entry
def scaled(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    z.store(load_tile_like(x, z) * SCALE)


def _run_scaled(x: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    z = api.zeros([x.size], dtype=f32).partition([64])
    z, _ = scaled(z, api.from_numpy(x)).sync()
    return np.asarray(z.unpartition().to_numpy(), dtype=np.float64)


@pytest.mark.parametrize("timing, level", [("1", logging.WARNING), ("0", logging.DEBUG)])
def test_a_compile_again_says_what_changed(timing: str, level: int, monkeypatch: pytest.MonkeyPatch,
                                           caplog: pytest.LogCaptureFixture) -> None:
    global SCALE
    monkeypatch.setenv("CUTILE_JIT_TIMING", timing)
    x = np.random.default_rng(7).standard_normal(333).astype(np.float32)
    scaled.clear_cache()
    try:
        with caplog.at_level(logging.DEBUG, logger="cutile"):
            np.testing.assert_allclose(_run_scaled(x), x.astype(np.float64) * 2.0, rtol=1e-6)
            SCALE = -0.75
            np.testing.assert_allclose(_run_scaled(x), x.astype(np.float64) * -0.75, rtol=1e-6)
    finally:
        SCALE = 2.0
        scaled.clear_cache()
    notes = [(name, lvl, text) for name, lvl, text in _cutile_records(caplog) if "compiling again" in text]
    assert len(notes) == 1 and notes[0][:2] == ("cutile.compiler", level)
    assert notes[0][2].startswith("cutile: scaled: ") and "SCALE" in notes[0][2]
