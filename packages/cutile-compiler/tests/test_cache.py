"""Compile caches: the in-memory LRU and the checksummed, size-capped, shared disk cache."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from cutile_compiler import _cache
from cutile_compiler._cache import DiskCache, LRUCache, cache_key, cached_compile
from cutile_compiler._toolchain import CompileOptions, Toolchain

KEY_INPUTS = (b"bytecode", "sm_90", "tileiras 13.4.92", ("--opt-level=3",))


def key(n: int) -> str:
    return cache_key(b"bytecode %d" % n, "sm_90", "v", ())


# --- in memory -----------------------------------------------------------------------


def test_lru_hits_misses_and_order() -> None:
    cache: LRUCache[tuple[str, int], str] = LRUCache(maxsize=2)
    assert cache.get(("a", 1)) is None
    cache.put(("a", 1), "A")
    cache.put(("b", 2), "B")
    assert cache.get(("a", 1)) == "A"  # a is now the most recently used
    cache.put(("c", 3), "C")  # evicts b
    assert ("b", 2) not in cache and ("a", 1) in cache and len(cache) == 2
    assert cache.keys() == [("a", 1), ("c", 3)]
    assert (cache.stats.hits, cache.stats.misses, cache.stats.evictions) == (1, 1, 1)


def test_lru_stores_none_values_and_defaults() -> None:
    cache: LRUCache[str, None] = LRUCache(maxsize=4)
    marker = object()
    assert cache.get("k", marker) is marker
    cache.put("k", None)
    assert cache.get("k", marker) is None
    assert cache.pop("k") is None and "k" not in cache


def test_lru_get_or_create_calls_the_factory_once() -> None:
    cache: LRUCache[int, list[int]] = LRUCache(maxsize=8)
    calls: list[int] = []

    def make() -> list[int]:
        calls.append(1)
        return [len(calls)]

    first = cache.get_or_create(7, make)
    assert cache.get_or_create(7, make) is first and calls == [1]


def test_lru_is_thread_safe() -> None:
    cache: LRUCache[int, int] = LRUCache(maxsize=16)
    errors: list[BaseException] = []

    def work(seed: int) -> None:
        try:
            for i in range(2000):
                k = (seed * 7 + i) % 40
                value = cache.get_or_create(k, lambda k=k: k * k)  # type: ignore[misc]
                assert value == k * k
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors and len(cache) <= 16


@pytest.mark.parametrize("maxsize", [0, -1, True, 2.5])
def test_lru_size_must_be_positive(maxsize: object) -> None:
    with pytest.raises(ValueError, match="maxsize"):
        LRUCache(maxsize=maxsize)  # type: ignore[arg-type]


# --- keys ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "changed",
    [
        (b"bytecodf", "sm_90", "tileiras 13.4.92", ("--opt-level=3",)),
        (b"bytecode", "sm_100", "tileiras 13.4.92", ("--opt-level=3",)),
        (b"bytecode", "sm_90", "tileiras 13.4.93", ("--opt-level=3",)),
        (b"bytecode", "sm_90", "tileiras 13.4.92", ("--opt-level=2",)),
        (b"bytecode", "sm_90", "tileiras 13.4.92", ("--opt-level=3", "--lineinfo")),
        (b"bytecodesm_90", "", "tileiras 13.4.92", ("--opt-level=3",)),  # same bytes, other split
    ],
)
def test_key_depends_on_every_input(changed: tuple[bytes, str, str, tuple[str, ...]]) -> None:
    base = cache_key(*KEY_INPUTS)
    assert len(base) == 64 and int(base, 16) >= 0
    assert cache_key(*KEY_INPUTS) == base
    assert cache_key(*changed) != base


@pytest.mark.parametrize("bad", ["", "../../etc/passwd", "AB" * 32, "g" * 64])
def test_keys_are_checked(tmp_path: Path, bad: str) -> None:
    with pytest.raises(ValueError, match="64 lowercase hex"):
        DiskCache(tmp_path, 1 << 20).get(bad)


# --- disk ----------------------------------------------------------------------------


def test_disk_round_trip_and_layout(tmp_path: Path) -> None:
    cache = DiskCache(tmp_path, 1 << 20)
    k = key(1)
    assert cache.get(k) is None
    assert cache.put(k, b"\x7fELF payload")
    assert cache.get(k) == b"\x7fELF payload"
    path = cache.path(k)
    assert path == tmp_path / "cubin-v1" / k[:2] / f"{k}.cubin"
    assert path.read_bytes().startswith(b"CUTILEc\x01") and path.stat().st_size == 48 + 12
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left
    stats = cache.stats.snapshot()
    assert (stats.hits, stats.misses, stats.writes, stats.corrupt) == (1, 1, 1, 0)


DAMAGES: dict[str, Callable[[bytes], bytes]] = {
    "truncated to half": lambda data: data[: len(data) // 2],
    "header only": lambda data: data[:48],
    "shorter than a header": lambda data: data[:10],
    "empty": lambda data: b"",
    "payload byte flipped": lambda data: data[:-3] + bytes([data[-3] ^ 0x40]) + data[-2:],
    "checksum byte flipped": lambda data: data[:20] + bytes([data[20] ^ 1]) + data[21:],
    "magic changed": lambda data: b"X" + data[1:],
    "bytes appended": lambda data: data + b"junk",
}


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_corrupt_entries_are_dropped(tmp_path: Path, damage: str) -> None:
    cache = DiskCache(tmp_path, 1 << 20)
    k = key(2)
    cache.put(k, b"\x7fELF" + bytes(range(200)))
    path = cache.path(k)
    path.write_bytes(DAMAGES[damage](path.read_bytes()))
    assert cache.get(k) is None
    assert not path.exists()
    assert (cache.stats.corrupt, cache.stats.misses) == (1, 1)


@pytest.mark.parametrize("damage", ["truncated to half", "payload byte flipped"])
def test_corrupt_entry_is_rebuilt_by_cached_compile(
    real_toolchain: Toolchain, empty_kernel: bytes, tmp_path: Path, damage: str
) -> None:
    cache = DiskCache(tmp_path, 1 << 24)
    cubin, hit = cached_compile(empty_kernel, "sm_90", real_toolchain, cache=cache)
    assert not hit and cubin.startswith(b"\x7fELF")
    (path, _, _), = cache.entries()
    path.write_bytes(DAMAGES[damage](path.read_bytes()))
    again, hit = cached_compile(empty_kernel, "sm_90", real_toolchain, cache=cache)
    assert not hit and again.startswith(b"\x7fELF") and cache.stats.corrupt == 1
    third, hit = cached_compile(empty_kernel, "sm_90", real_toolchain, cache=cache)
    assert hit and third == again


def _age(cache: DiskCache, k: str, seconds_ago: float) -> None:
    stamp = time.time() - seconds_ago
    os.utime(cache.path(k), (stamp, stamp))


def test_size_cap_evicts_least_recently_used(tmp_path: Path) -> None:
    entry = 48 + 1000
    cache = DiskCache(tmp_path, 3 * entry)
    for n in range(3):
        assert cache.put(key(n), bytes([n]) * 1000)
        _age(cache, key(n), 100 - n)  # key(0) oldest
    assert cache.get(key(0)) is not None  # a hit makes key(0) the youngest
    assert cache.put(key(3), b"\x03" * 1000)
    assert cache.get(key(1)) is None  # the least recently used went
    assert all(cache.get(key(n)) is not None for n in (0, 2, 3))
    assert cache.size() <= 3 * entry and cache.stats.evictions == 1


def test_entry_larger_than_the_cap_is_not_stored(tmp_path: Path) -> None:
    cache = DiskCache(tmp_path, 500)
    assert not cache.put(key(1), b"x" * 1000)
    assert cache.get(key(1)) is None and cache.entries() == []


def test_eviction_tolerates_files_vanishing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = DiskCache(tmp_path, 100_000)
    for n in range(5):
        cache.put(key(n), b"x" * 3000)
    stale = [(tmp_path / "gone" / f"{n}.cubin", 3048, 0) for n in range(3)]  # removed by "another process"
    listed = stale + cache.entries()
    monkeypatch.setattr(cache, "entries", lambda: listed)
    assert cache.evict(6100) == 3  # must not raise; the vanished files count as gone
    monkeypatch.undo()
    assert cache.size() == 2 * 3048 and cache.stats.evictions == 3


def test_temporary_files_are_ignored_then_cleaned(tmp_path: Path) -> None:
    cache = DiskCache(tmp_path, 1 << 20)
    cache.put(key(1), b"payload")
    folder = cache.path(key(1)).parent
    fresh, stale = folder / ".tmp-fresh.part", folder / ".tmp-stale.part"
    fresh.write_bytes(b"half")
    stale.write_bytes(b"half")
    os.utime(stale, (time.time() - 7200, time.time() - 7200))
    assert [p for p, _, _ in cache.entries()] == [cache.path(key(1))]
    assert fresh.exists() and not stale.exists()


def test_unwritable_cache_warns_once_and_compiles(
    real_toolchain: Toolchain, empty_kernel: bytes, tmp_path: Path
) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache folder should be")
    cache = DiskCache(blocker, 1 << 20)
    with pytest.warns(RuntimeWarning, match="CUTILE_CACHE_DIR") as record:
        for _ in range(2):
            cubin, hit = cached_compile(empty_kernel, "sm_80", real_toolchain, cache=cache)
            assert cubin.startswith(b"\x7fELF") and not hit
    assert len(record) == 1 and cache.stats.errors == 4  # two failed reads, two failed writes


# --- the environment's cache -----------------------------------------------------------


def test_default_cache_follows_the_knobs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUTILE_CACHE_DIR", str(tmp_path / "here"))
    monkeypatch.setenv("CUTILE_CACHE_MAX_BYTES", "2MiB")
    cache = _cache.default_disk_cache()
    assert cache is not None and cache.directory == tmp_path / "here" and cache.max_bytes == 2 << 20
    assert _cache.default_disk_cache() is cache  # one object: statistics accumulate
    monkeypatch.setenv("CUTILE_CACHE", "0")
    assert _cache.default_disk_cache() is None


def test_cached_compile_hits_and_misses(
    real_toolchain: Toolchain, empty_kernel: bytes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUTILE_CACHE_DIR", str(tmp_path / "c"))
    first, hit = cached_compile(empty_kernel, "sm_90", real_toolchain)
    assert not hit and first.startswith(b"\x7fELF")
    second, hit = cached_compile(empty_kernel, "sm_90", real_toolchain)
    assert hit and second == first
    _, hit = cached_compile(empty_kernel, "sm_100", real_toolchain)
    assert not hit
    _, hit = cached_compile(empty_kernel, "sm_90", real_toolchain, CompileOptions(opt_level=1))
    assert not hit
    cache = _cache.default_disk_cache()
    assert cache is not None and (cache.stats.hits, cache.stats.misses, cache.stats.writes) == (1, 3, 3)
    assert len(cache.entries()) == 3


def test_cache_off(real_toolchain: Toolchain, empty_kernel: bytes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUTILE_CACHE_DIR", str(tmp_path / "c"))
    monkeypatch.setenv("CUTILE_CACHE", "0")
    for _ in range(2):
        cubin, hit = cached_compile(empty_kernel, "sm_90", real_toolchain)
        assert cubin.startswith(b"\x7fELF") and not hit
    assert not (tmp_path / "c").exists()


def test_cached_compile_checks_the_arch_even_on_a_hit(
    real_toolchain: Toolchain, empty_kernel: bytes, tmp_path: Path
) -> None:
    from cutile_compiler._toolchain import ArchError

    with pytest.raises(ArchError):
        cached_compile(empty_kernel, "sm_90a", real_toolchain, cache=DiskCache(tmp_path, 1 << 20))


# --- several processes -------------------------------------------------------------------

STRESS = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from cutile_compiler._cache import DiskCache, cache_key
    root, seed = Path(sys.argv[1]), int(sys.argv[2])
    cache = DiskCache(root, 40_000)  # small: writers keep evicting each other
    shared = cache_key(b"shared", "sm_90", "v", ())
    valid = {bytes([n]) * (1000 + 500 * n) for n in range(8)}
    for i in range(300):
        cache.put(shared, bytes([(seed + i) % 8]) * (1000 + 500 * ((seed + i) % 8)))
        got = cache.get(shared)
        assert got is None or got in valid, len(got)
        own = cache_key(b"own %d %d" % (seed, i % 20), "sm_90", "v", ())
        cache.put(own, bytes([seed]) * 3000)
        mine = cache.get(own)
        assert mine is None or mine == bytes([seed]) * 3000
    assert cache.stats.corrupt == 0, cache.stats
    print("ok", cache.stats.hits)
    """
)

