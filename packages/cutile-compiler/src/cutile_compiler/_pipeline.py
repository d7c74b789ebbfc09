"""The whole compile of one specialization: front end, lowering, bytecode,
tileiras (through the disk cache), with dumps and timings on request.

    compiled = compile_kernel(function, signature, spec, "sm_90")
    compiled.cubin, compiled.bytecode, compiled.mlir, compiled.abi
"""

from __future__ import annotations

import ast
import hashlib
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cutile_ir as ir

from cutile_compiler import _config
from cutile_compiler._cache import cached_compile
from cutile_compiler._errors import SourceLocation, TileCompilerError
from cutile_compiler._frontend import build_kernel_ir
from cutile_compiler._ir import KernelIR, format_kernel
from cutile_compiler._lowering import AbiArg, kernel_abi, lower_kernel
from cutile_compiler._signature import KernelSignature, Specialization
from cutile_compiler._source import capture
from cutile_compiler._toolchain import (
    CompileOptions,
    TileirasError,
    Toolchain,
    find_toolchain,
    first_error_location,
    parse_arch,
)


@dataclass
class CompiledKernel:
    """One kernel compiled for one specialization and GPU architecture."""

    name: str
    arch: str
    abi: tuple[AbiArg, ...]
    kernel_ir: KernelIR
    module: ir.Module
    bytecode: bytes
    bytecode_version: str
    cubin: bytes
    cache_hit: bool
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def mlir(self) -> str:
        """The Tile IR as MLIR text (as ``tileirdisasm`` prints it)."""
        return ir.print_module(self.module)

    @property
    def ir_text(self) -> str:
        """The typed kernel IR, readable."""
        return format_kernel(self.kernel_ir)

    def __repr__(self) -> str:
        return (f"<CompiledKernel {self.name} for {self.arch}: {len(self.bytecode)} bytes of bytecode "
                f"{self.bytecode_version}, {len(self.cubin)} bytes of cubin>")


def _excerpt(filename: str, line: int, column: int) -> str | None:
    text = SourceLocation(filename, line, max(column - 1, 0)).excerpt()
    return text or None


def _failure_location(exc: TileCompilerError, kernel_ir: KernelIR) -> SourceLocation | None:
    """Where a failed compile points: the op (or parameter) tileiras's first located
    error names, as the front end located it (the function it was inlined from, the
    extent of the expression), else the kernel's definition."""
    where = first_error_location(exc.stderr) if isinstance(exc, TileirasError) else None
    if where is None:
        return kernel_ir.location
    filename, line, column = where
    located = [*(p.location for p in kernel_ir.params), *(op.location for op in kernel_ir.walk())]
    for location in located:
        if location is not None and (location.filename, location.line, location.column + 1) == where:
            return location
    return SourceLocation(filename, line, max(column - 1, 0), None, kernel_ir.name)


def _dump(kernel: str, spec: Specialization, stage: str, suffix: str, content: str | bytes) -> None:
    directory = Path(_config.DUMP_DIR.get())
    directory.mkdir(parents=True, exist_ok=True)
    tag = hashlib.sha256(repr(spec).encode()).hexdigest()[:10]
    path = directory / f"{kernel}-{tag}.{suffix}"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    print(f"cutile: dumped {stage} of {kernel} to {path}", file=sys.stderr)


def toolchain_for(arch: str) -> Toolchain:
    """The tileiras to use for ``arch``, checked (a `ToolchainError` or `ArchError`, both
    `TileCompilerError`s, when there is none). A malformed arch is refused before
    tileiras is looked for, so the error is the same on every machine."""
    parse_arch(arch)
    chain = find_toolchain()
    chain.check_arch(arch)
    return chain


def compile_kernel(
    function: Any,
    signature: KernelSignature,
    spec: Specialization,
    arch: str,
    *,
    unsafe: bool = False,
    options: CompileOptions | None = None,
    kernel_ir: KernelIR | None = None,
) -> CompiledKernel:
    """Compiles one specialization of a kernel to a cubin for ``arch`` (e.g. "sm_90")."""
    timings: dict[str, float] = {}
    chain = toolchain_for(arch)
    version = "%d.%d" % chain.bytecode_version
    dump = _config.DUMP.get()
    start = time.perf_counter()
    if kernel_ir is None:
        kernel_ir = build_kernel_ir(function, signature, spec, unsafe=unsafe)
    name = kernel_ir.name
    if "ast" in dump:
        _dump(name, spec, "ast", "ast.txt", ast.dump(capture(function).tree, indent=2, include_attributes=True))
    if "ir" in dump:
        _dump(name, spec, "ir", "ir.txt", format_kernel(kernel_ir))
    module = lower_kernel(kernel_ir, version, arch, options.hints if options is not None else None)
    try:
        bytecode = ir.write_bytecode(module, version)
    except ir.IRError as exc:
        raise TileCompilerError(f"internal error writing the bytecode of {name}: {exc}", kernel_ir.location) from exc
    timings["frontend"] = time.perf_counter() - start
    if "mlir" in dump:
        _dump(name, spec, "mlir", "mlir", ir.print_module(module))
    if "bytecode" in dump:
        _dump(name, spec, "bytecode", "tileirbc", bytecode)
    start = time.perf_counter()
    try:
        entries = tuple(function.name for function in module.functions if function.entry)
        cubin, hit = cached_compile(bytecode, arch, chain, options, locations=_excerpt, entries=entries)
    except TileCompilerError as exc:  # the toolchain's message: mapped diagnostics, hints, the command
        raise exc.placed(f"kernel {name}", _failure_location(exc, kernel_ir)) from None
    timings["tileiras"] = time.perf_counter() - start
    if _config.JIT_TIMING.get():
        source = "disk cache" if hit else "tileiras"
        print(f"cutile: {name} for {arch}: front end {timings['frontend'] * 1e3:.1f} ms, "
              f"{source} {timings['tileiras'] * 1e3:.1f} ms", file=sys.stderr)
    return CompiledKernel(name, arch, kernel_abi(kernel_ir), kernel_ir, module, bytecode, version, cubin, hit, timings)
