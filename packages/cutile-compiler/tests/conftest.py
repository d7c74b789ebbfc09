"""Fixtures for the toolchain and cache tests.

- `empty_kernel`: a hand-encoded Tile IR bytecode file holding ``entry @kernel() { return }``
  (what tileirdisasm prints for it), which every tileiras compiles for every target.
- `f8_kernel`: ``entry @kernel(%a: tile<f32>) { ftof %a -> tile<f8E4M3FN>; return }`` with a
  debug section placing the ftof at k.py:11:9. sm_80 has no f8, so tileiras rejects it
  there (exit 5) with a message carrying that location; it compiles for sm_90.
- `real_toolchain`: the tileiras of this environment (the test is skipped without one).
- `fake_toolkit`: builds a folder shaped like a CUDA toolkit whose tileiras is a shell
  script answering --version/--list-versions/--help and "compiling" as told (by default
  it writes `FAKE_CUBIN`, a minimal cubin made by `make_cubin` defining ``kernel``).

The encoder follows the Tile IR bytecode layout (see shared/TILEIR.md): magic, version,
then sections (id, length, alignment, payload) and an end byte.
"""

from __future__ import annotations

import shutil
import stat
import struct
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from cutile_compiler import _config, _toolchain

sys.path.insert(0, str(Path(__file__).parent))  # for the shared helpers (suite_kernels, tileir_reference)

# --- a minimal Tile IR bytecode encoder ----------------------------------------------


