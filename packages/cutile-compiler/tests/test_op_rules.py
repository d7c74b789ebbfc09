"""Rules each op states once, in its definition: the kinds of operands it takes (pow
and div need floats, whether written as an operator or a DSL function) and the float
options (rounding=, flush_to_zero=) it accepts, which the DSL functions, the typing
rule and the lowering all read from the op."""

from __future__ import annotations

from typing import Any

import cutile_ir as ir
import pytest

from cutile_compiler import _dtypes as dt
from cutile_compiler import language
from cutile_compiler._builtins import Builtin
from cutile_compiler._errors import TileTypeError
from cutile_compiler._frontend import build_kernel_ir
from cutile_compiler._lowering import lower_kernel
from cutile_compiler._opdefs import OPS
from cutile_compiler._opdefs.elementwise import Elementwise, ElementwiseOp
from cutile_compiler._signature import TensorSpec, parse_signature, specialize
from cutile_compiler.language import Mut, Tensor, f32, i32, load_tile_like

I = TensorSpec(dt.i32, (256,), (64,))
F = TensorSpec(dt.f32, (256,), (64,))
IX = TensorSpec(dt.i32, (256,))
FX = TensorSpec(dt.f32, (256,))


def build(function: Any, unsafe: bool = False, **specs: TensorSpec) -> Any:
    signature = parse_signature(function)
    return build_kernel_ir(function, signature, specialize(signature, function.__name__, specs), unsafe=unsafe)


def power_operator(z: Mut[Tensor[i32, ["B"]]], x: Tensor[i32, [-1]]):
    t = load_tile_like(x, z)
    z.store(t ** t)


def power_function(z: Mut[Tensor[i32, ["B"]]], x: Tensor[i32, [-1]]):
    t = load_tile_like(x, z)
    z.store(language.pow(t, t))


def test_both_spellings_of_pow_give_the_ops_one_located_error() -> None:
    errors = []
    for kernel in (power_operator, power_function):
        with pytest.raises(TileTypeError) as info:
            build(kernel, z=I, x=IX)
        errors.append(info.value)
    operator_error, function_error = errors
    assert operator_error.message == function_error.message == \
        "pow ('**') needs floating-point operands, got i32; convert with .astype(f32)"
    for error, kernel in zip(errors, (power_operator, power_function)):
        assert error.location is not None and error.location.function == kernel.__name__
        assert "z.store(" in str(error).splitlines()[1]  # the line of the call, with a caret under it


