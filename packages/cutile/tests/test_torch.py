"""cutile with real PyTorch: `cutile.torch.custom_op` under torch.compile(fullgraph=True)
and torch CUDA graphs, plain launches inside compiled functions, DLPack both ways, and
the stream order between torch's work and cutile's launches.

torch is not a dependency of the workspace (it is an optional interop): this module
skips where it is not installed. The CPU tests run the kernels on cutile's interpreter
over torch CPU tensors; the ``gpu`` tests need torch with CUDA. The stream logic
itself is also tested without torch, on the fake driver (test_torch_streams.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (an optional interop, not in uv.lock)")

import cutile  # noqa: E402
import cutile.torch  # noqa: E402
import cutile_kernels  # noqa: E402
from cutile import api  # noqa: E402
from cutile.core import Mut, Tensor, f16, f32, load_tile_like  # noqa: E402

TILE = 128


def _axpb_kernel(dtype: Any) -> Any:
    @cutile.entry
    def axpb(z: Mut[Tensor[dtype, ["B"]]], x: Tensor[dtype, [-1]], a: f32) -> None:  # type: ignore[valid-type]
        z.store((load_tile_like(x, z).astype(f32) * a + 1.0).astype(dtype))

    return axpb


_KERNELS = {torch.float32: _axpb_kernel(f32), torch.float16: _axpb_kernel(f16)}


def _axpb_into(z: torch.Tensor, x: torch.Tensor, a: float) -> None:
    """z = a * x + 1, by a cutile kernel over torch's memory."""
    _KERNELS[x.dtype](api.from_dlpack(z).partition([TILE]), api.from_dlpack(x), a).sync()


axpb_ = cutile.torch.custom_op(_axpb_into, name="cutile_test::axpb_", mutates_args=("z",))


def _axpb(x: torch.Tensor, a: float) -> torch.Tensor:
    z = torch.empty_like(x)
    _axpb_into(z, x, a)
    return z


axpb = cutile.torch.custom_op(_axpb, name="cutile_test::axpb", fake=lambda x, a: torch.empty_like(x))
softmax = cutile.torch.custom_op(cutile_kernels.softmax, name="cutile_test::softmax", schema="(Tensor x) -> Tensor",
                                 fake=lambda x: torch.empty_like(x))
matmul = cutile.torch.custom_op(cutile_kernels.matmul, name="cutile_test::matmul",
                                schema="(Tensor a, Tensor b) -> Tensor",
                                fake=lambda a, b: a.new_empty((a.shape[0], b.shape[1])))


def _poisoned(shape: tuple[int, ...], dtype: Any, device: str) -> torch.Tensor:
    return torch.full(shape, float("nan"), dtype=dtype, device=device)


def _random(shape: tuple[int, ...], seed: int) -> np.ndarray[Any, Any]:
    return np.random.default_rng(seed).standard_normal(shape)


def _device(backend: str) -> str:
    return "cuda" if backend == "gpu" else "cpu"


