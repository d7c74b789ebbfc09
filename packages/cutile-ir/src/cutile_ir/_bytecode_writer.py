"""The bytecode writer: a Module to Tile IR bytecode of version 13.1, 13.2, 13.3 or 13.4.

Every op is encoded by walking its table record; the layout rules that change with the
version (flags fields, versioned attributes and results, type layouts, global fields,
the producer section) are decided here from the records' "since" versions. Output is
deterministic: tables are filled in first-use order.
"""

from __future__ import annotations

import os
import struct
from typing import Any, Sequence

from . import _encoding as E
from ._attributes import (
    ArrayAttr, BoolAttr, Bounded, DenseElements, DictAttr, DivBy, FloatAttr, IntegerAttr, Location,
    OptimizationHints, SameElements, StringAttr, TypeAttr,
)
from ._encoding import put_svarint, put_varint
from ._errors import BytecodeError, VersionError
from ._ir import Block, Function, Module, Operation, Value
from ._ops import Arity, AttrDef, AttrKind, layout
from ._types import (
    PTR_ATTRS, FunctionType, GatherScatterViewType, PartitionViewType, PointerType, ScalarType,
    StridedViewType, TensorViewType, TiledView, TileType, TokenType, Type,
)
from ._versions import DEFAULT_VERSION, V13_3, V13_4, Version

_pack_i32 = struct.Struct("<i").pack
_pack_i64 = struct.Struct("<q").pack


class _Tables:
    def __init__(self, version: Version) -> None:
        self.version = version
        self.strings: dict[str, int] = {}
        self.types: dict[Type, int] = {}
        self.type_bytes: list[bytes] = []
        self.constants: dict[bytes, int] = {}

    def string(self, s: str) -> int:
        i = self.strings.get(s)
        if i is None:
            i = self.strings[s] = len(self.strings)
        return i

    def constant(self, data: bytes) -> int:
        buf = bytearray()
        put_varint(buf, len(data))
        key = bytes(buf) + data
        i = self.constants.get(key)
        if i is None:
            i = self.constants[key] = len(self.constants)
        return i

    def type(self, t: Type) -> int:
        i = self.types.get(t)
        if i is not None:
            return i
        buf = self._encode_type(t)
        i = self.types[t] = len(self.type_bytes)
        self.type_bytes.append(bytes(buf))
        return i

    def _encode_type(self, t: Type) -> bytearray:
        v = self.version
        if t.since > v:
            raise VersionError(f"type {t} needs bytecode {t.since}, writing {v}")
        buf = bytearray()
        if isinstance(t, ScalarType):
            put_varint(buf, t.tag)
        elif isinstance(t, TokenType):
            put_varint(buf, E.T_TOKEN)
        elif isinstance(t, PointerType):
            p = self.type(t.pointee)
            put_varint(buf, E.T_POINTER)
            if v >= V13_4:
                put_varint(buf, 0 if t.attr is None else 1)
            put_varint(buf, p)
            if t.attr is not None:
                put_varint(buf, PTR_ATTRS.index(t.attr))
        elif isinstance(t, TileType):
            e = self.type(t.element)
            put_varint(buf, E.T_TILE)
            put_varint(buf, e)
            put_varint(buf, len(t.shape))
            for d in t.shape:
                buf += _pack_i64(d)
        elif isinstance(t, TensorViewType):
            e = self.type(t.element)
            put_varint(buf, E.T_TENSOR_VIEW)
            if v >= V13_4:
                put_varint(buf, 0 if t.ptr_attr is None else 1)
            put_varint(buf, e)
            for xs in (t.shape, t.strides):
                put_varint(buf, len(xs))
                for x in xs:
                    buf += _pack_i64(E.INT64_MIN if x is None else x)
            if t.ptr_attr is not None:
                put_varint(buf, PTR_ATTRS.index(t.ptr_attr))
        elif isinstance(t, TiledView):
            tv = self.type(t.tensor_view)
            unified = v >= V13_3
            if isinstance(t, PartitionViewType):
                put_varint(buf, E.T_PARTITION_VIEW)
            elif isinstance(t, StridedViewType):
                put_varint(buf, E.T_STRIDED_VIEW)
            else:
                put_varint(buf, E.T_GATHER_SCATTER_VIEW)
            if unified:
                put_varint(buf, 0 if t.padding is None else 1)
            _i32_list(buf, t.tile_shape)
            if isinstance(t, StridedViewType):
                _i32_list(buf, t.traversal_strides)
            put_varint(buf, tv)
            if isinstance(t, GatherScatterViewType):
                put_varint(buf, t.sparse_dim)
            elif isinstance(t, (PartitionViewType, StridedViewType)):
                _i32_list(buf, t.dim_map)
            if not unified:
                put_varint(buf, 0 if t.padding is None else 1)
            if t.padding is not None:
                put_varint(buf, int(t.padding))
        elif isinstance(t, FunctionType):
            ins = [self.type(x) for x in t.inputs]
            outs = [self.type(x) for x in t.results]
            put_varint(buf, E.T_FUNCTION)
            put_varint(buf, len(ins))
            for x in ins:
                put_varint(buf, x)
            put_varint(buf, len(outs))
            for x in outs:
                put_varint(buf, x)
        else:
            raise BytecodeError(f"cannot encode type {t!r}")
        return buf


