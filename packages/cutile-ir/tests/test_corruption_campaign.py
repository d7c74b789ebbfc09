"""A randomized corruption campaign over the bytecode reader, the verifier and the printer.

Valid modules (the catalog at every version, and the random modules of
``test_random_modules``) are written, corrupted (bit flips, byte edits, truncation,
insertion, deletion, varints rewritten to large values, section lengths edited) and read
back. The property, for every input: ``read_bytecode`` returns a module or raises an
``IRError``; ``verify`` of a module it returns passes or raises an ``IRError``;
``print_module`` of a module that verifies never raises, and of one that does not raises
nothing but an ``IRError``; and all of that takes a bounded time (a count or length read
from the input is checked against the bytes left before anything is sized by it).
"""

from __future__ import annotations

import importlib.util
import random
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cutile_ir import SUPPORTED_VERSIONS, IRError, Module, print_module, read_bytecode, verify, write_bytecode
from cutile_ir._catalog import edge_cases_module, every_op_module, naming_module

_spec = importlib.util.spec_from_file_location("_cutile_ir_random_modules",
                                               Path(__file__).with_name("test_random_modules.py"))
assert _spec is not None and _spec.loader is not None
_random_modules = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_random_modules)
random_modules: Callable[..., st.SearchStrategy[Module]] = _random_modules.modules

@pytest.fixture(autouse=True)
def _bounded_memory() -> Iterator[None]:
    """A regression that sizes an allocation by a corrupted count fails here with a
    MemoryError instead of exhausting the machine: the address space is capped at 2 GiB
    over what the process has mapped, while these tests run (Linux)."""
    try:
        import resource
        with open("/proc/self/statm") as fh:
            mapped = int(fh.read().split()[0]) * resource.getpagesize()
    except (ImportError, OSError):
        yield
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = mapped + (2 << 30)
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    if soft != resource.RLIM_INFINITY:
        cap = min(cap, soft)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


#: The catalog written at every version (once with locations, for the debug section): the
#: inputs the corruptions start from.
CATALOG = [write_bytecode(make(v), v) for v in SUPPORTED_VERSIONS
           for make in (every_op_module, edge_cases_module, naming_module)]
CATALOG += [write_bytecode(every_op_module(v, with_locations=True), v) for v in SUPPORTED_VERSIONS]

#: Seconds one input may take to read, verify and print (the uncorrupted every-op module
#: takes about 10 ms, the slowest corrupted ones about 0.2 s on a busy 2-core machine).
TIME_BOUND = 2.0

EDIT_KINDS = ["flip", "set", "truncate", "insert", "delete", "varint", "section_length"]

#: Values a rewritten varint takes: the edges of one byte, of 32 and of 64 bits.
BIG = [0x7F, 0x80, 0xFF, 0x3FFF, 1 << 20, (1 << 31) - 1, 1 << 32, 1 << 40, (1 << 63) - 1, (1 << 64) - 1]


def varint(x: int) -> bytes:
    out = bytearray()
    while x >= 0x80:
        out.append((x & 0x7F) | 0x80)
        x >>= 7
    out.append(x)
    return bytes(out)


def read_varint(data: bytes | bytearray, pos: int) -> tuple[int, int]:
    """The varint at ``pos`` (cut short at the end of ``data``) and its length in bytes."""
    value, n = 0, 0
    while pos + n < len(data):
        b = data[pos + n]
        value |= (b & 0x7F) << (7 * n)
        n += 1
        if b < 0x80:
            break
    return value, max(n, 1)


def section_length_positions(data: bytes | bytearray) -> list[int]:
    """Where each section's length varint is (the header is 12 bytes, then id, length, ...)."""
    out: list[int] = []
    pos = 12
    while pos < len(data) and data[pos] != 0:
        sid = data[pos]
        pos += 1
        out.append(pos)
        length, n = read_varint(data, pos)
        pos += n
        if sid & 0x80:  # aligned: an alignment varint, then padding up to it
            align, n = read_varint(data, pos)
            pos += n
            if align > 1:
                pos += -pos % align
        pos += length
    return out


