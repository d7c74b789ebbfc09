"""The design documents say what is: measurements, with their date and GPU, live in
BENCHMARKS.md, and ARCHITECTURE.md states the design without its history."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DESIGN_DOCS = [ROOT / "README.md", ROOT / "ARCHITECTURE.md", *sorted(ROOT.glob("packages/*/README.md")),
               *sorted(ROOT.glob("packages/*/LANGUAGE.md")), *sorted(ROOT.glob("packages/*/BASICS.md"))]

DATE = re.compile(r"\b\d{4}-\d{2}-\d{2}\b")
# A measured figure: a time per something, a throughput, a ratio to another system.
FIGURE = re.compile(r"\d\s*(µs|us|ms|ns)\b|TFLOP|GB/s|\d\.\d+\s*×")
HISTORY = re.compile(r"\bnow\b|\bno longer\b|\bused to\b|\bas before\b|\banymore\b|\bwas\b|\bwere\b", re.IGNORECASE)


def _hits(pattern: re.Pattern[str], path: Path) -> list[str]:
    return [f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
            for n, line in enumerate(path.read_text().splitlines(), 1) if pattern.search(line)]


def test_the_documents_are_found() -> None:
    assert len(DESIGN_DOCS) >= 9 and all(p.is_file() for p in DESIGN_DOCS)


@pytest.mark.parametrize("path", DESIGN_DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_design_document_is_dated(path: Path) -> None:
    assert _hits(DATE, path) == [], "dated statements belong in BENCHMARKS.md"


def test_architecture_quotes_no_measurement() -> None:
    assert _hits(FIGURE, ROOT / "ARCHITECTURE.md") == [], "point to BENCHMARKS.md for figures"


def test_architecture_tells_no_history() -> None:
    assert _hits(HISTORY, ROOT / "ARCHITECTURE.md") == [], "say what the code is, not what it was"


def test_the_rules_catch_what_they_are_for() -> None:
    assert DATE.search("Measured (H200, 2026-11-30)") and not DATE.search("bytecode 13.1-13.4")
    assert FIGURE.search("0.9 µs per launch") and FIGURE.search("0.83–0.94× ct.launch")
    assert FIGURE.search("40 TFLOP/s") and not FIGURE.search("a 1×1×1 block")
    assert HISTORY.search("the driver call now runs") and HISTORY.search("it was a cycle")
    assert not HISTORY.search("nowhere known")