def _i32_list(buf: bytearray, xs: tuple[int, ...]) -> None:
    put_varint(buf, len(xs))
    for x in xs:
        buf += _pack_i32(x)


def _offset_table(items: Sequence[bytes], width: int) -> bytearray:
    """A count, padding to ``width``, one ``width``-byte offset per item, then the items
    (the string, type, constant and debug-record tables; read by the reader's ``_offset_table``)."""
    out = bytearray()
    put_varint(out, len(items))
    E.pad_to(out, width)
    pack = struct.Struct("<I" if width == 4 else "<Q").pack
    off = 0
    for item in items:
        out += pack(off)
        off += len(item)
    for item in items:
        out += item
    return out


class _DebugInfo:
    """DI records (file, compile unit, subprogram, loc) and per-function op location lists."""

    def __init__(self, tables: _Tables) -> None:
        self.tables = tables
        self.records: dict[bytes, int] = {}
        self.per_function: list[list[int]] = []

    def _record(self, data: bytes) -> int:
        i = self.records.get(data)
        if i is None:
            i = self.records[data] = len(self.records) + 1
        return i

    def _subprogram(self, name: str, loc: Location) -> int:
        s = self.tables.string
        d, base = os.path.split(loc.file)
        b = bytearray([E.D_FILE])
        put_varint(b, s(base))
        put_varint(b, s(d))
        file_id = self._record(bytes(b))
        b = bytearray([E.D_COMPILE_UNIT])
        put_varint(b, file_id)
        cu = self._record(bytes(b))
        b = bytearray([E.D_SUBPROGRAM])
        put_varint(b, file_id)
        put_varint(b, loc.line)
        put_varint(b, s(name))
        put_varint(b, s(name))
        put_varint(b, cu)
        put_varint(b, loc.line)
        return self._record(bytes(b))

    def _loc(self, scope: int, loc: Location) -> int:
        b = bytearray([E.D_LOC])
        put_varint(b, scope)
        put_varint(b, self.tables.string(loc.file))
        put_varint(b, loc.line)
        put_varint(b, loc.column)
        return self._record(bytes(b))

    def function(self, f: Function) -> tuple[int, int, list[int] | None]:
        """(function loc index, scope, op list) for ``f``; index 0 when it has no locations."""
        floc = f.loc
        if floc is None:
            for op in f.walk():
                if op.loc is not None:
                    # no function location: a line-0 location in the file of the first op
                    floc = Location(op.loc.file, 0, 0)
                    break
        if floc is None:
            return 0, 0, None
        scope = self._subprogram(f.name, floc)
        ops = [self._loc(scope, floc)]
        self.per_function.append(ops)
        return len(self.per_function), scope, ops

    def op_loc(self, scope: int, loc: Location | None) -> int:
        return 0 if loc is None else self._loc(scope, loc)

    def section(self) -> bytearray:
        out = bytearray()
        put_varint(out, len(self.per_function))
        E.pad_to(out, 4)
        off = 0
        for ops in self.per_function:
            out += struct.pack("<I", off)
            off += len(ops)
        put_varint(out, off)
        E.pad_to(out, 8)
        for ops in self.per_function:
            for i in ops:
                out += struct.pack("<Q", i)
        return out + _offset_table(list(self.records), 4)  # starts 8-aligned, as the padding assumes


