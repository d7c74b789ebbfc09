"""Block-scaled MMA (``mma_scaled``, Tile IR ``mmaf_scaled``) with f8e8m0fnu / f8e4m3fn
scales and f8e4m3fn / f8e5m2 / f4e2m1fn elements, and the byte views that carry 4-bit
data (``pack_to_bytes``, ``unpack_from_bytes``): the interpreter against a numpy float64
reference (elements and scales decoded by ml_dtypes, and the formats decoded by hand
to check that decoding), compiles for sm_100, the refusal on sm_90 (no such instruction)
and misuse refused at the line.

Kernels are built in factories, so annotations are evaluated at definition (no
``from __future__ import annotations``)."""

import inspect
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import cutile
import cutile.core as ct
from cutile import api
from cutile.core import Mut, Tensor, f16, f32, f4e2m1fn, f8e4m3fn, f8e5m2, f8e8m0fnu, i32, u8
from cutile_compiler import SignatureError
from cutile_compiler._errors import TileCompilerError, TileTypeError

RNG = np.random.default_rng(1603)
BOTH_BACKENDS = True  # (the byte views run on the GPU too; block-scaled MMA needs sm_100)
FP4_VALUES = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6])


def decode_fp4(codes: np.ndarray) -> np.ndarray:
    """f4e2m1fn by its definition: sign bit 3, exponent bits 2-1 (bias 1), mantissa bit 0."""
    sign = np.where(codes & 8, -1.0, 1.0)
    exponent, mantissa = (codes >> 1) & 3, codes & 1
    return sign * np.where(exponent == 0, mantissa * 0.5, (1 + mantissa / 2) * 2.0 ** (exponent - 1))


def decode_e8m0(codes: np.ndarray) -> np.ndarray:
    """f8e8m0fnu by its definition: 2 ** (byte - 127), 0xFF is NaN."""
    return np.where(codes == 255, np.nan, 2.0 ** (codes.astype(np.float64) - 127))


def test_hand_decoding_matches_ml_dtypes() -> None:
    codes = np.arange(16, dtype=np.uint8)
    np.testing.assert_array_equal(decode_fp4(codes), FP4_VALUES)
    np.testing.assert_array_equal(codes.view(ml_dtypes.float4_e2m1fn).astype(np.float64), FP4_VALUES)
    everything = np.arange(256, dtype=np.uint8)
    np.testing.assert_array_equal(everything.view(ml_dtypes.float8_e8m0fnu).astype(np.float64),
                                  decode_e8m0(everything))


def pack_fp4(codes: np.ndarray) -> np.ndarray:
    """Row-major 4-bit codes two to a byte, the even-numbered one in the low half."""
    flat = codes.reshape(-1)
    return (flat[0::2] | (flat[1::2] << 4)).astype(np.uint8)


def scale_codes(shape: tuple[int, ...]) -> np.ndarray:
    return RNG.integers(120, 135, shape).astype(np.uint8)  # 2 ** -7 to 2 ** 7


