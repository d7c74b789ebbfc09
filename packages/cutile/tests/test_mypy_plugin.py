"""cutile's mypy plugin (``plugins = cutile.mypy_plugin``): kernels in cutile's
annotations type-check under ``mypy --strict``, launches are typed (``.sync()``
returns the tensor arguments' types), and wrong calls, wrong annotations and
wrong uses of a parameter in a kernel body are reported.

One mypy run checks every snippet below (each a file of its own); each test reads
its file's errors and notes. The kernel-body classes are checked against the
compiler's method tables, and the names the plugin knows against the packages."""

from __future__ import annotations

import inspect
import re
import textwrap
from pathlib import Path

import pytest

mypy_api = pytest.importorskip("mypy.api")

HEADER = """\
import cutile
import cutile.core as ct
from cutile import api
from cutile.core import Constant, Mut, Tensor, f32, i32, load_tile_like


@cutile.entry
def add(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]], y: Tensor[f32, [-1]]) -> None:
    z.store(load_tile_like(x, z) + load_tile_like(y, z))


@cutile.entry(unsafe=True)
def scale(z: Mut[Tensor[f32, ["B"]]], a: f32, n: i32, B: Constant[int]) -> None:
    z.store(z.load() * a + n)


@cutile.entry
def gemm(z: Mut[Tensor[f32, ["BM", "BN"]]], x: Tensor[f32, [-1, "K"]], y: Tensor[f32, ["K", -1]],
         BM: Constant[int], BN: Constant[int], BK: Constant[int], K: Constant[int]) -> None:
    pass


x = api.ones([1024], dtype=f32)
y = api.ones([1024], dtype=f32)
z = api.zeros([1024], dtype=f32).partition([128])
m = api.ones([64, 64], dtype=f32)
"""

# name -> the snippet after HEADER; "# E: text" marks a line where mypy must report text
SNIPPETS = {
    "good": """
        launch = add(z, x, y)
        reveal_type(launch)  # N: cutile._launch.Launch[tuple[cutile._tensor.Partition, cutile._tensor.Tensor, cutile._tensor.Tensor]]
        z2, x2, y2 = launch.sync()
        reveal_type(z2)  # N: cutile._tensor.Partition
        reveal_type(scale(z2, 2.0, 3).sync())  # N: cutile._tensor.Partition
        reveal_type(scale(z2, 2, 3, B=128).sync())  # N: cutile._tensor.Partition
        reveal_type(add)  # N: cutile._entry.Kernel[[z: cutile._tensor.Partition, x: cutile._tensor.Tensor, y: cutile._tensor.Tensor], tuple[cutile._tensor.Partition, cutile._tensor.Tensor, cutile._tensor.Tensor]]
        reveal_type(gemm(m.partition([32, 32]), m, m, BK=32).sync())  # N: tuple[cutile._tensor.Partition, cutile._tensor.Tensor, cutile._tensor.Tensor]
        gemm(m.partition([32, 32]), m, m, 32, 32, BK=32, K=64).sync()
        with cutile.batch():
            for _ in range(3):
                z2, x2, y2 = add(z2, x2, y2).sync()
        done = cutile.zip(add(z2, x2, y2), scale(z2, 1.0, 0)).sync()
        reveal_type(done)  # N: tuple[tuple[cutile._tensor.Partition, cutile._tensor.Tensor, cutile._tensor.Tensor], cutile._tensor.Partition]


        def host(t: Tensor) -> cutile.Partition:
            return t.partition([128])


        @cutile.entry
        def body(z: Mut[Tensor[f32, ["BM", "BN"]]], x: Tensor[f32, [-1, "BN"]], alpha: f32, BM: Constant[int],
                 BN: Constant[int]) -> None:
            bm, bn, _ = ct.get_tile_block_id()
            tile = x.load(index=(bm, 0), shape=(BM, BN)) * alpha + 2 * alpha
            reveal_type(x.shape)  # N: tuple[Any, ...]
            z.store(tile + x.partition((BM, BN)).load((bm, 0)))
            z.atomic_add(1.0)
    """,
    "wrong_calls": """
        add(x, x, y)  # E: Argument 1 to "__call__" of "Kernel" has incompatible type "Tensor"; expected "Partition"
        add(z, z, y)  # E: Argument 2 to "__call__" of "Kernel" has incompatible type "Partition"; expected "Tensor"
        add(z, x)  # E: Missing positional argument "y" in call to "__call__" of "Kernel"
        scale(z, "two", 3)  # E: Argument 2 to "__call__" of "Kernel" has incompatible type "str"; expected "SupportsFloat"
        scale(z, 2.0, 1.5)  # E: Argument 3 to "__call__" of "Kernel" has incompatible type "float"; expected "SupportsIndex"
        scale(z, 2.0, 1, B="wide")  # E: Argument "B" to "__call__" of "Kernel" has incompatible type "str"; expected "int"
        gemm(m.partition([32, 32]), m, m)  # E: Missing named argument "BK" for "__call__" of "Kernel"
        a, b = add(z, x, y).sync()  # E: Too many values to unpack (2 expected, 3 provided)
        add(z, x, y).sync().to_numpy()  # E: "tuple[Partition, Tensor, Tensor]" has no attribute "to_numpy"
    """,
    "wrong_bodies": """
        @cutile.entry
        def typo(z: Mut[Tensor[f32, ["B"]]]) -> None:
            z.stor(1.0)  # E: "MutTensorView" has no attribute "stor"


        @cutile.entry
        def writes_input(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]) -> None:
            x.store(load_tile_like(x, z))  # E: "TensorView" has no attribute "store"


        @cutile.entry
        def undefined(z: Mut[Tensor[f32, ["B"]]]) -> None:
            z.store(not_a_name)  # E: Name "not_a_name" is not defined


        def forward(a: "NotAClass") -> None:  # E: Name "NotAClass" is not defined
            pass
    """,
    "wrong_annotations": """
        @cutile.entry
        def zero_dim(z: Mut[Tensor[f32, [0]]]) -> None:  # E: each dim must be a positive int, -1 (dynamic) or a constant's name, got 0
            pass


        @cutile.entry
        def not_a_dtype(z: Mut[Tensor[int, ["B"]]]) -> None:  # E: Tensor[...]: the first item must be a dtype such as f32
            pass


        @cutile.entry
        def mut_scalar(z: Mut[f32]) -> None:  # E: Mut[...] wraps a Tensor[...] annotation
            pass


        @cutile.entry
        def no_dims(z: Mut[Tensor[f32]]) -> None:  # E: Tensor[...] takes a dtype and a list of dims
            pass


        @cutile.entry
        def bad_name(z: Mut[Tensor[f32, ["2B"]]]) -> None:  # E: each dim must be a positive int, -1 (dynamic) or a constant's name, got '2B'
            pass


        @cutile.entry
        def bad_constant(z: Mut[Tensor[f32, ["B"]]], B: Constant[str]) -> None:  # E: Constant[...] takes int, bool or float
            pass
    """,
}

