"""A catalog of well-formed kernels that together use every op of a bytecode version.

Used by the tests (disassembler agreement, tileiras compilation, round trips) and by the
benchmark; also a worked example of the builder for every op.
"""

from __future__ import annotations

from typing import Callable

from ._attributes import (
    Bounded, DenseElements, DivBy, FloatAttr, IntegerAttr, Location, SameElements, SymbolVisibility,
)
from ._builder import Builder, add_function
from ._ir import Global, Module, Value
from ._types import (
    BF16, F16, F32, F64, F8E4M3FN, F8E5M2, F8E8M0FNU, I1, I16, I32, I4, I64, I8, TF32,
    GatherScatterViewType, PaddingValue, PartitionViewType, PointerType, StridedViewType, TensorViewType,
    Type, ptr, scalar, tile,
)
from ._versions import V13_2, V13_3, V13_4, Version

PF32 = scalar(ptr(F32))
PI32 = scalar(ptr(I32))


def _float_math(b: Builder, v: Version) -> None:
    t = tile(16, F32)
    x = b.constant(1.5, t)
    y = b.constant([float(i) for i in range(16)], t)
    b.absf(x)
    b.addf(x, y, rounding_mode="nearest_even")
    b.addf(x, y, rounding_mode="zero", flush_to_zero=True)
    if v >= V13_2:
        b.atan2(x, y)
    b.ceil(x)
    b.cos(x)
    b.cosh(x)
    b.divf(x, y, rounding_mode="approx")
    b.exp(x)
    if v >= V13_3:
        b.exp(x, rounding_mode="approx")
    b.exp2(x, flush_to_zero=True)
    b.floor(x)
    b.fma(x, y, x, rounding_mode="nearest_even")
    b.log(x)
    b.log2(x)
    b.maxf(x, y, propagate_nan=True)
    b.minf(x, y, flush_to_zero=True)
    b.mulf(x, y, rounding_mode="positive_inf")
    b.negf(x)
    b.fpowf(x, y)
    b.remf(x, y)
    b.rsqrt(x)
    b.sin(x)
    b.sinh(x)
    b.sqrt(x, rounding_mode="approx")
    b.subf(x, y, rounding_mode="nearest_even")
    b.tan(x)
    b.tanh(x)
    if v >= V13_2:
        b.tanh(x, rounding_mode="approx")
    b.cmpf(x, y, comparison_predicate="less_than", comparison_ordering="ordered")
    c = b.cmpf(x, y, comparison_predicate="not_equal", comparison_ordering="unordered")
    b.select(c, x, y)
    b.ftof(x, result_types=[tile(16, F16)])
    b.ftof(x, rounding_mode="zero", result_types=[tile(16, BF16)])
    b.ftoi(x, signedness="signed", rounding_mode="nearest_int_to_zero", result_types=[tile(16, I32)])
    if v >= V13_4:
        b.ftoi(x, signedness="unsigned", rounding_mode="nearest_int_to_zero", saturating=True,
               result_types=[tile(16, I16)])
        b.fpowi(x, b.constant(3, tile(16, I32)))
    b.bitcast(x, result_types=[tile(16, I32)])
    b.return_()


def _int_math(b: Builder, v: Version) -> None:
    t = tile(16, I32)
    x = b.constant(7, t)
    y = b.iota(result_types=[t])
    b.absi(x)
    b.addi(x, y)
    b.addi(x, y, overflow="no_signed_wrap")
    b.andi(x, y)
    b.divi(x, y, signedness="signed")
    b.divi(x, y, signedness="unsigned", rounding="positive_inf")
    b.maxi(x, y, signedness="signed")
    b.mini(x, y, signedness="unsigned")
    b.muli(x, y, overflow="no_wrap")
    b.mulhii(x, y)
    b.negi(x)
    if v >= V13_2:
        b.negi(x, overflow="no_signed_wrap")
    b.ori(x, y)
    b.remi(x, y, signedness="signed")
    b.shli(x, y)
    b.shri(x, y, signedness="unsigned")
    b.subi(x, y, overflow="no_unsigned_wrap")
    b.xori(x, y)
    b.cmpi(x, y, comparison_predicate="greater_than_or_equal", signedness="signed")
    b.exti(x, signedness="signed", result_types=[tile(16, I64)])
    b.trunci(x, result_types=[tile(16, I16)])
    b.trunci(x, overflow="no_unsigned_wrap", result_types=[tile(16, I8)])
    b.itof(x, signedness="signed", rounding_mode="nearest_even", result_types=[tile(16, F32)])
    if v >= V13_3:
        small = b.constant(3, tile(16, I8))
        b.exti(b.trunci(small, result_types=[tile(16, I4)]), signedness="signed", result_types=[tile(16, I8)])
    b.return_()