def test_pow_of_floats_still_builds() -> None:
    def float_power(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
        t = load_tile_like(x, z)
        z.store(language.pow(t, 2.0) + t ** 0.5)

    assert [op.name for op in build(float_power, z=F, x=FX).body.ops].count("pow") == 2


def _elementwise_functions() -> list[tuple[str, Elementwise]]:
    """The DSL functions that are one element-wise op, with that op."""
    ops = {key.definition.name: key.definition for key in ElementwiseOp if isinstance(key.definition, Elementwise)}
    found = []
    for name in language.__all__:
        value = getattr(language, name)
        if isinstance(value, Builtin) and value.__name__ in ops and value.__name__ != "pow":
            found.append((value.__name__, ops[value.__name__]))
    return found


def test_the_elementwise_functions_are_found() -> None:
    names = {name for name, _ in _elementwise_functions()}
    assert {"add", "div", "sqrt", "exp", "exp2", "minimum", "atan2"} <= names


FUNCTION: Any = None  # the DSL function the kernels below call, set by the test


def unary_rounding(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    t = load_tile_like(x, z)
    z.store(FUNCTION(t, rounding="zero"))


def unary_ftz(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    t = load_tile_like(x, z)
    z.store(FUNCTION(t, flush_to_zero=True))


def binary_rounding(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    t = load_tile_like(x, z)
    z.store(FUNCTION(t, t, rounding="zero"))


def binary_ftz(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    t = load_tile_like(x, z)
    z.store(FUNCTION(t, t, flush_to_zero=True))


def ternary_rounding(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    t = load_tile_like(x, z)
    z.store(FUNCTION(t, t, t, rounding="zero"))


def ternary_ftz(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    t = load_tile_like(x, z)
    z.store(FUNCTION(t, t, t, flush_to_zero=True))


KERNELS = {1: (unary_rounding, unary_ftz), 2: (binary_rounding, binary_ftz), 3: (ternary_rounding, ternary_ftz)}


@pytest.mark.parametrize("name, opdef", _elementwise_functions(), ids=[n for n, _ in _elementwise_functions()])
def test_each_function_takes_the_float_options_its_op_declares(name: str, opdef: Elementwise,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(globals(), "FUNCTION", getattr(language, name))

    def refusal(kernel: Any) -> str | None:
        try:
            build(kernel, z=F, x=FX)
        except TileTypeError as exc:
            return exc.message
        return None

    with_rounding, with_ftz = KERNELS[opdef.arity]
    spelled = opdef.spelled
    assert refusal(with_rounding) == (None if opdef.rounding_modes else
                                      f"{spelled} takes no rounding mode, got rounding='zero'")
    assert refusal(with_ftz) == (None if opdef.flush_to_zero else f"{spelled} takes no flush_to_zero")
    doc = getattr(language, name).__doc__
    assert ("``rounding``" in doc) == bool(opdef.rounding_modes)
    assert all(mode in doc for mode in opdef.rounding_modes)
    assert ("flush_to_zero" in doc) == opdef.flush_to_zero


def test_ops_declare_their_options() -> None:
    takes_rounding = {op.name for op in OPS.values() if op.rounding_modes}
    takes_ftz = {op.name for op in OPS.values() if op.flush_to_zero}
    assert takes_rounding == {"add", "sub", "mul", "div", "fma", "sqrt", "cast"}
    assert takes_ftz == {"add", "sub", "mul", "div", "fma", "sqrt", "rsqrt", "exp2", "minimum", "maximum"}
    assert OPS[ElementwiseOp.CAST].rounding_modes == ("nearest_even", "zero")


def rounded(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    t = load_tile_like(x, z)
    z.store(language.add(t, t, rounding="zero", flush_to_zero=True) * t + language.exp2(t, flush_to_zero=True))


def test_the_lowering_reads_the_options_from_the_op() -> None:
    text = ir.print_module(lower_kernel(build(rounded, z=F, x=FX), "13.3", "sm_90"))
    lines = text.splitlines()
    add = next(line for line in lines if " addf " in line)
    mul = next(line for line in lines if " mulf " in line)
    exp2 = next(line for line in lines if " exp2 " in line)
    assert "rounding<zero>" in add and "flush_to_zero" in add
    assert "flush_to_zero" not in mul  # a rounded op without options: nearest_even, the default
    assert "flush_to_zero" in exp2 and "rounding" not in exp2


# -- rules of memory, stated once ---------------------------------------------------------
def view_by_partition(z: Mut[Tensor[f32, ["B"]]]):
    z.store(z.partition((64,)).load((0,)))


def view_by_load(z: Mut[Tensor[f32, ["B"]]]):
    z.store(language.load(z, (0,), (64,)))


def test_both_views_of_a_mut_tensor_get_one_refusal() -> None:
    messages = set()
    for kernel in (view_by_partition, view_by_load):
        with pytest.raises(TileTypeError) as info:
            build(kernel, z=F)
        messages.add(info.value.message)
    assert len(messages) == 1 and "a Mut tensor is already partitioned among the blocks" in messages.pop()


def store_read_only(z: Mut[Tensor[i32, ["B"]]], x: Tensor[i32, [-1]]):
    x.store(load_tile_like(x, z))


def own_atomic_read_only(z: Mut[Tensor[i32, ["B"]]], x: Tensor[i32, [-1]]):
    x.atomic_add(1)


def tile_atomic_read_only(z: Mut[Tensor[i32, ["B"]]], x: Tensor[i32, [-1]]):
    x.partition((64,)).atomic_add(0, 1)


def scatter_read_only(z: Mut[Tensor[i32, ["B"]]], x: Tensor[i32, [-1]]):
    language.scatter(x, language.arange(64), 1)


def test_every_write_of_a_read_only_tensor_gets_the_ops_rule() -> None:
    messages = []
    for kernel in (store_read_only, own_atomic_read_only, tile_atomic_read_only, scatter_read_only):
        with pytest.raises(TileTypeError) as info:
            build(kernel, unsafe=True, z=I, x=IX)
        messages.append(info.value.message.split(": ", 1))
    assert all(len(parts) == 2 for parts in messages), messages
    assert {text for _, text in messages} == {"the tensor is not declared Mut[...], so the kernel may not write it"}
    assert [name for name, _ in messages] == ["store", "atomic_add", "atomic_add", "scatter"]


def test_partition_rank_and_padding_are_the_ops_rules() -> None:
    def wrong_rank(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
        z.store(x.partition((8, 8)).load((0, 0)).reshape((64,)))

    def wrong_padding(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
        z.store(x.partition((64,), padding=0).load((0,)))

    with pytest.raises(TileTypeError) as info:
        build(wrong_rank, z=F, x=FX)
    assert info.value.message == "partition: a rank-1 tensor is partitioned with 1 tile dims, got [8, 8]"
    with pytest.raises(TileTypeError) as info:
        build(wrong_padding, z=F, x=FX)
    assert info.value.message == "partition: padding must be one of zero, neg_zero, nan, pos_inf, neg_inf, got 0"


def load_two_coordinates(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    z.store(x.partition((64,)).load((0, 1)))


def store_two_coordinates(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    z.partition((64,)).store((0, 1), load_tile_like(x, z))


def extract_two_coordinates(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    z.store(language.extract(load_tile_like(x, z), (0, 1), (32,)).reshape((32,)).cat(load_tile_like(x, z).extract((1,), (32,)), 0))


def load_float_coordinate(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    z.store(x.partition((64,)).load((1.5,)))


def atomic_scope(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    z.partition((64,)).atomic_add(0, load_tile_like(x, z), scope="sys")


@pytest.mark.parametrize("kernel, message", [
    (load_two_coordinates, "load: the index needs 1 coordinate(s), got 2"),
    (store_two_coordinates, "store: the index needs 1 coordinate(s), got 2"),
    (extract_two_coordinates, "extract: the index needs 1 coordinate(s), got 2"),
    (load_float_coordinate, "load: index coordinate 0 must be an integer scalar, got f32"),
    (atomic_scope, "atomic_add: a tile reduction's scope is 'tl_blk' or 'device', got 'sys'"),
], ids=lambda v: getattr(v, "__name__", ""))
def test_a_tile_index_is_the_ops_rule_naming_the_op(kernel: Any, message: str) -> None:
    with pytest.raises(TileTypeError) as info:
        build(kernel, unsafe=True, z=F, x=FX)
    assert info.value.message == message


def sum_of_scalar(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    z.store(load_tile_like(x, z) + language.sum(load_tile_like(x, z).sum()))


def cumsum_of_scalar(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    z.store(load_tile_like(x, z) + language.cumsum(load_tile_like(x, z).sum()))


def reduce_fn_of_scalar(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    z.store(load_tile_like(x, z) + language.reduce(load_tile_like(x, z).sum(), 0, lambda a, b: a + b, 0.0))


def where_of_floats(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    t = load_tile_like(x, z)
    z.store(language.where(t, t, 0.0))


@pytest.mark.parametrize("kernel, message", [
    (sum_of_scalar, "sum needs a tile of rank 1 or more, got a scalar"),
    (cumsum_of_scalar, "cumsum needs a tile of rank 1 or more, got a scalar"),
    (reduce_fn_of_scalar, "reduce needs a tile of rank 1 or more, got a scalar"),
    (where_of_floats, "where's condition must be a bool tile (a comparison), got tile<64xf32>"),
], ids=lambda v: getattr(v, "__name__", ""))
def test_reductions_of_scalars_and_where_conditions_have_one_rule(kernel: Any, message: str) -> None:
    with pytest.raises(TileTypeError) as info:
        build(kernel, z=F, x=FX)
    assert info.value.message == message
