"""Reusable cutile kernels, written with the public cutile API only (safe kernels).

- `matmul(a, b, *, out=None, bias=None, activation=None, residual=None, alpha=1.0,
  scale_a=None, scale_b=None, out_dtype=None, accumulate_dtype=f32, allow_tf32=False)`:
  ``act(alpha * (a @ b) * scale_a * scale_b + bias) + residual`` for f16, bf16, f32 and
  fp8 (e4m3, e5m2) inputs, any strides, batched and broadcast-batched, on cutile tensors
  or any DLPack / CUDA Array Interface tensor; `matmul.launch(...)` gives the pending
  launch. Configs come from committed `cutile.tune` records per arch, else defaults.
- `GEMM_SPACE`: the tiled GEMM's tuning space (the keys a ``config=`` may set).
"""

from cutile_kernels._configs import SPACE as GEMM_SPACE
from cutile_kernels._matmul import Matmul, matmul

__all__ = ["GEMM_SPACE", "Matmul", "matmul"]


__version__ = "0.1.0"  # the distribution's version (tests/test_release.py keeps them equal)
