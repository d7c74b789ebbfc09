"""The cutile kernel compiler: Python kernel -> typed kernel IR -> Tile IR -> cubin.

It captures a kernel's Python source, resolves and types it (`build_kernel_ir`),
lowers it to `cutile_ir` (`lower_kernel`), writes bytecode and runs NVIDIA's
tileiras for an arch string such as ``"sm_90"`` (`compile_kernel`; `parse_arch`
reads one), through an on-disk cache. It knows no driver: loading and launching belong to `cutile`.

This module is the compiler's public surface, the one the layers above use (the
``_``-prefixed modules are its implementation; ``tests/test_layering.py`` checks
that no other package imports them). Its groups:

- compiling: `KernelCompiler` (one kernel's compiler: ``compile(spec, arch,
  options)`` returns a `CompiledKernel`, and it owns the in-process caches over
  the disk cache), `compile_kernel`, `CompileOptions`, `DEFAULT_OPTIONS`,
  `KernelHints`, `Toolchain`, `find_toolchain`, and the stages `build_kernel_ir`,
  `lower_kernel`, `kernel_abi` (`AbiArg`), `format_kernel`, `reads_before_wait` (what a
  dependent launch reads before its wait);
- signatures: `parse_signature` (`KernelSignature`), `specialize`
  (`Specialization`, `TensorSpec`), the annotations `TensorAnnotation`,
  `ConstantAnnotation` and `make_tensor_annotation`, `constant_key`,
  `MAX_DIVISIBILITY`, `DeviceFunction` (``@cutile.function``);
- dtypes: `DType`, `numpy_dtype`, and the whole table in `cutile_compiler.dtypes`;
  the tile-shape rules `is_power_of_two` and `tile_shape_problem`;
- the typed kernel IR, for the interpreter and other tools that walk it:
  `KernelIR`, `Block`, `Operation`, `Value`, `TileType`, `OpDef` (an op's
  ``lanewise`` flag), `Select`, and what an op's numpy meaning raises or returns
  (`Terminator`, `Escape`, `IntegerDivisionByZero`);
- errors: `CutileError` and every subclass the compiler raises;
- utilities: `LRUCache` (bounded, thread-safe; the runtime's launch caches use it);
  `disk_caches` (the on-disk caches, `DiskCache` each, by kind: `CACHE_KINDS`), for
  tools that list, trim or clear them.

The kernel language itself is `cutile_compiler.language` (re-exported by
``cutile.core``); every environment variable the compiler reads is a `Knob` of
`cutile_compiler.config`.
"""


from typing import TYPE_CHECKING, Any

# The public names, declared once: imported here by static tools, and on first use
# by `__getattr__` below, so that importing the compiler costs only the modules its
# user touches (the front end, the lowering and cutile_ir's builder load with the
# first compile).
if TYPE_CHECKING:
    from cutile_compiler._device_function import DeviceFunction
    from cutile_compiler._cache import CACHE_KINDS, DiskCache, LRUCache, disk_caches
    from cutile_compiler._config import ConfigError
    from cutile_compiler._errors import (
        ArgumentError,
        ArgumentTypeError,
        CutileError,
        HostCallError,
        SourceLocation,
        TensorIndexError,
        TileCompilerError,
        TileError,
        TileSyntaxError,
        TileTypeError,
    )
    from cutile_compiler._frontend import build_kernel_ir
    from cutile_compiler._hints import WORKER_WARPS, HintError, KernelHints
    from cutile_compiler._ir import Block, KernelIR, Operation, Value, format_kernel
    from cutile_compiler._lowering import kernel_abi, lower_kernel, reads_before_wait
    from cutile_compiler._opdefs import Escape, IntegerDivisionByZero, OpDef, Terminator
    from cutile_compiler._opdefs.elementwise import Select
    from cutile_compiler._dtypes import numpy_dtype
    from cutile_compiler._compiled import AbiArg, CompiledKernel
    from cutile_compiler._pipeline import KernelCompiler, compile_kernel
    from cutile_compiler._signature import (
        MAX_DIVISIBILITY,
        OWNED_AXIS,
        ConstantAnnotation,
        KernelSignature,
        SignatureError,
        Specialization,
        SpecializationError,
        TensorAnnotation,
        TensorSpec,
        constant_key,
        make_tensor_annotation,
        parse_signature,
        specialize,
    )
    from cutile_compiler._toolchain import (
        DEFAULT_OPTIONS,
        ArchError,
        CompileOptions,
        TileirasError,
        TileirasTimeoutError,
        Toolchain,
        ToolchainError,
        find_toolchain,
        parse_arch,
    )
    from cutile_ir import Arch
    from cutile_compiler._dtypes import DType
    from cutile_compiler._types import TileType, is_power_of_two, tile_shape_problem
    from cutile_compiler import config, dtypes

__all__ = [
    # compiling
    "AbiArg", "Arch", "CompileOptions", "CompiledKernel", "DEFAULT_OPTIONS", "KernelCompiler", "KernelHints", "Toolchain",
    "WORKER_WARPS",
    "build_kernel_ir", "compile_kernel", "find_toolchain", "format_kernel", "kernel_abi", "lower_kernel", "parse_arch",
    "reads_before_wait",
    # signatures and specializations
    "ConstantAnnotation", "DeviceFunction", "KernelSignature", "MAX_DIVISIBILITY", "OWNED_AXIS", "Specialization",
    "TensorAnnotation", "TensorSpec", "constant_key", "make_tensor_annotation", "parse_signature", "specialize",
    # dtypes and tile shapes
    "DType", "dtypes", "is_power_of_two", "numpy_dtype", "tile_shape_problem",
    # the typed kernel IR
    "Block", "Escape", "IntegerDivisionByZero", "KernelIR", "OpDef", "Operation", "Select", "Terminator",
    "TileType", "Value",
    # errors
    "ArchError", "ArgumentError", "ArgumentTypeError", "ConfigError", "CutileError", "HintError", "HostCallError",
    "SignatureError", "SourceLocation", "SpecializationError", "TensorIndexError", "TileCompilerError", "TileError",
    "TileSyntaxError", "TileTypeError", "TileirasError", "TileirasTimeoutError", "ToolchainError",
    # configuration and utilities
    "CACHE_KINDS", "DiskCache", "LRUCache", "config", "disk_caches",
]


__version__ = "0.1.0"  # the distribution's version (tests/test_release.py keeps them equal)


if not TYPE_CHECKING:  # (static tools see the imports above, not a catch-all __getattr__)
    from cutile_compiler._lazy import exported as _exported, lazy_exports as _lazy_exports

    _EXPORTS = _lazy_exports(__name__, __file__)

    def __getattr__(name: str) -> Any:
        return _exported(globals(), _EXPORTS, name)

    def __dir__() -> list[str]:
        return sorted({*globals(), *__all__})
