"""Every module of the catalog is a valid set of kernels: tileiras compiles it for sm_80,
sm_90 and sm_100 at every bytecode version."""

from __future__ import annotations

from pathlib import Path

import pytest

from cutile_ir import SUPPORTED_VERSIONS, V13_3, Version, problems, write_bytecode
from cutile_ir._catalog import edge_cases_module, every_op_module, naming_module

ARCHS = ["sm_80", "sm_90", "sm_100"]


@pytest.mark.parametrize("build", [every_op_module, naming_module], ids=["catalog", "naming"])
@pytest.mark.parametrize("version", SUPPORTED_VERSIONS, ids=str)
def test_catalog_compiles(toolchain, tmp_path: Path, version: Version, build) -> None:  # type: ignore[no-untyped-def]
    m = build(version)
    path = tmp_path / f"catalog_{version}.tileirbc"
    path.write_bytes(write_bytecode(m, version))
    for arch in ARCHS:
        assert problems(m, arch) == []
        res = toolchain.compile(path, arch)
        assert res.returncode == 0, f"{arch}: {res.stderr}"
        assert path.with_suffix(f".{arch}.cubin").stat().st_size > 0


def test_scaled_mma_compiles_for_sm100_only(toolchain, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "mma_scaled.tileirbc"
    path.write_bytes(write_bytecode(every_op_module(V13_3, sm100_only=True), V13_3))
    assert toolchain.compile(path, "sm_100").returncode == 0
    res = toolchain.compile(path, "sm_90")
    assert res.returncode != 0 and "f8E8M0FNU" in res.stderr


@pytest.mark.parametrize("version", SUPPORTED_VERSIONS, ids=str)
def test_edge_cases_compile_where_the_target_has_the_types(toolchain, tmp_path: Path, version: Version) -> None:  # type: ignore[no-untyped-def]
    m = edge_cases_module(version)
    path = tmp_path / f"edge_{version}.tileirbc"
    path.write_bytes(write_bytecode(m, version))
    for arch in ("sm_90", "sm_100"):
        assert problems(m, arch) == []
        res = toolchain.compile(path, arch)
        assert res.returncode == 0, f"{arch}: {res.stderr}"
    # f8 constants: our verifier rejects sm_80 before tileiras does
    assert any("element type f8E4M3FN needs sm_89 or newer, target is sm_80" in p for p in problems(m, "sm_80"))
    res = toolchain.compile(path, "sm_80")
    assert res.returncode != 0 and "f8E4M3FN" in res.stderr


def test_verifier_knows_sm100_only_features() -> None:
    m = every_op_module(V13_3, sm100_only=True)
    msgs = problems(m, "sm_90")
    assert any("'mmaf_scaled': needs sm_100 or newer, target is sm_90" in p for p in msgs), msgs
    assert problems(m, "sm_100") == []
