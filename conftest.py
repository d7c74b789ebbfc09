"""Repository-wide pytest setup: tests marked ``gpu`` run only where a GPU is present."""

from __future__ import annotations

import functools
import os
import tempfile

import pytest

# Native launch paths are built and used here even without a CUDA driver: the fake
# driver's launches take them (the default, auto, builds them only where a GPU is).
os.environ.setdefault("CUDA_CORE_NATIVE", "1")

# Tests compile into a cache of their own, not the user's ~/.cache/cutile.
if "CUTILE_CACHE_DIR" not in os.environ:
    os.environ["CUTILE_CACHE_DIR"] = tempfile.mkdtemp(prefix="cutile-test-cache-")


@functools.cache
def gpu_unavailable_reason() -> str | None:
    """None when a CUDA device can be used, else why not (in words)."""
    import cuda_core

    return cuda_core.unavailable_reason()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu_items = [item for item in items if "gpu" in item.keywords]
    if not gpu_items:
        return
    reason = gpu_unavailable_reason()
    if reason is None:
        return
    marker = pytest.mark.skip(reason=f"needs an NVIDIA GPU: {reason}")
    for item in gpu_items:
        item.add_marker(marker)


@pytest.fixture
def gpu_reason() -> str | None:
    """Why no GPU can be used here, or None when one can."""
    return gpu_unavailable_reason()
