"""How loads at element offsets (``x.load(at=...)``, op ``load_at``) lower: the view
they take inside the tensor depends on what the compiler can prove about the
offsets, and the bytecode version; outside, a masked pointer load or the padding."""

from __future__ import annotations

from typing import Any

import cutile_ir as ir

from cutile_compiler import _dtypes as dt
from cutile_compiler._frontend import build_kernel_ir
from cutile_compiler._lowering import lower_kernel
from cutile_compiler._signature import TensorSpec, parse_signature, specialize
from cutile_compiler.language import Constant, Mut, Tensor, assume, bid, f32, i32

Z = TensorSpec(dt.f32, (1000,), (128,))
X = TensorSpec(dt.f32, (1000,))


def mlir(function: Any, version: str = "13.3", unsafe: bool = False, **specs: Any) -> str:
    signature = parse_signature(function)
    kernel = build_kernel_ir(function, signature, specialize(signature, function.__name__, specs), unsafe=unsafe)
    return ir.print_module(lower_kernel(kernel, version, "sm_90"))


def shifted(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]], d: i32, B: Constant[int]):
    z.store(x.load(at=(bid(0) * B + d,), shape=(B,)))


def aligned_by_assumption(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]], d: i32, B: Constant[int]):
    z.store(x.load(at=(assume(d, div_by=128) + bid(0) * B,), shape=(B,), padding="nan"))


def test_an_unaligned_offset_takes_a_strided_view_inside_and_a_masked_pointer_load_outside() -> None:
    text = mlir(shifted, z=Z, x=X, d=0)
    assert "cmpi less_than" in text and "unsigned" in text and " = if " in text
    assert "strided_view<tile=(128), traversal_strides=[1], padding_value = zero" in text
    assert text.count("load_ptr_tko") == 1 and "make_partition_view %tview_0" not in text


def test_bytecode_without_strided_views_reads_an_unaligned_offset_by_pointers() -> None:
    text = mlir(shifted, "13.1", z=Z, x=X, d=0)
    assert "strided_view" not in text and " = if " not in text and text.count("load_ptr_tko") == 1


def test_an_offset_known_to_be_a_multiple_of_the_tile_takes_a_partition_view_or_the_padding() -> None:
    for version in ("13.1", "13.3"):
        text = mlir(aligned_by_assumption, version, z=Z, x=X, d=0)
        assert "partition_view<tile=(128), padding_value = nan" in text and "divi" in text
        # outside the tensor a tile-aligned tile lies wholly outside: the padding, no pointer load
        assert "load_ptr_tko" not in text and "constant <f32: 0x7FC00000> : tile<128xf32>" in text


def reads_a_mut_tensor(z: Mut[Tensor[f32, ["B"]]], B: Constant[int]):
    first = z.load(at=(bid(0) * B - 1,), shape=(B,))
    z.store(first + 1.0)


def test_in_an_unsafe_kernel_a_mut_tensor_read_at_an_offset_joins_its_token_chain() -> None:
    text = mlir(reads_a_mut_tensor, unsafe=True, z=Z)
    branch = next(line for line in text.splitlines() if " = if " in line)
    assert "token" in branch  # the branch yields the chain's token after the load
    store = next(line for line in text.splitlines() if "store_view_tko" in line)
    assert "token = %" in store