def uleb(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _pad(buf: bytearray, alignment: int) -> None:
    while len(buf) % alignment:
        buf.append(0xCB)


def _section(out: bytearray, section_id: int, payload: bytes, alignment: int) -> None:
    out.append(section_id | 0x80)  # every section written here carries an alignment
    out += uleb(len(payload)) + uleb(alignment)
    _pad(out, alignment)  # alignment is of the absolute file offset
    out += payload


def _offset_table(items: Sequence[bytes], index_width: int = 4) -> bytes:
    buf = bytearray(uleb(len(items)))
    _pad(buf, index_width)
    offset = 0
    for item in items:
        buf += offset.to_bytes(index_width, "little")
        offset += len(item)
    for item in items:
        buf += item
    return bytes(buf)


def encode_module(
    *,
    minor: int,
    strings: Sequence[bytes],
    types: Sequence[bytes],
    name: int,
    signature: int,
    body: bytes,
    debug: tuple[Sequence[int], Sequence[bytes]] | None = None,
) -> bytes:
    """One entry function; `debug` = (its location indices, the debug records)."""
    out = bytearray(b"\x7fTileIR\x00" + bytes([13, minor]) + (0).to_bytes(2, "little"))
    func = bytearray(uleb(1) + uleb(name) + uleb(signature) + b"\x02" + uleb(1 if debug else 0))
    func += uleb(len(body)) + body
    _pad(func, 8)
    _section(out, 2, bytes(func), 8)
    if debug is not None:
        indices, records = debug
        dbg = bytearray(uleb(1))  # one function with debug info
        _pad(dbg, 4)
        dbg += (0).to_bytes(4, "little") + uleb(len(indices))
        _pad(dbg, 8)
        for index in indices:
            dbg += index.to_bytes(8, "little")
        dbg += _offset_table(records)
        _section(out, 3, bytes(dbg), 8)
    _section(out, 5, _offset_table(types), 4)
    _section(out, 1, _offset_table(strings), 4)
    out.append(0)  # end of bytecode
    return bytes(out)


RETURN = uleb(0x5C) + uleb(0) + uleb(0)  # return: no results, no operands
FUNCTION_TYPE, TILE, F32, F8E4M3FN = 16, 13, 7, 10


def empty_kernel_bytecode(minor: int = 1) -> bytes:
    return encode_module(
        minor=minor,
        strings=[b"kernel"],
        types=[uleb(FUNCTION_TYPE) + uleb(0) + uleb(0)],
        name=0,
        signature=0,
        body=RETURN,
    )


def f8_kernel_bytecode() -> bytes:
    types = [
        uleb(F32),
        uleb(TILE) + uleb(0) + uleb(0),  # tile<f32>
        uleb(F8E4M3FN),
        uleb(TILE) + uleb(2) + uleb(0),  # tile<f8E4M3FN>
        uleb(FUNCTION_TYPE) + uleb(1) + uleb(1) + uleb(0),  # (tile<f32>) -> ()
    ]
    ftof = uleb(0x2A) + uleb(3) + uleb(0) + uleb(0)  # result type 3, rounding nearest_even, operand %0
    records = [  # debug record indices start at 1 (0 is the unknown location)
        uleb(2) + uleb(1) + uleb(2),  # 1: file "k.py" in "/src"
        uleb(1) + uleb(1),  # 2: compile unit of file 1
        uleb(5) + uleb(1) + uleb(10) + uleb(0) + uleb(0) + uleb(2) + uleb(10),  # 3: subprogram kernel, line 10
        uleb(4) + uleb(3) + uleb(1) + uleb(10) + uleb(1),  # 4: k.py:10:1 (the function)
        uleb(4) + uleb(3) + uleb(1) + uleb(11) + uleb(9),  # 5: k.py:11:9 (the ftof)
        uleb(4) + uleb(3) + uleb(1) + uleb(12) + uleb(5),  # 6: k.py:12:5 (the return)
    ]
    return encode_module(
        minor=1,
        strings=[b"kernel", b"k.py", b"/src"],
        types=types,
        name=0,
        signature=4,
        body=ftof + RETURN,
        debug=([4, 5, 6], records),
    )


@pytest.fixture
def empty_kernel() -> bytes:
    return empty_kernel_bytecode()


@pytest.fixture
def make_empty_kernel() -> Callable[[int], bytes]:
    """The empty kernel written as bytecode 13.<minor>."""
    return empty_kernel_bytecode


@pytest.fixture
def f8_kernel() -> bytes:
    return f8_kernel_bytecode()


# --- a minimal cubin ---------------------------------------------------------------


def make_cubin(functions: Sequence[str] = ("kernel",), *, machine: int = 190, elf_class: int = 2) -> bytes:
    """A minimal ELF64 file for `machine` (190 = EM_CUDA) whose symbol table defines
    each of `functions` in a ``.text`` section: what the cubin check reads, no more."""
    shstrtab = b"\0.shstrtab\0.strtab\0.symtab\0.text\0"
    strtab = bytearray(b"\0")
    symbols = bytearray(bytes(24))  # symbol 0 is the null symbol
    for name in functions:
        symbols += struct.pack("<IBBHQQ", len(strtab), 0x12, 0, 4, 0, 16)  # GLOBAL FUNC in section 4
        strtab += name.encode() + b"\0"
    text = bytes(16)
    body = bytearray(64)
    offsets = []
    for blob in (shstrtab, bytes(strtab), bytes(symbols), text):
        while len(body) % 8:
            body.append(0)
        offsets.append(len(body))
        body += blob
    while len(body) % 8:
        body.append(0)
    shoff = len(body)
    sections = [
        (0, 0, 0, 0, 0, 0, 0, 0, 0, 0),
        (1, 3, 0, 0, offsets[0], len(shstrtab), 0, 0, 1, 0),  # .shstrtab
        (11, 3, 0, 0, offsets[1], len(strtab), 0, 0, 1, 0),  # .strtab
        (19, 2, 0, 0, offsets[2], len(symbols), 2, 1, 8, 24),  # .symtab, names in section 2
        (27, 1, 6, 0, offsets[3], len(text), 0, 0, 128, 0),  # .text
    ]
    for section in sections:
        body += struct.pack("<IIQQQQIIQQ", *section)
    ident = b"\x7fELF" + bytes([elf_class, 1, 1, 0x41, 8]) + bytes(7)
    body[:64] = struct.pack("<16sHHIQQQIHHHHHH", ident, 2, machine, 1, 0, 0, shoff, 0x5A00, 64, 0, 0, 64, len(sections), 1)
    return bytes(body)


FAKE_CUBIN = make_cubin()


@pytest.fixture(name="make_cubin")
def make_cubin_fixture() -> Callable[..., bytes]:
    """`make_cubin`, for tests (conftest is not importable under --import-mode=importlib)."""
    return make_cubin


# --- environment ---------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _isolated_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """No test sees the developer's CUTILE_* settings or writes to the real cache."""
    for knob in _config.KNOBS:
        monkeypatch.delenv(knob.name, raising=False)
    monkeypatch.setenv("CUTILE_CACHE_DIR", str(tmp_path / "cutile-cache"))
    _toolchain.clear_toolchain_cache()
    yield
    _toolchain.clear_toolchain_cache()


@pytest.fixture
def real_toolchain() -> _toolchain.Toolchain:
    try:
        return _toolchain.find_toolchain()
    except _toolchain.ToolchainError as exc:
        pytest.skip(f"no usable tileiras here: {exc}")


# --- fake toolkits -------------------------------------------------------------------

HELP_TEXT = """\
TileIR Assembler Options:
  --gpu-name=<value>             - Specify name of NVIDIA GPU to generate code for.
{names}
  --lineinfo                     - Generate line-number information
"""

WRITE_CUBIN = r"""cat "$here/../fake.cubin" > "$out" """
RECORD_ENV = r"""export -p > "$here/../compile-env.txt"; printf '%s\n' "$@" > "$here/../compile-args.txt" """


def _write_script(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


FakeToolkit = Callable[..., Path]


@pytest.fixture
def fake_toolkit(tmp_path: Path) -> FakeToolkit:
    """make(name, version="13.4.92", ...) -> the root of a fake toolkit under tmp_path.

    Options: list_versions (None: --list-versions is unknown, exit 1), gpu_names,
    compile (shell run for a compile; $out is the output path, $here the bin folder),
    ptxas_version (None: no ptxas), libnvvm (False: none).
    """
    sleep = shutil.which("sleep") or "/bin/sleep"

    def make(
        name: str,
        version: str = "13.4.92",
        *,
        list_versions: Sequence[str] | None = ("13.1", "13.2", "13.3", "13.4"),
        gpu_names: Sequence[str] = ("sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120"),
        compile: str = RECORD_ENV + "\n" + WRITE_CUBIN,
        ptxas_version: str | None = "same",
        libnvvm: bool = True,
    ) -> Path:
        root = tmp_path / name
        major_minor = ".".join(version.split(".")[:2])
        listing = (
            "printf '" + "\\n".join(list_versions) + "\\n'; exit 0"
            if list_versions is not None
            else "echo \"tileiras: Unknown command line argument '--list-versions'\" >&2; exit 1"
        )
        names = "\n".join(f"    ={n}                       -   SM {n[3:]}" for n in gpu_names)
        script = f"""#!/bin/sh
here="$(cd "$(dirname "$0")" && pwd)"
case "$1" in
  --version) printf 'tileiras: NVIDIA (R) Cuda Tile IR optimizing assembler\\nCuda compilation tools, release {major_minor}, V{version}\\n'; exit 0;;
  --list-versions) {listing};;
  --help) cat <<'EOF'
{HELP_TEXT.format(names=names)}EOF
     exit 0;;
esac
out=""; prev=""
for arg in "$@"; do [ "$prev" = "-o" ] && out="$arg"; prev="$arg"; done
SLEEP={sleep}
{compile}
"""
        _write_script(root / "bin" / "tileiras", script)
        (root / "fake.cubin").write_bytes(FAKE_CUBIN)
        if ptxas_version is not None:
            pv = version if ptxas_version == "same" else ptxas_version
            pmm = ".".join(pv.split(".")[:2])
            _write_script(
                root / "bin" / "ptxas",
                f"#!/bin/sh\nprintf 'ptxas: NVIDIA (R) Ptx optimizing assembler\\nCuda compilation tools, release {pmm}, V{pv}\\n'\n",
            )
        if libnvvm:
            (root / "nvvm" / "lib64").mkdir(parents=True, exist_ok=True)
            (root / "nvvm" / "lib64" / "libnvvm.so").write_bytes(b"")
        return root

    return make
