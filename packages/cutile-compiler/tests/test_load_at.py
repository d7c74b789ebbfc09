"""How loads at element offsets (``x.load(at=...)``, op ``load_at``) lower: the view
they take inside the tensor depends on what the compiler can prove about the
offsets, and the bytecode version; outside, a masked pointer load or the padding.
Offsets a known number of elements off a 16-byte boundary read two aligned tiles,
spliced in registers; lowered kernels of that kind also run on the Tile IR
reference evaluator (``tileir_reference``) against numpy."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import cutile_ir as ir

from cutile_compiler import _dtypes as dt
from cutile_compiler._frontend import build_kernel_ir
from cutile_compiler._hints import KernelHints
from cutile_compiler._ir import KernelIR
from cutile_compiler._lowering import Lowering, lower_kernel
from cutile_compiler._opdefs.memory import congruence
from cutile_compiler._signature import TensorSpec, parse_signature, specialize
from cutile_compiler.language import Constant, Mut, Tensor, assume, bf16, bid, f16, f32, f64, i8, i32
from suite_kernels import stencil_1d_kernel, stencil_2d_kernel
from tileir_reference import evaluate

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


# -- offsets one element off a vector: two aligned tiles spliced in registers --------------------
# Each lowered kernel also runs on numpy through the Tile IR reference evaluator (the
# GPU's semantics, views indexed only inside their index space), against numpy.
RNG = np.random.default_rng(1919)
#: dtype -> the numpy dtype the reference evaluator holds it in (bf16 as f32: small integers are exact)
HELD = {f32: np.float32, f16: np.float16, bf16: np.float32, f64: np.float64, i32: np.int32, i8: np.int8}


def dense(shape: list[int], dtype: Any, tile: list[int] | None = None) -> TensorSpec:
    """A freshly allocated tensor's spec (dense, 256-byte aligned), as a launch describes it."""
    strides = [1] * len(shape)
    for axis in range(len(shape) - 2, -1, -1):
        strides[axis] = strides[axis + 1] * shape[axis + 1]
    return TensorSpec.describe(dtype, shape, strides, 256, tuple(tile) if tile is not None else None)


def lowered(function: Any, version: str = "13.3", hints: dict[str, Any] | None = None, unsafe: bool = False,
            **args: Any) -> tuple[KernelIR, ir.Module, str]:
    signature = parse_signature(function)
    kernel = build_kernel_ir(function, signature, specialize(signature, function.__name__, args), unsafe=unsafe)
    module = lower_kernel(kernel, version, "sm_90", KernelHints.parse(hints))
    return kernel, module, ir.print_module(module)


