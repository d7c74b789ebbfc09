"""The DSL functions as the host sees them: each shows its real parameters and its
documentation (``inspect.signature``, ``help``), the language exports exactly the
registry's functions, and a kernel's call is checked against that one signature,
with a located error naming the function and the parameter."""

import inspect
import re
from typing import Any

import pytest

import cutile_compiler.language as L
from cutile_compiler import _dtypes as dt
from cutile_compiler._builtins import DSL_FUNCTIONS, Builtin, HostCallError
from cutile_compiler._errors import TileTypeError
from cutile_compiler._frontend import build_kernel_ir
from cutile_compiler._signature import TensorSpec, parse_signature, specialize
from cutile_compiler.language import Mut, Tensor, add, f32, load_tile_like, sqrt, sum

# the DSL functions that take any number of values, and what they call them
VARIADIC = {"printf": "values", "static_range": "bounds"}


def exported_functions() -> dict[str, Any]:
    return {name: getattr(L, name) for name in L.__all__
            if callable(getattr(L, name)) and not isinstance(getattr(L, name), type)}


def test_the_language_exports_the_registry_with_its_dtypes_and_classes() -> None:
    names = [d.name if d.name != "bool" else "bool_" for d in (*dt.ALL_DTYPES, *dt.TILE_ONLY_DTYPES)]
    views = ["TensorView", "MutTensorView", "PartitionView", "ScalarParam"]  # the parameters, to type checkers
    assert sorted(L.__all__) == sorted(["Constant", "DType", "DeviceFunction", "HostCallError", "Mut", "Tensor",
                                        *views, *names, *DSL_FUNCTIONS])
    assert len(set(L.__all__)) == len(L.__all__)
    for name, function in DSL_FUNCTIONS.items():  # the module binds each under its registry name (its imports)
        assert getattr(L, name) is function, name
    assert set(exported_functions()) == set(DSL_FUNCTIONS)
    # and no DSL function is reachable from the language under a public name the registry lacks
    public = {n for n, v in vars(L).items() if not n.startswith("_") and isinstance(v, Builtin)}
    assert public - set(DSL_FUNCTIONS) <= {"sum_", "max_", "min_", "pow_"}  # the module's own spellings
    assert "ceil_div" in DSL_FUNCTIONS and DSL_FUNCTIONS["cdiv"] is DSL_FUNCTIONS["ceil_div"]


@pytest.mark.parametrize("name", sorted(DSL_FUNCTIONS))
def test_every_dsl_function_shows_its_parameters_and_documentation(name: str) -> None:
    function = getattr(L, name)
    signature = inspect.signature(function)
    kinds = {p.kind for p in signature.parameters.values()}
    assert inspect.Parameter.VAR_KEYWORD not in kinds, f"{name}{signature}"
    variadic = [p.name for p in signature.parameters.values() if p.kind is inspect.Parameter.VAR_POSITIONAL]
    assert variadic == ([VARIADIC[name]] if name in VARIADIC else []), f"{name}{signature}"
    assert {"fe", "node", "args", "kwargs"}.isdisjoint(signature.parameters), f"{name}{signature}"
    doc = inspect.getdoc(function)
    assert doc and len(doc) > 10, name
    assert function.__name__ == name or DSL_FUNCTIONS[name] is DSL_FUNCTIONS.get(function.__name__)


def test_signatures_name_the_real_parameters() -> None:
    def shown(function: Any) -> str:
        return str(inspect.signature(function))

    assert shown(load_tile_like) == "(tensor, like, latency: 'int | None' = None, allow_tma: 'bool | None' = None)"
    assert shown(L.load) == ("(tensor, index, shape, padding='zero', latency: 'int | None' = None, "
                             "allow_tma: 'bool | None' = None)")
    assert shown(sqrt) == "(x, /, *, rounding: 'str | None' = None, flush_to_zero: 'bool' = False)"
    assert shown(add) == "(x, y, /, *, rounding: 'str | None' = None, flush_to_zero: 'bool' = False)"
    assert shown(sum) == "(x, axis: 'int | tuple[int, ...] | None' = None, keepdims: 'bool' = False)"
    assert shown(L.zeros) == "(shape, dtype: 'DType')"
    assert shown(L.printf) == "(format, *values) -> 'None'"
    assert shown(L.get_tile_block_id) == "()"
    assert shown(L.cat) == "(a, b, axis: 'int' = 0)"
    assert "rounding" in (inspect.getdoc(sqrt) or "") and "flush_to_zero" in (inspect.getdoc(sqrt) or "")
    assert "load_tile_like(tensor, like" in repr(load_tile_like)


def test_a_dsl_function_called_on_the_host_raises_host_call_error() -> None:
    with pytest.raises(HostCallError, match=r"sqrt\(\) can only be called inside a cutile kernel"):
        sqrt(1.0)


# -- a kernel's calls are bound against the same signature ---------------------------------------
P = TensorSpec(dt.f32, (256,), (64,))
V = TensorSpec(dt.f32, (256,))


