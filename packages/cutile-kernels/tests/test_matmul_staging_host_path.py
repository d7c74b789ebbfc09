"""A staged matmul on the GPU backend's host side, on cuda_core's fake driver (no GPU
needed): the launches are the copies into the temporaries, the GEMM, the copy into out,
in that order on the stream, each of the copies over the staged operand's grid of
tiles; the temporaries live in device memory on 16-byte boundaries; a repeated call
launches the same sequence again and leaves nothing held; an aligned call launches
the GEMM alone. The kernels compile with tileiras for the fake sm_90 device; the fake
driver records launches instead of running them. (The fake's allocations are 1 MiB
apart: every tensor here stays below that.)"""

from collections.abc import Iterator
from typing import Any

import pytest

import cutile
from cuda_core.testing import FakeDriver
from cutile import _gpu, api
from cutile.core import f16, f32
from host_path_testkit import fake_gpu

from cutile_kernels import _gemm, _matmul, _staging, matmul


@pytest.fixture
def fake() -> Iterator[FakeDriver]:
    with fake_gpu(_staging.copy_kernel) as driver:
        _gemm._KERNELS.clear()  # (kernels loaded into the fake must not reach another backend)
        _matmul.forget_plans()
        try:
            yield driver
        finally:
            _gemm._KERNELS.clear()
            _matmul.forget_plans()


def _register(fake: FakeDriver, kernel: Any, *arguments: Any, **constants: Any) -> None:
    compiled = cutile.compile(kernel, *arguments, arch="sm_90", **constants)
    fake.kernels[compiled.name] = _gpu.fake_param_layout(compiled.abi)


def _register_call(fake: FakeDriver, call: Any) -> None:
    """Gives the fake the layouts of every kernel ``call`` launches."""
    if call.staged is not None:
        copy_out = (call.staged.copy_out,) if call.staged.copy_out is not None else ()
        for _, source, target in call.staged.copies_in + tuple((None, *pair) for pair in copy_out):
            _register(fake, _staging.copy_kernel(target.dtype, target.ndim), _staging._tiles(target), source)
        call = call.staged.inner
    arguments, constants = _matmul._kernel_arguments(call)
    _register(fake, call.plan.kernel, *arguments, **constants)


CONFIG = {"tile_m": 64, "tile_n": 64, "tile_k": 32}


def _prepared(a: Any, b: Any, out: Any) -> Any:
    return _matmul._prepare(a, b, out=out, bias=None, activation=None, residual=None, alpha=1.0, scale_a=None,
                            scale_b=None, out_dtype=None, accumulate_dtype=f32, allow_tf32=False, config=CONFIG)


