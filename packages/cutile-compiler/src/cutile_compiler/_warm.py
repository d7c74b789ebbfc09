"""Warm start: a compiled kernel found on disk by what its bytecode depends on.

The cubin cache (`_cache`) is keyed by bytecode, which only the front end and the
lowering can produce. A *manifest* is a second kind of disk entry, keyed by what
the bytecode depends on (`manifest_key`: the kernel's source text, file and
qualified name, its signature and specialization, the arch, the compile options,
the toolchain's identity and the compiler's own files), so that a new process can
find a compiled kernel without compiling anything.

What a compile read from outside its arguments (`ExternalReads`: globals, closure
cells, attributes, the code of inlined device functions) is also an input. A
manifest records each read in a form a new process can check again: where it was
read (a module by name, a closure variable of a function, an attribute of an
earlier read's value) and what it gave, serialized (`_serialize`): immutable
constants by value (floats by their bits), modules by name, the language's own
objects by where they are defined, classes by module and qualified name, and
functions (device functions included) by their source text, file, first line and
default values. A compile that read anything else (a list, an instance) writes no
manifest: that kernel compiles in each new process as before.

`lookup` re-reads every recorded read in the live process and compares; only when
all agree does it return the `CompiledKernel` (the cubin from the cubin cache, the
entry name and ABI from the manifest, and `ExternalReads` of the live objects, so
that the in-process checks work as for a compiled one). A manifest that is
missing, damaged (checked as cubin entries are: header with the full key,
checksum, bounded size), from another layout, or whose reads disagree, is a miss:
the kernel compiles, and `store` writes its manifest again. A manifest holds only
data that is checked, so a wrong one costs a compile, never a wrong kernel.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import linecache
import sys
import threading
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cutile_compiler import _config
from cutile_compiler import _dtypes as dt
from cutile_compiler._device_function import DeviceFunction
from cutile_compiler._cache import DiskCache, cache_key
from cutile_compiler._compiled import AbiArg, CompiledKernel
from cutile_compiler._cubin import cubin_problem
from cutile_compiler._reads import ABSENT, ATTRIBUTE, CELL, CELL_EMPTY, CODE, NAME, NAME_ABSENT, ExternalReads
from cutile_compiler._signature import KernelSignature, Specialization
from cutile_compiler._toolchain import CompileOptions, Toolchain

__all__ = ["MANIFEST_LAYOUT", "lookup", "manifest_cache", "manifest_key", "store"]

MANIFEST_LAYOUT = "manifest-v1"
"""The manifests' subfolder of the cache folder; bump it when their format or key changes."""

_SUFFIX = ".manifest"
_MAX_MANIFEST_BYTES = 1 << 20  # a manifest is a few KiB; anything larger is not one of ours
# The language's packages: their objects a kernel reads are recorded by name, so an edit
# of any of them (cutile's device functions too) must change the fingerprint.
_LANGUAGE_PACKAGES = ("cutile", "cutile_compiler", "cutile_ir")


class NotWarmCacheable(Exception):
    """A read whose value a new process cannot check (internal: no manifest is written)."""


# --- the key -------------------------------------------------------------------------

_compiler_fingerprint: str | None = None
_fingerprint_lock = threading.Lock()


def compiler_fingerprint() -> str:
    """A digest of the language's files (path, size, mtime: the compiler's, cutile_ir's
    and cutile's, found without importing them), so that an edited or upgraded package
    never reuses manifests of another (computed once per process)."""
    global _compiler_fingerprint
    with _fingerprint_lock:
        if _compiler_fingerprint is None:
            digest = hashlib.sha256(f"{sys.implementation.cache_tag}\0{sys.version}".encode())
            for package in _LANGUAGE_PACKAGES:
                spec = importlib.util.find_spec(package)
                origin = spec.origin if spec is not None else None
                for path in sorted(Path(origin).parent.rglob("*.py")) if origin else ():
                    try:
                        info = path.stat()
                    except OSError:
                        continue
                    digest.update(f"{path}\0{info.st_size}\0{info.st_mtime_ns}\n".encode())
            _compiler_fingerprint = digest.hexdigest()
        return _compiler_fingerprint


def _last_line(code: types.CodeType) -> int:
    """The last source line any expression of ``code`` (or of code nested in it) spans."""
    last = code.co_firstlineno
    for _, end, _, _ in code.co_positions():
        if end is not None and end > last:
            last = end
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            last = max(last, _last_line(const))
    return last


