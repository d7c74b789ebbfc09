"""What the row kernels (softmax, the norms) share: arguments, outputs, configs, the call.

- Arguments are cutile tensors or any DLPack / CUDA Array Interface tensor (torch, CuPy;
  numpy on the interpreter), shared without a copy (`_operands`); a row kernel sees them as
  ``(rows, cols)``, rows being the product of the leading dims. An input whose leading
  dims cannot be viewed so (not contiguous) is copied first; an ``out=`` must be viewable.
- Results are of the first input's kind (a torch tensor for torch inputs), or the
  caller's ``out=`` objects themselves, checked for shape and dtype.
- A config is ``tile_rows`` (rows per tile), ``tile_cols`` (the widest column tile: a row
  of at most that many columns is one tile and takes one pass, a longer one is walked in
  chunks of it), ``occupancy`` and ``num_worker_warps`` (kernel hints). `RowTuning` answers
  it per shape from a committed `cutile.tune` record, else the tuner's disk cache, else a
  search when ``CUTILE_TUNE=1``, else `default_config`.
- A `RowFunction` is called like a function (it runs and returns the results) and has
  ``.launch(...)``: the pending launch (or op) writing the caller's ``out=``, for timing
  with `cutile.bench.do_bench` or composing with other ops.
"""

import functools
import inspect
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, ParamSpec, TypeVar

import numpy as np

import cutile
from cutile import api, tune
from cutile.core import Constant, DType, Mut, Tensor, bf16, f16, f32, full
from cutile_kernels._operands import tensor_of
from cutile_kernels._records import RECORDS_DIR, record_path

FLOAT_DTYPES = (f16, bf16, f32)

#: the space every row kernel's config is searched in (kept small: a search per kernel
#: and dtype on the GPU must fit in minutes; the widest tiles first, so that a search
#: cut short by its budget has tried the one-pass configs of rows up to 16384 columns)
ROW_SPACE = tune.Space(tile_rows=[1, 2, 4, 16, 64], tile_cols=[16384, 8192, 4096, 2048], occupancy=[1, 2, 4],
                       num_worker_warps=[4, 8])  # (sm_90 builds 1-2 as 4 and 16-32 as 8)

#: elements one tile may hold per worker warp: 64 values a thread keeps the tile in
#: registers without spilling (a larger tile is pruned from searches)
ELEMENTS_PER_WARP = 32 * 64

RECORDS = RECORDS_DIR


def next_pow2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


# -- arguments ----------------------------------------------------------------------------

def float_dtype(tensor: cutile.Tensor, function: str, name: str) -> DType:
    if tensor.dtype not in FLOAT_DTYPES:
        raise cutile.ArgumentTypeError(f"{function}: {name} has dtype {tensor.dtype}; expected f16, bf16 or f32")
    return tensor.dtype


def rows_view(tensor: cutile.Tensor, function: str, name: str, *, writable: bool = False) -> cutile.Tensor:
    """``tensor`` as ``(rows, cols)``: rows are the product of its leading dims."""
    if tensor.ndim == 0:
        raise cutile.ArgumentError(f"{function}: {name} is a scalar; expected at least one dim")
    if tensor.ndim == 1:
        return tensor.reshape(1, tensor.shape[0]) if tensor.is_contiguous else _copy_1d(tensor, writable, function,
                                                                                        name)
    if tensor.ndim == 2:
        return tensor.permute(0, 1)  # a new view (a partition consumes it); any strides
    if not tensor.is_contiguous:
        if writable:
            raise cutile.ArgumentError(f"{function}: {name} of shape {list(tensor.shape)} is not contiguous; "
                                       "an output of more than 2 dims must be contiguous")
        tensor = api.copy(tensor)  # a read-only input: its copy is as good
    return tensor.reshape(-1, tensor.shape[-1])


def source_of(*factories: Any) -> str:
    """The source text of kernel factories (``functools.cache`` wrapped or not): what a
    tuning record's provenance hashes."""
    return "\n".join(inspect.getsource(getattr(f, "__wrapped__", f)) for f in factories)


