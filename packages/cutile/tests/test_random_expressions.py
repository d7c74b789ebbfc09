"""Random element-wise expressions, written as kernel source, give numpy's answer on
the interpreter and lower to valid Tile IR (hypothesis)."""

from __future__ import annotations

import importlib.util
import itertools
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cutile
import cutile_ir as ir
from cutile import api
from cutile_compiler import lower_kernel

_counter = itertools.count()
_folder = Path(tempfile.mkdtemp(prefix="cutile-hypothesis-"))

KERNEL = """
import cutile.core as ct
from cutile.core import Mut, Tensor, {dtype}, load_tile_like


def kernel(z: Mut[Tensor[{dtype}, ["B"]]], x: Tensor[{dtype}, [-1]], y: Tensor[{dtype}, [-1]]):
    a = load_tile_like(x, z)
    b = load_tile_like(y, z)
    z.store({expression})
"""


def expressions(integer: bool) -> st.SearchStrategy[str]:
    leaves = st.sampled_from(["a", "b", "2", "3", "1"] + ([] if integer else ["0.5"]))

    def extend(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        binary = st.tuples(inner, st.sampled_from(["+", "-", "*"]), inner).map(lambda t: f"({t[0]} {t[1]} {t[2]})")
        calls = st.tuples(st.sampled_from(["ct.minimum", "ct.maximum"]), inner, inner).map(
            lambda t: f"{t[0]}({t[1]}, {t[2]})")
        # where() of two plain numbers makes a tile of their own dtype (numbers are weak
        # only next to a tile): keep a variable among the values.
        selects = st.tuples(inner, inner, inner).filter(lambda t: any(v in t[1] + t[2] for v in "ab")).map(
            lambda t: f"ct.where({t[0]} > {t[1]}, {t[1]}, {t[2]})")
        unary = inner.map(lambda e: f"(-{e})")
        # b is positive and never zero: safe divisor for // and %
        division = inner.map(lambda e: f"({e} // b)" if integer else f"({e} / b)")
        return st.one_of(binary, calls, selects, unary, division)

    return st.recursive(leaves, extend, max_leaves=8).filter(lambda e: "a" in e or "b" in e)


def reference(expression: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    namespace = {"a": a, "b": b, "ct": _NumpyDSL}
    with np.errstate(all="ignore"):
        return np.asarray(eval(expression, namespace))  # noqa: S307 - our own generated text


class _NumpyDSL:
    minimum = staticmethod(np.minimum)
    maximum = staticmethod(np.maximum)
    where = staticmethod(np.where)


def load_kernel(source: str) -> object:
    path = _folder / f"random_kernel_{next(_counter)}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return cutile.entry(module.kernel)


INTEGER_EXPRESSIONS = expressions(True)
FLOAT_EXPRESSIONS = expressions(False)


# (hypothesis warns when it builds the repr of a large drawn expression: harmless here)
@pytest.mark.filterwarnings("ignore:Generating overly large repr")
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_random_expressions_match_numpy_and_lower(data: st.DataObject) -> None:
    integer = data.draw(st.booleans(), label="integer")
    expression = data.draw(INTEGER_EXPRESSIONS if integer else FLOAT_EXPRESSIONS, label="expression")
    dtype, np_type = ("i32", np.int32) if integer else ("f32", np.float32)
    kernel = load_kernel(KERNEL.format(dtype=dtype, expression=expression))
    rng = np.random.default_rng(len(expression))
    n = 200
    xs = rng.integers(-50, 50, n).astype(np_type) if integer else rng.uniform(-4, 4, n).astype(np_type)
    ys = rng.integers(1, 9, n).astype(np_type) if integer else rng.uniform(0.5, 4, n).astype(np_type)
    z = api.zeros([n], dtype=getattr(cutile.core, dtype)).partition([64])
    x, y = api.from_numpy(xs), api.from_numpy(ys)
    launch = kernel(z, x, y)  # type: ignore[operator]
    spec, _ = launch.specialization()
    z, _, _ = launch.sync()
    expected = reference(expression, xs, ys).astype(np_type)
    got = z.to_numpy()
    if integer:
        np.testing.assert_array_equal(got, np.broadcast_to(expected, got.shape), err_msg=expression)
    else:
        np.testing.assert_allclose(got, np.broadcast_to(expected, got.shape), rtol=1e-5, atol=1e-5,
                                   err_msg=expression)
    module = lower_kernel(kernel.kernel_ir(spec), "13.4")  # type: ignore[attr-defined]
    ir.verify(module)
    assert ir.read_bytecode(ir.write_bytecode(module, "13.4")).functions[0].name == "kernel"