def _shapes(b: Builder, v: Version) -> None:
    x = b.constant([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0], tile((2, 4), F32))
    b.broadcast(b.constant(0.5, tile((1, 4), F32)), result_types=[tile((8, 4), F32)])
    b.reshape(x, result_types=[tile((4, 2), F32)])
    b.permute(x, permutation=[1, 0], result_types=[tile((4, 2), F32)])
    b.cat(x, x, dim=0, result_types=[tile((4, 4), F32)])
    i0 = b.constant(0, scalar(I32))
    i1 = b.constant(1, scalar(I32))
    b.extract(x, [i0, i1], result_types=[tile((2, 2), F32)])
    if v >= V13_4:
        b.insert(b.constant(9.0, tile((2, 2), F32)), x, [i0, i1])
    b.constant(True, tile(8, I1))
    b.constant([1, 0, 1, 1], tile(4, I1))
    b.constant(-3, tile(4, I64))
    b.constant(2.5, tile(4, F16))
    b.constant(1.0, scalar(BF16))
    if v >= V13_3:
        small = b.trunci(b.constant(3, tile(16, I8)), result_types=[tile(16, I4)])
        packed = b.pack(small, result_types=[tile(8, I8)])
        b.unpack(packed, result_types=[tile(16, I4)])
    b.return_()


def _memory(b: Builder, v: Version, p: Value, q: Value, flag: Value) -> None:
    tok = b.make_token()
    offs = b.iota(result_types=[tile(16, I32)])
    ptrs = b.offset(b.broadcast(b.reshape(p, result_types=[tile(1, ptr(F32))]),
                                result_types=[tile(16, ptr(F32))]), offs)
    mask = b.cmpi(offs, b.constant(8, tile(16, I32)), comparison_predicate="less_than", signedness="signed")
    pad = b.constant(0.0, tile(16, F32))
    val, t1 = b.load_ptr_tko(ptrs, memory_ordering_semantics="weak")
    val2, t2 = b.load_ptr_tko(ptrs, mask, pad, token=tok, memory_ordering_semantics="relaxed",
                              memory_scope="device", optimization_hints={"sm_90": {"latency": 3}})
    t3 = b.store_ptr_tko(ptrs, val, memory_ordering_semantics="weak", token=t1)
    b.store_ptr_tko(ptrs, val2, mask, token=t2, memory_ordering_semantics="release", memory_scope="sys",
                    optimization_hints={"sm_100": {"allow_tma": False}})
    ip = b.broadcast(b.reshape(q, result_types=[tile(1, ptr(I32))]), result_types=[tile(16, ptr(I32))])
    ival = b.constant(1, tile(16, I32))
    b.atomic_rmw_tko(ip, ival, memory_ordering_semantics="relaxed", memory_scope="device", mode="add")
    b.atomic_rmw_tko(ip, ival, mask, t3, memory_ordering_semantics="acq_rel", memory_scope="tl_blk", mode="max")
    b.atomic_cas_tko(ip, ival, ival, memory_ordering_semantics="acquire", memory_scope="sys")
    b.join_tokens([t1, t2, t3])
    pi = b.ptr_to_int(p, result_types=[scalar(I64)])
    b.ptr_to_ptr(b.int_to_ptr(pi, result_types=[scalar(ptr(F32))]), result_types=[scalar(ptr(I32))])
    b.get_global(name="table", result_types=[scalar(ptr(F32))])
    if v >= V13_3:
        b.alloca(num_elem=64, alignment=16, result_types=[scalar(ptr(F32))])
        b.alloca(num_elem=8, alignment=8, **{"global": True}, result_types=[scalar(ptr(I32))])
    b.assume(p, predicate=DivBy(16))
    b.assume(flag, predicate=Bounded(0, 42))
    b.assume(offs, predicate=DivBy(4, every=4, along=0))
    b.assume(offs, predicate=SameElements((4,)))
    b.assume(flag, predicate=Bounded(None, 7))
    b.assert_(b.cmpi(flag, flag, comparison_predicate="equal", signedness="signed"), message="flag is sane")
    if v >= V13_2:
        b.print_tko(val, token=t3, str="val=%f\n")
        b.print_tko(str="hello\n")
    else:
        b.print_tko(val, str="val=%f\n")
    if v >= V13_4:
        tf = b.memory_fence_alias_tko(t3)
        b.gdc_wait_tko(token=tf)
        b.gdc_launch_dependents_tko()
    b.return_()


