"""The start of the subprocess scripts that launch a 256-element add on the fake
driver (test_import_cost.py, test_gpu_host_path.py): imports, the kernel, and
``first_add(fake)``, which makes the first launch and tells the fake driver the
kernel's parameters. The kernel is defined before anything native is loaded."""

FAKE_ADD_PRELUDE = '''
import numpy as np
import cuda_async, cutile
from cuda_core.testing import use_fake_driver
from cutile import _backend, _gpu, _native, api
from cutile.core import Mut, Tensor, f32, load_tile_like

@cutile.entry
def add(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    z.store(load_tile_like(x, z) + load_tile_like(x, z))

def first_add(fake):
    """z, x and the first launch of add over them (not run), its kernel known to ``fake``."""
    x = api.from_numpy(np.ones(256, np.float32))
    z = api.empty([256], dtype=f32).partition([128])
    launch = add(z, x)
    compiled = add.compiled(launch.plan().spec, "sm_90")
    fake.kernels[compiled.name] = _gpu.fake_param_layout(compiled.abi)
    return z, x, launch
'''
