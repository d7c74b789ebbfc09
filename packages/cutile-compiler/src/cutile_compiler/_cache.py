"""Compile caches: a bounded in-memory LRU (cutile keeps its per-kernel IR, cubins and
loaded launchers in them) and an on-disk cubin store.

The disk cache is content-addressed: an entry's name is the sha256 of everything the
cubin depends on (the bytecode, the arch, the tileiras flags, and the tools' identity,
`Toolchain.identity`: their ``--version`` text and the path, size and mtime of
tileiras, ptxas and libnvvm). It lives in a versioned folder under
``CUTILE_CACHE_DIR`` (entries of another format are in another folder: they simply
miss) and is safe to share between processes without locks:

- a writer writes a temporary file in the entry's folder and renames it into place
  (``os.replace`` is atomic), so a reader sees a whole entry or none;
- each entry starts with a header (magic, the entry's full key, sha256 of the
  payload, its length) that a reader verifies: a read returns the payload stored
  under that key or a miss, never another key's payload. A corrupt, truncated,
  misplaced or oversized entry, or one that is not a regular file (a link, a FIFO, a
  device), is deleted where it can be and counts as a miss, so it is rebuilt; entries
  are opened without following links and read no further than the header says, and
  a damaged entry never surfaces as an exception;
- the folder is kept under ``CUTILE_CACHE_MAX_BYTES`` by deleting the least recently
  used entries (a hit refreshes an entry's mtime); files vanishing under an eviction,
  because another process evicted them first, are expected.

`DiskCache` stores other kinds of entry with the same guarantees in their own
subfolders (``layout``): the warm-start manifests of `_warm` and tileiras's recorded
probe answers (`_toolchain`).

``CUTILE_CACHE=0`` turns the disk cache off. `cached_compile` puts it together with
`Toolchain.compile`, which checks a cubin (`_cubin.cubin_problem`) before it is stored;
a hit is checked again before it is returned.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import stat
import struct
import tempfile
import threading
import time
import warnings
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Generic, TypeVar, overload

from cutile_compiler import _config
from cutile_compiler._errors import ArgumentError
from cutile_compiler._cubin import cubin_problem
from cutile_compiler._toolchain import CompileOptions, Locations, Toolchain, _entry_names, find_toolchain

__all__ = [
    "CACHE_KINDS",
    "CacheStats",
    "DiskCache",
    "LRUCache",
    "cache_key",
    "cached_compile",
    "default_disk_cache",
    "disk_caches",
]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
D = TypeVar("D")


@dataclass
class CacheStats:
    """Counters of one cache (for tests and ``CUTILE_JIT_TIMING``).

    Attributes:
        hits: lookups that found a valid entry.
        misses: lookups that did not (corrupt entries included).
        corrupt: entries found damaged, deleted (disk cache only).
        writes: entries stored.
        evictions: entries removed to respect the size cap.
        errors: disk operations that failed and were skipped (unwritable folder...).
    """

    hits: int = 0
    misses: int = 0
    corrupt: int = 0
    writes: int = 0
    evictions: int = 0
    errors: int = 0

    def snapshot(self) -> CacheStats:
        """A copy of the counters now."""
        return replace(self)


# --- in memory -----------------------------------------------------------------------


class LRUCache(Generic[K, V]):
    """A small thread-safe least-recently-used map, e.g. specialization key -> loaded kernel.

    Args:
        maxsize: how many entries it keeps; the least recently used goes first.
    """

    def __init__(self, maxsize: int = 1024) -> None:
        if isinstance(maxsize, bool) or not isinstance(maxsize, int) or maxsize < 1:
            raise ArgumentError(f"LRUCache maxsize must be a positive int, got {maxsize!r}")
        self.maxsize = maxsize
        self.stats = CacheStats()
        self._data: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    @overload
    def get(self, key: K) -> V | None: ...
    @overload
    def get(self, key: K, default: D) -> V | D: ...
    def get(self, key: K, default: object = None) -> object:
        """The value for `key` (now the most recently used), or `default`."""
        with self._lock:
            try:
                value = self._data[key]
            except KeyError:
                self.stats.misses += 1
                return default
            self._data.move_to_end(key)
            self.stats.hits += 1
            return value

    def put(self, key: K, value: V) -> None:
        """Stores `value` under `key`, evicting the least recently used beyond `maxsize`."""
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            self.stats.writes += 1
            while len(self._data) > self.maxsize:
                self._data.popitem(last=False)
                self.stats.evictions += 1

    def get_or_create(self, key: K, factory: Callable[[], V]) -> V:
        """The value for `key`, made by `factory()` and stored on a miss.

        `factory` runs without the lock held (it may compile for a while); if two
        threads race, the first value stored wins and both get it.
        """
        with self._lock:
            if key in self._data:
                self._data.move_to_end(key)
                self.stats.hits += 1
                return self._data[key]
            self.stats.misses += 1
        value = factory()
        with self._lock:
            if key in self._data:
                return self._data[key]
        self.put(key, value)
        return value

    def pop(self, key: K) -> V | None:
        """Removes `key`; returns its value, or None if absent."""
        with self._lock:
            return self._data.pop(key, None)

    def clear(self) -> None:
        """Removes every entry (the statistics stay)."""
        with self._lock:
            self._data.clear()

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._data

    def __len__(self) -> int:
        with self._lock:
            return len(self._data)

    def keys(self) -> list[K]:
        """The keys, least recently used first."""
        with self._lock:
            return list(self._data)


# --- on disk -------------------------------------------------------------------------

LAYOUT = "cubin-v2"
"""The cache's subfolder; bump it whenever the entry format or key derivation changes."""