def _views(b: Builder, v: Version, base: Value, n: Value) -> None:
    tv = TensorViewType(F32, (None, 64), (64, 1))
    view = b.make_tensor_view(base, [n], [], result_types=[tv])
    pv = PartitionViewType((16, 32), tv, (0, 1), PaddingValue.ZERO)
    part = b.make_partition_view(view, result_types=[pv])
    pvt = PartitionViewType((32, 16), tv, (1, 0))
    part_t = b.make_partition_view(view, result_types=[pvt])
    b.get_tensor_shape(view, result_types=[scalar(I32), scalar(I32)])
    b.get_index_space_shape(part, result_types=[scalar(I32), scalar(I32)])
    bx, by, _ = b.get_tile_block_id()
    nx, ny, nz = b.get_num_tile_blocks()
    inb: dict[str, list[bool]] = {"inbounds": [True, False]} if v >= V13_4 else {}
    t, tok = b.load_view_tko(part, [bx, by], memory_ordering_semantics="weak",
                             optimization_hints={"sm_90": {"latency": 2, "allow_tma": True}})
    t2, tok2 = b.load_view_tko(part_t, [bx, by], token=tok, memory_ordering_semantics="acquire",
                               memory_scope="device", **inb)
    b.store_view_tko(t, part, [bx, by], memory_ordering_semantics="weak", token=tok2)
    b.store_view_tko(t2, part_t, [by, bx], memory_ordering_semantics="relaxed", memory_scope="tl_blk", **inb)
    if v >= V13_3:
        sv = StridedViewType((16, 16), (2, 2), tv, (0, 1))
        s = b.make_strided_view(view, result_types=[sv])
        st, _ = b.load_view_tko(s, [bx, by], memory_ordering_semantics="weak")
        tv1 = TensorViewType(F32, (1024,), (1,))
        v1 = b.make_tensor_view(base, result_types=[tv1])
        gv = GatherScatterViewType((16,), tv1, 0, PaddingValue.NAN)
        b.make_gather_scatter_view(v1, result_types=[gv])
        b.atomic_red_view_tko(s, [bx, by], st, memory_ordering_semantics="relaxed", memory_scope="device",
                              mode="addf")
    b.return_()


def _control(b: Builder, v: Version, n: Value) -> None:
    zero = b.constant(0, scalar(I32))
    one = b.constant(1, scalar(I32))
    acc0 = b.constant(0.0, tile(16, F32))
    with b.for_(zero, n, one, inits=[acc0]) as loop:
        iv, acc = loop.args
        nxt = b.addf(acc, b.constant(1.0, tile(16, F32)), rounding_mode="nearest_even")
        b.continue_([nxt])
    (total,) = loop.results
    if v >= V13_2:
        with b.for_(zero, n, one, unsigned_cmp=True):
            b.continue_()
    c = b.cmpi(n, zero, comparison_predicate="greater_than", signedness="signed")
    with b.if_(c, [tile(16, F32)]) as br:
        with br.then():
            b.yield_([total])
        with br.else_():
            b.yield_([acc0])
    with b.if_(c) as br2:
        with br2.then():
            b.yield_()
    with b.loop([zero], [scalar(I32)]) as lp:
        (k,) = lp.args
        k1 = b.addi(k, one)
        done = b.cmpi(k1, n, comparison_predicate="greater_than_or_equal", signedness="signed")
        with b.if_(done) as br3:
            with br3.then():
                b.break_([k1])
            with br3.else_():
                b.yield_()
        b.continue_([k1])
    with b.reduce([total], dim=0, identities=[0.0]) as red:
        e, a = red.args
        b.yield_([b.addf(e, a, rounding_mode="nearest_even")])
    ints = b.reshape(b.iota(result_types=[tile(32, I32)]), result_types=[tile((4, 8), I32)])
    with b.reduce([ints, ints], dim=1, identities=[0, -1]) as red2:
        e0, a0, e1, a1 = red2.args
        b.yield_([b.addi(e0, a0), b.maxi(e1, a1, signedness="signed")])
    with b.scan([total], dim=0, identities=[0.0], reverse=True) as sc:
        e, a = sc.args
        b.yield_([b.addf(e, a, rounding_mode="nearest_even")])
    b.return_()


