"""Tensor constructors as tile kernels: fills, ranges and random numbers are made
where the tensor lives (on the device for the GPU backend), not on the host.

Random numbers come from a counter-based hash of (element index, seed): no state,
the same values on the GPU and on the interpreter, for any tile size.

The kernels are built per dtype; their annotations are set as objects (not written
in the source) because the dtype is a variable here.
"""

import math
import types
from collections.abc import Callable
from typing import Any

import cutile.core as ct
from cutile._random import uniform
from cutile._entry import Kernel, entry
from cutile._launch import run_plan
from cutile._tensor import Tensor
from cutile_compiler import dtypes as dt
from cutile_compiler import make_tensor_annotation
from cutile_compiler.language import Constant, Mut

# Elements per block: big tiles keep the interpreter's per-op cost low; on the GPU
# a 4096-element tile streams at full bandwidth.
GPU_TILE = 4096
INTERPRETER_TILE = 1 << 16
#: Elements per launch (a multiple of both tiles): a kernel's tensor extents are i32.
CHUNK = 1 << 30

_kernels: dict[tuple[str, dt.DType], Kernel] = {}


def _fill(z: Any, value: Any) -> None:
    z.store(value)


# The element and work dtypes the kernel bodies below read; each specialized clone
# of a body gets its own values in its globals (see _specialized).
OUT: Any = None
WORK: Any = None


def _arange(z: Any, start: Any, step: Any, B: Any) -> None:  # noqa: N803
    block, _, _ = ct.get_tile_block_id()
    index = (ct.arange(B, ct.i64) + block.astype(ct.i64) * B).astype(WORK)
    z.store((start + index * step).astype(OUT))


def _random(z: Any, seed: Any, first_index: Any, B: Any, NORMAL: Any) -> None:  # noqa: N803
    block, _, _ = ct.get_tile_block_id()
    index = ct.arange(B, ct.u32) + block.astype(ct.u32) * B + first_index
    first = uniform(index, seed)
    if NORMAL:
        second = uniform(index, seed ^ 0x5BD1E995)
        radius = ct.sqrt(-2.0 * ct.log(1.0 - first))  # 1 - u lies in (0, 1]: the log is finite
        z.store((radius * ct.cos(6.283185307179586 * second)).astype(OUT))
    else:
        z.store(first.astype(OUT))


def _cast(z: Any, x: Any) -> None:
    z.store(ct.load_tile_like(x, z).astype(OUT))


def _specialized(source: Callable[..., None], annotations: dict[str, Any], constants: dict[str, Any]) -> Kernel:
    """A kernel from ``source`` with these parameter annotations; ``constants`` are
    compile-time values its body reads as globals (the dtypes)."""
    clone = types.FunctionType(source.__code__, {**source.__globals__, **constants}, source.__name__)
    clone.__annotations__ = annotations
    return entry(clone)


def kernel(kind: str, dtype: dt.DType) -> Kernel:
    """The constructor kernel ``kind`` ("fill", "arange", "uniform", "normal") for ``dtype``."""
    key = (kind, dtype)
    found = _kernels.get(key)
    if found is not None:
        return found
    mut = Mut[make_tensor_annotation((dtype, ["B"]))]
    if kind == "fill":
        made = _specialized(_fill, {"z": mut, "value": dtype}, {})
    elif kind == "arange":
        work = dt.f64 if dtype is dt.f64 else dt.i64 if dtype.is_integer else dt.f32
        made = _specialized(_arange, {"z": mut, "start": work, "step": work, "B": Constant[int]},
                            {"OUT": dtype, "WORK": work})
    else:
        made = _specialized(_random, {"z": mut, "seed": dt.u32, "first_index": dt.u32, "B": Constant[int],
                                      "NORMAL": Constant[bool]}, {"OUT": dtype})
    _kernels[key] = made
    return made


def cast_kernel(source: dt.DType, target: dt.DType) -> Kernel:
    """The kernel converting a flat ``source`` tensor into a flat ``target`` one."""
    key = (f"cast from {source.name}", target)
    found = _kernels.get(key)
    if found is None:
        found = _specialized(_cast, {"z": Mut[make_tensor_annotation((target, ["B"]))],
                                     "x": make_tensor_annotation((source, [-1]))}, {"OUT": target})
        _kernels[key] = found
    return found


def cast(source: Tensor, target: Tensor) -> None:
    """Writes ``source``'s values converted into ``target`` (both contiguous, same size)."""
    from cutile import _backend

    if source.size == 0:
        return
    flat_in, flat_out = source.reshape(source.size), target.reshape(target.size)  # (views check they are live)
    made = cast_kernel(source.dtype, target.dtype)
    for start, stop in chunks(source.size):
        part_in, part_out = flat_in[start:stop], flat_out[start:stop]
        made(part_out.partition([tile_size(_backend.current(), stop - start)]), part_in).sync()


def chunks(count: int) -> list[tuple[int, int]]:
    """``[0, count)`` cut into launches of at most `CHUNK` elements: a kernel's tensor
    extents are i32, and a tensor may hold more elements than that."""
    return [(start, min(start + CHUNK, count)) for start in range(0, count, CHUNK)]


def tile_size(backend: str, count: int) -> int:
    """A power-of-two tile for ``count`` elements."""
    largest = GPU_TILE if backend == "gpu" else INTERPRETER_TILE
    return max(1, min(largest, 1 << max(0, math.ceil(math.log2(max(count, 1))))))


def run(kind: str, tensor: Tensor, stream: Any = None, **arguments: Any) -> None:
    """Fills the contiguous ``tensor`` in place with constructor ``kind``: on the
    interpreter at once; on the GPU queued on ``stream`` (None: on cutile's stream,
    and waited for)."""
    from cutile import _backend
    from cutile_compiler import DEFAULT_OPTIONS

    if tensor.size == 0:
        return
    flat = tensor.reshape(tensor.size)
    made = kernel(kind, tensor.dtype)
    if kind in ("uniform", "normal"):
        arguments["NORMAL"] = kind == "normal"
    for start, stop in chunks(tensor.size):
        part = dict(arguments)
        if kind in ("uniform", "normal"):  # the element index, counted over the whole tensor
            # (an index past 2^32 wraps; its high bits change the seed, so no stretch repeats another)
            part["first_index"] = start % 2**32
            part["seed"] = (arguments["seed"] ^ (0x9E3779B9 * (start >> 32))) % 2**32
        elif kind == "arange":
            part["start"] = arguments["start"] + start * arguments["step"]
        call = {"z": flat[start:stop].partition([tile_size(_backend.current(), stop - start)]), **part}
        run_plan(made, made.plan_for(call), call, DEFAULT_OPTIONS, stream)
