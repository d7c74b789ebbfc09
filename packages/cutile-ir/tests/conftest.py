"""Fixtures locating NVIDIA's Tile IR tools (tileiras, tileirdisasm) for the oracle tests."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass(frozen=True)
class Toolchain:
    tileiras: Path
    tileirdisasm: Path

    @property
    def home(self) -> Path:
        # nvidia/cu13/bin/tileiras -> nvidia/cu13 (ptxas in bin/, libnvvm in lib/ or nvvm/)
        return self.tileiras.parent.parent

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["CUDA_HOME"] = str(self.home)
        return env

    def disasm(self, path: Path, timeout: float = 120, debug: bool = False) -> subprocess.CompletedProcess[str]:
        cmd = [str(self.tileirdisasm), *(["-g"] if debug else []), str(path)]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=self.env())

    def compile(self, path: Path, arch: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        out = path.with_suffix(f".{arch}.cubin")
        return subprocess.run([str(self.tileiras), str(path), "-o", str(out), "--gpu-name", arch],
                              capture_output=True, text=True, timeout=timeout, env=self.env())


def _find(disassembler: bool = True) -> Toolchain | None:
    env = os.environ.get("CUTILE_TILEIRAS")
    candidates: list[Path] = []
    if env:
        candidates.append(Path(env).parent)
    spec = importlib.util.find_spec("nvidia")
    if spec is not None and spec.submodule_search_locations:
        for loc in spec.submodule_search_locations:
            candidates.append(Path(loc) / "cu13" / "bin")
    which = shutil.which("tileiras")
    if which:
        candidates.append(Path(which).parent)
    for d in candidates:
        ras, dis = d / "tileiras", d / "tileirdisasm"
        if ras.exists() and (dis.exists() or not disassembler):
            return Toolchain(ras, dis)
    return None


@pytest.fixture(scope="session")
def toolchain() -> Toolchain:
    tc = _find()
    if tc is None:
        pytest.skip("NVIDIA tileiras/tileirdisasm not found (set CUTILE_TILEIRAS or install nvidia-cuda-tileiras)")
    return tc


@pytest.fixture(scope="session")
def compiler() -> Toolchain:
    """tileiras alone (its ``tileirdisasm`` may be missing): for tests that only compile."""
    tc = _find(disassembler=False)
    if tc is None:
        pytest.skip("NVIDIA tileiras not found (set CUTILE_TILEIRAS or install nvidia-cuda-tileiras)")
    return tc
