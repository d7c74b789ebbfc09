"""A small, bounded ELF64 reader that tells whether bytes are a usable CUDA cubin.

tileiras's output is checked with it before it is returned or cached: a tool that exits
0 but writes garbage, a cubin for another machine, or one that lacks the kernel's entry
symbol is refused instead of being loaded (or, worse, served from the shared cache to
every later compile).

Every offset and count read from the file is checked against the file's length before
it is used, so any input (truncated, corrupted, hostile) gives an answer in time linear
in its size and never raises.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

__all__ = ["EM_CUDA", "cubin_problem"]

EM_CUDA = 190
"""The ELF machine number of NVIDIA CUDA code (``e_machine`` of every cubin)."""

_ELF_MAGIC = b"\x7fELF"
_ELFCLASS64, _ELFDATA2LSB = 2, 1
_FILE_HEADER = struct.Struct("<16sHHIQQQIHHHHHH")  # Elf64_Ehdr
_SECTION = struct.Struct("<IIQQQQIIQQ")  # Elf64_Shdr
_SYMBOL = struct.Struct("<IBBHQQ")  # Elf64_Sym
_SHT_SYMTAB, _SHT_STRTAB = 2, 3
_STT_FUNC = 2
_SHN_UNDEF = 0
_MAX_NAME = 4096  # bytes of a symbol name; bounds the work per symbol


class _NotACubin(Exception):
    """Why the bytes are not a cubin (internal: `cubin_problem` returns the message)."""


def _section(data: bytes, offset: int, index: int, count: int) -> tuple[int, int, int, int, int]:
    """(type, offset, size, link, entry size) of section `index`, bounds-checked."""
    if not 0 <= index < count:
        raise _NotACubin(f"a section link points at section {index}, which does not exist ({count} sections)")
    (_, kind, _, _, start, size, link, _, _, entsize) = _SECTION.unpack_from(data, offset + index * _SECTION.size)
    if kind != 8 and (start > len(data) or size > len(data) - start):  # 8 = SHT_NOBITS holds no bytes
        raise _NotACubin(f"section {index} lies outside the file (offset {start}, size {size}, file {len(data)} bytes)")
    return kind, start, size, link, entsize


def _name(data: bytes, table_start: int, table_size: int, offset: int) -> bytes:
    if offset >= table_size:
        raise _NotACubin(f"a symbol name lies outside its string table (offset {offset}, table {table_size} bytes)")
    end = data.find(b"\0", table_start + offset, table_start + min(table_size, offset + _MAX_NAME))
    if end < 0:
        raise _NotACubin(f"a symbol name runs past the end of its string table or is over {_MAX_NAME} bytes long")
    return data[table_start + offset : end]


def _function_symbols(data: bytes) -> set[str]:
    if not data.startswith(_ELF_MAGIC):
        raise _NotACubin(f"it is not an ELF file (it starts with {data[:16]!r})" if data else "it is empty")
    if len(data) < _FILE_HEADER.size:
        raise _NotACubin(f"it is {len(data)} bytes long, shorter than an ELF header ({_FILE_HEADER.size})")
    ident, _, machine, _, _, _, shoff, _, _, _, _, shentsize, shnum, _ = _FILE_HEADER.unpack_from(data)
    if ident[4] != _ELFCLASS64 or ident[5] != _ELFDATA2LSB:
        raise _NotACubin("it is not a little-endian 64-bit ELF file, which every cubin is")
    if machine != EM_CUDA:
        raise _NotACubin(f"it is an ELF file for machine {machine}, not for CUDA ({EM_CUDA})")
    if shentsize != _SECTION.size or shnum == 0:
        raise _NotACubin(f"its section headers are malformed ({shnum} of {shentsize} bytes each)")
    if shoff > len(data) or shnum * _SECTION.size > len(data) - shoff:
        raise _NotACubin(f"its section headers lie outside the file ({shnum} at offset {shoff}, file {len(data)} bytes)")
    functions: set[str] = set()
    tables = 0
    for index in range(shnum):
        kind, start, size, link, entsize = _section(data, shoff, index, shnum)
        if kind != _SHT_SYMTAB:
            continue
        tables += 1
        if tables > 1:  # ELF allows one; each one more would cost another pass over the file
            raise _NotACubin("it has more than one symbol table")
        if entsize != _SYMBOL.size:
            raise _NotACubin(f"its symbol table has entries of {entsize} bytes, not {_SYMBOL.size}")
        names_kind, names_start, names_size, _, _ = _section(data, shoff, link, shnum)
        if names_kind != _SHT_STRTAB:
            raise _NotACubin("its symbol table's names are not in a string table")
        for symbol in range(start, start + size - _SYMBOL.size + 1, _SYMBOL.size):
            name, info, _, section, _, _ = _SYMBOL.unpack_from(data, symbol)
            if info & 0xF == _STT_FUNC and section != _SHN_UNDEF:
                functions.add(_name(data, names_start, names_size, name).decode(errors="replace"))
    if not tables:
        raise _NotACubin("it has no symbol table")
    return functions


def cubin_problem(data: bytes, entries: Iterable[str] = ()) -> str | None:
    """Why `data` is not a CUDA cubin defining every kernel in `entries`, or None if it is.

    Checked: the ELF64 little-endian header, the machine (`EM_CUDA`), that the section
    headers and the symbol table lie inside the file, and that each entry is a defined
    function symbol.
    """
    try:
        functions = _function_symbols(bytes(data))
    except _NotACubin as exc:
        return str(exc)
    except struct.error:  # every read is bounds-checked first; this is a second net
        return "it is a truncated or malformed ELF file"
    missing = [name for name in entries if name not in functions]
    if missing:
        listed = sorted(functions)
        defined = ", ".join(listed[:10]) + (f" and {len(listed) - 10} more" if len(listed) > 10 else "") or "none"
        return f"it does not define the kernel {', '.join(missing)} (the functions it defines: {defined})"
    return None