_MAGIC = b"CUTILEc\x02"
_HEADER = struct.Struct("<8s32s32sQ")  # magic, the entry's key, sha256 of the payload, payload length
_SUFFIX = ".cubin"
_TEMP_PREFIX = ".tmp-"
_STALE_TEMP_S = 3600.0  # a temporary file this old was left by a writer that died
_KEY = re.compile(r"[0-9a-f]{64}")


def cache_key(bytecode: bytes, arch: str, toolchain_identity: str, options: Sequence[str]) -> str:
    """The sha256 (hex) naming the cubin of `bytecode` for `arch` with these tools and flags.

    `toolchain_identity` is `Toolchain.identity` (which binaries, not only which version).
    """
    digest = hashlib.sha256(LAYOUT.encode() + b"\0")
    for part in (bytes(bytecode), arch.encode(), toolchain_identity.encode(), "\0".join(options).encode()):
        digest.update(len(part).to_bytes(8, "little"))  # length-prefixed: no two inputs collide
        digest.update(part)
    return digest.hexdigest()


def _wrap(key: str, payload: bytes) -> bytes:
    return _HEADER.pack(_MAGIC, bytes.fromhex(key), hashlib.sha256(payload).digest(), len(payload)) + payload


_OPEN_FLAGS = (
    os.O_RDONLY
    | getattr(os, "O_NOFOLLOW", 0)  # a link in place of an entry is refused, not followed
    | getattr(os, "O_NONBLOCK", 0)  # a FIFO in place of an entry opens at once (then is refused)
    | getattr(os, "O_BINARY", 0)
)


class _Damaged(Exception):
    """An entry that is not a whole, regular file of its own key (internal to `DiskCache.get`)."""


