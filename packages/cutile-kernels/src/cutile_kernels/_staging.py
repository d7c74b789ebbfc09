"""Staging for matmul: operands whose layout its kernels cannot read at speed, copied
into aligned temporaries (and an output written through one).

tileiras loads and stores a tile through TMA or 16-byte vector accesses only when the
facts a kernel is specialized on prove it may: ``Tensor.spec()`` gives the base
address's divisibility in bytes and each stride's in elements (capped at 16), lowered
as ``assume_divisible``. A row stride of 8191 f16 elements (16382 bytes), a view
starting one element into its buffer, a stride of 3 f32 elements: none is a multiple of
16 bytes, and the GEMM falls to another path (measured on the H200 before staging:
8191^3 f16 at 20 TFLOP/s, 8192^3 at 746-785). Such an operand is copied by a safe tile
kernel (`copy`) into a tensor of its shape whose rows are padded to 16 bytes (`padded`,
a view of a wider buffer), and the kernels run on those views.

The rule (`strides_aligned`, with the base address checked per call): the tensor as
the kernels read it (an input stored transposed, as a weight ``[N, K]`` passed as
``w.T``, through its transpose) has a unit innermost stride (or one column), and every
other stride times the element size is a multiple of 16 bytes (a stride-0 broadcast
is); its element 0 lies on a 16-byte boundary. An input's temporary (a, b) keeps its
orientation, so a transposed view is copied row by row into the transposed layout the
kernels read through in place; a residual or out is read and written as it is, so its
temporary is of its shape as it is (a transposed or column-broadcast residual is copied
into rows). Temporaries are kept per caller's tensor and role (`temporary`): repeated
and alternating calls reuse them, and they live as long as that tensor (a launch
finding them held by another pending one makes its own, `_matmul._Staged.unkept`).
"""

# No `from __future__ import annotations`: the kernels' annotations name the factory's dtypes.

import functools
import math
from typing import Any

import cutile
from cutile import api
from cutile.core import Constant, Mut, Tensor, load_tile_like

from cutile_kernels._operands import derived

#: bytes: the alignment of a base address and of every stride but the unit one that
#: TMA and the 16-byte vector accesses need
ALIGNMENT = 16
#: elements per copy block on the GPU (the pointwise kernels' default budget; a copy is
#: memory bound) and on the interpreter (big tiles keep its per-op cost low)
BLOCK_ELEMS = 4096
INTERPRETER_BLOCK_ELEMS = 1 << 16


def column_major(t: cutile.Tensor) -> bool:
    """Whether the last two dims of ``t`` are laid out transposed (its rows contiguous,
    its columns not): the kernels then read its transpose, whose rows are."""
    return t.shape[-1] > 1 and t.strides[-1] != 1 and (t.strides[-2] == 1 or t.shape[-2] == 1)


def transpose(t: cutile.Tensor) -> cutile.Tensor:
    """The last two dims swapped (a view)."""
    return t.T if t.ndim == 2 else t.permute(0, 2, 1)


def reading_view(t: cutile.Tensor) -> cutile.Tensor:
    """``t`` as the kernels read an input: its transpose when it is stored transposed."""
    return transpose(t) if column_major(t) else t


def strides_aligned(t: cutile.Tensor) -> bool:
    """Whether the strides of ``t``, as they are, give the compiler 16-byte facts: a
    unit innermost stride (or a last dim of one element) and every other stride's
    divisibility (`Tensor.spec`, in elements) times the element size at least 16 bytes.
    An empty tensor is never read: it needs nothing."""
    if t.size == 0:
        return True
    spec = t.spec()
    if not spec.unit_inner_stride:
        return False
    itemsize = t.dtype.itemsize
    return all(fact * itemsize >= ALIGNMENT for fact in spec.stride_divisibility[:-1])


def dense_aligned(shape: tuple[int, ...], dtype: Any) -> bool:
    """Whether a new dense tensor of ``shape`` and ``dtype`` has 16-byte row strides
    (its rows are ``shape[-1]`` elements; every outer stride is a multiple of that)."""
    return math.prod(shape) == 0 or len(shape) < 2 or shape[-1] * dtype.itemsize % ALIGNMENT == 0


def base_aligned(t: cutile.Tensor) -> bool:
    """Whether element 0 of ``t`` lies on a 16-byte boundary (`Tensor.spec`'s base
    divisibility of 16), or ``t`` is empty."""
    return t.size == 0 or t.address() % ALIGNMENT == 0


def _device(t: cutile.Tensor) -> str | None:
    return t.device if t.device.startswith("cuda") else None  # (host memory: the interpreter's one device)