def _mma(b: Builder, v: Version) -> None:
    a = b.constant(1.0, tile((16, 16), F16))
    acc = b.constant(0.0, tile((16, 16), F32))
    b.mmaf(a, a, acc)
    if v >= V13_3:
        b.mmaf(a, a, acc, fast_acc=True)
    i8 = b.constant(1, tile((16, 32), I8))
    i8t = b.constant(2, tile((32, 16), I8))
    b.mmai(i8, i8t, b.constant(0, tile((16, 16), I32)), signedness_lhs="signed", signedness_rhs="unsigned")
    b.return_()


def _mma_scaled(b: Builder, v: Version) -> None:
    a = b.constant(0x38, tile((128, 64), F8E4M3FN))
    bb = b.constant(0x38, tile((64, 128), F8E4M3FN))
    acc = b.constant(0.0, tile((128, 128), F32))
    sa = b.constant(127, tile((128, 2), F8E8M0FNU))
    sb = b.constant(127, tile((2, 128), F8E8M0FNU))
    b.mmaf_scaled(a, bb, acc, sa, sb)
    b.return_()


def every_op_module(version: Version, *, sm100_only: bool = False, with_locations: bool = False) -> Module:
    """One module whose entries use every op that ``version`` has (mmaf_scaled, sm_100+ only,
    sits in the ``sm100_only`` module instead)."""
    m = Module()
    if sm100_only:
        f = add_function(m, "mma_scaled", [])
        if version >= V13_3:
            _mma_scaled(Builder(f), version)
        else:
            Builder(f).return_()
        return m
    m.globals.append(Global("table", DenseElements.from_values(tile(4, F32), [1.0, 2.0, 3.0, 4.0]), alignment=16))
    if version >= V13_3:
        m.globals.append(Global("consts", DenseElements.splat(tile(8, I32), 5), constant=True))
    entries: list[tuple[str, list[Type], Callable[..., None]]] = [
        ("float_math", [], _float_math),
        ("int_math", [], _int_math),
        ("shapes", [], _shapes),
        ("memory", [PF32, PI32, scalar(I32)], _memory),
        ("views", [PF32, scalar(I32)], _views),
        ("control", [scalar(I32)], _control),
        ("mma", [], _mma),
    ]
    for line, (name, args, fill) in enumerate(entries, start=1):
        loc = Location("/src/kernels/catalog.py", 10 * line, 5, name) if with_locations else None
        f = add_function(m, name, args, loc=loc,
                         hints={"sm_90": {"occupancy": 2}, "sm_100": {"num_cta_in_cga": 2}} if name == "mma" else None)
        b = Builder(f, loc=loc)
        fill(b, version, *f.args)
    return m


