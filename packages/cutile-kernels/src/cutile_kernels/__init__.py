"""Reusable cutile kernels: GEMM family, elementwise, reductions, norms, attention.

Written with the public cutile API only.

Not built yet: this package holds only its skeleton until the issue
"cutile: tensors, partitions, ownership-checked launches on the GPU, and the examples" fills it. It deliberately exports nothing, so that no code can come
to depend on a placeholder API.
"""

__all__: list[str] = []
