"""Reusable cutile kernels, written with the public cutile API only (safe kernels).

- `matmul(a, b, *, out=None, bias=None, activation=None, residual=None, alpha=1.0,
  scale_a=None, scale_b=None, out_dtype=None, accumulate_dtype=f32, allow_tf32=False)`:
  ``act(alpha * (a @ b) * scale_a * scale_b + bias) + residual`` for f16, bf16, f32 and
  fp8 (e4m3, e5m2) inputs, any strides, batched and broadcast-batched, on cutile tensors
  or any DLPack / CUDA Array Interface tensor; `matmul.launch(...)` gives the pending
  launch. Configs come from committed `cutile.tune` records per arch, else defaults.
- `GEMM_SPACE`: the tiled GEMM's tuning space (the keys a ``config=`` may set).
- Transformer pointwise, gather and cache functions, each with a ``.launch(...)`` form
  returning the pending work (for `cutile.bench.do_bench`): `rope` (neox and gptj, in
  place or out of place; module ``cutile_kernels.rope``); `silu_mul`, `gelu_mul`, `silu`,
  `gelu`, `sigmoid`, `relu`, and `add`, `sub`, `mul`, `div` with row broadcasting
  (``cutile_kernels.activations``); `embedding`; a two-stage `argmax`; `kv_cache_update`
  (``cutile_kernels.kv_cache``).
"""

from cutile_kernels._configs import SPACE as GEMM_SPACE
from cutile_kernels._matmul import Matmul, matmul

__all__ = ["GEMM_SPACE", "Matmul", "matmul"]

# -- transformer pointwise, gather and cache functions (issue 16) --
from cutile_kernels.activations import add, div, gelu, gelu_mul, mul, relu, sigmoid, silu, silu_mul, sub  # noqa: E402
from cutile_kernels.argmax import argmax  # noqa: E402
from cutile_kernels.embedding import embedding  # noqa: E402
from cutile_kernels.kv_cache import kv_cache_update  # noqa: E402
from cutile_kernels.rope import rope  # noqa: E402

__all__ += ["add", "argmax", "div", "embedding", "gelu", "gelu_mul", "kv_cache_update", "mul", "relu", "rope",
            "sigmoid", "silu", "silu_mul", "sub"]
# -- end of the issue 16 block --


__version__ = "0.1.0"  # the distribution's version (tests/test_release.py keeps them equal)
