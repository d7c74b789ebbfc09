"""y = a * x + y through cuda_core: a PTX kernel loaded, launched and checked.

Run: ``python examples/axpy_ptx.py``. It prints the device, launches the kernel
once plainly and 100 times through a prepared launch, and checks every element
against a float64 reference.

This example exercises the driver layer alone, so it needs a GPU: without one it
says why and stops. cutile's tile kernels run without a GPU on its CPU
interpreter backend (see ``examples/add.py``).
"""

from __future__ import annotations

import math
import random
import struct
import sys

import cuda_core as cc

PTX = rb"""
.version 8.0
.target sm_80
.address_size 64
.visible .entry axpy(.param .u64 p_y, .param .u64 p_x, .param .f32 p_a, .param .u32 p_n)
{
    .reg .pred %p;
    .reg .b32 %r<6>;
    .reg .f32 %f<4>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [p_y];
    ld.param.u64 %rd2, [p_x];
    ld.param.f32 %f1, [p_a];
    ld.param.u32 %r1, [p_n];
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mov.u32 %r4, %tid.x;
    mad.lo.s32 %r5, %r2, %r3, %r4;
    setp.ge.u32 %p, %r5, %r1;
    @%p bra DONE;
    cvta.to.global.u64 %rd3, %rd1;
    cvta.to.global.u64 %rd4, %rd2;
    mul.wide.u32 %rd5, %r5, 4;
    add.s64 %rd6, %rd3, %rd5;
    add.s64 %rd7, %rd4, %rd5;
    ld.global.f32 %f2, [%rd7];
    ld.global.f32 %f3, [%rd6];
    fma.rn.f32 %f3, %f1, %f2, %f3;
    st.global.f32 [%rd6], %f3;
DONE:
    ret;
}
"""


def main() -> int:
    reason = cc.unavailable_reason()
    if reason is not None:
        print(f"axpy_ptx: no GPU can be used here ({reason}).")
        print("axpy_ptx: this example launches a PTX kernel through the CUDA driver and needs one;")
        print("axpy_ptx: nothing was run. (cutile's kernels run without a GPU on its CPU interpreter:")
        print("axpy_ptx: try examples/add.py.)")
        return 0

    device = cc.Device(0)
    print(f"device 0: {device.name}, {device.sm_name}, {device.sm_count} SMs, "
          f"{device.total_memory / 2**30:.0f} GiB")
    n, a, repeats = 1_000_003, 0.75, 100  # an odd size: the last block is partial
    rng = random.Random(0)
    xs = [rng.uniform(-1, 1) for _ in range(n)]
    ys = [rng.uniform(-1, 1) for _ in range(n)]
    pack = struct.Struct(f"<{n}f")
    xs32, ys32 = pack.unpack(pack.pack(*xs)), pack.unpack(pack.pack(*ys))

    axpy = cc.Module.load(PTX).get_function("axpy")
    stream = cc.Stream.create()
    x = cc.DeviceBuffer.allocate(4 * n, stream=stream)
    y = cc.DeviceBuffer.allocate(4 * n, stream=stream)
    x.copy_from_host(pack.pack(*xs32), stream=stream)
    y.copy_from_host(pack.pack(*ys32), stream=stream)
    config = cc.LaunchConfig(grid=math.ceil(n / 256), block=256)
    cc.launch(axpy, config, y, x, a, n, stream=stream)
    prepared = cc.PreparedLaunch(axpy, config, ["ptr", "ptr", "f32", "u32"])
    start, end = stream.record(cc.Event.create()), cc.Event.create()
    for _ in range(repeats):
        prepared.launch(stream, y, x, a, n)
    end.record(stream)
    out = bytearray(4 * n)
    y.copy_to_host(out, stream=stream)
    stream.synchronize()

    got = pack.unpack(out)
    expected = [yi + (repeats + 1) * a * xi for xi, yi in zip(xs32, ys32)]
    worst = max(abs(g - e) for g, e in zip(got, expected))
    ok = worst < 1e-3
    elapsed = start.elapsed_ms(end)
    print(f"axpy: {repeats + 1} launches over {n} floats, {repeats} prepared ones in {elapsed:.3f} ms "
          f"({3 * 4 * n * repeats / elapsed / 1e6:.0f} GB/s); max error {worst:.2e}: "
          f"{'OK' if ok else 'WRONG'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