def _code_digest(code: types.CodeType) -> str:
    """A digest of what a code object computes and where it stands: its bytecode,
    names, constants (nested code objects by their own digest) and source positions.
    Source lines alone do not tell functions apart: two lambdas on one line share
    every line, qualified name and first line (``lambda a, b: a + b`` beside
    ``lambda a, b: a - b``), and a kernel of one served the other's cubin."""
    digest = hashlib.sha256()
    for part in (code.co_code, code.co_names, code.co_varnames, code.co_freevars, code.co_cellvars,
                 (code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount, code.co_flags),
                 tuple(code.co_positions())):
        digest.update(repr(part).encode() + b"\0")
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            text = _code_digest(const)
        elif isinstance(const, frozenset):  # its repr's order follows string hashing, which varies by process
            text = "frozenset:" + repr(sorted(map(repr, const)))
        else:
            text = f"{type(const).__name__}:{const!r}"
        digest.update(text.encode() + b"\0")
    return digest.hexdigest()


def _source_facts(function: types.FunctionType) -> list[Any]:
    """What a function's source contributes to a compile: its module, qualified name,
    file, first line, a digest of its lines (from its first decorator to the last
    line its code spans: the lines the front end parses), read as the front end reads
    them (`linecache`, checked against the file), and a digest of its code objects
    (`_code_digest`: which of the functions on those lines it is)."""
    code = function.__code__
    filename = code.co_filename
    linecache.checkcache(filename)
    lines = linecache.getlines(filename, function.__globals__)
    first, last = code.co_firstlineno, _last_line(code)
    if not lines or last > len(lines):
        raise NotWarmCacheable(f"no source for {function.__qualname__}")
    text = "".join(lines[first - 1:last])
    return [function.__module__, function.__qualname__, filename, first, hashlib.sha256(text.encode()).hexdigest(),
            _code_digest(code)]


def manifest_key(function: Any, signature: KernelSignature, spec: Specialization, arch: str,
                 options: CompileOptions, toolchain: Toolchain, unsafe: bool) -> str:
    """The sha256 (hex) naming the manifest of one compile; raises `NotWarmCacheable`
    for a kernel whose inputs a new process could not tell apart."""
    if not isinstance(function, types.FunctionType):
        raise NotWarmCacheable("a kernel that is not a Python function")
    facts = _source_facts(function)
    defaults = [_serialize(function.__defaults__), _serialize(function.__kwdefaults__ and
                                                              tuple(sorted(function.__kwdefaults__.items())))]
    parts = [MANIFEST_LAYOUT, compiler_fingerprint(), json.dumps([facts, defaults]), repr(signature),
             repr(spec), repr(spec.constants_key), arch, repr(options), toolchain.identity, repr(unsafe)]
    digest = hashlib.sha256()
    for part in parts:
        data = part.encode()
        digest.update(len(data).to_bytes(8, "little"))  # length-prefixed: no two inputs collide
        digest.update(data)
    return digest.hexdigest()


# --- values --------------------------------------------------------------------------

_language_names: dict[int, tuple[str, str]] | None = None
_language_modules_seen = 0
_NOT_LANGUAGE_OBJECTS = (types.ModuleType, int, float, complex, str, bytes, tuple, list, dict, set, bytearray)


def _language_name(value: Any) -> tuple[str, str] | None:
    """(module, name) of a module of the language that binds ``value`` (a DSL
    function, a dtype...), or None."""
    global _language_names, _language_modules_seen
    if _language_names is None or (id(value) not in _language_names and len(sys.modules) != _language_modules_seen):
        found: dict[int, tuple[str, str]] = {}
        for module_name, module in sorted(sys.modules.items()):
            if not isinstance(module, types.ModuleType) or module_name.split(".", 1)[0] not in _LANGUAGE_PACKAGES:
                continue
            for name, item in list(vars(module).items()):
                # (constants and modules serialize by value; mutable state is never the language)
                if not isinstance(item, _NOT_LANGUAGE_OBJECTS) and item is not None:
                    found.setdefault(id(item), (module_name, name))
        _language_names, _language_modules_seen = found, len(sys.modules)
    where = _language_names.get(id(value))
    binder = sys.modules.get(where[0]) if where is not None else None
    if where is not None and isinstance(binder, types.ModuleType) and vars(binder).get(where[1]) is value:
        return where
    return None


def _resolve_qualname(module_name: str, qualname: str) -> Any:
    value: Any = sys.modules.get(module_name)
    if value is None or "<" in qualname:
        return ABSENT
    for part in qualname.split("."):
        value = vars(value).get(part, ABSENT) if hasattr(value, "__dict__") else ABSENT
        if value is ABSENT:
            return ABSENT
    return value


def _function_facts(function: types.FunctionType) -> list[Any]:
    module_name = function.__globals__.get("__name__")
    module = sys.modules.get(module_name) if isinstance(module_name, str) else None
    if module is None or vars(module) is not function.__globals__:
        raise NotWarmCacheable(f"{function.__qualname__} has globals that are no module's")
    facts = _source_facts(function)
    kwdefaults = function.__kwdefaults__
    return [*facts, function.__globals__["__name__"], _serialize(function.__defaults__),
            _serialize(tuple(sorted(kwdefaults.items())) if kwdefaults else None)]


