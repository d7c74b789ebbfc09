"""Negative tests of the builder's type checks and of the verifier: each asserts its message."""

from __future__ import annotations

import pytest

from cutile_ir import (
    F32, I1, I32, TOKEN, Builder, IRError, IRTypeError, Location, Module, VerificationError, add_function,
    make_op, problems, ptr, scalar, tile, verify,
)

LOC = Location("/home/u/kern.py", 7, 9)


def _kernel(args=()):  # type: ignore[no-untyped-def]
    m = Module()
    f = add_function(m, "k", list(args))
    return m, f, Builder(f)


def test_builder_rejects_wrong_operand_type() -> None:
    _, _, b = _kernel()
    x = b.constant(1.0, tile(16, F32))
    y = b.constant(1, tile(16, I32))
    with pytest.raises(IRTypeError, match=r"'addf': operand 'rhs' must be a tile of f16, bf16, f32 or f64, "
                                          r"found tile<16xi32>"):
        b.addf(x, y, rounding_mode="nearest_even")


def test_builder_rejects_mismatched_shapes_with_location() -> None:
    _, _, b = _kernel()
    x = b.constant(1.0, tile(16, F32))
    y = b.constant(1.0, tile(8, F32))
    with pytest.raises(IRTypeError, match=r"^/home/u/kern.py:7:9: 'subf': types must match: lhs is tile<16xf32>, "
                                          r"rhs is tile<8xf32>"):
        b.subf(x, y, rounding_mode="zero", loc=LOC)


def test_builder_errors_are_helpful() -> None:
    _, _, b = _kernel()
    x = b.constant(1.0, tile(16, F32))
    with pytest.raises(IRError, match="unknown Tile IR op 'addff'; did you mean addf"):
        b.addff(x, x)
    with pytest.raises(IRTypeError, match="'addf': missing attribute 'rounding_mode'"):
        b.addf(x, x)
    with pytest.raises(IRTypeError, match=r"expects a RoundingMode \(nearest_even, zero, .*\), found 'nearest'"):
        b.addf(x, x, rounding_mode="nearest")
    with pytest.raises(IRTypeError, match="unknown argument.s. fast; known: lhs, rhs, rounding_mode"):
        b.addf(x, x, rounding_mode="zero", fast=True)
    with pytest.raises(IRTypeError, match="'for': needs result_types="):
        make_op("for", [x, x, x, []])
    with pytest.raises(IRTypeError, match="'load_view_tko': missing operand 'view'"):
        b.load_view_tko(memory_ordering_semantics="weak")


@pytest.mark.parametrize(
    "build, message",
    [
        ("permute", r"'permute': permutation \[0, 0\] is not a permutation of 0..1"),
        ("reshape", r"'reshape': element counts differ"),
        ("broadcast", r"'broadcast': cannot broadcast tile<2x4xf32> to tile<8x8xf32>"),
        ("extract", r"'extract': expects 2 indices for tile<2x4xf32>, found 1"),
        ("mmaf", r"'mmaf': shapes do not form \(MxK\)·\(KxN\)\+\(MxN\)"),
        ("exti", r"'exti': result element i32 must be wider than operand element i32"),
    ],
)
def test_shape_rules(build: str, message: str) -> None:
    _, _, b = _kernel()
    x = b.constant(1.0, tile((2, 4), F32))
    i = b.constant(0, scalar(I32))
    with pytest.raises(IRTypeError, match=message):
        if build == "permute":
            b.permute(x, permutation=[0, 0], result_types=[tile((2, 4), F32)])
        elif build == "reshape":
            b.reshape(x, result_types=[tile((4, 4), F32)])
        elif build == "broadcast":
            b.broadcast(x, result_types=[tile((8, 8), F32)])
        elif build == "extract":
            b.extract(x, [i], result_types=[tile((2, 2), F32)])
        elif build == "mmaf":
            b.mmaf(x, x, b.constant(0.0, tile((2, 4), F32)))
        elif build == "exti":
            b.exti(b.constant(1, tile(4, I32)), signedness="signed", result_types=[tile(4, I32)])


