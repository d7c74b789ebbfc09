"""Which dtypes each atomic takes is written once, in cutile_ir's op table: the compiler's
typing rule and the IR verifier agree on every (mode, dtype), and a kernel using an
atomic on a refused dtype gets the compiler's located TileTypeError."""

import inspect
from typing import Any

import pytest

import cutile_ir as ir
from cutile_compiler import _dtypes as dt
from cutile_compiler._errors import TileTypeError
from cutile_compiler._frontend import build_kernel_ir
from cutile_compiler._lowering import element_type
from cutile_compiler._opdefs._base import RuleError
from cutile_compiler._opdefs.memory import TILE_ATOMIC_MODES
from cutile_compiler._opdefs.pointer import RMW_MODES, check_atomic_dtype, tile_ir_atomic_mode
from cutile_compiler._signature import TensorSpec, parse_signature, specialize
from cutile_compiler.language import Mut, Tensor, arange, atomic_cas, atomic_xchg, f16, i16, zeros

ORDER = {"memory_ordering_semantics": "relaxed", "memory_scope": "device"}


def _compiler_accepts(mode: str, dtype: dt.DType) -> bool:
    try:
        check_atomic_dtype(mode, dtype)
    except RuleError:
        return False
    return True


def _verifier_accepts(mode: str, dtype: dt.DType, view: bool = False) -> bool:
    """Whether the IR builder (which runs the verifier's op check) takes the Tile IR atomic
    that ``mode`` on ``dtype`` lowers to."""
    el = element_type(dtype)
    m = ir.Module()
    f = ir.add_function(m, "k", [ir.scalar(ir.ptr(el))])
    b = ir.Builder(f)
    value = b.constant(1.0 if dtype.is_float else 1, ir.tile(16, el))
    try:
        if view:
            tv = ir.TensorViewType(el, (1024,), (1,))
            part = b.make_partition_view(b.make_tensor_view(f.args[0], result_types=[tv]),
                                         result_types=[ir.PartitionViewType((16,), tv)])
            b.atomic_red_view_tko(part, [b.constant(0, ir.scalar(ir.I32))], value,
                                  mode=tile_ir_atomic_mode(mode, dtype), **ORDER)
            return True
        one = b.reshape(f.args[0], result_types=[ir.tile(1, ir.ptr(el))])
        pointers = b.broadcast(one, result_types=[ir.tile(16, ir.ptr(el))])
        if mode == "cas":
            b.atomic_cas_tko(pointers, value, value, **ORDER)
        else:
            b.atomic_rmw_tko(pointers, value, mode=tile_ir_atomic_mode(mode, dtype), **ORDER)
    except ir.IRTypeError:
        return False
    return True


@pytest.mark.parametrize("mode", [*RMW_MODES, "cas"])
def test_compiler_and_verifier_agree_on_every_dtype(mode: str) -> None:
    compiler = [d.name for d in dt.ALL_DTYPES if _compiler_accepts(mode, d)]
    verifier = [d.name for d in dt.ALL_DTYPES if _verifier_accepts(mode, d)]
    assert compiler == verifier
    assert compiler  # every mode takes some dtype


_INTEGERS = ["i32", "i64", "u32", "u64"]
# What tileiras 13.4 accepts (test_op_table compiles every case): the spec both sides meet.
ACCEPTED = {"add": [*_INTEGERS, "f16", "bf16", "f32", "f64"], "max": _INTEGERS, "min": _INTEGERS,
            "and": _INTEGERS, "or": _INTEGERS, "xor": _INTEGERS, "xchg": [*_INTEGERS, "f32", "f64"],
            "cas": [*_INTEGERS, "f32", "f64"]}


@pytest.mark.parametrize("mode", [*RMW_MODES, "cas"])
def test_each_mode_accepts_exactly_its_dtypes(mode: str) -> None:
    """The agreement above holds by construction (one table); this pins the table."""
    assert [d.name for d in dt.ALL_DTYPES if _compiler_accepts(mode, d)] == ACCEPTED[mode]


@pytest.mark.parametrize("mode", TILE_ATOMIC_MODES)
def test_tile_atomics_agree_with_the_view_reduction(mode: str) -> None:
    compiler = [d.name for d in dt.ALL_DTYPES if _compiler_accepts(mode, d)]
    verifier = [d.name for d in dt.ALL_DTYPES if _verifier_accepts(mode, d, view=True)]
    assert compiler == verifier


def k_xchg_f16(z: Mut[Tensor[f16, ["B"]]]):
    old = atomic_xchg(z, arange(64), zeros((64,), f16))  # <- refused


def k_cas_i16(z: Mut[Tensor[i16, ["B"]]]):
    old = atomic_cas(z, arange(64), zeros((64,), i16), zeros((64,), i16))  # <- refused


def _compile(function: Any, **arguments: Any) -> None:
    signature = parse_signature(function)
    build_kernel_ir(function, signature, specialize(signature, function.__name__, arguments), unsafe=True)


@pytest.mark.parametrize("kernel, dtype, ir_op, ir_mode, message", [
    (k_xchg_f16, dt.f16, "atomic_rmw_tko", "xchg",
     "atomic_xchg: the GPU's atomics take 32/64-bit integers, f32 or f64, not f16"),
    (k_cas_i16, dt.i16, "atomic_cas_tko", None,
     "atomic_cas: the GPU's atomics take 32/64-bit integers, f32 or f64, not i16"),
], ids=["xchg_f16", "cas_i16"])
def test_an_atomic_on_a_refused_dtype_is_a_located_type_error(kernel: Any, dtype: dt.DType, ir_op: str,
                                                              ir_mode: str | None, message: str) -> None:
    assert element_type(dtype) not in ir.accepted_element_types(ir_op, ir_mode)  # Tile IR refuses it too
    with pytest.raises(TileTypeError) as info:
        _compile(kernel, z=TensorSpec(dtype, (256,), (64,)))
    err = info.value
    assert message in str(err), str(err)
    assert err.location is not None
    lines, start = inspect.getsourcelines(kernel)
    assert err.location.line == start + next(i for i, line in enumerate(lines) if "# <- refused" in line)
    caret = str(err).splitlines()[2]
    assert caret.strip() and set(caret.strip()) == {"^"}
