"""The bytecode reader: Tile IR bytecode 13.1–13.4 back into a Module.

The mirror image of the writer, driven by the same op table; ``write(read(b)) == b`` for
bytecode this package wrote, and the module read equals the one written.
"""

from __future__ import annotations

import enum
import struct
from typing import Any, TypeVar, cast

from . import _encoding as E
from ._attributes import (
    ENUM_TYPES, ArrayAttr, BoolAttr, Bounded, DenseElements, DictAttr, DivBy, FloatAttr, IntegerAttr, Location,
    OptimizationHints, SameElements, StringAttr, SymbolVisibility, TypeAttr,
)
from ._encoding import unzigzag
from ._builder import _infer
from ._errors import BytecodeError, IRTypeError, VersionError
from ._ir import MAX_REGION_DEPTH, Block, Function, Global, Module, Operation, Region, Value
from ._ops import OPS_BY_OPCODE, Arity, AttrKind, OpDef, bool_array, layout
from ._types import (
    PTR_ATTRS, SCALAR_BY_TAG, FunctionType, GatherScatterViewType, PaddingValue, PartitionViewType, PointerType,
    ScalarType, StridedViewType, TensorViewType, TileType, TokenType, Type,
)
from ._versions import V13_3, V13_4, Version

_Enum = TypeVar("_Enum", bound=enum.IntEnum)
_T = TypeVar("_T")

#: How deep arrays and dictionaries of attributes may nest (Tile IR's nest two deep: hints).
MAX_ATTRIBUTE_DEPTH = 16


class _Cursor:
    __slots__ = ("data", "pos", "end", "what")

    def __init__(self, data: bytes, pos: int = 0, end: int | None = None, what: str = "bytecode") -> None:
        self.data = data
        self.pos = pos
        self.end = len(data) if end is None else end
        self.what = what

    def fail(self, msg: str) -> BytecodeError:
        return BytecodeError(f"{self.what}, offset {self.pos}: {msg}")

    def byte(self) -> int:
        if self.pos >= self.end:
            raise self.fail("unexpected end of data")
        b = self.data[self.pos]
        self.pos += 1
        return b

    def varint(self) -> int:
        pos = self.pos
        if pos < self.end:
            b = self.data[pos]
            if b < 0x80:
                self.pos = pos + 1
                return b
        return self._varint()

    def _varint(self) -> int:
        data, pos, end = self.data, self.pos, self.end
        result = 0
        shift = 0
        while True:
            if pos >= end:
                self.pos = pos
                raise self.fail("truncated varint")
            b = data[pos]
            pos += 1
            result |= (b & 0x7F) << shift
            if b < 0x80:
                self.pos = pos
                return result
            shift += 7
            if shift > 63:
                self.pos = pos
                raise self.fail("varint longer than 64 bits")

    def count(self, what: str, min_size: int = 1) -> int:
        """A varint count of things of at least ``min_size`` bytes each, refused at once when
        the bytes left cannot hold that many (so no count from the input sizes a loop or an
        allocation beyond the input)."""
        n = self.varint()
        if n * min_size > self.end - self.pos:
            raise self.fail(f"{n} {what} declared, only {self.end - self.pos} bytes left")
        return n

    def svarint(self) -> int:
        return unzigzag(self.varint())

    def enum(self, cls: type[_Enum], attr: str | None = None) -> _Enum:
        """An enum value, written as a varint (``attr``: the attribute it is, for the error)."""
        x = self.varint()
        members = _ENUM_MEMBERS.get(cls)
        if members is not None and x < len(members):
            return cast("_Enum", members[x])
        try:
            return cls(x)
        except ValueError:
            where = "" if attr is None else f" for '{attr}'"
            raise self.fail(f"bad {cls.__name__} value {x}{where}") from None

    def take(self, n: int) -> bytes:
        if self.pos + n > self.end:
            raise self.fail(f"needs {n} bytes, {self.end - self.pos} left")
        b = self.data[self.pos:self.pos + n]
        self.pos += n
        return b

    def align(self, a: int, base: int) -> None:
        while (self.pos - base) % a:
            if self.byte() != E.PAD:
                raise self.fail("bad padding byte")

    def i32_list(self) -> tuple[int, ...]:
        n = self.count("i32 values", 4)
        return struct.unpack(f"<{n}i", self.take(4 * n))

    def i64_list(self) -> tuple[int, ...]:
        n = self.count("i64 values", 8)
        return struct.unpack(f"<{n}q", self.take(8 * n))

    @property
    def done(self) -> bool:
        return self.pos >= self.end