def padded(shape: tuple[int, ...], dtype: Any, like: cutile.Tensor) -> cutile.Tensor:
    """A new tensor of ``shape`` and ``dtype`` on ``like``'s device whose rows start on
    16-byte boundaries: the first ``shape[-1]`` columns of a dense buffer whose rows are
    rounded up to 16 bytes, the buffer's start moved to a 16-byte boundary (allocations
    are aligned already; this does not rely on it). Its values are unspecified."""
    itemsize = dtype.itemsize
    per_row = max(1, ALIGNMENT // itemsize)
    cols = shape[-1]
    width = -(-cols // per_row) * per_row
    rows = math.prod(shape[:-1])
    flat = api.empty([rows * width + per_row], dtype=dtype, device=_device(like))
    skip = (-flat.address() % ALIGNMENT) // itemsize
    buffer = flat[skip:skip + rows * width].reshape(*shape[:-1], width)
    view = buffer[..., :cols]
    assert base_aligned(view) and strides_aligned(view), "a padded temporary must be aligned"
    return view


def temporary(owner: cutile.Tensor | None, role: str, shape: tuple[int, ...], dtype: Any,
              like: cutile.Tensor) -> cutile.Tensor:
    """A `padded` temporary of ``shape`` for the operand ``role`` of the caller's tensor
    ``owner``: made once per live owner, role, shape and dtype (`derived`, as split-K's
    workspace per out), so repeated and alternating calls reuse it (a graph capture of
    them allocates nothing), and it lives as long as the owner does. ``owner`` None (a
    foreign tensor, imported anew on every call): a new one."""
    def make() -> cutile.Tensor:
        return padded(shape, dtype, like)
    if owner is None:
        return make()
    made: cutile.Tensor = derived(owner, ("staging", role, shape, dtype), make)
    return made


def staged(t: cutile.Tensor, owner: cutile.Tensor | None, role: str) -> tuple[cutile.Tensor, cutile.Tensor,
                                                                            cutile.Tensor]:
    """A temporary for the input ``t`` (a or b: read through its transpose when it is
    stored transposed; `temporary` of ``owner`` and ``role``): (the temporary, of t's
    shape, dtype and orientation, aligned; the source and target of its copy, both in
    the orientation the kernels read)."""
    source = reading_view(t)
    flipped = source is not t
    target = temporary(owner, f"{role} (transposed)" if flipped else role, source.shape, t.dtype, t)
    if not flipped:
        return target, source, target
    made: cutile.Tensor = derived(target, "staging T", lambda: transpose(target))  # (one view object per temporary)
    return made, source, target


@functools.cache
def copy_kernel(dtype: Any, rank: int) -> cutile.Kernel[..., Any]:
    """``out = x`` tile by tile, for ``dtype`` and rank 2 or 3 (out partitioned by the
    launch). (The written parameter is ``out``: a launch refusing the caller's out, a
    read-only one say, names it.)"""
    entry = cutile.entry(hints={"occupancy": 2})
    if rank == 2:
        def matmul_staging_copy_2d(out: Mut[Tensor[dtype, ["BM", "BN"]]], x: Tensor[dtype, [-1, -1]],  # type: ignore[misc, name-defined]  # dtypes of the factory
                                   BM: Constant[int], BN: Constant[int]) -> None:
            out.store(load_tile_like(x, out))
        return entry(matmul_staging_copy_2d)

    def matmul_staging_copy_3d(out: Mut[Tensor[dtype, [1, "BM", "BN"]]], x: Tensor[dtype, [-1, -1, -1]],  # type: ignore[misc, name-defined]  # dtypes of the factory
                               BM: Constant[int], BN: Constant[int]) -> None:
        out.store(load_tile_like(x, out))
    return entry(matmul_staging_copy_3d)


def _pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def copy_tile(shape: tuple[int, ...]) -> list[int]:
    """A copy block's tile of ``shape`` (rank 2 or 3): whole rows where they fit the
    element budget, more rows where they are short."""
    budget = INTERPRETER_BLOCK_ELEMS if cutile.backend() == "interpreter" else BLOCK_ELEMS
    bn = min(_pow2(shape[-1]), budget)
    bm = min(max(1, budget // bn), _pow2(shape[-2]))
    return [bm, bn] if len(shape) == 2 else [1, bm, bn]


def _tiles(target: cutile.Tensor) -> Any:
    tile = copy_tile(target.shape)
    return derived(target, ("staging copy", tuple(tile)), lambda: target[...].partition(tile))


def copy(source: cutile.Tensor, target: cutile.Tensor) -> Any:
    """The pending launch copying ``source`` into ``target`` (one shape and dtype): one
    block per tile of ``target``, partitioned through a view of it made once per target
    object (`derived`: the caller's tensor is never consumed, and a repeated copy passes
    the same objects)."""
    return copy_kernel(target.dtype, target.ndim)(_tiles(target), source)


def compile_copy(source: cutile.Tensor, target: cutile.Tensor, arch: str) -> None:
    """Compiles the launch `copy` makes, for ``arch``, without launching it."""
    cutile.compile(copy_kernel(target.dtype, target.ndim), _tiles(target), source, arch=arch)
