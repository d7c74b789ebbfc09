"""tileiras: discovery order, version and companion checks, arch strings, running it, errors."""

from __future__ import annotations

import os
import re
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cutile_compiler import _toolchain
from cutile_compiler._cubin import cubin_problem
from cutile_compiler._toolchain import (
    ArchError,
    CompileOptions,
    TileirasError,
    TileirasTimeoutError,
    Toolchain,
    ToolchainError,
)

FakeToolkit = Callable[..., Path]
FIXTURES = Path(__file__).parent

# --- arch strings --------------------------------------------------------------------


@pytest.mark.parametrize(("arch", "capability", "major", "minor"),
                         [("sm_80", 80, 8, 0), ("sm_86", 86, 8, 6), ("sm_90", 90, 9, 0), ("sm_100", 100, 10, 0),
                          ("sm_120", 120, 12, 0), ("sm_103", 103, 10, 3)])
def test_plain_arch_strings_parse(arch: str, capability: int, major: int, minor: int) -> None:
    parsed = _toolchain.parse_arch(arch)
    assert (parsed.sm, parsed.major, parsed.minor, str(parsed)) == (capability, major, minor, arch)


@pytest.mark.parametrize(
    ("arch", "fragment"),
    [
        ("sm_90a", "'sm_90'"),
        ("sm_100a", "'sm_100'"),
        ("sm_100f", "'sm_100'"),
        ("90", "'sm_90'"),
        ("compute_90", "'sm_90'"),
        ("9.0", "'sm_90'"),
        ("SM_90", "'sm_90'"),
        ("hopper", "'sm_90'"),
        ("", "sm_XY"),
        ("sm_75", "sm_80"),
        ("sm_70", "too old"),
    ],
)
def test_bad_arch_strings_say_what_to_write(arch: str, fragment: str) -> None:
    with pytest.raises(ArchError) as info:
        _toolchain.parse_arch(arch)
    assert repr(arch) in str(info.value) and fragment in str(info.value)
    assert isinstance(info.value, ValueError)


def test_non_string_arch_is_refused() -> None:
    with pytest.raises(ArchError, match="string such as 'sm_90'"):
        _toolchain.parse_arch(90)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("arch", "needed"),
    [("sm_80", (13, 2)), ("sm_89", (13, 2)), ("sm_90", (13, 3)), ("sm_100", (13, 1)), ("sm_120", (13, 1))],
)
def test_minimum_tileiras_per_target(arch: str, needed: tuple[int, int]) -> None:
    assert _toolchain.min_tileiras_version(arch) == needed


# --- options -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "args"),
    [
        (CompileOptions(), ("--opt-level=3",)),
        (CompileOptions(opt_level=1, lineinfo=True), ("--opt-level=1", "--lineinfo")),
        (CompileOptions(opt_level=0, device_debug=True), ("--opt-level=0", "--device-debug")),
        (CompileOptions(extra_args=("--sanitize=memcheck",)), ("--opt-level=3", "--sanitize=memcheck")),
    ],
)
def test_options_become_flags(options: CompileOptions, args: tuple[str, ...]) -> None:
    assert options.args() == args


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"opt_level": 4}, "opt_level"),
        ({"opt_level": True}, "opt_level"),
        ({"device_debug": True}, "opt_level=0"),
        ({"extra_args": ("-o", "x")}, "'-o'"),
        ({"extra_args": ("--gpu-name=sm_90",)}, "GPU name"),
        ({"extra_args": "--lineinfo"}, "tuple of strings"),
    ],
)
def test_bad_options_are_refused(kwargs: dict[str, object], fragment: str) -> None:
    with pytest.raises(ValueError, match="CompileOptions") as info:
        CompileOptions(**kwargs)  # type: ignore[arg-type]
    assert fragment in str(info.value)


# --- discovery -----------------------------------------------------------------------


