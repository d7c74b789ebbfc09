"""Tuning kernels: search a declared space of configs, keep the winners in records.

- `Space` declares the parameters (named ints or strings) and checks the values of
  those cutile knows: ``num_worker_warps`` (powers of two 1-32, what Tile IR 13.3+
  takes), ``occupancy`` (1-32), ``num_ctas`` (powers of two 1-16), ``group_size``,
  ``split_k`` and ``tile_*`` (ints >= 1).
- `search` tries each config: ``setup(config)`` returns the runner (a callable as
  `cutile.bench.do_bench` takes); a `CutileError` while setting up, compiling or
  launching marks the config invalid and the search goes on; ``reference`` gates
  correctness before timing; ``prune`` drops configs first; ``budget`` bounds the
  wall-clock time (with a budget the configs are tried in a shuffled order, the same for
  every search of the space, so a search cut short has sampled all of it rather than
  its first corner); the best two are re-measured head to head (`do_bench_paired`).
  ``log=`` keeps every trial in a JSONL file, resumed by the next search over the
  same space and refused for another.
- A `Record` is one JSON file per kernel: a `Provenance` header (kernel source hash,
  cutile version, tileiras identity, arch, search-space hash) and one winner per
  shape bucket. `Record.load` verifies the header against the running system and
  raises `StaleRecordError` naming the field that differs.
- A `Tuner` answers the config for a call's shape: its record, else the disk cache of
  winners (``CUTILE_CACHE_DIR/tune``), else a search when ``CUTILE_TUNE=1`` (or
  ``search_on_first_use=True``), else its ``default``; ``winner(shape)`` gives the known
  winner with its measured time (what a caller choosing between kernels compares). A
  stale record or cache file is never applied: for the record the tuner raises, or with
  ``on_stale="warn"`` logs the refusal (logger ``cutile.tune``) and goes on without it;
  a stale cache file is always logged and left out (the next search replaces it).
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import itertools
import json
import logging
import math
import os
import random
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from cutile import _config
from cuda_core import CudaLaunchError, CudaOutOfMemoryError
from cutile_compiler import WORKER_WARPS
from cutile._errors import ArgumentError, CutileError, StaleRecordError, TuneError
from cutile.bench import PairedResult, _check_flush, do_bench, do_bench_paired

__all__ = [
    "Config", "Provenance", "Record", "SearchResult", "Space", "StaleRecordError", "Trial", "TuneError", "Tuner",
    "WORKER_WARPS", "Winner", "search", "shape_bucket",
]

_log = logging.getLogger("cutile.tune")

Value = int | str
Config = dict[str, Value]

RECORD_FORMAT = "cutile.tune.record/1"
LOG_FORMAT = "cutile.tune.log/1"


def _digest(data: Any) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def _config_key(config: Mapping[str, Value]) -> str:
    return json.dumps(dict(config), sort_keys=True)


# -- the space --------------------------------------------------------------------------------

def _check_known(name: str, value: Value) -> None:
    if name == "num_worker_warps" and value not in WORKER_WARPS:
        raise ArgumentError(f"num_worker_warps: {value!r} is not a power of two from 1 to 32 "
                            "(the values Tile IR 13.3+ takes)")
    if name == "occupancy" and not (isinstance(value, int) and 1 <= value <= 32):
        raise ArgumentError(f"occupancy: {value!r} is not an int from 1 to 32")
    if name == "num_ctas" and not (isinstance(value, int) and value in (1, 2, 4, 8, 16)):
        raise ArgumentError(f"num_ctas: {value!r} is not a power of two from 1 to 16")
    if (name in ("group_size", "split_k") or name.startswith("tile")) and not (isinstance(value, int) and value >= 1):
        raise ArgumentError(f"{name}: {value!r} is not an int >= 1")


class Space:
    """The configs to search: ``Space(tile_m=[64, 128], num_worker_warps=[4, 8])`` is
    every combination, in the declared order (the last parameter varies fastest)."""

    def __init__(self, **params: Sequence[Value]) -> None:
        if not params:
            raise ArgumentError("Space: declare at least one parameter")
        self.params: dict[str, tuple[Value, ...]] = {}
        for name, values in params.items():
            if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or not values:
                raise ArgumentError(f"{name}: expected a non-empty list of values, got {values!r}")
            for value in values:
                if isinstance(value, bool) or not isinstance(value, (int, str)):
                    raise ArgumentError(f"{name}: values are ints or strings, got {value!r}")
                _check_known(name, value)
            if len(set(values)) != len(values):
                raise ArgumentError(f"{name}: repeated values in {list(values)!r}")
            self.params[name] = tuple(values)

    @property
    def digest(self) -> str:
        """The search-space hash: the parameters, their values and their order."""
        return _digest([[name, list(values)] for name, values in self.params.items()])

    def configs(self) -> list[Config]:
        names = list(self.params)
        return [dict(zip(names, combo)) for combo in itertools.product(*self.params.values())]

    def __repr__(self) -> str:
        return "Space(" + ", ".join(f"{n}={list(v)!r}" for n, v in self.params.items()) + ")"


# -- a search ---------------------------------------------------------------------------------

@dataclass
class Trial:
    """One config's outcome: ``status`` is ``"ok"`` (timed: ``median_ms``), ``"invalid"``
    (setup, compile or launch failed), ``"wrong"`` (failed the correctness gate) or
    ``"pruned"``; ``reason`` says why for the last three."""

    config: Config
    status: str
    median_ms: float | None = None
    reason: str = ""


@dataclass
class SearchResult:
    """The winner, every trial, the head-to-head of the best two (None when only one
    config was valid), and whether the budget stopped the search early."""

    best: Config
    best_ms: float
    trials: list[Trial]
    paired: PairedResult | None
    out_of_budget: bool


Runner = Callable[[], Any]
Setup = Callable[[Config], Runner]


def _first_result(value: Any) -> Any:
    """What a runner's call gave, run to completion: a launch or op is synced."""
    import cuda_async
    from cutile._launch import Launch

    if isinstance(value, (Launch, cuda_async.DeviceOp)):
        value = value.sync()
    return value


