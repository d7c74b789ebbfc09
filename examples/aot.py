"""Ahead-of-time compilation: cutile.compile to a cubin file, and back.

Compiles the quick-start kernel for sm_90 from shape/dtype placeholders (no GPU
needed, only tileiras), writes the cubin and the Tile IR (bytecode and MLIR text)
to a folder, then, where a GPU is present, loads the cubin file with cuda_core and
launches it by hand, checking the result.

Run: ``python examples/aot.py [out-folder]``.
"""

import struct
import sys
import tempfile
from pathlib import Path

import cutile
from cutile import api
from cutile.core import Mut, Tensor, f32, load_tile_like


@cutile.entry
def add(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]], y: Tensor[f32, [-1]]) -> None:
    z.store(load_tile_like(x, z) + load_tile_like(y, z))


def main() -> int:
    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="cutile-aot-"))
    folder.mkdir(parents=True, exist_ok=True)
    n, tile = 4096, 1024
    compiled = cutile.compile(add, api.meta([n], dtype=f32).partition([tile]), api.meta([n]), api.meta([n]), arch="sm_90")
    (folder / "add.cubin").write_bytes(compiled.cubin)
    (folder / "add.tileirbc").write_bytes(compiled.bytecode)
    (folder / "add.mlir").write_text(compiled.mlir)
    ok = compiled.cubin.startswith(b"\x7fELF") and "entry @add" in compiled.mlir
    print(f"aot: compiled add for sm_90: {len(compiled.bytecode)} bytes of Tile IR bytecode "
          f"{compiled.bytecode_version}, {len(compiled.cubin)} bytes of cubin, in {folder}")
    print("aot: entry parameters: " + ", ".join(f"{a.param}.{a.kind}" for a in compiled.abi))

    import cuda_core as cc

    if not cc.is_available():
        print(f"aot: no GPU here to load the cubin back; compile: {'OK' if ok else 'WRONG'}")
        return 0 if ok else 1
    device = cc.Device(0)
    if device.sm_name != "sm_90":
        compiled = cutile.compile(add, api.meta([n], dtype=f32).partition([tile]), api.meta([n]), api.meta([n]),
                                  arch=device.sm_name)
        (folder / "add.cubin").write_bytes(compiled.cubin)
    function = cc.Module.load_file(folder / "add.cubin").get_function("add")
    buffers = {name: cc.DeviceBuffer.allocate(4 * n) for name in "zxy"}
    buffers["x"].copy_from_host(struct.pack(f"<{n}f", *range(n)))
    buffers["y"].copy_from_host(struct.pack(f"<{n}f", *[2.0] * n))
    # each entry parameter: a pointer to its buffer, a dim (n), or a stride (1)
    arguments = [buffers[a.param] if a.kind == "pointer" else {"dim": n, "stride": 1}[a.kind] for a in compiled.abi]
    # cuda_core sizes each plain number by the parameter the cubin declares.
    cc.launch(function, cc.LaunchConfig(grid=n // tile, block=1), *arguments)
    device.synchronize()
    got = struct.unpack(f"<{n}f", buffers["z"].to_bytes())
    ok &= got == tuple(float(i) + 2.0 for i in range(n))
    print(f"aot: loaded the cubin file with cuda_core and launched it on {device.name}: {'OK' if ok else 'WRONG'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