def reference(x: np.ndarray, x_scale: np.ndarray, y: np.ndarray, y_scale: np.ndarray, acc: np.ndarray) -> np.ndarray:
    k = x.shape[-1]
    scaled_x = x * np.repeat(x_scale, k // x_scale.shape[-1], axis=-1)
    scaled_y = y * np.repeat(y_scale, k // y_scale.shape[-2], axis=-2)
    return np.matmul(scaled_x, scaled_y) + acc


def fp8_kernel(dtype: Any, batch: tuple[int, ...], m: int, n: int, k: int, blocks: int) -> Any:
    xs, ys = (*batch, m, k), (*batch, k, n)
    sxs, sys_ = (*batch, m, blocks), (*batch, blocks, n)
    zs = (*batch, m, n)
    origin = (0,) * (len(batch) + 2)

    @cutile.entry
    def kernel(z: Mut[Tensor[f32, list(zs)]], x: Tensor[dtype, list(xs)], sx: Tensor[f8e8m0fnu, list(sxs)],
               y: Tensor[dtype, list(ys)], sy: Tensor[f8e8m0fnu, list(sys_)], c: Tensor[f32, list(zs)]):
        acc = c.load(index=origin, shape=zs)
        z.store(ct.mma_scaled(x.load(index=origin, shape=xs), sx.load(index=origin, shape=sxs),
                              y.load(index=origin, shape=ys), sy.load(index=origin, shape=sys_), acc))

    return kernel


FP8_CASES = [(f8e4m3fn, (), 16, 16, 64), (f8e5m2, (), 32, 16, 32), (f8e4m3fn, (2,), 16, 32, 64)]


@pytest.mark.interpreter_only
@pytest.mark.parametrize("dtype, batch, m, n, k", FP8_CASES, ids=[f"{c[0]}-{c[1]}-{c[4]}" for c in FP8_CASES])
def test_fp8_elements(dtype: Any, batch: tuple[int, ...], m: int, n: int, k: int) -> None:
    blocks = k // 32
    np_type = np.dtype(dtype.numpy_name)
    x = RNG.standard_normal((*batch, m, k)).astype(np_type)
    y = RNG.standard_normal((*batch, k, n)).astype(np_type)
    sx, sy = scale_codes((*batch, m, blocks)), scale_codes((*batch, blocks, n))
    c = RNG.standard_normal((*batch, m, n)).astype(np.float32)
    kernel = fp8_kernel(dtype, batch, m, n, k, blocks)
    z = api.full([*batch, m, n], np.nan, dtype=f32).partition([*batch, m, n])
    args = [api.from_numpy(x, dtype), api.from_numpy(sx.view(ml_dtypes.float8_e8m0fnu), f8e8m0fnu),
            api.from_numpy(y, dtype), api.from_numpy(sy.view(ml_dtypes.float8_e8m0fnu), f8e8m0fnu), api.from_numpy(c)]
    z, *_ = kernel(z, *args).sync()
    expected = reference(x.astype(np.float64), decode_e8m0(sx), y.astype(np.float64), decode_e8m0(sy), c)
    np.testing.assert_allclose(z.to_numpy(), expected, rtol=1e-6, atol=1e-6 * np.abs(expected).max())
    compiled = cutile.compile(kernel, z, *args, arch="sm_100")
    assert "mmaf_scaled" in compiled.mlir and compiled.cubin[:4] == b"\x7fELF"


def fp4_kernel(scale_dtype: Any, m: int, n: int, k: int, blocks: int) -> Any:
    scale_bits = u8 if scale_dtype is f8e8m0fnu else scale_dtype

    @cutile.entry
    def kernel(z: Mut[Tensor[f32, [m, n]]], x: Tensor[u8, [m * k // 2]], sx: Tensor[scale_bits, [m * blocks]],
               y: Tensor[u8, [k * n // 2]], sy: Tensor[scale_bits, [blocks * n]]):
        a = ct.reshape(ct.unpack_from_bytes(x.load(index=(0,), shape=(m * k // 2,)), f4e2m1fn), (m, k))
        b = ct.reshape(ct.unpack_from_bytes(y.load(index=(0,), shape=(k * n // 2,)), f4e2m1fn), (k, n))
        sa = sx.load(index=(0,), shape=(m * blocks,))
        sb = sy.load(index=(0,), shape=(blocks * n,))
        if scale_dtype == f8e8m0fnu:  # exponent bytes, read as scales
            sa, sb = ct.bitcast(sa, f8e8m0fnu), ct.bitcast(sb, f8e8m0fnu)
        acc = ct.full((m, n), 0.25, f32)
        z.store(ct.mma_scaled(a, ct.reshape(sa, (m, blocks)), b, ct.reshape(sb, (blocks, n)), acc))

    return kernel


FP4_CASES = [(f8e8m0fnu, 32), (f8e8m0fnu, 16), (f8e4m3fn, 16)]


@pytest.mark.interpreter_only
@pytest.mark.parametrize("scale_dtype, block", FP4_CASES, ids=[f"{s}-B{b}" for s, b in FP4_CASES])
def test_fp4_elements(scale_dtype: Any, block: int) -> None:
    m, n, k = 16, 32, 64
    blocks = k // block
    x_codes = RNG.integers(0, 16, (m, k)).astype(np.uint8)
    y_codes = RNG.integers(0, 16, (k, n)).astype(np.uint8)
    if scale_dtype is f8e8m0fnu:
        sx, sy = scale_codes((m, blocks)), scale_codes((blocks, n))
        sx_values, sy_values = decode_e8m0(sx), decode_e8m0(sy)
        sx_arg, sy_arg = api.from_numpy(sx.reshape(-1)), api.from_numpy(sy.reshape(-1))
    else:
        sx_e4 = RNG.uniform(0.1, 4, (m, blocks)).astype(ml_dtypes.float8_e4m3fn)
        sy_e4 = RNG.uniform(0.1, 4, (blocks, n)).astype(ml_dtypes.float8_e4m3fn)
        sx_values, sy_values = sx_e4.astype(np.float64), sy_e4.astype(np.float64)
        sx_arg, sy_arg = api.from_numpy(sx_e4.reshape(-1), f8e4m3fn), api.from_numpy(sy_e4.reshape(-1), f8e4m3fn)
    kernel = fp4_kernel(scale_dtype, m, n, k, blocks)
    z = api.full([m, n], np.nan, dtype=f32).partition([m, n])
    args = [api.from_numpy(pack_fp4(x_codes)), sx_arg, api.from_numpy(pack_fp4(y_codes)), sy_arg]
    z, *_ = kernel(z, *args).sync()
    expected = reference(decode_fp4(x_codes), sx_values, decode_fp4(y_codes), sy_values, np.full((m, n), 0.25))
    np.testing.assert_allclose(z.to_numpy(), expected, rtol=1e-6, atol=1e-6 * np.abs(expected).max())
    compiled = cutile.compile(kernel, z, *args, arch="sm_100")
    assert "mmaf_scaled" in compiled.mlir and "unpack" in compiled.mlir


@pytest.mark.interpreter_only
def test_sm_90_refuses_with_the_line() -> None:
    kernel = fp8_kernel(f8e4m3fn, (), 16, 16, 32, 1)
    lines, start = inspect.getsourcelines(kernel.function)
    metas = [api.meta([16, 16]).partition([16, 16]), api.meta([16, 32], dtype=f8e4m3fn),
             api.meta([16, 1], dtype=f8e8m0fnu), api.meta([32, 16], dtype=f8e4m3fn),
             api.meta([1, 16], dtype=f8e8m0fnu), api.meta([16, 16])]
    with pytest.raises(TileCompilerError, match="mma_scaled needs sm_100 or newer") as info:
        cutile.compile(kernel, *metas, arch="sm_90")
    assert info.value.location is not None
    assert info.value.location.line == start + next(i for i, t in enumerate(lines) if "ct.mma_scaled" in t)
    assert str(info.value).splitlines()[-1].strip().startswith("^")


def _located(kernel: Any, args: list[Any], message: str) -> None:
    lines, start = inspect.getsourcelines(kernel.function)
    with pytest.raises(TileTypeError) as info:
        kernel(*args).sync()
    assert message in info.value.message, info.value.message
    assert info.value.location is not None
    assert info.value.location.line == start + next(i for i, t in enumerate(lines) if "# mark" in t)
    assert str(info.value).splitlines()[-1].strip().startswith("^")


def _scales(shape: tuple[int, int], code: int = 127) -> Any:
    return ct.bitcast(ct.full(shape, code, u8), f8e8m0fnu)


@pytest.mark.interpreter_only
def test_misuse_is_located() -> None:
    z = lambda: api.zeros([16, 16]).partition([16, 16])  # noqa: E731

    @cutile.entry
    def wrong_block(z: Mut[Tensor[f32, [16, 16]]]):
        x = ct.zeros((16, 64), f32).astype(f8e4m3fn)
        z.store(ct.mma_scaled(x, _scales((16, 4)), ct.zeros((64, 16), f32).astype(f8e4m3fn), _scales((4, 16)),  # mark
                              ct.zeros((16, 16), f32)))

    _located(wrong_block, [z()], "x_scale [16, 4] must match its operand [16, 64] but along K")

    @cutile.entry
    def mixed(z: Mut[Tensor[f32, [16, 16]]]):
        x = ct.zeros((16, 32), f32)
        z.store(ct.mma_scaled(x.astype(f8e4m3fn), _scales((16, 1)), ct.zeros((32, 16), f32).astype(f8e5m2),  # mark
                              _scales((1, 16)), ct.zeros((16, 16), f32)))

    _located(mixed, [z()], "x and y must have the same dtype, got f8e4m3fn and f8e5m2")

    @cutile.entry
    def f16_elements(z: Mut[Tensor[f32, [16, 16]]]):
        z.store(ct.mma_scaled(ct.zeros((16, 32), f16), _scales((16, 1)), ct.zeros((32, 16), f16),  # mark
                              _scales((1, 16)), ct.zeros((16, 16), f32)))

    _located(f16_elements, [z()], "x and y must be f8e4m3fn, f8e5m2, f4e2m1fn, got f16")

    @cutile.entry
    def f16_acc(z: Mut[Tensor[f32, [16, 16]]]):
        x = ct.zeros((16, 32), f32).astype(f8e4m3fn)
        r = ct.mma_scaled(x, _scales((16, 1)), ct.zeros((32, 16), f32).astype(f8e4m3fn), _scales((1, 16)),  # mark
                          ct.zeros((16, 16), f16))
        z.store(r.astype(f32))

    _located(f16_acc, [z()], "the accumulator must be f32, got f16")

    @cutile.entry
    def scale_arithmetic(z: Mut[Tensor[f32, [16, 16]]]):
        z.store((_scales((16, 16)) * _scales((16, 16))).astype(f32))  # mark

    _located(scale_arithmetic, [z()], "f8e8m0fnu is a storage and scale format without arithmetic")

    @cutile.entry
    def scale_cast(z: Mut[Tensor[f32, [16, 16]]]):
        z.store(ct.zeros((16, 16), f32).astype(f8e8m0fnu).astype(f32))  # mark

    _located(scale_cast, [z()], "conversion to f8e8m0fnu is not supported")


def test_fp4_tensors_are_refused_at_the_signature() -> None:
    with pytest.raises(SignatureError, match=r"f4e2m1fn values pack two to a byte.*unpack_from_bytes"):
        @cutile.entry
        def kernel(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f4e2m1fn, [-1]]):
            z.store(x.load(index=(0,), shape=(64,)).astype(f32))


# -- byte views ----------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [f16, i32, f32], ids=str)
def test_pack_unpack_bytes(dtype: Any) -> None:
    @cutile.entry
    def kernel(z: Mut[Tensor[u8, ["B"]]], w: Mut[Tensor[dtype, ["C"]]], x: Tensor[dtype, [-1]], b: Tensor[u8, [-1]]):
        t = x.load(index=(ct.bid(0),), shape=(64,))
        z.store(ct.pack_to_bytes(ct.reshape(t, (8, 8))))
        w.store(ct.unpack_from_bytes(b.load(index=(ct.bid(0),), shape=(64 * dtype.itemsize,)), dtype))

    np_type = np.dtype(dtype.numpy_name)
    xs = RNG.integers(-1000, 1000, 256).astype(np_type)
    bs = RNG.integers(0, 256, 256 * np_type.itemsize).astype(np.uint8)
    z = api.full([256 * np_type.itemsize], 7, dtype=u8).partition([64 * np_type.itemsize])
    w = api.full([256], 3, dtype=dtype).partition([64])
    z, w, _, _ = kernel(z, w, api.from_numpy(xs), api.from_numpy(bs)).sync()
    np.testing.assert_array_equal(z.to_numpy(), xs.view(np.uint8))
    np.testing.assert_array_equal(w.to_numpy().view(np.uint8), bs)
    for arch in ("sm_90", "sm_100"):
        assert "pack" in cutile.compile(kernel, z, w, api.from_numpy(xs), api.from_numpy(bs), arch=arch).mlir


@pytest.mark.interpreter_only
def test_fp4_bytes_round_trip() -> None:
    @cutile.entry
    def kernel(z: Mut[Tensor[u8, ["B"]]], v: Mut[Tensor[f32, ["C"]]], b: Tensor[u8, [-1]]):
        values = ct.unpack_from_bytes(b.load(index=(ct.bid(0),), shape=(32,)), f4e2m1fn)
        v.store(values.astype(f32))
        z.store(ct.pack_to_bytes((values.astype(f32) * -1).astype(f4e2m1fn)))

    codes = RNG.integers(0, 16, 128).astype(np.uint8)
    z = api.full([64], 0, dtype=u8).partition([32])
    v = api.full([128], np.nan).partition([64])
    z, v, _ = kernel(z, v, api.from_numpy(pack_fp4(codes))).sync()
    np.testing.assert_array_equal(v.to_numpy(), decode_fp4(codes))
    np.testing.assert_array_equal(z.to_numpy(), pack_fp4(codes ^ 8))  # negation flips the sign bit
    compiled = cutile.compile(kernel, z, v, api.from_numpy(pack_fp4(codes)), arch="sm_100")
    assert "unpack" in compiled.mlir and "pack" in compiled.mlir