def _to_numpy(value: Any) -> np.ndarray[Any, Any]:
    from cutile._tensor import Partition, Tensor

    if isinstance(value, tuple):
        value = value[0]  # a launch gives its tensors back in parameter order: the output first
    if isinstance(value, (Partition, Tensor)):  # (a partition is read, not consumed)
        return value.to_numpy()
    if hasattr(value, "detach"):  # torch
        value = value.detach().cpu().numpy()
    elif hasattr(value, "get"):  # CuPy
        value = value.get()
    return np.asarray(value)


def _gate(value: Any, reference: Any, rtol: float, atol: float) -> str | None:
    """None when ``value`` passes, else why not."""
    if callable(reference):
        return None if reference(value) else "the check function returned False"
    got = _to_numpy(value).astype(np.float64)
    expected = np.asarray(reference, dtype=np.float64)
    if got.shape != expected.shape:
        return f"result of shape {list(got.shape)}, the reference is {list(expected.shape)}"
    if not np.allclose(got, expected, rtol=rtol, atol=atol):
        worst = float(np.max(np.abs(got - expected)))
        return f"result differs from the reference (max abs error {worst:.3g}, rtol={rtol}, atol={atol})"
    return None


class _Log:
    """The JSONL trial log: a header naming the space, then one line per trial."""

    def __init__(self, path: Path, space: Space) -> None:
        self.path = path
        self.done: dict[str, Trial] = {}
        header = {"format": LOG_FORMAT, "space": space.digest, "params": {n: list(v) for n, v in space.params.items()}}
        if path.exists() and path.stat().st_size > 0:
            lines = path.read_text().splitlines()
            try:
                found = json.loads(lines[0])
            except json.JSONDecodeError:
                raise TuneError(f"trial log {path} is not a cutile tuning log (line 1 is not JSON)") from None
            if not isinstance(found, dict) or found.get("format") != LOG_FORMAT:
                raise TuneError(f"trial log {path} is not a cutile tuning log")
            if found.get("space") != space.digest:
                raise TuneError(f"trial log {path} is of another search space ({found.get('params')!r}, "
                                f"this search is {header['params']!r}); give another log path or delete it")
            for number, line in enumerate(lines[1:], start=2):
                try:
                    entry = json.loads(line)
                    trial = Trial(dict(entry["config"]), str(entry["status"]), entry.get("median_ms"),
                                  str(entry.get("reason", "")))
                except (json.JSONDecodeError, KeyError, TypeError):
                    if number == len(lines):  # a line cut short by an interrupted run: tried again
                        break
                    raise TuneError(f"trial log {path}:{number} is malformed") from None
                self.done[_config_key(trial.config)] = trial
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(header) + "\n")

    def append(self, trial: Trial) -> None:
        with self.path.open("a") as out:
            out.write(json.dumps(dataclasses.asdict(trial)) + "\n")


