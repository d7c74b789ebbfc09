"""cuda_async's native extension: the reentrant locks C code takes (put in place of
threading's when it is loaded), and the batch steady state (native/batch_api.h),
checked against the Python path it mirrors."""

from __future__ import annotations

import threading
import time

import pytest
from cuda_core._native import enabled
from cuda_core.testing import FakeDriver
from test_streams import kernel

import cuda_async as ca
from cuda_async import _native, _streams


@pytest.fixture
def native() -> object:
    """The extension, required where it can be built (CI has a C compiler and the
    Python headers); only CUDA_CORE_NATIVE=0 may turn it off."""
    try:
        return _native.batch_api()
    except _native.NativeUnavailable as exc:
        if enabled():
            pytest.fail(f"cuda_async's native extension could not be built: {exc}")
        pytest.skip("native code is turned off (CUDA_CORE_NATIVE=0)")


def test_the_native_locks_are_in_place_and_reentrant_and_exclude_other_threads(native: object) -> None:
    from cuda_async import _ledger, _resource

    # The extension put its locks in place of the threading ones, in every global.
    lock = _ledger.lock
    assert type(lock) is native.RLock  # type: ignore[attr-defined]
    assert _resource._ledger_lock is lock and type(_streams._lock) is type(lock)  # type: ignore[attr-defined]
    assert _resource._streams_lock is _streams._lock  # type: ignore[attr-defined]
    lock = native.RLock()  # type: ignore[attr-defined]
    with lock:
        with lock:  # reentrant
            assert lock._is_owned()
        got: list[bool] = []
        other = threading.Thread(target=lambda: got.append(lock.acquire(False)))
        other.start()
        other.join()
        assert got == [False]  # held by this thread
    assert not lock._is_owned()
    with pytest.raises(RuntimeError, match="un-acquired"):
        lock.release()

    order: list[str] = []
    lock.acquire()

    def waiter() -> None:
        with lock:  # blocks (without the GIL) until the main thread releases
            order.append("waiter")

    thread = threading.Thread(target=waiter)
    thread.start()
    time.sleep(0.05)
    order.append("main")
    lock.release()
    thread.join(5)
    assert order == ["main", "waiter"]


def _plan(accesses: ca.AccessSet) -> ca.ClaimPlan:
    """The claim of an op over ``accesses``'s spans (what a pending op would hold)."""
    return ca.ClaimPlan((domain, start, end, writes, "k", "k", r.name)
                        for r, domain, start, end, writes, _ in accesses.spans)


def _state(resources: list[ca.Resource], stream: object) -> list[object]:
    from cuda_async import _ledger

    now = _streams.current_epoch(stream)  # type: ignore[arg-type]
    out: list[object] = []
    for r in resources:
        last = r._last_write
        domain, start, end = r.span
        holds = [h for h in _ledger.holds.get(domain, ()) if h[0] < end and start < h[1]]
        out.append((sorted((h[4].name if h[4] is not None else None, h[2], h[3]) for h in holds),
                    None if last is None else (last[0] is stream, now - last[1]),
                    sorted((s is stream, now - e) for s, (e, _) in r._reads.items())))
    return out


def test_a_repeat_in_a_batch_records_what_the_python_path_records(fake_driver: FakeDriver, native: object) -> None:
    outcomes = []
    for use_native in (False, True):
        x, z = ca.Resource("x"), ca.Resource("z")
        accesses = ca.AccessSet((x,), (z,))
        with ca.batch(policy=ca.SingleStream()) as active:
            op = kernel(fake_driver, "k", reads=[x], writes=[z])
            op.sync()  # the first takes the holds (Python)
            for _ in range(5):
                if use_native:
                    assert _native.batch_api().repeat(accesses, _plan(accesses)) == int(active.stream.handle)
                else:
                    ca.FnOp.from_accesses(lambda s: None, accesses, name="k").sync()
            outcomes.append((_state([x, z], active.stream), active.ops))
    assert outcomes[0] == outcomes[1]


def test_a_repeat_is_refused_outside_the_steady_state(fake_driver: FakeDriver, native: object) -> None:
    native_repeat = _native.batch_api().repeat
    repeat = lambda accesses: native_repeat(accesses, _plan(accesses))  # noqa: E731
    x, z, w = ca.Resource("x"), ca.Resource("z"), ca.Resource("w")
    accesses = ca.AccessSet((x,), (z,))
    assert repeat(accesses) is None  # no batch
    with ca.batch(policy=ca.SingleStream()):
        assert repeat(accesses) is None  # the job does not hold x and z yet
        kernel(fake_driver, "k", reads=[x], writes=[z]).sync()
        assert repeat(ca.AccessSet((x,), (z, w))) is None  # w is not held
        assert repeat(ca.AccessSet((), (x,))) is None  # x is held for reading only
        kernel(fake_driver, "other", writes=[w]).sync()  # the stream's unmarked interest is another op's
        assert repeat(accesses) is None
        kernel(fake_driver, "k", reads=[x], writes=[z]).sync()
        from cuda_async import _capture

        _capture._active.append(object())  # type: ignore[arg-type]  # a capture on some thread or task
        try:
            assert repeat(accesses) is None  # DeviceOp.sync would record it: the Python path's
        finally:
            _capture._active.pop()
        assert repeat(accesses) is not None
    with ca.batch(policy=ca.SingleStream()) as active:
        kernel(fake_driver, "k", reads=[x], writes=[z]).sync()
        _native_lock = _streams._lock
        held = threading.Event()
        release = threading.Event()

        def holder() -> None:
            with _native_lock:
                held.set()
                release.wait(5)

        thread = threading.Thread(target=holder)
        thread.start()
        held.wait(5)
        try:
            assert repeat(accesses) is None  # another thread is inside the bookkeeping
        finally:
            release.set()
            thread.join(5)
        assert repeat(accesses) == int(active.stream.handle)


_INSTALL_SCRIPT = """
import sys, threading
import cuda_async
from cuda_async import _ledger, _native, _streams

assert "cuda_async._native_batch" not in sys.modules  # (importing builds and loads nothing native)
assert type(_ledger.lock) is type(threading.RLock())
before = _ledger.lock
inside, leave = threading.Event(), threading.Event()

def holder():
    with _ledger.lock:  # another thread inside the bookkeeping: the locks wait for it to leave
        inside.set()
        leave.wait(10)

thread = threading.Thread(target=holder)
thread.start()
inside.wait(10)
threading.Timer(0.01, leave.set).start()
module = _native.batch_api()
assert leave.is_set()  # (put in place only once the holder had let go)
thread.join(10)
print(type(_ledger.lock) is module.RLock, type(_streams._lock) is module.RLock, _ledger.lock is not before)
"""


def test_the_native_locks_are_put_in_place_only_when_no_other_thread_is_inside(tmp_path: object) -> None:
    import os
    import subprocess
    import sys
    from pathlib import Path

    if not enabled():
        pytest.skip("native code is turned off (CUDA_CORE_NATIVE=0)")
    script = Path(str(tmp_path)) / "install.py"
    script.write_text(_INSTALL_SCRIPT)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, CUDA_CORE_NATIVE="1"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "True", "True"]
