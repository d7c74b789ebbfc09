"""The printer on every module the reader accepts: dense constants of any bytes (i1 packing,
bits above a float's width, splats of huge tiles), regions nested to the limit, and
unverified modules, which raise a VerificationError naming the op instead of crashing."""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import pytest

from cutile_ir import (
    BF16, F16, F32, F4E2M1FN, F64, F8E4M3FN, I1, I16, I32, TF32, V13_3, Builder, BytecodeError, DenseElements,
    FloatAttr, IntegerAttr, IRTypeError, Module, ScalarType, TensorViewType, VerificationError, add_function,
    print_module, problems, ptr, read_bytecode, scalar, tile, write_bytecode,
)
from cutile_ir._attributes import decode_element
from cutile_ir._bytecode_reader import _Cursor
from cutile_ir._ir import MAX_REGION_DEPTH


def _constant_module(t: Any, data: bytes) -> Module:
    m = Module()
    b = Builder(add_function(m, "k", []))
    b.constant(DenseElements(t, data), t)
    b.return_()
    return m


#: (shape, element, stored bytes) -> the constant's line as tileirdisasm 13.4 prints it.
DENSE_CASES: list[tuple[tuple[int, ...], ScalarType, bytes, str]] = [
    # i1: ceil(numel/8) bytes are packed bits; one byte for more than 8 elements is a splat of bit 0
    ((), I1, b"\x01", "%true = constant <i1: true> : tile<i1>"),
    ((), I1, b"\x02", "%false = constant <i1: false> : tile<i1>"),
    ((16,), I1, b"\x01", "%true = constant <i1: true> : tile<16xi1>"),
    ((16,), I1, b"\x02", "%false = constant <i1: false> : tile<16xi1>"),
    ((4,), I1, b"\x0f", "%true = constant <i1: true> : tile<4xi1>"),
    ((4,), I1, b"\xf1", "%cst_i1 = constant <i1: [true, false, false, false]> : tile<4xi1>"),
    ((2, 2), I1, b"\x0e", "%cst_i1 = constant <i1: [[false, true], [true, true]]> : tile<2x2xi1>"),
    ((16,), I1, b"\xff\xff", "%true = constant <i1: true> : tile<16xi1>"),
    ((16,), I1, b"\x01\x00", "%cst_i1 = constant <i1: [true" + ", false" * 15 + "]> : tile<16xi1>"),
    # tf32 (three bytes) and f4 (one byte): bits above the width are ignored
    ((4,), TF32, b"\x00\x00\xff", "%cst_tf32 = constant <tf32: -3.689350e+19> : tile<4xtf32>"),
    ((4,), TF32, b"\x00\xf0\x0f", "%cst_tf32 = constant <tf32: -4.253530e+37> : tile<4xtf32>"),
    ((4,), TF32, b"\xff\xff\xff", "%cst_NaN_tf32 = constant <tf32: 0x7FFFF> : tile<4xtf32>"),
    ((4,), TF32, b"\xff\xff\x07", "%cst_NaN_tf32 = constant <tf32: 0x7FFFF> : tile<4xtf32>"),
    ((4,), F4E2M1FN, b"\xf1", "%cst_f4E2M1FN = constant <f4E2M1FN: 5.000000e-01> : tile<4xf4E2M1FN>"),
    # every element stored, all equal: a splat, named and printed as one
    ((4,), F32, b"\x00\x00\x80\x3f" * 4, "%cst_1_f32 = constant <f32: 1.000000e+00> : tile<4xf32>"),
    ((2,), I16, b"\x01\x00\x01\x00", "%cst_1_i16 = constant <i16: 1> : tile<2xi16>"),
    ((2,), F32, b"\x00\x00\x00\x80\x00\x00\x00\x00", "%cst_f32 = constant <f32: [-0.000000e+00, 0.000000e+00]> : tile<2xf32>"),
    # NaNs in hex with the width's digits
    ((4,), F16, b"\x00\x7e", "%cst_NaN_f16 = constant <f16: 0x7E00> : tile<4xf16>"),
    ((4,), BF16, b"\xc0\x7f", "%cst_NaN_bf16 = constant <bf16: 0x7FC0> : tile<4xbf16>"),
    ((4,), F8E4M3FN, b"\x7f", "%cst_NaN_f8E4M3FN = constant <f8E4M3FN: 0x7F> : tile<4xf8E4M3FN>"),
    ((2,), F64, b"\x00\x00\x00\x00\x00\x00\xf8\x7f" * 2, "%cst_NaN_f64 = constant <f64: 0x7FF8000000000000> : tile<2xf64>"),
]