class _FunctionWriter:
    def __init__(self, w: _Writer, f: Function, debug_scope: int, debug_ops: list[int] | None) -> None:
        self.w = w
        self.t = w.tables
        self.version = w.version
        self.f = f
        self.ids: dict[int, int] = {}
        self.next = 0
        self.scope = debug_scope
        self.debug_ops = debug_ops

    def err(self, msg: str, op: Operation) -> VersionError:
        return VersionError(msg, op=op.name, loc=op.loc)

    def define(self, v: Value) -> None:
        self.ids[id(v)] = self.next
        self.next += 1

    def body(self) -> bytearray:
        buf = bytearray()
        for a in self.f.body.args:
            self.define(a)
        for op in self.f.body.ops:
            self.op(op, buf)
        return buf

    def block(self, b: Block, buf: bytearray) -> None:
        saved = self.next
        put_varint(buf, len(b.args))
        for a in b.args:
            put_varint(buf, self.t.type(a.type))
            self.define(a)
        put_varint(buf, len(b.ops))
        for op in b.ops:
            self.op(op, buf)
        for a in b.args:
            self.ids.pop(id(a), None)
        self.next = saved

    def op(self, op: Operation, buf: bytearray) -> None:
        d = op.opdef
        v = self.version
        if d.since > v or d.structural:
            if d.structural:
                raise BytecodeError("structural op inside a function body", op=op.name, loc=op.loc)
            raise self.err(f"op needs bytecode {d.since}, writing {v}", op)
        lay = layout(d, v)
        ids = self.ids
        if self.debug_ops is not None:
            self.debug_ops.append(self.w.debug.op_loc(self.scope, op.loc))
        put_varint(buf, d.opcode)
        # results (a result newer than the version is dropped if unused)
        results = op.results
        written = results
        if not all(lay.result_written):
            written = []
            nres = len(lay.result_written)
            for i, r in enumerate(results):
                if lay.result_written[min(i, nres - 1)]:
                    written.append(r)
                elif self.w.used(r):
                    rd = d.results[min(i, nres - 1)]
                    raise self.err(f"result '{rd.name}' needs bytecode {rd.since} but is used, writing {v}", op)
        if lay.variadic:
            put_varint(buf, len(written))
        typeidx = self.t.type
        for r in written:
            put_varint(buf, typeidx(r.type))
        attributes = op.attributes
        # flags
        if lay.flag_names:
            bits = 0
            for bit, (name, is_attr, since) in enumerate(lay.flag_names):
                present = name in attributes if is_attr else bool(op.group(name))
                if present:
                    if since > v:
                        what = "attribute" if is_attr else "operand"
                        raise self.err(f"optional {what} '{name}' needs bytecode {since}, writing {v}", op)
                    bits |= 1 << bit
            if lay.has_flags:
                put_varint(buf, bits)
        # attributes
        for a, mode in lay.attrs:
            if mode == "unit":
                continue
            if mode == "optional":
                if a.name in attributes:
                    self.attr(a, attributes[a.name], op, buf)
                continue
            val = attributes.get(a.name, a.default)
            if mode == "default":
                if val != a.default:
                    raise self.err(f"attribute '{a.name}' = {_show(val)} needs bytecode {a.since}, writing {v} "
                                   f"(only the default {_show(a.default)} is expressible)", op)
                continue
            if a.per_operand is not None and not val:  # "none set": one False per operand (tileiras checks the size)
                val = (False,) * len(op.group(a.per_operand))
            self.attr(a, val, op, buf)
        # operands
        operands = op.operands
        try:
            if lay.segmented:
                start = 0
                for ar, n in zip(lay.arities, op.segments):
                    if ar is Arity.VARIADIC:
                        put_varint(buf, n)
                    for x in operands[start:start + n]:
                        put_varint(buf, ids[id(x)])
                    start += n
            else:
                if lay.count_all:
                    put_varint(buf, len(operands))
                for x in operands:
                    put_varint(buf, ids[id(x)])
        except KeyError:
            raise BytecodeError("operand is not defined before its use (run verify())", op=op.name,
                                loc=op.loc) from None
        # regions
        if op.regions:
            put_varint(buf, len(op.regions))
            for region in op.regions:
                put_varint(buf, len(region.blocks))
                for b in region.blocks:
                    self.block(b, buf)
        nxt = self.next
        for r in written:
            ids[id(r)] = nxt
            nxt += 1
        self.next = nxt

    def attr(self, a: AttrDef, val: Any, op: Operation, buf: bytearray) -> None:
        k = a.kind
        v = self.version
        if k is AttrKind.ENUM:
            since = getattr(val, "since", None)
            if since is not None and since > v:
                raise self.err(f"value {val.text} of attribute '{a.name}' needs bytecode {since}, writing {v}", op)
            put_varint(buf, int(val))
        elif k is AttrKind.INT:
            put_varint(buf, int(val))
        elif k is AttrKind.BOOL:
            buf.append(1 if val else 0)
        elif k in (AttrKind.STR, AttrKind.SYMREF):
            put_varint(buf, self.t.string(val))
        elif k is AttrKind.I32_ARRAY:
            _i32_list(buf, tuple(val))
        elif k is AttrKind.BOOL_ARRAY:
            put_varint(buf, len(val))
            buf.extend(1 if x else 0 for x in val)
        elif k is AttrKind.DENSE:
            put_varint(buf, self.t.constant(val.data))
        elif k is AttrKind.HINTS:
            self.w.dict_body(val.per_arch, buf)
        elif k is AttrKind.PREDICATE:
            self.w.tagged(val, buf)
        elif k is AttrKind.ATTR_ARRAY:
            put_varint(buf, len(val.values))
            for x in val.values:
                self.w.tagged(x, buf)
        else:
            raise AssertionError(k)


