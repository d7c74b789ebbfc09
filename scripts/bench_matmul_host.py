#!/usr/bin/env python3
"""The host cost of a tuned ``cutile_kernels.matmul`` call against a plain launch of the
kernel it chooses, without a GPU (the issue's target: within 10%).

Runs the GPU backend against cuda_core.testing.FakeDriver with launches, waits and
events made free (as scripts/bench_host_launch.py does), so what is timed is host
work. Prints µs per call of, for one 512x512x512 f16 GEMM into a given ``out``:
  - plain: a caller's loop launching the chosen kernel by hand: the output's view
    partitioned and mapped once, every parameter by position, ``.sync()`` per call
  - matmul(a, b, out=out) (the plan cached: the record is asked once per call signature)
  - the same two with a bias and GELU (the plain launch's bias view made once)
  - matmul's own work alone (operands, checks, plan lookup; no launch), against the plain launch
Needs tileiras (it compiles the kernels for sm_90), not a GPU.

Usage: uv run --frozen python scripts/bench_matmul_host.py [--calls 5000] [--repeats 5] [--clock cpu]
"""

import argparse
import os
import sys
from collections.abc import Callable

os.environ.setdefault("CUTILE_BACKEND", "gpu")
os.environ.setdefault("CUDA_CORE_NATIVE", "1")

from _host_bench import free_fake_driver, per_call_us, register  # noqa: E402
from cuda_core.testing import FakeDriver  # noqa: E402
from cutile import _native, api  # noqa: E402
from cutile.core import f16, f32  # noqa: E402

from cutile_kernels import _matmul, matmul  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--clock", choices=["wall", "cpu"], default="cpu")
    args = parser.parse_args()
    with free_fake_driver() as fake:
        _run(fake, args)
    return 0


def _run(fake: FakeDriver, args: argparse.Namespace) -> None:
    n = 512
    a, b = api.empty([n, n], dtype=f16), api.empty([n, n], dtype=f16)
    bias = api.empty([n], dtype=f32)
    out = api.empty([n, n], dtype=f16)
    register(fake, matmul.launch(a, b, out=out))
    register(fake, matmul.launch(a, b, out=out, bias=bias, activation="gelu"))
    plan, plan_epilogue = (signature.plan for signature in _matmul._SIGNATURES.values())
    assert plan is not None and plan_epilogue is not None
    kernel, epilogue_kernel = plan.kernel, plan_epilogue.kernel
    assert kernel is not None and epilogue_kernel is not None  # (512^3: the tiled GEMM's path)
    tile, map_shape, blocks, bk = plan.tile, plan.map_shape, plan.blocks, plan.config["tile_k"]

    # The plain launches are a user's loop: arguments built once, every parameter by
    # position, the same objects passed again (the launch path's fastest form).
    z_plain = out[...].partition(tile).map(map_shape, blocks=blocks)
    bias_row = bias.broadcast_to([1, n])

    def plain(count: int) -> None:
        z = z_plain
        for _ in range(count):
            z, *_ = kernel(z, a, b, a, a, a, a, 1.0, tile[0], tile[1], bk, n).sync()  # a: absent operands' stand-in

    def plain_epilogue(count: int) -> None:
        z = z_plain
        for _ in range(count):
            z, *_ = epilogue_kernel(z, a, b, bias_row, a, a, a, 1.0, tile[0], tile[1], bk, n).sync()

    def tuned(count: int) -> None:
        for _ in range(count):
            matmul(a, b, out=out)

    def tuned_epilogue(count: int) -> None:
        for _ in range(count):
            matmul(a, b, out=out, bias=bias, activation="gelu")

    def prepare_only(count: int) -> None:  # matmul's own work: operands, checks, the plan's lookup
        for _ in range(count):
            _matmul._prepare(a, b, out=out, bias=None, activation=None, residual=None, alpha=1.0, scale_a=None,
                             scale_b=None, out_dtype=None, accumulate_dtype=f32, allow_tf32=False, config=None)

    modes: dict[str, Callable[[int], None]] = {"prepare": prepare_only, "plain": plain, "matmul": tuned, "plain_epilogue": plain_epilogue,
                                               "epilogue": tuned_epilogue}
    for body in modes.values():
        body(200)
    samples = per_call_us(modes, args.calls, args.repeats, args.clock)
    median = {name: min(values) for name, values in samples.items()}  # the least disturbed repeat
    path = "native launch path" if _native.module is not None else "Python launch path"
    print(f"host cost per call, fake driver ({path}, Python {sys.version.split()[0]}), {args.clock} clock, "
          f"best of {args.repeats} x {args.calls}; config {plan.config}")
    labels = {"prepare": "matmul's own work (no launch)", "plain": "plain launch of the chosen kernel", "matmul": "matmul(a, b, out=out)",
              "plain_epilogue": "plain launch, bias + GELU kernel", "epilogue": "matmul(..., bias=, activation='gelu')"}
    baseline = {"prepare": "plain", "plain": "plain", "matmul": "plain", "plain_epilogue": "plain_epilogue", "epilogue": "plain_epilogue"}
    for name, value in median.items():
        print(f"  {labels[name]:<40} {value:8.2f} µs  ({value / median[baseline[name]]:.3f}x its plain launch)")


if __name__ == "__main__":
    sys.exit(main())
