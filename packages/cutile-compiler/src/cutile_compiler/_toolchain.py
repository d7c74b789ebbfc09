"""NVIDIA's tileiras: finding it, checking it, running it, explaining its failures.

tileiras assembles Tile IR bytecode into a cubin for one GPU (``--gpu-name sm_90``).
It needs the ``ptxas`` and ``libnvvm`` of its own CUDA minor version beside it, and
it honours ``CUDA_HOME``: pointed at another toolkit, it fails with exit code 5 and
the single line "failed to compile Tile IR program". So cutile always runs it with
``CUDA_HOME`` set to the toolkit it belongs to.

It is found, in order, through:

1. ``CUTILE_TILEIRAS`` (the executable itself);
2. ``CUDA_TOOLKIT_PATH`` (its ``bin/tileiras``);
3. the pip packages ``nvidia-cuda-tileiras`` + ``nvidia-cuda-nvcc`` + ``nvidia-nvvm``
   (``nvidia/cu13/bin`` in the ``nvidia`` namespace package);
4. ``PATH``.

`find_toolchain()` returns a `Toolchain` (path, toolkit root, version, the bytecode
versions it reads, the GPU names it knows, which rule found it); `Toolchain.compile`
turns bytecode into cubin bytes, checked to be a CUDA ELF defining the kernels'
entry symbols (`_cubin`), raising `TileirasError` with the exit code, stderr and
command line when tileiras fails or writes something else. `map_diagnostics`
rewrites the source locations in tileiras's messages into kernel source excerpts.

Every run of tileiras (the probes of ``--version``/``--help`` included) is bounded by
``CUTILE_TILEIRAS_TIMEOUT``, and its output by `_OUTPUT_KEPT` bytes in memory (a
compile's; a probe's by `_PROBE_OUTPUT_KEPT`): a longer stderr keeps its head and tail,
and the whole of it stays in a file whose path the message gives.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING

import cutile_ir as ir
from cutile_compiler import _config
from cutile_compiler._cubin import cubin_problem
from cutile_compiler._errors import ArgumentError, ArgumentTypeError, TileCompilerError
from cutile_compiler._hints import KernelHints

if TYPE_CHECKING:
    from cutile_compiler._cache import DiskCache

__all__ = [
    "RECOMMENDED_RELEASE",
    "SUPPORTED_BYTECODE_VERSIONS",
    "ArchError",
    "CompileOptions",
    "Locations",
    "TileirasError",
    "TileirasTimeoutError",
    "Toolchain",
    "ToolchainError",
    "choose_bytecode_version",
    "clear_toolchain_cache",
    "find_toolchain",
    "map_diagnostics",
    "min_tileiras_version",
    "parse_arch",
]

SUPPORTED_BYTECODE_VERSIONS: tuple[tuple[int, int], ...] = tuple((v.major, v.minor) for v in ir.SUPPORTED_VERSIONS)
"""Tile IR bytecode versions cutile_ir can write, oldest first."""

RECOMMENDED_RELEASE = "13.4"
"""The CUDA minor version the install hint names (the one the project tests with, and
the one cutile's ``tileiras`` extra pins: tests/test_release.py checks they agree)."""

INSTALL_HINT = (
    'pip install "cutile[tileiras]" (its toolchain extra), or by hand '
    f'pip install "nvidia-cuda-tileiras=={RECOMMENDED_RELEASE}.*" "nvidia-cuda-nvcc=={RECOMMENDED_RELEASE}.*" '
    f'"nvidia-nvvm=={RECOMMENDED_RELEASE}.*" (the three of one CUDA minor version, 13.3 or newer for sm_90), '
    "or set CUTILE_TILEIRAS to a tileiras executable"
)

FOUND_BY_RULES = ("CUTILE_TILEIRAS", "CUDA_TOOLKIT_PATH", "pip", "PATH")
"""The values of `Toolchain.found_by`, in the order they are tried."""

_EXE = ".exe" if os.name == "nt" else ""
_TILEIRAS, _PTXAS = "tileiras" + _EXE, "ptxas" + _EXE
_PROBE_TIMEOUT_S = 60.0  # --version/--help answer in milliseconds; at most this, or CUTILE_TILEIRAS_TIMEOUT if less
_OUTPUT_KEPT = 16 * 1024  # bytes of a compile's stdout/stderr kept in memory and messages: half head, half tail
_PROBE_OUTPUT_KEPT = 1 << 20  # --help is parsed whole: a few KiB, this bounds a foreign tool's
_GENERIC_FAILURE = "failed to compile Tile IR program"


# --- errors ------------------------------------------------------------------------




class ToolchainError(TileCompilerError):
    """tileiras cannot be found or run, or cannot compile for the requested target."""


class ArchError(ToolchainError, ValueError):
    """An arch string that tileiras would not accept (it takes plain ``"sm_90"``)."""


class TileirasError(TileCompilerError):
    """tileiras ran and failed.

    Attributes:
        command: the command line that ran (its temporary files are gone by now).
        returncode: tileiras's exit status; None when it was stopped (timeout).
        stderr: what tileiras printed on stderr, unchanged up to 16 KiB; beyond that its
            head and tail around a line naming the file that holds all of it.
        diagnostics: stderr with source locations rewritten by `map_diagnostics`
            when the caller gave a locations function, else the same as `stderr`.
    """

    def __init__(
        self,
        message: str,
        *,
        command: Sequence[str],
        returncode: int | None,
        stderr: str,
        diagnostics: str | None = None,
    ) -> None:
        super().__init__(message)
        self.command = tuple(command)
        self.returncode = returncode
        self.stderr = stderr
        self.diagnostics = stderr if diagnostics is None else diagnostics


class TileirasTimeoutError(TileirasError):
    """tileiras ran longer than its timeout (``CUTILE_TILEIRAS_TIMEOUT``) and was stopped.

    Attributes:
        timeout: the limit in seconds.
    """

    def __init__(self, message: str, *, command: Sequence[str], stderr: str, timeout: float) -> None:
        super().__init__(message, command=command, returncode=None, stderr=stderr)
        self.timeout = timeout


# --- arch strings ------------------------------------------------------------------


def parse_arch(arch: object, what: str = "arch") -> ir.Arch:
    """The `cutile_ir.Arch` an arch string names (``"sm_90"`` -> ``Arch(sm=90)``).

    The one parser of arch strings (`cutile_ir.parse_arch`), raising its refusal as
    this package's ``ArchError``: tileiras's ``--gpu-name`` takes the plain form only,
    so ``"sm_90a"``, ``"90"``, ``"compute_90"`` or ``"9.0"`` are refused naming the
    spelling to use, and archs before sm_80, which Tile IR does not target. ``what``
    names the parameter in the message.
    """
    try:
        return ir.parse_arch(arch, what)
    except ir.ArchError as exc:
        raise ArchError(exc.message) from None


def min_tileiras_version(arch: str) -> tuple[int, int]:
    """The oldest tileiras release (major, minor) that compiles for `arch`.

    Hopper (sm_90) needs 13.3, Ampere and Ada (sm_8x) 13.2, Blackwell and newer
    (sm_100+) 13.1.
    """
    capability = parse_arch(arch).sm
    if capability >= 100:
        return (13, 1)
    if capability >= 90:
        return (13, 3)
    return (13, 2)


# --- options -----------------------------------------------------------------------

_OWNED_FLAGS = ("-o", "--output-file", "--gpu-name", "--arch")


@dataclass(frozen=True)
class CompileOptions:
    """How tileiras compiles (its flags); part of the disk cache key.

    Attributes:
        opt_level: ``--opt-level`` 0..3 (tileiras's default is 3).
        lineinfo: ``--lineinfo``: line tables from the bytecode's debug section, for
            profilers; costs no speed.
        device_debug: ``--device-debug`` (``-g``): full device debug information;
            tileiras accepts it only with ``opt_level=0``.
        extra_args: further flags passed through unchanged, e.g.
            ``("--sanitize=memcheck",)``; the input, ``-o`` and ``--gpu-name`` are cutile's.
        dependent_launch: the kernel is launched as a programmatic dependent of the
            kernel before it on its stream (it may start while that one finishes): it
            lets its own dependents start and then waits for its predecessor before
            any memory access, at its start unless the kernel places
            ``grid_dependency_control_launch_dependents()`` / ``_wait()`` itself (an
            access before its wait is refused); needs Tile IR 13.4. In the bytecode.
    """

    opt_level: int = 3
    lineinfo: bool = False
    device_debug: bool = False
    extra_args: tuple[str, ...] = ()
    #: kernel optimization hints per arch (`_hints.KernelHints`); they go into the
    #: bytecode, not the command line
    hints: KernelHints = field(default_factory=KernelHints)
    dependent_launch: bool = False

    def __post_init__(self) -> None:
        given: object = self.hints  # callers may pass a plain dict
        if not isinstance(given, KernelHints):
            object.__setattr__(self, "hints", KernelHints.parse(given, "CompileOptions.hints"))  # type: ignore[arg-type]
        if isinstance(self.opt_level, bool) or not isinstance(self.opt_level, int) or not 0 <= self.opt_level <= 3:
            raise ArgumentError(f"CompileOptions.opt_level must be an int from 0 to 3, got {self.opt_level!r}")
        if not isinstance(self.dependent_launch, bool):
            raise ArgumentError(f"CompileOptions.dependent_launch must be a bool, got {self.dependent_launch!r}")
        if self.device_debug and self.opt_level != 0:
            raise ArgumentError(
                "CompileOptions.device_debug=True needs opt_level=0: tileiras does not support "
                "optimized debugging (use lineinfo=True for line tables with optimization)"
            )
        extra: object = self.extra_args  # checked as an object: callers may pass anything
        if not isinstance(extra, tuple) or not all(isinstance(a, str) for a in extra):
            raise ArgumentError(f"CompileOptions.extra_args must be a tuple of strings, got {self.extra_args!r}")
        for arg in self.extra_args:
            if arg.split("=", 1)[0] in _OWNED_FLAGS:
                raise ArgumentError(
                    f"CompileOptions.extra_args may not contain {arg!r}: cutile sets the output file "
                    "and the GPU name itself (pass the arch to compile instead)"
                )

    def args(self) -> tuple[str, ...]:
        """The tileiras flags these options stand for."""
        flags = [f"--opt-level={self.opt_level}"]
        if self.lineinfo:
            flags.append("--lineinfo")
        if self.device_debug:
            flags.append("--device-debug")
        return (*flags, *self.extra_args)


#: The options of a launch that sets none (one object: launchers compare it by identity).
DEFAULT_OPTIONS = CompileOptions()


# --- diagnostics -------------------------------------------------------------------

Locations = Callable[[str, int, int], "str | None"]
"""(file, line, column) as tileiras reports them -> a formatted source excerpt, or None."""

_DIAGNOSTIC = re.compile(r"^(?P<where>.*?): (?P<severity>error|warning|note|remark): (?P<message>.*)$")
_QUOTED_LOC = re.compile(r'loc\("(?P<file>(?:[^"\\]|\\.)*)":(?P<line>\d+):(?P<col>\d+)\)')
_PLAIN_LOC = re.compile(r"(?P<file>[^\"\s][^\"]*?):(?P<line>\d+):(?P<col>\d+)")


def _unescape(text: str) -> str:
    # MLIR prints unusual characters of a file name as backslash + two hex digits.
    return re.sub(r"\\([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1), 16)), text).replace('\\"', '"')


def _location_of(where: str) -> tuple[str, int, int] | None:
    quoted = _QUOTED_LOC.search(where)  # #cuda_tile.di_loc<loc("k.py":11:9) in ...>, loc(...)
    if quoted is not None:
        return _unescape(quoted.group("file")), int(quoted.group("line")), int(quoted.group("col"))
    plain = _PLAIN_LOC.fullmatch(where)  # k.py:11:9 (a plain MLIR file location)
    if plain is not None:
        return plain.group("file"), int(plain.group("line")), int(plain.group("col"))
    return None


def map_diagnostics(stderr: str, locations: Locations) -> str:
    """Rewrites the source locations in tileiras's messages into kernel source excerpts.

    tileiras prefixes a message about an operation with that operation's location
    from the bytecode's debug section, e.g.::

        #cuda_tile.di_loc<loc("k.py":11:9) in #cuda_tile.di_subprogram<...>>: error: Incompatibility ...

    Each such line becomes ``k.py:11:9: error: Incompatibility ...`` followed by what
    ``locations("k.py", 11, 9)`` returns (the source line with a caret, say), or by
    nothing when it returns None. Lines without a location are kept as they are.
    """
    out: list[str] = []
    for line in stderr.splitlines():
        match = _DIAGNOSTIC.match(line)
        where = _location_of(match.group("where")) if match else None
        if match is None or where is None:
            out.append(line)
            continue
        file, lineno, col = where
        out.append(f"{file}:{lineno}:{col}: {match.group('severity')}: {match.group('message')}")
        try:
            excerpt = locations(file, lineno, col)
        except Exception:  # noqa: BLE001 - a faulty excerpt must not hide tileiras's own message
            excerpt = None
        if excerpt:
            out.append(excerpt.rstrip("\n"))
    return "\n".join(out) + ("\n" if stderr.endswith("\n") else "")


def first_error_location(stderr: str) -> tuple[str, int, int] | None:
    """The (file, line, column) of tileiras's first error that names a location (the
    offending op's, from the debug section), or None when no error names one."""
    for line in stderr.splitlines():
        match = _DIAGNOSTIC.match(line)
        if match is not None and match.group("severity") == "error":
            where = _location_of(match.group("where"))
            if where is not None:
                return where
    return None


# --- running a process -------------------------------------------------------------


@dataclass(frozen=True)
class _Completed:
    """A finished run: its exit code and its output, each bounded (see `_bounded_text`)."""

    returncode: int
    stdout: str
    stderr: str


def _bounded_text(file: IO[bytes], kept: int, whole: str | None) -> str:
    """The text in `file`: all of it up to `kept` bytes, else its head and tail (cut at line
    ends) around a line saying how much was left out and, when `whole` names it, which
    file holds everything."""
    size = file.seek(0, os.SEEK_END)
    file.seek(0)
    if size <= kept:
        return file.read().decode(errors="replace")
    head = file.read(kept // 2)
    head = head[: head.rfind(b"\n") + 1] or head
    file.seek(size - kept // 2)
    tail = file.read(kept // 2)
    tail = tail[tail.find(b"\n") + 1 :] or tail
    where = f"; all of it is in {whole}" if whole else ""
    note = f"[... {size - len(head) - len(tail)} of {size} bytes left out{where} ...]\n"
    return head.decode(errors="replace") + note + tail.decode(errors="replace")


def _run(
    command: Sequence[str],
    *,
    env: Mapping[str, str],
    timeout: float,
    cwd: str | None = None,
    kept: int = _OUTPUT_KEPT,
    keep_long_stderr: bool = False,
) -> _Completed:
    """Runs `command`; returns its exit code and bounded output; raises TimeoutExpired after killing it.

    The output goes to files, not pipes, so that no amount of it fills this process's
    memory: `kept` bytes of each are read back (see `_bounded_text`). With
    `keep_long_stderr`, a stderr longer than that is left in a file in the temporary
    folder, whose path the kept text names. The process gets its own session so that a
    timeout kills the whole group: tileiras starts ptxas.
    """
    with tempfile.TemporaryFile() as out, tempfile.NamedTemporaryFile(
        prefix="cutile-tileiras-", suffix=".stderr.txt", delete=False
    ) as err:
        left = False  # whether the stderr file is left for the user
        try:
            proc = subprocess.Popen(
                list(command), stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                env=dict(env), cwd=cwd, start_new_session=True,
            )
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired as exc:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait()
                exc.stdout, exc.stderr = _bounded_text(out, kept, None).encode(), _bounded_text(err, kept, None).encode()
                raise
            left = keep_long_stderr and os.fstat(err.fileno()).st_size > kept
            return _Completed(
                proc.returncode, _bounded_text(out, kept, None), _bounded_text(err, kept, err.name if left else None)
            )
        finally:
            if not left:
                err.close()
                _remove(err.name)


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass  # a temporary file: the system cleans its folder


def _decode(data: bytes | str | None) -> str:
    if data is None:
        return ""
    return data if isinstance(data, str) else data.decode(errors="replace")


# --- the toolchain -----------------------------------------------------------------


@dataclass(frozen=True)
class Toolchain:
    """A usable tileiras with its ptxas and libnvvm.

    Attributes:
        tileiras: the executable (symlinks resolved: tileiras finds its companions
            relative to its real location).
        root: the toolkit it belongs to, ``tileiras/../..``; ``CUDA_HOME`` is set to it.
        version: the release, e.g. ``(13, 4, 92)``.
        version_text: what ``tileiras --version`` printed.
        identity: a digest of `version_text` and the path, size and mtime of tileiras,
            its ptxas and its libnvvm: the disk cache keys cubins by it, so that a
            replaced or foreign binary answering ``--version`` alike shares no entry.
        bytecode_versions: the bytecode versions it reads, oldest first.
        gpu_names: the ``--gpu-name`` values its ``--help`` lists (empty if unknown).
        found_by: which rule found it: ``"CUTILE_TILEIRAS"``, ``"CUDA_TOOLKIT_PATH"``,
            ``"pip"`` or ``"PATH"``.
        ptxas: the ptxas beside it.
        libnvvm: the libnvvm beside it.
    """

    tileiras: Path
    root: Path
    version: tuple[int, int, int]
    version_text: str
    bytecode_versions: tuple[tuple[int, int], ...]
    gpu_names: tuple[str, ...]
    found_by: str
    ptxas: Path
    libnvvm: Path
    identity: str

    @property
    def release(self) -> str:
        """The version as text, e.g. ``"13.4.92"``."""
        return ".".join(map(str, self.version))

    def describe(self) -> str:
        """One line for messages: version, path and how it was found."""
        return f"tileiras {self.release} at {self.tileiras} (found via {self.found_by})"

    @property
    def bytecode_version(self) -> tuple[int, int]:
        """The bytecode version to write for it; see `choose_bytecode_version`."""
        return choose_bytecode_version(self)

    def check_arch(self, arch: str) -> None:
        """Raises ``ArchError`` / ``ToolchainError`` unless this tileiras can compile for `arch`."""
        needed = min_tileiras_version(arch)
        if self.version[:2] < needed:
            raise ToolchainError(
                f"{self.describe()} cannot compile for {arch}: it needs tileiras "
                f"{needed[0]}.{needed[1]} or newer. Install a newer one: {INSTALL_HINT}"
            )
        if self.gpu_names and arch not in self.gpu_names:
            raise ArchError(
                f"{self.describe()} does not know GPU {arch!r}; it compiles for: {', '.join(self.gpu_names)}"
            )

    def environment(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """The environment tileiras runs in: `base` (default: ours) with CUDA_HOME = `root`."""
        env = dict(os.environ if base is None else base)
        env["CUDA_HOME"] = str(self.root)  # an inherited CUDA_HOME of another toolkit makes it fail
        return env

    def command(self, source: Path, output: Path, arch: str, options: CompileOptions) -> list[str]:
        """The tileiras command line compiling `source` into `output` for `arch`."""
        return [str(self.tileiras), str(source), "-o", str(output), f"--gpu-name={arch}", *options.args()]

    def compile(
        self,
        bytecode: bytes,
        arch: str,
        *,
        timeout: float | None = None,
        options: CompileOptions | None = None,
        locations: Locations | None = None,
        entries: Sequence[str] | None = None,
    ) -> bytes:
        """Compiles Tile IR bytecode to a cubin for `arch` (e.g. ``"sm_90"``) and returns it.

        The cubin is checked before it is returned: a CUDA ELF file (`_cubin.cubin_problem`)
        defining each kernel in `entries`.

        Args:
            bytecode: a complete Tile IR bytecode file.
            arch: the GPU, ``"sm_XY"``.
            timeout: seconds before tileiras is stopped; default ``CUTILE_TILEIRAS_TIMEOUT``.
            options: tileiras flags; default `CompileOptions()`.
            locations: turns (file, line, col) into a source excerpt for error messages;
                see `map_diagnostics`.
            entries: the kernels the cubin must define; default the entry functions of
                the bytecode (none when cutile_ir cannot read it).

        Raises:
            cutile.ArchError, cutile.ToolchainError: before running, when `arch` is not usable.
            cutile.TileirasTimeoutError: tileiras ran past `timeout`.
            cutile.TileirasError: tileiras failed, or wrote no cubin, or not a cubin of these
                kernels; carries its exit code, stderr and command.
        """
        self.check_arch(arch)
        if not isinstance(bytecode, (bytes, bytearray, memoryview)):
            raise ArgumentTypeError(f"bytecode must be bytes, got {type(bytecode).__name__}")
        opts = CompileOptions() if options is None else options
        limit = _config.TILEIRAS_TIMEOUT.get() if timeout is None else timeout
        if not limit > 0:
            raise ArgumentError(f"timeout must be a positive number of seconds, got {timeout!r}")
        with tempfile.TemporaryDirectory(prefix="cutile-tileiras-") as tmp:
            source, output = Path(tmp, "kernel.tileirbc"), Path(tmp, "kernel.cubin")
            source.write_bytes(bytecode)
            command = self.command(source, output, arch, opts)
            try:
                done = _run(command, env=self.environment(), timeout=limit, cwd=tmp, keep_long_stderr=True)
            except subprocess.TimeoutExpired as exc:
                raise TileirasTimeoutError(
                    f"tileiras did not finish compiling for {arch} within {limit:g} s and was stopped. "
                    f"A very large kernel may need longer: raise CUTILE_TILEIRAS_TIMEOUT (seconds) "
                    f"or pass timeout=.\ncommand: {shlex.join(command)}",
                    command=command,
                    stderr=_decode(exc.stderr),
                    timeout=limit,
                ) from None
            except OSError as exc:
                raise ToolchainError(f"could not run {self.describe()}: {exc}") from exc
            code, stdout, stderr = done.returncode, done.stdout, done.stderr
            problem: str | None = None
            if code == 0 and output.is_file():
                cubin = output.read_bytes()
                names = _entry_names(bytecode) if entries is None else tuple(entries)
                problem = cubin_problem(cubin, names)
                if problem is None:
                    return cubin
        diagnostics = map_diagnostics(stderr, locations) if locations is not None else stderr
        raise TileirasError(
            self._failure_message(code, arch, command, stdout, stderr, diagnostics, problem),
            command=command,
            returncode=code,
            stderr=stderr,
            diagnostics=diagnostics,
        )

    def _failure_message(
        self,
        code: int,
        arch: str,
        command: Sequence[str],
        stdout: str,
        stderr: str,
        diagnostics: str,
        problem: str | None = None,
    ) -> str:
        if problem is not None:
            head = (
                f"tileiras exited 0 but what it wrote for {arch} is not a usable cubin: {problem}. "
                f"Is {self.tileiras} NVIDIA's tileiras? Its output"
            )
        elif code == 0:
            head = f"tileiras exited 0 but wrote no cubin when compiling for {arch}"
        else:
            head = f"tileiras failed with exit code {code} compiling for {arch}"
        parts = [head + ":"]
        text = (diagnostics.strip() + "\n" + stdout.strip()).strip()
        parts.append("  " + text.replace("\n", "\n  ") if text else "  (it printed nothing)")
        specific = [ln for ln in stderr.splitlines() if ln.strip() and _GENERIC_FAILURE not in ln]
        if code == 5 and not specific:
            # Exit 5 with only the generic line: its ptxas/libnvvm did not match it.
            inherited = os.environ.get("CUDA_HOME")
            parts.append(
                f"Exit code 5 with no other message means tileiras could not use a ptxas or libnvvm "
                f"of its own version ({self.release}); this happens when CUDA_HOME names another "
                f"toolkit. cutile ran it with CUDA_HOME={self.root}"
                + (f" (your environment has CUDA_HOME={inherited})" if inherited else "")
                + f". Check that {self.ptxas} and {self.libnvvm} are of release "
                f"{self.version[0]}.{self.version[1]}, or reinstall: {INSTALL_HINT}"
            )
        elif "does not correspond to Tile IR bytecode" in stderr:
            readable = ", ".join(f"{a}.{b}" for a, b in self.bytecode_versions)
            parts.append(
                f"tileiras could not read the bytecode: it is malformed, or of a version it does not "
                f"read (this one reads {readable})."
            )
        parts.append(f"command (its temporary files are deleted): {shlex.join(command)}")
        return "\n".join(parts)


def _entry_names(bytecode: bytes) -> tuple[str, ...]:
    """The kernel entries of `bytecode`, which its cubin must define; () if unreadable."""
    try:
        module = ir.read_bytecode(bytecode)
    except Exception:  # noqa: BLE001 - tileiras accepted it; the cubin is still checked as a CUDA ELF
        return ()
    return tuple(function.name for function in module.functions if function.entry)


def choose_bytecode_version(toolchain: Toolchain) -> tuple[int, int]:
    """The newest bytecode version that both `toolchain` reads and cutile writes."""
    common = sorted(set(toolchain.bytecode_versions) & set(SUPPORTED_BYTECODE_VERSIONS))
    if not common:
        theirs = ", ".join(f"{a}.{b}" for a, b in toolchain.bytecode_versions) or "none listed"
        ours = ", ".join(f"{a}.{b}" for a, b in SUPPORTED_BYTECODE_VERSIONS)
        raise ToolchainError(
            f"{toolchain.describe()} reads bytecode versions {theirs}; cutile writes {ours}. "
            f"Use a matching tileiras: {INSTALL_HINT}"
        )
    return common[-1]


# --- discovery ---------------------------------------------------------------------


def _is_executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def _pip_bin_folders() -> list[Path]:
    """The ``nvidia/cu*/bin`` folders of the pip CUDA packages, newest CUDA major first."""
    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        return []
    if spec is None or spec.submodule_search_locations is None:
        return []
    folders: list[Path] = []
    for location in spec.submodule_search_locations:
        found = [p for p in Path(location).glob("cu[0-9]*") if p.name[2:].isdigit() and (p / "bin").is_dir()]
        found.sort(key=lambda p: int(p.name[2:]), reverse=True)
        folders.extend(p / "bin" for p in found)
    return folders


def _locate() -> tuple[Path, str]:
    """Where tileiras is, and which rule found it; `ToolchainError` saying where it looked."""
    explicit = _config.TILEIRAS.get()
    if explicit is not None:
        if not _is_executable(explicit):
            what = "is a folder" if explicit.is_dir() else "is not executable" if explicit.exists() else "does not exist"
            raise ToolchainError(
                f"CUTILE_TILEIRAS={explicit} {what}: point it at the tileiras executable "
                "(e.g. <toolkit>/bin/tileiras), or unset it to search CUDA_TOOLKIT_PATH, the pip packages and PATH"
            )
        return explicit, "CUTILE_TILEIRAS"
    looked: list[str] = []
    toolkit = _config.CUDA_TOOLKIT_PATH.get()
    if toolkit is not None:
        candidate = toolkit / "bin" / _TILEIRAS
        if _is_executable(candidate):
            return candidate, "CUDA_TOOLKIT_PATH"
        looked.append(f"CUDA_TOOLKIT_PATH ({candidate} is missing)")
    else:
        looked.append("CUDA_TOOLKIT_PATH (unset)")
    folders = _pip_bin_folders()
    for folder in folders:
        if _is_executable(folder / _TILEIRAS):
            return folder / _TILEIRAS, "pip"
    looked.append(
        "the pip packages (" + (", ".join(map(str, folders)) + " hold no tileiras" if folders else "no nvidia/cu*/bin")
        + ")"
    )
    on_path = shutil.which("tileiras")
    if on_path is not None:
        return Path(on_path), "PATH"
    looked.append("PATH")
    raise ToolchainError(
        "tileiras (NVIDIA's Tile IR assembler) was not found; looked at CUTILE_TILEIRAS (unset), "
        + ", ".join(looked)
        + f". Install it: {INSTALL_HINT}"
    )


_VERSION = re.compile(r"\bV(\d+)\.(\d+)\.(\d+)\b")
_RELEASE = re.compile(r"\brelease (\d+)\.(\d+)\b")
_LISTED_VERSION = re.compile(r"^\s*(\d+)\.(\d+)\s*$", re.MULTILINE)
_GPU_NAME = re.compile(r"=(sm_\d+)\b")


def _probe_output(tool: Path, flag: str, env: Mapping[str, str]) -> tuple[int, str]:
    limit = min(_PROBE_TIMEOUT_S, _config.TILEIRAS_TIMEOUT.get())
    try:
        done = _run([str(tool), flag], env=env, timeout=limit, kept=_PROBE_OUTPUT_KEPT)
    except subprocess.TimeoutExpired:
        raise ToolchainError(
            f"{tool} {flag} did not answer within {limit:g} s and was stopped (it answers in "
            f"milliseconds when it works; the limit is CUTILE_TILEIRAS_TIMEOUT, at most {_PROBE_TIMEOUT_S:g} s)"
        ) from None
    except OSError as exc:
        raise ToolchainError(f"could not run {tool} {flag}: {exc}") from exc
    return done.returncode, done.stdout + done.stderr


def _parse_version(text: str) -> tuple[int, int, int] | None:
    full = _VERSION.search(text)
    if full is not None:
        return int(full.group(1)), int(full.group(2)), int(full.group(3))
    release = _RELEASE.search(text)
    if release is not None:
        return int(release.group(1)), int(release.group(2)), 0
    return None


def _find_libnvvm(root: Path) -> Path | None:
    # A toolkit has nvvm/lib64; the pip packages put it in lib; Windows in nvvm/bin.
    for folder, pattern in (
        ("nvvm/lib64", "libnvvm.so*"),
        ("nvvm/lib", "libnvvm.so*"),
        ("lib", "libnvvm.so*"),
        ("lib64", "libnvvm.so*"),
        ("nvvm/bin", "nvvm64*.dll"),
    ):
        found = sorted((root / folder).glob(pattern))
        if found:
            return found[0]
    return None


def _identity(version_text: str, files: Sequence[Path]) -> str:
    """The digest `Toolchain.identity` names: the version text and each file's path, size and mtime."""
    digest = hashlib.sha256(version_text.encode())
    for path in files:
        try:
            info = path.stat()
            facts = f"{path}\0{info.st_size}\0{info.st_mtime_ns}"
        except OSError as exc:  # gone: no identity matches the one probed
            facts = f"{path}\0{exc.errno}"
        digest.update(len(facts).to_bytes(8, "little") + facts.encode())
    return digest.hexdigest()


_PROBE_LAYOUT = "toolchain-v1"
_PROBE_SUFFIX = ".probe"


def _probe_record_cache() -> DiskCache | None:
    """Where probes are recorded for later processes: beside the cubins."""
    from cutile_compiler._cache import DiskCache  # (the cache module builds on this one)

    if not _config.CACHE.get():
        return None
    return DiskCache(_config.CACHE_DIR.get(), _config.CACHE_MAX_BYTES.get(), layout=_PROBE_LAYOUT,
                     suffix=_PROBE_SUFFIX, max_entry_bytes=1 << 16)


def _probe_key(tileiras: str, found_by: str, mtime_ns: int, size: int) -> str:
    return hashlib.sha256(f"{_PROBE_LAYOUT}\0{tileiras}\0{found_by}\0{mtime_ns}\0{size}".encode()).hexdigest()


def _remembered_probe(key: str) -> Toolchain | None:
    """The probe of this binary recorded on disk by an earlier process, if its ptxas and
    libnvvm are still the files it probed (`_identity`); None otherwise."""
    records = _probe_record_cache()
    payload = records.get(key) if records is not None else None
    if payload is None:
        return None
    try:
        facts = json.loads(payload)
        chain = Toolchain(
            tileiras=Path(facts["tileiras"]), root=Path(facts["root"]), version=tuple(facts["version"]),
            version_text=str(facts["version_text"]),
            bytecode_versions=tuple((int(a), int(b)) for a, b in facts["bytecode_versions"]),
            gpu_names=tuple(str(n) for n in facts["gpu_names"]), found_by=str(facts["found_by"]),
            ptxas=Path(facts["ptxas"]), libnvvm=Path(facts["libnvvm"]), identity=str(facts["identity"]))
    except (ValueError, TypeError, KeyError):
        return None
    if len(chain.version) != 3 or _identity(chain.version_text, (chain.tileiras, chain.ptxas, chain.libnvvm)) \
            != chain.identity:
        return None
    return chain


def _remember_probe(key: str, chain: Toolchain) -> None:
    records = _probe_record_cache()
    if records is not None:
        records.put(key, json.dumps({
            "tileiras": str(chain.tileiras), "root": str(chain.root), "version": list(chain.version),
            "version_text": chain.version_text, "bytecode_versions": [list(v) for v in chain.bytecode_versions],
            "gpu_names": list(chain.gpu_names), "found_by": chain.found_by, "ptxas": str(chain.ptxas),
            "libnvvm": str(chain.libnvvm), "identity": chain.identity}).encode())


@functools.lru_cache(maxsize=16)
def _probe(tileiras: str, found_by: str, mtime_ns: int, size: int) -> Toolchain:
    """What tileiras is and its checked companions; cached per binary (path, mtime,
    size) in process and on disk (a new process runs none of the probes, which take
    tens of milliseconds, while the binaries are the ones probed)."""
    key = _probe_key(tileiras, found_by, mtime_ns, size)
    chain = _remembered_probe(key)
    if chain is None:
        chain = _run_probe(tileiras, found_by)
        _remember_probe(key, chain)
    return chain


def _run_probe(tileiras: str, found_by: str) -> Toolchain:
    """Asks tileiras what it is and checks its companions."""
    exe = Path(tileiras)
    root = exe.parent.parent
    env = dict(os.environ)
    env["CUDA_HOME"] = str(root)
    code, text = _probe_output(exe, "--version", env)
    version = _parse_version(text)
    if code != 0 or version is None:
        raise ToolchainError(
            f"{exe} (found via {found_by}) does not look like tileiras: '--version' exited {code} "
            f"and printed {text.strip()[:300]!r}. {INSTALL_HINT}"
        )
    where = f"tileiras {'.'.join(map(str, version))} at {exe} (found via {found_by})"
    code, listed = _probe_output(exe, "--list-versions", env)
    versions = tuple(sorted({(int(a), int(b)) for a, b in _LISTED_VERSION.findall(listed)})) if code == 0 else ()
    if not versions:  # older releases have no --list-versions: they read 13.1 up to their own
        versions = tuple((13, m) for m in range(1, version[1] + 1)) if version[0] == 13 else SUPPORTED_BYTECODE_VERSIONS
    code, help_text = _probe_output(exe, "--help", env)
    gpu_names = tuple(dict.fromkeys(_GPU_NAME.findall(help_text))) if code == 0 else ()

    ptxas = root / "bin" / _PTXAS
    if not _is_executable(ptxas):
        raise ToolchainError(
            f"{where} has no ptxas beside it ({ptxas} is missing); tileiras needs the ptxas and libnvvm "
            f"of its own version ({version[0]}.{version[1]}). Install them: {INSTALL_HINT}"
        )
    code, ptxas_text = _probe_output(ptxas, "--version", env)
    ptxas_version = _parse_version(ptxas_text)
    if ptxas_version is not None and ptxas_version[:2] != version[:2]:
        raise ToolchainError(
            f"{where} has a ptxas of another release ({ptxas} is {ptxas_version[0]}.{ptxas_version[1]}); "
            f"tileiras fails with exit code 5 unless ptxas and libnvvm are of its own minor version "
            f"{version[0]}.{version[1]}. Install matching ones: {INSTALL_HINT}"
        )
    libnvvm = _find_libnvvm(root)
    if libnvvm is None:
        raise ToolchainError(
            f"{where} has no libnvvm beside it (looked in {root}/nvvm/lib64, {root}/lib and similar); "
            f"tileiras needs the libnvvm of its own version {version[0]}.{version[1]}. "
            f"Install it: {INSTALL_HINT}"
        )
    return Toolchain(
        tileiras=exe,
        root=root,
        version=version,
        version_text=text.strip(),
        bytecode_versions=versions,
        gpu_names=gpu_names,
        found_by=found_by,
        ptxas=ptxas,
        libnvvm=libnvvm,
        identity=_identity(text.strip(), (exe, ptxas, libnvvm)),
    )


def find_toolchain() -> Toolchain:
    """The tileiras to use, found by the rules in the module's docstring, checked.

    The environment is read on every call; the answers of a given binary (version,
    bytecode versions, companions) are cached until it changes on disk.

    Raises:
        ToolchainError: tileiras is missing, broken, or its ptxas/libnvvm are missing or
            of another version; the message says how to install a working set.
    """
    located, found_by = _locate()
    real = located.resolve()  # tileiras looks for ptxas relative to its real path
    stat = real.stat()
    chain = _probe(str(real), found_by, stat.st_mtime_ns, stat.st_size)
    if _identity(chain.version_text, (chain.tileiras, chain.ptxas, chain.libnvvm)) != chain.identity:
        _probe.cache_clear()  # its ptxas or libnvvm changed since it was probed: probe it again
        chain = _probe(str(real), found_by, stat.st_mtime_ns, stat.st_size)
    return chain


def clear_toolchain_cache() -> None:
    """Forgets what was learnt about tileiras binaries, in process and in the disk
    cache (for tests, or after an upgrade)."""
    _probe.cache_clear()
    try:
        records = _probe_record_cache()
    except _config.ConfigError:  # a malformed CUTILE_CACHE*: there is no cache to clear
        return
    if records is not None:
        records.clear()