def test_dominance_value_escaping_a_region() -> None:
    m, f, b = _kernel([scalar(I32)])
    zero = b.constant(0, scalar(I32))
    with b.for_(zero, f.args[0], b.constant(1, scalar(I32))):
        inner = b.constant(2.0, tile(4, F32), loc=LOC)
        b.continue_()
    b.negf(inner, loc=Location("/home/u/kern.py", 9, 3))
    b.return_()
    with pytest.raises(VerificationError, match=r"kern.py:9:3: 'negf': operand 0 does not dominate this use"):
        verify(m)


def test_dominance_use_before_definition() -> None:
    m, f, b = _kernel()
    x = b.constant(1.0, tile(4, F32))
    y = b.negf(x)
    b.return_()
    f.body.ops[0], f.body.ops[1] = f.body.ops[1], f.body.ops[0]
    assert y.owner is f.body.ops[0]
    with pytest.raises(VerificationError, match="'negf': operand 0 does not dominate this use"):
        verify(m)


def test_terminators() -> None:
    m, f, b = _kernel([scalar(I32)])
    b.constant(1.0, tile(4, F32))
    with pytest.raises(VerificationError, match="function @k: body must end with 'return'"):
        verify(m)
    one = b.constant(1, scalar(I32))
    with b.for_(one, f.args[0], one):
        b.yield_()
    b.return_()
    msgs = problems(m)
    assert any("'yield': may not terminate the body of 'for'" in p for p in msgs), msgs


def test_terminator_in_the_middle_and_loop_types() -> None:
    m, f, b = _kernel()
    z = b.constant(0, scalar(I32))
    with b.loop([z], [scalar(I32)]):
        b.continue_([b.constant(1.0, scalar(F32))])
    b.return_()
    b.return_()
    msgs = problems(m)
    assert any("'return': a terminator must be the last op of its block" in p for p in msgs), msgs
    assert any("continue carries ['tile<f32>'], the loop carries ['tile<i32>']" in p for p in msgs), msgs


def test_entry_signature_rules() -> None:
    m = Module()
    from cutile_ir import TensorViewType

    f = add_function(m, "k", [tile(16, F32), scalar(ptr(F32)), TensorViewType(F32, (4,), (1,))],
                     result_types=[scalar(I32)])
    Builder(f).return_()
    msgs = problems(m)
    assert any("entry parameter 0 must be a rank-0 tile (scalar or pointer), found tile<16xf32>" in p for p in msgs)
    assert any("entry parameter 2 must be a rank-0 tile (scalar or pointer), found tensor_view" in p for p in msgs)
    assert any("kernel entries return nothing" in p for p in msgs)


def test_tile_dimensions_must_be_powers_of_two() -> None:
    m, f, b = _kernel()
    b.constant(1.0, tile((4, 3), F32), loc=LOC)
    b.return_()
    with pytest.raises(VerificationError, match=r"kern.py:7:9: 'constant': tile dimensions must be powers of two, "
                                                r"found tile<4x3xf32>"):
        verify(m)


def test_unknown_global_and_region_block_args() -> None:
    m, f, b = _kernel()
    b.get_global(name="nowhere", result_types=[scalar(ptr(F32))])
    c = b.constant(True, scalar(I1))
    with b.if_(c) as br:
        with br.then():
            b.yield_()
    br.op.regions[0].blocks[0].add_arg(scalar(I32))
    b.return_()
    msgs = problems(m)
    assert any("refers to unknown global @nowhere" in p for p in msgs), msgs
    assert any("'if': region 0 block arguments must be [], found ['tile<i32>']" in p for p in msgs), msgs