def _read_exactly(fd: int, size: int, what: str) -> bytes:
    """The next `size` bytes of `fd`; `_Damaged` if it ends before."""
    chunks: list[bytes] = []
    left = size
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise _Damaged(f"shorter than {what}")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _read_entry(path: Path, key: str, max_payload: int, valid: Callable[[bytes], bool] | None) -> bytes:
    """The payload of the entry at `path` if it is a whole regular file stored under `key`
    (and `valid` accepts it).

    Raises FileNotFoundError when there is none, `_Damaged` when it is not a whole entry
    of `key`; reads at most its header and the payload length the header gives, which is
    never above `max_payload`.
    """
    if not stat.S_ISREG(os.lstat(path).st_mode):
        raise _Damaged("not a regular file")
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # became a link since the lstat
            raise _Damaged("a symbolic link") from None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):  # replaced between the lstat and the open
            raise _Damaged("not a regular file")
        if not _HEADER.size <= info.st_size <= _HEADER.size + max_payload:
            raise _Damaged(f"{info.st_size} bytes long")
        magic, stored_key, digest, length = _HEADER.unpack(_read_exactly(fd, _HEADER.size, "a header"))
        if magic != _MAGIC:
            raise _Damaged("bad magic")
        if stored_key != bytes.fromhex(key):
            raise _Damaged("stored under another key")
        if info.st_size != _HEADER.size + length:
            raise _Damaged(f"{info.st_size} bytes long, its header says {_HEADER.size + length}")
        payload = _read_exactly(fd, length, "its header says")
        if os.read(fd, 1):
            raise _Damaged("longer than its header says")  # grew since the fstat
        if hashlib.sha256(payload).digest() != digest:
            raise _Damaged("checksum mismatch")
        if valid is not None and not valid(payload):
            raise _Damaged("whole, but refused by its reader")
        try:
            os.utime(fd if os.utime in os.supports_fd else path)  # a hit makes it the most recently used
        except OSError:
            pass  # evicted meanwhile, or a read-only cache: the hit is still good
        return payload
    finally:
        os.close(fd)


def _unlink_quietly(path: str | Path) -> bool:
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False  # someone else removed it first: fine
    except OSError:
        return False
    return True


