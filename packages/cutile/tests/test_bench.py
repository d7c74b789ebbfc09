"""`cutile.bench`: wall-clock timing on the interpreter, CUDA-event timing with L2
flushes on the fake driver (what is recorded, on which stream, in which order), paired
ratios, argument errors, and the real thing on a GPU."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import cutile
from cuda_core.testing import FakeDriver
from cutile import _gpu, api, bench
from cutile.core import Mut, Tensor, f32, load_tile_like

FakeGpu = Callable[..., contextlib.AbstractContextManager[FakeDriver]]


@cutile.entry
def bench_add(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]], y: Tensor[f32, [-1]]) -> None:
    z.store(load_tile_like(x, z) + load_tile_like(y, z))


@pytest.mark.interpreter_only
def test_interpreter_times_by_wall_clock_and_says_so() -> None:
    calls: list[int] = []

    def work() -> None:
        calls.append(1)
        time.sleep(0.002)

    result = bench.do_bench(work, warmup=2, reps=5, quantiles=[0.5, 0.9])
    assert len(calls) == 7
    assert result.reps == 5 and result.warmup == 2
    assert result.timing == "wall-clock" and not result.l2_flushed
    assert "wall-clock" in repr(result) and "interpreter" in repr(result)
    assert 2.0 <= result.min_ms <= result.median_ms <= result.max_ms
    assert set(result.quantiles_ms) == {0.5, 0.9}
    assert result.quantiles_ms[0.5] == pytest.approx(result.median_ms)


@pytest.mark.interpreter_only
def test_a_returned_launch_is_run_and_its_tensors_come_back_each_rep() -> None:
    n = 300
    x, y = api.from_numpy(np.arange(n, dtype=np.float32)), api.ones([n])
    z = api.full([n], -7.0).partition([128])  # poisoned
    result = bench.do_bench(lambda: bench_add(z, x, y), warmup=1, reps=3)
    assert result.reps == 3
    np.testing.assert_array_equal(z.unpartition().to_numpy(), np.arange(n) + 1.0)


@pytest.mark.interpreter_only
def test_paired_alternates_the_arms_and_gives_b_over_a() -> None:
    order: list[str] = []

    def arm(name: str, seconds: float) -> Callable[[], None]:
        def run() -> None:
            order.append(name)
            time.sleep(seconds)
        return run

    result = bench.do_bench_paired(arm("a", 0.002), arm("b", 0.012), warmup=1, reps=4)
    assert order[:2] == ["a", "b"]  # warm-up
    assert order[2:] == ["a", "b", "b", "a", "a", "b", "b", "a"]
    assert len(result.ratios) == 4 and result.timing == "wall-clock"
    assert result.ratio > 1.5  # (the median of the reps' b/a: one rep may stall on a loaded machine)
    assert result.ratio == pytest.approx(float(np.median(result.ratios)))
    assert result.a.median_ms < result.b.median_ms
    assert "b/a=" in repr(result)


@pytest.mark.interpreter_only
@pytest.mark.parametrize("kwargs, name", [
    ({"reps": 0}, "reps"), ({"reps": 2.5}, "reps"), ({"reps": True}, "reps"), ({"warmup": -1}, "warmup"),
    ({"quantiles": [1.5]}, "quantiles"), ({"quantiles": "median"}, "quantiles"), ({"flush_l2": 1}, "flush_l2"),
    ({"stream": 7}, "stream"),
])
def test_bad_arguments_are_argument_errors_naming_the_parameter(kwargs: dict[str, Any], name: str) -> None:
    with pytest.raises(cutile.ArgumentError, match=name):
        bench.do_bench(lambda: None, **kwargs)
    with pytest.raises(cutile.ArgumentError, match=name):
        bench.do_bench_paired(lambda: None, lambda: None, **kwargs)


@pytest.mark.interpreter_only
def test_a_non_callable_is_refused() -> None:
    with pytest.raises(cutile.ArgumentError, match="fn must be a callable"):
        bench.do_bench(42)  # type: ignore[arg-type]
    with pytest.raises(cutile.ArgumentError, match="b must be a callable"):
        bench.do_bench_paired(lambda: None, None)  # type: ignore[arg-type]


@pytest.mark.interpreter_only
def test_events_bracket_each_rep_on_the_bench_stream_after_an_l2_flush(make_fake_gpu: FakeGpu) -> None:
    with make_fake_gpu() as fake:
        stream = _gpu.default_stream()
        seen: list[int] = []

        def work() -> None:  # enqueues on the stream the bench made current
            import cuda_async

            current = cuda_async.default_policy().next_stream()
            assert current is not None
            seen.append(int(current.handle))
            fake.enqueue("launch", current.handle, "work")

        start = len(fake.log)
        result = bench.do_bench(work, warmup=2, reps=3)
        log = fake.log[start:]
    assert set(seen) == {int(stream.handle)}
    assert result.timing == "cuda-events" and result.l2_flushed and result.reps == 3
    timed = [entry for entry in log if entry[0] in ("memset", "record", "launch")][2:]  # past the warm-up
    assert [call for call, _, _ in timed] == ["memset", "record", "launch", "record"] * 3
    assert all(s == int(stream.handle) for _, s, _ in timed)
    assert timed[0][2] >= 2 * 1024  # the fake's L2 is 1024 bytes: the flush covers twice that
    # The fake clock moves 1 us per stream-ordered call: start record, launch, end record.
    assert result.samples_ms == pytest.approx((0.002,) * 3)


@pytest.mark.interpreter_only
def test_a_clean_flush_reads_a_second_buffer_after_the_memset(make_fake_gpu: FakeGpu) -> None:
    from cutile import _l2_sweep

    with make_fake_gpu(kernels=[_l2_sweep.l2_read_sweep]) as fake:
        stream = _gpu.default_stream()
        # the fake's L2 is 1024 bytes: one block sums one (8, 1024) tile
        sums, source = api.empty([1, 1]), api.empty([8, 1024])
        probe = _l2_sweep.l2_read_sweep(sums.partition([1, 1]), source, tiles=1, BM=8, BN=1024)
        compiled = probe.kernel.compiled(probe.plan().spec, "sm_90")
        fake.kernels[compiled.name] = _gpu.fake_param_layout(compiled.abi)
        probe.cancel()

        def work() -> None:
            fake.enqueue("launch", stream.handle, "work")

        start = len(fake.log)
        result = bench.do_bench(work, warmup=2, reps=3, flush_l2="clean")
        log = [entry for entry in fake.log[start:] if entry[0] in ("memset", "record", "launch")]
    assert result.l2_flushed and result.l2_clean and "L2 flushed and clean" in repr(result)
    timed = log[log.index(next(e for e in log if e[0] == "memset")):]
    calls = [call for call, _, _ in timed]
    # per rep: the memset, the sweep's launch (waited for), then the bracketed work
    assert calls == ["memset", "launch", "record", "launch", "record"] * 3
    sweeps = [detail for call, _, detail in timed if call == "launch"][::2]
    assert all(compiled.name in str(detail) for detail in sweeps)
    assert all(s == int(stream.handle) for _, s, _ in timed)
    with pytest.raises(cutile.ArgumentError, match="flush_l2 must be True, False, 'write' or 'clean'"):
        bench.do_bench(work, flush_l2="dirty")


@pytest.mark.interpreter_only
def test_no_flush_when_asked_and_a_given_stream_is_used(make_fake_gpu: FakeGpu) -> None:
    import cuda_core

    with make_fake_gpu() as fake:
        stream = cuda_core.Stream.create()
        start = len(fake.log)
        result = bench.do_bench(lambda: None, warmup=0, reps=2, stream=stream, flush_l2=False)
        log = fake.log[start:]
    assert not result.l2_flushed and "L2" not in repr(result)
    assert [call for call, _, _ in log if call != "synchronize"] == ["record", "record"] * 2
    assert {s for _, s, _ in log} == {int(stream.handle)}


@pytest.mark.interpreter_only
def test_paired_on_events_gives_the_ratio_of_each_pair(make_fake_gpu: FakeGpu) -> None:
    with make_fake_gpu() as fake:
        def a() -> None:
            fake.enqueue("launch", _gpu.default_stream().handle, "a")

        def b() -> None:
            for _ in range(3):
                fake.enqueue("launch", _gpu.default_stream().handle, "b")

        result = bench.do_bench_paired(a, b, warmup=0, reps=4, flush_l2=False)
    # a: record, 1 launch, record = 2 ticks; b: 4 ticks.
    assert result.ratios == pytest.approx((2.0,) * 4)
    assert result.a.samples_ms == pytest.approx((0.002,) * 4)
    assert result.timing == "cuda-events"


def _fake_add_arguments(fake: FakeDriver) -> tuple[Any, Any, Any]:
    """bench_add's arguments, its kernel known to the fake driver."""
    n = 1000
    x, y = api.empty([n]), api.empty([n])  # (no fill kernel on the fake driver)
    z = api.empty([n]).partition([256])
    probe = bench_add(z, x, y)
    compiled = probe.kernel.compiled(probe.plan().spec, "sm_90")
    fake.kernels[compiled.name] = _gpu.fake_param_layout(compiled.abi)
    probe.cancel()
    return z, x, y


