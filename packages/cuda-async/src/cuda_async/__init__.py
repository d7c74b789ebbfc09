"""Lazy device operations, streams, scheduling, futures/asyncio and CUDA graphs.

Built on cuda_core only: a launch is a lazy DeviceOp that can be synchronised, awaited or captured into a CUDA graph, with cross-stream dependencies derived from the buffers each op holds.

Not built yet: this package holds only its skeleton until the issue
"cuda-async: lazy device operations, async/await, stream scheduling and CUDA graphs" fills it. It deliberately exports nothing, so that no code can come
to depend on a placeholder API.
"""

__all__: list[str] = []
