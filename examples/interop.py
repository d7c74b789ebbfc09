"""Zero-copy exchange with PyTorch (or, without PyTorch, numpy).

A kernel reads PyTorch tensors and writes into a PyTorch tensor's memory, and
PyTorch reads a cutile tensor back, all without copies (DLPack). On a machine
without a GPU the interpreter exchanges numpy arrays the same way.

Run: ``python examples/interop.py``.
"""

import sys

import numpy as np

import cutile
from cutile import api
from cutile.core import Mut, Tensor, f32, load_tile_like


@cutile.entry
def scaled_add(z: Mut[Tensor[f32, ["BM", "BN"]]], x: Tensor[f32, [-1, -1]], y: Tensor[f32, [-1, -1]], alpha: f32) -> None:
    z.store(alpha * load_tile_like(x, z) + load_tile_like(y, z))


def with_torch() -> bool:
    import torch

    x = torch.randn(300, 200, device="cuda")
    y = torch.randn(300, 200, device="cuda")
    out = torch.empty(300, 200, device="cuda")
    z = api.from_dlpack(out).partition([64, 64])             # PyTorch's memory, partitioned
    z, _, _ = scaled_add(z, api.from_dlpack(x), api.from_dlpack(y), 0.5).sync()
    ok = torch.allclose(out, 0.5 * x + y)
    back = torch.from_dlpack(z.unpartition())                # and back to PyTorch, same memory
    ok &= back.data_ptr() == out.data_ptr()
    print(f"interop: PyTorch tensors in and out without copies on the {cutile.backend()} backend: "
          f"{'OK' if ok else 'WRONG'}")
    return bool(ok)


def with_numpy() -> bool:
    rng = np.random.default_rng(5)
    x = rng.standard_normal((300, 200)).astype(np.float32)
    y = rng.standard_normal((300, 200)).astype(np.float32)
    out = np.zeros((300, 200), np.float32)
    z = api.from_dlpack(out).partition([64, 64])              # numpy's memory, partitioned
    z, _, _ = scaled_add(z, api.from_dlpack(x), api.from_dlpack(y), 0.5).sync()
    ok = bool(np.allclose(out, np.float32(0.5) * x + y))
    back = np.from_dlpack(z.unpartition())
    ok &= bool(np.shares_memory(back, out))
    print(f"interop: numpy arrays in and out without copies on the {cutile.backend()} backend "
          f"(PyTorch with a GPU would be used where present): {'OK' if ok else 'WRONG'}")
    return ok


def main() -> int:
    if cutile.backend() == "gpu":
        try:
            import torch  # noqa: F401
        except ImportError:  # not a dependency of cutile; numpy's memory is not on the GPU
            print("interop: PyTorch is not installed, so there is nothing to exchange GPU memory with; "
                  "nothing was run (pip install torch, or CUTILE_BACKEND=interpreter for numpy)")
            return 0
        return 0 if with_torch() else 1
    return 0 if with_numpy() else 1


if __name__ == "__main__":
    sys.exit(main())
