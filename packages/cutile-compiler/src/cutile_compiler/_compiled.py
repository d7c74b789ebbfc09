"""`CompiledKernel`: what a compile gives back, a cubin with what a launch needs
(its entry's parameters, `AbiArg` each).

Its own module, apart from the compiler's stages, so that the runtime names the
types (and `cutile` exports them) and a warm start rebuilds one from its manifest
without importing the front end or the lowering.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

import cutile_ir as ir

from cutile_compiler import _dtypes as dt
from cutile_compiler._ir import KernelIR, format_kernel
from cutile_compiler._reads import ExternalReads


@dataclass(frozen=True)
class AbiArg:
    """One scalar the kernel entry takes: a tensor's base pointer, one of its
    run-time dims or strides (i32, in elements), or a scalar parameter."""

    param: str
    kind: str  # "pointer" | "dim" | "stride" | "scalar"
    axis: int = -1
    dtype: dt.DType | None = None


class CompiledKernel:
    """One kernel compiled for one specialization and GPU architecture.

    What a launch needs is always here: ``name`` (the entry), ``arch``, ``abi``,
    ``cubin`` and ``reads`` (what the compile read from outside its arguments, still
    holding while ``reads.changed()`` is None). One found by a warm start
    (``warm``: from its disk manifest, see `_warm`) builds its ``kernel_ir``,
    ``module`` and ``bytecode`` again only when they are asked for.
    """

    def __init__(self, name: str, arch: str, abi: tuple[AbiArg, ...], cubin: bytes, bytecode_version: str,
                 cache_hit: bool, reads: ExternalReads, timings: dict[str, float] | None = None, *,
                 kernel_ir: KernelIR | None = None, module: ir.Module | None = None, bytecode: bytes | None = None,
                 rebuild: Callable[[], tuple[KernelIR, ir.Module, bytes]] | None = None,
                 warm: bool = False) -> None:
        self.name = name
        self.arch = arch
        self.abi = abi
        self.cubin = cubin
        self.bytecode_version = bytecode_version
        self.cache_hit = cache_hit
        self.reads = reads
        self.timings = timings if timings is not None else {}
        self.warm = warm
        self._built = (kernel_ir, module, bytecode) if kernel_ir is not None and module is not None \
            and bytecode is not None else None
        self._rebuild = rebuild
        self._lock = threading.Lock()

    def _stages(self) -> tuple[KernelIR, ir.Module, bytes]:
        with self._lock:
            if self._built is None:
                assert self._rebuild is not None, "a CompiledKernel has its IR or a way to build it"
                self._built = self._rebuild()
            return self._built

    @property
    def kernel_ir(self) -> KernelIR:
        """The typed kernel IR (built again on first use for a warm-started kernel)."""
        return self._stages()[0]

    @property
    def module(self) -> ir.Module:
        """The Tile IR module (`cutile_ir`)."""
        return self._stages()[1]

    @property
    def bytecode(self) -> bytes:
        """The Tile IR bytecode given to tileiras."""
        return self._stages()[2]

    @property
    def mlir(self) -> str:
        """The Tile IR as MLIR text (as ``tileirdisasm`` prints it)."""
        return ir.print_module(self.module)

    @property
    def reads_before_wait(self) -> tuple[str, ...]:
        """The tensor parameters the kernel reads before the grid-dependency wait it
        places (`_lowering.reads_before_wait`): in a dependent launch their memory
        must be frozen."""
        found: tuple[str, ...] | None = getattr(self, "_reads_before_wait", None)
        if found is None:
            from cutile_compiler._lowering import reads_before_wait

            found = self._reads_before_wait = reads_before_wait(self.kernel_ir)
        return found

    @property
    def ir_text(self) -> str:
        """The typed kernel IR, readable."""
        return format_kernel(self.kernel_ir)

    def __repr__(self) -> str:
        return (f"<CompiledKernel {self.name} for {self.arch}: bytecode {self.bytecode_version}, "
                f"{len(self.cubin)} bytes of cubin{' (warm start)' if self.warm else ''}>")
