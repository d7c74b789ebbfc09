"""cutile-kernels' packaging: its layers, its public names, its record files shipped."""

import re
import tomllib
from pathlib import Path

import cutile_kernels

DEPENDENCIES = {"cutile"}
POINTWISE = {"add", "argmax", "div", "embedding", "gelu", "gelu_mul", "kv_cache_update", "mul", "relu", "rope",
             "sigmoid", "silu", "silu_mul", "sub", "top_k"}


def test_distribution_declares_exactly_its_layers() -> None:
    project = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]
    requires = project["dependencies"]
    names = {re.split(r"[<>=!~ ;\[]", r, maxsplit=1)[0].lower().replace("_", "-") for r in requires}
    assert names == DEPENDENCIES


def test_public_names_are_documented() -> None:
    assert set(cutile_kernels.__all__) == {
        "GEMM_SPACE", "Matmul", "matmul", "add_rms_norm", "default_config", "layer_norm", "layer_norm_backward",
        "log_softmax", "qk_norm", "qk_norm_rope", "qk_norm_rope_cache", "rms_norm", "softmax", "attention",
        "decode_attention", *POINTWISE}
    for name in cutile_kernels.__all__:
        assert getattr(cutile_kernels, name).__doc__
    assert cutile_kernels.matmul.launch.__doc__
    for name in POINTWISE:  # functions with the pending-work form of the same arguments
        function = getattr(cutile_kernels, name)
        assert callable(function) and callable(function.launch), name