@pytest.fixture
def four_toolkits(
    fake_toolkit: FakeToolkit, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> dict[str, Path]:
    """One fake toolkit per discovery rule, each rule enabled."""
    roots = {rule: fake_toolkit(rule.lower()) for rule in _toolchain.FOUND_BY_RULES}
    monkeypatch.setenv("CUTILE_TILEIRAS", str(roots["CUTILE_TILEIRAS"] / "bin" / "tileiras"))
    monkeypatch.setenv("CUDA_TOOLKIT_PATH", str(roots["CUDA_TOOLKIT_PATH"]))
    monkeypatch.setattr(_toolchain, "_pip_bin_folders", lambda: [roots["pip"] / "bin"])
    monkeypatch.setenv("PATH", f"{roots['PATH'] / 'bin'}{os.pathsep}{os.environ['PATH']}")
    return roots


@pytest.mark.parametrize("disabled", range(len(_toolchain.FOUND_BY_RULES)))
def test_discovery_order(four_toolkits: dict[str, Path], monkeypatch: pytest.MonkeyPatch, disabled: int) -> None:
    # Turn off the first `disabled` rules: the next one must win.
    rules = _toolchain.FOUND_BY_RULES
    for rule in rules[:disabled]:
        if rule in ("CUTILE_TILEIRAS", "CUDA_TOOLKIT_PATH"):
            monkeypatch.delenv(rule)
        elif rule == "pip":
            monkeypatch.setattr(_toolchain, "_pip_bin_folders", lambda: [])
    chain = _toolchain.find_toolchain()
    assert chain.found_by == rules[disabled]
    assert chain.root == four_toolkits[rules[disabled]].resolve()
    assert chain.tileiras == chain.root / "bin" / "tileiras"
    assert chain.version == (13, 4, 92)


def test_nothing_found_says_how_to_install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(_toolchain, "_pip_bin_folders", lambda: [])
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ToolchainError) as info:
        _toolchain.find_toolchain()
    message = str(info.value)
    assert "pip install" in message and "nvidia-cuda-tileiras==" in message and "nvidia-nvvm==" in message
    assert "CUTILE_TILEIRAS" in message and "PATH" in message


@pytest.mark.parametrize("problem", ["missing", "folder", "not executable"])
def test_explicit_tileiras_must_exist(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, problem: str) -> None:
    target = tmp_path / "tileiras"
    if problem == "folder":
        target.mkdir()
    elif problem == "not executable":
        target.write_text("#!/bin/sh\n")
    monkeypatch.setenv("CUTILE_TILEIRAS", str(target))
    with pytest.raises(ToolchainError, match="CUTILE_TILEIRAS=") as info:
        _toolchain.find_toolchain()
    assert {"missing": "does not exist", "folder": "is a folder", "not executable": "not executable"}[problem] in str(
        info.value
    )