@pytest.mark.parametrize("shape, el, data, line", DENSE_CASES)
def test_dense_constants_of_any_bytes_print(shape: tuple[int, ...], el: ScalarType, data: bytes, line: str) -> None:
    m = _constant_module(tile(shape, el), data)
    assert problems(m) == []
    m2 = read_bytecode(write_bytecode(m, "13.4"))  # the bytes survive the round trip
    assert m2.functions[0].body.ops[0].attributes["value"].data == data
    assert print_module(m2).splitlines()[1] == "  " + line


def test_dense_constants_agree_with_tileirdisasm(toolchain: Any, tmp_path: Path) -> None:
    m = Module()
    for i, (shape, el, data, _) in enumerate(DENSE_CASES):  # one kernel each, so that names stay unsuffixed
        b = Builder(add_function(m, f"k{i}", []))
        b.constant(DenseElements(tile(shape, el), data), tile(shape, el))
        b.return_()
    path = tmp_path / "dense.tileirbc"
    path.write_bytes(write_bytecode(m, "13.4"))
    res = toolchain.disasm(path)
    assert res.returncode == 0, res.stderr
    assert res.stdout == print_module(m)
    assert [line.strip() for line in res.stdout.splitlines() if "constant" in line] == [c[3] for c in DENSE_CASES]