def edge_cases_module(version: Version) -> Module:
    """Less common spellings: multi-result loops and ifs, dynamic strides, views with padding
    and dim maps, special floats, escapes in strings, every element type in constants."""
    m = Module()
    m.globals.append(Global("g_i64", DenseElements.from_values(tile(2, I64), [-1, 1 << 40]), alignment=8))
    if version >= V13_3:
        m.globals.append(Global("g_priv", DenseElements.splat(tile(4, F32), 2.0),
                                visibility=SymbolVisibility.PRIVATE))
    f = add_function(m, "consts", [])
    b = Builder(f)
    b.constant(float("nan"), tile(4, F32))
    b.constant(float("inf"), tile(4, F32))
    b.constant(-0.0, tile(4, F32))
    b.constant([1.0, -2.5, 3.25, 1e-3], tile(4, F64))
    b.constant([1.0, 0.5], tile(2, BF16))
    b.constant(0.25, tile(4, TF32))
    b.constant([0x38, 0x40], tile(2, F8E4M3FN))
    b.constant(0x3C, tile(4, F8E5M2))
    b.constant([-5, 7, 0, 1], tile((2, 2), I16))
    b.constant(-(1 << 62), scalar(I64))
    b.constant(False, tile(2, I1))
    b.print_tko(str='quote " backslash \\ tab \t end')
    b.assert_(b.constant(True, scalar(I1)), message="100% \"sure\"")
    b.return_()

    f = add_function(m, "flow", [scalar(I32), scalar(I64)])
    b = Builder(f)
    n, n64 = f.args
    zero = b.constant(0, scalar(I32))
    one = b.constant(1, scalar(I32))
    a0 = b.constant(0.0, tile(4, F32))
    i0 = b.constant(0, tile(4, I32))
    with b.for_(zero, n, one, inits=[a0, i0]) as loop:
        iv, x, y = loop.args
        b.continue_([b.negf(x), b.addi(y, b.broadcast(b.reshape(iv, result_types=[tile(1, I32)]),
                                                        result_types=[tile(4, I32)]))])
    fx, fy = loop.results
    c = b.cmpi(n, zero, comparison_predicate="less_than_or_equal", signedness="unsigned")
    with b.if_(c, [tile(4, F32), tile(4, I32)]) as br:
        with br.then():
            b.yield_([fx, fy])
        with br.else_():
            b.yield_([a0, i0])
    with b.loop(result_types=[scalar(I32)]):
        b.break_([n])
    with b.loop():
        b.break_()
    with b.scan([fx, fy], dim=0, identities=[FloatAttr.of(F32, 0.0), IntegerAttr(I32, 0)]) as sc:
        e0, a_0, e1, a_1 = sc.args
        b.yield_([b.addf(e0, a_0, rounding_mode="nearest_even"), b.addi(e1, a_1)])
    h = b.constant(1.0, tile(4, F16))
    with b.reduce([h], dim=0, identities=[float("-inf")]) as red:
        e, a = red.args
        b.yield_([b.maxf(e, a)])
    b.return_()

    f = add_function(m, "views", [PF32, scalar(I64), scalar(I64)])
    b = Builder(f)
    base, d0, s0 = f.args
    tv = TensorViewType(F32, (None, 32), (None, 1))
    view = b.make_tensor_view(base, [d0], [s0], result_types=[tv])
    b.assume(view, predicate=DivBy(16))
    pv = PartitionViewType((8, 16), tv, (1, 0), PaddingValue.NEG_INF)
    part = b.make_partition_view(view, result_types=[pv])
    x0 = b.constant(0, scalar(I32))
    t, tok = b.load_view_tko(part, [x0, x0], token=b.make_token(), memory_ordering_semantics="relaxed",
                             memory_scope="sys", optimization_hints={"sm_100": {"latency": 4}, "sm_80": {"allow_tma": False}})
    b.store_view_tko(t, part, [x0, x0], token=tok, memory_ordering_semantics="release", memory_scope="device",
                     optimization_hints={"sm_90": {"latency": 1}})
    b.get_index_space_shape(part, result_types=[scalar(I64), scalar(I64)])
    if version >= V13_3:
        sv = StridedViewType((4, 8), (2, 1), tv, (1, 0), PaddingValue.POS_INF)
        s = b.make_strided_view(view, result_types=[sv])
        st_, tk = b.load_view_tko(s, [x0, x0], memory_ordering_semantics="weak")
        s2 = b.make_strided_view(view, result_types=[StridedViewType((4, 8), (4, 2), tv, (1, 0))])
        b.atomic_red_view_tko(s2, [x0, x0], st_, token=tk, memory_ordering_semantics="relaxed",
                              memory_scope="tl_blk", mode="addf")
        tv1 = TensorViewType(F32, (1024,), (1,))
        gv = GatherScatterViewType((16,), tv1, 0)
        g = b.make_gather_scatter_view(b.make_tensor_view(base, result_types=[tv1]), result_types=[gv])
        b.get_index_space_shape(g, result_types=[scalar(I32)])
    if version >= V13_4:
        pa = PointerType(F32, "none")
        tva = TensorViewType(F32, (16,), (1,), "none")
        q = b.ptr_to_ptr(base, result_types=[scalar(pa)])
        b.make_tensor_view(q, result_types=[tva])
    b.assume(d0, predicate=Bounded(1, None))
    b.assume(b.iota(result_types=[tile(16, I32)]), predicate=DivBy(2, every=8, along=0))
    b.return_()
    return m


