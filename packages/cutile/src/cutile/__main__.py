"""The ``cutile`` command (the console script, and ``python -m cutile``): what this
installation is, and its on-disk caches.

    cutile info [--json]                  versions, toolchain, driver and GPUs, backend,
                                          native launch path, cache folder
    cutile cache list [--json]            the entries of each on-disk cache
    cutile cache clear                    deletes every entry
    cutile cache prune [--max-bytes N]    trims each cache folder to N (default
                                          CUTILE_CACHE_MAX_BYTES), least recently used first

Exit status: 0 done; 1 the command could not do its job (a malformed ``CUTILE_*``
variable, a cache folder it cannot read or change); 2 a usage error (an unknown
command or flag, a malformed ``--max-bytes``). Errors are one line on stderr,
``cutile: error: ...``. ``info`` reports what it cannot find (no toolchain, no
driver) as part of its answer and exits 0.

Everything is read through the packages' public functions: ``__version__``,
`cutile_compiler.find_toolchain`, `cuda_core.driver_version` and `cuda_core.Device`,
`cutile_compiler.disk_caches`; the backend and the native launch path are cutile's own.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from collections.abc import Callable, Sequence
from importlib import import_module, metadata
from typing import Any, NoReturn

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2

#: import name -> distribution, in the order of the layers
PACKAGES = (
    ("cutile", "cutile"),
    ("cutile_compiler", "cutile-compiler"),
    ("cutile_ir", "cutile-ir"),
    ("cuda_async", "cutile-cuda-async"),
    ("cuda_core", "cutile-cuda-core"),
    ("cutile_kernels", "cutile-kernels"),
)


class _Parser(argparse.ArgumentParser):
    """argparse, with usage errors as one line and exit status 2, and no abbreviated
    flags (a misspelt flag is refused, not guessed); subcommands' parsers are of this class."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"cutile: error: {message} (see '{self.prog} --help')\n")


def _one_line(error: BaseException | str) -> str:
    return " ".join(str(error).split()) or type(error).__name__


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    value = n / 1024
    for unit in ("KiB", "MiB"):
        if value < 1024:
            return f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"


# --- info ------------------------------------------------------------------------------


def _versions() -> dict[str, str | None]:
    found: dict[str, str | None] = {}
    for module, distribution in PACKAGES:
        try:
            found[distribution] = str(import_module(module).__version__)
        except ImportError:
            found[distribution] = None  # e.g. cutile-kernels: cutile does not depend on it
    return found


