"""The split-K kernels' `cutile.tune` record: the search space, the shape buckets, the
runners and the correctness gate of a search, and the config `matmul` gives a call.

matmul sends few output tiles over a long K to split-K (`_matmul._choose_path`): M = 128
against a 4096-wide weight is 32 tiles of 128x128 for 132 SMs; and any shape whose bucket
this record and the tiled GEMM's both hold, when this one's winner measured faster. What wins there depends
on the shape (the tile, how many slices of K, the warps): one winner per bucket of
weight layout, dtype size and M, N, K rounded up to powers of two, in ``split_k.json``.
``split_k`` 1 (one block per output tile, the whole K loop, no workspace) is in the space:
with small tiles it can beat any split. The record's provenance hashes the kernels and
their launch (not this module, nor the checks: editing those keeps the record).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import cutile
from cutile import tune
from cutile.core import f32
from cutile.tune import Space

from cutile_kernels import _gemv, _records, _splitk
from cutile_kernels._splitk import SM_COUNT, TENSOR_CORE_ROWS, next_power_of_two

__all__ = ["SPACE", "choose", "fit", "kernel_source", "prune", "prune_for", "recorded", "split_k_bucket", "tuner",
           "use_records"]

Config = Mapping[str, Any]

#: the tuning space of the record (one for every dtype: `prune_for` keeps f32's K tiles
#: at 64 and below, and the 2-byte dtypes' at 32 and above)
SPACE = Space(tile_m=[16, 64, 128], tile_n=[32, 64, 128, 256], tile_k=[16, 32, 64, 128],
              split_k=[1, 2, 4, 8, 16, 32], method=["mma", "mma_t"], num_worker_warps=[4, 8])

#: fewer blocks than this (tiles times splits) leave most SMs idle; more than 16 a SM
#: only add partial sums to reduce
MIN_BLOCKS = SM_COUNT // 2
MAX_BLOCKS = 16 * SM_COUNT


def prune(config: Config) -> bool:
    """The shape-free part of `prune_for`: products off the tensor cores (``mma``
    below 64 rows of a tile, ``mma_t`` below 64 columns), accumulators past 128x128 for
    4 worker warps or 128x256 for 8 (spilled)."""
    tile_m, tile_n = int(config["tile_m"]), int(config["tile_n"])
    on_m_side = tile_m if config["method"] == "mma" else tile_n
    limit = 128 * 128 if int(config["num_worker_warps"]) == 4 else 128 * 256
    return on_m_side >= TENSOR_CORE_ROWS and tile_m * tile_n <= limit


def prune_for(m: int, n: int, k: int, itemsize: int) -> Callable[[Config], bool]:
    """A ``prune`` for `cutile.tune.search` at one shape: `_splitk.prune_for` and
    `prune`, ``mma_t`` only for M below 64 (``mma`` takes the tensor cores' M side
    then), the dtype's K tiles, and from MIN_BLOCKS (or what the shape can give) to
    MAX_BLOCKS blocks."""
    shaped = _splitk.prune_for(m, n, k)

    def keep(config: Config) -> bool:
        if not (shaped(config) and prune(config)):
            return False
        tile_k = int(config["tile_k"])
        if (itemsize == 4 and tile_k > 64) or (itemsize < 4 and tile_k < 32):
            return False
        if config["method"] == "mma_t" and m >= TENSOR_CORE_ROWS:
            return False
        blocks = math.ceil(m / int(config["tile_m"])) * math.ceil(n / int(config["tile_n"])) * int(config["split_k"])
        return fewest <= blocks <= MAX_BLOCKS

    # (a small shape that cannot give MIN_BLOCKS blocks: as many as 64x64 tiles give in the
    # most splits of K tiles of 64 the space has)
    splits = max(s for s in SPACE.params["split_k"] if int(s) <= max(1, math.ceil(k / 64)))
    fewest = min(MIN_BLOCKS, math.ceil(m / 64) * math.ceil(n / 64) * int(splits))

    return keep


def fit(config: Config, m: int, n: int, k: int) -> dict[str, Any]:
    """A record's winner for the call: tiles cut to M's and N's powers of two (as
    `_splitk.prune_for` allows), splits to K's chunks."""
    fitted = dict(config)
    fitted["tile_m"] = min(int(config["tile_m"]), max(16, next_power_of_two(m)))
    fitted["tile_n"] = min(int(config["tile_n"]), max(32, next_power_of_two(n)))
    fitted["split_k"] = max(1, min(int(config["split_k"]), math.ceil(k / int(config["tile_k"]))))
    return fitted


def _class(x: int, low: int, high: int) -> int:
    return min(max(next_power_of_two(x), low), high)