def _copy_1d(tensor: cutile.Tensor, writable: bool, function: str, name: str) -> cutile.Tensor:
    if writable:
        raise cutile.ArgumentError(f"{function}: {name} is not contiguous; a 1-D output must be contiguous")
    return api.copy(tensor).reshape(1, tensor.shape[0])


def vector(value: Any, cols: int, function: str, name: str) -> cutile.Tensor:
    """A per-column parameter (weight, bias): a float tensor of shape ``(cols,)``."""
    tensor = tensor_of(value, function, name)
    float_dtype(tensor, function, name)
    if tuple(tensor.shape) != (cols,):
        raise cutile.ArgumentError(f"{function}: {name} has shape {list(tensor.shape)}; expected [{cols}] "
                                   "(one value per element of the normalized dim)")
    return tensor


def check_eps(eps: Any, function: str) -> float:
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not math.isfinite(eps) or eps < 0:
        raise cutile.ArgumentError(f"{function}: eps must be a finite number >= 0, got {eps!r}")
    return float(eps)


# -- outputs --------------------------------------------------------------------------------

def outputs(given: Any, count: int, function: str, names: str) -> list[Any]:
    """``out=`` of a function with ``count`` results: None or a tuple of that many (each may be None)."""
    if given is None:
        return [None] * count
    if not isinstance(given, (tuple, list)) or len(given) != count:
        raise cutile.ArgumentError(f"{function}: out must be a tuple of {count} tensors ({names}) or None")
    return list(given)


# -- configs ---------------------------------------------------------------------------------

#: kernel hints as pairs (a factory's cache key): ``dict(hints)`` is `cutile.entry`'s
Hints = tuple[tuple[str, int], ...]


def entry(function: Any, annotations: dict[str, Any] | None, name: str, hints: Hints) -> Any:
    """``function`` as a kernel named ``name`` with ``hints`` (tileiras's optimization
    hints go into the entry, so that launches keep cutile's native launch path)."""
    function.__name__ = function.__qualname__ = name
    if annotations is not None:
        function.__annotations__ = {**annotations, "return": None}
    return cutile.entry(hints=dict(hints) or None)(function)


@dataclass(frozen=True)
class RowConfig:
    tile_rows: int
    tile_cols: int
    occupancy: int
    num_worker_warps: int

    @classmethod
    def of(cls, config: Mapping[str, int | str]) -> "RowConfig":
        values = [config.get(k) for k in ("tile_rows", "tile_cols", "occupancy", "num_worker_warps")]
        if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in values):
            raise cutile.ArgumentError(f"row kernel config: expected positive ints for tile_rows, tile_cols, "
                                       f"occupancy and num_worker_warps, got {dict(config)}")
        ints = [int(v) for v in values if isinstance(v, int)]
        if any(n & (n - 1) for n in ints[:2]):
            raise cutile.ArgumentError(f"row kernel config: tile_rows and tile_cols must be powers of two, got "
                                       f"{dict(config)}")
        return cls(*ints)

    def tile(self, cols: int) -> tuple[int, int, bool]:
        """(rows, cols of a tile, whether a row takes one pass)."""
        whole = next_pow2(cols)
        return (self.tile_rows, whole, True) if whole <= self.tile_cols else (self.tile_rows, self.tile_cols, False)

    @property
    def hints(self) -> Hints:
        """The kernel hints, as a kernel factory's (hashable) argument."""
        return (("num_worker_warps", self.num_worker_warps), ("occupancy", self.occupancy))


