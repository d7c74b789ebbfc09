"""Every op's lowering is typed against the lowering context (`_lowering.Lowering`),
so mypy checks each attribute and method an op uses on it."""

from __future__ import annotations

import typing

import pytest

from cutile_compiler._lowering import Lowering, TokenChain
from cutile_compiler._opdefs import OPS


@pytest.mark.parametrize("name", sorted(op.name for op in OPS.values()))
def test_each_ops_lower_takes_the_lowering_context(name: str) -> None:
    lower = type(next(op for op in OPS.values() if op.name == name)).lower
    # The opdef modules import Lowering only for type checking: resolve the names here.
    hints = typing.get_type_hints(lower, {**lower.__globals__, "Lowering": Lowering, "TokenChain": TokenChain})
    assert hints["ctx"] is Lowering, f"{name}.lower takes ctx: {hints['ctx']}"
