"""Reusable cutile kernels: GEMM family, elementwise, reductions, norms, attention.

Written with the public cutile API only. Functions, not kernels: each takes cutile tensors
or any DLPack / CUDA Array Interface tensor, returns the same kind (or writes ``out=``),
handles any shape, and takes its tile shapes and hints from `cutile.tune` records.

- Row kernels: `softmax`, `log_softmax`, `rms_norm`, `add_rms_norm`, `qk_norm`,
  `layer_norm`, `layer_norm_backward` (``f.launch(..., out=)`` gives the pending launch);
  `default_config` is their config without a record.
"""


__all__: list[str] = []

# Row kernels: softmax and the norms (softmax.py, norms.py; shared handling in _rows.py).
from cutile_kernels._rows import default_config  # noqa: E402
from cutile_kernels.norms import add_rms_norm, layer_norm, layer_norm_backward, qk_norm, rms_norm  # noqa: E402
from cutile_kernels.softmax import log_softmax, softmax  # noqa: E402

__all__ += ["add_rms_norm", "default_config", "layer_norm", "layer_norm_backward", "log_softmax", "qk_norm",
            "rms_norm", "softmax"]


__version__ = "0.1.0"  # the distribution's version (tests/test_release.py keeps them equal)