def split_k_bucket(shape: Any) -> str:
    """The record bucket of a call ``(m, n, k, itemsize, weight_nk)``: the weight's
    layout, the dtype's size (f16 and bf16 share winners), M, N and K rounded up to
    powers of two (M within [16, 16384], N within [16, 262144], K within [64, 1048576])."""
    m, n, k, itemsize, weight_nk = (int(s) for s in shape)
    return (f"{'nk' if weight_nk else 'kn'}_e{itemsize}_m{_class(m, 16, 16384)}_n{_class(n, 16, 262144)}"
            f"_k{_class(k, 64, 1 << 20)}")


def kernel_source() -> str:
    """What the record's provenance hashes: the kernels, their product loops and
    epilogue, and how a config launches them."""
    parts = (_splitk._product_loop, _splitk._epilogue, _splitk._weight_annotation, _splitk.direct_kernel,
             _splitk.partial_kernel, _splitk.reduce_kernel, _splitk.reduce_tiles, _splitk.launches,
             _splitk.hints_of, _splitk.entry_hints)
    return "".join(inspect.getsource(part) for part in parts)


def _setup(config: Config, shape: tuple[int, ...]) -> Callable[[], Any]:
    m, n, k, itemsize, _ = shape
    if not prune_for(m, n, k, itemsize)(config):
        raise cutile.ArgumentError(f"split_k_matmul: config {dict(config)} cannot run or win at shape {shape}")
    _, _, a, b, out = _gemv.tuning_inputs(shape)
    chosen = dict(config)
    return lambda: _splitk.split_k_matmul(a, b, out, config=chosen)


def _reference(shape: tuple[int, ...]) -> Callable[[Any], bool]:
    def gate(_: Any) -> bool:
        host_a, host_w, _, _, out = _gemv.tuning_inputs(shape)
        return _gemv.check_sampled(out, host_a, host_w, bool(shape[4]))
    return gate


def precompile(shape: tuple[int, ...], configs: list[dict[str, Any]], arch: str, jobs: int) -> int:
    """Compiles each config's kernels for ``shape`` in ``jobs`` threads (a tileiras
    process per compile, so they overlap) before a search times them; returns how many
    compiled. A config failing here fails again in the search, which says why."""
    from concurrent.futures import ThreadPoolExecutor

    _, _, a, b, out = _gemv.tuning_inputs(shape)
    ops = _splitk.check_operands("split_k_matmul", a, b, out, None, None, None, 1.0)
    steps = []
    for config in configs:  # (made here, one thread: the kernel caches and workspaces are not shared)
        cfg = _splitk.check_config("split_k_matmul", config, _splitk.default_config(ops.m, ops.n, ops.k, a.dtype),
                                   _splitk.CONFIG_KEYS)
        steps.append(_splitk.launches(ops, cfg["tile_m"], cfg["tile_n"], cfg["tile_k"], cfg["split_k"],
                                      cfg["method"], _splitk.hints_of(cfg)))

    def compile_one(launches: _splitk.Launches) -> bool:
        try:
            for kernel, arguments, constants in launches:
                cutile.compile(kernel, *arguments, arch=arch, **constants)
        except cutile.CutileError:
            return False
        return True

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return sum(pool.map(compile_one, steps))


_TUNERS = _records.RecordTuners("split_k", SPACE, _setup, source=kernel_source, reference=_reference, bucket=split_k_bucket,
                                  prune=prune)


def tuner(*, records_dir: Path | str | None = None) -> tune.Tuner:
    """The tuner of the split-K kernels: its record is this arch's ``split_k.json`` in
    ``records_dir`` (default: the folder `use_records` set, the package's records), its
    searches over `SPACE` gated by `_gemv.check_sampled` (a search on first use,
    ``CUTILE_TUNE=1``, is bounded to two minutes a shape)."""
    return _TUNERS.get(records_dir)


def use_records(records_dir: Path | str | None) -> None:
    """Makes `choose` (and so matmul) read the records of ``records_dir`` (None: the
    package's), read again from disk; matmul's cached plans are forgotten."""
    from cutile_kernels import _matmul  # (it imports this module)

    _TUNERS.use(records_dir)
    _matmul.forget_plans()


def choose(m: int, n: int, k: int, dtype: Any, *, weight_nk: bool) -> dict[str, Any]:
    """The config of a split-K call: the record's (or cache's, or a search's) winner of its
    bucket, fitted to the call (`fit`), else the default."""
    return _TUNERS.choose((m, n, k, 4 if dtype is f32 else 2, int(weight_nk)), lambda cfg: fit(cfg, m, n, k),
                          lambda: _splitk.default_config(m, n, k, dtype))


def recorded(m: int, n: int, k: int, dtype: Any, *, weight_nk: bool) -> tune.Winner | None:
    """The known winner of a call's bucket with its measured time (record or cache), or
    None: what matmul compares with the tiled GEMM's (`_matmul._faster_recorded`)."""
    return _TUNERS.winner((m, n, k, 4 if dtype is f32 else 2, int(weight_nk)))