def _serialize(value: Any) -> Any:
    """``value`` as JSON a new process can compare with its own; `NotWarmCacheable`
    for a value it could not check."""
    kind = type(value)
    if value is None:
        return ["none"]
    if kind is bool:
        return ["bool", value]
    if kind is int:
        return ["int", str(value)]
    if kind is float:
        return ["float", value.hex()]  # by its bits: 0.0 and -0.0, NaN
    if kind is complex:
        return ["complex", value.real.hex(), value.imag.hex()]
    if kind is str:
        return ["str", value]
    if kind is bytes:
        return ["bytes", value.hex()]
    if kind is tuple:
        return ["tuple", [_serialize(item) for item in value]]
    if isinstance(value, types.ModuleType):
        if sys.modules.get(value.__name__) is not value:
            raise NotWarmCacheable(f"module {value.__name__} is not in sys.modules")
        return ["module", value.__name__]
    if isinstance(value, DeviceFunction):
        if not isinstance(value.python_function, types.FunctionType):
            raise NotWarmCacheable("a device function that is not a Python function")
        return ["device", _function_facts(value.python_function)]
    if kind is types.FunctionType:
        return ["function", _function_facts(value)]
    language = _language_name(value)
    if language is not None:
        return ["language", *language]
    if isinstance(value, type):
        module, qualname = getattr(value, "__module__", None), getattr(value, "__qualname__", None)
        if isinstance(module, str) and isinstance(qualname, str) and _resolve_qualname(module, qualname) is value:
            return ["class", module, qualname]
    raise NotWarmCacheable(f"a {kind.__name__} value")


def _matches(value: Any, recorded: Any) -> bool:
    """Whether the live ``value`` serializes to ``recorded`` (checked the cheap way
    for the language's objects and classes, which need no search)."""
    tag = recorded[0]
    if tag == "language":
        module = sys.modules.get(recorded[1])
        return module is not None and vars(module).get(recorded[2], ABSENT) is value
    if tag == "class":
        return isinstance(value, type) and _resolve_qualname(recorded[1], recorded[2]) is value
    try:
        return bool(_serialize(value) == recorded)
    except NotWarmCacheable:
        return False


# --- the reads -----------------------------------------------------------------------


def _module_of(namespace: Any) -> str:
    name = namespace.get("__name__") if isinstance(namespace, dict) else None
    module = sys.modules.get(name) if isinstance(name, str) else None
    if not isinstance(module, types.ModuleType) or vars(module) is not namespace:
        raise NotWarmCacheable("a namespace that is not a module's")
    return name  # type: ignore[return-value]


def _function_ref(target: Any, root: Any, values: list[Any]) -> int:
    """The index of the earlier read whose value is ``target`` (-1: the kernel itself)."""
    if target is root:
        return -1
    for index, value in enumerate(values):
        if value is target or (isinstance(value, DeviceFunction) and value.python_function is target):
            return index
    raise NotWarmCacheable("a function reached other than through a recorded read")


def _earlier(ref: Any, values: list[Any]) -> Any:
    """The value of earlier read number ``ref`` (an `IndexError` for any other ``ref``:
    a manifest that makes no sense is a miss)."""
    if type(ref) is not int or not 0 <= ref < len(values):
        raise IndexError(f"no earlier read {ref!r}")
    return values[ref]


def _function_at(ref: Any, root: Any, values: list[Any]) -> Any:
    if ref == -1 and type(ref) is int:
        return root
    value = _earlier(ref, values)
    return value.python_function if isinstance(value, DeviceFunction) else value


def _encode_reads(function: Any, reads: ExternalReads) -> list[Any]:
    """The manifest's record of ``reads``; `NotWarmCacheable` when one cannot be checked."""
    records: list[Any] = []
    values: list[Any] = []
    for kind, where, key, value in reads.entries:
        if kind == NAME or kind == NAME_ABSENT:
            place: Any = _module_of(where)
        elif kind == CELL or kind == CELL_EMPTY:
            functions = [function, *(_function_at(i, function, values) for i in range(len(values)))]
            owner = next((f for f in functions if isinstance(f, types.FunctionType)
                          and any(cell is where for cell in f.__closure__ or ())), None)
            if owner is None:
                raise NotWarmCacheable(f"closure variable '{key}' of an unknown function")
            place = _function_ref(owner, function, values)
        elif kind == CODE:
            place = _function_ref(where, function, values)
        elif kind == ATTRIBUTE:
            place = next((i for i, v in enumerate(values) if v is where), None)
            if place is None:
                raise NotWarmCacheable(f"attribute '{key}' of an object no recorded read gave")
        else:
            raise NotWarmCacheable(f"a read of kind {kind}")
        recorded = None if kind in (NAME_ABSENT, CELL_EMPTY, CODE) else _serialize(value)
        records.append([kind, place, key, recorded])
        values.append(value)
    return records