def test_i1_values_follow_the_packing_rule() -> None:
    rng = random.Random(5)
    for numel in (1, 3, 8, 16, 64):
        bits = [rng.randrange(2) for _ in range(numel)]
        packed = sum(v << i for i, v in enumerate(bits)).to_bytes((numel + 7) // 8, "little")
        d = DenseElements(tile(numel, I1), packed)
        assert d.values() == bits
        assert d.is_splat == (len(set(bits)) == 1)
    assert DenseElements(tile(32, I1), b"\x03").values() == [1] * 32  # one byte, 32 elements: bit 0
    assert DenseElements(tile(32, I1), b"\x02").values() == [0] * 32


def test_element_decoders_take_every_bit_pattern() -> None:
    for t in (F16, BF16, F32, TF32, F64, F8E4M3FN, F4E2M1FN, I1, I16, I32):
        n = t.nbytes
        for data in (b"\xff" * n, b"\x80" * n, b"\x00" * n, bytes(range(1, n + 1))):
            decode_element(data, t)
            if t.is_float:
                assert isinstance(FloatAttr(t, int.from_bytes(data, "little")).value, float)
    assert decode_element(b"\xff\xff\xff", TF32) != decode_element(b"\xff\xff\xff", TF32)  # NaN
    assert decode_element(b"\x00\x00\xff", TF32) == decode_element(b"\x00\x00\x7f", TF32)
    with pytest.raises(IRTypeError, match="a float attribute needs a float type, found i32"):
        FloatAttr(I32, 0)
    with pytest.raises(IRTypeError, match="an integer attribute needs an integer type, found f32"):
        IntegerAttr(F32, 0)


def test_splat_of_a_huge_tile_prints_without_expanding() -> None:
    t = tile((1 << 20, 1 << 20), F32)
    m = _constant_module(t, b"\x00\x00\x80\x3f")
    start = time.perf_counter()
    text = print_module(read_bytecode(write_bytecode(m, V13_3)))
    assert time.perf_counter() - start < 0.5
    assert "%cst_1_f32 = constant <f32: 1.000000e+00> : tile<1048576x1048576xf32>" in text


def _nested_ifs(depth: int) -> Module:
    m = Module()
    f = add_function(m, "k", [scalar(I1)])
    b = Builder(f)
    stack = []
    for _ in range(depth):
        br = b.if_(f.args[0], [])
        stack.append(br)
        i = br.__enter__()
        then = i.then()
        then.__enter__()
        stack.append(then)
    while stack:
        then = stack.pop()
        b.yield_([])
        then.__exit__(None, None, None)
        stack.pop().__exit__(None, None, None)
    b.return_()
    return m


def test_regions_nest_at_most_max_region_depth() -> None:
    ok = _nested_ifs(MAX_REGION_DEPTH)
    assert problems(ok) == []
    assert print_module(read_bytecode(write_bytecode(ok, V13_3))) == print_module(ok)

    deep = _nested_ifs(MAX_REGION_DEPTH + 1)
    assert any(f"regions nested more than {MAX_REGION_DEPTH} deep" in p for p in problems(deep))
    with pytest.raises(VerificationError, match=f"'if': cannot print: regions nested more than {MAX_REGION_DEPTH}"):
        print_module(deep)
    with pytest.raises(BytecodeError, match=f"regions nested more than {MAX_REGION_DEPTH} deep"):
        read_bytecode(write_bytecode(deep, V13_3))
    # far deeper than Python's recursion limit allows a walk: still an IRError, at once
    very_deep = _nested_ifs(600)
    assert problems(very_deep)
    with pytest.raises(VerificationError):
        print_module(very_deep)


def test_counts_beyond_the_bytes_left_are_refused_at_once() -> None:
    huge = bytes([0x80, 0x80, 0x80, 0x80, 0x80, 0x01])  # 2**35 as a varint
    with pytest.raises(BytecodeError, match=r"offset 6: 34359738368 ops declared, only 10 bytes left"):
        _Cursor(huge + bytes(10)).count("ops")
    with pytest.raises(BytecodeError, match="i64 values declared, only 3 bytes left"):
        _Cursor(b"\x01" + bytes(3)).i64_list()


def _kernel() -> tuple[Module, Builder, list[Any]]:
    m = Module()
    f = add_function(m, "k", [scalar(ptr(F32)), scalar(I32)])
    return m, Builder(f), f.args


def test_printing_an_op_of_broken_shape_names_it() -> None:
    m, b, args = _kernel()
    x = b.constant(1.0, tile(4, F32))
    s = b.addf(x, x, rounding_mode="zero")
    b.return_()
    op = s.owner
    op.segments = (2,)  # one group where addf has two
    assert any("operand segments [2] do not fit groups ['lhs', 'rhs']" in p for p in problems(m))
    with pytest.raises(VerificationError, match=r"'addf': cannot print: operand segments \[2\] do not fit"):
        print_module(m)
    op.segments = (1, 1)
    op.attributes["rounding_mode"] = "zero"  # a string where the op holds a RoundingMode
    assert any("attribute 'rounding_mode' must be RoundingMode, found 'zero'" in p for p in problems(m))
    with pytest.raises(VerificationError, match="'addf': cannot print: attribute 'rounding_mode' must be"):
        print_module(m)


def test_printing_unverified_custom_formats_raises_verification_errors() -> None:
    m, b, args = _kernel()
    p, n = args
    view = b.make_tensor_view(p, [n], [], result_types=[TensorViewType(F32, (None,), (1,))])
    b.return_()
    op = view.owner
    op.operands, op.segments = [p], (1, 0, 0)  # the dynamic extent dropped
    assert problems(m)
    with pytest.raises(VerificationError, match="'make_tensor_view': cannot print: the dynamic shape and strides"):
        print_module(m)

    m, b, args = _kernel()
    zero, one = b.constant(0, scalar(I32)), b.constant(1, scalar(I32))
    with b.for_(zero, args[1], one, inits=[zero]) as loop:
        b.continue_([loop.args[1]])
    b.return_()
    loop.op.regions[0].blocks[0].args.clear()
    assert problems(m)
    with pytest.raises(VerificationError, match="'for': cannot print: the body must take the induction variable"):
        print_module(m)

    m, b, args = _kernel()
    with b.loop([args[1]]) as lp:
        b.break_([lp.args[0]])
    b.return_()
    lp.op.regions[0].blocks.clear()  # no body, but iter values
    assert problems(m)
    with pytest.raises(VerificationError, match="'loop': cannot print: the body must take the 1 iter values"):
        print_module(m)


def test_reduce_identities_must_be_numbers() -> None:
    m, b, args = _kernel()
    x = b.constant(1.0, tile(4, F32))
    with b.reduce([x], dim=0, identities=[0.0]) as red:
        e, a = red.args
        b.yield_([b.addf(e, a, rounding_mode="nearest_even")])
    b.return_()
    red.op.attributes["identities"] = type(red.op.attributes["identities"])((DenseElements.splat(tile(1, F32), 0.0),))
    assert any("identity 0 must be an integer or float attribute" in p for p in problems(m))


def test_a_cycle_of_call_site_records_is_refused() -> None:
    from cutile_ir import _encoding as E
    from cutile_ir._bytecode_reader import _Reader

    r = _Reader(write_bytecode(_constant_module(tile(4, F32), b"\x00\x00\x80\x3f"), V13_3))
    r.debug_records = [bytes([E.D_CALLSITE, 2]), bytes([E.D_CALLSITE, 1])]  # 1 -> 2 -> 1 -> ...
    with pytest.raises(BytecodeError, match="call-site records form a cycle"):
        r.di_loc(1)


def test_a_dictionary_with_a_repeated_key_prints() -> None:
    from cutile_ir import DictAttr, OptimizationHints, StringAttr
    from cutile_ir._printer import attr_text

    hints = OptimizationHints((("sm_90", DictAttr((("latency", IntegerAttr(I32, 2)), ("latency", StringAttr("x"))))),))
    assert attr_text(hints) == '<sm_90 = {latency = 2, latency = "x"}>'  # sorted by key alone
