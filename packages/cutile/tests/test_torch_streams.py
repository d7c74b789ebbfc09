"""Stream order with PyTorch, on the fake driver (no GPU, no torch needed): a stand-in
``torch`` module whose tensors export cutile device memory through DLPack and whose
current stream is a stream of the fake driver. What is checked is what reaches the
driver: the stream each kernel is queued on, the event waits between streams, the
host waits, and what a capture of torch's stream records.
"""

from __future__ import annotations

import os
import sys
import types
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import cuda_async
import cuda_core
import cutile
from cuda_core.testing import FakeDriver
from cutile import _gpu, _torch_streams, api
from cutile.core import Mut, Tensor, f32, load_tile_like, u8

pytestmark = pytest.mark.interpreter_only  # runs once, on its own fake GPU


@cutile.entry
def twice(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]) -> None:
    z.store(load_tile_like(x, z) * 2.0)


class FakeTorchTensor:
    """A torch tensor as cutile sees one: DLPack over device memory (a cutile tensor's
    here), recording the stream each ``__dlpack__`` call names."""

    def __init__(self, inner: cutile.Tensor, torch: FakeTorch) -> None:
        self.inner = inner
        self.torch = torch

    def __dlpack__(self, stream: int | None = None, max_version: tuple[int, int] | None = None, **_: Any) -> Any:
        self.torch.dlpack_streams.append(stream)
        return self.inner.__dlpack__(max_version=max_version)

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.inner.__dlpack_device__()

    def data_ptr(self) -> int:
        return self.inner.address()


FakeTorchTensor.__module__ = "torch"  # what makes cutile take it for torch's


class FakeTorch(types.ModuleType):
    """``torch`` with a CUDA current stream (``current``, a fake-driver stream) and a
    caching allocator that hands out cutile allocations."""

    def __init__(self) -> None:
        super().__init__("torch")
        self.current = cuda_core.Stream.create(0)
        self.dlpack_streams: list[int | None] = []
        self.allocations: list[int] = []
        self.uint8 = "uint8"
        fake = self

        class _Cuda:
            @staticmethod
            def is_initialized() -> bool:
                return True

            @staticmethod
            def current_stream(ordinal: int = 0) -> Any:
                return types.SimpleNamespace(cuda_stream=int(fake.current.handle))

        self.cuda = _Cuda()

    def empty(self, nbytes: int, dtype: Any, device: str) -> FakeTorchTensor:
        self.allocations.append(nbytes)
        return FakeTorchTensor(_gpu._allocate(u8, (nbytes,), 0)[0], self)  # (cutile's pool, not this again)

    def tensor(self, values: np.ndarray[Any, Any]) -> FakeTorchTensor:
        return FakeTorchTensor(api.from_numpy(values), self)


@pytest.fixture
def torch_gpu(make_fake_gpu: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[FakeDriver, FakeTorch]]:
    """The GPU backend on a fake driver, with the stand-in torch imported, and cutile's
    launches on a stream pool of their own (so a launch on torch's stream is seen)."""
    with make_fake_gpu(policy=cuda_async.RoundRobin(2, device=0), kernels=(twice,)) as fake:
        torch = FakeTorch()
        monkeypatch.setitem(sys.modules, "torch", torch)
        _torch_streams._wrapped.clear()
        _torch_streams._policies.clear()
        try:
            yield fake, torch
        finally:
            _torch_streams._wrapped.clear()
            _torch_streams._policies.clear()


def _register(fake: FakeDriver, launch: cutile.Launch) -> None:
    compiled = launch.kernel.compiled(launch.plan().spec, "sm_90")
    fake.kernels[compiled.name] = _gpu.fake_param_layout(compiled.abi)
    launch.cancel()


def _operands(torch: FakeTorch, n: int = 256) -> tuple[Any, Any, cutile.Partition, cutile.Tensor]:
    x_torch = torch.tensor(np.arange(n, dtype=np.float32))
    z_torch = torch.tensor(np.zeros(n, np.float32))
    z = api.from_dlpack(z_torch).partition([128])
    x = api.from_dlpack(x_torch)
    return x_torch, z_torch, z, x


