"""Every module of the catalog is a valid set of kernels: tileiras compiles it for sm_80,
sm_90 and sm_100 at every bytecode version."""

from __future__ import annotations

from pathlib import Path

import pytest

from cutile_ir import (
    BF16, F16, F32, F64, I8, I16, I32, I64, SUPPORTED_VERSIONS, TF32, V13_3, AtomicRMWMode, Builder, Module,
    PartitionViewType, ScalarType, TensorViewType, Version, accepted_element_types, add_function, make_op,
    problems, ptr, scalar, tile, write_bytecode,
)
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


_ATOMIC_ELEMENTS = [I8, I16, I32, I64, F16, BF16, F32, F64, TF32]


def _atomic_module(op: str, element: ScalarType, mode: AtomicRMWMode | None) -> Module:
    """One kernel with one atomic ``op`` on tiles of ``element``, made without the builder's
    checks (so that the verifier and tileiras each judge it)."""
    m = Module()
    f = add_function(m, "k", [scalar(ptr(element))])
    b = Builder(f)
    value = b.constant(1.0 if element.is_float else 1, tile(16, element))
    order = {"memory_ordering_semantics": "relaxed", "memory_scope": "device"}
    if op == "atomic_red_view_tko":
        tv = TensorViewType(element, (1024,), (1,))
        view = b.make_partition_view(b.make_tensor_view(f.args[0], result_types=[tv]),
                                     result_types=[PartitionViewType((16,), tv)])
        atomic = make_op(op, [view, [b.constant(0, scalar(I32))], value], {**order, "mode": mode}, check=False)
    else:
        one = b.reshape(f.args[0], result_types=[tile(1, ptr(element))])
        pointers = b.broadcast(one, result_types=[tile(16, ptr(element))])
        operands = [pointers, value, value] if op == "atomic_cas_tko" else [pointers, value]
        atomic = make_op(op, operands, {**order, **({"mode": mode} if mode is not None else {})}, check=False)
    f.body.append(atomic)
    b.return_()
    return m


def test_atomic_element_types_are_what_tileiras_accepts(compiler, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The op table's element types per atomic mode (accepted_element_types, which the
    verifier checks and the compiler's typing rule reads) are exactly those tileiras compiles,
    and the verifier with an arch refuses what that target lacks (bf16 addf before sm_90)."""
    cases = [("atomic_cas_tko", None)] + [(op, mode) for op in ("atomic_rmw_tko", "atomic_red_view_tko")
                                            for mode in AtomicRMWMode]
    disagreements = []
    for op, mode in cases:
        for element in _ATOMIC_ELEMENTS:
            m = _atomic_module(op, element, mode)
            path = tmp_path / f"{op}_{getattr(mode, 'text', 'cas')}_{element}.tileirbc"
            path.write_bytes(write_bytecode(m, V13_3))
            in_table = element in accepted_element_types(op, mode)
            for arch in ("sm_80", "sm_90"):
                compiles = compiler.compile(path, arch).returncode == 0
                verifies = problems(m, arch) == []
                if not compiles == verifies or not verifies <= in_table or (arch == "sm_90" and verifies != in_table):
                    disagreements.append((op, mode, str(element), arch, compiles, in_table, verifies))
    assert disagreements == []
