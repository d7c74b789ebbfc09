"""The library's imports of torch tensors (`_operands._torch_import`), on the interpreter
with a stand-in torch tensor (DLPack over host memory, torch's layout accessors): the
same tensor passed again is imported once and its cutile tensor reused; a change of its
memory, layout or requires_grad, or a consumed import, makes a new import; the cache
keeps no torch tensor alive."""

from __future__ import annotations

import gc
import sys
import types
import weakref
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import cutile
from cutile import api
from cutile_kernels import _operands, matmul, silu_mul

TINY = {"tile_m": 16, "tile_n": 16, "tile_k": 16, "group_size": 2, "num_worker_warps": 4}  # several tiles, tails

pytestmark = pytest.mark.interpreter_only


class BareProducer:
    """DLPack over a cutile tensor's memory, counting its exports (no torch accessors)."""

    def __init__(self, values: np.ndarray[Any, Any]) -> None:
        self.inner = api.from_numpy(values)
        self.exports = 0

    def __dlpack__(self, stream: int | None = None, max_version: tuple[int, int] | None = None, **_: Any) -> Any:
        self.exports += 1
        return self.inner.__dlpack__(max_version=max_version)

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.inner.__dlpack_device__()


class StandInTensor(BareProducer):
    """A torch tensor as the library sees one: DLPack over its memory and torch's layout
    accessors."""

    def __init__(self, values: np.ndarray[Any, Any]) -> None:
        super().__init__(values)
        self.requires_grad = False

    def data_ptr(self) -> int:
        return self.inner.address()

    @property
    def shape(self) -> tuple[int, ...]:
        return self.inner.shape

    def stride(self) -> tuple[int, ...]:
        return self.inner.strides

    @property
    def dtype(self) -> str:
        return str(self.inner.dtype)

    device = "cpu"


BareProducer.__module__ = "torch"
StandInTensor.__module__ = "torch"  # what makes the library take it for torch's


def _operands_of(seed: int) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((37, 20)).astype(np.float32), rng.standard_normal((20, 29)).astype(np.float32)


def _check(out: StandInTensor, a: np.ndarray[Any, Any], b: np.ndarray[Any, Any]) -> None:
    np.testing.assert_allclose(out.inner.to_numpy(), a.astype(np.float64) @ b.astype(np.float64),
                               rtol=1e-4, atol=1e-4)


def test_the_same_torch_tensors_are_imported_once_and_reused() -> None:
    a, b = _operands_of(1)
    ta, tb, tc = StandInTensor(a), StandInTensor(b), StandInTensor(np.full((37, 29), np.nan, np.float32))
    assert matmul(ta, tb, out=tc, config=TINY) is tc
    first = [_operands._TORCH_IMPORTS[id(t)][2] for t in (ta, tb, tc)]
    tc.inner.host_view()[...] = np.nan  # poisoned again
    assert matmul(ta, tb, out=tc, config=TINY) is tc
    _check(tc, a, b)
    assert [t.exports for t in (ta, tb, tc)] == [1, 1, 1]
    assert [_operands._TORCH_IMPORTS[id(t)][2] for t in (ta, tb, tc)] == first


def test_new_values_in_the_same_memory_are_read() -> None:
    a, b = _operands_of(2)
    ta, tb, tc = StandInTensor(a), StandInTensor(b), StandInTensor(np.zeros((37, 29), np.float32))
    matmul(ta, tb, out=tc, config=TINY)
    a2 = a * 3.0 - 1.0
    ta.inner.host_view()[...] = a2
    matmul(ta, tb, out=tc, config=TINY)
    _check(tc, a2, b)
    assert ta.exports == 1


@pytest.mark.parametrize("change", ["memory", "requires_grad"])
def test_a_torch_tensor_whose_memory_or_grad_changed_is_imported_again(change: str) -> None:
    a, b = _operands_of(3)
    ta, tb, tc = StandInTensor(a), StandInTensor(b), StandInTensor(np.zeros((37, 29), np.float32))
    matmul(ta, tb, out=tc, config=TINY)
    a2 = a + 2.0
    if change == "memory":  # as `set_` or `.data =` do: the same object over other memory
        ta.inner = api.from_numpy(a2)
    else:
        ta.requires_grad = True  # (torch refuses to export it then: the import must be asked again)
        ta.inner.host_view()[...] = a2
    matmul(ta, tb, out=tc, config=TINY)
    _check(tc, a2, b)
    assert ta.exports == 2 and tb.exports == 1


def test_a_torch_tensor_of_another_shape_is_imported_again() -> None:
    x = StandInTensor(np.arange(12, dtype=np.float32).reshape(3, 4))
    first = _operands.as_tensor(x, "f", "x").tensor
    x.inner = x.inner.reshape(4, 3)  # the same memory, another layout
    second = _operands.as_tensor(x, "f", "x").tensor
    assert second is not first and second.shape == (4, 3) and x.exports == 2