def test_toolkit_path_without_tileiras_falls_through(four_toolkits: dict[str, Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("CUTILE_TILEIRAS")
    monkeypatch.setenv("CUDA_TOOLKIT_PATH", str(tmp_path / "cuda-12.8"))  # an older toolkit, no tileiras
    assert _toolchain.find_toolchain().found_by == "pip"


def test_pip_folders_come_from_the_nvidia_namespace_package() -> None:
    folders = _toolchain._pip_bin_folders()
    if not any((folder / "tileiras").exists() for folder in folders):
        pytest.skip("the nvidia-cuda-tileiras wheel is not installed here")
    assert all(folder.name == "bin" and folder.parent.parent.name == "nvidia" for folder in folders)
    assert any(folder.parent.name == "cu13" for folder in folders)


def test_real_pip_toolchain(real_toolchain: Toolchain) -> None:
    if real_toolchain.found_by != "pip":
        pytest.skip(f"tileiras here comes from {real_toolchain.found_by}")
    assert real_toolchain.root.name == "cu13"
    assert real_toolchain.version >= (13, 3, 0)
    assert real_toolchain.ptxas == real_toolchain.root / "bin" / "ptxas"
    assert real_toolchain.libnvvm.name.startswith("libnvvm")
    assert (13, 1) in real_toolchain.bytecode_versions and "sm_90" in real_toolchain.gpu_names
    assert "Cuda compilation tools" in real_toolchain.version_text
    assert real_toolchain.bytecode_version == max(
        set(real_toolchain.bytecode_versions) & set(_toolchain.SUPPORTED_BYTECODE_VERSIONS)
    )


def test_symlinked_tileiras_belongs_to_its_real_toolkit(
    fake_toolkit: FakeToolkit, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    root = fake_toolkit("real")
    link_dir = tmp_path / "usr-local-bin"
    link_dir.mkdir()
    (link_dir / "tileiras").symlink_to(root / "bin" / "tileiras")
    monkeypatch.setattr(_toolchain, "_pip_bin_folders", lambda: [])
    monkeypatch.setenv("PATH", str(link_dir))
    chain = _toolchain.find_toolchain()
    assert chain.found_by == "PATH" and chain.root == root.resolve()


@pytest.mark.parametrize(
    ("listing", "expected_versions", "chosen"),
    [
        (("13.1", "13.2", "13.3", "13.4"), ((13, 1), (13, 2), (13, 3), (13, 4)), (13, 4)),
        (("13.1", "13.2", "13.3", "13.4", "13.5"), ((13, 1), (13, 2), (13, 3), (13, 4), (13, 5)), (13, 4)),
        (("13.1", "13.2"), ((13, 1), (13, 2)), (13, 2)),
        (None, ((13, 1), (13, 2), (13, 3)), (13, 3)),  # no --list-versions: derived from 13.3
    ],
)
def test_bytecode_version_follows_what_tileiras_reads(
    fake_toolkit: FakeToolkit,
    monkeypatch: pytest.MonkeyPatch,
    listing: tuple[str, ...] | None,
    expected_versions: tuple[tuple[int, int], ...],
    chosen: tuple[int, int],
) -> None:
    root = fake_toolkit("tk", "13.3.20", list_versions=listing)
    monkeypatch.setenv("CUTILE_TILEIRAS", str(root / "bin" / "tileiras"))
    chain = _toolchain.find_toolchain()
    assert chain.version == (13, 3, 20)
    assert chain.bytecode_versions == expected_versions
    assert _toolchain.choose_bytecode_version(chain) == chosen == chain.bytecode_version


def test_no_common_bytecode_version(fake_toolkit: FakeToolkit, monkeypatch: pytest.MonkeyPatch) -> None:
    root = fake_toolkit("tk", "14.0.1", list_versions=("14.0",))
    monkeypatch.setenv("CUTILE_TILEIRAS", str(root / "bin" / "tileiras"))
    with pytest.raises(ToolchainError, match="reads bytecode versions 14.0; cutile writes 13.1"):
        _toolchain.find_toolchain().bytecode_version


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"ptxas_version": None}, "no ptxas beside it"),
        ({"ptxas_version": "13.3.40"}, "ptxas of another release"),
        ({"libnvvm": False}, "no libnvvm beside it"),
    ],
)
def test_companions_must_match(
    fake_toolkit: FakeToolkit, monkeypatch: pytest.MonkeyPatch, kwargs: dict[str, object], fragment: str
) -> None:
    root = fake_toolkit("tk", **kwargs)
    monkeypatch.setenv("CUTILE_TILEIRAS", str(root / "bin" / "tileiras"))
    with pytest.raises(ToolchainError) as info:
        _toolchain.find_toolchain()
    assert fragment in str(info.value) and "13.4" in str(info.value) and "pip install" in str(info.value)


