# mypy: disable-error-code="untyped-decorator,no-untyped-def,valid-type,no-untyped-call"
# (kernel bodies in another library's DSL: untyped by nature)
"""The NVIDIA cuTile Python (``cuda.tile``) peer of the GEMM benchmark: the persistent,
grouped-order matmul of cuTile Python's samples (``samples/MatMul.py``), with the
tile shape, group size and worker-warp hint as parameters; for fp8 a twin that
multiplies the fp32 accumulator by the product of the per-tensor scales before the
cast to C's dtype.

Its configs (`CONFIGS`) are few; `best_config` times each on the case at hand and keeps
the fastest correct one. Importing this module imports ``cuda.tile`` (ImportError where
it is not installed).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import cuda.tile as ct

ConstInt = ct.Constant[int]


@dataclass(frozen=True)
class Config:
    tm: int
    tn: int
    tk: int
    group: int
    num_worker_warps: int | None  # None: the compiler's choice

    def __str__(self) -> str:
        warps = f" nww{self.num_worker_warps}" if self.num_worker_warps else ""
        return f"{self.tm}x{self.tn}x{self.tk} g{self.group}{warps}"


#: Per family: 128x256 tiles need 8 worker warps on sm_90 (4, the default, collapses them).
CONFIGS: dict[str, list[Config]] = {
    "wide_16bit": [Config(128, 128, 64, 8, None), Config(128, 256, 64, 8, 8)],
    "wide_fp8": [Config(128, 128, 128, 8, None), Config(128, 256, 128, 8, 8)],
    "narrow": [Config(16, 128, 128, 1, None), Config(64, 128, 64, 1, None)],
}


def family(m: int, itemsize: int) -> str:
    if m <= 64:
        return "narrow"
    return "wide_fp8" if itemsize == 1 else "wide_16bit"


def _tile_of(current, num_bid_m, num_bid_in_group, group):
    """The grouped order of the samples' swizzle_2d_from_bid: GROUP tiles down M, then along N."""
    group_id = current // num_bid_in_group
    first_bid_m = group_id * group
    group_size_m = min(num_bid_m - first_bid_m, group)
    bid_m = first_bid_m + (current % group_size_m)
    bid_n = (current % num_bid_in_group) // group_size_m
    return bid_m, bid_n


@ct.kernel
def persistent_matmul(A, B, C,
                      tm: ConstInt, tn: ConstInt, tk: ConstInt, group: ConstInt):
    """C = A @ B, fp32 accumulate (the samples' persistent_matmul_kernel)."""
    num_bid_m = ct.cdiv(A.shape[0], tm)
    num_bid_n = ct.cdiv(B.shape[1], tn)
    num_tiles_k = ct.num_tiles(A, axis=1, shape=(tm, tk))
    for current in range(ct.bid(0), num_bid_m * num_bid_n, ct.num_blocks(0)):
        bid_m, bid_n = _tile_of(current, num_bid_m, group * num_bid_n, group)
        accumulator = ct.full((tm, tn), 0, dtype=ct.float32)
        for k in range(num_tiles_k):
            a = ct.load(A, index=(bid_m, k), shape=(tm, tk), padding_mode=ct.PaddingMode.ZERO)
            b = ct.load(B, index=(k, bid_n), shape=(tk, tn), padding_mode=ct.PaddingMode.ZERO)
            accumulator = ct.mma(a, b, accumulator)
        ct.store(C, index=(bid_m, bid_n), tile=ct.astype(accumulator, C.dtype))


@ct.kernel
def persistent_scaled_matmul(A, B, C, S,
                             tm: ConstInt, tn: ConstInt, tk: ConstInt, group: ConstInt):
    """C = (A @ B) * S[0, 0], fp32 accumulate: the fp8 form (S a [1, 1] float32 array,
    loaded as a tile so the product stays fp32)."""
    num_bid_m = ct.cdiv(A.shape[0], tm)
    num_bid_n = ct.cdiv(B.shape[1], tn)
    num_tiles_k = ct.num_tiles(A, axis=1, shape=(tm, tk))
    scale = ct.load(S, index=(0, 0), shape=(1, 1))
    for current in range(ct.bid(0), num_bid_m * num_bid_n, ct.num_blocks(0)):
        bid_m, bid_n = _tile_of(current, num_bid_m, group * num_bid_n, group)
        accumulator = ct.full((tm, tn), 0, dtype=ct.float32)
        for k in range(num_tiles_k):
            a = ct.load(A, index=(bid_m, k), shape=(tm, tk), padding_mode=ct.PaddingMode.ZERO)
            b = ct.load(B, index=(k, bid_n), shape=(tk, tn), padding_mode=ct.PaddingMode.ZERO)
            accumulator = ct.mma(a, b, accumulator)
        ct.store(C, index=(bid_m, bid_n), tile=ct.astype(accumulator * scale, C.dtype))


_KERNELS: dict[tuple[bool, int | None], Any] = {}


def kernel_for(config: Config, scaled: bool) -> Any:
    """The kernel with the config's hints (each hint set has its own JIT cache)."""
    key = (scaled, config.num_worker_warps)
    if key not in _KERNELS:
        base = persistent_scaled_matmul if scaled else persistent_matmul
        _KERNELS[key] = base if config.num_worker_warps is None else \
            base.replace_hints(num_worker_warps=config.num_worker_warps)
    return _KERNELS[key]


def launcher(a: Any, b: Any, c: Any, scale: float | None, config: Config, sm_count: int) -> Any:
    """A callable that launches c = (a @ b) [* scale] on torch's current stream (read
    at each call, so a benchmark's stream is used)."""
    import torch

    m, n = c.shape
    tiles = ((m + config.tm - 1) // config.tm) * ((n + config.tn - 1) // config.tn)
    grid = (min(sm_count, tiles), 1, 1)
    kernel = kernel_for(config, scale is not None)
    constants = (config.tm, config.tn, config.tk, config.group)
    if scale is None:
        arguments: tuple[Any, ...] = (a, b, c, *constants)
    else:
        scale_tile = torch.full((1, 1), float(scale), device=c.device, dtype=torch.float32)
        arguments = (a, b, c, scale_tile, *constants)

    def launch() -> None:
        ct.launch(torch.cuda.current_stream(), grid, kernel, arguments)

    return launch