def test_valid_catalog_verifies() -> None:
    from cutile_ir import SUPPORTED_VERSIONS
    from cutile_ir._catalog import every_op_module

    for v in SUPPORTED_VERSIONS:
        assert problems(every_op_module(v)) == []


def test_pointer_access_rules() -> None:
    m, f, b = _kernel([scalar(ptr(F32))])
    ptrs = b.broadcast(b.reshape(f.args[0], result_types=[tile(1, ptr(F32))]), result_types=[tile(16, ptr(F32))])
    with pytest.raises(IRTypeError, match=r"'load_ptr_tko': 'result' must be tile<16xf32> for pointers "
                                          r"tile<16xptr<f32>>, found tile<8xf32>"):
        b.load_ptr_tko(ptrs, memory_ordering_semantics="weak", result_types=[tile(8, F32), TOKEN])
    with pytest.raises(IRTypeError, match=r"'store_ptr_tko': 'mask' must have shape \[16\], found tile<4xi1>"):
        b.store_ptr_tko(ptrs, b.constant(1.0, tile(16, F32)), b.constant(True, tile(4, I1)),
                        memory_ordering_semantics="weak")
    with pytest.raises(IRTypeError, match=r"'atomic_rmw_tko': 'add' works only with integers i32 and i64"):
        b.atomic_rmw_tko(ptrs, b.constant(1.0, tile(16, F32)), memory_ordering_semantics="relaxed",
                         memory_scope="device", mode="add")



def test_atomic_element_types_by_mode() -> None:
    """Each atomic takes the element types its record lists for its mode (tileiras's rule):
    exchange and compare-and-swap take 32/64-bit words, float add f16/bf16/f32/f64, a view
    reduction no exchange."""
    from cutile_ir import BF16, F16, F64, I64, TF32, PartitionViewType, TensorViewType, accepted_element_types

    def pointers(element):  # type: ignore[no-untyped-def]
        m, f, b = _kernel([scalar(ptr(element))])
        one = b.reshape(f.args[0], result_types=[tile(1, ptr(element))])
        return b, b.broadcast(one, result_types=[tile(16, ptr(element))])

    order = {"memory_ordering_semantics": "relaxed", "memory_scope": "device"}
    b, p = pointers(F32)
    b.atomic_rmw_tko(p, b.constant(1.0, tile(16, F32)), mode="xchg", **order)
    b.atomic_cas_tko(p, b.constant(1.0, tile(16, F32)), b.constant(2.0, tile(16, F32)), **order)
    b, p = pointers(F16)
    with pytest.raises(IRTypeError, match=r"'atomic_rmw_tko': 'xchg' works only with i32, i64, f32 and f64, "
                                          r"found tile<16xf16>"):
        b.atomic_rmw_tko(p, b.constant(1.0, tile(16, F16)), mode="xchg", **order)
    with pytest.raises(IRTypeError, match=r"'atomic_cas_tko': 'val' works only with i32, i64, f32 and f64"):
        b.atomic_cas_tko(p, b.constant(1.0, tile(16, F16)), b.constant(2.0, tile(16, F16)), **order)
    b, p = pointers(TF32)
    with pytest.raises(IRTypeError, match=r"'addf' works only with floats f16, bf16, f32 and f64, found tile<16xtf32>"):
        b.atomic_rmw_tko(p, b.constant(1.0, tile(16, TF32)), mode="addf", **order)
    assert accepted_element_types("atomic_rmw_tko", "addf") == {F16, BF16, F32, F64}
    assert accepted_element_types("atomic_rmw_tko", "umax") == {I32, I64}
    assert accepted_element_types("atomic_red_view_tko", "xchg") == frozenset()
    m, f, b = _kernel([scalar(ptr(BF16))])
    one = b.reshape(f.args[0], result_types=[tile(1, ptr(BF16))])
    p = b.broadcast(one, result_types=[tile(16, ptr(BF16))])
    b.atomic_rmw_tko(p, b.constant(1.0, tile(16, BF16)), mode="addf", **order)
    b.return_()
    assert problems(m, "sm_90") == []
    assert [x for x in problems(m, "sm_80") if "needs sm_" in x] == [
        "'atomic_rmw_tko': 'addf' on bf16 needs sm_90 or newer, target is sm_80"]

    m, f, b = _kernel([scalar(ptr(I64))])
    tv = TensorViewType(I64, (64,), (1,))
    view = b.make_partition_view(b.make_tensor_view(f.args[0], result_types=[tv]),
                                 result_types=[PartitionViewType((16,), tv)])
    with pytest.raises(IRTypeError, match=r"'atomic_red_view_tko': takes no 'xchg'"):
        b.atomic_red_view_tko(view, [b.constant(0, scalar(I32))], b.constant(1, tile(16, I64)), mode="xchg", **order)

