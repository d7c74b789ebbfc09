"""The two-kernel functions whose first kernel writes a workspace (decode_attention's
split partials, argmax's chunk maxima) make it once per ``out=`` tensor: a repeated call
into the same out allocates nothing, which is what lets a warmed-up step be captured in
a CUDA graph (a capture refuses allocations), and gives the same answer. (decode_attention
in one launch has no workspace: it allocates nothing either.)"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import cutile.api as api_module
from cutile import api

from cutile_kernels import argmax, decode_attention

ml_dtypes = pytest.importorskip("ml_dtypes")


def refuse_allocations(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("allocated a tensor")

    monkeypatch.setattr(api_module, "_allocate", refuse)
    monkeypatch.setattr(api_module, "_from_host", refuse)


@pytest.mark.parametrize("config", [None, {"splits": 3, "tile_n": 16}], ids=["one launch", "two launches"])
def test_decode_attention_into_the_same_out_makes_its_workspace_once(monkeypatch: pytest.MonkeyPatch,
                                                                     config: dict[str, Any] | None) -> None:
    rng = np.random.default_rng(0)
    q = api.from_numpy(rng.standard_normal((2, 4, 64)).astype(ml_dtypes.bfloat16))
    k = api.from_numpy(rng.standard_normal((2, 2, 40, 64)).astype(ml_dtypes.bfloat16))
    v = api.from_numpy(rng.standard_normal((2, 2, 40, 64)).astype(ml_dtypes.bfloat16))
    lens = api.from_numpy(np.array([40, 7], np.int32))
    out = api.empty((2, 4, 64), "bf16")
    decode_attention(q, k, v, lens, out=out, config=config)
    first = out.to_numpy().astype(np.float64)
    refuse_allocations(monkeypatch)
    decode_attention(q, k, v, lens, out=out, config=config)
    np.testing.assert_array_equal(out.to_numpy().astype(np.float64), first)
    with pytest.raises(AssertionError, match="allocated"):
        decode_attention(q, k, v, lens, config=config)  # a new out (and workspace)


def test_argmax_into_the_same_out_makes_its_partials_once(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(1)
    values = rng.standard_normal((3, 5000)).astype(np.float32)
    x = api.from_numpy(values)
    out = api.empty((3,), "i64")
    argmax(x, out=out)
    refuse_allocations(monkeypatch)
    argmax(x, out=out)
    assert out.to_numpy().tolist() == values.argmax(-1).tolist()