_MARK = re.compile(r"#\s*([EN]):\s*(.*)$")


README = Path(__file__).resolve().parents[3] / "README.md"


def _readme_quick_start() -> str:
    """The README's first Python block: the quick start, as a user copies it."""
    match = re.search(r"```python\n(.*?)```", README.read_text(), re.S)
    assert match, "README.md has no Python block"
    return match[1]


def _source(name: str) -> str:
    if name == "readme":
        return _readme_quick_start()
    return HEADER + textwrap.dedent(SNIPPETS[name])


@pytest.fixture(scope="module")
def mypy_output(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    """mypy --strict with the plugin over every snippet: each file's lines of output."""
    folder = tmp_path_factory.mktemp("mypy_plugin")
    config = folder / "mypy.ini"
    config.write_text("[mypy]\nstrict = True\nplugins = cutile.mypy_plugin\n")
    names = [*SNIPPETS, "readme"]
    for name in names:
        (folder / f"{name}.py").write_text(_source(name))
    stdout, stderr, _ = mypy_api.run(["--config-file", str(config), "--cache-dir", str(folder / "cache"),
                                      "--no-error-summary", "--hide-error-context",
                                      *(str(folder / f"{name}.py") for name in names)])
    assert "INTERNAL ERROR" not in stdout + stderr, stdout + stderr
    found: dict[str, list[str]] = {name: [] for name in names}
    for line in stdout.splitlines():
        file = Path(line.split(":", 1)[0]).stem
        if file in found:
            found[file].append(line.split(":", 1)[1])
    return found


def _expected(name: str) -> list[tuple[int, str, str]]:
    """(line, "error" or "note", text) marked in the snippet."""
    marks = []
    for number, line in enumerate(_source(name).splitlines(), 1):
        match = _MARK.search(line)
        if match:
            marks.append((number, "error" if match[1] == "E" else "note", match[2].strip()))
    return marks


@pytest.mark.parametrize("name", list(SNIPPETS))
def test_mypy_reports_exactly_the_marked_lines(name: str, mypy_output: dict[str, list[str]]) -> None:
    reported = mypy_output[name]
    expected = _expected(name)
    for number, severity, text in expected:
        wanted = f'Revealed type is "{text}"' if severity == "note" else text
        assert any(line.startswith(f"{number}: {severity}:") and wanted in line for line in reported), \
            f"line {number}: expected {severity} {wanted!r}; mypy said:\n" + "\n".join(reported)
    marked = {number for number, _, _ in expected}
    unexpected = [line for line in reported if int(line.split(":", 1)[0]) not in marked]
    assert not unexpected, "unexpected reports:\n" + "\n".join(unexpected)


def test_the_readmes_quick_start_type_checks(mypy_output: dict[str, list[str]]) -> None:
    assert "@cutile.entry" in _readme_quick_start() and ".sync()" in _readme_quick_start()
    assert mypy_output["readme"] == []


def test_the_marks_cover_each_kind_of_mistake() -> None:
    errors = [text for name in SNIPPETS for _, severity, text in _expected(name) if severity == "error"]
    assert len(errors) >= 18 and len(_expected("good")) >= 6


# -- the plugin's knowledge, checked against the packages ------------------------------
def test_the_annotation_names_are_where_the_plugin_looks() -> None:
    from cutile import _tensor, mypy_plugin
    from cutile_compiler import _signature, dtypes, language

    defined = {f"{type(language.Tensor).__module__}.Tensor", f"{_tensor.Tensor.__module__}.Tensor"}
    assert mypy_plugin.TENSOR_ANNOTATIONS == frozenset(defined)
    assert mypy_plugin.MUT_ANNOTATION == f"{type(_signature.Mut).__module__}.Mut"
    assert mypy_plugin.CONSTANT_ANNOTATION == f"{type(_signature.Constant).__module__}.Constant"
    assert mypy_plugin.DTYPE_MODULE == type(language.f32).__module__
    table = {("bool_" if d.name == "bool" else d.name): d for d in dtypes.ALL_DTYPES}
    assert set(mypy_plugin.DTYPE_KINDS) == set(table)
    for name, kind in mypy_plugin.DTYPE_KINDS.items():
        dtype = table[name]
        assert getattr(language, name) is dtype
        assert kind == ("bool" if dtype.is_bool else "float" if dtype.is_float else "int"), name


def test_the_view_and_runtime_names_are_where_the_plugin_looks() -> None:
    import cutile
    from cutile import _entry, mypy_plugin
    from cutile_compiler import language

    for fullname, cls in ((mypy_plugin.TENSOR_VIEW, language.TensorView),
                          (mypy_plugin.MUT_TENSOR_VIEW, language.MutTensorView),
                          (mypy_plugin.SCALAR_PARAM, language.ScalarParam),
                          (mypy_plugin.RUNTIME_TENSOR_CLASS, cutile.Tensor)):
        assert fullname == f"{cls.__module__}.{cls.__qualname__}"
    assert mypy_plugin.RUNTIME_TENSOR == "cutile.Tensor" and mypy_plugin.RUNTIME_PARTITION == "cutile.Partition"
    assert mypy_plugin.ENTRY == f"{_entry.entry.__module__}.entry" and cutile.entry is _entry.entry
    assert mypy_plugin.ENTRY_DECORATOR_CALL == f"{_entry.KernelDecorator.__module__}.KernelDecorator.__call__"


def _user_parameters(impl: object) -> list[str]:
    """A kernel method's parameters after its receiver, as the compiler binds them."""
    from cutile_compiler._builtins import methods

    if isinstance(impl, methods._BuiltinMethod):
        return list(impl.builtin.__signature__.parameters)[1:]
    return list(methods._method_signature(impl).parameters)


def _view_methods(cls: type) -> dict[str, list[str]]:
    return {name: list(inspect.signature(member).parameters)[1:]
            for name, member in inspect.getmembers(cls, inspect.isfunction)
            if not name.startswith("_")}


def test_the_kernel_views_have_the_compilers_methods() -> None:
    from cutile_compiler._builtins import methods
    from cutile_compiler import language

    compiler_tensor = {name: _user_parameters(impl) for name, impl in methods._TENSOR_METHODS.items()}
    compiler_partition = {name: _user_parameters(impl) for name, impl in methods._PARTITION_METHODS.items()}
    assert _view_methods(language.MutTensorView) == compiler_tensor
    assert _view_methods(language.PartitionView) == compiler_partition
    # a read-only tensor has no method that writes it
    read_only = _view_methods(language.TensorView)
    assert read_only == {name: compiler_tensor[name] for name in ("load", "partition")}