class DiskCache:
    """A folder of checksummed cubins named by `cache_key`, capped in size.

    Args:
        directory: the cache folder (``CUTILE_CACHE_DIR``); entries go in its
            `LAYOUT` subfolder, fanned out by the key's first two characters.
        max_bytes: the cap on the entries' total size (``CUTILE_CACHE_MAX_BYTES``).
        layout, suffix: the subfolder and the entries' file suffix (another kind of
            entry, such as the warm-start manifests of `_warm`, has its own).
        max_entry_bytes: the largest payload a read accepts (default: the cap).
    """

    def __init__(self, directory: Path, max_bytes: int, *, layout: str = LAYOUT, suffix: str = _SUFFIX,
                 max_entry_bytes: int | None = None) -> None:
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0:
            raise ArgumentError(f"DiskCache max_bytes must be a non-negative int, got {max_bytes!r}")
        self.directory = Path(directory)
        self.root = self.directory / layout
        self.suffix = suffix
        self.max_bytes = max_bytes
        self.max_entry_bytes = max_bytes if max_entry_bytes is None else min(max_entry_bytes, max_bytes)
        self.stats = CacheStats()
        self._lock = threading.Lock()
        self._warned = False

    def __repr__(self) -> str:
        return f"DiskCache({str(self.directory)!r}, max_bytes={self.max_bytes})"

    def path(self, key: str) -> Path:
        """Where the entry of `key` lives."""
        if not isinstance(key, str) or not _KEY.fullmatch(key):
            raise ArgumentError(f"a disk cache key is 64 lowercase hex digits (see cache_key), got {key!r}")
        return self.root / key[:2] / (key + self.suffix)

    def _count(self, **deltas: int) -> None:
        with self._lock:
            for name, delta in deltas.items():
                setattr(self.stats, name, getattr(self.stats, name) + delta)

    def get(self, key: str, valid: Callable[[bytes], bool] | None = None) -> bytes | None:
        """The payload stored under `key`, or None (missing, unreadable or corrupt).

        A corrupt entry (or one whose payload `valid` refuses) is deleted so that the
        next `put` rebuilds it; a hit refreshes the entry's mtime, which is what
        eviction orders by.
        """
        path = self.path(key)
        try:
            payload = _read_entry(path, key, max(min(self.max_bytes - _HEADER.size, self.max_entry_bytes), 0), valid)
        except FileNotFoundError:
            self._count(misses=1)
            return None
        except _Damaged:
            if not _unlink_quietly(path):  # unlink removes a link itself, never its target
                try:
                    os.rmdir(path)  # an empty folder in its place; one with files in it stays
                except OSError:
                    pass
            self._count(misses=1, corrupt=1)
            return None
        except OSError:  # unreadable (permissions, I/O error): leave it, compile without it
            self._count(misses=1, errors=1)
            return None
        self._count(hits=1)
        return payload

    def put(self, key: str, payload: bytes) -> bool:
        """Stores `payload` under `key` atomically, then trims the cache to its cap.

        Returns False, without raising, when the entry could not be written (an
        unwritable folder, a full disk) or is larger than the cap by itself.
        """
        path = self.path(key)
        data = _wrap(key, bytes(payload))
        if len(data) > self.max_bytes or len(payload) > self.max_entry_bytes:
            return False
        temp: str | None = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, temp = tempfile.mkstemp(prefix=_TEMP_PREFIX, suffix=".part", dir=path.parent)
            with os.fdopen(fd, "wb") as file:
                file.write(data)
            os.replace(temp, path)  # atomic: readers see the old entry, or none, or this one
        except OSError as exc:
            if temp is not None:
                _unlink_quietly(temp)
            self._count(errors=1)
            self._warn(exc)
            return False
        self._count(writes=1)
        self.evict()
        return True

    def _warn(self, exc: OSError) -> None:
        if not self._warned:
            self._warned = True
            warnings.warn(
                f"cutile cannot write its compile cache in {self.root} ({exc}); compiling without it. "
                "Set CUTILE_CACHE_DIR to a writable folder, or CUTILE_CACHE=0 to turn the cache off.",
                RuntimeWarning,
                stacklevel=3,
            )

    def entries(self) -> list[tuple[Path, int, int]]:
        """(path, size in bytes, mtime in ns) of every entry, least recently used first.

        Also deletes temporary files left behind by writers that died mid-write.
        """
        found: list[tuple[int, str, int]] = []
        now = time.time()
        try:
            # A linked folder is not ours: eviction must never delete files through it.
            folders = [entry.path for entry in os.scandir(self.root) if entry.is_dir(follow_symlinks=False)]
        except FileNotFoundError:
            return []
        for folder in folders:
            try:
                items = list(os.scandir(folder))
            except FileNotFoundError:
                continue
            for item in items:
                try:
                    info = item.stat(follow_symlinks=False)  # a link counts as itself, not as its target
                except FileNotFoundError:
                    continue  # evicted or replaced by another process just now
                if item.name.startswith(_TEMP_PREFIX):
                    if now - info.st_mtime > _STALE_TEMP_S:
                        _unlink_quietly(item.path)
                elif item.name.endswith(self.suffix):
                    found.append((info.st_mtime_ns, item.path, info.st_size))
        found.sort()
        return [(Path(path), size, mtime) for mtime, path, size in found]

    def size(self) -> int:
        """The entries' total size in bytes."""
        return sum(size for _, size, _ in self.entries())

    def evict(self, max_bytes: int | None = None) -> int:
        """Deletes least recently used entries until the total is at most the cap.

        Returns how many entries this call deleted.
        """
        cap = self.max_bytes if max_bytes is None else max_bytes
        entries = self.entries()
        total = sum(size for _, size, _ in entries)
        removed = 0
        for path, size, _ in entries:
            if total <= cap:
                break
            if _unlink_quietly(path):
                removed += 1
            total -= size  # gone either way: by us or by a concurrent evictor
        if removed:
            self._count(evictions=removed)
        return removed

    def clear(self) -> None:
        """Deletes every entry."""
        self.evict(0)


