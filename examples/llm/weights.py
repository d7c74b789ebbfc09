"""Weights for the Qwen3 model: a Hugging Face checkpoint directory (``config.json`` and
``*.safetensors``, read with the ``safetensors`` package), or random weights of a preset's
shapes made on the device from a seed.

A checkpoint's file is memory-mapped by safetensors (numpy framework), which reads each
tensor into a host array, copied to the device by ``api.from_numpy`` at once: one
host-to-device copy per tensor and no other host copy, except for tensors stored in
another float dtype (converted to bf16 on the host first) and each layer's stacked
projections: gate and up on the host into one ``[2 * intermediate, hidden]`` tensor so
that the MLP's first product is one GEMM, and q, k and v into one ``[q_size + 2 *
kv_size, hidden]`` tensor for the attention's (the Hugging Face tensors are their row
blocks, views on the device).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from cutile import api
import cutile
import cutile_kernels as ck

from .model import DTYPE, GATE_UP, QKV, ModelError, Qwen3Config, Qwen3Weights

#: the standard deviation of the random projection and embedding weights
RANDOM_STD = 0.02

#: each layer's stacked projections: the stack's name and its parts' Hugging Face names
#: (a layer prefix before each), in row order
STACKS = ((GATE_UP, ("mlp.gate_proj.weight", "mlp.up_proj.weight")),
          (QKV, ("self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight")))


def _safetensors() -> Any:
    try:
        import safetensors
    except ImportError:
        raise ModelError("reading .safetensors checkpoints needs the 'safetensors' package "
                         "(pip install safetensors; in this repository: uv sync, its 'examples' group)") from None
    return safetensors


def load_checkpoint(directory: str | Path) -> tuple[Qwen3Config, Qwen3Weights]:
    """The config and device weights of a Hugging Face Qwen3 checkpoint directory."""
    import ml_dtypes

    folder = Path(directory)
    config = Qwen3Config.from_json(folder / "config.json")
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise ModelError(f"checkpoint: no .safetensors file in {folder}")
    safetensors = _safetensors()
    wanted = config.weight_shapes()
    upload = _Upload()
    for path in files:
        with safetensors.safe_open(str(path), framework="numpy") as reader:
            for name in reader.keys():
                if name not in wanted:
                    continue  # e.g. a tied checkpoint's lm_head.weight copy
                if name in upload:
                    raise ModelError(f"checkpoint: tensor '{name}' appears in more than one file ({path.name})")
                array = reader.get_tensor(name)
                if array.dtype != ml_dtypes.bfloat16:
                    if array.dtype.kind != "f":
                        raise ModelError(f"checkpoint: tensor '{name}' in {path.name} has dtype {array.dtype}; "
                                         "expected a float dtype")
                    array = array.astype(ml_dtypes.bfloat16)
                upload.add(name, array)
    return config, Qwen3Weights.from_named(config, upload.finish())


def from_arrays(config: Qwen3Config, arrays: dict[str, np.ndarray[Any, Any]]) -> Qwen3Weights:
    """Device weights from bf16 host arrays by Hugging Face name, each layer's
    projections stacked as `load_checkpoint` stacks them."""
    upload = _Upload()
    for name, array in arrays.items():
        upload.add(name, array)
    return Qwen3Weights.from_named(config, upload.finish())


class _Upload:
    """Host arrays copied to the device one by one, a stack's parts kept until the last
    one comes and then stacked (one host copy of them) and copied as one tensor."""

    def __init__(self) -> None:
        self.tensors: dict[str, cutile.Tensor] = {}
        self.parts: dict[str, np.ndarray[Any, Any]] = {}  # a stack's part waiting for the others

    def __contains__(self, name: str) -> bool:
        return name in self.tensors or name in self.parts

    def add(self, name: str, array: np.ndarray[Any, Any]) -> None:
        stack = _stack_of(name)
        if stack is None:
            self.tensors[name] = api.from_numpy(array)
            return
        prefix, names = stack
        self.parts[name] = array
        if all(prefix + part in self.parts for part in names):
            arrays = [self.parts.pop(prefix + part) for part in names]
            if all(a.ndim == 2 and a.shape[1] == arrays[0].shape[1] for a in arrays):
                _stack(self.tensors, prefix, names, api.from_numpy(np.concatenate(arrays)),
                       [a.shape[0] for a in arrays])
            else:  # (from_named names the one of the wrong shape)
                self.tensors |= {prefix + part: api.from_numpy(a) for part, a in zip(names, arrays)}

    def finish(self) -> dict[str, cutile.Tensor]:
        """Every tensor (a part without the others on its own: from_named names what is missing)."""
        return self.tensors | {name: api.from_numpy(array) for name, array in self.parts.items()}


def _stack_of(name: str) -> tuple[str, tuple[str, ...]] | None:
    """The layer prefix and the parts of the stack ``name`` is a part of, or None."""
    for _, names in STACKS:
        for part in names:
            if name.endswith(part):
                return name.removesuffix(part), names
    return None


def _stack(tensors: dict[str, cutile.Tensor], prefix: str, names: tuple[str, ...], stacked: cutile.Tensor,
           rows: list[int]) -> None:
    """Names a layer's stacked projection and its parts (row blocks of it, in order)."""
    stack = next(stack for stack, parts in STACKS if parts == names)
    tensors[prefix + stack] = stacked
    first = 0
    for part, count in zip(names, rows):
        tensors[prefix + part] = stacked[first:first + count]
        first += count


