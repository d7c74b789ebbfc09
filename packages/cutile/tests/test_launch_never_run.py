"""A launch freed without having run warns `cutile.LaunchNeverRunWarning` (like a
coroutine never awaited), once per kernel, at the line of the call that made it;
launches that ran, were scheduled, joined an op or were cancelled do not."""

from __future__ import annotations

import asyncio
import gc
import os
import subprocess
import sys
import textwrap
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import cutile
from cutile import api
from cutile.core import Mut, Tensor, f32, i32, load_tile_like


@cutile.entry
def add(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]], y: Tensor[f32, [-1]]):
    z.store(load_tile_like(x, z) + load_tile_like(y, z))


@pytest.fixture(autouse=True)
def fresh_kernel() -> Iterator[None]:
    add._warned_never_run = False  # the warning is once per kernel: each test starts afresh
    yield


def _inputs(n: int = 200) -> tuple[Any, Any, Any, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(n)
    xs = rng.standard_normal(n).astype(np.float32)
    ys = rng.standard_normal(n).astype(np.float32)
    return api.zeros([n]).partition([64]), api.from_numpy(xs), api.from_numpy(ys), xs, ys


def _line() -> int:
    """The caller's line (holding no frame: a frame kept alive would keep its launches)."""
    return sys._getframe(1).f_lineno


def _never_run(caught: list[warnings.WarningMessage]) -> list[warnings.WarningMessage]:
    return [w for w in caught if issubclass(w.category, cutile.LaunchNeverRunWarning)]


def test_a_dropped_launch_warns_naming_the_kernel_and_the_call_line() -> None:
    z, x, y, _, _ = _inputs()
    with pytest.warns(cutile.LaunchNeverRunWarning) as caught:
        line = _line() + 1
        add(z, x, y)  # forgot .sync()
    (warning,) = _never_run(list(caught))
    assert warning.filename == __file__ and warning.lineno == line
    assert f"launch of add was never run: the call at {__file__}:{line} made it" in str(warning.message)
    assert issubclass(cutile.LaunchNeverRunWarning, RuntimeWarning)
    # What the warning is about: the output keeps its old values.
    np.testing.assert_array_equal(z._tensor.to_numpy(), np.zeros(200, np.float32))


def test_a_launch_kept_in_a_variable_names_the_line_that_made_it() -> None:
    z, x, y, _, _ = _inputs()

    def forgets() -> int:
        made_at = _line() + 1
        launch = add(z, x, y)
        assert launch.kernel is add
        return made_at  # the launch is freed here, at the return

    with pytest.warns(cutile.LaunchNeverRunWarning) as caught:
        line = forgets()
    assert _never_run(list(caught))[0].lineno == line


def test_the_warning_is_once_per_kernel() -> None:
    z, x, y, _, _ = _inputs()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            add(z, x, y)
        gc.collect()
    assert len(_never_run(caught)) == 1


def test_launches_that_run_or_join_an_op_do_not_warn() -> None:
    z, x, y, xs, ys = _inputs()
    expected = xs.astype(np.float64) + ys
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        z, x, y = add(z, x, y).sync()
        z, x, y = add(z, x, y).schedule().result()
        z, x, y = add(z, x, y).then(lambda r: add(*r)).sync()
        z, x, y = add(z, x, y).map(lambda r: r).sync()
        z, x, y = add(z, x, y).shared().sync()
        ((z, x, y),) = cutile.zip(add(z, x, y)).sync()
        z, x, y = add(z, x, y).sync_on(None)

        async def awaited(z: Any, x: Any, y: Any) -> Any:
            return await add(z, x, y)

        z, x, y = asyncio.run(awaited(z, x, y))
        with cutile.batch():
            z, x, y = add(z, x, y).sync()
        launch = add(z, x, y).grid(4).compile_options(opt_level=2)
        z, x, y = launch.sync()
        del launch
        gc.collect()
    assert _never_run(caught) == []
    np.testing.assert_array_equal(z.to_numpy(), expected.astype(np.float32))


def test_launches_that_failed_do_not_warn() -> None:
    # The error is what the caller hears of such a launch.
    z, x, y, _, _ = _inputs()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pending = add(z, x, y)
        with pytest.raises(cutile.OwnershipError):
            add(z, x, y)  # refused while made: z is held
        pending.cancel()
        with pytest.raises(cutile.LaunchError, match="grid dims must be positive"):
            add(z, x, y).grid(0)
        with pytest.raises(cutile.LaunchError, match="hints"):
            add(z, x, y).compile_options(hints={"no_such_hint": 1})
        with pytest.raises(cutile.LaunchError, match="disagrees with the grid"):
            add(z, x, y).grid(7).specialization()
        with pytest.raises(cutile.LaunchError, match="expects dtype f32"):
            add(z, api.zeros([200], dtype=i32), y).sync()  # refused when it runs
        gc.collect()
    assert _never_run(caught) == []


def test_a_cancelled_launch_gives_its_tensors_back_and_cannot_run() -> None:
    z, x, y, _, _ = _inputs()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        launch = add(z, x, y)
        launch.cancel()
        assert z._tensor.to_numpy().shape == (200,)  # no longer held
        with pytest.raises(cutile.OwnershipError, match="launch of add was cancelled; it cannot run"):
            launch.sync()
        with pytest.raises(cutile.OwnershipError, match="has run or is part of an op; it cannot be cancelled"):
            launch.cancel()
        ran = add(z, x, y)
        ran.sync()
        with pytest.raises(cutile.OwnershipError, match="cannot be cancelled"):
            ran.cancel()
        del launch, ran
        gc.collect()
    assert _never_run(caught) == []


def test_as_an_error_the_warning_reaches_the_unraisable_hook(monkeypatch: pytest.MonkeyPatch) -> None:
    # Raised in a finalizer, an error cannot propagate: Python reports it as it does
    # for a coroutine never awaited, and the code that freed the launch goes on.
    seen: list[Any] = []
    monkeypatch.setattr(sys, "unraisablehook", seen.append)
    z, x, y, _, _ = _inputs()
    with warnings.catch_warnings():
        warnings.simplefilter("error", cutile.LaunchNeverRunWarning)
        add(z, x, y)
        gc.collect()
    assert len(seen) == 1 and isinstance(seen[0].exc_value, cutile.LaunchNeverRunWarning)


_SCRIPT = textwrap.dedent("""
    import os, warnings
    import cutile
    from cutile import _native, api
    from cutile.core import Mut, Tensor, f32, load_tile_like

    @cutile.entry
    def add(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]], y: Tensor[f32, [-1]]):
        z.store(load_tile_like(x, z) + load_tile_like(y, z))

    @cutile.entry
    def other(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
        z.store(load_tile_like(x, z))

    print("native base:", os.environ["CUDA_CORE_NATIVE"] == "1" and _native.load() is not None)  # (loaded at will)
    z, x = api.zeros([64]).partition([64]), api.ones([64])
    add(z, x, x)  # line 17
    z, x, _ = add(z, x, x).sync()
    add(z, x, x)  # the same kernel: not warned again
    pending = other(api.zeros([64]).partition([64]), x).compile()  # still pending at exit: not warned
""")


@pytest.mark.parametrize("native", ["0", "1"])
def test_both_launch_bases_warn_and_exit_quietly(native: str, tmp_path: Any) -> None:
    # CUDA_CORE_NATIVE=0: the Python finalizer; =1: the native module loaded (its C
    # finalizer and call slot on the classes); the launch still pending at exit says nothing.
    script = tmp_path / "forgets.py"
    script.write_text(_SCRIPT)
    env = dict(os.environ, CUDA_CORE_NATIVE=native, CUTILE_BACKEND="interpreter")
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stderr
    assert f"native base: {native == '1'}" in result.stdout
    assert result.stderr.count("LaunchNeverRunWarning") == 1, result.stderr
    assert f"{script}:17: LaunchNeverRunWarning: launch of add was never run" in result.stderr
    assert "Exception ignored" not in result.stderr and "Traceback" not in result.stderr