@pytest.mark.interpreter_only
@pytest.mark.parametrize("form", ["launch", "sync"])
def test_a_cutile_launch_is_timed_between_the_events(make_fake_gpu: FakeGpu, form: str) -> None:
    with make_fake_gpu(kernels=[bench_add]) as fake:
        z, x, y = _fake_add_arguments(fake)
        stream = _gpu.default_stream()
        fn: Callable[[], Any] = (lambda: bench_add(z, x, y)) if form == "launch" else (lambda: bench_add(z, x, y).sync())
        start = len(fake.log)
        result = bench.do_bench(fn, warmup=1, reps=2)
        log = [(call, s, detail) for call, s, detail in fake.log[start:] if call in ("memset", "record", "launch")]
    timed = log[log.index(next(e for e in log if e[0] == "memset")):]
    calls = [call for call, _, _ in timed]
    assert calls[:3] == ["memset", "record", "launch"] and calls.count("launch") == 2
    start_record = calls.index("record")
    assert calls[start_record + 1] == "launch" and calls[start_record + 2] == "record"  # launch between events
    launches = [e for e in timed if e[0] == "launch"]
    assert all(s == int(stream.handle) for _, s, _ in launches)
    assert result.reps == 2 and result.timing == "cuda-events"
    gates = [detail for call, s, detail in fake.log[start:] if call == "wait_value"]
    if form == "launch":  # built first, the flush queued, then the events and the launch behind the gate
        assert result.gated and "host-gated" in repr(result)
        assert [value for _, value in gates] == [1, 2]
        ordered = [call for call, _, _ in fake.log[start:] if call in ("wait_value", "memset", "record", "launch")]
        # (the second record after the launch is its completion event, which cuda_async records)
        assert ordered[-12:] == ["memset", "wait_value", "record", "launch", "record", "record"] * 2
    else:  # a function that waits for its work cannot be gated (it would wait for the gate)
        assert not result.gated and gates == []


