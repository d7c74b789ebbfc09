"""A randomized corruption campaign over the disk cubin cache (hypothesis).

Entries are damaged the ways a shared cache meets: bytes flipped, files truncated or
extended, header fields rewritten, entries copied or swapped between keys, entries
replaced by things that are not regular files (FIFOs, links to ``/dev/zero``, to other
entries or to nothing, sparse huge files, folders), deleted, rewritten. The property,
checked after every step: a read returns the exact payload stored under that key, or
a miss; never an exception, never a hang, never another key's payload. Then the cache
must still work: a put and a read of every key, and (with the real tileiras) compiles
that return exactly the cubin tileiras makes.
"""

from __future__ import annotations

import os
import shutil
import signal
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cutile_compiler._cache import _HEADER, DiskCache, cache_key, cached_compile
from cutile_compiler._toolchain import CompileOptions, Toolchain

KEYS = 4
NON_REGULAR = (
    "fifo", "link to /dev/zero", "link to another entry", "dangling link", "sparse 64 GiB", "folder", "folder with a file",
)
# A folder with a file in it, in an entry's place, is never emptied: writes there fail (and warn).
pytestmark = pytest.mark.filterwarnings("ignore:cutile cannot write its compile cache:RuntimeWarning")


@contextmanager
def _bounded(seconds: float) -> Iterator[None]:
    """Fails the test instead of hanging when a step takes longer than `seconds`."""

    def expire(signum: int, frame: Any) -> None:
        raise AssertionError(f"a cache operation took more than {seconds} s (it blocked)")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif os.path.lexists(path):
        path.unlink()


def _small_regular_file(path: Path) -> bool:
    try:
        info = path.lstat()
    except FileNotFoundError:
        return False
    return stat.S_ISREG(info.st_mode) and info.st_size < 1 << 20


def _damage(cache: DiskCache, keys: list[str], step: tuple[Any, ...], scratch: Path) -> None:
    """Applies one drawn step to the cache folder, as another process or a fault might."""
    kind, index = step[0], step[1]
    path = cache.path(keys[index])
    if kind in ("flip", "truncate", "extend", "header", "copy", "swap") and not _small_regular_file(path):
        return  # nothing this helper can damage in place there (it reads what it edits)
    if kind == "flip":
        data = bytearray(path.read_bytes())
        if data:
            data[step[2] % len(data)] ^= step[3]
            path.write_bytes(bytes(data))
    elif kind == "truncate":
        data = path.read_bytes()
        path.write_bytes(data[: step[2] % (len(data) + 1)])
    elif kind == "extend":
        with open(path, "ab") as file:
            file.write(step[2])
    elif kind == "header":
        data = bytearray(path.read_bytes())
        offset = step[2] % _HEADER.size
        data[offset : offset + len(step[3])] = step[3]
        path.write_bytes(bytes(data))
    elif kind in ("copy", "swap"):
        other = cache.path(keys[step[2]])
        if other == path:
            return
        if kind == "copy":
            _remove(other)
            other.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, other)
        elif _small_regular_file(other):
            swap = scratch / "swap"
            os.replace(path, swap)
            os.replace(other, path)
            os.replace(swap, other)
    elif kind == "replace":
        _remove(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        what = step[2]
        if what == "fifo":
            os.mkfifo(path)
        elif what == "link to /dev/zero":
            path.symlink_to("/dev/zero")
        elif what == "link to another entry":
            path.symlink_to(cache.path(keys[(index + 1) % len(keys)]))
        elif what == "dangling link":
            path.symlink_to(scratch / "nothing-here")
        elif what == "sparse 64 GiB":
            with open(path, "wb") as file:
                file.truncate(64 << 30)
        elif what == "folder":
            path.mkdir()
        elif what == "folder with a file":
            path.mkdir()
            (path / "file").write_bytes(b"x")
    elif kind == "delete":
        _remove(path)
    elif kind == "rewrite":
        pass  # done by the caller, which knows the payload


def _steps(keys: int) -> st.SearchStrategy[tuple[Any, ...]]:
    index = st.integers(0, keys - 1)
    return st.one_of(
        st.tuples(st.just("flip"), index, st.integers(0, 1 << 16), st.integers(1, 255)),
        st.tuples(st.just("truncate"), index, st.integers(0, 1 << 16)),
        st.tuples(st.just("extend"), index, st.binary(min_size=1, max_size=64)),
        st.tuples(st.just("header"), index, st.integers(0, _HEADER.size - 1), st.binary(min_size=1, max_size=16)),
        st.tuples(st.just("copy"), index, index),
        st.tuples(st.just("swap"), index, index),
        st.tuples(st.just("replace"), index, st.sampled_from(NON_REGULAR)),
        st.tuples(st.just("delete"), index),
        st.tuples(st.just("rewrite"), index),
    )


def _check_every_key(cache: DiskCache, keys: list[str], payloads: dict[str, bytes]) -> None:
    for k in keys:
        with _bounded(10.0):
            got = cache.get(k)
        assert got is None or got == payloads[k], f"key {k[:8]} returned {len(got)} bytes that are not its own"


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sizes=st.lists(st.integers(0, 3000), min_size=KEYS, max_size=KEYS),
    steps=st.lists(_steps(KEYS), min_size=1, max_size=12),
)
def test_a_read_is_its_own_payload_or_a_miss(sizes: list[int], steps: list[tuple[Any, ...]]) -> None:
    with tempfile.TemporaryDirectory(prefix="cutile-campaign-") as folder:
        root = Path(folder)
        cache = DiskCache(root / "cache", 1 << 20)
        keys = [cache_key(b"kernel %d" % n, "sm_90", "identity", ()) for n in range(KEYS)]
        # Distinct payloads of similar shape: a swapped entry would pass for its neighbour's.
        payloads = {k: bytes([n + 1]) * (8 + size) for n, (k, size) in enumerate(zip(keys, sizes))}
        for k in keys:
            assert cache.put(k, payloads[k])
        for step in steps:
            _damage(cache, keys, step, root)
            if step[0] == "rewrite" and not cache.path(keys[step[1]]).is_dir():
                cache.put(keys[step[1]], payloads[keys[step[1]]])
            _check_every_key(cache, keys, payloads)
        with _bounded(10.0):
            cache.entries()  # eviction's listing copes with whatever is there
        for k in keys:  # the cache still works: what is put is read back (a folder in the way stays a miss)
            if cache.path(k).is_dir() and not cache.path(k).is_symlink():
                continue
            assert cache.put(k, payloads[k])
            assert cache.get(k) == payloads[k]


