"""Kernel-level optimization hints for tileiras, per GPU architecture.

A user writes them on the entry or per launch::

    @cutile.entry(hints={"sm_90": {"num_worker_warps": 8}, "occupancy": 1})
    gemm(z, x, y).compile_options(hints={"sm_100": {"num_ctas": 2}})

Top-level keys that are hint names apply to every architecture; a key holding a
dict names an architecture (``sm_XY``, read by `cutile_ir.parse_arch`, so a
malformed one is refused as everywhere else an arch is given) and holds hints for
it alone (they win over the general ones). The names, and what Tile IR calls them:

- ``num_ctas`` (``num_cta_in_cga``): CTAs per cluster, a power of two from 1 to 16;
- ``occupancy``: CTAs per SM the compiler should aim for, 1 to 32;
- ``num_worker_warps`` (``num_worker_warps_per_cta``): a power of two from 1 to 32, the
  values Tile IR 13.3+ takes. tileiras 13.4 builds the same cubin for 1, 2 and 4, and for
  8, 16 and 32, on sm_90 (an element-wise kernel and GEMM tiles of 64x64 to 128x256
  compared), and ignores it for GEMM tiles on sm_100; it needs 8 for 128x256 GEMM tiles
  on sm_90.

Hints only change the code tileiras generates, never a kernel's meaning; the
interpreter ignores them. They are part of the bytecode, hence of the cache key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import cutile_ir as ir
from cutile_compiler._errors import CutileError
from cutile_compiler._types import is_power_of_two

_NAMES = {"num_ctas": "num_cta_in_cga", "occupancy": "occupancy", "num_worker_warps": "num_worker_warps_per_cta"}

#: the ``num_worker_warps`` values Tile IR 13.3+ takes
WORKER_WARPS = (1, 2, 4, 8, 16, 32)

#: The architectures a module lowered for no particular arch carries hints for
#: (besides those the hints name): the targets cutile tests and ships for.
DEFAULT_ARCHS = ("sm_90", "sm_100")


class HintError(CutileError, ValueError):
    """Malformed kernel hints (raised where they are given; cutile reports them as the
    `SignatureError` of the entry or the `LaunchError` of the launch that gave them)."""


def _check(name: str, value: Any, where: str) -> int:
    if name not in _NAMES:
        raise HintError(f"{where}: unknown hint {name!r}; the hints are {', '.join(_NAMES)} "
                        "(per architecture: {'sm_90': {...}})")
    if isinstance(value, bool) or not isinstance(value, int):
        raise HintError(f"{where}: hint {name} must be an int, got {value!r}")
    if name == "num_ctas" and not (value <= 16 and is_power_of_two(value)):
        raise HintError(f"{where}: num_ctas must be a power of two from 1 to 16, got {value}")
    if name == "occupancy" and not 1 <= value <= 32:
        raise HintError(f"{where}: occupancy must be from 1 to 32, got {value}")
    if name == "num_worker_warps" and value not in WORKER_WARPS:
        raise HintError(f"{where}: num_worker_warps must be a power of two from 1 to 32, got {value}")
    return value


def _is_arch(key: object) -> bool:
    try:
        ir.parse_arch(key)
    except ir.ArchError:
        return False
    return True


@dataclass(frozen=True)
class KernelHints:
    """Hints as (arch or "", ((name, value), ...)) pairs; "" applies to every arch."""

    entries: tuple[tuple[str, tuple[tuple[str, int], ...]], ...] = ()

    @staticmethod
    def parse(hints: Mapping[str, Any] | KernelHints | None, where: str = "hints") -> KernelHints:
        if hints is None:
            return KernelHints()
        if isinstance(hints, KernelHints):
            return hints
        if not isinstance(hints, Mapping):
            raise HintError(f"{where} must be a dict, e.g. {{'sm_90': {{'num_worker_warps': 8}}}}, got {hints!r}")
        general: dict[str, int] = {}
        per_arch: dict[str, dict[str, int]] = {}
        for key, value in hints.items():
            if key in _NAMES or not (isinstance(value, Mapping) or _is_arch(key)):
                general[key] = _check(key, value, where)
                continue
            try:
                arch = str(ir.parse_arch(key, f"{where} key"))
            except ir.ArchError as exc:
                raise HintError(exc.message) from None
            if not isinstance(value, Mapping):
                raise HintError(f"{where}: the hints for {key} must be a dict, got {value!r}")
            per_arch[arch] = {n: _check(n, v, f"{where}[{key!r}]") for n, v in value.items()}
        entries = [("", tuple(sorted(general.items())))] if general else []
        entries += [(arch, tuple(sorted(values.items()))) for arch, values in sorted(per_arch.items()) if values]
        return KernelHints(tuple(entries))

    def archs(self) -> list[str]:
        return [arch for arch, _ in self.entries if arch]

    def values_for(self, arch: str) -> dict[str, int]:
        """The user's hints that apply to ``arch`` (its own over the general ones)."""
        merged: dict[str, int] = {}
        for key, values in self.entries:
            if key == "":
                merged.update(values)
        for key, values in self.entries:
            if key == arch:
                merged.update(values)
        return merged

    def target_archs(self, arch: str | None) -> list[str]:
        """The archs hints are written for: ``arch`` when known, else every arch the
        hints name and the `DEFAULT_ARCHS`."""
        return [arch] if arch else sorted({*self.archs(), *DEFAULT_ARCHS})

    def for_arch(self, arch: str | None) -> dict[str, dict[str, int]]:
        """Tile IR's entry hints: ``{arch: {tile_ir_name: value}}`` for each of the
        `target_archs` that some hint applies to."""
        result = {}
        for name in self.target_archs(arch):
            values = self.values_for(name)
            if values:
                result[name] = {_NAMES[k]: v for k, v in values.items()}
        return result

    def merged(self, over: KernelHints) -> KernelHints:
        """These hints with ``over``'s taking precedence, key by key."""
        table: dict[str, dict[str, int]] = {}
        for source in (self, over):
            for key, values in source.entries:
                table.setdefault(key, {}).update(values)
        return KernelHints(tuple((key, tuple(sorted(values.items()))) for key, values in sorted(table.items())))

    def __bool__(self) -> bool:
        return bool(self.entries)
