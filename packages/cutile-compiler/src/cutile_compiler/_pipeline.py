"""The whole compile of one specialization: front end, lowering, bytecode,
tileiras (through the disk cache), with dumps and timings on request.

    compiler = KernelCompiler(function, parse_signature(function))
    compiled = compiler.compile(spec, "sm_90", CompileOptions(opt_level=2))
    compiled.cubin, compiled.bytecode, compiled.mlir, compiled.abi

`KernelCompiler` is the entry a runtime uses: it keeps a kernel's typed IR and
compiled kernels in process (bounded, checked against what each compile read)
over the disk cache. `compile_kernel` is one uncached compile (disk cache aside).
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cutile_ir as ir

from cutile_compiler import _config
from cutile_compiler._cache import LRUCache, cached_compile
from cutile_compiler._errors import SourceLocation, TileCompilerError
from cutile_compiler._hints import KernelHints
from cutile_compiler._frontend import build_kernel_ir
from cutile_compiler._ir import KernelIR, format_kernel
from cutile_compiler._lowering import AbiArg, kernel_abi, lower_kernel
from cutile_compiler._signature import KernelSignature, Specialization
from cutile_compiler._source import capture
from cutile_compiler._toolchain import (
    DEFAULT_OPTIONS,
    CompileOptions,
    TileirasError,
    Toolchain,
    find_toolchain,
    first_error_location,
    parse_arch,
)

# Under the "cutile" logger, so that one setting silences every note of the stack.
_log = logging.getLogger("cutile.compiler")


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
    _log.warning("cutile: dumped %s of %s to %s", stage, kernel, path)


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
    # a warning when CUTILE_JIT_TIMING asks for it, else a debug record (as JAX's jax_log_compiles)
    level = logging.WARNING if _config.JIT_TIMING.get() else logging.DEBUG
    if _log.isEnabledFor(level):
        _log.log(level, "cutile: %s for %s: front end %.1f ms, %s %.1f ms", name, arch, timings["frontend"] * 1e3,
                 "disk cache" if hit else "tileiras", timings["tileiras"] * 1e3)
    return CompiledKernel(name, arch, kernel_abi(kernel_ir), kernel_ir, module, bytecode, version, cubin, hit, timings)


class KernelCompiler:
    """The compiler of one kernel: `compile` takes a specialization, an arch and
    compile options and returns its `CompiledKernel`.

    It owns the kernel's caches: in process, the typed IR per specialization and
    the compiled kernel per (specialization, arch, options), each kept while every
    global, closure variable and device function the compile read is unchanged
    (``ExternalReads.changed``) and bounded to ``cache_size`` entries, the least
    recently used going first; across processes, the disk cache (`compile_kernel`).

    Args:
        function: the kernel's Python function.
        signature: its `parse_signature`.
        unsafe: the kernel was declared ``unsafe`` (`build_kernel_ir`).
        hints: the kernel's own tileiras hints; a compile's options' hints take
            precedence over them, key by key.
        cache_size: specializations kept in each in-process cache.
    """

    def __init__(self, function: Any, signature: KernelSignature, *, unsafe: bool = False,
                 hints: KernelHints | None = None, cache_size: int = 256) -> None:
        self.function = function
        self.signature = signature
        self.unsafe = unsafe
        self.hints = hints if hints is not None else KernelHints()
        self.cache_size = cache_size
        self._ir: LRUCache[Specialization, KernelIR] = LRUCache(cache_size)
        self._compiled: LRUCache[tuple[Specialization, str, CompileOptions], CompiledKernel] = LRUCache(cache_size)

    def kernel_ir(self, spec: Specialization) -> KernelIR:
        """The typed IR of one specialization (built once, then kept while what it
        read is unchanged)."""
        cached = self._ir.get(spec)
        if cached is not None:
            changed = cached.reads.changed()
            if changed is None:
                return cached
            # a warning when CUTILE_JIT_TIMING asks for the compile notes (as JAX's jax_log_compiles)
            level = logging.WARNING if _config.JIT_TIMING.get() else logging.DEBUG
            _log.log(level, "cutile: %s: %s changed since it was compiled; compiling again",
                     self.function.__name__, changed)
        built = build_kernel_ir(self.function, self.signature, spec, unsafe=self.unsafe)
        self._ir.put(spec, built)
        return built

    def compile(self, spec: Specialization, arch: str, options: CompileOptions | None = None) -> CompiledKernel:
        """The kernel compiled for one specialization and ``arch`` (e.g. ``"sm_90"``)
        with ``options`` (default: `DEFAULT_OPTIONS`), under the kernel's hints:
        from the in-process cache, else through `compile_kernel` and the disk cache."""
        opts = options or DEFAULT_OPTIONS
        if self.hints:
            opts = dataclasses.replace(opts, hints=self.hints.merged(opts.hints))
        key = (spec, arch, opts)
        cached = self._compiled.get(key)
        if cached is not None and cached.kernel_ir.reads.changed() is None:
            return cached
        compiled = compile_kernel(self.function, self.signature, spec, arch, unsafe=self.unsafe,
                                  options=opts, kernel_ir=self.kernel_ir(spec))
        self._compiled.put(key, compiled)
        return compiled

    def clear(self) -> None:
        """Forgets every typed IR and compiled kernel kept in process (the disk
        cache stays)."""
        self._ir = LRUCache(self.cache_size)
        self._compiled = LRUCache(self.cache_size)