def _since(fake: FakeDriver, mark: int) -> list[tuple[str, int, Any]]:
    return [entry for entry in fake.log[mark:] if entry[0] in ("launch", "wait", "synchronize")]


def test_a_launch_on_torch_memory_runs_on_torch_current_stream_and_is_waited_for(torch_gpu: Any) -> None:
    fake, torch = torch_gpu
    _, _, z, x = _operands(torch)
    _register(fake, twice(z, x))
    current = int(torch.current.handle)
    for _ in range(3):  # the first call, then the binding's reuse (the native path steps aside)
        mark = len(fake.log)
        z, x = twice(z, x).sync()
        assert _since(fake, mark) == [("launch", current, "twice"), ("synchronize", current, None)]
    # torch switched streams (torch.cuda.stream(s)): the next launch follows it
    torch.current = cuda_core.Stream.create(0)
    mark = len(fake.log)
    z, x = twice(z, x).sync()
    assert _since(fake, mark) == [("launch", int(torch.current.handle), "twice"),
                                  ("synchronize", int(torch.current.handle), None)]


def test_a_launch_on_cutile_memory_keeps_cutile_streams(torch_gpu: Any) -> None:
    fake, torch = torch_gpu
    z = api.empty([256], dtype=f32).partition([128])
    x = api.from_numpy(np.ones(256, np.float32))
    _register(fake, twice(z, x))
    twice(z, x).sync()
    assert fake.launches[-1]["stream"] != int(torch.current.handle)


def test_a_scheduled_launch_on_torch_memory_is_queued_on_torch_stream(torch_gpu: Any) -> None:
    fake, torch = torch_gpu
    _, _, z, x = _operands(torch)
    _register(fake, twice(z, x))
    mark = len(fake.log)
    future = twice(z, x).schedule()
    assert _since(fake, mark)[0] == ("launch", int(torch.current.handle), "twice")
    future.result()


def test_a_batch_on_another_stream_waits_for_torch_and_torch_waits_for_it(torch_gpu: Any) -> None:
    fake, torch = torch_gpu
    _, _, z, x = _operands(torch)
    _register(fake, twice(z, x))
    current = int(torch.current.handle)
    mark = len(fake.log)
    with cutile.batch():
        z, x = twice(z, x).sync()
    launched = fake.launches[-1]["stream"]
    assert launched != current
    # before the kernel its stream waits for torch's; after it, torch's for the kernel's
    assert _since(fake, mark)[:3] == [("wait", launched, current), ("launch", launched, "twice"),
                                      ("wait", current, launched)]


def test_from_dlpack_names_cutile_stream_except_while_torch_captures(torch_gpu: Any) -> None:
    fake, torch = torch_gpu
    x_torch = torch.tensor(np.zeros(8, np.float32))
    api.from_dlpack(x_torch)
    assert torch.dlpack_streams[-1] == int(_gpu.default_stream(0).handle)  # torch makes it wait
    fake.cuStreamBeginCapture(torch.current.handle, 0)
    api.from_dlpack(x_torch)
    assert torch.dlpack_streams[-1] == -1  # a wait would pull cutile's stream into torch's capture
    fake.cuStreamEndCapture(torch.current.handle)


def test_inside_a_torch_op_launches_are_queued_not_waited_for_and_allocate_from_torch(torch_gpu: Any) -> None:
    fake, torch = torch_gpu
    _, _, z, x = _operands(torch)
    _register(fake, twice(z, x))
    current = int(torch.current.handle)
    with _torch_streams.torch_op_scope():
        scratch = api.empty([64], dtype=f32)
        assert torch.allocations == [64 * 4] and scratch._storage.torch_ordered
        mark = len(fake.log)
        z, x = twice(z, x).sync()
        assert _since(fake, mark) == [("launch", current, "twice")]  # no host wait
    assert not api.empty([64], dtype=f32)._storage.torch_ordered  # outside: cutile's pool again


