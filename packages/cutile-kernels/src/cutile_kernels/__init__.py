"""Reusable cutile kernels: GEMM family, elementwise, reductions, norms, attention.

Written with the public cutile API only.

Not built yet: no issue has taken this package on so far. Its starting point is the
kernel suite the compiler's tests check (packages/cutile-compiler/tests/suite_kernels.py:
tiled, persistent and split-K GEMM, batched matmul, softmax, RMSNorm, LayerNorm,
transpose, causal flash attention), which still needs per-shape tuning on a GPU before
it can be offered as a library. It deliberately exports nothing until then.
"""

from typing import TYPE_CHECKING

__all__: list[str] = []


__version__: str  # the distribution's version, read on first use (`cutile_kernels._version`)

if not TYPE_CHECKING:
    def __getattr__(name: str) -> str:
        if name == "__version__":
            from cutile_kernels._version import package_version

            globals()["__version__"] = version = package_version()
            return version
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