_default_caches: dict[tuple[Path, int], DiskCache] = {}
_default_lock = threading.Lock()


def default_disk_cache() -> DiskCache | None:
    """The disk cache the environment asks for now; None when ``CUTILE_CACHE=0``.

    One `DiskCache` object per (folder, cap), so its statistics accumulate.
    """
    if not _config.CACHE.get():
        return None
    directory = _config.CACHE_DIR.get()
    cap = _config.CACHE_MAX_BYTES.get()
    with _default_lock:
        cache = _default_caches.get((directory, cap))
        if cache is None:
            cache = _default_caches[(directory, cap)] = DiskCache(directory, cap)
        return cache


CACHE_KINDS = ("cubins", "manifests", "probes")
"""The on-disk caches under ``CUTILE_CACHE_DIR``, as `disk_caches` names them."""


def disk_caches() -> dict[str, DiskCache]:
    """Every on-disk cache the environment names, by kind (`CACHE_KINDS`): ``"cubins"``
    (compiled kernels), ``"manifests"`` (the warm-start manifests of `_warm`) and
    ``"probes"`` (tileiras's recorded answers), each a folder under ``CUTILE_CACHE_DIR``
    capped at ``CUTILE_CACHE_MAX_BYTES``.

    For tools that list, trim or clear them (``cutile cache``): they are returned whether
    or not ``CUTILE_CACHE`` turns caching on, and a malformed variable raises its
    `ConfigError`. Their `DiskCache.evict` and `DiskCache.clear` delete only entries of
    their own layout, never other files of the folder.
    """
    from cutile_compiler import _warm
    from cutile_compiler._toolchain import _PROBE_LAYOUT, _PROBE_SUFFIX

    directory, cap = _config.CACHE_DIR.get(), _config.CACHE_MAX_BYTES.get()
    return {
        "cubins": DiskCache(directory, cap),
        "manifests": DiskCache(directory, cap, layout=_warm.MANIFEST_LAYOUT, suffix=_warm._SUFFIX),
        "probes": DiskCache(directory, cap, layout=_PROBE_LAYOUT, suffix=_PROBE_SUFFIX),
    }


def cached_compile(
    bytecode: bytes,
    arch: str,
    toolchain: Toolchain | None = None,
    options: CompileOptions | None = None,
    *,
    timeout: float | None = None,
    locations: Locations | None = None,
    cache: DiskCache | None = None,
    entries: Sequence[str] | None = None,
) -> tuple[bytes, bool]:
    """The cubin of `bytecode` for `arch`, from the disk cache or by running tileiras.

    Only a cubin that `Toolchain.compile` checked is stored, and a hit is checked again
    (`_cubin.cubin_problem`): one that fails is discarded and compiled anew.

    Args:
        bytecode, arch, options, timeout, locations: as for `Toolchain.compile`.
        entries: the kernels the cubin must define; default the bytecode's entries.
        toolchain: the tileiras to use; default `find_toolchain()`.
        cache: the disk cache; default `default_disk_cache()` (none when CUTILE_CACHE=0).

    Returns:
        (cubin bytes, whether they came from the cache).
    """
    chain = find_toolchain() if toolchain is None else toolchain
    opts = CompileOptions() if options is None else options
    chain.check_arch(arch)  # the same error whether or not the cache holds an entry
    store = default_disk_cache() if cache is None else cache
    if store is None:
        return chain.compile(bytecode, arch, timeout=timeout, options=opts, locations=locations, entries=entries), False
    names = _entry_names(bytes(bytecode)) if entries is None else tuple(entries)
    key = cache_key(bytecode, arch, chain.identity, opts.args())
    cubin = store.get(key, lambda payload: cubin_problem(payload, names) is None)
    if cubin is not None:
        return cubin, True
    cubin = chain.compile(bytecode, arch, timeout=timeout, options=opts, locations=locations, entries=names)
    store.put(key, cubin)
    return cubin, False