def test_a_torch_capture_records_the_launch_and_refuses_cutile_memory(torch_gpu: Any) -> None:
    fake, torch = torch_gpu
    _, _, z, x = _operands(torch)
    _register(fake, twice(z, x))
    current = int(torch.current.handle)
    z, x = twice(z, x).sync()  # warmed up before the capture, as torch asks
    fake.cuStreamBeginCapture(torch.current.handle, 0)
    mark = len(fake.log)
    z, x = twice(z, x).sync()
    assert fake.capturing[current] == [("launch", "twice")]  # recorded into torch's graph
    assert _since(fake, mark) == []  # nothing else queued, nothing waited for
    with pytest.raises(cutile.GraphCaptureError, match=r"\.schedule\(\) while torch captures"):
        twice(z, x).schedule()
    mine = api.from_numpy(np.ones(256, np.float32))  # (made before: allocating now would be torch's)
    fake.cuStreamEndCapture(torch.current.handle)
    fake.cuStreamBeginCapture(torch.current.handle, 0)
    with pytest.raises(cutile.GraphCaptureError, match=r"parameter\(s\) 'x' hold cutile's"):
        twice(z, mine).sync()
    assert fake.capturing[current] == []
    fake.cuStreamEndCapture(torch.current.handle)


def test_exporting_torch_memory_orders_the_consumer_stream_without_a_device_sync(torch_gpu: Any) -> None:
    fake, torch = torch_gpu
    _, _, z, x = _operands(torch)
    consumer = cuda_core.Stream.create(0)
    synced = fake.calls["cuCtxSynchronize"]
    mark = len(fake.log)
    capsule = x.__dlpack__(stream=int(consumer.handle), max_version=(1, 0))
    assert fake.calls["cuCtxSynchronize"] == synced
    assert _since(fake, mark) == [("wait", int(consumer.handle), int(torch.current.handle))]
    del capsule
    x.__dlpack__(stream=int(torch.current.handle), max_version=(1, 0))  # torch's own stream: nothing to wait for
    x.__dlpack__(stream=-1, max_version=(1, 0))  # the consumer asks for no wait
    assert _since(fake, mark) == [("wait", int(consumer.handle), int(torch.current.handle))]
    x.__dlpack__(max_version=(1, 0))  # no stream: the legacy default one (DLPack's 1)
    assert _since(fake, mark)[1:] == [("wait", 1, int(torch.current.handle))]


def test_import_cutile_imports_no_torch() -> None:
    import subprocess

    code = "import sys, cutile, cutile_kernels; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "CUTILE_BACKEND": "interpreter"})
    assert out.stdout.strip() == "False"


def test_dynamo_skips_the_stack_once_its_trace_rules_load(tmp_path: Any) -> None:
    # A stand-in torch whose dynamo trace rules record what is added to the skip list:
    # `import cutile` (before torch) arranges for the stack's packages to be added when
    # the rules load, importing nothing of torch itself.
    import subprocess

    rules = tmp_path / "torch" / "_dynamo"
    rules.mkdir(parents=True)
    (tmp_path / "torch" / "__init__.py").write_text("")
    (rules / "__init__.py").write_text("")
    (rules / "trace_rules.py").write_text("SKIPPED = []\ndef add(name):\n    SKIPPED.append(name)\n")
    code = ("import sys, cutile; assert 'torch' not in sys.modules; "
            "import torch._dynamo.trace_rules as rules; print(rules.SKIPPED)")
    path = os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "CUTILE_BACKEND": "interpreter", "PYTHONPATH": path})
    assert out.stdout.strip() == str(list(_torch_streams._STACK))


def test_a_copy_of_torch_memory_waits_for_torch_stream(torch_gpu: Any) -> None:
    fake, torch = torch_gpu
    x_torch, _, _, x = _operands(torch)
    mark = len(fake.log)
    copied = api.copy(x)
    cutile_stream = int(_gpu.default_stream(0).handle)
    # (after the result's allocation) the copy's stream waits for torch's, copies, is waited for
    assert _since(fake, mark)[-2:] == [("wait", cutile_stream, int(torch.current.handle)),
                                       ("synchronize", cutile_stream, None)]
    np.testing.assert_array_equal(copied.to_numpy(), np.arange(256, dtype=np.float32))
