"""Reusable cutile kernels: GEMM family, elementwise, reductions, norms, attention.

Written with the public cutile API only.

Not built yet: no issue has taken this package on so far. Its starting point is the
kernel suite the compiler's tests check (packages/cutile-compiler/tests/suite_kernels.py:
tiled, persistent and split-K GEMM, batched matmul, softmax, RMSNorm, LayerNorm,
transpose, causal flash attention), which still needs per-shape tuning on a GPU before
it can be offered as a library. It deliberately exports nothing until then.
"""


__all__: list[str] = []


__version__ = "0.1.0"  # the distribution's version (tests/test_release.py keeps them equal)
