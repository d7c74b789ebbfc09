"""The cutile kernel compiler: Python kernel -> typed kernel IR -> Tile IR -> cubin.

It captures a kernel's Python source, resolves and types it (`build_kernel_ir`),
lowers it to `cutile_ir` (`lower_kernel`), writes bytecode and runs NVIDIA's
tileiras for an arch string such as ``"sm_90"`` (`compile_kernel`; `parse_arch`
reads one), through an on-disk cache. It knows no driver: loading and launching belong to `cutile`.

The kernel language itself is `cutile_compiler.language` (re-exported by
``cutile.core``); every environment variable it reads is declared in `_config`.
"""

from cutile_compiler._errors import (
    CutileError,
    SourceLocation,
    TileCompilerError,
    TileError,
    TileSyntaxError,
    TileTypeError,
)
from cutile_compiler._frontend import build_kernel_ir
from cutile_compiler._ir import KernelIR, format_kernel
from cutile_compiler._lowering import AbiArg, kernel_abi, lower_kernel
from cutile_compiler._pipeline import CompiledKernel, compile_kernel
from cutile_compiler._signature import (
    KernelSignature,
    Specialization,
    TensorSpec,
    parse_signature,
    specialize,
)
from cutile_compiler._toolchain import ArchError, CompileOptions, Toolchain, find_toolchain, parse_arch
from cutile_ir import Arch

__all__ = [
    "AbiArg", "Arch", "ArchError", "CompileOptions", "CompiledKernel", "CutileError", "KernelIR", "KernelSignature",
    "SourceLocation", "Specialization", "TensorSpec", "TileCompilerError", "TileError", "TileSyntaxError",
    "TileTypeError", "Toolchain", "build_kernel_ir", "compile_kernel", "find_toolchain", "format_kernel",
    "kernel_abi", "lower_kernel", "parse_arch", "parse_signature", "specialize",
]
