"""Every op, written at every version that has it, is read by tileirdisasm, and its text
agrees line for line with our printer."""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest

from cutile_ir import SUPPORTED_VERSIONS, Version, ops_in, print_module, verify, write_bytecode
from cutile_ir._catalog import edge_cases_module, every_op_module, naming_module

KINDS = {
    "catalog": lambda v: every_op_module(v),
    "sm100": lambda v: every_op_module(v, sm100_only=True),
    "edge": edge_cases_module,
    "naming": naming_module,
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


def _float_module(seed: int):  # type: ignore[no-untyped-def]
    import random

    from cutile_ir import (
        BF16, F16, F32, F64, F8E4M3FN, F8E5M2, F8E8M0FNU, TF32, Builder, DenseElements, Module, add_function, tile,
    )

    rnd = random.Random(seed)
    m = Module()
    b = Builder(add_function(m, "floats", []))
    for t, nbytes, nbits in ((F32, 4, 32), (F64, 8, 64), (F16, 2, 16), (BF16, 2, 16), (TF32, 3, 19),
                             (F8E4M3FN, 1, 8), (F8E5M2, 1, 8), (F8E8M0FNU, 1, 8)):
        vals = [rnd.getrandbits(nbits) for _ in range(64)]
        b.constant(DenseElements(tile(64, t), b"".join(v.to_bytes(nbytes, "little") for v in vals)))
        for v in vals[:6]:
            b.constant(DenseElements(tile(2, t), v.to_bytes(nbytes, "little")))
    b.return_()
    return m


def test_float_spelling_matches_mlir(toolchain, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Random bit patterns of every float type print as MLIR prints them (APFloat rules)."""
    from cutile_ir import V13_3

    m = _float_module(7)
    path = tmp_path / "floats.tileirbc"
    path.write_bytes(write_bytecode(m, V13_3))
    res = toolchain.disasm(path)
    assert res.returncode == 0, res.stderr
    assert res.stdout == print_module(m)