def default_config(rows: int, cols: int, dtype: Any) -> tune.Config:
    """The config a row kernel uses for ``(rows, cols)`` of ``dtype`` without a tuned one.

    A row of up to 8192 columns (16384 at two bytes an element) is one tile and one pass;
    short rows are stacked, 16 or 64 to a tile, so that a block moves a few KiB at least
    (RMSNorm over a head dim of 128); 8 worker warps for tiles of 8192 elements or more,
    2 blocks an SM. Longer rows go in chunks of 4096 columns, 4 blocks an SM, which keeps
    a row's chunks in L2 between its two passes.
    """
    itemsize = itemsize_of(dtype)
    widest = 8192 if itemsize == 4 else 16384
    whole = next_pow2(cols)
    if whole > widest:
        return {"tile_rows": 1, "tile_cols": 4096, "occupancy": 4, "num_worker_warps": 8}
    stacked = [n for n in ROW_SPACE.params["tile_rows"] if isinstance(n, int) and n * whole <= widest // 2]
    tile_rows = min(max(stacked, default=1), next_pow2(max(rows, 1)))
    warps = 8 if tile_rows * whole >= 8192 else 4
    return {"tile_rows": tile_rows, "tile_cols": widest, "occupancy": 2, "num_worker_warps": warps}


def itemsize_of(dtype: Any) -> int:
    """Bytes an element of ``dtype`` (a cutile dtype, a numpy one or anything with ``itemsize``)."""
    if isinstance(dtype, DType):
        return int(dtype.itemsize)
    try:
        return int(np.dtype(dtype).itemsize)
    except TypeError:
        itemsize = getattr(dtype, "itemsize", None)
        if isinstance(itemsize, int):
            return itemsize
        raise cutile.ArgumentTypeError(f"default_config: dtype {dtype!r} is not a dtype") from None


def fits(config: tune.Config, cols: int) -> bool:
    """False for configs not worth a trial: a tile too large for the registers, or a
    one-pass config that repeats a smaller ``tile_cols`` of the same behaviour."""
    row = RowConfig.of(config)
    tile_rows, tile_cols, one_pass = row.tile(cols)
    if tile_rows * tile_cols > ELEMENTS_PER_WARP * row.num_worker_warps:
        return False
    if not one_pass:
        return True
    whole = [v for v in ROW_SPACE.params["tile_cols"] if isinstance(v, int) and v >= next_pow2(cols)]
    return row.tile_cols == min(whole)  # the others run the same one-pass kernel


#: ``build(config, rows, cols, dtype)`` -> (a runner returning the pending work, a check
#: that the outputs it wrote are right)
Build = Callable[[tune.Config, int, int, DType], tuple[Callable[[], Any], Callable[[], bool]]]


#: ``default(rows, cols, dtype)``: a kernel's config without a record (`default_config`'s form)
Default = Callable[[int, int, Any], tune.Config]
#: ``fit(config, cols)``: whether a config is worth a trial (`fits`'s form)
Fit = Callable[[tune.Config, int], bool]


class RowTuning:
    """The configs of one row kernel: `cutile.tune.Tuner` over `ROW_SPACE` with the
    committed record ``records/<arch>/<name>.json``, shapes ``(rows, cols, itemsize)``;
    ``default`` and ``fit`` are the kernel's `default_config` and `fits` where its
    kernels need others."""

    def __init__(self, name: str, source: str, build: Build, default: Default = default_config,
                 fit: Fit = fits) -> None:
        self.name = name
        self._source = source
        self._build = build
        self._default = default
        self._fit = fit
        self._check: Callable[[], bool] = lambda: False
        self._searching: tune.Tuner | None = None  # (made on first use: the arch is the backend's)
        self._answering: dict[str, tune.Tuner] = {}  # per default config: the tuner that answers calls
        self._chosen: dict[tuple[int, int, int], RowConfig] = {}

    @property
    def tuner(self) -> tune.Tuner:
        """The tuner that searches and records (the calls' tuners read the same record)."""
        if self._searching is None:
            self._searching = self._make_tuner(None)
        return self._searching

    def _make_tuner(self, default: tune.Config | None) -> tune.Tuner:
        return tune.Tuner(self.name, ROW_SPACE, self._setup, source=self._source,
                          record=record_path(self.name, self._source, ROW_SPACE, folder=RECORDS),
                          reference=lambda shape: lambda result: self._check(),
                          bucket=_bucket, default=default, on_stale="warn")

    def _setup(self, config: tune.Config, shape: tuple[int, ...]) -> Callable[[], Any]:
        rows, cols, itemsize = shape
        runner, self._check = self._build(config, rows, cols, f32 if itemsize == 4 else bf16)
        return runner

    def config(self, rows: int, cols: int, dtype: DType) -> RowConfig:
        """The config of a call: the record's winner of its bucket, else the tuner's
        cache, else a search (``CUTILE_TUNE=1``), else the kernel's default (`default_config`)."""
        key = (next_pow2(rows), next_pow2(cols), int(dtype.itemsize))
        chosen = self._chosen.get(key)
        if chosen is None:
            default = self._default(rows, cols, dtype)
            # The tuner takes one default; the default depends on the shape, so
            # there is a tuner per default it gives (a few), all reading one record.
            name = json.dumps(default, sort_keys=True)
            if name not in self._answering:
                self._answering[name] = self._make_tuner(default)
            tuner = self._answering[name]
            tuner.search_options["prune"] = lambda config: self._fit(config, cols)
            chosen = self._chosen[key] = RowConfig.of(tuner.config((rows, cols, int(dtype.itemsize))))
        return chosen

    def use(self, rows: int, cols: int, dtype: DType, config: tune.Config) -> None:
        """Calls of this shape's bucket take ``config`` from now on (in this process)."""
        self._chosen[(next_pow2(rows), next_pow2(cols), int(dtype.itemsize))] = RowConfig.of(config)

    def search(self, rows: int, cols: int, dtype: DType, **options: Any) -> tune.SearchResult:
        """A search for one shape (``dtype``: f32, or any 2-byte dtype, searched as bf16)."""
        return self.tuner.tune((rows, cols, int(dtype.itemsize)), prune=lambda config: self._fit(config, cols),
                               **options)

    def record(self, shapes: Sequence[tuple[int, int, DType]], **options: Any) -> tune.Record:
        """The record of the winners for ``shapes`` (to save as ``records/<arch>/<name>.json``)."""
        record = tune.Record(self.tuner.provenance)
        for rows, cols, dtype in shapes:
            found = self.search(rows, cols, dtype, **options)
            record.winners[_bucket((rows, cols, int(dtype.itemsize)))] = tune.Winner(found.best, found.best_ms)
        return record


_cache: dict[Any, Any] = {}


def cached(key: Any, make: Callable[[], Any]) -> Any:
    """The inputs and references of a search, made once for all its configs (only the
    latest key is kept: a search's inputs can be large)."""
    if key not in _cache:
        _cache.clear()
        _scratch.clear()
        _cache[key] = make()
    return _cache[key]


def random_rows(rows: int, cols: int, dtype: DType, seed: int, scale: float = 1.0,
                shift: float = 0.0) -> tuple[cutile.Tensor, Any]:
    """A tensor of normal values and its float64 numpy copy (the values as rounded to ``dtype``)."""
    values = np.random.default_rng(seed).standard_normal((rows, cols), dtype=np.float32) * scale + shift
    tensor = api.from_numpy(values, dtype)
    return tensor, tensor.to_numpy().astype(np.float64)


#: rows a search's correctness gate compares (evenly spaced, the last included)
CHECKED_ROWS = 64


def checked_rows(rows: int) -> Any:
    return np.unique(np.linspace(0, rows - 1, min(rows, CHECKED_ROWS)).astype(np.int64))


_scratch: dict[tuple[Any, ...], cutile.Tensor] = {}


def poisoned(shape: Sequence[int], dtype: DType, slot: int = 0) -> cutile.Tensor:
    """An output of a search's configs, filled with NaN: one tensor per shape, dtype and
    ``slot`` for all of them, poisoned again for each (a search keeps every config's
    runner, and so what it writes, until it ends)."""
    key = (tuple(shape), dtype, slot)
    tensor = _scratch.get(key)
    if tensor is None:
        tensor = _scratch[key] = api.full(list(shape), float("nan"), dtype)
    else:
        rows = tensor.reshape(-1, tensor.shape[-1])
        tile_cols = min(1024, next_pow2(rows.shape[1]))
        _poison_kernel(dtype)(rows.partition([max(1, 4096 // tile_cols), tile_cols])).sync()
    return tensor


@functools.cache
def _poison_kernel(dtype: DType) -> Any:
    def poison(z: Any, BM: Any, BN: Any) -> None:  # noqa: N803 (the tile dims' names)
        z.store(full((BM, BN), float("nan"), dtype))
    return entry(poison, {"z": Mut[Tensor[dtype, ["BM", "BN"]]], "BM": Constant[int], "BN": Constant[int]},
                 f"poison_{dtype}", ())


def close(tensor: cutile.Tensor, expected: Any, dtype: DType, rows: Any = None) -> bool:
    """``tensor`` holds ``expected`` to the dtype's precision (relative to the largest
    value); with ``rows`` (indices), those rows of ``tensor`` hold ``expected``."""
    values = tensor.to_numpy()
    if rows is not None:
        values = values[rows]
    tolerance = 1e-4 if dtype == f32 else 3e-2
    scale = float(np.abs(expected).max(initial=0.0))
    return bool(np.allclose(values.astype(np.float64), expected, rtol=tolerance, atol=tolerance * scale))


def _bucket(shape: Sequence[int]) -> str:
    rows, cols, itemsize = shape
    return f"{next_pow2(rows)}x{next_pow2(cols)}x{8 * itemsize}bit"


# -- the call ----------------------------------------------------------------------------------

@dataclass
class Plan:
    """One call, checked and built: the work (a launch or an op, not run yet, or None
    when there is nothing to compute) and how to give back the results once it ran."""

    work: Any
    finish: Callable[[], Any]

    def run(self) -> Any:
        if self.work is not None:
            self.work.sync()
        return self.finish()


P = ParamSpec("P")
R = TypeVar("R")


class RowFunction(Generic[P]):
    """A kernel-library function: ``f(...)`` runs and returns the results; ``f.launch(...)``
    (with ``out=``) returns the pending launch or op that writes them."""

    def __init__(self, plan: Callable[P, Plan], name: str, doc: str | None) -> None:
        self._plan = plan
        self.__name__ = self.__qualname__ = name
        self.__doc__ = doc
        self.__wrapped__ = plan

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> Any:
        return self._plan(*args, **kwargs).run()

    def launch(self, *args: P.args, **kwargs: P.kwargs) -> Any:
        """The work of one call, not run: a `cutile.Launch` (or a `cuda_async` op of several)
        that writes ``out=``, which is required (the caller holds the results)."""
        if kwargs.get("out") is None:
            raise cutile.ArgumentError(f"{self.__name__}.launch: out= is required (the launch writes it)")
        plan = self._plan(*args, **kwargs)
        if plan.work is None:
            raise cutile.ArgumentError(f"{self.__name__}.launch: the arguments are empty; there is nothing to launch")
        return plan.work

    def __repr__(self) -> str:
        return f"<cutile_kernels function {self.__name__}>"


def row_function(plan: Callable[P, Plan]) -> RowFunction[P]:
    return RowFunction(plan, plan.__name__.removeprefix("_plan_"), plan.__doc__)


def then(first: Any, *following: Callable[[Any], Any]) -> Any:
    """Launches one after the other on one stream, as one op: each of ``following`` builds
    its launch from the previous one's result (the tensors it gives back), since a launch
    holds what it writes until it has run."""
    work = first
    for build in following:
        work = work.then(build)
    return work


def persistent(tensor: cutile.Tensor, tile: Sequence[int], occupancy: int) -> cutile.Partition:
    """``tensor`` partitioned into ``tile`` and mapped ``[1, OWNED]`` (each schedule item owns
    tile rows whole), on ``occupancy`` blocks per SM (at most one per row of tiles)."""
    part = tensor.partition(list(tile))
    row_tiles = part.grid[0]
    mapped = part.map([1, cutile.OWNED])  # the default: one block per SM, or per row of tiles when fewer
    sm_blocks = mapped.blocks or row_tiles
    if occupancy == 1 or sm_blocks >= row_tiles:
        return mapped
    return mapped.unpartition().partition(list(tile)).map([1, cutile.OWNED],
                                                          blocks=min(row_tiles, sm_blocks * occupancy))