def _offset_table(c: _Cursor, width: int) -> list[bytes]:
    base = c.pos
    n = c.count("table entries", width)
    c.align(width, base)
    fmt = "<I" if width == 4 else "<Q"
    offs = [struct.unpack(fmt, c.take(width))[0] for _ in range(n)]
    data = c.data[c.pos:c.end]
    out = []
    for i, o in enumerate(offs):
        e = offs[i + 1] if i + 1 < n else len(data)
        if not 0 <= o <= e <= len(data):
            raise c.fail(f"entry {i} has bad offsets {o}..{e}")
        out.append(bytes(data[o:e]))
    return out


def _table_entry(c: _Cursor, table: list[_T], what: str) -> _T:
    """The entry of ``table`` (the strings, types or constants) whose index is read at ``c``."""
    i = c.varint()
    if i >= len(table):
        raise c.fail(f"{what} index {i} out of range ({len(table)} {what}s)")
    return table[i]


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        c = _Cursor(data, what="header")
        if c.take(8) != E.MAGIC:
            raise c.fail("not Tile IR bytecode (bad magic number)")
        major, minor = c.byte(), c.byte()
        c.take(2)
        self.version = Version.parse((major, minor))
        self.sections: dict[int, tuple[int, int]] = {}
        while True:
            sid_byte = c.byte()
            if sid_byte == E.SEC_END:
                if not c.done:
                    raise c.fail("data after the end section")
                break
            sid = sid_byte & 0x7F
            if sid not in E.SECTION_NAMES or sid == E.SEC_END:
                raise c.fail(f"unknown section id {sid}")
            if sid in self.sections:
                raise c.fail(f"section '{E.SECTION_NAMES[sid]}' appears twice")
            length = c.varint()
            if sid_byte & 0x80:
                align = c.varint()
                if align == 0 or align & (align - 1):
                    raise c.fail(f"bad alignment {align}")
                c.align(align, 0)
            start = c.pos
            c.take(length)
            self.sections[sid] = (start, start + length)
        for req in (E.SEC_STRING, E.SEC_FUNC):
            if req not in self.sections:
                raise BytecodeError(f"missing required section '{E.SECTION_NAMES[req]}'")
        self.strings = []
        for i, raw in enumerate(_offset_table(self.cursor(E.SEC_STRING), 4)):
            try:
                self.strings.append(raw.decode("utf-8"))
            except UnicodeDecodeError as e:
                raise BytecodeError(f"string section: string {i} is not UTF-8 ({e.reason})") from None
        self.type_bytes = _offset_table(self.cursor(E.SEC_TYPE), 4) if E.SEC_TYPE in self.sections else []
        self.types: list[Type] = []
        for i in range(len(self.type_bytes)):
            self.types.append(self._decode_type(i))
        self.constants: list[bytes] = []
        if E.SEC_CONSTANT in self.sections:
            for raw in _offset_table(self.cursor(E.SEC_CONSTANT), 8):
                cc = _Cursor(raw, what="constant")
                n = cc.varint()
                self.constants.append(cc.take(n))
        self.debug_ops: list[list[int]] = []
        self.debug_records: list[bytes] = []
        if E.SEC_DEBUG in self.sections:
            self._read_debug()

    def cursor(self, sid: int) -> _Cursor:
        s, e = self.sections[sid]
        return _Cursor(self.data, s, e, E.SECTION_NAMES[sid] + " section")

    # -- table references: an index read at ``c`` ------------------------------------
    def string(self, c: _Cursor) -> str:
        return _table_entry(c, self.strings, "string")

    def type(self, c: _Cursor) -> Type:
        return _table_entry(c, self.types, "type")

    def constant(self, c: _Cursor) -> bytes:
        return _table_entry(c, self.constants, "constant")

    def _decode_type(self, i: int) -> Type:
        c = _Cursor(self.type_bytes[i], what=f"type {i}")
        try:
            t = self._type_body(c, i)
        except IRTypeError as e:  # a type the model rejects (a zero extent, mismatched ranks, ...)
            raise c.fail(e.message) from None
        if t.since > self.version:
            raise VersionError(f"{c.what}: {t} needs bytecode {t.since}, file is {self.version}")
        if not c.done:
            raise c.fail("trailing bytes after type")
        return t

    def _type_body(self, c: _Cursor, i: int) -> Type:
        v = self.version
        tag = c.varint()

        def ref() -> Type:
            j = c.varint()
            if j >= i:
                raise c.fail(f"refers to type {j}, not defined before it")
            return self.types[j]

        def ptr_attr() -> str:
            x = c.varint()
            if x >= len(PTR_ATTRS):
                raise c.fail(f"unknown pointer attribute {x}")
            return PTR_ATTRS[x]

        def padding(has: bool) -> PaddingValue | None:
            return c.enum(PaddingValue) if has else None

        t: Type
        if tag in SCALAR_BY_TAG:
            t = SCALAR_BY_TAG[tag]
        elif tag == E.T_TOKEN:
            t = TokenType()
        elif tag == E.T_POINTER:
            flags = c.varint() if v >= V13_4 else 0
            p = ref()
            attr = ptr_attr() if flags & 1 else None
            if not isinstance(p, ScalarType):
                raise c.fail(f"pointer to non-element type {p}")
            t = PointerType(p, attr)
        elif tag == E.T_TILE:
            el = ref()
            shape = c.i64_list()
            if not isinstance(el, (ScalarType, PointerType)):
                raise c.fail(f"tile of {el}")
            t = TileType(shape, el)
        elif tag == E.T_TENSOR_VIEW:
            flags = c.varint() if v >= V13_4 else 0
            el = ref()
            dshape = tuple(None if x == E.INT64_MIN else x for x in c.i64_list())
            dstrides = tuple(None if x == E.INT64_MIN else x for x in c.i64_list())
            attr = ptr_attr() if flags & 1 else None
            if not isinstance(el, ScalarType):
                raise c.fail(f"tensor_view of {el}")
            t = TensorViewType(el, dshape, dstrides, attr)
        elif tag in (E.T_PARTITION_VIEW, E.T_STRIDED_VIEW, E.T_GATHER_SCATTER_VIEW):
            unified = v >= V13_3
            flags = c.varint() if unified else 0
            tile_shape = c.i32_list()
            trav = c.i32_list() if tag == E.T_STRIDED_VIEW else ()
            tv = ref()
            if not isinstance(tv, TensorViewType):
                raise c.fail(f"view over {tv}")
            if tag == E.T_GATHER_SCATTER_VIEW:
                sparse = c.varint()
                t = GatherScatterViewType(tile_shape, tv, sparse, padding(bool(flags & 1)))
            else:
                dim_map = c.i32_list()
                has = bool(flags & 1) if unified else bool(c.varint())
                pad = padding(has)
                if tag == E.T_STRIDED_VIEW:
                    t = StridedViewType(tile_shape, trav, tv, dim_map, pad)
                else:
                    t = PartitionViewType(tile_shape, tv, dim_map, pad)
        elif tag == E.T_FUNCTION:
            ins = tuple(ref() for _ in range(c.count("function inputs")))
            outs = tuple(ref() for _ in range(c.count("function results")))
            t = FunctionType(ins, outs)
        else:
            raise c.fail(f"unknown type tag {tag}")
        return t

    # -- attributes -------------------------------------------------------------------
    def tagged(self, c: _Cursor, depth: int = 0) -> Any:
        """A self-describing (tagged) attribute at ``c``, ``depth`` arrays or dictionaries deep."""
        if depth > MAX_ATTRIBUTE_DEPTH:
            raise c.fail(f"attributes nested more than {MAX_ATTRIBUTE_DEPTH} deep")
        try:
            return self._tagged(c, depth)
        except IRTypeError as e:  # a value the model rejects (a DivBy by 3, an unknown hint, ...)
            raise c.fail(e.message) from None

    def _tagged(self, c: _Cursor, depth: int) -> Any:
        tag = c.byte()
        if tag in (E.A_INTEGER, E.A_FLOAT):
            t = self.type(c)
            if not isinstance(t, ScalarType):
                raise c.fail(f"{'integer' if tag == E.A_INTEGER else 'float'} attribute of type {t}")
            if tag == E.A_INTEGER:
                return IntegerAttr(t, c.varint())
            bits = c.byte() if t.bitwidth <= 8 else c.svarint() & ((1 << (8 * t.nbytes)) - 1)
            return FloatAttr(t, bits)
        if tag == E.A_BOOL:
            return BoolAttr(bool(c.byte()))
        if tag == E.A_TYPE:
            return TypeAttr(self.type(c))
        if tag == E.A_STRING:
            return StringAttr(self.string(c))
        if tag == E.A_ARRAY:
            return ArrayAttr(tuple(self.tagged(c, depth + 1) for _ in range(c.count("array elements"))))
        if tag == E.A_DENSE:
            t = self.type(c)
            if not isinstance(t, TileType):
                raise c.fail(f"dense attribute of type {t}")
            return DenseElements(t, self.constant(c))
        if tag == E.A_DIVBY:
            d = c.varint()
            fl = c.byte()
            every = c.svarint() if fl & 1 else None
            along = c.svarint() if fl & 2 else None
            return DivBy(d, every, along)
        if tag == E.A_SAME_ELEMENTS:
            return SameElements(c.i64_list())
        if tag == E.A_DICT:
            return DictAttr(self.dict_body(c, depth + 1))
        if tag == E.A_HINTS:
            return OptimizationHints(self.dict_body(c, depth + 1))
        if tag == E.A_BOUNDED:
            fl = c.byte()
            lb = c.svarint() if fl & 1 else None
            ub = c.svarint() if fl & 2 else None
            return Bounded(lb, ub)
        raise c.fail(f"unknown attribute tag {tag}")

    def dense(self, c: _Cursor, t: TileType, data: bytes) -> DenseElements:
        try:
            return DenseElements(t, data)
        except IRTypeError as e:
            raise c.fail(e.message) from None

    def dict_body(self, c: _Cursor, depth: int = 0) -> tuple[tuple[str, Any], ...]:
        return tuple((self.string(c), self.tagged(c, depth)) for _ in range(c.count("dictionary entries", 2)))

    # -- debug info -----------------------------------------------------------------
    def _read_debug(self) -> None:
        c = self.cursor(E.SEC_DEBUG)
        base = c.pos
        nfun = c.count("function debug entries", 4)
        c.align(4, base)
        offs = [struct.unpack("<I", c.take(4))[0] for _ in range(nfun)]
        total = c.count("op debug entries", 8)
        c.align(8, base)
        idx = [struct.unpack("<Q", c.take(8))[0] for _ in range(total)]
        for i, o in enumerate(offs):
            e = offs[i + 1] if i + 1 < nfun else total
            self.debug_ops.append(idx[o:e])
        c2 = _Cursor(self.data, c.pos, c.end, "debug section")
        self.debug_records = _offset_table(c2, 4)

    def di_loc(self, i: int) -> Location | None:
        for _ in range(len(self.debug_records) + 1):  # a chain of call sites visits each record once
            if i == 0:
                return None
            if i > len(self.debug_records):
                raise BytecodeError(f"debug section: record {i} out of range ({len(self.debug_records)} records)")
            c = _Cursor(self.debug_records[i - 1], what=f"debug record {i}")
            tag = c.byte()
            if tag == E.D_LOC:
                scope = c.varint()
                file = self.string(c)
                line, col = c.varint(), c.varint()
                if line == 0 and col == 0:
                    return None
                return Location(file, line, col, self.di_scope_name(scope))
            if tag != E.D_CALLSITE:
                return None
            i = c.varint()  # the callee's location
        raise BytecodeError("debug section: call-site records form a cycle")

    def di_scope_name(self, i: int) -> str | None:
        if not 0 < i <= len(self.debug_records):
            return None
        c = _Cursor(self.debug_records[i - 1], what=f"debug record {i}")
        if c.byte() != E.D_SUBPROGRAM:
            return None
        c.varint()
        c.varint()
        return self.string(c)

    # -- functions ------------------------------------------------------------------
    def module(self) -> Module:
        m = Module()
        if E.SEC_PRODUCER in self.sections:
            if self.version < V13_3:
                raise VersionError(f"producer section in bytecode {self.version} (needs 13.3)")
            m.producer = self.string(self.cursor(E.SEC_PRODUCER))
        if E.SEC_GLOBAL in self.sections:
            c = self.cursor(E.SEC_GLOBAL)
            for _ in range(c.count("globals", 4)):
                name = self.string(c)
                t = self.type(c)
                data = self.constant(c)
                align = c.varint()
                vis, const = SymbolVisibility.PUBLIC, 0
                if self.version >= V13_3:
                    vis, const = c.enum(SymbolVisibility), c.varint()
                if not isinstance(t, TileType):
                    raise c.fail(f"global @{name} of non-tile type {t}")
                m.globals.append(Global(name, self.dense(c, t, data), align, bool(const), vis))
        c = self.cursor(E.SEC_FUNC)
        for _ in range(c.count("functions", 5)):
            name = self.string(c)
            ftype = self.type(c)
            if not isinstance(ftype, FunctionType):
                raise c.fail(f"function @{name} has non-function type {ftype}")
            flags = c.byte()
            loc_index = c.varint()
            hints = None
            if flags & E.F_KERNEL and flags & E.F_HINTS:
                hints = self.tagged(c)
                if not isinstance(hints, OptimizationHints):
                    raise c.fail(f"function @{name}: bad optimization hints")
            if not flags & E.F_KERNEL:
                raise c.fail(f"function @{name} is not a kernel entry (unsupported by Tile IR bytecode)")
            n = c.varint()
            body = _Cursor(self.data, c.pos, c.pos + n, f"body of @{name}")
            c.take(n)
            dbg = self.debug_ops[loc_index - 1] if 0 < loc_index <= len(self.debug_ops) else None
            f = Function(name, ftype, entry=True, private=bool(flags & E.F_PRIVATE), hints=hints,
                         loc=self.di_loc(dbg[0]) if dbg else None)
            _FunctionReader(self, f, body, dbg).run()
            m.functions.append(f)
        return m