def corrupt(data: bytes, rng: random.Random) -> tuple[bytes, list[str]]:
    """``data`` with one to four random edits applied in turn, and what they were."""
    d = bytearray(data)
    done: list[str] = []
    for _ in range(rng.randint(1, 4)):
        if not d:
            break
        kind = rng.choice(EDIT_KINDS)
        pos = rng.randrange(len(d))
        if kind == "flip":
            bit = rng.randrange(8)
            d[pos] ^= 1 << bit
            done.append(f"flip bit {bit} at {pos}")
        elif kind == "set":
            d[pos] = rng.randrange(256)
            done.append(f"set {pos} to {d[pos]:#x}")
        elif kind == "truncate":
            del d[pos:]
            done.append(f"truncate at {pos}")
        elif kind == "insert":
            extra = bytes(rng.randrange(256) for _ in range(rng.randint(1, 4)))
            d[pos:pos] = extra
            done.append(f"insert {extra.hex()} at {pos}")
        elif kind == "delete":
            n = rng.randint(1, 8)
            del d[pos:pos + n]
            done.append(f"delete {n} at {pos}")
        elif kind == "varint":
            x = rng.choice(BIG)
            d[pos:pos + read_varint(d, pos)[1]] = varint(x)
            done.append(f"varint {x:#x} at {pos}")
        else:  # a section's length: a little off, or far too large
            starts = section_length_positions(d)
            if starts:
                at = rng.choice(starts)
                old, n = read_varint(d, at)
                new = rng.choice(BIG) if rng.random() < 0.3 else max(0, old + rng.randint(-8, 8))
                d[at:at + n] = varint(new)
                done.append(f"section length at {at}: {old} -> {new}")
    return bytes(d), done


def check(data: bytes, edits: list[str]) -> None:
    """The property: only IRErrors escape, a verified module prints, all in bounded time
    (``edits``, what was done to a valid module, is in the message of any failure)."""
    try:
        _check(data)
    except Exception as e:
        raise AssertionError(f"after {edits}: {type(e).__name__}: {e}") from e


def _check(data: bytes) -> None:
    start = time.perf_counter()
    try:
        m = read_bytecode(data)
    except IRError:
        m = None
    if m is not None:
        try:
            verify(m)
            verified = True
        except IRError:
            verified = False
        try:
            print_module(m, locations=True)  # the full text: every op with its location
        except IRError:
            assert not verified, "print_module raised on a module that verifies"
    elapsed = time.perf_counter() - start
    assert elapsed < TIME_BOUND, f"took {elapsed:.2f} s"


#: Hypothesis picks the module and a seed; the edits are drawn from ``random`` with that
#: seed, so each example is an independent, uniformly placed corruption (hypothesis's own
#: draws cluster at small values, which here means the header) and a failure names its
#: seed and edits. Derandomized and database-free: CI runs the same inputs every time.
CAMPAIGN = settings(max_examples=1500, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
seeds = st.integers(0, (1 << 64) - 1)


@CAMPAIGN
@given(st.sampled_from(CATALOG), seeds)
def test_corrupted_catalog_modules(data: bytes, seed: int) -> None:
    check(*corrupt(data, random.Random(seed)))


@settings(CAMPAIGN, max_examples=150)
@given(random_modules(), st.sampled_from(SUPPORTED_VERSIONS), seeds)
def test_corrupted_random_modules(m: Module, version: Any, seed: int) -> None:
    check(*corrupt(write_bytecode(m, version), random.Random(seed)))


def test_section_lengths_are_found() -> None:
    """The section-length edit finds every section of a catalog module (so it edits lengths)."""
    data = CATALOG[0]
    starts = section_length_positions(data)
    assert len(starts) >= 4
    for at in starts:
        assert data[at - 1] & 0x7F in range(1, 8)  # a section id precedes each length
