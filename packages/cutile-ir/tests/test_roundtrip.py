"""The reader: our output reads back into an equal module, write(read(b)) == b, and
writing is byte-for-byte deterministic."""

from __future__ import annotations

import pytest

from cutile_ir import (
    F32, I32, SUPPORTED_VERSIONS, V13_4, Builder, BytecodeError, Module, PartitionViewType, TensorViewType, Version,
    VersionError, add_function, bytecode_version, differences, print_module, ptr, read_bytecode, scalar, tile,
    write_bytecode,
)
from cutile_ir._catalog import edge_cases_module, every_op_module, naming_module


@pytest.mark.parametrize("locations", [False, True], ids=["noloc", "loc"])
@pytest.mark.parametrize("version", SUPPORTED_VERSIONS, ids=str)
def test_round_trip(version: Version, locations: bool) -> None:
    for sm100 in (False, True):
        m = every_op_module(version, sm100_only=sm100, with_locations=locations)
        b = write_bytecode(m, version)
        assert bytecode_version(b) == version
        m2 = read_bytecode(b)
        assert differences(m, m2) == []
        assert write_bytecode(m2, version) == b
        assert print_module(m2) == print_module(m)


@pytest.mark.parametrize("version", SUPPORTED_VERSIONS, ids=str)
def test_round_trip_edge_cases(version: Version) -> None:
    for m in (edge_cases_module(version), naming_module(version)):
        b = write_bytecode(m, version)
        m2 = read_bytecode(b)
        assert differences(m, m2) == []
        assert write_bytecode(m2, version) == b


@pytest.mark.parametrize("version", SUPPORTED_VERSIONS, ids=str)
def test_deterministic(version: Version) -> None:
    a = write_bytecode(every_op_module(version), version)
    b = write_bytecode(every_op_module(version), version)
    assert a == b


def test_differences_reports_a_change() -> None:
    m = every_op_module(V13_4)
    m2 = read_bytecode(write_bytecode(m, V13_4))
    m2.functions[0].body.ops[2].attributes["rounding_mode"] = "zero"
    assert any("attributes" in d for d in differences(m, m2))


@pytest.mark.parametrize("inbounds", [[False], [True], [False, False], [True, False]], ids=str)
@pytest.mark.parametrize("version", SUPPORTED_VERSIONS, ids=str)
def test_inbounds_round_trips(version: Version, inbounds: list[bool]) -> None:
    """An inbounds array reads back as it was made (all-False is the default, ``()``),
    and is writable before 13.4 exactly when no entry is set."""
    m = Module()
    f = add_function(m, "k", [scalar(ptr(F32))])
    b = Builder(f)
    n = len(inbounds)
    tv = TensorViewType(F32, (64,) * n, (1,) * n)
    pv = b.make_partition_view(b.make_tensor_view(f.args[0], result_types=[tv]),
                               result_types=[PartitionViewType((16,) * n, tv)])
    idx = [b.constant(0, scalar(I32))] * n
    t, tok = b.load_view_tko(pv, idx, memory_ordering_semantics="weak", inbounds=inbounds)
    b.store_view_tko(t, pv, idx, memory_ordering_semantics="weak", token=tok, inbounds=inbounds)
    b.return_()
    if version < V13_4 and any(inbounds):
        with pytest.raises(VersionError, match="attribute 'inbounds'"):
            write_bytecode(m, version)
        return
    data = write_bytecode(m, version)
    m2 = read_bytecode(data)
    assert differences(m, m2) == []
    assert write_bytecode(m2, version) == data
    assert ("inbounds = [" in print_module(m2)) == any(inbounds)


def _fpowi_module() -> Module:
    m = Module()
    f = add_function(m, "k", [])
    b = Builder(f)
    b.fpowi(b.constant(2.0, tile(4, F32)), b.constant(3, tile(4, I32)))
    b.return_()
    return m


def test_reader_rejects_op_newer_than_file() -> None:
    data = bytearray(write_bytecode(_fpowi_module(), V13_4))
    data[9] = 3  # claim 13.3: the layout of tiles is the same, fpowi is not in 13.3
    with pytest.raises(VersionError, match="'fpowi' needs bytecode 13.4"):
        read_bytecode(bytes(data))


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda b: b"\x7fTileIS\x00" + b[8:], "bad magic"),
        (lambda b: b[:8] + bytes([13, 9]) + b[10:], "unsupported bytecode version 13.9"),
        (lambda b: b[:-1], "unexpected end"),
        (lambda b: b + b"\x00", "data after the end section"),
    ],
    ids=["magic", "version", "truncated", "trailing"],
)
def test_reader_rejects_malformed(mutate, message: str) -> None:  # type: ignore[no-untyped-def]
    data = write_bytecode(_fpowi_module(), V13_4)
    with pytest.raises((BytecodeError, VersionError), match=message):
        read_bytecode(mutate(data))


def test_reader_rejects_unknown_opcode() -> None:
    data = bytearray(write_bytecode(_fpowi_module(), V13_4))
    i = data.index(bytes([0x79]))  # fpowi's opcode inside the body
    data[i] = 0x7F
    with pytest.raises(BytecodeError, match="unknown opcode 0x7f"):
        read_bytecode(bytes(data))