class _Cubins(dict[bytes, bytes]):
    def __repr__(self) -> str:  # hypothesis prints the arguments of a failing example
        return f"<the cubins of {len(self)} kernels>"


@pytest.fixture
def reference_cubins(real_toolchain: Toolchain, empty_kernel: bytes, f8_kernel: bytes) -> dict[bytes, bytes]:
    """Bytecode -> the cubin tileiras makes of it for sm_90 (tileiras is deterministic)."""
    return _Cubins({code: real_toolchain.compile(code, "sm_90") for code in (empty_kernel, f8_kernel)})


# A folder the campaign leaves where an entry goes makes the write fail: the cache
# warns once and the compile goes on without it, which is what this test checks.
@pytest.mark.filterwarnings("ignore:cutile cannot write its compile cache:RuntimeWarning")
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(steps=st.lists(_steps(2), min_size=1, max_size=6))
def test_compiles_keep_returning_the_right_cubin(
    real_toolchain: Toolchain, reference_cubins: dict[bytes, bytes], steps: list[tuple[Any, ...]]
) -> None:
    bytecodes = list(reference_cubins)
    with tempfile.TemporaryDirectory(prefix="cutile-campaign-") as folder:
        root = Path(folder)
        cache = DiskCache(root / "cache", 1 << 24)
        keys = [cache_key(code, "sm_90", real_toolchain.identity, CompileOptions().args()) for code in bytecodes]
        for code in bytecodes:
            assert cached_compile(code, "sm_90", real_toolchain, cache=cache) == (reference_cubins[code], False)
        for step in steps:
            _damage(cache, keys, step, root)
        for code in bytecodes:
            with _bounded(60.0):
                cubin, _ = cached_compile(code, "sm_90", real_toolchain, cache=cache)
            assert cubin == reference_cubins[code]
            path = cache.path(keys[bytecodes.index(code)])
            if not path.is_dir() or path.is_symlink():  # a folder in the way: compiled, not stored
                assert cached_compile(code, "sm_90", real_toolchain, cache=cache) == (reference_cubins[code], True)
