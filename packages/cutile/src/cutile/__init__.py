"""cutile: memory-safe, race-free GPU tile kernels in Python.

The user API: @cutile.entry kernels, tensors and partitions, ownership-checked launches, and the GPU and CPU-interpreter backends.

Not built yet: this package holds only its skeleton until the issue
"cutile: tensors, partitions, ownership-checked launches on the GPU, and the examples" fills it. It deliberately exports nothing, so that no code can come
to depend on a placeholder API.
"""

__all__: list[str] = []
