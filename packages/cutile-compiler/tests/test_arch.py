"""Arch strings have one parser (`cutile_ir.parse_arch`, which the compiler's public
`parse_arch` raises as its `ArchError`): every place an arch is given refuses the
same malformed spellings with the same message, naming the parameter."""

from __future__ import annotations

from typing import Any

import cutile_ir as ir
import pytest

import cutile_compiler
from cutile_compiler import _dtypes as dt
from cutile_compiler import _pipeline, _toolchain
from cutile_compiler._hints import HintError, KernelHints
from cutile_compiler._signature import TensorSpec
from cutile_compiler.language import Mut, Tensor, f32, load_tile_like

MALFORMED = ["sm90", "sm_", "hopper", "sm_9x", "sm_90a", "SM_90", "sm_090", "", "sm_75"]


def double(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    z.store(load_tile_like(x, z) * 2.0)


def _specialized() -> tuple[Any, Any]:
    signature = cutile_compiler.parse_signature(double)
    spec = cutile_compiler.specialize(signature, "double", {"z": TensorSpec(dt.f32, (256,), (64,)),
                                                            "x": TensorSpec(dt.f32, (256,))})
    return signature, spec


def _refusal(call: Any, error: type[BaseException]) -> str:
    with pytest.raises(error) as info:
        call()
    assert type(info.value) is error
    return str(info.value)


def test_the_compilers_parser_is_public_and_is_cutile_irs() -> None:
    assert cutile_compiler.parse_arch is _toolchain.parse_arch
    assert cutile_compiler.Arch is ir.Arch
    assert cutile_compiler.ArchError is _toolchain.ArchError
    assert cutile_compiler.parse_arch("sm_90") == ir.parse_arch("sm_90") == ir.Arch(90)
    assert issubclass(cutile_compiler.ArchError, cutile_compiler.CutileError)
    assert issubclass(ir.ArchError, ir.IRError) and issubclass(ir.ArchError, ValueError)


@pytest.mark.parametrize("arch", MALFORMED)
def test_a_malformed_arch_gets_one_error_wherever_it_is_given(arch: str) -> None:
    signature, spec = _specialized()
    expected = _refusal(lambda: ir.parse_arch(arch), ir.ArchError)
    assert expected.startswith(f"arch {arch!r} is ")
    ArchError = cutile_compiler.ArchError
    kernel = cutile_compiler.build_kernel_ir(double, signature, spec)
    places = {
        "cutile_ir.verify": (lambda: ir.verify(ir.Module(), arch), ir.ArchError),
        "parse_arch": (lambda: cutile_compiler.parse_arch(arch), ArchError),
        "lower_kernel": (lambda: cutile_compiler.lower_kernel(kernel, "13.3", arch), ArchError),
        "compile_kernel": (lambda: cutile_compiler.compile_kernel(double, signature, spec, arch), ArchError),
        "min_tileiras_version": (lambda: _toolchain.min_tileiras_version(arch), ArchError),
    }
    for place, (call, error) in places.items():
        assert _refusal(call, error) == expected, place
    # A hints key holding a dict is an arch: the same words, naming the key.
    hinted = _refusal(lambda: KernelHints.parse({arch: {"occupancy": 2}}, "hints"), HintError)
    assert hinted == expected.replace("arch ", "hints key ", 1)


@pytest.mark.parametrize("arch", MALFORMED)
def test_a_malformed_arch_is_refused_before_tileiras_is_looked_for(arch: str,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    def no_toolchain() -> Any:
        raise _toolchain.ToolchainError("tileiras was not found")

    monkeypatch.setattr(_pipeline, "find_toolchain", no_toolchain)
    signature, spec = _specialized()
    with pytest.raises(cutile_compiler.ArchError, match=f"arch {arch!r}"):
        cutile_compiler.compile_kernel(double, signature, spec, arch)
    with pytest.raises(_toolchain.ToolchainError, match="not found"):
        cutile_compiler.compile_kernel(double, signature, spec, "sm_90")  # a good arch gets that far


def test_the_hint_for_a_near_miss_is_an_arch_that_parses() -> None:
    assert "write 'sm_90'" in _refusal(lambda: ir.parse_arch("sm90"), ir.ArchError)
    assert "write 'sm_100'" in _refusal(lambda: ir.parse_arch("sm_100a"), ir.ArchError)
    # "sm_090" is near "sm_90" but its digits do not spell a plain arch: the general hint
    assert "write e.g. 'sm_80'" in _refusal(lambda: ir.parse_arch("sm_090"), ir.ArchError)
    # a near miss older than Tile IR's targets gets no hint that would be refused in turn
    for text in ("75", "sm_75a", "compute_70"):
        message = _refusal(lambda: ir.parse_arch(text), ir.ArchError)
        assert "write e.g. 'sm_80'" in message and "sm_7" not in message.split(";")[-1]


def test_per_arch_hints_keep_their_meaning() -> None:
    hints = KernelHints.parse({"sm_90": {"occupancy": 2}, "occupancy": 1})
    assert hints.for_arch("sm_90") == {"sm_90": {"occupancy": 2}}
    assert hints.for_arch("sm_100") == {"sm_100": {"occupancy": 1}}
    with pytest.raises(HintError, match="the hints for sm_90 must be a dict"):
        KernelHints.parse({"sm_90": 8})
    with pytest.raises(HintError, match="unknown hint 'sm90'"):  # not a dict, so not meant as an arch
        KernelHints.parse({"sm90": 8})


def test_the_verifier_reads_the_arch_it_is_given() -> None:
    m = ir.Module()
    assert ir.problems(m, "sm_90") == []
    with pytest.raises(ir.ArchError, match="arch 'sm_9x' is not a GPU name"):
        ir.problems(m, "sm_9x")  # was read as sm_9 by a parser of its own