def _check_custom_ops_compiled(device: str, compile_backend: str) -> None:
    for dtype, tolerance in ((torch.float32, 1e-5), (torch.float16, 1e-2)):
        n = 1000  # a tail past the last whole tile
        x64 = _random((n,), 1)

        def step(x: torch.Tensor) -> torch.Tensor:
            z = _poisoned(x.shape, x.dtype, device)
            axpb_(z, x * 2, 0.5)  # writes into z
            return axpb(z, 3.0) - 1.0

        x = torch.tensor(x64, dtype=dtype, device=device)
        got = torch.compile(step, fullgraph=True, backend=compile_backend)(x).double().cpu().numpy()
        np.testing.assert_allclose(got, 3.0 * (0.5 * 2 * x.double().cpu().numpy() + 1.0), rtol=tolerance,
                                   atol=tolerance)

    a64, b64 = _random((37, 72), 2), _random((72, 19), 3)

    def library(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return softmax(matmul(a, b) * 0.5)

    a, b = (torch.tensor(v, dtype=torch.float32, device=device) for v in (a64, b64))
    got = torch.compile(library, fullgraph=True, backend=compile_backend)(a, b).double().cpu().numpy()
    logits = (a64 @ b64) * 0.5
    expected = np.exp(logits - logits.max(axis=1, keepdims=True))
    np.testing.assert_allclose(got, expected / expected.sum(axis=1, keepdims=True), rtol=1e-4, atol=1e-5)


# -- CPU: kernels on the interpreter over torch CPU tensors -----------------------------------------
def test_custom_ops_run_inside_torch_compile_fullgraph_on_the_cpu() -> None:
    _check_custom_ops_compiled("cpu", "aot_eager")  # aot_eager: fake tensors traced, no C++ toolchain needed


def test_custom_ops_pass_torch_opcheck() -> None:
    x = torch.tensor(_random((300,), 4), dtype=torch.float32)
    torch.library.opcheck(axpb, (x, 2.0))
    torch.library.opcheck(axpb_, (torch.empty_like(x), x, 2.0))
    torch.library.opcheck(softmax, (torch.tensor(_random((5, 40), 5), dtype=torch.float32),))


def test_a_plain_launch_in_a_compiled_function_is_a_graph_break_with_a_reason() -> None:
    def step(x: torch.Tensor) -> torch.Tensor:
        z = torch.empty_like(x)
        _axpb_into(z, x, 2.0)  # a cutile launch, not a custom op
        return z * 3

    x = torch.tensor(_random((257,), 6), dtype=torch.float32)
    np.testing.assert_allclose(torch.compile(step, backend="aot_eager")(x).numpy(),
                               3 * (2 * x.double().numpy() + 1), rtol=1e-5)
    torch._dynamo.reset()  # (else the graph-broken frames compiled above are reused)
    with pytest.raises(torch._dynamo.exc.Unsupported, match=r"(?s)cutile.*skip|skip.*cutile"):
        torch.compile(step, fullgraph=True, backend="aot_eager")(x)


def test_custom_op_refuses_what_it_cannot_register() -> None:
    with pytest.raises(cutile.ArgumentError, match="name must be 'namespace::op'"):
        cutile.torch.custom_op(_axpb, name="axpb")
    with pytest.raises(cutile.ArgumentError, match="returns Tensor, so it needs fake="):
        cutile.torch.custom_op(_axpb, name="cutile_test::no_fake")
    with pytest.raises(cutile.ArgumentError, match="cannot infer the schema.*pass schema="):
        cutile.torch.custom_op(cutile_kernels.softmax, name="cutile_test::no_schema", fake=lambda x: x)
    with pytest.raises(cutile.ArgumentTypeError, match="fn must be callable"):
        cutile.torch.custom_op(3, name="cutile_test::three")  # type: ignore[arg-type]
    with pytest.raises(cutile.ArgumentTypeError, match="mutates_args must be 'unknown' or parameter names"):
        cutile.torch.custom_op(_axpb_into, name="cutile_test::bad_mutates", mutates_args=None)  # type: ignore[arg-type]
    with pytest.raises(cutile.ArgumentTypeError, match="schema must be a str"):
        cutile.torch.custom_op(_axpb, name="cutile_test::bad_schema", schema=3, fake=lambda x, a: x)  # type: ignore[arg-type]


def test_dlpack_both_ways_with_torch_on_the_cpu() -> None:
    asked: list[Any] = []
    mine = api.from_numpy(_random((6, 7), 7).astype(np.float32))
    original = type(mine).__dlpack__

    class Spy:
        def __dlpack__(self, **kwargs: Any) -> Any:
            asked.append(kwargs.get("max_version"))
            return original(mine, **kwargs)

        def __dlpack_device__(self) -> tuple[int, int]:
            return mine.__dlpack_device__()

    shared = torch.from_dlpack(Spy())
    assert shared.data_ptr() == mine.address() and asked and asked[0] is not None and asked[0][0] == 1
    np.testing.assert_array_equal(shared.numpy(), mine.to_numpy())
    back = api.from_dlpack(shared)  # torch's CPU memory, on the interpreter
    assert back.address() == mine.address()


# -- GPU: torch with CUDA ----------------------------------------------------------------------
def _sentinel_product(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """x, written by a large torch matmul queued just now (NaN before it lands), and
    its expected value: a launch reading x before the matmul is done reads NaNs."""
    a = torch.randn(n, n, device="cuda") / n ** 0.5
    b = torch.randn(n, n, device="cuda")
    torch.cuda.synchronize()
    x = _poisoned((n, n), torch.float32, "cuda")
    torch.mm(a, b, out=x)  # queued on torch's current stream; runs for a while
    return x, a, b


@pytest.mark.gpu
def test_torch_producer_and_consumer_need_no_synchronization() -> None:
    n = 8192
    for run in ("sync", "schedule", "batch", "side stream"):
        stream = torch.cuda.Stream() if run == "side stream" else torch.cuda.current_stream()
        with torch.cuda.stream(stream):
            x, a, b = _sentinel_product(n)
            flat = x.view(-1)
            z = _poisoned(flat.shape, torch.float32, "cuda")
            launch = _KERNELS[torch.float32](api.from_dlpack(z).partition([TILE]), api.from_dlpack(flat), 2.0)
            future: Any = None
            if run == "schedule":
                future = launch.schedule()  # no host wait
            elif run == "batch":
                with cutile.batch(wait=False) as active:  # on a cutile stream: ordered by events both ways
                    launch.sync()
                future = active.future
            else:
                launch.sync()
            consumed = z * 3.0  # a torch op reading the output at once
            expected = 3.0 * (2.0 * torch.mm(a, b).view(-1) + 1.0)
        torch.cuda.synchronize()
        assert not torch.isnan(consumed).any(), run
        torch.testing.assert_close(consumed, expected, rtol=1e-3, atol=1e-3)
        if future is not None:
            future.result()  # the holds end (before torch may reuse the memory)


@pytest.mark.gpu
def test_custom_ops_inside_torch_compile_fullgraph_on_the_gpu() -> None:
    _check_custom_ops_compiled("cuda", "inductor")


@pytest.mark.gpu
def test_custom_ops_and_plain_launches_in_a_torch_cuda_graph() -> None:
    x = torch.tensor(_random((4096 + 33,), 8), dtype=torch.float32, device="cuda")
    rows = torch.tensor(_random((64, 300), 9), dtype=torch.float32, device="cuda")
    plain_out = torch.empty_like(x)

    def step() -> tuple[torch.Tensor, torch.Tensor]:
        y = axpb(x, 2.0)
        _axpb_into(plain_out, y, 0.5)  # a plain launch: recorded too
        return y, softmax(rows)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up (compile, load) off the capture, as torch asks
        for _ in range(2):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y, probabilities = step()
    for seed in (10, 11):
        x.copy_(torch.tensor(_random(tuple(x.shape), seed), dtype=torch.float32))
        rows.copy_(torch.tensor(_random(tuple(rows.shape), seed + 5), dtype=torch.float32))
        plain_out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(y, 2.0 * x + 1.0)
        torch.testing.assert_close(plain_out, 0.5 * (2.0 * x + 1.0) + 1.0)
        torch.testing.assert_close(probabilities, torch.softmax(rows, dim=-1), rtol=1e-4, atol=1e-6)
