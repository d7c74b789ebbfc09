"""The runtime's knobs: declared like the compiler's, and the README's table of every
variable cutile reads is exactly the rendered one."""

from __future__ import annotations

from pathlib import Path

import pytest

from cutile import _config
from cutile_compiler._config import ConfigError, variables_read_in

pytestmark = pytest.mark.interpreter_only


def test_every_variable_is_declared_once() -> None:
    names = [knob.name for knob in _config.KNOBS]
    assert len(set(names)) == len(names)
    assert {"CUTILE_BACKEND", "CUTILE_CHECKED", "CUTILE_TILEIRAS"} <= set(names)


def test_no_runtime_module_reads_a_variable_outside_the_table() -> None:
    src = Path(_config.__file__).parent
    for path in sorted(src.rglob("*.py")):
        for name in variables_read_in(path.read_text()):
            assert not name.startswith("CUTILE_"), f"{path.name} reads {name} directly; declare a Knob"


@pytest.mark.parametrize(("text", "expected"), [("Interpreter", "interpreter"), ("gpu", "gpu"), ("  ", "auto")])
def test_backend_values(monkeypatch: pytest.MonkeyPatch, text: str, expected: str) -> None:
    monkeypatch.setenv("CUTILE_BACKEND", text)
    assert _config.BACKEND.get() == expected


def test_bad_values_name_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUTILE_BACKEND", "cuda")
    with pytest.raises(ConfigError, match=r"CUTILE_BACKEND.*'cuda'.*gpu, interpreter"):
        _config.BACKEND.get()
    monkeypatch.setenv("CUTILE_CHECKED", "maybe")
    with pytest.raises(ConfigError, match=r"CUTILE_CHECKED.*1 or 0"):
        _config.CHECKED.get()
    monkeypatch.setenv("CUTILE_CHECKED", "true")
    assert _config.CHECKED.get() is True


def test_the_readme_shows_the_table() -> None:
    readme = Path(__file__).resolve().parents[3] / "README.md"
    table = _config.knobs_markdown()
    text = readme.read_text()
    shown = set(text.splitlines())
    missing = [line for line in table.splitlines() if line not in shown]
    assert table in text, f"{readme}'s knob table is out of date; these rows differ:\n" + "\n".join(missing)
