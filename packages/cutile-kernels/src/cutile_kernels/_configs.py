"""How the GEMM kernels' configs are chosen: committed `cutile.tune` records per arch
and dtype, verified before use, with defaults where no record holds the shape.

- A config is a dict of `SPACE`'s parameters: ``tile_m``, ``tile_n``, ``tile_k``,
  ``num_worker_warps``, ``occupancy``, ``group_size`` (tile rows per group of the
  grouped order) and ``blocks_per_sm`` (persistent blocks per SM).
- Records: ``records/<arch>/matmul_<dtype>.json`` in this package (package data), one
  winner per shape bucket (`gemm_bucket`), loaded through a `cutile.tune.Tuner`
  whose provenance (the kernels' source, cutile, tileiras, arch, the space) must match:
  a stale record is refused with its reason (a warning of the ``cutile.tune`` logger)
  and never applied. ``CUTILE_TUNE=1`` searches buckets with no winner on first use
  (the winner goes to cutile.tune's cache).
- Defaults (`default_config`), where no winner is known: the configs that win on sm_90
  in the measured runs: 128x256x64 with 8 worker warps, occupancy 1 and groups of 16
  for large f16/bf16 outputs (128x256 tiles need 8 worker warps there), 128x128 tiles
  for medium ones, 64-row tiles for short outputs, smaller K tiles for f32; for fp8
  128x128x128 tiles (tileiras spills a 128x256 fp8 tile's accumulators on sm_90); every
  tile dim is cut to the problem (a power of two, at least 16).
"""

from __future__ import annotations

import inspect
import logging
from pathlib import Path
from typing import Any

import cutile
from cutile import tune
from cutile.core import f32, f8e4m3fn, f8e5m2

from cutile_kernels import _epilogue, _gemm, _records, _tuning

_log = logging.getLogger("cutile.kernels")

RECORDS_DIR = _records.RECORDS_DIR

SPACE = tune.Space(
    tile_m=[64, 128, 256],
    tile_n=[64, 128, 256],
    tile_k=[32, 64, 128],
    num_worker_warps=[4, 8],
    occupancy=[1],
    group_size=[8, 16],
    blocks_per_sm=[1],
)

#: the tiny space of ``scripts/tune_kernels.py --smoke`` (interpreter CI)
SMOKE_SPACE = tune.Space(tile_m=[16, 32], tile_n=[16], tile_k=[16], num_worker_warps=[4], occupancy=[1],
                         group_size=[2], blocks_per_sm=[1])


def prune(config: dict[str, Any]) -> bool:
    """Configs worth timing on sm_90: at most 128x256 output elements per tile, and 8
    worker warps for the large tiles (4 make them collapse)."""
    area = int(config["tile_m"]) * int(config["tile_n"])
    if area > 128 * 256:
        return False
    return not (area >= 128 * 256 and config["num_worker_warps"] != 8)


