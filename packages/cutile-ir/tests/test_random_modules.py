"""Hypothesis-generated well-typed random modules: they verify, round-trip at every
version, write deterministically, and (a batch of them) agree with tileirdisasm and
compile with tileiras."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cutile_ir import (
    F16, F32, I1, I16, I32, TOKEN, PartitionViewType, TensorViewType, SUPPORTED_VERSIONS, V13_3, Builder, Function, Module, TileType, Value, add_function,
    differences, print_module, problems, ptr, read_bytecode, scalar, tile, write_bytecode,
)

SHAPES = [(), (1,), (4,), (16,), (2, 8), (8, 4)]
ELEMENTS = [F32, F16, I32, I16]
NICE_FLOATS = [0.0, 1.0, -2.0, 0.5, 3.0, 1024.0]
FLOAT_BIN = ["addf", "subf", "mulf", "divf", "maxf", "minf", "remf"]
FLOAT_UN = ["absf", "negf", "ceil", "floor", "sqrt", "exp", "exp2", "log", "tanh", "sin", "cos"]
INT_BIN = ["addi", "subi", "muli", "andi", "ori", "xori", "maxi", "mini", "divi", "remi", "shli", "shri"]
INT_UN = ["absi", "negi"]
ROUNDINGS = ["nearest_even", "zero", "negative_inf", "positive_inf"]


class _Gen:
    def __init__(self, draw: Any, nice: bool) -> None:
        self.draw = draw
        self.nice = nice

    def const(self, b: Builder, t: TileType) -> Value:
        el = t.element
        assert not isinstance(el, type(ptr(F32)))
        if el in (F32, F16):
            if self.nice:
                v: Any = self.draw(st.sampled_from(NICE_FLOATS))
            else:
                v = self.draw(st.floats(width=16 if el == F16 else 32, allow_nan=True))
        else:
            bits = 32 if el == I32 else 16
            v = self.draw(st.integers(-(1 << (bits - 1)), (1 << (bits - 1)) - 1))
        if t.numel > 1 and self.draw(st.booleans()):
            return b.constant([v] * (t.numel - 1) + [0], t)
        return b.constant(v, t)

    def pick(self, pool: list[Value], t: TileType, b: Builder) -> Value:
        same = [v for v in pool if v.type == t]
        if same and self.draw(st.booleans()):
            return self.draw(st.sampled_from(same))
        v = self.const(b, t)
        pool.append(v)
        return v

    def memory(self, b: Builder, pool: list[Value], base: Value) -> None:
        """A load and a store through pointers and through a partition view, each with a
        random subset of its optional operands and attributes (the flags field)."""
        d = self.draw
        ptrs = b.offset(b.broadcast(b.reshape(base, result_types=[tile(1, ptr(F32))]),
                                    result_types=[tile(16, ptr(F32))]), b.iota(result_types=[tile(16, I32)]))
        toks = [v for v in pool if v.type == TOKEN]
        kw: dict[str, Any] = {}
        if d(st.booleans()):
            kw["memory_scope"] = d(st.sampled_from(["tl_blk", "device", "sys"]))
        if d(st.booleans()):
            kw["optimization_hints"] = {d(st.sampled_from(["sm_80", "sm_90", "sm_100"])): {"latency": d(st.integers(1, 8))}}
        mask = b.constant(True, tile(16, I1)) if d(st.booleans()) else None
        pad = b.constant(0.0, tile(16, F32)) if mask is not None and d(st.booleans()) else None
        tok = d(st.sampled_from(toks)) if toks and d(st.booleans()) else None
        order = "relaxed" if "memory_scope" in kw else "weak"
        val, t1 = b.load_ptr_tko(ptrs, mask, pad, tok, memory_ordering_semantics=order, **kw)
        t2 = b.store_ptr_tko(ptrs, val, mask, t1 if d(st.booleans()) else None, memory_ordering_semantics=order, **kw)
        tv = TensorViewType(F32, (64,), (1,))
        pv = b.make_partition_view(b.make_tensor_view(base, result_types=[tv]),
                                   result_types=[PartitionViewType((16,), tv)])
        idx = b.constant(d(st.integers(0, 3)), scalar(I32))
        t, t3 = b.load_view_tko(pv, [idx], t2 if d(st.booleans()) else None, memory_ordering_semantics=order, **kw)
        b.store_view_tko(t, pv, [idx], t3 if d(st.booleans()) else None, memory_ordering_semantics=order, **kw)
        pool += [val, t, t1, t2, t3]

    def body(self, b: Builder, pool: list[Value], n: int, depth: int, iv_src: Value) -> None:
        for _ in range(n):
            t = TileType(self.draw(st.sampled_from(SHAPES)), self.draw(st.sampled_from(ELEMENTS)))
            is_float = t.element in (F32, F16)
            kinds = ["bin", "un", "cmp", "conv", "shape"] + (["region", "if", "reduce"] if depth < 2 else [])
            kind = self.draw(st.sampled_from(kinds))
            x = self.pick(pool, t, b)
            if kind == "bin":
                y = self.pick(pool, t, b)
                if is_float:
                    name = self.draw(st.sampled_from(FLOAT_BIN))
                    kw: dict[str, Any] = {}
                    if name in ("addf", "subf", "mulf", "divf"):
                        kw["rounding_mode"] = self.draw(st.sampled_from(ROUNDINGS))
                        kw["flush_to_zero"] = t.element == F32 and self.draw(st.booleans())
                    if name in ("maxf", "minf"):
                        kw["propagate_nan"] = self.draw(st.booleans())
                    pool.append(getattr(b, name)(x, y, **kw))
                else:
                    name = self.draw(st.sampled_from(INT_BIN))
                    kw = {}
                    if name in ("addi", "subi", "muli", "shli"):
                        kw["overflow"] = self.draw(st.sampled_from(["none", "no_signed_wrap", "no_wrap"]))
                    if name in ("maxi", "mini", "divi", "remi", "shri"):
                        kw["signedness"] = self.draw(st.sampled_from(["signed", "unsigned"]))
                    pool.append(getattr(b, name)(x, y, **kw))
            elif kind == "un":
                if is_float:
                    name = self.draw(st.sampled_from(FLOAT_UN))
                    kw = {"rounding_mode": "approx" if t.element == F32 else "full"} if name == "sqrt" else {}
                    if name == "sqrt" and t.element != F32:
                        kw = {"rounding_mode": "nearest_even"}
                    pool.append(getattr(b, name)(x, **kw))
                else:
                    pool.append(getattr(b, self.draw(st.sampled_from(INT_UN)))(x))
            elif kind == "cmp":
                y = self.pick(pool, t, b)
                if is_float:
                    c = b.cmpf(x, y, comparison_predicate="less_than", comparison_ordering="ordered")
                else:
                    c = b.cmpi(x, y, comparison_predicate="not_equal", signedness="signed")
                pool.append(b.select(c, x, y))
            elif kind == "conv":
                if is_float:
                    other = F16 if t.element == F32 else F32
                    pool.append(b.ftof(x, result_types=[TileType(t.shape, other)]))
                    pool.append(b.ftoi(x, signedness="signed", rounding_mode="nearest_int_to_zero",
                                       result_types=[TileType(t.shape, I32)]))
                else:
                    wide, narrow = (I32, I16)
                    if t.element == I16:
                        pool.append(b.exti(x, signedness=self.draw(st.sampled_from(["signed", "unsigned"])),
                                           result_types=[TileType(t.shape, wide)]))
                    else:
                        pool.append(b.trunci(x, result_types=[TileType(t.shape, narrow)]))
                    pool.append(b.itof(x, signedness="signed", rounding_mode="nearest_even",
                                       result_types=[TileType(t.shape, F32)]))
            elif kind == "shape":
                if t.rank == 2:
                    pool.append(b.permute(x, permutation=[1, 0], result_types=[TileType(t.shape[::-1], t.element)]))
                    pool.append(b.reshape(x, result_types=[TileType((t.numel,), t.element)]))
                elif t.rank == 1:
                    pool.append(b.broadcast(b.reshape(x, result_types=[TileType((1, t.numel), t.element)]),
                                            result_types=[TileType((4, t.numel), t.element)]))
                else:
                    pool.append(b.reshape(x, result_types=[TileType((1,), t.element)]))
            elif kind == "if":
                c = b.cmpi(iv_src, b.constant(self.draw(st.integers(0, 9)), scalar(I32)),
                           comparison_predicate="less_than", signedness="signed")
                with b.if_(c, [x.type]) as br:
                    with br.then():
                        inner = list(pool)
                        self.body(b, inner, self.draw(st.integers(0, 2)), depth + 1, iv_src)
                        b.yield_([self.pick(inner, t, b)])
                    with br.else_():
                        b.yield_([x])
                pool.append(br.results[0])
            elif kind == "reduce" and t.rank >= 1:
                ident: Any = 0.0 if is_float else 0
                with b.reduce([x], dim=t.rank - 1, identities=[ident]) as red:
                    e, a = red.args
                    if is_float:
                        b.yield_([b.addf(e, a, rounding_mode="nearest_even")])
                    else:
                        b.yield_([b.addi(e, a)])
                pool.append(red.results[0])
            elif kind == "reduce":
                pool.append(b.negf(x) if is_float else b.negi(x))
            else:
                zero = b.constant(0, scalar(I32))
                one = b.constant(1, scalar(I32))
                with b.for_(zero, iv_src, one, inits=[x]) as loop:
                    inner = list(pool) + loop.args
                    self.body(b, inner, self.draw(st.integers(0, 3)), depth + 1, iv_src)
                    carried = [v for v in inner[len(pool):] if v.type == x.type]
                    b.continue_([carried[-1]])
                pool.append(loop.results[0])


@st.composite
def modules(draw: Any, nice: bool = False, n_entries: int = 2) -> Module:
    m = Module()
    g = _Gen(draw, nice)
    for k in range(n_entries):
        f: Function = add_function(m, f"k{k}", [scalar(I32), scalar(ptr(F32))])
        b = Builder(f)
        pool: list[Value] = []
        if draw(st.booleans()):
            g.memory(b, pool, f.args[1])
        g.body(b, pool, draw(st.integers(1, 12)), 0, f.args[0])
        b.return_()
    return m


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(modules())
def test_random_modules_round_trip(m: Module) -> None:
    assert problems(m) == []
    for v in SUPPORTED_VERSIONS:
        data = write_bytecode(m, v)
        assert write_bytecode(m, v) == data
        m2 = read_bytecode(data)
        assert differences(m, m2) == []
        assert write_bytecode(m2, v) == data
    assert print_module(m2) == print_module(m)  # the text of what was read back is the same


@settings(max_examples=1, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(modules(nice=True, n_entries=1), min_size=20, max_size=20))
def test_random_modules_agree_with_tools(toolchain, tmp_path_factory: Any, ms: list[Module]) -> None:  # type: ignore[no-untyped-def]
    big = Module()
    for i, m in enumerate(ms):
        f = m.functions[0]
        f.name = f"k{i}"
        big.functions.append(f)
    path: Path = tmp_path_factory.mktemp("rand") / "random.tileirbc"
    path.write_bytes(write_bytecode(big, V13_3))
    res = toolchain.disasm(path)
    assert res.returncode == 0, res.stderr
    assert res.stdout == print_module(big)
    for arch in ("sm_80", "sm_90", "sm_100"):
        comp = toolchain.compile(path, arch)
        assert comp.returncode == 0, f"{arch}: {comp.stderr}"
