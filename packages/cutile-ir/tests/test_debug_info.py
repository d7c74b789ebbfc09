"""The optional debug section: source locations reach tileiras' error messages and
tileirdisasm -g, and survive a round trip."""

from __future__ import annotations

from pathlib import Path

from cutile_ir import (
    F32, F8E4M3FN, F8E8M0FNU, V13_3, Builder, Location, Module, add_function, differences, read_bytecode,
    tile, write_bytecode,
)


def _scaled_mma(with_locs: bool) -> Module:
    m = Module()
    f = add_function(m, "k", [], loc=Location("/home/u/kern.py", 3, 1) if with_locs else None)
    b = Builder(f)
    with b.location(Location("/home/u/kern.py", 7, 9) if with_locs else None):
        a = b.constant(0x38, tile((128, 64), F8E4M3FN))
        bb = b.constant(0x38, tile((64, 128), F8E4M3FN))
        acc = b.constant(0.0, tile((128, 128), F32))
        sa = b.constant(127, tile((128, 2), F8E8M0FNU))
        sb = b.constant(127, tile((2, 128), F8E8M0FNU))
    b.mmaf_scaled(a, bb, acc, sa, sb)
    b.return_()
    return m


def test_tileiras_errors_point_at_user_code(toolchain, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "k.tileirbc"
    path.write_bytes(write_bytecode(_scaled_mma(True), V13_3))
    res = toolchain.compile(path, "sm_90")
    assert res.returncode != 0
    assert '"/home/u/kern.py":7:9' in res.stderr, res.stderr
    dis = toolchain.disasm(path, debug=True)
    assert dis.returncode == 0, dis.stderr
    assert 'loc("/home/u/kern.py":7:9)' in dis.stdout and 'name = "k"' in dis.stdout


def test_no_locations_no_debug_section() -> None:
    plain = write_bytecode(_scaled_mma(False), V13_3)
    with_locs = write_bytecode(_scaled_mma(True), V13_3)
    assert b"kern.py" not in plain and b"kern.py" in with_locs
    assert len(with_locs) > len(plain)


def test_locations_round_trip() -> None:
    m = _scaled_mma(True)
    m2 = read_bytecode(write_bytecode(m, V13_3))
    assert differences(m, m2) == []
    assert m2.functions[0].loc == Location("/home/u/kern.py", 3, 1)
    assert m2.functions[0].body.ops[0].loc == Location("/home/u/kern.py", 7, 9)
    assert m2.functions[0].body.ops[5].loc is None


def test_op_locations_without_function_location() -> None:
    m = _scaled_mma(True)
    m.functions[0].loc = None
    m2 = read_bytecode(write_bytecode(m, V13_3))
    assert differences(m, m2) == []


def test_printer_can_show_locations() -> None:
    from cutile_ir import print_module

    text = print_module(_scaled_mma(True), locations=True)
    assert 'constant <f32: 0.000000e+00> : tile<128x128xf32> loc("/home/u/kern.py":7:9)' in text
    assert text.rstrip().endswith('} loc("/home/u/kern.py":3:1)')
    assert "loc(" not in print_module(_scaled_mma(True))