@pytest.mark.interpreter_only
def test_a_gate_left_shut_is_opened_by_its_watchdog(make_fake_gpu: FakeGpu) -> None:
    with make_fake_gpu():
        gate = bench._StreamGate(_gpu.default_stream())
        with gate.shut(5.0) as opened_by_host:
            pass
        with gate.shut(0.01) as stuck:
            time.sleep(0.2)  # as a function waiting for the device behind the gate would
    assert not opened_by_host.tripped and stuck.tripped
    assert not opened_by_host.where and "in test_a_gate_left_shut_is_opened_by_its_watchdog" in stuck.where


@pytest.mark.interpreter_only
def test_a_function_that_waits_for_the_device_is_not_gated(make_fake_gpu: FakeGpu,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bench._StreamGate, "PROBE_S", 0.01)
    with make_fake_gpu() as fake:
        def enqueues() -> None:
            fake.enqueue("launch", _gpu.default_stream().handle, "quick")

        def waits() -> None:  # the fake never blocks: a sleep past the probe's watchdog stands in
            time.sleep(0.05)

        result = bench.do_bench_paired(enqueues, waits, warmup=2, reps=2, flush_l2=False)
    assert result.a.gated and not result.b.gated
    # a: a probe in warm-up, then one gate per rep; b: its probe only
    assert fake.calls["cuStreamWaitValue32"] == 1 + 2 + 1


