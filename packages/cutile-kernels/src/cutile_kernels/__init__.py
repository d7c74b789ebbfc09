"""Reusable cutile kernels: GEMM family, elementwise, reductions, norms, attention.

Written with the public cutile API only. Functions, not kernels: each takes cutile
tensors or DLPack / CUDA Array Interface arrays (torch, CuPy; numpy on the
interpreter), returns the same kind (or writes ``out=``), and picks its tiles from
`cutile.tune` records with defaults; ``fn.launch(...)`` returns the pending work
instead of running it (for `cutile.bench.do_bench`, batches and graphs).

- `cutile_kernels.rope`: `rope` (neox and gptj, in place or out of place);
- `cutile_kernels.activations`: `silu_mul`, `gelu_mul`, `silu`, `gelu`, `sigmoid`,
  `relu`, and `add`, `sub`, `mul`, `div` with row broadcasting;
- `cutile_kernels.embedding`: `embedding`; `cutile_kernels.argmax`: `argmax`;
  `cutile_kernels.kv_cache`: `kv_cache_update`.
"""

__all__: list[str] = []

# -- transformer pointwise, gather and cache kernels (issue 16) --
from cutile_kernels.activations import add, div, gelu, gelu_mul, mul, relu, sigmoid, silu, silu_mul, sub
from cutile_kernels.argmax import argmax
from cutile_kernels.embedding import embedding
from cutile_kernels.kv_cache import kv_cache_update
from cutile_kernels.rope import rope

__all__ += ["add", "argmax", "div", "embedding", "gelu", "gelu_mul", "kv_cache_update", "mul", "relu", "rope",
            "sigmoid", "silu", "silu_mul", "sub"]
# -- end of the issue 16 block --


__version__ = "0.1.0"  # the distribution's version (tests/test_release.py keeps them equal)
