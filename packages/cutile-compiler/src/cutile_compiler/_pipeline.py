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
import threading
import time
from pathlib import Path
from typing import Any

import cutile_ir as ir

from cutile_compiler import _config, _warm
from cutile_compiler._cache import LRUCache, cached_compile, default_disk_cache
from cutile_compiler._compiled import CompiledKernel as CompiledKernel
from cutile_compiler._errors import SourceLocation, TileCompilerError
from cutile_compiler._hints import KernelHints
from cutile_compiler._ir import KernelIR, format_kernel
from cutile_compiler._signature import KernelSignature, Specialization
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


# The stages, imported by their first use: a warm start (`_warm`) takes a compiled
# kernel from its manifest without the front end or the lowering.
def build_kernel_ir(function: Any, signature: KernelSignature, spec: Specialization, *,
                    unsafe: bool = False) -> KernelIR:
    """`_frontend.build_kernel_ir`."""
    from cutile_compiler._frontend import build_kernel_ir as build

    return build(function, signature, spec, unsafe=unsafe)


def lower_kernel(kernel: KernelIR, version: str, arch: str, hints: KernelHints | None, *,
                 dependent_launch: bool = False) -> ir.Module:
    """`_lowering.lower_kernel`."""
    from cutile_compiler._lowering import lower_kernel as lower

    return lower(kernel, version, arch, hints, dependent_launch=dependent_launch)


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
    """The tileiras to use for ``arch``, checked (a ``ToolchainError`` or ``ArchError``, both
    `TileCompilerError`s, when there is none). A malformed arch is refused before
    tileiras is looked for, so the error is the same on every machine."""
    parse_arch(arch)
    chain = find_toolchain()
    chain.check_arch(arch)
    return chain


#: seconds a tileiras compile runs before `compile_kernel` notes it (`_note_slow_compile`)
SLOW_COMPILE_NOTE_S = 2.0


def _note_slow_compile(name: str, arch: str) -> None:
    # A warning, the level Python's logging shows with no configuration: a user
    # waiting on a long first compile learns why (``logging.getLogger("cutile")``
    # set above WARNING silences it).
    _log.warning("cutile: compiling %s for %s\u2026", name, arch)


def _lower(kernel_ir: KernelIR, version: str, arch: str, options: CompileOptions | None) -> tuple[ir.Module, bytes]:
    """The Tile IR module of ``kernel_ir`` and its bytecode."""
    module = lower_kernel(kernel_ir, version, arch, options.hints if options is not None else None,
                          dependent_launch=options is not None and options.dependent_launch)
    try:
        bytecode = ir.write_bytecode(module, version)
    except ir.IRError as exc:
        raise TileCompilerError(f"internal error writing the bytecode of {kernel_ir.name}: {exc}",
                                kernel_ir.location) from exc
    return module, bytecode


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
        from cutile_compiler._source import capture

        _dump(name, spec, "ast", "ast.txt", ast.dump(capture(function).tree, indent=2, include_attributes=True))
    if "ir" in dump:
        _dump(name, spec, "ir", "ir.txt", format_kernel(kernel_ir))
    module, bytecode = _lower(kernel_ir, version, arch, options)
    timings["frontend"] = time.perf_counter() - start
    if "mlir" in dump:
        _dump(name, spec, "mlir", "mlir", ir.print_module(module))
    if "bytecode" in dump:
        _dump(name, spec, "bytecode", "tileirbc", bytecode)
    start = time.perf_counter()
    # A compile still running after SLOW_COMPILE_NOTE_S says so, once, while it runs.
    note = threading.Timer(SLOW_COMPILE_NOTE_S, _note_slow_compile, (name, arch))
    note.daemon = True
    note.start()
    try:
        entries = tuple(function.name for function in module.functions if function.entry)
        cubin, hit = cached_compile(bytecode, arch, chain, options, locations=_excerpt, entries=entries)
    except TileCompilerError as exc:  # the toolchain's message: mapped diagnostics, hints, the command
        raise exc.placed(f"kernel {name}", _failure_location(exc, kernel_ir)) from None
    finally:
        note.cancel()
    timings["tileiras"] = time.perf_counter() - start
    # a warning when CUTILE_JIT_TIMING asks for it, else a debug record (as JAX's jax_log_compiles)
    level = logging.WARNING if _config.JIT_TIMING.get() else logging.DEBUG
    if _log.isEnabledFor(level):
        _log.log(level, "cutile: %s for %s: front end %.1f ms, %s %.1f ms", name, arch, timings["frontend"] * 1e3,
                 "disk cache" if hit else "tileiras", timings["tileiras"] * 1e3)
    from cutile_compiler._lowering import kernel_abi

    return CompiledKernel(name, arch, kernel_abi(kernel_ir), cubin, version, hit, kernel_ir.reads, timings,
                          kernel_ir=kernel_ir, module=module, bytecode=bytecode)