def _pow2_at_least(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


def _class(n: int, low: int, high: int) -> int:
    return min(max(_pow2_at_least(n), low), high)


def gemm_bucket(shape: Any) -> str:
    """The bucket of a GEMM ``(m, n, k)`` (m counts every batch's rows): each extent
    rounded up to a power of two, m within [16, 8192], n and k within [64, 16384]
    (beyond those ends the best config no longer changes with the size)."""
    m, n, k = (int(s) for s in shape)
    return f"m{_class(m, 16, 8192)}_n{_class(n, 64, 16384)}_k{_class(k, 64, 16384)}"


def default_config(m: int, n: int, k: int, dtype: Any) -> dict[str, Any]:
    """The config used where no record holds the shape's bucket (see the module docstring)."""
    fp8 = dtype in (f8e4m3fn, f8e5m2)
    if m >= 1024 and n >= 1024 and not fp8:
        tile_m, tile_n, warps = 128, 256, 8
    elif m >= 256 and n >= 256:
        tile_m, tile_n, warps = 128, 128, 8
    else:
        tile_m, tile_n, warps = 64, 128, 4
    tile_k = 32 if dtype == f32 else 128 if fp8 else 64
    if dtype == f32:  # f32 tiles hold twice the bytes of f16 ones
        tile_n = min(tile_n, 128)
    return {"tile_m": tile_m, "tile_n": tile_n, "tile_k": tile_k, "num_worker_warps": warps, "occupancy": 1,
            "group_size": 16 if tile_n >= 256 else 8, "blocks_per_sm": 1}


def fit_to_problem(config: dict[str, Any], m: int, n: int, k: int) -> dict[str, Any]:
    """``config`` with each tile dim cut to the problem's extent (the smallest power of
    two, at least 16, covering it): a tile larger than the matrix only pads."""
    fitted = dict(config)
    for name, extent in (("tile_m", m), ("tile_n", n), ("tile_k", k)):
        fitted[name] = min(int(config[name]), max(16, _pow2_at_least(extent)))
    return fitted


def kernel_source() -> str:
    """The source text the records' provenance hashes: the kernels and their epilogue."""
    return inspect.getsource(_gemm) + inspect.getsource(_epilogue)


def record_path(arch: str, dtype: Any, records_dir: Path | None = None) -> Path:
    return (records_dir or RECORDS_DIR) / arch / f"matmul_{dtype.name}.json"


_TUNERS: dict[tuple[Any, str], tune.Tuner] = {}


def tuner(dtype: Any, *, space: tune.Space | None = None, records_dir: Path | None = None) -> tune.Tuner:
    """The tuner of the tiled GEMM for inputs of ``dtype`` (one per dtype, space and
    records folder): its record is this arch's file, its searches `_tuning`'s."""
    chosen_space = space or SPACE
    key = (dtype, str(records_dir or RECORDS_DIR) + chosen_space.digest)
    found = _TUNERS.get(key)
    if found is None:
        name = f"matmul_{dtype.name}"
        source = kernel_source()
        found = tune.Tuner(name, chosen_space, _tuning.setup(dtype), source=source,
                           record=_records.record_path(name, source, chosen_space, folder=records_dir or RECORDS_DIR), reference=_tuning.reference(dtype),
                           bucket=gemm_bucket, on_stale="warn", search_options={"prune": prune})
        _TUNERS[key] = found
    return found


def choose(dtype: Any, m: int, n: int, k: int) -> dict[str, Any]:
    """The config for a GEMM of ``m x n x k`` (m: every batch's rows) on ``dtype``
    inputs: the record's (or cache's, or a search's) winner of its bucket, else
    `default_config` (not yet fitted to the problem: `fit_to_problem`)."""
    try:
        return dict(tuner(dtype).config((m, n, k)))
    except tune.StaleRecordError:
        raise
    except tune.TuneError:  # no winner for the bucket, no search asked for
        return default_config(m, n, k, dtype)


def recorded(dtype: Any, m: int, n: int, k: int) -> tune.Winner | None:
    """The known winner of the shape's bucket with its measured time (the committed
    record's, else the cache's), or None (a stale record is refused and logged)."""
    return tuner(dtype).winner((m, n, k))


def check_config(config: Any, function: str) -> None:
    """Raises `ArgumentError` (naming ``config`` and the key) for a config ``function``
    cannot use: unknown keys, values `cutile.tune` refuses, tile dims not powers of two."""
    if not isinstance(config, dict) or set(config) - set(SPACE.params):
        raise cutile.ArgumentError(f"{function}: config must be a dict of some of {sorted(SPACE.params)}, "
                                   f"got {config!r}")
    for key, value in config.items():
        try:
            tune.Space(**{key: [value]})
        except cutile.ArgumentError as exc:
            raise cutile.ArgumentError(f"{function}: config {exc}") from None
        if key.startswith("tile_") and (not isinstance(value, int) or value & (value - 1)):
            raise cutile.ArgumentError(f"{function}: config {key}={value!r} is not a power of two")
