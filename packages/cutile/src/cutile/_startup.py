"""What cutile settles before it imports the layers below (`cutile/__init__`
imports this module first).

``CUTILE_BACKEND=interpreter`` runs every kernel on the CPU: cuda_core is told
that no native launch path is needed (`cuda_core.native.not_needed`), so neither
cuda_async's extension nor cutile's is built or loaded by this process.
"""

from __future__ import annotations

from cuda_core.native import not_needed

from cutile import _config

try:
    _interpreter_only = _config.BACKEND.get() == "interpreter"
except _config.ConfigError:  # (reported where the backend is chosen)
    _interpreter_only = False
if _interpreter_only:
    not_needed("CUTILE_BACKEND=interpreter")