def naming_module(version: Version) -> Module:
    """Value naming corner cases (assume of named producers, result groups, nested region
    scopes and argument numbering) and rarer spellings (private constant globals, loops
    with iter values and no results, dynamic tensor views over attributed pointers)."""
    m = Module()
    if version >= V13_3:
        m.add_global("gp", DenseElements.splat(tile(4, F32), 1.0), constant=True,
                     visibility=SymbolVisibility.PRIVATE)
    f = m.add_entry("names", [PF32, scalar(I32)])
    b = Builder(f)
    p, n = f.args
    tvarg = b.make_tensor_view(p, result_types=[TensorViewType(F32, (64,), (1,))])
    zero, one = b.constant(0, scalar(I32)), b.constant(1, scalar(I32))
    x, tok = b.load_ptr_tko(p, memory_ordering_semantics="weak")
    xi = b.ftoi(x, signedness="signed", rounding_mode="nearest_int_to_zero", result_types=[scalar(I32)])
    a1 = b.assume(xi, predicate=Bounded(0, 5))
    b.assume(a1, predicate=Bounded(1, 4))
    with b.for_(zero, n, one, inits=[zero, one]) as fl:
        _, s0, s1 = fl.args
        with b.loop([s0]) as lp:
            with b.loop([lp.args[0]]):
                b.constant(3, scalar(I32))
                b.break_()
            b.constant(3, scalar(I32))
            b.break_()
        b.continue_([s0, s1])
    b.assume(fl.results[0], predicate=DivBy(4))
    b.assume(fl.results[1], predicate=DivBy(4))
    b.assume(tvarg, predicate=DivBy(16))
    ip = b.broadcast(b.reshape(b.ptr_to_ptr(p, result_types=[scalar(ptr(I32))]), result_types=[tile(1, ptr(I32))]),
                     result_types=[tile(8, ptr(I32))])
    v8, m8 = b.constant(1, tile(8, I32)), b.constant(True, tile(8, I1))
    r, t2 = b.atomic_cas_tko(ip, v8, v8, m8, tok, memory_ordering_semantics="acq_rel", memory_scope="device")
    b.assume(r, predicate=DivBy(2))
    b.assume(v8, predicate=SameElements((8,)))
    if version >= V13_2:
        b.print_tko([v8, r], token=t2, str="%d %d\n")
    if version >= V13_4:
        q = b.ptr_to_ptr(p, result_types=[scalar(PointerType(F32, "none"))])
        b.make_tensor_view(q, [n, n], [n], result_types=[TensorViewType(F32, (None, None), (None, 1), "none")])
    b.return_()
    return m


def large_module(n_ops: int) -> Module:
    """One kernel of ``n_ops`` ops: constants, a long arithmetic chain with a few loops (the
    module scripts/bench_ir.py times, and a test round-trips)."""
    m = Module()
    f = add_function(m, "bench", [scalar(ptr(F32)), scalar(I32)])
    b = Builder(f)
    t = tile(128, F32)
    x = b.constant(1.0, t)
    y = b.constant([float(i) for i in range(128)], t)
    count = 2
    acc = x
    while count < n_ops - 8:
        acc = b.addf(acc, y, rounding_mode="nearest_even")
        acc = b.mulf(acc, x, rounding_mode="zero", flush_to_zero=True)
        c = b.cmpf(acc, y, comparison_predicate="less_than", comparison_ordering="ordered")
        acc = b.select(c, acc, y)
        count += 4
        if count % 400 == 0 and count < n_ops - 16:
            zero = b.constant(0, scalar(I32))
            one = b.constant(1, scalar(I32))
            with b.for_(zero, f.args[1], one, inits=[acc]) as loop:
                (_, a) = loop.args
                b.continue_([b.negf(a)])
            acc = loop.results[0]
            count += 5
    while count < n_ops - 1:
        acc = b.absf(acc)
        count += 1
    b.return_()
    count += 1
    assert sum(1 for _ in m.walk()) == n_ops, sum(1 for _ in m.walk())
    return m
