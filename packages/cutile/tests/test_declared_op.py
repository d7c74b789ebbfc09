"""An element-wise op is one declaration: the family `ExtraOp` below, declared here and
registered only while a test runs (`declared`), gives each op its DSL function (real
signature and documentation), typing rule, numpy meaning, Tile IR, float options and
constant folding, and kernels use them through the front end, the interpreter and the
lowering to Tile IR bytecode (and, where tileiras is installed, to a cubin).

``fmod`` is one Tile IR op (``remf``, C's fmod), folds Python numbers and takes no
float options; ``softsign`` (x / (1 + |x|)) has a lowering of its own and takes
``flush_to_zero``.

Kernels are built inside factories (annotations evaluated at definition: no ``from
__future__ import annotations``)."""

import inspect
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pytest

import cutile
import cutile_compiler
import cutile_ir as ir
from cutile import api
from cutile.core import Mut, Tensor, f16, f32, i32, load_tile_like
from cutile_compiler._builtins import DSL_FUNCTIONS
from cutile_compiler._builtins.elementwise import declared
from cutile_compiler._errors import TileTypeError
from cutile_compiler._ir import Operation
from cutile_compiler._opdefs import OPS, Op
from cutile_compiler._opdefs.elementwise import FLOAT, Elementwise

RNG = np.random.default_rng(2026)
BOTH_BACKENDS = True  # the GPU runs the declared ops too, where there is one


def _lower_softsign(opdef: Elementwise, ctx: Any, op: Operation, args: Sequence[Any]) -> Sequence[Any]:
    """x / (1 + |x|) in three Tile IR ops, rounding each step as the numpy meaning does."""
    b = ctx.builder
    ftz = {"flush_to_zero": True} if op.attrs.get("ftz") else {}
    one = ctx.constant(1, op.operands[0].type)
    magnitude = b.absf(args[0])
    denominator = b.addf(one, magnitude, rounding_mode="nearest_even", **ftz)
    return (b.divf(args[0], denominator, rounding_mode="nearest_even", **ftz),)


def _softsign(x: Any) -> Any:
    return x / (np.asarray(1, dtype=x.dtype) + np.abs(x))


class ExtraOp(Op):
    """Element-wise ops declared outside the compiler, one declaration each."""

    FMOD = Elementwise(2, FLOAT, np.fmod, float_op="remf", foldable=True,
                       doc="The remainder of x / y with the sign of x (C's fmod).")
    SOFTSIGN = Elementwise(1, FLOAT, _softsign, lower=_lower_softsign, flush_to_zero=True, doc="x / (1 + |x|).")


fmod: Any = None  # the DSL functions, bound while the family is registered
softsign: Any = None


@pytest.fixture
def functions() -> Iterator[dict[Op, Any]]:
    global fmod, softsign
    with declared(ExtraOp) as made:
        fmod, softsign = made[ExtraOp.FMOD], made[ExtraOp.SOFTSIGN]
        try:
            yield made
        finally:
            fmod = softsign = None


def both_kernel(dtype: Any) -> Any:
    @cutile.entry
    def kernel(z: Mut[Tensor[dtype, ["B"]]], x: Tensor[dtype, [-1]], y: Tensor[dtype, [-1]]):
        a = load_tile_like(x, z)
        b = load_tile_like(y, z)
        z.store(fmod(a, b) + softsign(a) * fmod(7.5, -2.0))  # fmod(7.5, -2.0) folds to 1.5

    return kernel


def arguments(dtype: Any, n: int, tile: int) -> tuple[Any, Any, Any, np.ndarray, np.ndarray]:
    np_type = np.dtype(dtype.numpy_name)
    xs = RNG.uniform(-20, 20, size=n).astype(np_type)
    ys = RNG.uniform(0.5, 6, size=n).astype(np_type) * RNG.choice([-1, 1], size=n).astype(np_type)
    z = api.full([n], np.nan, dtype=dtype).partition([tile])  # poisoned
    return z, api.from_numpy(xs, dtype), api.from_numpy(ys, dtype), xs, ys


def test_the_declaration_makes_the_dsl_functions(functions: dict[Op, Any]) -> None:
    assert set(functions) == {ExtraOp.FMOD, ExtraOp.SOFTSIGN}
    assert DSL_FUNCTIONS["fmod"] is fmod and DSL_FUNCTIONS["softsign"] is softsign
    assert OPS[ExtraOp.FMOD].name == "fmod" and OPS[ExtraOp.SOFTSIGN].key is ExtraOp.SOFTSIGN
    assert str(inspect.signature(fmod)) == "(x, y, /, *, rounding: 'str | None' = None, flush_to_zero: 'bool' = False)"
    assert str(inspect.signature(softsign)) == "(x, /, *, rounding: 'str | None' = None, flush_to_zero: 'bool' = False)"
    assert inspect.getdoc(fmod) == ("The remainder of x / y with the sign of x (C's fmod). Element-wise; shapes "
                                    "broadcast and dtypes promote.")
    assert inspect.getdoc(softsign) == ("x / (1 + |x|). Element-wise. ``flush_to_zero=True`` (f32) treats subnormal "
                                        "inputs and results as zero.")


