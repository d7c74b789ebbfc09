"""Weights for the Qwen3 model: a Hugging Face checkpoint directory (``config.json`` and
``*.safetensors``, read with the ``safetensors`` package), or random weights of a preset's
shapes made on the device from a seed.

A checkpoint's file is memory-mapped by safetensors (numpy framework), which reads each
tensor into a host array, copied to the device by ``api.from_numpy`` at once: one
host-to-device copy per tensor and no other host copy, except for tensors stored in
another float dtype (converted to bf16 on the host first) and each layer's gate and up
projections, stacked on the host into one ``[2 * intermediate, hidden]`` tensor so that
the MLP's first product is one GEMM (the two Hugging Face tensors are its halves, views
on the device).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from cutile import api
import cutile
import cutile_kernels as ck

from .model import DTYPE, GATE_UP, ModelError, Qwen3Config, Qwen3Weights

#: the standard deviation of the random projection and embedding weights
RANDOM_STD = 0.02


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
    tensors: dict[str, cutile.Tensor] = {}
    halves: dict[str, np.ndarray[Any, Any]] = {}  # a gate or up projection waiting for the other
    for path in files:
        with safetensors.safe_open(str(path), framework="numpy") as reader:
            for name in reader.keys():
                if name not in wanted:
                    continue  # e.g. a tied checkpoint's lm_head.weight copy
                if name in tensors or name in halves:
                    raise ModelError(f"checkpoint: tensor '{name}' appears in more than one file ({path.name})")
                array = reader.get_tensor(name)
                if array.dtype != ml_dtypes.bfloat16:
                    if array.dtype.kind != "f":
                        raise ModelError(f"checkpoint: tensor '{name}' in {path.name} has dtype {array.dtype}; "
                                         "expected a float dtype")
                    array = array.astype(ml_dtypes.bfloat16)
                if name.endswith(("mlp.gate_proj.weight", "mlp.up_proj.weight")):
                    prefix = name.rsplit("mlp.", 1)[0]
                    gate, up = prefix + "mlp.gate_proj.weight", prefix + "mlp.up_proj.weight"
                    halves[name] = array
                    if gate in halves and up in halves:  # stacked (a host copy of the two) for one GEMM
                        if halves[gate].shape == halves[up].shape:
                            _stack(tensors, prefix, api.from_numpy(np.concatenate([halves.pop(gate),
                                                                                   halves.pop(up)])))
                        else:  # (from_named names the one of the wrong shape)
                            tensors[gate] = api.from_numpy(halves.pop(gate))
                            tensors[up] = api.from_numpy(halves.pop(up))
                    continue
                tensors[name] = api.from_numpy(array)
    tensors |= {name: api.from_numpy(array) for name, array in halves.items()}  # (a half without its pair)
    return config, Qwen3Weights.from_named(config, tensors)


def _stack(tensors: dict[str, cutile.Tensor], prefix: str, stacked: cutile.Tensor) -> None:
    """Names a layer's stacked gate and up projections and their halves."""
    half = int(stacked.shape[0]) // 2
    tensors[prefix + GATE_UP] = stacked
    tensors[prefix + "mlp.gate_proj.weight"] = stacked[:half]
    tensors[prefix + "mlp.up_proj.weight"] = stacked[half:]


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

    for index, (name, shape) in enumerate(config.weight_shapes().items()):
        if len(shape) == 1:
            tensors[name] = api.ones(shape, DTYPE)
        elif name.endswith("mlp.gate_proj.weight"):  # made stacked with up_proj, for one GEMM
            _stack(tensors, name.removesuffix("mlp.gate_proj.weight"), normal((2 * shape[0], shape[1]), index))
        elif not name.endswith("mlp.up_proj.weight"):
            tensors[name] = normal(shape, index)
    return Qwen3Weights.from_named(config, tensors)