def blocks(shape: tuple[int, ...], tile: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(-(-n // t) for n, t in zip(shape, tile))


def small_ints(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    return RNG.integers(-8, 9, shape).astype(HELD[dtype])


@pytest.mark.parametrize("dtype", [f32, f16, bf16, f64, i32, i8])
@pytest.mark.parametrize("shape, tile", [((77, 135), (32, 64)), ((100, 136), (16, 32)), ((40, 300), (8, 256)),
                                         ((9, 13), (8, 32)), ((3, 5), (4, 8))])
def test_the_2d_stencil_as_lowered_computes_numpys_laplacian(dtype: Any, shape: tuple[int, int],
                                                               tile: tuple[int, int]) -> None:
    kernel, module, text = lowered(stencil_2d_kernel(dtype), y=dense(list(shape), dtype, list(tile)),
                                   x=dense(list(shape), dtype))
    group = 16 // (dtype.bits // 8)
    # spliced where every one of the 128 threads holds whole 16-byte groups of the tile
    spliced = tile[0] * tile[1] >= group * 128
    assert (" cat " in text) == spliced
    x = small_ints(shape, dtype)
    out = evaluate(kernel, module, blocks(shape, tile), {"y": np.full(shape, 99, HELD[dtype]), "x": x})["y"]
    p = np.pad(x.astype(np.float64), 1)
    np.testing.assert_array_equal(out, 4 * p[1:-1, 1:-1] - p[:-2, 1:-1] - p[2:, 1:-1] - p[1:-1, :-2] - p[1:-1, 2:])


@pytest.mark.parametrize("dtype, block", [(f32, 512), (f16, 1024), (i8, 2048), (f64, 256), (f32, 128)])
@pytest.mark.parametrize("n", [997, 4096])
def test_the_1d_stencil_as_lowered_pads_both_edges(dtype: Any, block: int, n: int) -> None:
    kernel, module, text = lowered(stencil_1d_kernel(dtype), y=dense([n], dtype, [block]), x=dense([n], dtype))
    assert (" cat " in text) == (block >= 16 // (dtype.bits // 8) * 128)
    x = small_ints((n,), dtype)
    out = evaluate(kernel, module, blocks((n,), (block,)), {"y": np.zeros(n, HELD[dtype]), "x": x})["y"]
    p = np.pad(x.astype(np.float64), 2)
    np.testing.assert_array_equal(out, p[:-4] + p[4:] - 4 * (p[1:-3] + p[3:-1]) + 6 * p[2:-2])


def shifted_by_kernel(dtype: Any, padding: str) -> Any:
    def shifted_by(z, x, D, B):
        z.store(x.load(at=(bid(0) * B + D,), shape=(B,), padding=padding))
    # annotations as objects (this module's are strings, which cannot name the dtype)
    shifted_by.__annotations__ = {"z": Mut[Tensor[dtype, ["B"]]], "x": Tensor[dtype, [-1]], "D": Constant[int],
                                  "B": Constant[int]}
    return shifted_by


@pytest.mark.parametrize("dtype, block, padding", [(f32, 512, "nan"), (f16, 1024, "neg_inf"), (i8, 2048, "zero"),
                                                   (f64, 256, "pos_inf")])
@pytest.mark.parametrize("d", [-5001, -515, -129, -3, -1, 1, 2, 5, 127, 995, 997, 1002, 5003])
def test_a_constant_element_offset_reads_numpys_window_padded_outside(dtype: Any, block: int, padding: str,
                                                                      d: int) -> None:
    n = 997
    kernel, module, text = lowered(shifted_by_kernel(dtype, padding), z=dense([n], dtype, [block]),
                                   x=dense([n], dtype), D=d)
    assert (" cat " in text) == (d % (16 // (dtype.bits // 8)) != 0)  # off a 16-byte boundary: spliced
    x = small_ints((n,), dtype)
    out = evaluate(kernel, module, blocks((n,), (block,)), {"z": np.zeros(n, HELD[dtype]), "x": x})["z"]
    at = np.arange(n) + d
    fill = {"nan": np.nan, "neg_inf": -np.inf, "pos_inf": np.inf, "zero": 0}[padding]
    expected = np.where((at >= 0) & (at < n), x[np.clip(at, 0, n - 1)].astype(np.float64), fill)
    np.testing.assert_array_equal(out.astype(np.float64), expected)


def window(z: Mut[Tensor[i32, ["BM", "BN"]]], x: Tensor[i32, [-1, -1]], DI: Constant[int], DJ: Constant[int],
           BM: Constant[int], BN: Constant[int]):
    z.store(x.load(at=(bid(0) * BM + DI, bid(1) * BN + DJ), shape=(BM, BN), latency=3, allow_tma=True))


@pytest.mark.parametrize("di, dj", [(-1, 0), (0, -1), (2, 3), (-40, 65), (50, -70), (-3, -200), (100, 100), (7, 1)])
def test_a_2d_window_at_constant_offsets_reads_numpys_window(di: int, dj: int) -> None:
    shape = (45, 67)
    kernel, module, text = lowered(window, z=dense(list(shape), dt.i32, [16, 32]), x=dense(list(shape), dt.i32),
                                   DI=di, DJ=dj)
    assert (" cat " in text) == (dj % 4 != 0)
    x = RNG.integers(-1000, 1000, shape).astype(np.int32)
    out = evaluate(kernel, module, blocks(shape, (16, 32)), {"z": np.full(shape, -7, np.int32), "x": x})["z"]
    rows, cols = np.arange(45)[:, None] + di, np.arange(67)[None, :] + dj
    inside = (rows >= 0) & (rows < 45) & (cols >= 0) & (cols < 67)
    np.testing.assert_array_equal(out, np.where(inside, x[np.clip(rows, 0, 44), np.clip(cols, 0, 66)], 0))


def across(z: Mut[Tensor[f32, ["BM", "BN"]]], x: Tensor[f32, [-1, -1]], BM: Constant[int], BN: Constant[int]):
    i, j = bid(0) * BM, bid(1) * BN
    z.store(x.load(at=(i, j - 1), shape=(BM, BN)) + 2 * x.load(at=(i, j), shape=(BM, BN))
            + 3 * x.load(at=(i, j + 1), shape=(BM, BN)))


def test_loads_one_column_either_side_share_the_centre_tile() -> None:
    kernel, module, text = lowered(across, z=dense([40, 130], dt.f32, [16, 64]), x=dense([40, 130], dt.f32))
    # three tiles, at j - 4, j and j + 4 (4 f32 = 16 bytes), the centre one read once
    assert text.count("load_view_tko") == 3 and text.count(" cat ") == 6
    assert text.count("make_strided_view") == 2 and "traversal_strides=[16,4]" in text
    assert "traversal_strides=[16,1]" not in text
    x = small_ints((40, 130), f32)
    out = evaluate(kernel, module, (3, 3), {"z": np.zeros((40, 130), np.float32), "x": x})["z"]
    p = np.pad(x.astype(np.float64), ((0, 0), (1, 1)))
    np.testing.assert_array_equal(out, p[:, :-2] + 2 * p[:, 1:-1] + 3 * p[:, 2:])


def branches(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]], flag: i32, B: Constant[int]):
    i = bid(0) * B
    if flag > 0:
        t = x.load(at=(i + 1,), shape=(B,))
    else:
        t = x.load(at=(i - 1,), shape=(B,))
    z.store(t + 10 * x.load(at=(i + 1,), shape=(B,)))


@pytest.mark.parametrize("flag", [0, 1])
def test_a_tile_read_inside_a_branch_is_not_shared_with_loads_after_it(flag: int) -> None:
    kernel, module, text = lowered(branches, z=dense([1000], dt.f32, [512]), x=dense([1000], dt.f32), flag=0)
    # the branch reads its two tiles, the load after it its own two
    assert text.count("load_view_tko") == 6
    x = small_ints((1000,), f32)
    out = evaluate(kernel, module, (2,), {"z": np.zeros(1000, np.float32), "x": x}, {"flag": flag})["z"]
    p = np.pad(x.astype(np.float64), 1)
    np.testing.assert_array_equal(out, (p[2:] if flag else p[:-2]) + 10 * p[2:])


def test_hinted_worker_warps_raise_the_tile_a_splice_needs() -> None:
    def text(block: int, hints: dict[str, Any] | None) -> str:
        return lowered(shifted_by_kernel(f32, "zero"), hints=hints, z=dense([4096], dt.f32, [block]),
                       x=dense([4096], dt.f32), D=1)[2]
    assert " cat " in text(512, None) and " cat " in text(512, {"num_worker_warps": 4})
    # 8 warps: 256 threads, so 512 f32 are 2 per thread (a splice would cross threads)
    assert " cat " not in text(512, {"sm_90": {"num_worker_warps": 8}}) and " cat " in text(1024, {"num_worker_warps": 8})


def test_without_strided_views_a_splice_needs_a_group_as_wide_as_the_tile() -> None:
    text = lowered(shifted_by_kernel(f32, "zero"), "13.1", z=dense([4096], dt.f32, [512]), x=dense([4096], dt.f32),
                   D=1)[2]
    assert " cat " not in text and "strided_view" not in text


def test_an_unsafe_kernels_read_of_a_mut_tensor_is_one_tile_on_its_token_chain() -> None:
    assert " cat " not in mlir(reads_a_mut_tensor, unsafe=True, z=TensorSpec(dt.f32, (1000,), (512,)))


def congruences(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]], d: i32, B: Constant[int]):
    k = bid(0)
    v = x.load(at=(k * 64 - 1,), shape=(B,))
    v += x.load(at=((k * 6 + 2) * 4,), shape=(B,))
    v += x.load(at=(-(k * 32) + 5,), shape=(B,))
    v += x.load(at=(assume(d, div_by=16) + 3,), shape=(B,))
    v += x.load(at=(k * 3,), shape=(B,))
    v += x.load(at=(d.astype(i8) * 64 * 16 + 4,), shape=(B,))
    z.store(v)


def test_the_congruence_of_an_offset_follows_how_it_was_computed() -> None:
    signature = parse_signature(congruences)
    kernel = build_kernel_ir(congruences, signature,
                             specialize(signature, "congruences", {"z": Z, "x": X, "d": 0}))
    lowering = Lowering(kernel, ir.Version.parse("13.3"))
    starts = [op.operands[1] for op in kernel.walk() if op.name == "load_at"]
    # i8 arithmetic wraps at 256: only residues modulo 256 survive it
    assert [congruence(lowering, s) for s in starts] == [(64, 63), (8, 0), (32, 5), (16, 3), (1, 0), (256, 4)]