def _show(v: Any) -> str:
    t = getattr(v, "text", None)
    return str(t) if t is not None else repr(v)


class _Writer:
    def __init__(self, module: Module, version: Version) -> None:
        self.module = module
        self.version = version
        self.tables = _Tables(version)
        self.debug = _DebugInfo(self.tables)
        self._uses: set[int] | None = None

    def used(self, v: Value) -> bool:
        if self._uses is None:
            self._uses = {id(x) for op in self.module.walk() for x in op.operands}
        return id(v) in self._uses

    def tagged(self, a: Any, buf: bytearray) -> None:
        t = self.tables
        if isinstance(a, IntegerAttr):
            buf.append(E.A_INTEGER)
            put_varint(buf, t.type(a.type))
            put_varint(buf, a.value & ((1 << a.type.bitwidth) - 1))
        elif isinstance(a, FloatAttr):
            buf.append(E.A_FLOAT)
            put_varint(buf, t.type(a.type))
            if a.type.bitwidth <= 8:
                buf.append(a.bits & 0xFF)
            else:
                put_svarint(buf, a.bits)
        elif isinstance(a, BoolAttr):
            buf.append(E.A_BOOL)
            buf.append(1 if a.value else 0)
        elif isinstance(a, TypeAttr):
            buf.append(E.A_TYPE)
            put_varint(buf, t.type(a.value))
        elif isinstance(a, StringAttr):
            buf.append(E.A_STRING)
            put_varint(buf, t.string(a.value))
        elif isinstance(a, ArrayAttr):
            buf.append(E.A_ARRAY)
            put_varint(buf, len(a.values))
            for x in a.values:
                self.tagged(x, buf)
        elif isinstance(a, DenseElements):
            buf.append(E.A_DENSE)
            put_varint(buf, t.type(a.type))
            put_varint(buf, t.constant(a.data))
        elif isinstance(a, DivBy):
            buf.append(E.A_DIVBY)
            put_varint(buf, a.divisor)
            buf.append((a.every is not None) | ((a.along is not None) << 1))
            if a.every is not None:
                put_svarint(buf, a.every)
            if a.along is not None:
                put_svarint(buf, a.along)
        elif isinstance(a, SameElements):
            buf.append(E.A_SAME_ELEMENTS)
            put_varint(buf, len(a.values))
            for n in a.values:
                buf += _pack_i64(n)
        elif isinstance(a, DictAttr):
            buf.append(E.A_DICT)
            self.dict_body(a.items, buf)
        elif isinstance(a, OptimizationHints):
            buf.append(E.A_HINTS)
            self.dict_body(a.per_arch, buf)
        elif isinstance(a, Bounded):
            buf.append(E.A_BOUNDED)
            buf.append((a.lb is not None) | ((a.ub is not None) << 1))
            if a.lb is not None:
                put_svarint(buf, a.lb)
            if a.ub is not None:
                put_svarint(buf, a.ub)
        else:
            raise BytecodeError(f"cannot encode attribute {a!r}")

    def dict_body(self, items: tuple[tuple[str, Any], ...], buf: bytearray) -> None:
        put_varint(buf, len(items))
        for k, x in items:
            put_varint(buf, self.tables.string(k))
            self.tagged(x, buf)

    def write(self) -> bytes:
        m, v, t = self.module, self.version, self.tables
        # symbols and signatures first (as NVIDIA's writer does)
        for f in m.functions:
            if not f.entry:
                raise BytecodeError(f"function @{f.name} is not a kernel entry; Tile IR bytecode {v} can only "
                                    "hold entries (tileiras rejects other functions)")
            t.string(f.name)
            t.type(f.type)
        glob = bytearray()
        if m.globals:
            put_varint(glob, len(m.globals))
            for g in m.globals:
                if v < V13_3 and (g.constant or int(g.visibility) != 0):
                    raise VersionError(f"global @{g.name}: constant/private globals need bytecode 13.3, writing {v}",
                                       op="global", loc=g.loc)
                put_varint(glob, t.string(g.name))
                put_varint(glob, t.type(g.value.type))
                put_varint(glob, t.constant(g.value.data))
                put_varint(glob, g.alignment)
                if v >= V13_3:
                    put_varint(glob, int(g.visibility))
                    put_varint(glob, 1 if g.constant else 0)
        func = bytearray()
        put_varint(func, len(m.functions))
        for f in m.functions:
            loc_index, scope, ops = self.debug.function(f)
            put_varint(func, t.string(f.name))
            put_varint(func, t.type(f.type))
            flags = E.F_KERNEL | (E.F_HINTS if f.hints is not None else 0) | (E.F_PRIVATE if f.private else 0)
            func.append(flags)
            put_varint(func, loc_index)
            if f.hints is not None:
                self.tagged(f.hints, func)
            body = _FunctionWriter(self, f, scope, ops).body()
            put_varint(func, len(body))
            func += body
        E.pad_to(func, 8)
        out = bytearray(E.MAGIC)
        out += bytes([v.major, v.minor, 0, 0])
        if m.globals:
            _section(out, E.SEC_GLOBAL, glob, 1)
        _section(out, E.SEC_FUNC, func, 8)
        if t.constants:
            _section(out, E.SEC_CONSTANT, _offset_table(list(t.constants), 8), 8)
        if self.debug.per_function:
            _section(out, E.SEC_DEBUG, self.debug.section(), 8)
        _section(out, E.SEC_TYPE, _offset_table(t.type_bytes, 4), 4)
        if m.producer is not None:
            if v < V13_3:
                raise VersionError(f"the producer string needs bytecode 13.3, writing {v}", op="module")
            prod = bytearray()
            put_varint(prod, t.string(m.producer))
            _section(out, E.SEC_PRODUCER, prod, 1)
        _section(out, E.SEC_STRING, _offset_table([s.encode("utf-8") for s in t.strings], 4), 4)
        out.append(E.SEC_END)
        return bytes(out)


def _section(out: bytearray, sid: int, payload: bytearray, align: int) -> None:
    out.append(sid | (0x80 if align > 1 else 0))
    put_varint(out, len(payload))
    if align > 1:
        put_varint(out, align)
        E.pad_to(out, align)
    out += payload


def write_bytecode(module: Module, version: Version | str | tuple[int, int] = DEFAULT_VERSION) -> bytes:
    """Encode ``module`` as Tile IR bytecode of ``version`` (13.1–13.4)."""
    return _Writer(module, Version.parse(version)).write()


