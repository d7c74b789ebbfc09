"""Corrupted bytecode never crashes the reader or the verifier: it reads, or it raises a
BytecodeError / VersionError that says where."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from cutile_ir import V13_3, BytecodeError, VersionError, problems, read_bytecode, write_bytecode
from cutile_ir._catalog import edge_cases_module

DATA = write_bytecode(edge_cases_module(V13_3), V13_3)

#: Where an error is: an offset, a section, a type record, or the header's version.
WHERE = re.compile(r"offset \d+|\w+ section|^type \d+: |unsupported bytecode version")


@settings(max_examples=500, deadline=None)
@given(st.lists(st.tuples(st.integers(0, len(DATA) - 1), st.integers(0, 255)), min_size=1, max_size=4))
def test_corrupted_bytes(edits: list[tuple[int, int]]) -> None:
    data = bytearray(DATA)
    for pos, val in edits:
        data[pos] = val
    try:
        m = read_bytecode(bytes(data))
    except (BytecodeError, VersionError) as e:
        assert WHERE.search(str(e)), str(e)
        return
    problems(m)  # must not raise


@settings(max_examples=100, deadline=None)
@given(st.integers(0, len(DATA) - 1))
def test_truncated(n: int) -> None:
    try:
        read_bytecode(DATA[:n])
    except (BytecodeError, VersionError) as e:
        assert WHERE.search(str(e)), str(e)
        return
    raise AssertionError("a truncated file was accepted")