def _distribution(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _toolchain() -> dict[str, Any]:
    import cutile_compiler

    try:
        chain = cutile_compiler.find_toolchain()
    except cutile_compiler.CutileError as exc:  # ToolchainError, or a malformed CUTILE_TILEIRAS*
        return {"found": False, "problem": _one_line(exc)}
    versions = [f"{major}.{minor}" for major, minor in chain.bytecode_versions]
    return {"found": True, "version": chain.release, "tileiras": str(chain.tileiras), "found_by": chain.found_by,
            "ptxas": str(chain.ptxas), "libnvvm": str(chain.libnvvm), "bytecode_versions": versions,
            "gpu_names": list(chain.gpu_names)}


def _driver(toolchain: dict[str, Any]) -> dict[str, Any]:
    import cuda_core

    report: dict[str, Any] = {}
    try:
        major, minor = cuda_core.driver_version()
        report["cuda_version"] = f"{major}.{minor}"
    except cuda_core.CudaError as exc:
        return {"cuda_version": None, "problem": _one_line(exc.message), "gpus": []}
    reason = cuda_core.unavailable_reason()
    gpus: list[dict[str, Any]] = []
    if reason is None:
        for ordinal in range(cuda_core.device_count()):
            device = cuda_core.Device(ordinal)
            arch = device.sm_name
            gpu: dict[str, Any] = {"ordinal": ordinal, "name": device.name, "arch": arch,
                                   "sms": device.sm_count, "memory_bytes": device.total_memory}
            if toolchain["found"] and toolchain["gpu_names"]:
                gpu["tileiras_compiles_for_it"] = arch in toolchain["gpu_names"]
            gpus.append(gpu)
    else:
        report["problem"] = reason
    report["gpus"] = gpus
    return report


def _backend() -> dict[str, Any]:
    from cutile import _backend as backend

    chosen, why = backend.explain()
    return {"backend": chosen, "why": why}


def _native() -> dict[str, Any]:
    from cuda_core import native

    from cutile import _native as launch_path

    module = launch_path.load()  # (built and loaded now if no launch has: what a launch would find)
    if module is not None:
        return {"in_use": True, "module": str(getattr(module, "__file__", "")), "cache": str(native.cache_dir())}
    return {"in_use": False, "why": launch_path.unavailable_reason(), "cache": str(native.cache_dir())}


def _caches() -> dict[str, Any]:
    """Each disk cache's folder, entries (most recently used first) and size; raises
    `ConfigError` for a malformed ``CUTILE_CACHE*`` variable."""
    import cutile_compiler
    from cutile_compiler import config

    caches = cutile_compiler.disk_caches()
    some = next(iter(caches.values()))
    report: dict[str, Any] = {"folder": str(some.directory), "enabled": config.CACHE.get(),
                              "max_bytes_per_folder": some.max_bytes, "kinds": {}}
    for kind, cache in caches.items():
        entries = cache.entries()
        report["kinds"][kind] = {
            "folder": str(cache.root), "count": len(entries), "bytes": sum(size for _, size, _ in entries),
            "entries": [{"name": str(path.relative_to(cache.root)), "bytes": size, "last_used_ns": mtime}
                        for path, size, mtime in reversed(entries)],
        }
    return report


def _section(compute: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """A part of the report; what its package raises on purpose becomes its ``problem``."""
    from cuda_core import CudaError

    from cutile import CutileError

    try:
        return compute()
    except (CutileError, CudaError, OSError) as exc:
        return {"problem": _one_line(exc)}


def info_report() -> dict[str, Any]:
    """What ``cutile info --json`` prints."""
    import numpy
    import ml_dtypes

    toolchain = _section(_toolchain)
    toolchain.setdefault("found", False)
    caches = _section(_caches)
    for kind in caches.get("kinds", {}).values():
        del kind["entries"]  # (``cache list`` shows them)
    return {
        "packages": _versions(),
        "python": {"version": platform.python_version(), "implementation": platform.python_implementation(),
                   "executable": sys.executable, "platform": f"{platform.system()} {platform.machine()}"},
        "numpy": numpy.__version__,
        "ml_dtypes": ml_dtypes.__version__,
        "cuda_bindings": _distribution("cuda-bindings"),
        "toolchain": toolchain,
        "driver": _section(lambda: _driver(toolchain)),
        "backend": _section(_backend),
        "native_launch_path": _section(_native),
        "cache": caches,
    }


def _info_lines(report: dict[str, Any]) -> list[str]:
    rows: list[tuple[str, str]] = []
    packages = report["packages"]
    rows.append(("packages", ", ".join(f"{name} {version or '(not installed)'}" for name, version in packages.items())))
    python = report["python"]
    rows.append(("python", f"{python['version']} ({python['implementation']}, {python['executable']}) "
                           f"on {python['platform']}"))
    rows.append(("numpy", report["numpy"]))
    rows.append(("ml_dtypes", report["ml_dtypes"]))
    rows.append(("cuda-bindings", report["cuda_bindings"] or "not installed (the GPU backend cannot run)"))
    chain = report["toolchain"]
    if chain["found"]:
        versions = chain["bytecode_versions"]
        rows.append(("toolchain", f"tileiras {chain['version']} at {chain['tileiras']} (found via {chain['found_by']})"))
        rows.append(("", f"ptxas {chain['ptxas']}; libnvvm {chain['libnvvm']}"))
        rows.append(("", f"bytecode {versions[0]}-{versions[-1]}; compiles for {', '.join(chain['gpu_names']) or '?'}"))
    else:
        rows.append(("toolchain", f"none: {chain['problem']}"))
    driver = report["driver"]
    if driver.get("cuda_version"):
        rows.append(("driver", f"supports CUDA {driver['cuda_version']}"))
    else:
        rows.append(("driver", f"none: {driver.get('problem')}"))
    if driver.get("gpus"):
        for gpu in driver["gpus"]:
            note = "" if gpu.get("tileiras_compiles_for_it", True) else "; the toolchain cannot compile for it"
            rows.append(("gpus" if gpu["ordinal"] == 0 else "",
                         f"{gpu['ordinal']}: {gpu['name']} ({gpu['arch']}, {gpu['sms']} SMs, "
                         f"{_size(gpu['memory_bytes'])}){note}"))
    else:
        rows.append(("gpus", "none" + (f": {driver['problem']}" if driver.get("cuda_version") else " (no driver)")))
    backend = report["backend"]
    if "problem" in backend:
        rows.append(("backend", f"unknown: {backend['problem']}"))
    else:
        rows.append(("backend", f"{backend['backend'] or 'none (launches fail)'}: {backend['why']}"))
    native = report["native_launch_path"]
    if "problem" in native:
        rows.append(("native launch", f"unknown: {native['problem']}"))
    elif native["in_use"]:
        rows.append(("native launch", f"built, in use ({native['module']})"))
    else:
        rows.append(("native launch", f"unavailable, launches take the Python path: {native['why']}"))
    cache = report["cache"]
    if "problem" in cache:
        rows.append(("cache", f"unknown: {cache['problem']}"))
    else:
        state = "on" if cache["enabled"] else "off (CUTILE_CACHE=0)"
        rows.append(("cache", f"{cache['folder']} ({state}; at most {_size(cache['max_bytes_per_folder'])} per folder)"))
        rows.append(("", ", ".join(f"{kind} {facts['count']} entries {_size(facts['bytes'])}"
                                   for kind, facts in cache["kinds"].items())))
    width = max(len(key) for key, _ in rows) + 2
    return [f"{key:<{width}}{value}".rstrip() for key, value in rows]


def _info(args: argparse.Namespace) -> int:
    report = info_report()
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print("\n".join(_info_lines(report)))
    return EXIT_OK


# --- cache -----------------------------------------------------------------------------


def _cache_list(args: argparse.Namespace) -> int:
    report = _caches()
    if args.json:
        print(json.dumps(report, indent=2))
        return EXIT_OK
    state = "on" if report["enabled"] else "off (CUTILE_CACHE=0)"
    print(f"{report['folder']} (caching {state}; at most {_size(report['max_bytes_per_folder'])} per folder)")
    for kind, facts in report["kinds"].items():
        print(f"{kind}: {facts['count']} entries, {_size(facts['bytes'])} in {facts['folder']}")
        for entry in facts["entries"]:
            used = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(entry["last_used_ns"] / 1e9))
            print(f"  {used}  {_size(entry['bytes']):>10}  {entry['name']}")
    return EXIT_OK


def _trim(cap: int | None) -> tuple[dict[str, tuple[int, int]], str]:
    """Trims every cache to ``cap`` (None: its own); per kind (entries, bytes) removed."""
    import cutile_compiler

    caches = cutile_compiler.disk_caches()
    removed: dict[str, tuple[int, int]] = {}
    for kind, cache in caches.items():
        before = cache.entries()
        cache.evict(cap)
        after = {path for path, _, _ in cache.entries()}
        gone = [(path, size) for path, size, _ in before if path not in after]
        removed[kind] = (len(gone), sum(size for _, size in gone))
        if after and cap == 0:
            raise OSError(f"{len(after)} entries of {cache.root} could not be deleted (permissions?)")
    return removed, str(next(iter(caches.values())).directory)


def _report_removed(removed: dict[str, tuple[int, int]], folder: str) -> None:
    count = sum(n for n, _ in removed.values())
    size = sum(b for _, b in removed.values())
    detail = ", ".join(f"{kind} {n}" for kind, (n, _) in removed.items())
    print(f"removed {count} entries ({_size(size)}) from {folder}: {detail}")


def _cache_clear(args: argparse.Namespace) -> int:
    _report_removed(*_trim(0))
    return EXIT_OK


def _cache_prune(args: argparse.Namespace) -> int:
    from cutile_compiler.config import parse_size

    from cutile import ArgumentError

    cap = None
    if args.max_bytes is not None:
        try:
            cap = parse_size(args.max_bytes, "--max-bytes")
        except ArgumentError as exc:
            print(f"cutile: error: {_one_line(exc)}", file=sys.stderr)
            return EXIT_USAGE
    _report_removed(*_trim(cap))
    return EXIT_OK


# --- the command -----------------------------------------------------------------------


def parser() -> argparse.ArgumentParser:
    """The command line's parser (``cutile --help`` prints it)."""
    import cutile

    top = _Parser(prog="cutile", description="What this cutile installation is, and its on-disk caches.",
                  epilog="Exit status: 0 done, 1 the command could not do its job, 2 a usage error.")
    top.add_argument("--version", action="version", version=f"cutile {cutile.__version__}")
    commands = top.add_subparsers(dest="command", metavar="COMMAND", required=True)
    info = commands.add_parser("info", help="versions, toolchain, driver and GPUs, backend, native launch path, cache",
                               description="Everything a bug report needs about this installation.")
    info.add_argument("--json", action="store_true", help="print the report as JSON")
    info.set_defaults(run=_info)
    cache = commands.add_parser("cache", help="list, clear or prune the on-disk caches",
                                description="The on-disk caches under CUTILE_CACHE_DIR: compiled cubins, warm-start "
                                            "manifests and toolchain probes.")
    actions = cache.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = actions.add_parser("list", help="each cache's entries, most recently used first")
    listing.add_argument("--json", action="store_true", help="print the listing as JSON")
    listing.set_defaults(run=_cache_list)
    actions.add_parser("clear", help="delete every entry").set_defaults(run=_cache_clear)
    prune = actions.add_parser("prune", help="trim each cache folder, least recently used entries first")
    prune.add_argument("--max-bytes", metavar="SIZE",
                       help="the size each folder is trimmed to, e.g. 512MiB (default CUTILE_CACHE_MAX_BYTES)")
    prune.set_defaults(run=_cache_prune)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line ``argv`` (default ``sys.argv[1:]``); returns the exit status."""
    from cuda_core import CudaError

    from cutile import CutileError

    try:
        args = parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    except SystemExit as stop:  # --help, --version, or a usage error (already printed)
        return stop.code if isinstance(stop.code, int) else EXIT_USAGE
    run: Callable[[argparse.Namespace], int] = args.run
    try:
        return run(args)
    except BrokenPipeError:  # the reader went away (``cutile cache list | head``): not an error
        sys.stdout = None  # (nothing more can be written there)
        return EXIT_OK
    except (CutileError, CudaError, OSError) as exc:
        print(f"cutile: error: {_one_line(exc)}", file=sys.stderr)
        return EXIT_FAILED


if __name__ == "__main__":
    raise SystemExit(main())
