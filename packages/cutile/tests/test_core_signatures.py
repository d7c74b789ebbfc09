"""cutile.core's DSL functions show their real parameters and documentation to
``inspect.signature``/``help`` (they are the compiler's registry, re-exported)."""

import inspect

import cutile.core as ct
import cutile_compiler.language as language


def test_load_tile_like_shows_its_parameters() -> None:
    signature = inspect.signature(ct.load_tile_like)
    assert list(signature.parameters) == ["tensor", "like", "latency", "allow_tma"]
    assert signature.parameters["latency"].default is None
    assert "Mut tensor" in (inspect.getdoc(ct.load_tile_like) or "")


def test_core_exports_the_language_and_uniform() -> None:
    assert sorted(ct.__all__) == sorted([*language.__all__, "uniform"])
    for name in language.__all__:
        if name != "Tensor":  # core's Tensor is the runtime class
            assert getattr(ct, name) is getattr(language, name), name
    for name in ct.__all__:
        value = getattr(ct, name)
        if callable(value) and not isinstance(value, type) and name != "uniform":
            kinds = {p.kind for p in inspect.signature(value).parameters.values()}
            assert inspect.Parameter.VAR_KEYWORD not in kinds, name
