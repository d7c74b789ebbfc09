"""The builder: every op from the table, inference of result types, insertion points,
locations, and region helpers."""

from __future__ import annotations

import pytest

from cutile_ir import (
    F32, I1, I32, TOKEN, Builder, DenseElements, Location, Module, RoundingMode, get_op, print_module,
    ptr, scalar, tile, verify,
)


def test_op_lookup_by_name_and_alias() -> None:
    assert get_op("cuda_tile.addf").opcode == 2 and get_op("pow").name == "fpowf"


def test_result_types_are_inferred() -> None:
    m = Module()
    b = Builder(m.add_entry("k", [scalar(ptr(F32))]))
    x = b.constant(1.0, tile((4, 8), F32))
    assert b.addf(x, x, rounding_mode=RoundingMode.ZERO).type == tile((4, 8), F32)
    assert b.cmpf(x, x, comparison_predicate="equal", comparison_ordering="ordered").type == tile((4, 8), I1)
    assert b.make_token().type == TOKEN
    bx, by, bz = b.get_tile_block_id()
    assert bx.type == scalar(I32)
    b.return_()
    verify(m)


def test_insert_before_and_locations() -> None:
    m = Module()
    b = Builder(m.add_entry("k", []))
    t1 = b.make_token()
    t2 = b.make_token()
    ret = b.return_()
    with b.before(ret), b.location(Location("k.py", 4, 2)):
        j = b.join_tokens([t1, t2])
    assert [op.name for op in m.functions[0].body.ops] == ["make_token", "make_token", "join_tokens", "return"]
    assert j.owner.loc == Location("k.py", 4, 2)
    verify(m)
    assert "join_tokens %0, %1 : token" in print_module(m)


def test_globals_and_region_helpers() -> None:
    m = Module()
    m.add_global("lut", DenseElements.from_values(tile(4, I32), [1, 2, 3, 4]), alignment=16)
    b = Builder(m.add_entry("k", [scalar(I32)]))
    n = m.functions[0].args[0]
    p = b.get_global(name="lut", result_types=[scalar(ptr(I32))])
    zero, one = b.constant(0, scalar(I32)), b.constant(1, scalar(I32))
    with b.for_(zero, n, one, inits=[zero]) as loop:
        iv, acc = loop.args
        b.continue_([b.addi(acc, iv)])
    with b.if_(b.cmpi(loop.results[0], n, comparison_predicate="equal", signedness="signed"), [scalar(I32)]) as br:
        with br.then():
            b.yield_([one])
        with br.else_():
            b.yield_([zero])
    b.return_()
    verify(m)
    assert p.type == scalar(ptr(I32)) and br.results[0].type == scalar(I32)


def test_variadic_groups_take_lists_and_keywords() -> None:
    m = Module()
    b = Builder(m.add_entry("k", []))
    t = b.make_token()
    assert b.join_tokens(tokens=[t, t]).type == TOKEN
    with pytest.raises(Exception, match="operand 'tokens' given twice"):
        b.join_tokens([t], tokens=[t])