def test_not_a_tileiras(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    impostor = tmp_path / "bin" / "tileiras"
    impostor.parent.mkdir()
    impostor.write_text("#!/bin/sh\necho hello\n")
    impostor.chmod(0o755)
    monkeypatch.setenv("CUTILE_TILEIRAS", str(impostor))
    with pytest.raises(ToolchainError, match="does not look like tileiras"):
        _toolchain.find_toolchain()


@pytest.mark.parametrize(
    ("version", "arch", "ok"),
    [
        ("13.2.10", "sm_90", False),
        ("13.3.1", "sm_90", True),
        ("13.1.5", "sm_80", False),
        ("13.2.10", "sm_86", True),
        ("13.1.5", "sm_100", True),
    ],
)
def test_version_too_old_for_target(
    fake_toolkit: FakeToolkit, monkeypatch: pytest.MonkeyPatch, empty_kernel: bytes, version: str, arch: str, ok: bool
) -> None:
    root = fake_toolkit("tk", version, list_versions=None)
    monkeypatch.setenv("CUTILE_TILEIRAS", str(root / "bin" / "tileiras"))
    chain = _toolchain.find_toolchain()
    if ok:
        assert chain.compile(empty_kernel, arch).startswith(b"\x7fELF")
        return
    with pytest.raises(ToolchainError) as info:
        chain.compile(empty_kernel, arch)
    needed = _toolchain.min_tileiras_version(arch)
    assert f"needs tileiras {needed[0]}.{needed[1]} or newer" in str(info.value)
    assert "pip install" in str(info.value) and version in str(info.value)
    assert not (root / "compile-args.txt").exists()  # refused before running anything


def test_arch_unknown_to_this_tileiras(fake_toolkit: FakeToolkit, monkeypatch: pytest.MonkeyPatch, empty_kernel: bytes) -> None:
    root = fake_toolkit("tk", gpu_names=("sm_80", "sm_90"))
    monkeypatch.setenv("CUTILE_TILEIRAS", str(root / "bin" / "tileiras"))
    with pytest.raises(ArchError, match="does not know GPU 'sm_100'; it compiles for: sm_80, sm_90"):
        _toolchain.find_toolchain().compile(empty_kernel, "sm_100")


# --- running fake tileiras -----------------------------------------------------------


def test_cuda_home_is_the_toolchain_root(
    fake_toolkit: FakeToolkit, monkeypatch: pytest.MonkeyPatch, empty_kernel: bytes
) -> None:
    root = fake_toolkit("tk")
    monkeypatch.setenv("CUTILE_TILEIRAS", str(root / "bin" / "tileiras"))
    monkeypatch.setenv("CUDA_HOME", "/usr/local/cuda-12.4")  # an older toolkit in the caller's env
    monkeypatch.setenv("CUTILE_MARKER", "kept")
    cubin = _toolchain.find_toolchain().compile(empty_kernel, "sm_90", options=CompileOptions(opt_level=2, lineinfo=True))
    assert cubin == (root / "fake.cubin").read_bytes()
    env = (root / "compile-env.txt").read_text()
    assert f'CUDA_HOME="{root.resolve()}"' in env or f"CUDA_HOME='{root.resolve()}'" in env
    assert "cuda-12.4" not in env and "CUTILE_MARKER" in env  # the rest of the environment is passed on
    args = (root / "compile-args.txt").read_text().split()
    assert args[0].endswith(".tileirbc") and args[1:2] == ["-o"] and "--gpu-name=sm_90" in args
    assert args[-2:] == ["--opt-level=2", "--lineinfo"]


def test_exit_5_without_message_explains_cuda_home(
    fake_toolkit: FakeToolkit, monkeypatch: pytest.MonkeyPatch, empty_kernel: bytes
) -> None:
    root = fake_toolkit("tk", compile="echo 'error: failed to compile Tile IR program' >&2; exit 5")
    monkeypatch.setenv("CUTILE_TILEIRAS", str(root / "bin" / "tileiras"))
    monkeypatch.setenv("CUDA_HOME", "/opt/cuda-13.1")
    with pytest.raises(TileirasError) as info:
        _toolchain.find_toolchain().compile(empty_kernel, "sm_90")
    error = info.value
    assert error.returncode == 5 and "failed to compile Tile IR program" in error.stderr
    message = str(error)
    assert "exit code 5" in message and "CUDA_HOME" in message and "/opt/cuda-13.1" in message
    assert "ptxas" in message and "libnvvm" in message and "pip install" in message
    assert error.command[0] == str(root.resolve() / "bin" / "tileiras")


def test_exit_0_without_cubin_is_an_error(fake_toolkit: FakeToolkit, monkeypatch: pytest.MonkeyPatch, empty_kernel: bytes) -> None:
    root = fake_toolkit("tk", compile="exit 0")
    monkeypatch.setenv("CUTILE_TILEIRAS", str(root / "bin" / "tileiras"))
    with pytest.raises(TileirasError, match="exited 0 but wrote no cubin"):
        _toolchain.find_toolchain().compile(empty_kernel, "sm_90")


@pytest.mark.parametrize(
    ("output", "fragment"),
    [
        (b"not an elf at all", "it is not an ELF file (it starts with b'not an elf at al')"),
        (b"\x7fELF fake cubin", "it is 15 bytes long, shorter than an ELF header (64)"),  # the magic is not enough
        (b"", "it is empty"),
        ("machine 62", "for machine 62, not for CUDA (190)"),
        ("32-bit", "not a little-endian 64-bit ELF"),
        ("other kernel", "does not define the kernel kernel (the functions it defines: other)"),
        ("truncated", "lie outside the file"),
    ],
)
def test_exit_0_with_something_else_than_a_cubin_is_reported_as_such(
    fake_toolkit: FakeToolkit,
    monkeypatch: pytest.MonkeyPatch,
    empty_kernel: bytes,
    make_cubin: Callable[..., bytes],
    output: bytes | str,
    fragment: str,
) -> None:
    written = {
        "machine 62": make_cubin(machine=62),
        "32-bit": make_cubin(elf_class=1),
        "other kernel": make_cubin(("other",)),
        "truncated": make_cubin()[:200],
    }.get(output, output) if isinstance(output, str) else output
    root = fake_toolkit("tk")
    (root / "fake.cubin").write_bytes(written)
    monkeypatch.setenv("CUTILE_TILEIRAS", str(root / "bin" / "tileiras"))
    with pytest.raises(TileirasError) as info:
        _toolchain.find_toolchain().compile(empty_kernel, "sm_90")
    message = str(info.value)
    assert "exited 0 but what it wrote for sm_90 is not a usable cubin" in message and fragment in message
    assert "wrote no cubin" not in message and info.value.returncode == 0


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(edits=st.lists(st.tuples(st.integers(0, 1 << 16), st.integers(0, 255)), min_size=1, max_size=8), cut=st.integers(0, 1 << 16))
def test_the_cubin_check_answers_any_bytes(
    make_cubin: Callable[..., bytes], edits: list[tuple[int, int]], cut: int
) -> None:
    data = bytearray(make_cubin(("kernel", "other")))
    assert cubin_problem(bytes(data), ("kernel",)) is None  # (so the property can tell a checker that refuses all)
    for offset, value in edits:
        data[offset % len(data)] = value
    for candidate in (bytes(data), bytes(data[: cut % (len(data) + 1)])):
        problem = cubin_problem(candidate, ("kernel",))
        assert problem is None or isinstance(problem, str)


def test_a_cubin_with_many_functions_lists_a_few(make_cubin: Callable[..., bytes]) -> None:
    problem = cubin_problem(make_cubin(tuple(f"f{n:03}" for n in range(500))), ("kernel",))
    assert problem is not None and "f000, f001" in problem and "and 490 more" in problem and len(problem) < 300


def test_the_entries_to_check_can_be_given(
    fake_toolkit: FakeToolkit, monkeypatch: pytest.MonkeyPatch, empty_kernel: bytes, make_cubin: Callable[..., bytes]
) -> None:
    root = fake_toolkit("tk")
    (root / "fake.cubin").write_bytes(make_cubin(("kernel", "helper")))
    monkeypatch.setenv("CUTILE_TILEIRAS", str(root / "bin" / "tileiras"))
    chain = _toolchain.find_toolchain()
    assert chain.compile(empty_kernel, "sm_90", entries=("kernel", "helper")).startswith(b"\x7fELF")
    with pytest.raises(TileirasError, match="does not define the kernel absent"):
        chain.compile(empty_kernel, "sm_90", entries=("absent",))


def test_a_huge_stderr_keeps_its_head_and_tail_and_the_whole_in_a_file(
    fake_toolkit: FakeToolkit, monkeypatch: pytest.MonkeyPatch, empty_kernel: bytes
) -> None:
    noise = 'echo "error: the first line" >&2; yes "error: noise noise noise" | head -c 20000000 >&2; '
    root = fake_toolkit("tk", compile=noise + 'echo "error: the last line" >&2; exit 1')
    monkeypatch.setenv("CUTILE_TILEIRAS", str(root / "bin" / "tileiras"))
    with pytest.raises(TileirasError) as info:
        _toolchain.find_toolchain().compile(empty_kernel, "sm_90")
    message = str(info.value)
    assert len(message) < 40_000 and len(info.value.stderr) < 40_000
    assert "error: the first line" in message and "error: the last line" in message
    match = re.search(r"bytes left out; all of it is in (\S+) \.\.\.\]", message)
    assert match is not None, message[:2000]
    whole = Path(match.group(1))
    try:
        text = whole.read_text()
        assert text.startswith("error: the first line\n") and text.endswith("error: the last line\n")
        assert len(text) > 20_000_000
    finally:
        whole.unlink()


def test_a_short_stderr_is_kept_whole_and_no_file_is_left(
    fake_toolkit: FakeToolkit, monkeypatch: pytest.MonkeyPatch, empty_kernel: bytes, tmp_path: Path
) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    tempfile.tempdir = None  # re-read TMPDIR
    try:
        root = fake_toolkit("tk", compile='echo "error: one line" >&2; exit 1')
        monkeypatch.setenv("CUTILE_TILEIRAS", str(root / "bin" / "tileiras"))
        with pytest.raises(TileirasError) as info:
            _toolchain.find_toolchain().compile(empty_kernel, "sm_90")
        assert info.value.stderr == "error: one line\n" and "left out" not in str(info.value)
        assert list((tmp_path / "tmp").iterdir()) == []
    finally:
        tempfile.tempdir = None


@pytest.mark.parametrize("flag", ["--version", "--help"])
def test_a_hung_probe_obeys_the_timeout_knob(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, flag: str) -> None:
    hung = tmp_path / "bin" / "tileiras"
    hung.parent.mkdir()
    version = "printf 'Cuda compilation tools, release 13.4, V13.4.92\\n'"
    hung.write_text(
        f'#!/bin/sh\ncase "$1" in {flag}) exec sleep 30;; --version) {version};; esac\nexit 0\n'
    )
    hung.chmod(0o755)
    monkeypatch.setenv("CUTILE_TILEIRAS", str(hung))
    monkeypatch.setenv("CUTILE_TILEIRAS_TIMEOUT", "0.5")
    start = time.monotonic()
    with pytest.raises(ToolchainError) as info:
        _toolchain.find_toolchain()
    assert time.monotonic() - start < 10
    assert f"{flag} did not answer within 0.5 s" in str(info.value) and "CUTILE_TILEIRAS_TIMEOUT" in str(info.value)


def test_a_long_help_is_read_whole(fake_toolkit: FakeToolkit, monkeypatch: pytest.MonkeyPatch) -> None:
    names = tuple(f"sm_{n}" for n in range(80, 800))  # about 32 KiB of --help: more than a compile's output keeps
    root = fake_toolkit("tk", gpu_names=names)
    monkeypatch.setenv("CUTILE_TILEIRAS", str(root / "bin" / "tileiras"))
    assert _toolchain.find_toolchain().gpu_names == names


def test_identity_tells_binaries_apart(fake_toolkit: FakeToolkit, monkeypatch: pytest.MonkeyPatch) -> None:
    first, second = fake_toolkit("one"), fake_toolkit("two")  # the same --version text
    chains = []
    for root in (first, second):
        monkeypatch.setenv("CUTILE_TILEIRAS", str(root / "bin" / "tileiras"))
        chains.append(_toolchain.find_toolchain())
    assert chains[0].version_text == chains[1].version_text
    assert chains[0].identity != chains[1].identity and len(chains[0].identity) == 64
    assert _toolchain.find_toolchain() is chains[1]  # probed once while nothing changes
    ptxas = second / "bin" / "ptxas"
    stamp = ptxas.stat().st_mtime_ns + 5_000_000_000
    os.utime(ptxas, ns=(stamp, stamp))  # its ptxas replaced: another identity
    changed = _toolchain.find_toolchain()
    assert changed.identity not in (chains[0].identity, chains[1].identity)


@pytest.mark.parametrize("via", ["argument", "knob"])
def test_timeout_stops_tileiras_and_its_children(
    fake_toolkit: FakeToolkit, monkeypatch: pytest.MonkeyPatch, empty_kernel: bytes, via: str
) -> None:
    # The script's sleep is a child process holding the pipes: it must be killed too.
    root = fake_toolkit("tk", compile='"$SLEEP" 30; printf x > "$out"')
    monkeypatch.setenv("CUTILE_TILEIRAS", str(root / "bin" / "tileiras"))
    chain = _toolchain.find_toolchain()
    start = time.monotonic()
    with pytest.raises(TileirasTimeoutError) as info:
        if via == "argument":
            chain.compile(empty_kernel, "sm_90", timeout=0.3)
        else:
            monkeypatch.setenv("CUTILE_TILEIRAS_TIMEOUT", "0.3")
            chain.compile(empty_kernel, "sm_90")
    assert time.monotonic() - start < 10
    assert info.value.timeout == 0.3 and info.value.returncode is None
    assert "0.3 s" in str(info.value) and "CUTILE_TILEIRAS_TIMEOUT" in str(info.value)
    assert isinstance(info.value, TileirasError)


def test_probe_is_cached_until_the_binary_changes(fake_toolkit: FakeToolkit, monkeypatch: pytest.MonkeyPatch) -> None:
    root = fake_toolkit("tk", "13.3.1")
    monkeypatch.setenv("CUTILE_TILEIRAS", str(root / "bin" / "tileiras"))
    first = _toolchain.find_toolchain()
    assert _toolchain.find_toolchain() is first
    fake_toolkit("tk", "13.4.7")  # rewritten in place: another size
    assert _toolchain.find_toolchain().version == (13, 4, 7)


def test_a_new_process_reads_the_probe_recorded_on_disk(fake_toolkit: FakeToolkit,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    root = fake_toolkit("tk", "13.3.1")
    monkeypatch.setenv("CUTILE_TILEIRAS", str(root / "bin" / "tileiras"))
    first = _toolchain.find_toolchain()
    probes: list[str] = []
    real_probe = _toolchain._run_probe
    monkeypatch.setattr(_toolchain, "_run_probe", lambda *a: probes.append(a[0]) or real_probe(*a))
    _toolchain._probe.cache_clear()  # what a new process knows: only the disk
    again = _toolchain.find_toolchain()
    assert again == first and again is not first and probes == []
    ptxas = root / "bin" / "ptxas"
    stamp = ptxas.stat().st_mtime_ns + 5_000_000_000
    os.utime(ptxas, ns=(stamp, stamp))  # its ptxas replaced: the record no longer describes it
    _toolchain._probe.cache_clear()
    replaced = _toolchain.find_toolchain()
    assert len(probes) == 1 and replaced.identity != first.identity
    for path in (Path(os.environ["CUTILE_CACHE_DIR"]) / "toolchain-v1").rglob("*.probe"):
        path.write_bytes(path.read_bytes()[:-5])  # damaged: probed again, never an exception
    _toolchain._probe.cache_clear()
    assert _toolchain.find_toolchain() == replaced and len(probes) == 2
    monkeypatch.setenv("CUTILE_CACHE", "0")  # no disk cache: every new process probes
    _toolchain._probe.cache_clear()
    assert _toolchain.find_toolchain() == replaced and len(probes) == 3


# --- the real tileiras ---------------------------------------------------------------


@pytest.mark.parametrize("arch", ["sm_80", "sm_90", "sm_100"])
def test_real_compile_returns_an_elf_cubin(real_toolchain: Toolchain, empty_kernel: bytes, arch: str) -> None:
    cubin = real_toolchain.compile(empty_kernel, arch)
    assert cubin.startswith(b"\x7fELF") and len(cubin) > 1000


@pytest.mark.parametrize("minor", [1, 2, 3, 4])
def test_real_compile_of_each_bytecode_version(
    real_toolchain: Toolchain, make_empty_kernel: Callable[[int], bytes], minor: int
) -> None:
    if (13, minor) not in real_toolchain.bytecode_versions:
        pytest.skip(f"{real_toolchain.describe()} does not read 13.{minor}")
    assert real_toolchain.compile(make_empty_kernel(minor), "sm_90").startswith(b"\x7fELF")


@pytest.mark.parametrize(
    "options", [CompileOptions(opt_level=0, device_debug=True), CompileOptions(opt_level=1, lineinfo=True)]
)
def test_real_compile_with_options(real_toolchain: Toolchain, empty_kernel: bytes, options: CompileOptions) -> None:
    assert real_toolchain.compile(empty_kernel, "sm_90", options=options).startswith(b"\x7fELF")


def test_real_compile_ignores_a_foreign_cuda_home(
    real_toolchain: Toolchain, empty_kernel: bytes, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))  # run as is, tileiras would fail with exit 5
    assert real_toolchain.compile(empty_kernel, "sm_90").startswith(b"\x7fELF")


@pytest.mark.parametrize(
    "bytecode", [b"not bytecode at all", b"\x7fTileIR\x00\x0d\x01\x00\x00", b"\x7fTileIR\x00\x0d\x63\x00\x00\x00"]
)
def test_real_tileiras_rejects_invalid_bytecode(real_toolchain: Toolchain, bytecode: bytes) -> None:
    with pytest.raises(TileirasError) as info:
        real_toolchain.compile(bytecode, "sm_90")
    error = info.value
    assert error.returncode not in (0, None) and error.stderr.strip()
    assert error.stderr.strip() in str(error) or error.stderr.strip().splitlines()[0] in str(error)
    assert "--gpu-name=sm_90" in error.command and "command" in str(error)


def test_real_located_error_maps_to_source(real_toolchain: Toolchain, f8_kernel: bytes) -> None:
    seen: list[tuple[str, int, int]] = []

    def locations(file: str, line: int, col: int) -> str:
        seen.append((file, line, col))
        return "    y = x.astype(f8e4m3)\n        ^"

    with pytest.raises(TileirasError) as info:
        real_toolchain.compile(f8_kernel, "sm_80", locations=locations)
    error = info.value
    assert error.returncode == 5
    assert 'di_loc<loc("k.py":11:9)' in error.stderr
    assert seen == [("k.py", 11, 9)]
    assert error.diagnostics.splitlines()[:3] == [
        "k.py:11:9: error: Incompatibility with architecture 'sm_80': unsupported type 'f8E4M3FN'",
        "    y = x.astype(f8e4m3)",
        "        ^",
    ]
    assert "k.py:11:9: error: Incompatibility" in str(error)
    assert "CUDA_HOME" not in str(error)  # a real diagnostic: no toolchain-mismatch hint
    assert real_toolchain.compile(f8_kernel, "sm_90").startswith(b"\x7fELF")  # fine where f8 exists


# --- map_diagnostics -----------------------------------------------------------------

DI_LINE = (
    '#cuda_tile.di_loc<loc("k.py":11:9) in #cuda_tile.di_subprogram<file = <"k.py" in "/src">, line = 10, '
    'name = "kernel", linkageName = "kernel", compileUnit = <file = <"k.py" in "/src">>, scopeLine = 10>>: '
    "error: unsupported type 'f8E4M3FN'"
)


@pytest.mark.parametrize(
    ("stderr", "expected"),
    [
        (DI_LINE + "\nerror: failed to compile Tile IR program\n",
         "k.py:11:9: error: unsupported type 'f8E4M3FN'\n  <k.py 11 9>\nerror: failed to compile Tile IR program\n"),
        ("/src/k.py:3:1: warning: slow\n", "/src/k.py:3:1: warning: slow\n  <k.py 3 1>\n"),
        ('loc("a b.py":7:2): note: here', "a b.py:7:2: note: here\n  <a b.py 7 2>"),
        ('loc("q\\22.py":7:2): error: x', 'q".py:7:2: error: x\n  <q".py 7 2>'),
        ("error: input does not correspond to Tile IR bytecode\n", "error: input does not correspond to Tile IR bytecode\n"),
        ("tileiras: for the --gpu-name option: Cannot find option named 'sm_75'!", "tileiras: for the --gpu-name option: Cannot find option named 'sm_75'!"),
        ("", ""),
    ],
)
def test_map_diagnostics(stderr: str, expected: str) -> None:
    def locations(file: str, line: int, col: int) -> str:
        return f"  <{Path(file).name} {line} {col}>\n"

    assert _toolchain.map_diagnostics(stderr, locations) == expected


@pytest.mark.parametrize("behaviour", ["none", "raises"])
def test_map_diagnostics_without_excerpt(behaviour: str) -> None:
    def locations(file: str, line: int, col: int) -> str | None:
        if behaviour == "raises":
            raise KeyError(file)
        return None

    assert _toolchain.map_diagnostics(DI_LINE, locations) == "k.py:11:9: error: unsupported type 'f8E4M3FN'"


# --- arguments -----------------------------------------------------------------------


def test_toolchain_is_frozen_and_hashable(fake_toolkit: FakeToolkit, monkeypatch: pytest.MonkeyPatch) -> None:
    root = fake_toolkit("tk")
    monkeypatch.setenv("CUTILE_TILEIRAS", str(root / "bin" / "tileiras"))
    chain = _toolchain.find_toolchain()
    assert {chain: 1}[chain] == 1 and chain.describe().startswith("tileiras 13.4.92 at ")
    with pytest.raises(AttributeError):
        chain.root = Path("/")  # type: ignore[misc]


@pytest.mark.parametrize(
    ("bytecode", "timeout", "error"),
    [("text", None, TypeError), (b"\x7fTileIR", 0.0, ValueError), (b"\x7fTileIR", -1.0, ValueError)],
)
def test_compile_arguments_are_checked(
    fake_toolkit: FakeToolkit, monkeypatch: pytest.MonkeyPatch, bytecode: object, timeout: float | None, error: type[Exception]
) -> None:
    root = fake_toolkit("tk")
    monkeypatch.setenv("CUTILE_TILEIRAS", str(root / "bin" / "tileiras"))
    with pytest.raises(error, match="bytecode must be bytes|timeout must be a positive"):
        _toolchain.find_toolchain().compile(bytecode, "sm_90", timeout=timeout)  # type: ignore[arg-type]
    assert not (root / "compile-args.txt").exists()


def test_fixtures_disassemble_as_documented(real_toolchain: Toolchain, empty_kernel: bytes, f8_kernel: bytes, tmp_path: Path) -> None:
    import subprocess

    disasm = real_toolchain.root / "bin" / "tileirdisasm"
    if not disasm.exists():
        pytest.skip("no tileirdisasm beside tileiras")
    texts = []
    for name, bytecode in (("empty", empty_kernel), ("f8", f8_kernel)):
        (tmp_path / name).write_bytes(bytecode)
        done = subprocess.run([str(disasm), "-g", str(tmp_path / name)], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        texts.append(" ".join(done.stdout.split()))
    assert texts[0].startswith("entry @kernel() { return")
    assert texts[1].startswith("entry @kernel(%arg0: tile<f32>) { %0 = ftof %arg0 : tile<f32> -> tile<f8E4M3FN>")
    assert 'loc("k.py":11:9)' in texts[1]
