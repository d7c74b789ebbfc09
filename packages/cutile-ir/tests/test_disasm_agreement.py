"""Every op, written at every version that has it, is read by tileirdisasm, and its text
agrees line for line with our printer."""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest

from cutile_ir import SUPPORTED_VERSIONS, Version, ops_in, print_module, verify, write_bytecode
from cutile_ir._catalog import edge_cases_module, every_op_module

KINDS = {
    "catalog": lambda v: every_op_module(v),
    "sm100": lambda v: every_op_module(v, sm100_only=True),
    "edge": edge_cases_module,
}


def _ops_used(m) -> set[str]:  # type: ignore[no-untyped-def]
    names = {op.name for op in m.walk()}
    if m.globals:
        names.add("global")
    if m.functions:
        names.update({"entry", "module"})
    return names


@pytest.mark.parametrize("version", SUPPORTED_VERSIONS, ids=str)
def test_catalog_covers_every_op(version: Version) -> None:
    used = _ops_used(every_op_module(version)) | _ops_used(every_op_module(version, sm100_only=True))
    want = {op.name for op in ops_in(version)}
    assert want - used == set(), f"ops of {version} missing from the catalog"
    assert used - want == set(), f"catalog uses ops that {version} lacks"


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("version", SUPPORTED_VERSIONS, ids=str)
def test_disasm_agrees_with_printer(toolchain, tmp_path: Path, version: Version, kind: str) -> None:  # type: ignore[no-untyped-def]
    m = KINDS[kind](version)
    verify(m)
    path = tmp_path / f"catalog_{version}.tileirbc"
    path.write_bytes(write_bytecode(m, version))
    res = toolchain.disasm(path)
    assert res.returncode == 0, res.stderr
    ours = print_module(m)
    diff = "\n".join(difflib.unified_diff(res.stdout.splitlines(), ours.splitlines(), "tileirdisasm", "cutile_ir",
                                          lineterm="", n=1))
    assert res.stdout == ours, diff


def test_op_counts_per_version() -> None:
    assert [len(ops_in(v)) for v in SUPPORTED_VERSIONS] == [92, 93, 100, 105]
