"""cutile: memory-safe, race-free GPU tile kernels in Python.

::

    import cutile
    from cutile import api
    from cutile.core import Tensor, Mut, f32, load_tile_like

    @cutile.entry
    def add(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]], y: Tensor[f32, [-1]]) -> None:
        z.store(load_tile_like(x, z) + load_tile_like(y, z))

    z = api.zeros([1024], dtype=f32).partition([128])
    z, x, y = add(z, api.ones([1024]), api.ones([1024])).sync()

Kernels run on the GPU where one is present, else on the CPU interpreter (which
says so once on stderr, as a warning of the ``cutile`` logger); ``CUTILE_BACKEND=interpreter``
forces the interpreter.
"""


from cutile import _startup  # noqa: F401  (first: it settles what the layers below load)
from cutile import api
from cutile._backend import BackendError
from cutile._backend import current as backend
from cutile._errors import (
    ArchError,
    ArgumentError,
    ArgumentTypeError,
    BatchError,
    ConfigError,
    CudaError,
    CudaLaunchError,
    CudaOutOfMemoryError,
    CutileError,
    GraphCaptureError,
    GraphUpdateError,
    HintError,
    HostCallError,
    InteropError,
    KernelRuntimeError,
    LaunchError,
    OwnershipError,
    SignatureError,
    SpecializationError,
    TensorIndexError,
    TileCompilerError,
    TileError,
    TileirasError,
    TileirasTimeoutError,
    TileSyntaxError,
    TileTypeError,
    ToolchainError,
)
from cutile_compiler import CompiledKernel
from cutile._entry import Kernel, compile, entry, function
from cutile._graphs import Graph, GraphScope, batch, dependent_launches, graph_scope
from cutile._launch import Launch, LaunchNeverRunWarning
from cutile._hold import hold
from cuda_async import zip  # launches are ops: cuda_async's zip takes them as they are
from cutile._tensor import Partition, Tensor
from cutile._schedule import OWNED
from cutile._device import current_device, device

__all__ = [
    "BackendError", "BatchError", "CompiledKernel", "CutileError", "GraphCaptureError", "GraphUpdateError", "Kernel", "KernelRuntimeError", "Launch", "LaunchError",
    "OwnershipError", "Partition", "SignatureError", "SpecializationError", "Tensor",
    "TileCompilerError", "TileError", "TileSyntaxError", "TileTypeError", "api", "backend",
    "Graph", "GraphScope", "batch", "compile", "dependent_launches", "entry", "function", "graph_scope", "hold", "zip",
]
__all__ += [
    "ArgumentError", "ArgumentTypeError", "TensorIndexError",
    "ArchError", "ConfigError", "CudaError", "CudaLaunchError", "CudaOutOfMemoryError", "HintError",
    "HostCallError", "InteropError", "LaunchNeverRunWarning", "TileirasError", "TileirasTimeoutError", "ToolchainError",
]
__all__ += ["OWNED", "current_device", "device"]
from cutile._errors import BenchError, StaleRecordError, TuneError  # noqa: E402 (cutile.bench and cutile.tune errors)
__all__ += ["BenchError", "StaleRecordError", "TuneError"]


__version__ = "0.1.0"  # the distribution's version (tests/test_release.py keeps them equal)

from cutile._torch_streams import install_dynamo_skips as _install_dynamo_skips  # noqa: E402

_install_dynamo_skips()  # torch.compile's tracer steps around cutile's code (imports no torch)