@pytest.mark.interpreter_only
def test_a_function_must_keep_its_form(make_fake_gpu: FakeGpu) -> None:
    with make_fake_gpu() as fake:
        calls = [0]

        def flaky() -> Any:
            calls[0] += 1
            return None if calls[0] == 1 else api.ops.zeros([4])  # then an op to run

        with pytest.raises(cutile.ArgumentError, match="same kind of thing on every call"):
            bench.do_bench(flaky, warmup=1, reps=2, flush_l2=False)
    assert fake.calls["cuStreamWaitValue32"] == 0


@pytest.mark.interpreter_only
def test_paired_arms_keep_their_own_forms(make_fake_gpu: FakeGpu) -> None:
    with make_fake_gpu(kernels=[bench_add]) as fake:
        z, x, y = _fake_add_arguments(fake)

        def enqueues() -> None:
            fake.enqueue("launch", _gpu.default_stream().handle, "peer")

        result = bench.do_bench_paired(lambda: bench_add(z, x, y), enqueues, warmup=1, reps=2, flush_l2=False)
    assert result.a.gated and not result.b.gated
    assert fake.calls["cuStreamWaitValue32"] == 2  # one per rep of the arm that returns its op


@pytest.mark.gpu
def test_on_the_gpu_a_bigger_kernel_takes_longer() -> None:
    small, big = 1 << 16, 1 << 24
    xs, ys = api.ones([small]), api.ones([small])
    zs = api.zeros([small]).partition([1024])
    xb, yb = api.ones([big]), api.ones([big])
    zb = api.zeros([big]).partition([1024])
    result = bench.do_bench_paired(lambda: bench_add(zs, xs, ys), lambda: bench_add(zb, xb, yb), reps=20)
    assert result.timing == "cuda-events" and result.a.l2_flushed
    assert result.ratio > 4.0
    assert bench.do_bench(lambda: bench_add(zb, xb, yb).sync(), reps=5).median_ms > 0
    np.testing.assert_array_equal(zb.unpartition().to_numpy()[:10], np.full(10, 2.0))


@pytest.mark.interpreter_only
def test_a_rep_the_watchdog_opened_is_refused_and_its_tensors_are_free_after(make_fake_gpu: FakeGpu,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    with make_fake_gpu(kernels=[bench_add]) as fake:
        z, x, y = _fake_add_arguments(fake)
        real_deferred = bench._deferred
        slow = [False]

        def deferred(value: Any) -> Any:  # the timed rep's queueing outlasts the watchdog
            work = real_deferred(value)
            if slow[0]:
                schedule = work.schedule

                def late(policy: Any) -> Any:
                    time.sleep(0.05)
                    return schedule(policy)
                return type("Late", (), {"schedule": staticmethod(late)})()
            return work

        monkeypatch.setattr(bench, "_deferred", deferred)
        monkeypatch.setattr(bench._StreamGate, "WATCHDOG_S", 0.01)
        fn = lambda: bench_add(z, x, y)  # noqa: E731
        bench.do_bench(fn, warmup=1, reps=1, flush_l2=False)  # learns the form, times one rep
        slow[0] = True
        # the error says where the rep waited: the sleep inside the late schedule
        with pytest.raises(cutile.BenchError, match=r"not enqueued within.*waiting in .*test_bench.py:\d+ in late"):
            bench.do_bench(fn, warmup=1, reps=1, flush_l2=False)
        slow[0] = False
        # the refused rep's launch ran: z is free for the next launch (a pending one would refuse it)
        bench_add(z, x, y).sync()