def test_the_registration_lasts_only_the_block() -> None:
    with declared(ExtraOp):
        assert ExtraOp.FMOD in OPS and "fmod" in DSL_FUNCTIONS
    assert ExtraOp.FMOD not in OPS and ExtraOp.SOFTSIGN not in OPS
    assert "fmod" not in DSL_FUNCTIONS and "softsign" not in DSL_FUNCTIONS
    with declared(ExtraOp) as again:  # and it can be registered again
        assert again[ExtraOp.FMOD].__name__ == "fmod"


@pytest.mark.parametrize("dtype", [f32, f16], ids=str)
def test_a_kernel_runs_the_declared_ops(functions: dict[Op, Any], dtype: Any) -> None:
    n, tile = 1000, 128  # a tail: 1000 is no multiple of 128
    z, x, y, xs, ys = arguments(dtype, n, tile)
    z, _, _ = both_kernel(dtype)(z, x, y).sync()
    got = z.to_numpy().astype(np.float64)
    wide_x, wide_y = xs.astype(np.float64), ys.astype(np.float64)
    expected = np.fmod(wide_x, wide_y) + wide_x / (1 + np.abs(wide_x)) * 1.5
    tolerance = {f32: 1e-5, f16: 4e-3}[dtype]
    np.testing.assert_allclose(got, expected, rtol=tolerance, atol=tolerance * 8)


def test_flush_to_zero_is_the_ops_option(functions: dict[Op, Any]) -> None:
    @cutile.entry
    def kernel(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
        z.store(softsign(load_tile_like(x, z), flush_to_zero=True))

    xs = np.array([1e-40, -1e-40, 2.0, -3.0] * 16, dtype=np.float32)  # f32 subnormals flush to zero of their sign
    z = api.full([xs.size], np.nan, dtype=f32).partition([64])
    z, _ = kernel(z, api.from_numpy(xs, f32)).sync()
    got = z.to_numpy()
    np.testing.assert_array_equal(got[:4], np.array([0.0, -0.0, 2 / 3, -0.75], dtype=np.float32))
    assert np.signbit(got[1]) and not np.signbit(got[0])


def expect_type_error(kernel: Any, *args: Any) -> str:
    with pytest.raises(TileTypeError) as info:
        kernel(*args).sync()
    return info.value.message


@pytest.mark.interpreter_only
def test_the_ops_typing_rule_and_options_are_checked(functions: dict[Op, Any]) -> None:
    @cutile.entry
    def on_ints(z: Mut[Tensor[i32, ["B"]]], x: Tensor[i32, [-1]]):
        t = load_tile_like(x, z)
        z.store(fmod(t, t))

    @cutile.entry
    def rounded(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
        z.store(softsign(load_tile_like(x, z), rounding="zero"))

    @cutile.entry
    def flushed(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
        t = load_tile_like(x, z)
        z.store(fmod(t, t, flush_to_zero=True))

    ints = api.from_numpy(np.arange(64, dtype=np.int32), i32)
    floats = api.from_numpy(np.ones(64, dtype=np.float32), f32)
    assert expect_type_error(on_ints, api.full([64], 0, dtype=i32).partition([64]), ints) == \
        "fmod needs floating-point operands, got i32"
    z = api.full([64], 0.0, dtype=f32).partition([64])
    assert expect_type_error(rounded, z, floats) == "softsign takes no rounding mode, got rounding='zero'"
    assert expect_type_error(flushed, z, floats) == "fmod takes no flush_to_zero"


@pytest.mark.interpreter_only
def test_the_declared_ops_lower_to_tile_ir_bytecode(functions: dict[Op, Any]) -> None:
    try:  # cutile.compile runs tileiras after the lowering (no GPU needed)
        cutile_compiler.find_toolchain()
    except cutile_compiler.ToolchainError as exc:
        pytest.skip(f"no usable tileiras here: {exc}")
    n, tile = 1000, 128
    compiled = cutile.compile(both_kernel(f32), api.meta([n], dtype=f32).partition([tile]), api.meta([n], dtype=f32),
                              api.meta([n], dtype=f32), arch="sm_90")
    assert compiled.cubin.startswith(b"\x7fELF")
    module = ir.read_bytecode(compiled.bytecode)
    assert ir.problems(module, "sm_90") == []
    names = [op.name for op in module.walk()]
    assert names.count("remf") == 1  # fmod of the tiles; fmod(7.5, -2.0) folded
    assert {"absf", "addf", "divf"} <= set(names)  # softsign's own lowering
    assert "remf" in compiled.mlir and "constant <f32: 1.500000e+00>" in compiled.mlir
