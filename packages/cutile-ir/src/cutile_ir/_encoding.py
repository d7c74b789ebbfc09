"""Low-level bytecode encoding shared by the writer and the reader (LEB128, zigzag, tags)."""

from __future__ import annotations

MAGIC = b"\x7fTileIR\x00"
PAD = 0xCB

SEC_END, SEC_STRING, SEC_FUNC, SEC_DEBUG, SEC_CONSTANT, SEC_TYPE, SEC_GLOBAL, SEC_PRODUCER = range(8)
SECTION_NAMES = {0: "end", 1: "string", 2: "func", 3: "debug", 4: "constant", 5: "type", 6: "global",
                 7: "producer"}

# composite type tags (scalar tags live on ScalarType.tag)
T_POINTER, T_TILE, T_TENSOR_VIEW, T_PARTITION_VIEW, T_FUNCTION, T_TOKEN = 12, 13, 14, 15, 16, 17
T_GATHER_SCATTER_VIEW, T_STRIDED_VIEW = 20, 21

# self-contained attribute tags
A_INTEGER, A_FLOAT, A_BOOL, A_TYPE, A_STRING, A_ARRAY, A_DENSE = 1, 2, 3, 4, 5, 6, 7
A_DIVBY, A_SAME_ELEMENTS, A_DICT, A_HINTS, A_BOUNDED = 8, 9, 10, 11, 12

# debug info tags
D_UNKNOWN, D_COMPILE_UNIT, D_FILE, D_LEXICAL_BLOCK, D_LOC, D_SUBPROGRAM, D_CALLSITE = range(7)

F_PRIVATE, F_KERNEL, F_HINTS = 0x01, 0x02, 0x04

INT64_MIN = -(1 << 63)
MASK64 = (1 << 64) - 1


def put_varint(buf: bytearray, x: int) -> None:
    if x < 0:
        raise ValueError(f"varint of a negative number {x}")
    while x >= 0x80:
        buf.append((x & 0x7F) | 0x80)
        x >>= 7
    buf.append(x)


def zigzag(x: int) -> int:
    """Zigzag of a 64-bit two's-complement value (x may be given signed or unsigned)."""
    x &= MASK64
    if x >> 63:
        x -= 1 << 64
    return ((x << 1) ^ (x >> 63)) & MASK64


def unzigzag(z: int) -> int:
    return (z >> 1) ^ -(z & 1)


def put_svarint(buf: bytearray, x: int) -> None:
    put_varint(buf, zigzag(x))


def pad_to(buf: bytearray, align: int, base: int = 0) -> None:
    n = (-(base + len(buf))) % align
    buf.extend(b"\xcb" * n)
