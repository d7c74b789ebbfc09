"""What a compile read from outside the kernel's arguments (`KernelIR.reads`): the
front end records every global, closure variable, attribute of a host object and
inlined function's code it resolved, and `changed()` names the first that would
now read otherwise."""

from __future__ import annotations

import math
import sys
import types
from typing import Any

import pytest

from cutile_compiler._builtins import DeviceFunction
from cutile_compiler._frontend import build_kernel_ir
from cutile_compiler._ir import KernelIR
from cutile_compiler._reads import ExternalReads
from cutile_compiler._signature import TensorSpec, parse_signature, specialize
from cutile_compiler import _dtypes as dt
from cutile_compiler.language import Mut, Tensor, f32, load_tile_like

FACTOR = 2.0
config = types.SimpleNamespace(bias=1.0)


def _double(t):  # type: ignore[no-untyped-def]
    return t * FACTOR


double = DeviceFunction(_double)


def scaled(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    z.store(double(load_tile_like(x, z)) + config.bias + math.pi + min(1.0, 2.0))


def build(function: Any) -> KernelIR:
    signature = parse_signature(function)
    spec = specialize(signature, function.__name__, {
        "z": TensorSpec(dt.f32, (256,), (64,)), "x": TensorSpec(dt.f32, (256,))})
    return build_kernel_ir(function, signature, spec)


@pytest.fixture(autouse=True)
def restore() -> Any:
    module = sys.modules[__name__]
    saved = (FACTOR, config.bias, double, _double.__code__)
    yield
    module.FACTOR, config.bias, module.double, _double.__code__ = saved  # type: ignore[attr-defined]
    module.__dict__.pop("min", None)


def test_the_reads_of_a_compile_are_recorded_and_unchanged() -> None:
    reads = build(scaled).reads
    assert reads.changed() is None
    seen = {(kind, key) for kind, _, key, _ in reads.entries}
    assert {"double", "FACTOR", "config", "math", "load_tile_like", "min"} <= {key for _, key in seen}
    assert {"_double", "scaled", "bias"} <= {key for _, key in seen}  # code inlined; a host object's attribute
    assert "load" not in {key for _, key in seen}  # attributes of the language's own modules are not state


@pytest.mark.parametrize("change, named", [
    (lambda m: setattr(m, "FACTOR", 3.0), "global 'FACTOR'"),  # read by the device function
    (lambda m: setattr(m, "double", DeviceFunction(lambda t: t)), "global 'double'"),
    (lambda m: setattr(m._double, "__code__", (lambda t: t).__code__), "the code of _double"),
    (lambda m: setattr(m.config, "bias", 5.0), "attribute 'bias'"),
    (lambda m: setattr(m, "min", max), "global 'min'"),  # a builtin shadowed by a global
    (lambda m: setattr(m, "FACTOR", -0.0), "global 'FACTOR'"),
])
def test_a_change_is_named(change: Any, named: str) -> None:
    reads = build(scaled).reads
    change(sys.modules[__name__])
    assert reads.changed() == named


def test_an_equal_constant_is_no_change_but_another_zero_is() -> None:
    reads = ExternalReads()
    namespace: dict[str, Any] = {"a": 1.5, "b": (1, 2.0), "c": 0.0, "n": float("nan"), "t": True}
    for name in namespace:
        reads.global_name(namespace, name)
    namespace.update(a=float("1.5"), b=(1, float("2.0")), n=float("nan"))
    assert reads.changed() is None
    assert [value for _, _, _, value in reads.entries][:3] == [namespace["a"], namespace["b"], 0.0]
    namespace["c"] = -0.0  # equal, but compiles otherwise
    assert reads.changed() == "global 'c'"
    namespace["c"], namespace["t"] = 0.0, 1  # equal to True, but another type
    assert reads.changed() == "global 't'"


def test_closure_cells_full_and_empty() -> None:
    def make() -> tuple[Any, Any]:
        shift = 1.0

        def kernel(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
            z.store(load_tile_like(x, z) + shift)

        def set_shift(value: float) -> None:
            nonlocal shift
            shift = value

        return kernel, set_shift

    kernel, set_shift = make()
    reads = build(kernel).reads
    assert reads.changed() is None
    set_shift(4.0)
    assert reads.changed() == "closure variable 'shift'"

    reads = ExternalReads()
    later: Any

    def reader() -> Any:
        return later

    (cell,) = reader.__closure__ or ()
    assert reads.cell(cell, "later") is not None and reads.changed() is None  # empty, and still empty
    later = 1
    assert reads.changed() == "closure variable 'later'"