class KernelCompiler:
    """The compiler of one kernel: `compile` takes a specialization, an arch and
    compile options and returns its `CompiledKernel`.

    It owns the kernel's caches: in process, the typed IR per specialization and
    the compiled kernel per (specialization, arch, options), each kept while every
    global, closure variable and device function the compile read is unchanged
    (``ExternalReads.changed``) and bounded to ``cache_size`` entries, the least
    recently used going first; across processes, the disk cache: a compile's
    manifest (`_warm`), keyed by the kernel's source, specialization, arch,
    options and toolchain, lets a new process whose reads give the same values
    take the cubin without the front end or lowering; else `compile_kernel`, whose
    cubins are keyed by bytecode.

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
        if cached is not None and cached.reads.changed() is None:
            return cached
        chain = toolchain_for(arch)
        manifest = self._manifest_key(spec, arch, opts, chain)
        compiled = self._warm_start(manifest, spec, arch, opts, chain) if manifest is not None else None
        if compiled is None:
            compiled = compile_kernel(self.function, self.signature, spec, arch, unsafe=self.unsafe,
                                      options=opts, kernel_ir=self.kernel_ir(spec))
            if manifest is not None:
                entries = tuple(function.name for function in compiled.module.functions if function.entry)
                _warm.store(manifest, self.function, compiled, chain, opts, entries)
        self._compiled.put(key, compiled)
        return compiled

    def _manifest_key(self, spec: Specialization, arch: str, options: CompileOptions, chain: Toolchain) -> str | None:
        """The key of this compile's warm-start manifest, or None when it has none:
        no disk cache, dumps asked for (they come from the stages a warm start
        skips), or a kernel whose inputs a new process could not tell apart."""
        if _config.DUMP.get() or default_disk_cache() is None:
            return None
        try:
            return _warm.manifest_key(self.function, self.signature, spec, arch, options, chain, self.unsafe)
        except _warm.NotWarmCacheable:
            return None

    def _warm_start(self, manifest: str, spec: Specialization, arch: str, options: CompileOptions,
                    chain: Toolchain) -> CompiledKernel | None:
        """The compiled kernel its manifest describes, if every read it records still
        holds in this process (no front end, no lowering); None: compile."""
        start = time.perf_counter()

        def rebuild() -> tuple[KernelIR, ir.Module, bytes]:
            kernel_ir = self.kernel_ir(spec)
            return (kernel_ir, *_lower(kernel_ir, "%d.%d" % chain.bytecode_version, arch, options))

        found = _warm.lookup(manifest, self.function, arch, default_disk_cache(), rebuild)
        if found is not None:
            found.timings["warm start"] = time.perf_counter() - start
            level = logging.WARNING if _config.JIT_TIMING.get() else logging.DEBUG
            if _log.isEnabledFor(level):
                _log.log(level, "cutile: %s for %s: warm start from the disk manifest, %.1f ms", found.name, arch,
                         found.timings["warm start"] * 1e3)
        return found

    def clear(self) -> None:
        """Forgets every typed IR and compiled kernel kept in process (the disk
        cache stays)."""
        self._ir = LRUCache(self.cache_size)
        self._compiled = LRUCache(self.cache_size)
