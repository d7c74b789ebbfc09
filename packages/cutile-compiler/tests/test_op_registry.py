"""The ops are keyed by their `Op` members: each registered definition knows its key
and its IR name (the member's name in lower case, unique), a family is registered
whole or not at all, and ops are created by key only."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from cutile_compiler import _dtypes as dt
from cutile_compiler._errors import ArgumentError, ArgumentTypeError
from cutile_compiler._frontend import FrontEnd
from cutile_compiler._opdefs import OPS, ElementwiseOp, MemoryOp, Op, register, registered
from cutile_compiler._opdefs.elementwise import FLOAT, Elementwise
from cutile_compiler._opdefs.memory import TileLoad
from cutile_compiler._signature import TensorSpec, parse_signature, specialize
from cutile_compiler.language import Mut, Tensor, f32, load_tile_like


def test_every_op_is_registered_under_its_member() -> None:
    names = [opdef.name for opdef in OPS.values()]
    assert len(names) == len(set(names))
    for key, opdef in OPS.items():
        assert isinstance(key, Op) and key.definition is opdef and opdef.key is key
        assert opdef.name == key.name.lower()
    assert OPS[MemoryOp.TILE_LOAD].name == "tile_load" and OPS[ElementwiseOp.AND].name == "and"


class Clash(Op):
    SOFTPLUS = Elementwise(1, FLOAT, lambda x: np.log1p(np.exp(x)), float_op="log")
    ADD = Elementwise(2, FLOAT, np.add, float_op="addf")  # ElementwiseOp.ADD's name


class Fresh(Op):
    SOFTPLUS = Elementwise(1, FLOAT, lambda x: np.log1p(np.exp(x)), float_op="log")


def test_a_family_is_registered_whole_or_not_at_all() -> None:
    with pytest.raises(ArgumentError, match="register: Clash: ops add are defined already"):
        register(Clash)
    assert Clash.SOFTPLUS not in OPS and not hasattr(Clash.SOFTPLUS.definition, "key")
    with registered(Fresh):
        assert OPS[Fresh.SOFTPLUS].name == "softplus"
        with pytest.raises(ArgumentError, match="ops softplus are defined already"):
            register(Fresh)
    assert Fresh.SOFTPLUS not in OPS


def test_register_takes_a_family_not_an_opdef() -> None:
    with pytest.raises(ArgumentTypeError, match="register: family must be a subclass of Op"):
        register(TileLoad())  # type: ignore[arg-type]


def kernel(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    z.store(load_tile_like(x, z))


def test_ops_are_created_by_key_only() -> None:
    signature = parse_signature(kernel)
    spec = specialize(signature, "kernel", {"z": TensorSpec(dt.f32, (64,), (64,)), "x": TensorSpec(dt.f32, (64,))})
    front_end = FrontEnd(kernel, signature, spec)
    name: Any = "tile_load"
    with pytest.raises(ArgumentTypeError, match=r"FrontEnd.op: key must be a registered Op member .* got 'tile_load'"):
        front_end.op(name, [])
    with pytest.raises(ArgumentTypeError, match="got <Fresh.SOFTPLUS"):  # declared but not registered
        front_end.op(Fresh.SOFTPLUS, [])
