"""What the GPU benchmark scripts share: their start (``--smoke`` on the CPU
interpreter, else the GPU), optional peers, dtypes by their short names, the
device-to-device copy that is their bandwidth ceiling, and the two sides their
tensors live on: `TorchTensors` on the GPU, `InterpreterTensors` (cutile tensors,
numpy references) for ``--smoke``; a table of bandwidths timed by `cutile.bench.do_bench`."""

import math
import os
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

#: torch's dtype of each short name the scripts take
TORCH_DTYPES = {"f32": "float32", "bf16": "bfloat16", "f16": "float16", "fp8": "float8_e4m3fn", "i64": "int64"}


def choose_backend(smoke: bool) -> None:
    """``--smoke`` runs on the CPU interpreter: said before cutile is imported."""
    if smoke:
        os.environ["CUTILE_BACKEND"] = "interpreter"


def lacks_gpu(script: str, smoke: bool, without: str = "--smoke runs on the interpreter") -> bool:
    """True, having said so on stderr, when ``script`` needs a GPU (not ``--smoke``)
    and cutile's backend is not the GPU's."""
    import cutile

    if smoke or cutile.backend() == "gpu":
        return False
    print(f"{script} needs a GPU ({without})", file=sys.stderr)
    return True


def optional(module: str) -> Any:
    """The module where it imports (a benchmark peer, never a dependency), else None."""
    try:
        return __import__(module)
    except ImportError:
        return None


def torch_dtype(torch: Any, name: str) -> Any:
    return getattr(torch, TORCH_DTYPES[name])


def numpy_dtype(name: str) -> Any:
    """numpy's dtype of a short name (bf16 and fp8 from ml_dtypes)."""
    import ml_dtypes

    return {"f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16, "fp8": ml_dtypes.float8_e4m3fn,
            "i64": np.int64}[name]


def torch_copy(torch: Any, moved: int) -> Callable[[], Any]:
    """A device-to-device copy (torch's ``copy_``) that moves ``moved`` bytes: half of
    them read, half written. Its buffers live as long as the function."""
    source = torch.empty(max(1, moved // 2), device="cuda", dtype=torch.uint8)
    target = torch.empty_like(source)
    return lambda: target.copy_(source)


class BandwidthTable:
    """Rows of (label, implementation, ms, GB/s) timed by `cutile.bench.do_bench`, and
    ratio rows (ms NaN, the ratio in the last column), printed as one table."""

    def __init__(self, *, warmup: int, reps: int) -> None:
        self.warmup, self.reps = warmup, reps
        self.rows: list[tuple[str, str, float, float]] = []

    def timed(self, label: str, implementation: str, moved: int, fn: Callable[[], Any]) -> float:
        """Times ``fn`` and gives its GB/s (``moved`` bytes over the median)."""
        from cutile import bench

        ms = bench.do_bench(fn, warmup=self.warmup, reps=self.reps).median_ms
        gbs = moved / ms / 1e6
        self.rows.append((label, implementation, ms, gbs))
        return gbs

    def ratio(self, label: str, what: str, value: float) -> None:
        self.rows.append((label, what, math.nan, value))

    def print(self, first: str, width: int) -> None:
        """The table: ``first`` heads the labels' column, ``width`` the implementations'."""
        print(f"{first:48s} {'implementation':{width}s} {'ms':>10s} {'GB/s':>9s}")
        for label, implementation, ms, gbs in self.rows:
            if math.isnan(ms):
                print(f"{label:48s} {implementation:{width}s} {'':>10s} {gbs:8.3f}x")
            else:
                print(f"{label:48s} {implementation:{width}s} {ms:10.4f} {gbs:9.1f}")


class InterpreterTensors:
    """``--smoke``: cutile tensors on the interpreter (references in numpy float64)."""

    def __init__(self, seed: int = 1) -> None:
        from cutile import api

        self.api = api
        self.rng = np.random.default_rng(seed)

    def randn(self, shape: tuple[int, ...], dtype: str) -> Any:
        return self.api.from_numpy(self.rng.standard_normal(shape).astype(np.float32), dtype)

    def empty(self, shape: tuple[int, ...], dtype: str) -> Any:
        """Poisoned: NaN (-1 for ints), so that an element never written shows."""
        return self.api.full(list(shape), -1 if dtype == "i64" else np.nan, dtype=dtype)

    def nbytes(self, t: Any) -> int:
        return int(t.nbytes)

    def copy_of(self, moved: int) -> Callable[[], Any]:
        """A copy moving ``moved`` bytes (read + written)."""
        source = self.api.zeros([max(1, moved // 8)], dtype="f32")
        return lambda: self.api.copy(source)

    def release(self) -> None:
        pass


class TorchTensors:
    """On the GPU: torch tensors (cutile_kernels takes them through DLPack)."""

    def __init__(self, torch: Any, seed: int = 1) -> None:
        self.torch = torch
        self.generator = torch.Generator(device="cuda").manual_seed(seed)

    def dtype(self, name: str) -> Any:
        return torch_dtype(self.torch, name)

    def randn(self, shape: tuple[int, ...], dtype: str) -> Any:
        return self.torch.randn(shape, device="cuda", generator=self.generator, dtype=self.dtype(dtype))

    def empty(self, shape: tuple[int, ...], dtype: str) -> Any:
        """Poisoned: NaN (-1 for ints), so that an element never written shows."""
        fill = -1 if dtype == "i64" else float("nan")
        return self.torch.full(shape, fill, device="cuda", dtype=self.dtype(dtype))

    def nbytes(self, t: Any) -> int:
        return int(t.numel() * t.element_size())

    def copy_of(self, moved: int) -> Callable[[], Any]:
        return torch_copy(self.torch, moved)

    def release(self) -> None:
        """Between shapes: give torch's cached memory back."""
        self.torch.cuda.empty_cache()
