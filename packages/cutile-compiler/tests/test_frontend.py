"""The kernel IR the front end builds: static loops with break and continue
(alone and inside run-time loops; a compile-time ``assert`` in each kernel checks
what the unrolling did), and builtins that must not leave dead ops."""

from __future__ import annotations

from typing import Any

import pytest

from cutile_compiler import _dtypes as dt
from cutile_compiler._errors import TileSyntaxError
from cutile_compiler._frontend import build_kernel_ir
from cutile_compiler._ir import KernelIR
from cutile_compiler._signature import TensorSpec, parse_signature, specialize
from cutile_compiler.language import Mut, Tensor, f16, f32, i32, load_tile_like, static_range, where, zeros

Z = TensorSpec(dt.i32, (256,), (64,))


def build(function: Any, **arguments: Any) -> KernelIR:
    signature = parse_signature(function)
    return build_kernel_ir(function, signature, specialize(signature, function.__name__, arguments))


def static_break_and_continue(z: Mut[Tensor[i32, ["B"]]]):
    total = 0
    for j in static_range(6):
        if j == 1:
            continue
        if j == 4:
            break
        total += j
    assert total == 0 + 2 + 3
    z.store(zeros((64,), i32) + total)


def static_break_in_a_loop_with_break(z: Mut[Tensor[i32, ["B"]]], n: i32):
    acc = zeros((64,), i32)
    for i in range(n):
        count = 0
        for j in static_range(4):
            if j == 2:
                break  # ends the static loop only, not the run-time one
            count += 1
            acc = acc + 1
        assert count == 2
        if i >= 5:
            break
        acc = acc + 100
    z.store(acc)


def static_break_under_a_runtime_if(z: Mut[Tensor[i32, ["B"]]], n: i32):
    for j in static_range(4):
        if n > j:
            break
    z.store(zeros((64,), i32))


def retried_inner_loop_then_outer_break(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]], n: i32):
    total = load_tile_like(x, z) * 0.0
    i = 0
    while i < n:
        acc = 0.0  # a constant the inner loop makes a tile: that loop is built again
        for j in range(n):
            if j >= 4:
                break
            acc = acc + load_tile_like(x, z)
        total = total + acc
        if i >= 2:
            break  # the while loop's own break, after the inner loop was rebuilt
        i = i + 1
    z.store(total)


def test_a_loop_built_again_leaves_no_stale_loop_behind() -> None:
    # The abandoned first attempt at the inner loop left its loop context on the
    # stack, so the outer break passed the inner loop's values ('acc').
    kernel = build(retried_inner_loop_then_outer_break, z=TensorSpec(dt.f32, (256,), (64,)),
                   x=TensorSpec(dt.f32, (-1,)), n=dt.i32)
    ops = list(kernel.walk())
    assert [op.name for op in ops].count("loop") == 2
    # The outer break passes the while loop's own carried values (i, total), and the
    # abandoned first attempt left no ops behind (every constant is used).
    outer_breaks = [op for op in ops if op.name == "break" and len(op.operands) == 2]
    assert outer_breaks and all(str(v.type) in ("i32", "tile<64xf32>") for v in outer_breaks[0].operands)
    used = {id(v) for op in ops for v in op.operands}
    assert not [op for op in ops if op.name == "constant" and id(op.result) not in used]


def test_break_and_continue_in_a_static_loop() -> None:
    kernel = build(static_break_and_continue, z=Z)
    assert not [op for op in kernel.walk() if op.name in ("loop", "for", "break", "continue")]


def test_break_in_a_static_loop_leaves_only_the_static_loop() -> None:
    kernel = build(static_break_in_a_loop_with_break, z=Z, n=dt.i32)
    (loop,) = [op for op in kernel.walk() if op.name == "loop"]
    body = [op.name for op in loop.regions[0].ops]
    assert "break" not in body  # the loop's own breaks sit inside ifs
    assert body[-1] == "continue"
    assert [op.name for op in loop.regions[0].walk()].count("break") == 2  # the range's end and `i >= 5`


def test_break_in_a_static_loop_under_a_runtime_if_is_refused() -> None:
    with pytest.raises(TileSyntaxError, match="'break' in a static loop must be decided at compile time") as info:
        build(static_break_under_a_runtime_if, z=Z, n=dt.i32)
    assert info.value.location is not None
    assert info.value.location.line == static_break_under_a_runtime_if.__code__.co_firstlineno + 3


def where_broadcast(z: Mut[Tensor[f16, ["BM", "BN"]]], x: Tensor[f16, [-1, -1]], y: Tensor[f32, [-1]]):
    a = load_tile_like(x, z)
    z.store(where(y.load(index=(0,), shape=(64,)) > 0, a, 0.0))


def test_where_builds_only_the_ops_it_uses() -> None:
    kernel = build(where_broadcast, z=TensorSpec(dt.f16, (64, 64), (64, 64)), x=TensorSpec(dt.f16, (64, 64)),
                   y=TensorSpec(dt.f32, (64,)))
    names = [op.name for op in kernel.walk()]
    assert "cast" not in names
    (select,) = [op for op in kernel.walk() if op.name == "select"]
    assert [v.type.shape for v in select.operands] == [(64, 64)] * 3  # type: ignore[attr-defined]
