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

from cutile_compiler import _cache, _toolchain
from cutile_compiler._cache import DiskCache, LRUCache, cache_key, cached_compile
from cutile_compiler._toolchain import CompileOptions, Toolchain

KEY_INPUTS = (b"bytecode", "sm_90", "tileiras 13.4.92", ("--opt-level=3",))
HEADER = 80  # magic 8, key 32, sha256 32, length 8


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
    assert path == tmp_path / "cubin-v2" / k[:2] / f"{k}.cubin"
    data = path.read_bytes()
    assert data.startswith(b"CUTILEc\x02" + bytes.fromhex(k)) and len(data) == HEADER + 12
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left
    stats = cache.stats.snapshot()
    assert (stats.hits, stats.misses, stats.writes, stats.corrupt) == (1, 1, 1, 0)


DAMAGES: dict[str, Callable[[bytes], bytes]] = {
    "truncated to half": lambda data: data[: len(data) // 2],
    "header only": lambda data: data[:HEADER],
    "shorter than a header": lambda data: data[:10],
    "empty": lambda data: b"",
    "payload byte flipped": lambda data: data[:-3] + bytes([data[-3] ^ 0x40]) + data[-2:],
    "key byte flipped": lambda data: data[:20] + bytes([data[20] ^ 1]) + data[21:],
    "checksum byte flipped": lambda data: data[:50] + bytes([data[50] ^ 1]) + data[51:],
    "length field changed": lambda data: data[:72] + (len(data) - HEADER - 1).to_bytes(8, "little") + data[80:],
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
    entry = HEADER + 1000
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
    stale = [(tmp_path / "gone" / f"{n}.cubin", HEADER + 3000, 0) for n in range(3)]  # removed by "another process"
    listed = stale + cache.entries()
    monkeypatch.setattr(cache, "entries", lambda: listed)
    assert cache.evict(2 * (HEADER + 3000) + 100) == 3  # must not raise; the vanished files count as gone
    monkeypatch.undo()
    assert cache.size() == 2 * (HEADER + 3000) and cache.stats.evictions == 3


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


# --- an entry answers for its own key only ----------------------------------------------


def test_an_entry_copied_over_another_key_is_a_miss(tmp_path: Path) -> None:
    cache = DiskCache(tmp_path, 1 << 20)
    cache.put(key(1), b"payload of one")
    cache.put(key(2), b"payload of two")
    cache.path(key(2)).write_bytes(cache.path(key(1)).read_bytes())  # a whole, valid entry of key 1
    assert cache.get(key(2)) is None and not cache.path(key(2)).exists()
    assert cache.get(key(1)) == b"payload of one"
    assert (cache.stats.corrupt, cache.stats.hits) == (1, 1)


def test_cached_compile_never_serves_another_kernels_cubin(
    real_toolchain: Toolchain, empty_kernel: bytes, f8_kernel: bytes, tmp_path: Path
) -> None:
    cache = DiskCache(tmp_path, 1 << 24)
    empty_cubin, _ = cached_compile(empty_kernel, "sm_90", real_toolchain, cache=cache)
    f8_cubin, _ = cached_compile(f8_kernel, "sm_90", real_toolchain, cache=cache)
    assert empty_cubin != f8_cubin
    f8_key = cache_key(f8_kernel, "sm_90", real_toolchain.identity, CompileOptions().args())
    empty_key = cache_key(empty_kernel, "sm_90", real_toolchain.identity, CompileOptions().args())
    cache.path(f8_key).write_bytes(cache.path(empty_key).read_bytes())
    again, hit = cached_compile(f8_kernel, "sm_90", real_toolchain, cache=cache)
    assert again == f8_cubin and not hit and cache.stats.corrupt == 1


def test_a_whole_entry_that_is_no_cubin_of_the_kernel_is_recompiled(
    real_toolchain: Toolchain, empty_kernel: bytes, tmp_path: Path
) -> None:
    cache = DiskCache(tmp_path, 1 << 24)
    k = cache_key(empty_kernel, "sm_90", real_toolchain.identity, CompileOptions().args())
    cache.put(k, b"\x7fELF stored by an older, unchecked writer")
    cubin, hit = cached_compile(empty_kernel, "sm_90", real_toolchain, cache=cache)
    assert not hit and cubin == real_toolchain.compile(empty_kernel, "sm_90") and cache.stats.corrupt == 1
    assert cached_compile(empty_kernel, "sm_90", real_toolchain, cache=cache) == (cubin, True)


# --- a foreign tileiras cannot poison the cache -----------------------------------------


def _foreign_tileiras(real: Toolchain, root: Path, writes: bytes, monkeypatch: pytest.MonkeyPatch) -> Toolchain:
    """A toolkit whose tileiras answers --version, --help... exactly as `real` does (it runs
    it), uses its ptxas and libnvvm, and "compiles" by writing `writes`."""
    (root / "bin").mkdir(parents=True)
    (root / "lib").mkdir()
    (root / "bin" / "ptxas").symlink_to(real.ptxas)
    (root / "lib" / real.libnvvm.name).symlink_to(real.libnvvm)
    (root / "output").write_bytes(writes)
    script = root / "bin" / "tileiras"
    script.write_text(
        f'#!/bin/sh\ncase "$1" in --*) exec "{real.tileiras}" "$@";; esac\n'
        'out=""; prev=""\nfor a in "$@"; do [ "$prev" = "-o" ] && out="$a"; prev="$a"; done\n'
        f'cat "{root / "output"}" > "$out"\n'
    )
    script.chmod(0o755)
    monkeypatch.setenv("CUTILE_TILEIRAS", str(script))
    foreign = _toolchain.find_toolchain()
    monkeypatch.delenv("CUTILE_TILEIRAS")
    return foreign


def test_a_foreign_tileiras_writing_garbage_caches_nothing(
    real_toolchain: Toolchain, empty_kernel: bytes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cutile_compiler._toolchain import TileirasError

    foreign = _foreign_tileiras(real_toolchain, tmp_path / "foreign", b"\x7fELF" + bytes(200), monkeypatch)
    assert foreign.version_text == real_toolchain.version_text and foreign.identity != real_toolchain.identity
    cache = DiskCache(tmp_path / "cache", 1 << 24)
    with pytest.raises(TileirasError, match="not a usable cubin"):
        cached_compile(empty_kernel, "sm_90", foreign, cache=cache)
    assert cache.entries() == []
    cubin, hit = cached_compile(empty_kernel, "sm_90", real_toolchain, cache=cache)
    assert not hit and cubin == real_toolchain.compile(empty_kernel, "sm_90")


def test_entries_of_a_foreign_tileiras_are_not_served_to_the_real_one(
    real_toolchain: Toolchain,
    empty_kernel: bytes,
    tmp_path: Path,
    make_cubin: Callable[..., bytes],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    plausible = make_cubin(("kernel",))  # passes every check: only the key can keep it apart
    foreign = _foreign_tileiras(real_toolchain, tmp_path / "foreign", plausible, monkeypatch)
    cache = DiskCache(tmp_path / "cache", 1 << 24)
    assert cached_compile(empty_kernel, "sm_90", foreign, cache=cache) == (plausible, False)
    assert cached_compile(empty_kernel, "sm_90", foreign, cache=cache) == (plausible, True)
    cubin, hit = cached_compile(empty_kernel, "sm_90", real_toolchain, cache=cache)
    assert not hit and cubin != plausible and cubin == real_toolchain.compile(empty_kernel, "sm_90")


# --- entries that are not regular files ---------------------------------------------------


def _get_within(cache: DiskCache, k: str, seconds: float = 10.0) -> bytes | None:
    """cache.get(k), failing the test if it blocks (a FIFO read would block for ever)."""
    result: list[bytes | None] = []
    errors: list[BaseException] = []

    def read() -> None:
        try:
            result.append(cache.get(k))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"DiskCache.get blocked for {seconds} s"
    assert not errors, errors
    return result[0]


def _replace_entry(cache: DiskCache, k: str, kind: str, tmp_path: Path) -> None:
    path = cache.path(k)
    path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "link to /dev/zero":
        path.symlink_to("/dev/zero")
    elif kind == "link to a valid entry":  # the entry's own bytes, elsewhere: still not followed
        elsewhere = tmp_path / "elsewhere.cubin"
        cache.put(k, b"placeholder")
        path.rename(elsewhere)
        path.symlink_to(elsewhere)
    elif kind == "sparse 64 GiB":
        with open(path, "wb") as file:
            file.truncate(64 << 30)
    elif kind == "folder":
        path.mkdir()
    elif kind == "folder with a file":
        path.mkdir()
        (path / "file").write_bytes(b"not ours to delete")
    else:
        raise AssertionError(kind)


NOT_REGULAR = ["fifo", "link to /dev/zero", "link to a valid entry", "sparse 64 GiB", "folder", "folder with a file"]


@pytest.mark.parametrize("kind", NOT_REGULAR)
def test_entries_that_are_not_regular_files_are_misses(tmp_path: Path, kind: str) -> None:
    cache = DiskCache(tmp_path / "cache", 1 << 20)
    k = key(7)
    cache.put(k, b"payload")
    _replace_entry(cache, k, kind, tmp_path)
    assert _get_within(cache, k) is None
    assert (cache.stats.corrupt, cache.stats.hits) == (1, 0)
    path = cache.path(k)
    if kind == "folder with a file":
        assert (path / "file").exists()  # not emptied; writes fail with a warning instead
        with pytest.warns(RuntimeWarning, match="CUTILE_CACHE_DIR"):
            assert not cache.put(k, b"payload")
    else:
        assert not os.path.lexists(path)  # the link itself removed, never its target
        assert cache.put(k, b"payload") and cache.get(k) == b"payload"
    assert Path("/dev/zero").exists()


def test_a_link_counts_as_itself_in_the_cache_size(tmp_path: Path) -> None:
    cache = DiskCache(tmp_path / "cache", 1 << 20)
    cache.put(key(1), b"x" * 100)
    big = tmp_path / "big"
    with open(big, "wb") as file:
        file.truncate(1 << 30)
    cache.path(key(2)).parent.mkdir(parents=True, exist_ok=True)
    cache.path(key(2)).symlink_to(big)
    assert cache.size() < 1 << 20  # not the target's gigabyte, so nothing is evicted for it
    assert cache.get(key(1)) == b"x" * 100


def test_eviction_never_deletes_through_a_linked_folder(tmp_path: Path) -> None:
    cache = DiskCache(tmp_path / "cache", 1 << 20)
    cache.put(key(1), b"x" * 100)
    elsewhere = tmp_path / "someone-elses"
    elsewhere.mkdir()
    (elsewhere / "their.cubin").write_bytes(b"theirs")
    (cache.root / "zz").symlink_to(elsewhere, target_is_directory=True)
    cache.clear()
    assert (elsewhere / "their.cubin").read_bytes() == b"theirs" and cache.get(key(1)) is None


@pytest.mark.parametrize("kind", ["fifo", "link to /dev/zero", "sparse 64 GiB"])
def test_cached_compile_gets_past_a_non_regular_entry(
    real_toolchain: Toolchain, empty_kernel: bytes, tmp_path: Path, kind: str
) -> None:
    cache = DiskCache(tmp_path / "cache", 1 << 24)
    cubin, _ = cached_compile(empty_kernel, "sm_90", real_toolchain, cache=cache)
    k = cache_key(empty_kernel, "sm_90", real_toolchain.identity, CompileOptions().args())
    _replace_entry(cache, k, kind, tmp_path)
    result: list[tuple[bytes, bool]] = []
    thread = threading.Thread(
        target=lambda: result.append(cached_compile(empty_kernel, "sm_90", real_toolchain, cache=cache)), daemon=True
    )
    thread.start()
    thread.join(60)
    assert not thread.is_alive(), "cached_compile blocked"
    assert result == [(cubin, False)]
    assert cached_compile(empty_kernel, "sm_90", real_toolchain, cache=cache) == (cubin, True)