def _positive(value: Any, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 or math.isnan(value):
        raise ArgumentError(f"{name} must be a positive number, got {value!r}")


def search(space: Space, setup: Setup, *, reference: Any = None, rtol: float = 1e-5, atol: float = 1e-6,
           prune: Callable[[Config], bool] | None = None, budget: float | None = None,
           log: str | os.PathLike[str] | None = None, warmup: int = 5, reps: int = 30,
           paired_reps: int = 50, order: str | None = None, flush_l2: bool | str = True) -> SearchResult:
    """Tries every config of ``space`` and returns the fastest valid one.

    Args:
        setup: builds one config's runner; a `CutileError` it raises (or the runner
            raises on its first call: compile, launch), or a `cuda_core.CudaLaunchError`
            or `cuda_core.CudaOutOfMemoryError` (a launch the driver refuses, memory it
            lacks), marks the config invalid. Other exceptions propagate.
        reference: the expected result (array-like, compared with the runner's first
            result, or the first tensor of a tuple, by ``np.allclose(rtol, atol)``), or a
            function of that result returning True when it is right. None: no gate.
        prune: returns False for configs not worth trying (kept in the log as pruned).
        budget: seconds of wall clock; no new config is started past it (the trials not
            started are left out of the log, so that a resumed search tries them).
        log: a JSONL trial log: trials it holds are not run again.
        warmup, reps: `do_bench`'s, per config; ``paired_reps``: the head-to-head's;
            ``flush_l2``: both's (``"clean"``: the L2 left clean before each rep).
        order: ``"declared"`` (`Space.configs`' order) or ``"shuffled"`` (a fixed
            permutation, seeded by the space's digest: every shuffled search of the
            space tries the same sequence). Default: shuffled with a budget, else declared.
    Raises:
        TuneError: no config was valid (the message lists why), or the log is of another space.
    """
    if not isinstance(space, Space):
        raise ArgumentError(f"space must be a cutile.tune.Space, got {type(space).__name__}")
    if not callable(setup):
        raise ArgumentError(f"setup must be a callable of a config, got {type(setup).__name__}")
    if prune is not None and not callable(prune):
        raise ArgumentError(f"prune must be a callable of a config, got {type(prune).__name__}")
    if budget is not None:
        _positive(budget, "budget")
    _check_flush(flush_l2)  # (refused here, not as every config's failure)
    configs = _ordered(space, order, budget is not None)
    trial_log = _Log(Path(log), space) if log is not None else None
    started = time.monotonic()
    trials: list[Trial] = []
    runners: dict[str, Runner] = {}
    out_of_budget = False
    for config in configs:
        key = _config_key(config)
        if trial_log is not None and key in trial_log.done:
            trials.append(trial_log.done[key])
            continue
        if budget is not None and time.monotonic() - started >= budget:
            out_of_budget = True
            break
        trial = _try(config, setup, prune, reference, rtol, atol, warmup, reps, runners, flush_l2)
        trials.append(trial)
        if trial_log is not None:
            trial_log.append(trial)
    valid = sorted((t for t in trials if t.status == "ok"), key=lambda t: t.median_ms or 0.0)
    if not valid:
        reasons = "; ".join(f"{t.config}: {t.status}: {t.reason}" for t in trials) or "no config was tried"
        raise TuneError(f"no valid config in {space!r}{' within the budget' if out_of_budget else ''}: {reasons}")
    best, best_ms = valid[0].config, valid[0].median_ms or 0.0
    paired = None
    if len(valid) >= 2:
        first, second = (_runner_of(t.config, setup, runners) for t in valid[:2])
        if first is not None and second is not None:
            paired = do_bench_paired(first, second, warmup=1, reps=paired_reps, flush_l2=flush_l2)
            if paired.ratio < 1.0:  # the runner-up won head to head
                best, best_ms = valid[1].config, paired.b.median_ms
            else:
                best_ms = paired.a.median_ms
    return SearchResult(best, best_ms, trials, paired, out_of_budget)


ORDERS = ("declared", "shuffled")


def _ordered(space: Space, order: str | None, budgeted: bool) -> list[Config]:
    """The configs of ``space`` in the order a search tries them."""
    if order is None:
        order = "shuffled" if budgeted else "declared"
    if order not in ORDERS:
        raise ArgumentError(f"order must be one of {list(ORDERS)}, got {order!r}")
    configs = space.configs()
    if order == "shuffled":
        # A budget cut short samples the whole space: the declared order would spend it on
        # the first values of the first parameters (e.g. every occupancy-1 config first).
        random.Random(space.digest).shuffle(configs)
    return configs


def _runner_of(config: Config, setup: Setup, runners: dict[str, Runner]) -> Runner | None:
    key = _config_key(config)
    if key not in runners:  # a trial from the log: set up again
        try:
            runners[key] = setup(dict(config))
        except _CONFIG_FAILURES as exc:
            _log.warning("cutile.tune: config %s (from the log) no longer sets up: %s", config, exc)
            return None
    return runners[key]


# What makes a config invalid rather than the search wrong: cutile's refusals (compile,
# launch checks) and the driver's refusal of a launch (too many resources) or of memory.
_CONFIG_FAILURES = (CutileError, CudaLaunchError, CudaOutOfMemoryError)


def _try(config: Config, setup: Setup, prune: Callable[[Config], bool] | None, reference: Any, rtol: float,
         atol: float, warmup: int, reps: int, runners: dict[str, Runner], flush_l2: bool | str) -> Trial:
    if prune is not None and not prune(dict(config)):
        return Trial(config, "pruned", reason="prune returned False")
    try:
        runner = setup(dict(config))
        value = _first_result(runner())  # compiles and launches once
        if reference is not None:
            wrong = _gate(value, reference, rtol, atol)
            if wrong is not None:
                return Trial(config, "wrong", reason=wrong)
        result = do_bench(runner, warmup=warmup, reps=reps, flush_l2=flush_l2)
    except _CONFIG_FAILURES as exc:
        return Trial(config, "invalid", reason=f"{type(exc).__name__}: {exc}".splitlines()[0])
    runners[_config_key(config)] = runner
    return Trial(config, "ok", median_ms=result.median_ms)


# -- records ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Provenance:
    """What a record's winners were measured under; a record is used only where every
    field matches."""

    kernel: str
    source_hash: str
    cutile_version: str
    tileiras: str
    arch: str
    space_hash: str

    @classmethod
    def current(cls, kernel: str, source: Any, space: Space) -> Provenance:
        """The provenance here and now: ``source`` is a `cutile.Kernel`, a function, or
        source text (its hash); tileiras (its release and a digest of its ``--version``
        text, the same on every install of it) and arch are the GPU's, or ``"interpreter"``."""
        from cutile import __version__
        from cutile._backend import current

        if current() == "gpu":
            from cuda_core import Device
            from cutile_compiler import find_toolchain

            chain = find_toolchain()
            # The release and its --version text, not the disk cache's identity (which adds the
            # files' paths and mtimes): a committed record must hold on every install of that release.
            tileiras = f"tileiras {chain.release} ({hashlib.sha256(chain.version_text.encode()).hexdigest()[:16]})"
            arch = Device(0).sm_name
        else:
            tileiras = arch = "interpreter"
        return cls(kernel, _source_hash(source), __version__, tileiras, arch, space.digest)

    def mismatch(self, other: Provenance) -> tuple[str, str, str] | None:
        """The first field where ``other`` (the recorded one) differs: (field, recorded, current)."""
        for f in dataclasses.fields(self):
            mine, theirs = getattr(self, f.name), getattr(other, f.name)
            if mine != theirs:
                return f.name, theirs, mine
        return None


def _source_hash(source: Any) -> str:
    from cutile._entry import Kernel

    if isinstance(source, Kernel):
        source = source.function
    if not isinstance(source, str):
        try:
            source = inspect.getsource(source)
        except (TypeError, OSError) as exc:
            raise ArgumentError(f"source: cannot read the source of {source!r} ({exc}); give its text") from None
    return hashlib.sha256(source.encode()).hexdigest()[:16]


@dataclass
class Winner:
    config: Config
    median_ms: float


def shape_bucket(shape: Sequence[int]) -> str:
    """The default bucket of a shape: each extent rounded up to a power of two,
    ``"1024x4096"`` (a winner serves the shapes of its bucket)."""
    return "x".join(str(1 << max(int(n) - 1, 0).bit_length()) for n in shape)


@dataclass
class Record:
    """One kernel's winners by shape bucket, under one provenance."""

    provenance: Provenance
    winners: dict[str, Winner] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps({"format": RECORD_FORMAT, "provenance": dataclasses.asdict(self.provenance),
                           "winners": {b: dataclasses.asdict(w) for b, w in sorted(self.winners.items())}},
                          indent=1, sort_keys=True) + "\n"

    def save(self, path: str | os.PathLike[str]) -> None:
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        temporary = target.with_name(target.name + f".{os.getpid()}.tmp")
        temporary.write_text(self.to_json())
        temporary.replace(target)  # readers never see half a record

    @classmethod
    def load(cls, path: str | os.PathLike[str], expected: Provenance) -> Record:
        """The record at ``path``, verified against ``expected``.

        Raises:
            StaleRecordError: a provenance field differs (named in the error).
            TuneError: the file is missing or not a record.
        """
        try:
            data = json.loads(Path(path).read_text())
            if data.get("format") != RECORD_FORMAT:
                raise TuneError(f"{path} is not a cutile tuning record (format {data.get('format')!r})")
            recorded = Provenance(**{f.name: str(data["provenance"][f.name]) for f in dataclasses.fields(Provenance)})
            winners = {str(b): Winner(dict(w["config"]), float(w["median_ms"])) for b, w in data["winners"].items()}
        except OSError as exc:
            raise TuneError(f"cannot read tuning record {path}: {exc}") from None
        except (json.JSONDecodeError, KeyError, TypeError, AttributeError, ValueError) as exc:
            raise TuneError(f"{path} is not a well-formed cutile tuning record ({type(exc).__name__}: {exc})") from None
        wrong = expected.mismatch(recorded)
        if wrong is not None:
            raise StaleRecordError(str(path), *wrong)
        return cls(recorded, winners)


# -- the tuner --------------------------------------------------------------------------------

def cache_dir() -> Path:
    """Where tuners keep the winners they searched for: ``CUTILE_CACHE_DIR/tune``."""
    from cutile_compiler.config import CACHE_DIR

    return CACHE_DIR.get() / "tune"


class Tuner:
    """The config of one kernel for a call's shape (see the module docstring).

    Args:
        name: the kernel's name (the record's and the cache file's).
        space: the configs.
        setup: ``setup(config, shape)`` builds a runner for one shape.
        source: the kernel (or function, or source text) whose hash the provenance holds.
        record: a committed record file (optional; missing is no error, stale is).
        reference: ``reference(shape)`` gives the correctness gate of `search` for a shape.
        bucket: shape -> bucket name (default `shape_bucket`).
        default: the config where no winner is known and no search is made.
        search_on_first_use: search for a shape with no winner (default: ``CUTILE_TUNE``).
        on_stale: a stale record: ``"raise"`` (`StaleRecordError`) or ``"warn"`` (log it,
            do not use it). A stale cache file is always logged and left out.
        search_options: passed to `search` (budget, prune, reps...).
    """

    def __init__(self, name: str, space: Space, setup: Callable[[Config, tuple[int, ...]], Runner], *,
                 source: Any, record: str | os.PathLike[str] | None = None,
                 reference: Callable[[tuple[int, ...]], Any] | None = None,
                 bucket: Callable[[Sequence[int]], str] = shape_bucket, default: Mapping[str, Value] | None = None,
                 search_on_first_use: bool | None = None, on_stale: str = "raise",
                 search_options: Mapping[str, Any] | None = None) -> None:
        if not name or not name.replace("_", "").replace("-", "").isalnum():
            raise ArgumentError(f"name must be letters, digits, '_' or '-', got {name!r}")
        if on_stale not in ("raise", "warn"):
            raise ArgumentError(f"on_stale must be 'raise' or 'warn', got {on_stale!r}")
        if default is not None:
            config = dict(default)
            if set(config) != set(space.params):
                raise ArgumentError(f"default must set exactly the parameters {list(space.params)}, got {list(config)}")
            for key, value in config.items():
                _check_known(key, value)
        self.name, self.space, self.setup, self.source = name, space, setup, source
        self.record_path = Path(record) if record is not None else None
        self.reference, self.bucket, self.on_stale = reference, bucket, on_stale
        self.default = dict(default) if default is not None else None
        self.search_on_first_use = search_on_first_use
        self.search_options = dict(search_options or {})
        self._provenance: Provenance | None = None
        self._winners: dict[str, Winner] | None = None  # the record's and the cache's, verified
        self._chosen: dict[str, Config] = {}  # bucket -> config answered (the hot path)

    @property
    def provenance(self) -> Provenance:
        if self._provenance is None:
            self._provenance = Provenance.current(self.name, self.source, self.space)
        return self._provenance

    @property
    def cache_path(self) -> Path:
        return cache_dir() / f"{self.name}.json"

    def _refuse(self, error: StaleRecordError) -> None:
        if self.on_stale == "raise":
            raise error
        _log.warning("cutile.tune: not using %s", error)

    def _load(self, path: Path, *, committed: bool) -> Record | None:
        if not path.exists():
            return None
        try:
            return Record.load(path, self.provenance)
        except StaleRecordError as exc:
            if committed:
                self._refuse(exc)
            else:  # the cache is ours: a stale one is not used, and the next search replaces it
                _log.warning("cutile.tune: not using the cached winners: %s", exc)
            return None

    def _known(self) -> dict[str, Winner]:
        if self._winners is None:
            winners: dict[str, Winner] = {}
            cached = self._load(self.cache_path, committed=False)
            if cached is not None:
                winners.update(cached.winners)
            if self.record_path is not None:
                committed = self._load(self.record_path, committed=True)
                if committed is not None:  # the committed record wins over the cache
                    winners.update(committed.winners)
            self._winners = winners
        return self._winners

    def winner(self, shape: Sequence[int]) -> Winner | None:
        """The known winner of ``shape``'s bucket with its measured median (the
        committed record's, else the cache's), or None; never searches.

        Raises:
            StaleRecordError: the record is stale (``on_stale="raise"``).
        """
        return self._known().get(self.bucket(shape))

    def config(self, shape: Sequence[int]) -> Config:
        """The config for ``shape``: a known winner of its bucket, else a search (when
        enabled; its winner goes to the cache), else the default.

        Raises:
            StaleRecordError: the record or cache is stale (``on_stale="raise"``).
            TuneError: no winner, no search and no default.
        """
        key = self.bucket(shape)
        chosen = self._chosen.get(key)
        if chosen is not None:
            return chosen
        known = self._known().get(key)
        winner = known.config if known is not None else None
        if winner is None:
            enabled = self.search_on_first_use
            if enabled is None:
                enabled = _config.TUNE.get()
            if enabled:
                winner = self._search_and_cache(tuple(int(n) for n in shape), key)
            elif self.default is not None:
                winner = self.default
            else:
                raise TuneError(f"{self.name}: no tuned config for shape bucket {key} and no default; "
                                "set CUTILE_TUNE=1 to search on first use")
        self._chosen[key] = winner
        return winner

    def tune(self, shape: Sequence[int], **options: Any) -> SearchResult:
        """Searches for ``shape`` (options as `search`'s, over ``search_options``)."""
        shape = tuple(int(n) for n in shape)
        reference = self.reference(shape) if self.reference is not None else None
        merged = {**self.search_options, **options}
        return search(self.space, lambda config: self.setup(config, shape), reference=reference, **merged)

    def make_record(self, shapes: Iterable[Sequence[int]], **options: Any) -> Record:
        """Searches each shape and gives the record of the winners (to `Record.save`
        and commit)."""
        record = Record(self.provenance)
        for shape in shapes:
            result = self.tune(shape, **options)
            record.winners[self.bucket(shape)] = Winner(result.best, result.best_ms)
        return record

    def _search_and_cache(self, shape: tuple[int, ...], key: str) -> Config:
        result = self.tune(shape)
        cached = None
        if self.cache_path.exists():
            try:
                cached = Record.load(self.cache_path, self.provenance)
            except TuneError:  # a stale or broken cache file is replaced, not merged
                cached = None
        record = cached or Record(self.provenance)
        record.winners[key] = Winner(result.best, result.best_ms)
        record.save(self.cache_path)
        self._known()[key] = Winner(result.best, result.best_ms)
        return result.best
