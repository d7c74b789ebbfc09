"""Element encodings of dense constants and attributes."""

from __future__ import annotations

import math

import pytest

from cutile_ir import (
    BF16, F16, F32, F4E2M1FN, F8E4M3FN, F8E5M2, F8E8M0FNU, I1, I8, I32, TF32, DenseElements, FloatAttr, IntegerAttr,
    IRTypeError, tile,
)
from cutile_ir._attributes import _bits_from_float, _float_from_bits


@pytest.mark.parametrize("t", [F8E4M3FN, F8E5M2, F8E8M0FNU, F4E2M1FN], ids=str)
def test_small_floats_encode_every_value_to_itself(t) -> None:  # type: ignore[no-untyped-def]
    for bits in range(1 << (4 if t == F4E2M1FN else 8)):
        v = _float_from_bits(bits, t)
        if math.isnan(v):
            continue
        back = _bits_from_float(v, t)
        assert _float_from_bits(back, t) == v


@pytest.mark.parametrize(
    "t, value, bits",
    [
        (F8E4M3FN, 448.0, 0x7E), (F8E4M3FN, -2.75, 0xC3), (F8E5M2, 2.75, 0x42),  # tie to even
        (F4E2M1FN, 6.0, 0x7), (F8E8M0FNU, 1.0, 0x7F), (BF16, 1.0 + 2 ** -8, 0x3F80),  # tie to even
        (BF16, 1.0 + 3 * 2 ** -8, 0x3F82), (TF32, 1.0, 0x1FC00), (F16, 65536.0, 0x7C00), (F32, 1e39, 0x7F800000),
        # Above the largest finite value but rounding down to it, as IEEE rounds (f16: 65519 -> 65504).
        (F8E5M2, 57345.0, 0x7B), (F8E5M2, 61439.0, 0x7B), (F8E5M2, 61440.0, 0x7C),  # the last rounds to 65536: inf
        (F8E4M3FN, 449.0, 0x7E), (F8E4M3FN, -464.0, 0xFE), (F4E2M1FN, 6.9, 0x7),  # (464: a tie, to even 448)
        (F8E4M3FN, 2.0 ** -10, 0x00), (F8E4M3FN, -(2.0 ** -10), 0x80),  # below half the smallest: signed zero
    ],
)
def test_rounding_of_floats(t, value: float, bits: int) -> None:  # type: ignore[no-untyped-def]
    assert _bits_from_float(value, t) == bits


def test_out_of_range_small_float_is_an_error() -> None:
    with pytest.raises(IRTypeError, match="out of the range of f8E4M3FN"):
        _bits_from_float(1000.0, F8E4M3FN)
    with pytest.raises(IRTypeError, match="out of the range of f8E4M3FN"):
        _bits_from_float(465.0, F8E4M3FN)  # nearer 480 than 448: past the largest finite value
    with pytest.raises(IRTypeError, match="out of the range of f8E8M0FNU"):
        _bits_from_float(-1.0, F8E8M0FNU)
    with pytest.raises(IRTypeError, match="f4E2M1FN has no NaN"):
        _bits_from_float(float("nan"), F4E2M1FN)


def test_dense_elements() -> None:
    s = DenseElements.splat(tile((4, 4), F32), 2.0)
    assert s.is_splat and s.data == b"\x00\x00\x00\x40" and s.values() == [2.0] * 16
    d = DenseElements.from_values(tile(4, I32), [1, -1, 2, 3])
    assert not d.is_splat and d.values() == [1, -1, 2, 3] and len(d.data) == 16
    assert DenseElements.from_values(tile(4, I32), [7, 7, 7, 7]).is_splat
    b = DenseElements.from_values(tile(10, I1), [1, 0, 1, 1, 0, 0, 0, 0, 1, 0])
    assert b.data == bytes([0b00001101, 0b01]) and b.values() == [1, 0, 1, 1, 0, 0, 0, 0, 1, 0]
    assert DenseElements.splat(tile(3, I1), True).data == b"\xff"
    assert DenseElements.splat(tile(2, TF32), 1.0).data == (0x1FC00).to_bytes(3, "little")
    assert DenseElements.from_values(tile(2, F8E4M3FN), [1.0, 0.5]).data == bytes([0x38, 0x30])
    with pytest.raises(IRTypeError, match=r"tile<4xi32> needs 4 values, found 3"):
        DenseElements.from_values(tile(4, I32), [1, 2, 3])
    with pytest.raises(IRTypeError, match="needs 1 \\(splat\\) or 4 bytes, found 2"):
        DenseElements(tile(4, I8), b"\x00\x01")


def test_scalar_attributes() -> None:
    assert IntegerAttr(I32, 0xFFFFFFFF).value == -1
    assert IntegerAttr(I1, 1).value == 1
    assert IntegerAttr(I8, 200) == IntegerAttr(I8, -56)
    assert FloatAttr.of(F16, 0.5).bits == 0x3800 and FloatAttr.of(F16, 0.5).value == 0.5
