"""The specialization key beyond dtypes and shapes: divisibility and contiguity
facts of tensors (and what the lowering makes of them), and kernel hints per arch."""

from __future__ import annotations

import cutile_ir as ir
import pytest

from cutile_compiler import _dtypes as dt
from cutile_compiler._frontend import build_kernel_ir
from cutile_compiler._hints import DEFAULT_ARCHS, HintError, KernelHints
from cutile_compiler._lowering import lower_kernel
from cutile_compiler._signature import MAX_DIVISIBILITY, TensorSpec, divisibility, parse_signature, specialize
from cutile_compiler._toolchain import CompileOptions
from cutile_compiler.language import Mut, Tensor, f32, load_tile_like


def scale(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]], y: Tensor[f32, [4, 64]]):
    z.store(load_tile_like(x, z) * y.load(index=(0, 0), shape=(1, 64)).reshape((64,)).sum())


def mlir(**specs: TensorSpec) -> str:
    signature = parse_signature(scale)
    kernel = build_kernel_ir(scale, signature, specialize(signature, "scale", specs))
    return ir.print_module(lower_kernel(kernel, "13.3", "sm_90"))


@pytest.mark.parametrize("value, expected", [(48, 16), (24, 8), (7, 1), (0, MAX_DIVISIBILITY), (1 << 20, 16), (-32, 16)])
def test_divisibility_is_the_largest_power_of_two_up_to_the_cap(value: int, expected: int) -> None:
    assert divisibility(value) == expected


def test_describe_fills_every_fact() -> None:
    spec = TensorSpec.describe(dt.f32, (24, 64), (64, 1), 0x1000 + 8)
    assert (spec.base_divisibility, spec.shape_divisibility, spec.stride_divisibility, spec.contiguous) == \
        (8, (8, 16), (16, 1), True)
    transposed = TensorSpec.describe(dt.f32, (64, 24), (1, 64), 0x1000)
    assert not transposed.contiguous
    assert TensorSpec.describe(dt.f32, (1, 64), (999, 1), 0).contiguous  # a unit dim's stride is free


def test_facts_are_part_of_the_key() -> None:
    plain = TensorSpec(dt.f32, (1024,))
    aligned = TensorSpec(dt.f32, (1024,), None, 16, (16,), (1,), True)
    assert plain != aligned and hash(plain) != hash(aligned)
    assert TensorSpec.describe(dt.f32, (1024,), (1,), 64) == aligned


@pytest.mark.parametrize("bad", [{"base_divisibility": 3}, {"base_divisibility": 32}, {"shape_divisibility": (4, 4)},
                                 {"stride_divisibility": (0,)}])
def test_malformed_facts_are_refused(bad: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="TensorSpec"):
        TensorSpec(dt.f32, (1024,), **bad)  # type: ignore[arg-type]


def test_divisible_dims_strides_and_pointers_become_assumptions() -> None:
    text = mlir(z=TensorSpec.describe(dt.f32, (4096,), (1,), 0x7000, (128,)),
                x=TensorSpec.describe(dt.f32, (4096,), (1,), 0x8000 + 4),
                y=TensorSpec.describe(dt.f32, (4, 64), (64, 1), 0x9000))
    assert "assume div_by<16>, %arg0 : tile<ptr<f32>>" in text  # z's base
    assert "assume div_by<16>, %arg1 : tile<i32>" in text  # z's dynamic dim
    assert "assume div_by<4>, %arg2 : tile<ptr<f32>>" in text  # x is only 4-byte aligned
    # y is dense with a static shape: its view has static strides
    assert "tensor_view<4x64xf32, strides=[64,1]>" in text


def test_nothing_is_assumed_without_facts() -> None:
    text = mlir(z=TensorSpec(dt.f32, (4096,), (128,)), x=TensorSpec(dt.f32, (4096,)), y=TensorSpec(dt.f32, (4, 64)))
    assert "assume" not in text
    assert "tensor_view<4x64xf32, strides=[?,1]>" in text


def test_hints_general_and_per_arch() -> None:
    hints = KernelHints.parse({"occupancy": 2, "sm_90": {"num_worker_warps": 8, "occupancy": 1}})
    assert hints.for_arch("sm_90") == {"sm_90": {"occupancy": 1, "num_worker_warps_per_cta": 8}}
    assert hints.for_arch("sm_100") == {"sm_100": {"occupancy": 2}}
    launch = KernelHints.parse({"sm_100": {"num_ctas": 4}, "occupancy": 3})
    merged = hints.merged(launch)
    assert merged.for_arch("sm_100") == {"sm_100": {"occupancy": 3, "num_cta_in_cga": 4}}
    assert merged.for_arch("sm_90")["sm_90"]["occupancy"] == 1  # the arch's own value wins over general ones
    assert not KernelHints.parse(None) and KernelHints.parse({}) == KernelHints()


def test_hints_without_an_arch_go_to_the_named_and_default_archs() -> None:
    per_arch = KernelHints.parse({"sm_80": {"occupancy": 2}})
    assert per_arch.target_archs("sm_120") == ["sm_120"]
    assert per_arch.target_archs(None) == sorted({"sm_80", *DEFAULT_ARCHS})
    assert per_arch.for_arch(None) == {"sm_80": {"occupancy": 2}}
    general = KernelHints.parse({"occupancy": 2})
    assert general.for_arch(None) == {arch: {"occupancy": 2} for arch in DEFAULT_ARCHS}


@pytest.mark.parametrize("hints, message", [
    ({"warps": 8}, "unknown hint 'warps'"),
    ({"num_worker_warps": 6}, "num_worker_warps must be a power of two from 1 to 32, got 6"),
    ({"sm_90": {"num_worker_warps": 64}}, "num_worker_warps must be a power of two from 1 to 32, got 64"),
    ({"sm_90": {"num_ctas": 3}}, r"hints\['sm_90'\]: num_ctas must be a power of two from 1 to 16, got 3"),
    ({"occupancy": 0}, "occupancy must be from 1 to 32, got 0"),
    ({"occupancy": True}, "hint occupancy must be an int"),
    ({"sm_90": 8}, "the hints for sm_90 must be a dict"),
])
def test_malformed_hints_are_refused(hints: dict[str, object], message: str) -> None:
    with pytest.raises(HintError, match=message):
        KernelHints.parse(hints)


def test_compile_options_carry_hints_and_stay_hashable() -> None:
    a = CompileOptions(hints={"sm_90": {"num_worker_warps": 8}})  # type: ignore[arg-type]
    b = CompileOptions(hints=KernelHints.parse({"sm_90": {"num_worker_warps": 8}}))
    assert a == b and hash(a) == hash(b) and a != CompileOptions()
    assert a.args() == CompileOptions().args()  # hints go into the bytecode, not the command line


def test_entry_hints_are_emitted_for_the_compiled_arch_only() -> None:
    signature = parse_signature(scale)
    specs = {"z": TensorSpec(dt.f32, (4096,), (128,)), "x": TensorSpec(dt.f32, (4096,)), "y": TensorSpec(dt.f32, (4, 64))}
    kernel = build_kernel_ir(scale, signature, specialize(signature, "scale", specs))
    hints = KernelHints.parse({"sm_90": {"num_worker_warps": 8}, "sm_100": {"occupancy": 2}})
    text = ir.print_module(lower_kernel(kernel, "13.3", "sm_100", hints))
    assert "occupancy = 2" in text and "num_worker_warps" not in text