class _FunctionReader:
    def __init__(self, r: _Reader, f: Function, c: _Cursor, dbg: list[int] | None) -> None:
        self.r = r
        self.f = f
        self.c = c
        self.values: list[Value] = []
        self.dbg = dbg
        self.dbg_pos = 1
        self.depth = 0  # regions entered

    def run(self) -> None:
        self.values.extend(self.f.body.args)
        while not self.c.done:
            self.f.body.append(self.op())

    def block(self, region_block: Block) -> None:
        c = self.c
        saved = len(self.values)
        for _ in range(c.count("block arguments")):
            self.values.append(region_block.add_arg(self.r.type(c)))
        for _ in range(c.count("ops")):
            region_block.append(self.op())
        del self.values[saved:]

    def op(self) -> Operation:
        c, r, v = self.c, self.r, self.r.version
        varint = c.varint
        at = c.pos
        opcode = varint()
        d: OpDef | None = OPS_BY_OPCODE.get(opcode)
        if d is None or d.structural:
            raise c.fail(f"unknown opcode {opcode:#x}")
        if d.since > v:
            raise VersionError(f"op '{d.name}' needs bytecode {d.since}, file is {v} (offset {at})")
        lay = layout(d, v)
        loc = None
        if self.dbg is not None:
            if self.dbg_pos < len(self.dbg):
                loc = r.di_loc(self.dbg[self.dbg_pos])
            self.dbg_pos += 1
        # results
        types = r.types
        try:
            if lay.variadic:
                result_types = [types[varint()] for _ in range(c.count("results"))]
            else:
                result_types = [types[varint()] for w in lay.result_written if w]
        except IndexError:
            raise c.fail("type index out of range") from None
        n_written = len(result_types)
        # flags
        present: set[str] | tuple[()] = ()
        if lay.has_flags:
            bits = varint()
            if bits:
                if bits >> len(lay.flag_names):
                    raise c.fail(f"'{d.name}': unknown flag bits {bits:#x}")
                present = {n for i, (n, _, _) in enumerate(lay.flag_names) if bits >> i & 1}
        attrs: dict[str, Any] = {}
        for a, mode in lay.attrs:
            if mode == "required":
                if a.kind is AttrKind.ENUM:
                    attrs[a.name] = c.enum(a.enum, a.name)  # type: ignore[arg-type]  # an ENUM attr has its enum
                    continue
                attrs[a.name] = self.attr(a.kind, a.enum, result_types)
            elif mode == "unit":
                if a.name in present:
                    attrs[a.name] = True
            elif mode == "optional":
                if a.name in present:
                    attrs[a.name] = self.attr(a.kind, a.enum, result_types)
            else:
                attrs[a.name] = a.default
        # operands
        values = self.values
        nvals = len(values)
        segments: list[int] = []
        if lay.segmented:
            ids: list[int] = []
            for od in d.operands:
                if od.arity is Arity.OPTIONAL:
                    k = 1 if od.name in present else 0
                elif od.arity is Arity.VARIADIC:
                    k = c.count("operands")
                else:
                    k = 1
                segments.append(k)
                ids += [varint() for _ in range(k)]
        else:
            total = c.count("operands") if lay.count_all else lay.n_fixed
            rest = total - lay.n_fixed
            if rest < 0:
                raise c.fail(f"'{d.name}' has {total} operands, needs at least {lay.n_fixed}")
            for ar in lay.arities:
                if ar is Arity.ONE:
                    segments.append(1)
                else:
                    if ar is Arity.OPTIONAL and rest > 1:
                        raise c.fail(f"'{d.name}': an optional operand given {rest} values")
                    segments.append(rest)
                    rest = 0
            ids = [varint() for _ in range(total)]
        if ids and max(ids) >= nvals:
            raise c.fail(f"value %{max(ids)} used before it is defined ({nvals} defined)")
        operands = [values[i] for i in ids]
        if not all(lay.result_written):  # results newer than the file: typed by the table's rule
            self.unwritten_results(d, lay.result_written, operands, segments, attrs, result_types)
        op = Operation(d, operands, segments, attrs, result_types, 0, loc)
        if d.regions:
            n = varint()
            if n != len(d.regions):
                raise c.fail(f"'{d.name}' has {n} regions, expects {len(d.regions)}")
            if self.depth >= MAX_REGION_DEPTH:
                raise c.fail(f"regions nested more than {MAX_REGION_DEPTH} deep")
            self.depth += 1
            for _ in range(n):
                region = Region(op)
                op.regions.append(region)
                for _ in range(c.count("blocks", 2)):
                    self.block(region.add_block())
            self.depth -= 1
        values.extend(op.results[:n_written])
        return op

    def unwritten_results(self, d: OpDef, written: tuple[bool, ...], operands: list[Value], segments: list[int],
                          attrs: dict[str, Any], result_types: list[Type]) -> None:
        named: dict[str, list[Value]] = {}
        start = 0
        for od, k in zip(d.operands, segments):
            named[od.name] = operands[start:start + k]
            start += k
        for rd, w in zip(d.results, written):
            if w:
                continue
            t = _infer(d, rd.infer, named, attrs) if rd.infer else None
            if t is None:
                raise self.c.fail(f"'{d.name}': cannot type result '{rd.name}', which bytecode {rd.since} adds")
            result_types.append(t)

    def attr(self, kind: AttrKind, enum_: Any, result_types: list[Type]) -> Any:
        c, r = self.c, self.r
        if kind is AttrKind.ENUM:
            return c.enum(enum_)
        if kind is AttrKind.INT:
            return c.varint()
        if kind is AttrKind.BOOL:
            return bool(c.byte())
        if kind in (AttrKind.STR, AttrKind.SYMREF):
            return r.string(c)
        if kind is AttrKind.I32_ARRAY:
            return c.i32_list()
        if kind is AttrKind.BOOL_ARRAY:
            return bool_array(c.take(c.count("bools")))
        if kind is AttrKind.DENSE:  # typed by the op's result (constant)
            t = result_types[0] if result_types else None
            if not isinstance(t, TileType):
                raise c.fail(f"dense constant without a tile result type, found {t}")
            return r.dense(c, t, r.constant(c))
        if kind is AttrKind.HINTS:
            try:
                return OptimizationHints(r.dict_body(c))
            except IRTypeError as e:
                raise c.fail(e.message) from None
        if kind is AttrKind.PREDICATE:
            return r.tagged(c)
        if kind is AttrKind.ATTR_ARRAY:
            return ArrayAttr(tuple(r.tagged(c, 1) for _ in range(c.count("attributes"))))
        raise AssertionError(kind)


#: The members of each attribute enum, indexed by value (each numbers them 0, 1, 2...):
#: the fast path of ``_Cursor.enum``.
_ENUM_MEMBERS: dict[Any, tuple[Any, ...]] = {}
for _e in ENUM_TYPES:
    _ENUM_MEMBERS[_e] = tuple(sorted(_e, key=int))
    assert [int(m) for m in _ENUM_MEMBERS[_e]] == list(range(len(_ENUM_MEMBERS[_e])))


def read_bytecode(data: bytes | bytearray | memoryview) -> Module:
    """Decode Tile IR bytecode (13.1–13.4) into a Module.

    Raises :class:`BytecodeError` for malformed input and :class:`VersionError` for a
    version this package does not read or a feature newer than the file's version."""
    try:
        return _Reader(bytes(data)).module()
    except RecursionError:
        raise BytecodeError("malformed bytecode: attributes or regions nested too deeply") from None


def bytecode_version(data: bytes) -> Version:
    """The version in a bytecode file's header."""
    if data[:8] != E.MAGIC or len(data) < 12:
        raise BytecodeError("not Tile IR bytecode (bad magic number)")
    return Version(data[8], data[9])


