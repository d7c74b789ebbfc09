"""Every module of the catalog is a valid set of kernels: tileiras compiles it for sm_80,
sm_90 and sm_100 at every bytecode version."""

from __future__ import annotations

from pathlib import Path

import pytest

from cutile_ir import SUPPORTED_VERSIONS, V13_3, Version, write_bytecode
from cutile_ir._catalog import every_op_module

ARCHS = ["sm_80", "sm_90", "sm_100"]


@pytest.mark.parametrize("version", SUPPORTED_VERSIONS, ids=str)
def test_catalog_compiles(toolchain, tmp_path: Path, version: Version) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / f"catalog_{version}.tileirbc"
    path.write_bytes(write_bytecode(every_op_module(version), version))
    for arch in ARCHS:
        res = toolchain.compile(path, arch)
        assert res.returncode == 0, f"{arch}: {res.stderr}"
        assert path.with_suffix(f".{arch}.cubin").stat().st_size > 0


def test_scaled_mma_compiles_for_sm100_only(toolchain, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "mma_scaled.tileirbc"
    path.write_bytes(write_bytecode(every_op_module(V13_3, sm100_only=True), V13_3))
    assert toolchain.compile(path, "sm_100").returncode == 0
    res = toolchain.compile(path, "sm_90")
    assert res.returncode != 0 and "f8E8M0FNU" in res.stderr
