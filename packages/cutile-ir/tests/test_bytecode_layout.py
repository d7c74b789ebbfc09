"""The envelope of the bytecode, checked from the format's facts independently of our
reader: magic, version, sections (ids, lengths, alignment, 0xCB padding), end byte, and
the per-version layout of the types whose encoding changed."""

from __future__ import annotations

import pytest

from cutile_ir import (
    F32, I32, SUPPORTED_VERSIONS, V13_3, V13_4, Builder, Module, PartitionViewType, TensorViewType,
    Version, ptr, scalar, write_bytecode,
)
from cutile_ir._catalog import every_op_module


def _uleb(data: bytes, pos: int) -> tuple[int, int]:
    out = shift = 0
    while True:
        b = data[pos]
        pos += 1
        out |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return out, pos


def _sections(data: bytes) -> list[tuple[int, int, int, int]]:
    """(id, payload offset, payload length, alignment) of every section."""
    out = []
    pos = 12
    while True:
        sid = data[pos]
        pos += 1
        if sid == 0:
            assert pos == len(data), "the end byte must be the last byte"
            return out
        length, pos = _uleb(data, pos)
        align = 1
        if sid & 0x80:
            align, pos = _uleb(data, pos)
            while pos % align:
                assert data[pos] == 0xCB, "padding bytes are 0xCB"
                pos += 1
        out.append((sid & 0x7F, pos, length, align))
        pos += length


@pytest.mark.parametrize("version", SUPPORTED_VERSIONS, ids=str)
def test_envelope(version: Version) -> None:
    m = every_op_module(version, with_locations=True)
    if version >= V13_3:
        m.producer = "cutile-ir test"
    data = write_bytecode(m, version)
    assert data[:8] == b"\x7fTileIR\x00"
    assert (data[8], data[9], data[10], data[11]) == (version.major, version.minor, 0, 0)
    secs = _sections(data)
    ids = [s[0] for s in secs]
    assert len(ids) == len(set(ids)), "each section at most once"
    assert 1 in ids and 2 in ids, "string and function sections are required"
    expected = [6, 2, 4, 3, 5] + ([7] if version >= V13_3 else []) + [1]
    assert ids == expected
    align = {s[0]: s[3] for s in secs}
    assert align[1] == 4 and align[5] == 4 and align[2] == 8 and align[4] == 8 and align[3] == 8
    for sid, off, _, a in secs:
        assert off % a == 0, f"section {sid} payload is not aligned to {a}"
    # string table: count, pad to 4, u32 offsets, bytes back to back
    _, off, length, _ = next(s for s in secs if s[0] == 1)
    n, p = _uleb(data, off)
    while (p - off) % 4:
        p += 1
    offsets = [int.from_bytes(data[p + 4 * i:p + 4 * i + 4], "little") for i in range(n)]
    blob = data[p + 4 * n:off + length]
    strings = [blob[o:(offsets[i + 1] if i + 1 < n else len(blob))] for i, o in enumerate(offsets)]
    assert b"float_math" in strings and b"/src/kernels/catalog.py" in strings


def _view_module() -> Module:
    m = Module()
    f = m.add_entry("k", [scalar(ptr(F32))])
    b = Builder(f)
    tv = TensorViewType(F32, (None, 64), (64, 1))
    n = b.constant(8, scalar(I32))
    b.make_partition_view(b.make_tensor_view(f.args[0], [n], [], result_types=[tv]),
                          result_types=[PartitionViewType((16, 16), tv)])
    b.return_()
    return m


def _type_table(data: bytes) -> list[bytes]:
    _, off, length, _ = next(s for s in _sections(data) if s[0] == 5)
    n, p = _uleb(data, off)
    while (p - off) % 4:
        p += 1
    offsets = [int.from_bytes(data[p + 4 * i:p + 4 * i + 4], "little") for i in range(n)]
    blob = data[p + 4 * n:off + length]
    return [blob[o:(offsets[i + 1] if i + 1 < n else len(blob))] for i, o in enumerate(offsets)]


def test_type_layouts_per_version() -> None:
    i64min = (-(1 << 63)).to_bytes(8, "little", signed=True)
    for v in SUPPORTED_VERSIONS:
        types = _type_table(write_bytecode(_view_module(), v))
        f32 = types.index(b"\x07")
        ptr_t = next(t for t in types if t[0] == 12)
        tv_t = next(t for t in types if t[0] == 14)
        pv_t = next(t for t in types if t[0] == 15)
        tvi = types.index(tv_t)
        if v >= V13_4:  # pointer and tensor_view gained a flags varint
            assert ptr_t == bytes([12, 0, f32])
            assert tv_t[:3] == bytes([14, 0, f32])
        else:
            assert ptr_t == bytes([12, f32])
            assert tv_t[:2] == bytes([14, f32])
        assert i64min in tv_t  # the dynamic dimension
        tile_shape = b"\x02" + (16).to_bytes(4, "little") * 2
        dim_map = b"\x02" + (0).to_bytes(4, "little") + (1).to_bytes(4, "little")
        if v >= V13_3:  # flags first, padding value last (absent)
            assert pv_t == bytes([15, 0]) + tile_shape + bytes([tvi]) + dim_map
        else:  # has-padding varint after the dim map
            assert pv_t == bytes([15]) + tile_shape + bytes([tvi]) + dim_map + b"\x00"