def k_too_many(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    t = load_tile_like(x, z)
    z.store(add(t, t, t))  # <- too_many


def k_unknown_keyword(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    z.store(load_tile_like(x, z, latency=2, fast=True))  # <- unknown_keyword


def k_missing(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    z.store(L.full((64,), 1.0))  # <- missing


def k_twice(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    z.store(load_tile_like(x, z, 3, latency=2))  # <- twice


def k_positional_only(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    z.store(sqrt(x=load_tile_like(x, z)))  # <- positional_only


def k_method_keyword(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    z.store(load_tile_like(x, z) + load_tile_like(x, z).sum(keep=True))  # <- method_keyword


def k_tensor_method_count(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    t = load_tile_like(x, z)
    z.store(t, t, t)  # <- tensor_method_count


def k_no_keywords(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    bid_x, _, _ = L.get_tile_block_id(axis=0)  # <- no_keywords
    z.store(load_tile_like(x, z))


CALL_CASES = [
    (k_too_many, "too_many",
     r"add\(x, y, /, \*, rounding=None, flush_to_zero=False\) takes 2 positional "
     r"arguments \(x, y\), got 3"),
    (k_unknown_keyword, "unknown_keyword", r"load_tile_like\(\) takes only tensor, like, latency, allow_tma, got fast"),
    (k_missing, "missing", r"full\(shape, value, dtype\): missing a required argument: 'dtype'"),
    (k_twice, "twice", r"load_tile_like\(tensor, like, latency=None, allow_tma=None\): multiple values for "
                       r"argument 'latency'"),
    (k_positional_only, "positional_only", r"sqrt\(\) takes only rounding, flush_to_zero, got x"),
    (k_method_keyword, "method_keyword", r"sum\(\) takes only x, axis, keepdims, got keep"),
    (k_tensor_method_count, "tensor_method_count", r"\.store\(value, index=None\) takes 2 positional arguments \(value, index\), got 3"),
    (k_no_keywords, "no_keywords", r"get_tile_block_id\(\) takes no keyword arguments, got axis"),
]


def marked_line(function: Any, marker: str) -> int:
    path = inspect.getsourcefile(function)
    assert path is not None
    for number, line in enumerate(open(path).read().splitlines(), start=1):
        if line.rstrip().endswith(f"# <- {marker}"):
            return number
    raise AssertionError(f"no '# <- {marker}' marker")


@pytest.mark.parametrize("kernel, marker, message", CALL_CASES, ids=[c[1] for c in CALL_CASES])
def test_a_bad_call_is_a_located_error_naming_the_function(kernel: Any, marker: str, message: str) -> None:
    signature = parse_signature(kernel)
    with pytest.raises(TileTypeError) as info:
        build_kernel_ir(kernel, signature, specialize(signature, kernel.__name__, {"z": P, "x": V}), unsafe=False)
    raised = info.value
    text = str(raised)
    assert re.search(message, text), text
    assert raised.location is not None and raised.location.line == marked_line(kernel, marker), text
    first_line, source_line, caret_line = text.splitlines()[:3]
    assert first_line.startswith(f"{raised.location.filename}:{raised.location.line}:")
    assert f"# <- {marker}" in source_line and set(caret_line.strip()) == {"^"}


def test_a_good_call_with_keywords_still_compiles() -> None:
    def kernel(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
        t = load_tile_like(x, z, latency=2)
        z.store(add(sqrt(t, flush_to_zero=True), t, rounding="zero") + t.sum(axis=0, keepdims=True))

    signature = parse_signature(kernel)
    build_kernel_ir(kernel, signature, specialize(signature, "kernel", {"z": P, "x": V}), unsafe=False)


def test_type_checkers_see_the_same_parameters(tmp_path: Any) -> None:
    """What IDEs read: each DSL function's static type carries its parameters
    (`Builtin` is generic in them), matching `inspect.signature`. Needs mypy, a dev
    dependency: CI has it; the GPU machine, running the sources without installs, may not."""
    mypy_api = pytest.importorskip("mypy.api")

    names = sorted(n for n in DSL_FUNCTIONS if n != "static_range")  # (a plain class: `*bounds: int`)
    snippet = tmp_path / "snippet.py"
    snippet.write_text("import cutile_compiler.language as L\n" + "".join(f"reveal_type(L.{n})\n" for n in names))
    stdout, stderr, _ = mypy_api.run(["--strict", "--no-incremental", "--cache-dir", str(tmp_path / "cache"),
                                      str(snippet)])
    revealed = re.findall(r'Revealed type is "(.*)"', stdout)
    assert len(revealed) == len(names), stdout + stderr
    for name, shown in zip(names, revealed):
        assert shown.startswith("cutile_compiler._builtins._base.Builtin[[") and "*Any, **Any" not in shown, (name, shown)
        for param in inspect.signature(DSL_FUNCTIONS[name]).parameters.values():
            if param.kind is not param.POSITIONAL_ONLY:
                assert f"{'*' * (param.kind is param.VAR_POSITIONAL)}{param.name}:" in shown, (name, shown)