def save_checkpoint(directory: str | Path, config: Qwen3Config, arrays: dict[str, np.ndarray[Any, Any]]) -> None:
    """Writes ``config.json`` and ``model.safetensors`` (numpy arrays by Hugging Face name)."""
    import json

    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
                                                    **config.to_dict()}, indent=2))
    _safetensors()
    from safetensors.numpy import save_file

    save_file({name: np.ascontiguousarray(a) for name, a in arrays.items()}, str(folder / "model.safetensors"))


def random_arrays(config: Qwen3Config, seed: int) -> dict[str, np.ndarray[Any, Any]]:
    """Random weights on the host (bf16 numpy arrays by Hugging Face name): for tests
    and small checkpoints."""
    import ml_dtypes

    rng = np.random.default_rng(seed)
    arrays: dict[str, np.ndarray[Any, Any]] = {}
    for name, shape in config.weight_shapes().items():
        if len(shape) == 1:  # the norms' gains: near one
            values = 1.0 + 0.1 * rng.standard_normal(shape)
        else:
            values = RANDOM_STD * rng.standard_normal(shape)
        arrays[name] = values.astype(ml_dtypes.bfloat16)
    return arrays


def random_weights(config: Qwen3Config, seed: int) -> Qwen3Weights:
    """Random weights made on the device (``api.randn`` scaled by a kernel; the norms'
    gains are ones), the same for the same seed on every backend."""
    tensors: dict[str, cutile.Tensor] = {}
    scales: dict[int, cutile.Tensor] = {}
    def normal(shape: tuple[int, ...], index: int) -> cutile.Tensor:
        columns = shape[-1]
        if columns not in scales:
            scales[columns] = api.full((columns,), RANDOM_STD, DTYPE)
        scaled: cutile.Tensor = ck.mul(api.randn(shape, DTYPE, seed=seed * 100_003 + index), scales[columns])
        return scaled

    shapes = config.weight_shapes()
    for index, (name, shape) in enumerate(shapes.items()):
        stack = _stack_of(name)
        if len(shape) == 1:
            tensors[name] = api.ones(shape, DTYPE)
        elif stack is None:
            tensors[name] = normal(shape, index)
        elif name.endswith(stack[1][0]):  # a stack's first part: the stack made at once, for one GEMM
            prefix, names = stack
            rows = [shapes[prefix + part][0] for part in names]
            _stack(tensors, prefix, names, normal((sum(rows), shape[1]), index), rows)
    return Qwen3Weights.from_named(config, tensors)
