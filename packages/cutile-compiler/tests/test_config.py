"""The CUTILE_* knobs: one typed table, parsed at call time, errors that name the variable."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from cutile_compiler import _config
from cutile_compiler._config import ConfigError, Knob


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for knob in _config.KNOBS:
        monkeypatch.delenv(knob.name, raising=False)


REQUIRED = [
    "CUTILE_TILEIRAS",
    "CUDA_TOOLKIT_PATH",
    "CUTILE_CACHE_DIR",
    "CUTILE_CACHE",
    "CUTILE_CACHE_MAX_BYTES",
    "CUTILE_DUMP",
    "CUTILE_DUMP_DIR",
    "CUTILE_JIT_TIMING",
    "CUTILE_TILEIRAS_TIMEOUT",
]


def test_table_declares_every_variable_once() -> None:
    names = [knob.name for knob in _config.KNOBS]
    assert sorted(names) == sorted(REQUIRED)
    assert len(set(names)) == len(names)
    for knob in _config.KNOBS:
        assert knob.doc and "\n" not in knob.doc and knob.kind and knob.default_text


@pytest.mark.parametrize("line", ['os.environ["CUTILE_CACHE"]', "os.environ.get('CUTILE_DUMP')", 'os.getenv("CUDA_TOOLKIT_PATH")',
                                  "getenv( 'CUTILE_BACKEND', '')"])
def test_the_scan_sees_every_way_of_reading_a_variable(line: str) -> None:
    (name,) = _config.variables_read_in(line)
    assert name.startswith("CUTILE_") or name == "CUDA_TOOLKIT_PATH"


def test_no_module_reads_cutile_variables_outside_the_table() -> None:
    names = {knob.name for knob in _config.KNOBS}
    src = Path(_config.__file__).parent
    paths = sorted(src.rglob("*.py"))
    assert any(path.parent.name == "_opdefs" for path in paths)
    for path in paths:
        if path.name == "_config.py" and path.parent == src:
            continue
        for name in _config.variables_read_in(path.read_text()):
            assert name not in names and not name.startswith("CUTILE_"), f"{path.relative_to(src)} reads {name}"


@pytest.mark.parametrize(
    ("knob", "text", "expected"),
    [
        (_config.CACHE, "0", False),
        (_config.CACHE, "1", True),
        (_config.CACHE, " OFF ", False),
        (_config.CACHE, "yes", True),
        (_config.JIT_TIMING, "1", True),
        (_config.CACHE_MAX_BYTES, "1048576", 1 << 20),
        (_config.CACHE_MAX_BYTES, "512MiB", 512 << 20),
        (_config.CACHE_MAX_BYTES, "2G", 2 << 30),
        (_config.CACHE_MAX_BYTES, "1.5 kib", 1536),
        (_config.CACHE_MAX_BYTES, "1MB", 1_000_000),
        (_config.TILEIRAS_TIMEOUT, "2.5", 2.5),
        (_config.DUMP, "ast,mlir", frozenset({"ast", "mlir"})),
        (_config.DUMP, " bytecode , ir ,", frozenset({"bytecode", "ir"})),
        (_config.DUMP, "all", frozenset(_config.DUMP_STAGES)),
        (_config.DUMP, "0", frozenset()),
        (_config.TILEIRAS, "/opt/x/tileiras", Path("/opt/x/tileiras")),
        (_config.CACHE_DIR, "/tmp/cc", Path("/tmp/cc")),
    ],
)
def test_values_parse(monkeypatch: pytest.MonkeyPatch, knob: Knob[Any], text: str, expected: object) -> None:
    monkeypatch.setenv(knob.name, text)
    assert knob.get() == expected


@pytest.mark.parametrize(
    ("knob", "expected"),
    [
        (_config.CACHE, True),
        (_config.JIT_TIMING, False),
        (_config.CACHE_MAX_BYTES, 1 << 30),
        (_config.TILEIRAS_TIMEOUT, 300.0),
        (_config.DUMP, frozenset()),
        (_config.TILEIRAS, None),
        (_config.CUDA_TOOLKIT_PATH, None),
    ],
)
def test_defaults_when_unset_or_blank(monkeypatch: pytest.MonkeyPatch, knob: Knob[Any], expected: object) -> None:
    assert knob.get() == expected
    monkeypatch.setenv(knob.name, "   ")
    assert knob.get() == expected


def test_cache_dir_default_and_home_expansion(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert _config.CACHE_DIR.get() == tmp_path / ".cache" / "cutile"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert _config.CACHE_DIR.get() == tmp_path / "xdg" / "cutile"
    monkeypatch.setenv("CUTILE_CACHE_DIR", "~/elsewhere")
    assert _config.CACHE_DIR.get() == tmp_path / "elsewhere"


def test_dump_dir_default_follows_the_working_directory(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    assert _config.DUMP_DIR.get() == tmp_path / "cutile_dump"


@pytest.mark.parametrize(
    ("knob", "text", "fragment"),
    [
        (_config.CACHE, "maybe", "1 or 0"),
        (_config.JIT_TIMING, "2", "1 or 0"),
        (_config.CACHE_MAX_BYTES, "lots", "size in bytes"),
        (_config.CACHE_MAX_BYTES, "-5", "size in bytes"),
        (_config.CACHE_MAX_BYTES, "10 parsecs", "size in bytes"),
        (_config.TILEIRAS_TIMEOUT, "soon", "number of seconds"),
        (_config.TILEIRAS_TIMEOUT, "0", "positive"),
        (_config.TILEIRAS_TIMEOUT, "-1", "positive"),
        (_config.TILEIRAS_TIMEOUT, "nan", "positive"),
        (_config.TILEIRAS_TIMEOUT, "inf", "finite"),
        (_config.DUMP, "ast,ptx", "'ptx'"),
    ],
)
def test_bad_values_name_the_variable(
    monkeypatch: pytest.MonkeyPatch, knob: Knob[Any], text: str, fragment: str
) -> None:
    monkeypatch.setenv(knob.name, text)
    with pytest.raises(ConfigError) as info:
        knob.get()
    message = str(info.value)
    assert knob.name in message and repr(text) in message and fragment in message
    assert info.value.name == knob.name and info.value.value == text
    assert isinstance(info.value, ValueError)


def test_values_are_read_at_call_time(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _config.CACHE.get() is True
    monkeypatch.setenv("CUTILE_CACHE", "0")
    assert _config.CACHE.get() is False
    assert _config.CACHE.get({"CUTILE_CACHE": "1"}) is True  # an explicit mapping wins


def test_the_readme_lists_every_compiler_knob() -> None:
    # The README's table is the runtime's (cutile adds its own knobs below these);
    # every row of the compiler's part must be in it as rendered here.
    readme = Path(__file__).resolve().parents[3] / "README.md"
    shown = set(readme.read_text().splitlines())
    missing = [line for line in _config.knobs_markdown().splitlines() if line not in shown]
    assert not missing, f"{readme}'s knob table is out of date; these rows differ:\n" + "\n".join(missing)


def test_markdown_table_lists_every_knob() -> None:
    table = _config.knobs_markdown()
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    assert len(rows) == len(_config.KNOBS)
    for knob, row in zip(_config.KNOBS, rows):
        assert row.startswith(f"| `{knob.name}` |")
        cells = re.split(r"(?<!\\)\|", row)[1:-1]  # split on pipes that are not escaped
        assert len(cells) == 4 and all(cell.strip() for cell in cells)
