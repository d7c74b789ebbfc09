"""Reusable cutile kernels, written with the public cutile API only (safe kernels).

Functions, not kernels: each takes cutile tensors or any DLPack / CUDA Array Interface
tensor, returns the same kind (or writes ``out=``), handles any shape, and takes its
tile shapes and hints from `cutile.tune` records (else defaults).

- `matmul(a, b, *, out=None, bias=None, activation=None, residual=None, alpha=1.0,
  scale_a=None, scale_b=None, out_dtype=None, accumulate_dtype=f32, allow_tf32=False)`:
  ``act(alpha * (a @ b) * scale_a * scale_b + bias) + residual`` for f16, bf16, f32 and
  fp8 (e4m3, e5m2) inputs, any strides, batched and broadcast-batched;
  `matmul.launch(...)` gives the pending launch. At most 16 rows go to a GEMV kernel
  that streams the weight once, few output tiles over a long K to a split-K pair of
  kernels, the rest to a persistent grouped GEMM.
- `GEMM_SPACE`: the tiled GEMM's tuning space (the keys a ``config=`` may set).
- Row kernels: `softmax`, `log_softmax`, `rms_norm`, `add_rms_norm`, `qk_norm` (q and
  k in one launch), `qk_norm_rope` (the same with RoPE fused), `qk_norm_rope_cache`
  (the same, writing the rotated keys and the values into a KV cache too), `layer_norm`,
  `layer_norm_backward` (``f.launch(..., out=)`` gives the pending launch);
  `default_config` is their config without a record (but softmax's rows longer than
  a tile, which take chunks of 32 KiB, one block an SM, and layer_norm's 16-bit tiles
  of 8192 elements, 4 worker warps and 4 blocks an SM).
- Transformer pointwise, gather and cache functions, each with a ``.launch(...)`` form
  returning the pending work (for `cutile.bench.do_bench`): `rope` (neox and gptj, in
  place or out of place); `silu_mul`, `gelu_mul`, `silu`, `gelu`, `sigmoid`, `relu`, and
  `add`, `sub`, `mul`, `div` with row broadcasting; `embedding`; a two-stage `argmax`
  and `top_k`; `kv_cache_update`.
- `attention(q, k, v, *, causal=False, scale=None, out=None, cu_seqlens_q=None,
  cu_seqlens_k=None)`: flash attention forward (SDPA's layout, or packed variable
  lengths through offsets), GQA, f16/bf16, head_dim 64/128; ``attention.launch(..., out=)``.
- `decode_attention(q, k_cache, v_cache, seq_lens, *, scale=None, out=None)`: one new
  token per sequence against its KV cache, GQA, in one launch or split over the context
  with a log-sum-exp merge; ``decode_attention.launch(..., out=)`` gives the pending op.
"""

from cutile_kernels._configs import SPACE as GEMM_SPACE
from cutile_kernels._matmul import Matmul, matmul

__all__ = ["GEMM_SPACE", "Matmul", "matmul"]

# Row kernels: softmax and the norms (_softmax.py, _norms.py; shared handling in _rows.py).
from cutile_kernels._rows import default_config  # noqa: E402
from cutile_kernels._norms import add_rms_norm, layer_norm, layer_norm_backward, rms_norm  # noqa: E402
from cutile_kernels._qk_norm import qk_norm, qk_norm_rope  # noqa: E402
from cutile_kernels._qk_norm_cache import qk_norm_rope_cache  # noqa: E402
from cutile_kernels._softmax import log_softmax, softmax  # noqa: E402

__all__ += ["add_rms_norm", "default_config", "layer_norm", "layer_norm_backward", "log_softmax", "qk_norm",
            "qk_norm_rope", "qk_norm_rope_cache", "rms_norm", "softmax"]

# Transformer pointwise, gather and cache functions (shared handling in _pointwise.py).
from cutile_kernels._activations import add, div, gelu, gelu_mul, mul, relu, sigmoid, silu, silu_mul, sub  # noqa: E402
from cutile_kernels._argmax import argmax  # noqa: E402
from cutile_kernels._embedding import embedding  # noqa: E402
from cutile_kernels._kv_cache import kv_cache_update  # noqa: E402
from cutile_kernels._rope import rope  # noqa: E402
from cutile_kernels._top_k import top_k  # noqa: E402

__all__ += ["add", "argmax", "div", "embedding", "gelu", "gelu_mul", "kv_cache_update", "mul", "relu", "rope",
            "sigmoid", "silu", "silu_mul", "sub", "top_k"]

# Attention.
from cutile_kernels._attention import attention  # noqa: E402
from cutile_kernels._decode_attention import decode_attention  # noqa: E402

__all__ += ["attention", "decode_attention"]


__version__ = "0.1.0"  # the distribution's version (tests/test_release.py keeps them equal)