COMPILE = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from cutile_compiler._cache import DiskCache, cached_compile
    cache = DiskCache(Path(sys.argv[1]), 1 << 24)
    bytecode = bytes.fromhex(sys.argv[2])
    results = [cached_compile(bytecode, "sm_90", cache=cache) for _ in range(3)]
    assert all(cubin.startswith(b"\\x7fELF") for cubin, _ in results)
    assert results[-1][1], "the third call must hit"
    print("ok", [hit for _, hit in results])
    """
)


def _run_together(script: str, args: list[list[str]]) -> list[str]:
    procs = [
        subprocess.Popen([sys.executable, "-c", script, *a], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for a in args
    ]
    outputs = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        outputs.append(out)
    return outputs


def test_concurrent_writers_and_readers(tmp_path: Path) -> None:
    outputs = _run_together(STRESS, [[str(tmp_path), str(seed)] for seed in range(4)])
    assert all(out.startswith("ok") for out in outputs)
    cache = DiskCache(tmp_path, 40_000)
    assert cache.size() <= 40_000 + 4 * 5000  # at most one in-flight write per process above the cap
    for path, _, _ in cache.entries():
        assert cache.get(path.stem) is not None  # every entry left is whole


def test_concurrent_cached_compiles(real_toolchain: Toolchain, empty_kernel: bytes, tmp_path: Path) -> None:
    outputs = _run_together(COMPILE, [[str(tmp_path), empty_kernel.hex()] for _ in range(4)])
    assert all(out.startswith("ok") for out in outputs)
    assert len(DiskCache(tmp_path, 1 << 24).entries()) == 1
