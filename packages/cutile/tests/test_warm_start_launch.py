"""A new process's first launch of a kernel compiled by an earlier process: on the
GPU backend (a fake driver: no GPU needed) it launches the cached cubin without
running the front end, packing the same parameters as the process that compiled
it; the interpreter backend runs the kernel as always."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import cutile_compiler

pytestmark = pytest.mark.interpreter_only  # runs once: each case starts its own processes

KERNEL = '''
import cutile
from cutile.core import Mut, Tensor, f32, load_tile_like

OFFSET = 0.5


@cutile.function
def axpy(a, x, y):
    return a * x + y


@cutile.entry
def saxpy(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]], y: Tensor[f32, [-1]], a: f32):
    z.store(axpy(a, load_tile_like(x, z), load_tile_like(y, z)) + OFFSET)
'''

CHILD = '''
import json, os, struct, sys
sys.path.insert(0, sys.argv[1])
import numpy as np
import cutile_compiler
from cutile_compiler import _pipeline

runs = []
real = _pipeline.build_kernel_ir


def counting(*args, **kwargs):
    runs.append(1)
    return real(*args, **kwargs)


_pipeline.build_kernel_ir = counting
import cuda_async
import cutile
from cutile import _gpu, api
import warm_saxpy

rng = np.random.default_rng(7)
x_host, y_host = rng.standard_normal(1000).astype(np.float32), rng.standard_normal(1000).astype(np.float32)
if os.environ["CUTILE_BACKEND"] == "interpreter":
    x, y = api.from_numpy(x_host), api.from_numpy(y_host)
    z = api.empty([1000], dtype=cutile.core.f32)
    z, _, _ = warm_saxpy.saxpy(z.partition([128]), x, y, 1.5).sync()
    expected = 1.5 * x_host.astype(np.float64) + y_host + 0.5
    print(json.dumps({"error": float(np.max(np.abs(z.to_numpy() - expected)))}))
    sys.exit(0)

from cuda_core.testing import FakeDriver, use_fake_driver

fake = FakeDriver()
load = fake.cuModuleLoadData
plans = []


def registering_load(image):
    compiled = warm_saxpy.saxpy.compiled(plans[0].spec, "sm_90")  # in memory by now
    fake.kernels[compiled.name] = _gpu.fake_param_layout(compiled.abi)
    return load(image)


fake.cuModuleLoadData = registering_load
with use_fake_driver(fake), cuda_async.using_policy(cuda_async.SingleStream()):
    x, y = api.empty([1000], dtype=cutile.core.f32), api.empty([1000], dtype=cutile.core.f32)
    z = api.empty([1000], dtype=cutile.core.f32)
    launch = warm_saxpy.saxpy(z.partition([128]), x, y, 1.5)
    plans.append(launch.plan())
    launch.sync()
    compiled = warm_saxpy.saxpy.compiled(plans[0].spec, "sm_90")
    [done] = fake.launches
    params = [raw.hex() for arg, raw in zip(compiled.abi, done["params"]) if arg.kind != "pointer"]
    print(json.dumps({"warm": compiled.warm, "frontend": len(runs), "grid": list(done["grid"]),
                      "params": params, "abi": [[a.param, a.kind, a.axis] for a in compiled.abi]}))
    del launch, x, y, z
'''


def run_child(folder: Path, backend: str) -> dict[str, Any]:
    env = {**os.environ, "CUTILE_BACKEND": backend}
    done = subprocess.run([sys.executable, str(folder / "child.py"), str(folder)], capture_output=True, text=True,
                          timeout=300, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_a_new_process_launches_the_cached_kernel_without_the_front_end(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    try:  # tileiras is needed to compile (not a GPU: the child runs on the fake driver)
        cutile_compiler.find_toolchain()
    except cutile_compiler.ToolchainError as exc:
        pytest.skip(f"no usable tileiras here: {exc}")
    monkeypatch.setenv("CUTILE_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "warm_saxpy.py").write_text(KERNEL)
    (tmp_path / "child.py").write_text(CHILD)
    cold = run_child(tmp_path, "gpu")
    assert not cold["warm"] and cold["frontend"] == 1
    warm = run_child(tmp_path, "gpu")
    assert warm["warm"] and warm["frontend"] == 0
    assert warm["params"] == cold["params"] and warm["grid"] == cold["grid"] == [8, 1, 1]
    assert warm["abi"] == cold["abi"]
    # the interpreter backend, with the manifest on disk, runs the kernel from its source
    assert run_child(tmp_path, "interpreter")["error"] < 1e-5