def test_a_consumed_import_is_made_again() -> None:
    x = StandInTensor(np.ones((4, 8), np.float32))
    first = _operands.as_tensor(x, "f", "x").tensor
    first.partition([2, 8])  # consumes that tensor object
    second = _operands.as_tensor(x, "f", "x").tensor
    assert second is not first and x.exports == 2
    second[...]  # live


def test_the_cache_keeps_no_torch_tensor_alive() -> None:
    gate, up = StandInTensor(np.ones((5, 40), np.float32)), StandInTensor(np.ones((5, 40), np.float32))
    out = StandInTensor(np.zeros((5, 40), np.float32))
    silu_mul(gate, up, out=out)
    watched = weakref.ref(gate)
    key = id(gate)
    assert key in _operands._TORCH_IMPORTS
    del gate
    gc.collect()
    assert watched() is None
    assert key not in _operands._TORCH_IMPORTS
    np.testing.assert_allclose(out.inner.to_numpy(), 1.0 / (1.0 + np.exp(-1.0)), rtol=1e-5)


def test_an_object_without_torch_accessors_is_imported_each_time() -> None:
    bare = BareProducer(np.ones(8, np.float32))
    _operands.as_tensor(bare, "f", "x")
    _operands.as_tensor(bare, "f", "x")
    assert bare.exports == 2 and id(bare) not in _operands._TORCH_IMPORTS


class StandInTorch(types.ModuleType):
    """``torch`` with ``empty`` (a stand-in tensor over new host memory) and dtypes named
    as torch names them; no ``from_dlpack``: a result must come from ``empty``."""

    float32, float16, bfloat16, int64 = "float32", "float16", "bfloat16", "int64"

    def __init__(self) -> None:
        super().__init__("torch")
        self.made: list[StandInTensor] = []

    def empty(self, shape: tuple[int, ...], *, dtype: str, device: str) -> StandInTensor:
        assert device == "cpu"
        made = StandInTensor(np.empty(shape, dtype=ml_dtypes.bfloat16 if dtype == "bfloat16" else np.dtype(dtype)))
        self.made.append(made)
        return made


@pytest.fixture
def torch_module(monkeypatch: pytest.MonkeyPatch) -> StandInTorch:
    module = StandInTorch()
    monkeypatch.setitem(sys.modules, "torch", module)
    return module


def test_a_result_for_torch_operands_is_a_tensor_torch_made(torch_module: StandInTorch) -> None:
    a, b = _operands_of(4)
    got = matmul(StandInTensor(a), StandInTensor(b), config=TINY)
    assert isinstance(got, StandInTensor) and torch_module.made == [got]
    _check(got, a, b)
    gate, up = np.linspace(-3, 3, 200, dtype=np.float32).reshape(5, 40), np.full((5, 40), 2.0, np.float32)
    product = silu_mul(StandInTensor(gate), StandInTensor(up))  # (a row function's output)
    assert isinstance(product, StandInTensor) and torch_module.made[-1] is product
    np.testing.assert_allclose(product.inner.to_numpy(), 2.0 * gate / (1.0 + np.exp(-gate.astype(np.float64))),
                               rtol=1e-5, atol=1e-6)


def test_a_dtype_torch_lacks_gives_a_result_through_dlpack(torch_module: StandInTorch,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(StandInTorch, "float32")
    handed: list[cutile.Tensor] = []
    monkeypatch.setattr(torch_module, "from_dlpack", lambda tensor: handed.append(tensor) or "through dlpack",
                        raising=False)
    a, b = _operands_of(5)
    assert matmul(StandInTensor(a), StandInTensor(b), config=TINY) == "through dlpack"
    assert torch_module.made == [] and len(handed) == 1
    np.testing.assert_allclose(handed[0].to_numpy(), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


def test_the_cache_keeps_no_real_torch_tensor_alive() -> None:
    # (torch keeps a tensor's Python object alive while its TensorImpl is referenced: the
    # import must hold a capsule of another alias of the memory, not of the tensor itself)
    torch = pytest.importorskip("torch", reason="torch is not installed here")
    a, b = torch.randn(37, 20), torch.randn(20, 29)
    got = matmul(a, b, config=TINY)
    torch.testing.assert_close(got, a @ b, atol=1e-4, rtol=1e-4)
    watched, key = weakref.ref(a), id(a)
    del a
    gc.collect()
    assert watched() is None and key not in _operands._TORCH_IMPORTS
    a2 = torch.randn(37, 20)
    a2.data = torch.randn(37, 20)  # another memory under the same object: imported again
    torch.testing.assert_close(matmul(a2, b, config=TINY), a2 @ b, atol=1e-4, rtol=1e-4)
    a2.requires_grad_(True)
    with pytest.raises(cutile.InteropError, match="require gradient"):
        matmul(a2, b, config=TINY)