def test_view_type_rules() -> None:
    from cutile_ir import PartitionViewType, TensorViewType

    m, f, b = _kernel([scalar(ptr(F32))])
    tv = TensorViewType(F32, (64, 64), (64, 1))
    view = b.make_tensor_view(f.args[0], result_types=[tv])
    b.make_partition_view(view, result_types=[PartitionViewType((16, 16), tv, (0, 0))])
    b.make_partition_view(view, result_types=[PartitionViewType((16,), tv)])
    with pytest.raises(IRTypeError, match=r"'get_tensor_shape': tensor_view<64x64xf32, strides=\[64,1\]> has rank 2, "
                                          r"found 1 results"):
        b.get_tensor_shape(view, result_types=[scalar(I32)])
    b.return_()
    msgs = problems(m)
    assert any("dim_map [0, 0] is not a permutation of 0..1" in p for p in msgs), msgs
    assert any("tile rank 1 differs from the tensor rank 2" in p for p in msgs), msgs


def test_early_exits_need_an_enclosing_loop() -> None:
    m, f, b = _kernel([scalar(I32)])
    c = b.constant(True, scalar(I1))
    with b.if_(c) as br:
        with br.then():
            b.break_()
    one = b.constant(1, scalar(I32))
    with b.for_(one, f.args[0], one):
        with b.if_(c) as br2:
            with br2.then():
                b.break_()
        b.continue_()
    with b.loop([one], [scalar(I32)]):
        with b.if_(c) as br3:
            with br3.then():
                b.break_([c])
        b.continue_([one])
    b.return_()
    msgs = problems(m)
    assert sum("'break': inside 'if' needs an enclosing 'loop'" in p for p in msgs) == 2, msgs
    assert any("break carries ['tile<i1>'], the enclosing 'loop' expects ['tile<i32>']" in p for p in msgs), msgs


def test_reduce_bodies_are_pure() -> None:
    m, f, b = _kernel()
    x = b.constant(1, tile(8, I32))
    with b.reduce([x], dim=0, identities=[0]) as red:
        e, a = red.args
        b.yield_([b.divi(e, a, signedness="signed")])
    b.return_()
    msgs = problems(m)
    assert any("'divi': only pure ops may appear in the body of 'reduce'" in p for p in msgs), msgs


def test_assume_predicates_fit_their_values() -> None:
    from cutile_ir import Bounded, DivBy, SameElements

    _, _, b = _kernel()
    x = b.constant(1.0, tile(4, F32))
    with pytest.raises(IRTypeError, match=r"'assume': bounded<...> applies to tiles of integers, found tile<4xf32>"):
        b.assume(x, predicate=Bounded(0, 1))
    with pytest.raises(IRTypeError, match="div_by<...> applies to integer or pointer tiles and tensor views"):
        b.assume(x, predicate=DivBy(4))
    with pytest.raises(IRTypeError, match="same_elements<...> needs one value per dimension"):
        b.assume(b.constant(1, tile(4, I32)), predicate=SameElements((2, 2)))
    with pytest.raises(IRTypeError, match="'every' and 'along' go together"):
        DivBy(4, every=2)