def _decode_reads(function: Any, records: Any) -> ExternalReads | None:
    """The live reads at the places ``records`` names, if each gives what was
    recorded; None at the first that does not (or a record that makes no sense)."""
    reads = ExternalReads()
    values: list[Any] = []
    for kind, place, key, recorded in records:
        if kind == NAME or kind == NAME_ABSENT:
            module = sys.modules.get(place)
            if module is None:
                return None
            where: Any = vars(module)
            value = where.get(key, ABSENT)
            if kind == NAME_ABSENT:
                if value is not ABSENT:
                    return None
                value = None
            elif value is ABSENT or not _matches(value, recorded):
                return None
        elif kind == CELL or kind == CELL_EMPTY:
            owner = _function_at(place, function, values)
            names = owner.__code__.co_freevars
            if key not in names or owner.__closure__ is None:
                return None
            where = owner.__closure__[names.index(key)]
            try:
                value = where.cell_contents
            except ValueError:
                value = ABSENT
            if kind == CELL_EMPTY:
                if value is not ABSENT:
                    return None
                value = None
            elif value is ABSENT or not _matches(value, recorded):
                return None
        elif kind == CODE:
            where = _function_at(place, function, values)
            if not isinstance(where, types.FunctionType) or where.__qualname__ != key:
                return None
            value = where.__code__  # its source was checked with the read that gave the function
        elif kind == ATTRIBUTE:
            where = _earlier(place, values)
            value = getattr(where, key, ABSENT)
            if value is ABSENT or not _matches(value, recorded):
                return None
        else:
            return None
        reads.entries.append((kind, where, key, value))
        values.append(value)
    return reads


# --- the entries ---------------------------------------------------------------------

_caches: dict[Path, DiskCache] = {}
_caches_lock = threading.Lock()


def manifest_cache() -> DiskCache | None:
    """The manifests' disk cache, beside the cubins (none when ``CUTILE_CACHE=0``)."""
    if not _config.CACHE.get():
        return None
    directory = _config.CACHE_DIR.get()
    with _caches_lock:
        cache = _caches.get(directory)
        if cache is None:
            cache = _caches[directory] = DiskCache(directory, _config.CACHE_MAX_BYTES.get(),
                                                   layout=MANIFEST_LAYOUT, suffix=_SUFFIX,
                                                   max_entry_bytes=_MAX_MANIFEST_BYTES)
        return cache


def store(key: str, function: Any, compiled: CompiledKernel, toolchain: Toolchain, options: CompileOptions,
          entries: tuple[str, ...]) -> bool:
    """Writes the manifest of ``compiled`` under ``key``; False when it reads
    something a new process could not check (or the cache is off)."""
    cache = manifest_cache()
    if cache is None:
        return False
    try:
        records = _encode_reads(function, compiled.kernel_ir.reads)
    except NotWarmCacheable:
        return False
    cubin = cache_key(compiled.bytecode, compiled.arch, toolchain.identity, options.args())
    payload = {
        "name": compiled.name, "arch": compiled.arch, "bytecode_version": compiled.bytecode_version,
        "cubin": cubin, "entries": list(entries), "reads": records,
        "abi": [[a.param, a.kind, a.axis, a.dtype.name if a.dtype is not None else None] for a in compiled.abi],
    }
    return cache.put(key, json.dumps(payload, separators=(",", ":")).encode())


def lookup(key: str, function: Any, arch: str, cubins: DiskCache | None,
           rebuild: Callable[[], tuple[Any, Any, bytes]]) -> CompiledKernel | None:
    """The compiled kernel of the manifest under ``key`` if every read it records
    still gives the same value here; None otherwise (compile as usual)."""
    cache = manifest_cache()
    if cache is None or cubins is None:
        return None
    payload = cache.get(key)
    if payload is None:
        return None
    try:
        manifest = json.loads(payload)
        if manifest["arch"] != arch:
            return None
        reads = _decode_reads(function, manifest["reads"])
        if reads is None:
            return None
        entries = tuple(str(name) for name in manifest["entries"])
        abi = tuple(AbiArg(str(param), str(kind), int(axis), dt.lookup(dtype) if dtype is not None else None)
                    for param, kind, axis, dtype in manifest["abi"])
        cubin = cubins.get(manifest["cubin"], lambda data: cubin_problem(data, entries) is None)
        if cubin is None:
            return None
        return CompiledKernel(str(manifest["name"]), arch, abi, cubin, str(manifest["bytecode_version"]),
                              True, reads, rebuild=rebuild, warm=True)
    except Exception:  # a manifest that does not make sense here: compile (it is only a shortcut)
        return None
