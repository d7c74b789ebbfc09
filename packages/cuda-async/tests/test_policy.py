"""Scheduling policies and the default policy."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

import cuda_async as ca
from cuda_core.testing import FakeDriver


def test_host_mode_is_the_policy_of_the_cpu_tests() -> None:
    assert isinstance(ca.default_policy(), ca.HostPolicy)
    policy: ca.SchedulingPolicy = ca.HostPolicy()
    assert policy.next_stream() is None and repr(ca.HostPolicy()) == "HostPolicy()"


def test_set_default_policy_and_using_policy() -> None:
    class Custom:
        def __init__(self) -> None:
            self.asked = 0

        def next_stream(self) -> None:
            self.asked += 1
            return None

    custom = Custom()
    assert isinstance(custom, ca.SchedulingPolicy)
    with ca.using_policy(custom):
        assert ca.default_policy() is custom
        ca.zip(ca.value(1), ca.value(2)).sync()
        assert custom.asked == 1  # the root asks; host-mode branches stay on the host
    ca.value(1).schedule(custom).result()
    assert custom.asked == 2
    with pytest.raises(TypeError, match="next_stream"):
        ca.set_default_policy(object())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="next_stream"):
        with ca.using_policy(3):  # type: ignore[arg-type]
            pass


def test_policies_create_no_stream_until_used(fake_driver: FakeDriver) -> None:
    pool = ca.RoundRobin()
    single = ca.SingleStream()
    assert repr(pool) == "RoundRobin(4)" and "SingleStream" in repr(single)
    assert not fake_driver.live_handles["stream"]
    first = pool.next_stream()
    assert len(fake_driver.live_handles["stream"]) == 4 and first in pool.streams
    single.next_stream()
    assert len(fake_driver.live_handles["stream"]) == 5
    with pytest.raises(ValueError, match="num_streams"):
        ca.RoundRobin(0)
    with pytest.raises(ValueError, match="must not be empty"):
        ca.RoundRobin(streams=[])


def test_distribution_declares_exactly_its_layers() -> None:
    project = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]
    names = {re.split(r"[<>=!~ ;\[]", r, maxsplit=1)[0].lower() for r in project["dependencies"]}
    assert names == {"cutile-cuda-core"}  # (imports: tests/test_layering.py at the root)
    assert (Path(ca.__file__).parent / "py.typed").exists()


def test_await_spin_is_configurable() -> None:
    from cuda_async import _future

    previous = _future._await_spin_s
    try:
        ca.set_await_spin(0)
        assert _future._await_spin_s == 0
        ca.set_await_spin(50)
        assert _future._await_spin_s == pytest.approx(50e-6)
        with pytest.raises(ValueError, match=">= 0"):
            ca.set_await_spin(-1)
    finally:
        _future._await_spin_s = previous


def test_every_public_name_has_a_docstring() -> None:
    import inspect

    missing = []
    for name in ca.__all__:
        obj = getattr(ca, name)
        if not getattr(obj, "__doc__", None):
            missing.append(name)
        if inspect.isclass(obj):
            for attr, member in vars(obj).items():
                if not attr.startswith("_") and (callable(member) or isinstance(member, property)):
                    if not getattr(member, "__doc__", None):
                        missing.append(f"{name}.{attr}")
    assert missing == []