def test_a_staged_call_launches_its_copies_the_gemm_and_the_copy_back_in_order(fake: FakeDriver) -> None:
    m, n, k = 130, 45, 29  # rows of 90 and 58 bytes
    a, b, out = api.empty([m, k], dtype=f16), api.empty([k, n], dtype=f16), api.empty([m, n], dtype=f16)
    call = _prepared(a, b, out)
    assert call.staged is not None
    _register_call(fake, call)
    temporaries = [target for _, _, target in call.staged.copies_in] + [call.staged.copy_out[0]]
    for t in temporaries:
        assert t.device == "cuda:0" and t.address() % 16 == 0 and _staging.strides_aligned(t)
    for _ in range(2):  # a second call: the same launches again, nothing left held by the first
        before = len(fake.launches)
        assert matmul(a, b, out=out, config=CONFIG) is out
        launched = fake.launches[before:]
        names = [launch["function"] for launch in launched]
        assert names == ["matmul_staging_copy_2d", "matmul_staging_copy_2d", "matmul_2d", "matmul_staging_copy_2d"]
        assert len({launch["stream"] for launch in launched}) == 1  # one op: one stream orders them
        for launch, (rows, cols) in zip(launched[:2], [(m, k), (k, n)]):  # a block per tile of the temporary
            tile = _staging.copy_tile((rows, cols))
            assert launch["grid"] == (-(-rows // tile[0]), -(-cols // tile[1]), 1)
    pending = matmul.launch(a, b, out=out, config=CONFIG)
    assert not isinstance(pending, cutile.Launch)
    pending.sync()


def test_an_aligned_call_launches_the_gemm_alone(fake: FakeDriver) -> None:
    a, b, out = api.empty([130, 32], dtype=f16), api.empty([32, 48], dtype=f16), api.empty([130, 48], dtype=f16)
    call = _prepared(a, b, out)
    assert call.staged is None
    _register_call(fake, call)
    before = len(fake.launches)
    matmul(a, b, out=out, config=CONFIG)
    assert [launch["function"] for launch in fake.launches[before:]] == ["matmul_2d"]


def test_staged_calls_in_a_batch_are_one_job_on_one_stream(fake: FakeDriver) -> None:
    """In a batch a staged call repeated (its temporaries written again while the batch
    holds them) and a staged call reading the output of the one before are ordered by
    the batch's stream, as aligned calls are."""
    m, n, k = 130, 45, 29
    a, b, out = api.empty([m, k], dtype=f16), api.empty([k, n], dtype=f16), api.empty([m, n], dtype=f16)
    w, second = api.empty([n, 29], dtype=f16), api.empty([m, 29], dtype=f16)
    _register_call(fake, _prepared(a, b, out))
    _register_call(fake, _prepared(out, w, second))
    before = len(fake.launches)
    with cutile.batch():
        for _ in range(3):
            matmul(a, b, out=out, config=CONFIG)
        matmul(out, w, out=second, config=CONFIG)  # reads out, which the batch's last call wrote
    launched = fake.launches[before:]
    assert len(launched) == 4 * 4 and len({launch["stream"] for launch in launched}) == 1
    matmul(out, w, out=second, config=CONFIG)  # the batch has ended: nothing held


def test_a_staged_call_is_captured_once_its_temporaries_exist(fake: FakeDriver) -> None:
    """A graph capture refuses allocations: a staged call's first call of new objects
    (it allocates its temporaries) is refused with GraphCaptureError; after a call of
    the same objects outside, the capture records its launches and the graph replays."""
    m, n, k = 130, 45, 29
    a, b, out = api.empty([m, k], dtype=f16), api.empty([k, n], dtype=f16), api.empty([m, n], dtype=f16)
    _register_call(fake, _prepared(a, b, out))
    with pytest.raises(cutile.GraphCaptureError, match="allocation"):
        with cutile.graph_scope("staged"):
            matmul(a, b, out=out)
    matmul(a, b, out=out)  # its temporaries made (the call remembered: same objects, out= given)
    assert matmul._last is not None and matmul._last.call.staged is not None
    _register_call(fake, matmul._last.call)
    with cutile.graph_scope("staged") as scope:
        matmul(a, b, out=out)
    scope.graph.launch().sync()


def test_two_alternating_staged_calls_are_captured_once_warmed_up(fake: FakeDriver) -> None:
    """Temporaries are kept per tensor and operand: after one call of each, alternating
    calls (a layer's two GEMMs on one activation, say) allocate nothing, so a capture of
    both records them, and its replays launch them again."""
    m, n, k = 130, 45, 29  # a's rows of 58 bytes, b's and out's of 90
    a, b, out = api.empty([m, k], dtype=f16), api.empty([k, n], dtype=f16), api.empty([m, n], dtype=f16)
    w, second = api.empty([k, 24], dtype=f16), api.empty([m, 24], dtype=f16)  # only a staged
    _register_call(fake, _prepared(a, b, out))
    _register_call(fake, _prepared(a, w, second))
    for _ in range(2):  # warm-up: each call's temporaries made once
        matmul(a, b, out=out, config=CONFIG)
        matmul(a, w, out=second, config=CONFIG)
    with cutile.graph_scope("layer") as scope:
        matmul(a, b, out=out, config=CONFIG)
        matmul(a, w, out=second, config=CONFIG)
    scope.graph.launch().sync()
    recorded = [payload for kind, payload in list(fake.graphs.values())[-1] if kind == "launch"]
    assert recorded == ["matmul_staging_copy_2d", "matmul_staging_copy_2d", "matmul_2d", "matmul_staging_copy_2d",
                        "matmul_staging_copy_2d", "matmul_2d"]  # (a, b, GEMM, out back; a, GEMM)
    matmul(a, b, out=out, config=CONFIG)  # nothing left held
