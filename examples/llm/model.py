"""A dense Qwen3 model on cutile_kernels: prefill over packed prompts and a decode step
over a KV cache, bf16, with no other library in the forward.

Per layer: RMSNorm -> q/k/v projections (one GEMM of the stacked `QKV` weight when the
weights were made so; q, k and v are then head slices of its output, read in place) ->
QK-norm and RoPE (neox), with the new keys and values written into the KV cache, in one
launch (`qk_norm_rope_cache`) -> GQA attention (prefill: the varlen flash kernel over the
packed prompts; decode: `decode_attention` over the cache) -> output
projection -> residual add fused with the next RMSNorm (`add_rms_norm`) -> SiLU-gated
MLP -> residual. The final norm and the LM head (tied to the embedding or not) give f32
logits of each sequence's last token.

Weights are kept in Hugging Face's layout (``[out_features, in_features]``) and passed to
`matmul` as their ``.T`` view, which it reads in place (its fast path).

`DecodeGraph` captures decode steps as a CUDA graph; three one-line cutile kernels of its
own (copies and a ``+ 1`` of int tensors, which cutile_kernels' float pointwise functions
do not take) keep the positions and lengths on the device between its steps.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

import cutile
import cutile_kernels as ck
from cutile import api
from cutile.core import Mut, Tensor, bf16, f32, i32, i64, load_tile_like

if TYPE_CHECKING:
    from cuda_async import Batch

#: the dtype of the weights, activations and KV cache
DTYPE = bf16


class ModelError(cutile.ArgumentError):
    """A config, checkpoint or generation argument the model cannot take (the field or
    parameter is named)."""


@dataclass(frozen=True)
class Qwen3Config:
    """The fields of a Hugging Face Qwen3 ``config.json`` this model reads."""

    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1_000_000.0
    tie_word_embeddings: bool = False
    max_position_embeddings: int = 40960

    FIELDS = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
              "num_key_value_heads", "head_dim", "vocab_size", "rms_norm_eps", "rope_theta",
              "tie_word_embeddings", "max_position_embeddings")

    def __post_init__(self) -> None:
        for name in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                     "num_key_value_heads", "head_dim", "vocab_size", "max_position_embeddings"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ModelError(f"Qwen3Config: field '{name}' must be a positive int, got {value!r}")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ModelError(f"Qwen3Config: num_attention_heads ({self.num_attention_heads}) must be a multiple of "
                             f"num_key_value_heads ({self.num_key_value_heads})")
        if self.head_dim not in (64, 128):
            raise ModelError(f"Qwen3Config: field 'head_dim' is {self.head_dim}; the attention kernels take 64 or 128")
        if not self.rms_norm_eps > 0:
            raise ModelError(f"Qwen3Config: field 'rms_norm_eps' must be positive, got {self.rms_norm_eps!r}")
        if not self.rope_theta > 1:
            raise ModelError(f"Qwen3Config: field 'rope_theta' must be above 1, got {self.rope_theta!r}")

    @classmethod
    def from_dict(cls, values: dict[str, Any], source: str = "config") -> Qwen3Config:
        # What this model does not implement is refused, not ignored (it would give wrong logits).
        unsupported = {"model_type": ("qwen3", None), "hidden_act": ("silu", None), "attention_bias": (False, None),
                       "use_sliding_window": (False, None), "rope_scaling": (None,)}
        for name, accepted in unsupported.items():
            if name in values and values[name] not in accepted:
                raise ModelError(f"{source}: field '{name}' is {values[name]!r}; this Qwen3 model takes "
                                 f"{' or '.join(repr(a) for a in accepted if a is not None) or 'null'}")
        missing = [name for name in cls.FIELDS[:7] if name not in values]
        if "head_dim" in missing and "hidden_size" in values and "num_attention_heads" in values:
            missing.remove("head_dim")  # older configs leave it to hidden / heads
            values = {**values, "head_dim": values["hidden_size"] // values["num_attention_heads"]}
        if missing:
            raise ModelError(f"{source}: missing the Qwen3 field(s) {', '.join(missing)}")
        return cls(**{name: values[name] for name in cls.FIELDS if name in values})

    @classmethod
    def from_json(cls, path: str | Path) -> Qwen3Config:
        try:
            values = json.loads(Path(path).read_text())
        except (OSError, json.JSONDecodeError) as error:
            raise ModelError(f"config.json: cannot read {path}: {error}") from None
        if not isinstance(values, dict):
            raise ModelError(f"config.json: {path} holds no JSON object")
        return cls.from_dict(values, str(path))

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.FIELDS}

    @property
    def q_size(self) -> int:
        return self.num_attention_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_key_value_heads * self.head_dim

    def weight_shapes(self) -> dict[str, tuple[int, ...]]:
        """Every tensor of the checkpoint, by its Hugging Face name."""
        h, inter = self.hidden_size, self.intermediate_size
        shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (self.vocab_size, h)}
        for n in range(self.num_hidden_layers):
            p = f"model.layers.{n}."
            shapes |= {p + "input_layernorm.weight": (h,), p + "self_attn.q_proj.weight": (self.q_size, h),
                       p + "self_attn.k_proj.weight": (self.kv_size, h),
                       p + "self_attn.v_proj.weight": (self.kv_size, h),
                       p + "self_attn.q_norm.weight": (self.head_dim,), p + "self_attn.k_norm.weight": (self.head_dim,),
                       p + "self_attn.o_proj.weight": (h, self.q_size), p + "post_attention_layernorm.weight": (h,),
                       p + "mlp.gate_proj.weight": (inter, h), p + "mlp.up_proj.weight": (inter, h),
                       p + "mlp.down_proj.weight": (h, inter)}
        shapes["model.norm.weight"] = (h,)
        if not self.tie_word_embeddings:
            shapes["lm_head.weight"] = (self.vocab_size, h)
        return shapes

    def weight_bytes(self) -> int:
        """Bytes of the weights (bf16)."""
        return sum(math.prod(s) for s in self.weight_shapes().values()) * DTYPE.itemsize

    def kv_bytes(self, tokens: int) -> int:
        """Bytes of the K and V cache entries of ``tokens`` positions over all layers."""
        return 2 * self.num_hidden_layers * tokens * self.kv_size * DTYPE.itemsize


#: the published Qwen3 dense shapes (Hugging Face ``Qwen/Qwen3-*`` config.json), and a
#: tiny one for the interpreter
PRESETS: dict[str, Qwen3Config] = {
    "qwen3-0.6b": Qwen3Config(1024, 3072, 28, 16, 8, 128, 151936, tie_word_embeddings=True),
    "qwen3-1.7b": Qwen3Config(2048, 6144, 28, 16, 8, 128, 151936, tie_word_embeddings=True),
    "qwen3-4b": Qwen3Config(2560, 9728, 36, 32, 8, 128, 151936, tie_word_embeddings=True),
    "qwen3-8b": Qwen3Config(4096, 12288, 36, 32, 8, 128, 151936, tie_word_embeddings=False),
    "tiny": Qwen3Config(64, 128, 2, 4, 2, 64, 512, tie_word_embeddings=True, max_position_embeddings=256),
}


@dataclass
class LayerWeights:
    input_layernorm: cutile.Tensor
    q_proj: cutile.Tensor
    k_proj: cutile.Tensor
    v_proj: cutile.Tensor
    q_norm: cutile.Tensor
    k_norm: cutile.Tensor
    o_proj: cutile.Tensor
    post_attention_layernorm: cutile.Tensor
    gate_proj: cutile.Tensor
    up_proj: cutile.Tensor
    down_proj: cutile.Tensor
    #: gate_proj and up_proj stacked ``[2 * intermediate, hidden]`` (they are its views):
    #: the MLP's first product in one GEMM, when the weights were made so
    gate_up_proj: cutile.Tensor | None = None
    #: q_proj, k_proj and v_proj stacked ``[q_size + 2 * kv_size, hidden]`` (their row
    #: blocks, views of it): the attention's projections in one GEMM, when made so
    qkv_proj: cutile.Tensor | None = None


#: the name under which `Qwen3Weights.from_named` takes a layer's stacked gate and up
#: projections (not a Hugging Face name: the loaders make it)
GATE_UP = "mlp.gate_up_proj.weight"
#: the name under which it takes a layer's stacked q, k and v projections (the loaders make it)
QKV = "self_attn.qkv_proj.weight"


@dataclass
class Qwen3Weights:
    """Device tensors in Hugging Face's layout; ``lm_head`` is the embedding when tied."""

    embed_tokens: cutile.Tensor
    layers: list[LayerWeights]
    norm: cutile.Tensor
    lm_head: cutile.Tensor

    @classmethod
    def from_named(cls, config: Qwen3Config, tensors: dict[str, cutile.Tensor]) -> Qwen3Weights:
        """From tensors keyed by their Hugging Face names (checked against the config's
        shapes), and optionally each layer's `GATE_UP` stack whose halves are the
        layer's gate_proj and up_proj tensors and `QKV` stack whose row blocks are its
        q_proj, k_proj and v_proj tensors."""
        expected = config.weight_shapes()
        missing = sorted(set(expected) - set(tensors), key=_name_order)
        if missing:
            shown = ", ".join(missing[:4]) + (f" and {len(missing) - 4} more" if len(missing) > 4 else "")
            raise ModelError(f"checkpoint: missing tensor(s) {shown}")
        for name, shape in expected.items():
            got = tensors[name]
            if tuple(got.shape) != shape:
                raise ModelError(f"checkpoint: tensor '{name}' has shape {list(got.shape)}; the config gives "
                                 f"{list(shape)}")
            if got.dtype != DTYPE:
                raise ModelError(f"checkpoint: tensor '{name}' has dtype {got.dtype} on the device; expected {DTYPE}")
        layers = []
        for n in range(config.num_hidden_layers):
            p = f"model.layers.{n}."
            _check_stack(tensors, p, GATE_UP, ("mlp.gate_proj.weight", "mlp.up_proj.weight"),
                         (config.intermediate_size,) * 2, config.hidden_size, "halves")
            _check_stack(tensors, p, QKV, ("self_attn.q_proj.weight", "self_attn.k_proj.weight",
                                           "self_attn.v_proj.weight"),
                         (config.q_size, config.kv_size, config.kv_size), config.hidden_size, "row blocks")
            layers.append(LayerWeights(
                tensors[p + "input_layernorm.weight"], tensors[p + "self_attn.q_proj.weight"],
                tensors[p + "self_attn.k_proj.weight"], tensors[p + "self_attn.v_proj.weight"],
                tensors[p + "self_attn.q_norm.weight"], tensors[p + "self_attn.k_norm.weight"],
                tensors[p + "self_attn.o_proj.weight"], tensors[p + "post_attention_layernorm.weight"],
                tensors[p + "mlp.gate_proj.weight"], tensors[p + "mlp.up_proj.weight"],
                tensors[p + "mlp.down_proj.weight"], tensors.get(p + GATE_UP), tensors.get(p + QKV)))
        embed = tensors["model.embed_tokens.weight"]
        head = embed if config.tie_word_embeddings else tensors["lm_head.weight"]
        return cls(embed, layers, tensors["model.norm.weight"], head)


def _check_stack(tensors: dict[str, cutile.Tensor], prefix: str, stack: str, parts: tuple[str, ...],
                 rows: tuple[int, ...], hidden: int, what: str) -> None:
    """A layer's stacked projection, when given, is ``[sum(rows), hidden]`` of the dtype
    and its parts are its row blocks in order (views of it): one GEMM replaces theirs."""
    stacked = tensors.get(prefix + stack)
    if stacked is None:
        return
    if tuple(stacked.shape) != (sum(rows), hidden) or stacked.dtype != DTYPE:
        raise ModelError(f"weights: '{prefix + stack}' is {stacked.dtype} {list(stacked.shape)}; expected "
                         f"{DTYPE} [{sum(rows)}, {hidden}]")
    at = stacked.address()
    for part, count in zip(parts, rows):
        tensor = tensors[prefix + part]
        if tensor.address() != at or not tensor.is_contiguous:
            names = ", ".join(part.rsplit(".", 2)[-2] for part in parts)
            raise ModelError(f"weights: '{prefix + stack}' must hold the layer's {names} as its {what} (views of it)")
        at += count * hidden * DTYPE.itemsize


def _name_order(name: str) -> tuple[int, str]:
    parts = name.split(".")
    return (int(parts[2]) if len(parts) > 2 and parts[2].isdigit() else -1, name)


@dataclass
class KVCache:
    """Per layer K and V of shape ``(batch, max_seq, kv_heads, head_dim)`` (what
    `qk_norm_rope_cache` writes; `decode_attention` reads its ``transpose(1, 2)`` view), and
    each sequence's length on the host."""

    keys: list[cutile.Tensor]
    values: list[cutile.Tensor]
    lengths: list[int] = field(default_factory=list)

    @classmethod
    def allocate(cls, config: Qwen3Config, batch: int, max_seq: int) -> KVCache:
        shape = (batch, max_seq, config.num_key_value_heads, config.head_dim)
        # zeros, not empty: a tile of positions past a sequence's length (masked) is never memory nothing wrote
        keys = [api.zeros(shape, DTYPE) for _ in range(config.num_hidden_layers)]
        values = [api.zeros(shape, DTYPE) for _ in range(config.num_hidden_layers)]
        return cls(keys, values, [0] * batch)

    @property
    def batch(self) -> int:
        return int(self.keys[0].shape[0])

    @property
    def max_seq(self) -> int:
        return int(self.keys[0].shape[1])


def _head_slices(c: Qwen3Config, qkv: cutile.Tensor) -> tuple[cutile.Tensor, cutile.Tensor, cutile.Tensor]:
    """q, k and v as head slices of a stacked projection's ``(tokens, q_size + 2 *
    kv_size)`` output: ``(tokens, heads, dim)``, ``(tokens, kv_heads, dim)`` twice
    (strided views, no copy)."""
    heads, kv = c.num_attention_heads, c.num_key_value_heads
    by_head = qkv.reshape(int(qkv.shape[0]), heads + 2 * kv, c.head_dim)
    return by_head[:, :heads], by_head[:, heads:heads + kv], by_head[:, heads + kv:]


def _i32(values: Sequence[int] | np.ndarray[Any, Any]) -> cutile.Tensor:
    return api.from_numpy(np.asarray(values, dtype=np.int32))


@dataclass
class LayerBuffers:
    """Every intermediate of a layer over ``rows`` tokens, allocated once and used by
    each layer in turn: a forward pass then allocates nothing per layer, and its kernels
    find their plans and bindings by the same tensors each layer and each pass. The
    projections' outputs are those the weights need: the stacked ones' (``qkv`` and its
    head slices, ``gate_up``) and the separate ones' (``q_raw``, ``k_raw``, ``v``,
    ``gate``, ``up``), None where no layer has such weights (`_buffer`)."""

    hidden: tuple[cutile.Tensor, cutile.Tensor]  # the residual stream, ping-ponged by add_rms_norm
    normed: cutile.Tensor
    q_raw: cutile.Tensor | None
    k_raw: cutile.Tensor | None
    v: cutile.Tensor | None
    qkv: cutile.Tensor | None  # the stacked projection's output, and its q, k, v head slices (views made once)
    qkv_q: cutile.Tensor | None
    qkv_k: cutile.Tensor | None
    qkv_v: cutile.Tensor | None
    q: cutile.Tensor
    attended: cutile.Tensor
    projected: cutile.Tensor
    gate: cutile.Tensor | None
    up: cutile.Tensor | None
    gate_up: cutile.Tensor | None
    act: cutile.Tensor
    down: cutile.Tensor

    @staticmethod
    def layer_fields(c: Qwen3Config, weights: Qwen3Weights, rows: int) -> dict[str, Any]:
        """The fields of `LayerBuffers` for ``rows`` tokens of a model of ``weights``, new
        tensors (a subclass's ``allocate`` adds its own)."""
        def empty(*shape: int) -> cutile.Tensor:
            return api.empty(shape, DTYPE)

        def needed(wanted: bool, *shape: int) -> cutile.Tensor | None:
            return empty(*shape) if wanted else None

        h, heads, dim, inter = c.hidden_size, c.num_attention_heads, c.head_dim, c.intermediate_size
        stacked_qkv = any(layer.qkv_proj is not None for layer in weights.layers)
        separate_qkv = any(layer.qkv_proj is None for layer in weights.layers)
        stacked_mlp = any(layer.gate_up_proj is not None for layer in weights.layers)
        separate_mlp = any(layer.gate_up_proj is None for layer in weights.layers)
        qkv = needed(stacked_qkv, rows, c.q_size + 2 * c.kv_size)
        q, k, v = _head_slices(c, qkv) if qkv is not None else (None, None, None)
        return dict(hidden=(empty(rows, h), empty(rows, h)), normed=empty(rows, h),
                    q_raw=needed(separate_qkv, rows, c.q_size), k_raw=needed(separate_qkv, rows, c.kv_size),
                    v=needed(separate_qkv, rows, c.kv_size), qkv=qkv, qkv_q=q, qkv_k=k, qkv_v=v,
                    q=empty(rows, heads, dim), attended=empty(rows, heads, dim), projected=empty(rows, h),
                    gate=needed(separate_mlp, rows, inter), up=needed(separate_mlp, rows, inter),
                    gate_up=needed(stacked_mlp, rows, 2 * inter), act=empty(rows, inter), down=empty(rows, h))


def _buffer(bufs: LayerBuffers | None, name: str) -> cutile.Tensor | None:
    """``bufs``'s buffer ``name`` for an output (None without buffers: the call makes its
    own), refused when the buffers were allocated for weights that need no such one."""
    if bufs is None:
        return None
    found: cutile.Tensor | None = getattr(bufs, name)
    if found is None:
        raise ModelError(f"the model's buffers have no '{name}': they were allocated for other weights")
    return found


@dataclass
class StepBuffers(LayerBuffers):
    """Every intermediate of a decode step of ``batch`` tokens, allocated once: the step
    then allocates nothing (what a CUDA graph capture needs)."""

    logits: cutile.Tensor
    #: an eager step's positions and lengths (i32 ``(batch,)``), written on the device from
    #: the host's lengths: its kernels then find their plans by the same tensors each step
    positions: cutile.Tensor
    seq_lens: cutile.Tensor

    @classmethod
    def allocate(cls, c: Qwen3Config, weights: Qwen3Weights, batch: int) -> StepBuffers:
        return cls(**cls.layer_fields(c, weights, batch), logits=api.empty((batch, c.vocab_size), f32),
                   positions=api.empty((batch,), i32), seq_lens=api.empty((batch,), i32))


@dataclass
class PrefillBuffers(LayerBuffers):
    """A prefill's intermediates over the packed prompts of ``lengths`` (one set for
    every layer: each layer's batch is queued after the one before on its stream, which
    orders its writes after that layer's reads), and its inputs that depend on the
    lengths alone. Kept by the model for its last prompt lengths: a prefill of the same
    lengths again allocates and uploads nothing but the token ids."""

    lengths: tuple[int, ...]
    k: cutile.Tensor  # the rotated keys (the attention's; the cache gets them too)
    positions: cutile.Tensor  # i32 (tokens,): each token's position in its prompt
    cu_seqlens: cutile.Tensor  # i32 (batch + 1,): the prompts' offsets in the packed rows
    offsets: tuple[int, ...]  # the same on the host
    last_rows: cutile.Tensor  # i32 (batch,): the last row of each prompt

    @classmethod
    def allocate(cls, c: Qwen3Config, weights: Qwen3Weights, lengths: tuple[int, ...]) -> PrefillBuffers:
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
        tokens = int(offsets[-1])
        return cls(**cls.layer_fields(c, weights, tokens), lengths=lengths,
                   k=api.empty((tokens, c.num_key_value_heads, c.head_dim), DTYPE),
                   positions=_i32(np.concatenate([np.arange(n) for n in lengths])),
                   cu_seqlens=api.from_numpy(offsets), offsets=tuple(int(o) for o in offsets),
                   last_rows=_i32(offsets[1:] - 1))


class Qwen3Model:
    """The forward passes: `prefill` of packed prompts into a fresh cache, and
    `decode_step` of one token per sequence (eager, or replayed as a CUDA graph by
    `DecodeGraph`). Both return f32 logits ``(batch, vocab)``."""

    def __init__(self, config: Qwen3Config, weights: Qwen3Weights) -> None:
        self.config = config
        self.weights = weights
        self._step_buffers: dict[int, StepBuffers] = {}
        self._prefill_buffers: PrefillBuffers | None = None
        # Each weight's .T view, made once (by the weight's id, the weight kept with it):
        # every call passes matmul the same object, whose derived views it keeps.
        self._transposed: dict[int, tuple[cutile.Tensor, cutile.Tensor]] = {}

    def _t(self, weight: cutile.Tensor) -> cutile.Tensor:
        """``weight.T``, the same view object each time."""
        found = self._transposed.get(id(weight))
        if found is None or found[0] is not weight:
            found = self._transposed[id(weight)] = (weight, weight.T)
        return found[1]

    def step_buffers(self, batch: int) -> StepBuffers:
        if batch not in self._step_buffers:
            self._step_buffers[batch] = StepBuffers.allocate(self.config, self.weights, batch)
        return self._step_buffers[batch]

    def prefill_buffers(self, lengths: Sequence[int]) -> PrefillBuffers:
        """The prefill buffers of prompts of ``lengths``: the last prefill's when its
        lengths were these, else new ones (the last ones are dropped first: the model
        holds one layer's intermediates of its last prefill, as it holds a decode
        step's; `release_prefill_buffers` frees them). A model prefills on one thread at
        a time: two prefills of the same lengths at once share these buffers, and the
        second is refused with an OwnershipError."""
        lengths = tuple(lengths)
        if not lengths or any(type(n) is not int or n < 1 for n in lengths):
            raise ModelError(f"prefill_buffers(): parameter 'lengths' must be one int >= 1 per prompt, got "
                             f"{list(lengths)}")
        bufs = self._prefill_buffers
        if bufs is None or bufs.lengths != lengths:
            self._prefill_buffers = None  # (freed before the new ones are allocated)
            bufs = self._prefill_buffers = PrefillBuffers.allocate(self.config, self.weights, lengths)
        return bufs

    def release_prefill_buffers(self) -> None:
        """Frees the intermediates the model keeps from its last prefill (one layer's over
        all its tokens: about 47 KB a token at the 0.6B shapes); the next prefill makes new
        ones."""
        self._prefill_buffers = None

    # -- shared pieces ----------------------------------------------------------------

    def _projections(self, layer: LayerWeights, normed: cutile.Tensor,
                     bufs: LayerBuffers | None) -> tuple[cutile.Tensor, cutile.Tensor, cutile.Tensor]:
        """The q, k and v projections of ``tokens`` rows: ``(tokens, heads, dim)``,
        ``(tokens, kv_heads, dim)`` twice (into ``bufs`` when given; head slices of the
        stacked projection's output when there is one)."""
        c = self.config
        tokens = int(normed.shape[0])
        if layer.qkv_proj is not None:  # one GEMM; q, k and v are head slices of its output
            if bufs is not None:
                ck.matmul(normed, self._t(layer.qkv_proj), out=_buffer(bufs, "qkv"))
                assert bufs.qkv_q is not None and bufs.qkv_k is not None and bufs.qkv_v is not None  # (qkv's views)
                return bufs.qkv_q, bufs.qkv_k, bufs.qkv_v
            return _head_slices(c, ck.matmul(normed, self._t(layer.qkv_proj)))
        q_raw = ck.matmul(normed, self._t(layer.q_proj), out=_buffer(bufs, "q_raw")).reshape(
            tokens, c.num_attention_heads, c.head_dim)
        k_raw = ck.matmul(normed, self._t(layer.k_proj), out=_buffer(bufs, "k_raw")).reshape(
            tokens, c.num_key_value_heads, c.head_dim)
        v = ck.matmul(normed, self._t(layer.v_proj), out=_buffer(bufs, "v")).reshape(
            tokens, c.num_key_value_heads, c.head_dim)
        return q_raw, k_raw, v

    def _rotate_and_cache(self, layer: LayerWeights, raw: tuple[cutile.Tensor, cutile.Tensor, cutile.Tensor],
                          positions: cutile.Tensor, caches: tuple[cutile.Tensor, cutile.Tensor], q_out: cutile.Tensor,
                          k_out: cutile.Tensor | None = None) -> None:
        """QK-norm and RoPE of q and k into ``q_out`` (and ``k_out``), the rotated k and v
        written into ``caches`` at the positions: one launch."""
        c = self.config
        q_raw, k_raw, v = raw
        ck.qk_norm_rope_cache(q_raw, k_raw, v, layer.q_norm, layer.k_norm, positions, caches, c.rms_norm_eps,
                              c.rope_theta, style="neox", out=q_out, k_out=k_out)

    def _finish_layer(self, layer: LayerWeights, attended: cutile.Tensor, hidden: cutile.Tensor,
                      next_norm: cutile.Tensor, bufs: LayerBuffers | None) -> tuple[cutile.Tensor, cutile.Tensor]:
        """Output projection, residual add and RMSNorm, the MLP, and its residual add
        fused with the next norm (the next layer's input norm, or the final one):
        returns the residual stream and its normed rows."""
        c = self.config
        tokens = int(attended.shape[0])
        other = None if bufs is None else bufs.hidden[1] if hidden is bufs.hidden[0] else bufs.hidden[0]
        projected = ck.matmul(attended.reshape(tokens, c.q_size), self._t(layer.o_proj), out=bufs.projected if bufs else None)
        hidden, normed = ck.add_rms_norm(projected, hidden, layer.post_attention_layernorm, c.rms_norm_eps,
                                         out=(other, bufs.normed) if bufs else None)
        if layer.gate_up_proj is not None:  # one GEMM; silu_mul reads the two halves in place
            both = ck.matmul(normed, self._t(layer.gate_up_proj), out=_buffer(bufs, "gate_up"))
            gate, up = both[:, :c.intermediate_size], both[:, c.intermediate_size:]
        else:
            gate = ck.matmul(normed, self._t(layer.gate_proj), out=_buffer(bufs, "gate"))
            up = ck.matmul(normed, self._t(layer.up_proj), out=_buffer(bufs, "up"))
        act = ck.silu_mul(gate, up, out=bufs.act if bufs else None)
        down = ck.matmul(act, self._t(layer.down_proj), out=bufs.down if bufs else None)
        back = None if bufs is None else bufs.hidden[1] if other is bufs.hidden[0] else bufs.hidden[0]
        hidden, normed = ck.add_rms_norm(down, hidden, next_norm, c.rms_norm_eps,
                                         out=(back, bufs.normed) if bufs else None)
        if bufs is None or back is None:
            return hidden, normed
        return back, bufs.normed

    def _next_norms(self) -> list[cutile.Tensor]:
        w = self.weights
        return [layer.input_layernorm for layer in w.layers[1:]] + [w.norm]

    def _logits(self, normed_rows: cutile.Tensor, out: cutile.Tensor | None = None) -> cutile.Tensor:
        logits: cutile.Tensor = ck.matmul(normed_rows, self._t(self.weights.lm_head), out_dtype=f32, out=out)
        return logits

    # -- prefill ----------------------------------------------------------------------

    def prefill(self, prompts: Sequence[Sequence[int]], cache: KVCache) -> cutile.Tensor:
        """Runs the prompts (one per cache row, each at least one token) from position
        0, writes their keys and values into ``cache`` and returns the logits of each
        prompt's last token, f32 ``(batch, vocab)``. Each layer is a `cutile.batch`
        continuing the one before (batches do not nest: not called inside one), all of
        them in the intermediates `prefill_buffers` keeps for these prompt lengths."""
        c, w = self.config, self.weights
        if len(prompts) != cache.batch:
            raise ModelError(f"prefill(): {len(prompts)} prompts for a cache of batch {cache.batch}")
        lengths = [len(p) for p in prompts]
        for b, n in enumerate(lengths):
            if not 1 <= n <= cache.max_seq:
                raise ModelError(f"prefill(): prompt {b} has {n} tokens; expected 1 to the cache's {cache.max_seq}")
        ids = np.concatenate([np.asarray(p, dtype=np.int64) for p in prompts])
        if ids.min() < 0 or ids.max() >= c.vocab_size:
            raise ModelError(f"prefill(): token ids must lie in [0, {c.vocab_size}), got {int(ids.min())} to "
                             f"{int(ids.max())}")
        bufs = self.prefill_buffers(lengths)
        offsets, positions, cu_seqlens = bufs.offsets, bufs.positions, bufs.cu_seqlens
        token_ids = api.from_numpy(ids.astype(np.int32))
        # Each layer is a batch (its launches queued on one stream without a wait each)
        # that continues the layer before's: the host queues layer n + 1 while the device
        # runs layer n, then waits for layer n - 1. Every layer works in the same buffers:
        # the stream orders layer n + 1's writes after layer n's reads (its batch follows
        # layer n's, whose holds are so no conflict, and layer n - 1's are given back).
        with cutile.batch("qwen3 prefill, embedding", wait=False) as previous:
            hidden, normed = bufs.hidden[0], bufs.normed
            ck.embedding(token_ids, w.embed_tokens, out=hidden)
            ck.rms_norm(hidden, w.layers[0].input_layernorm, c.rms_norm_eps, out=normed)
        try:
            for n, (layer, next_norm) in enumerate(zip(w.layers, self._next_norms())):
                with cutile.batch(f"qwen3 prefill, layer {n}", wait=False, after=previous) as active:
                    q_raw, k_raw, v = self._projections(layer, normed, bufs)
                    q, k = bufs.q, bufs.k
                    keys, values = cache.keys[n], cache.values[n]
                    if len(set(lengths)) == 1:  # one launch: prompt b's tokens are the b-th block of the packed rows
                        self._rotate_and_cache(layer, (q_raw, k_raw, v), positions, (keys, values), q, k)
                    else:  # a launch per prompt, into its own entry of the cache
                        for b in range(cache.batch):
                            rows = slice(offsets[b], offsets[b + 1])
                            self._rotate_and_cache(layer, (q_raw[rows], k_raw[rows], v[rows]), positions[rows],
                                                   (keys[b], values[b]), q[rows], k[rows])
                    ck.attention(q, k, v, causal=True, cu_seqlens_q=cu_seqlens, cu_seqlens_k=cu_seqlens,
                                 out=bufs.attended)
                    hidden, normed = self._finish_layer(layer, bufs.attended, hidden, next_norm, bufs)
                done, previous = previous, active
                _wait_for(done)
            with cutile.batch("qwen3 prefill, logits", after=previous):  # (its end waits)
                logits = self._logits(ck.embedding(bufs.last_rows, normed))  # (a gather of the last rows)
        finally:
            _wait_for(previous)  # (done, or an error ended the loop: its work is waited for)
        cache.lengths = lengths
        return logits

    # -- decode -----------------------------------------------------------------------

    def _check_step(self, ids: cutile.Tensor, cache: KVCache) -> None:
        if tuple(ids.shape) != (cache.batch,):
            raise ModelError(f"decode_step(): parameter 'ids' has shape {list(ids.shape)}; expected [{cache.batch}]")
        full = [b for b, n in enumerate(cache.lengths) if n >= cache.max_seq]
        if full:
            raise ModelError(f"decode_step(): sequence {full[0]} fills the cache's {cache.max_seq} positions")

    def decode_step(self, ids: cutile.Tensor, cache: KVCache) -> cutile.Tensor:
        """One token per sequence (``ids``: i32 or i64 ``(batch,)`` on the device) at
        position ``cache.lengths[b]``; appends its keys and values and returns f32 logits
        ``(batch, vocab)`` (the model's step buffer for the batch: read it before the
        next step). The step is one `cutile.batch` (not called inside one)."""
        self._check_step(ids, cache)
        bufs = self.step_buffers(cache.batch)
        tile = [_pow2_at_least(cache.batch)]
        lengths = _i32(cache.lengths)
        # (a batch of their own: a kernel may read the positions on the host, as the
        # interpreter's cache update does to check them, once they are written)
        with cutile.batch("qwen3 decode positions"):
            _copy_i32(bufs.positions[...].partition(tile), lengths).sync()
            _plus_one(bufs.seq_lens[...].partition(tile), bufs.positions).sync()
        with cutile.batch("qwen3 decode step"):  # the step's launches without a wait each
            logits = self.decode_into(ids, bufs.positions, bufs.seq_lens, cache, bufs)
        cache.lengths = [n + 1 for n in cache.lengths]
        return logits

    def decode_into(self, ids: cutile.Tensor, positions: cutile.Tensor, seq_lens: cutile.Tensor, cache: KVCache,
                    bufs: StepBuffers) -> cutile.Tensor:
        """The decode step's work on device tensors alone (it allocates nothing and reads
        nothing back, so it can be captured): ``positions`` (i32, each sequence's
        position), ``seq_lens`` (positions + 1); writes the keys and values and the
        logits into ``bufs.logits``. The cache's host lengths are the caller's to advance
        (they say only whether every sequence is at one position)."""
        c, w = self.config, self.weights
        batch = cache.batch
        same_position = len(set(cache.lengths)) == 1
        hidden, normed = bufs.hidden[0], bufs.normed
        ck.embedding(ids, w.embed_tokens, out=hidden)
        ck.rms_norm(hidden, w.layers[0].input_layernorm, c.rms_norm_eps, out=normed)
        for n, (layer, next_norm) in enumerate(zip(w.layers, self._next_norms())):
            q_raw, k_raw, v = self._projections(layer, normed, bufs)
            keys, values = cache.keys[n], cache.values[n]
            if same_position:  # one launch for the batch: every sequence's token at the same position
                self._rotate_and_cache(layer, (q_raw, k_raw, v), positions, (keys, values), bufs.q)
            else:  # a launch per sequence (row b is its one new token), into its own entry of the cache
                for b in range(batch):
                    row = slice(b, b + 1)
                    self._rotate_and_cache(layer, (q_raw[row], k_raw[row], v[row]), positions[row],
                                           (keys[b], values[b]), bufs.q[row])
            ck.decode_attention(bufs.q, keys.transpose(1, 2), values.transpose(1, 2), seq_lens, out=bufs.attended)
            hidden, normed = self._finish_layer(layer, bufs.attended, hidden, next_norm, bufs)
        return self._logits(normed, out=bufs.logits)


def _pow2_at_least(n: int) -> int:
    """The tile of the small i32 kernels over ``n`` sequences."""
    return 1 << max(0, n - 1).bit_length()


def _wait_for(batch: Batch) -> None:
    """Waits for the work of a batch that ended with ``wait=False`` (and frees its tensors)."""
    if batch.future is not None:
        batch.future.result()


# The decode state a graph advances on the device (so a replay needs no upload): each
# step's positions are the last step's lengths, and its lengths one more.
@cutile.entry
def _plus_one(out: Mut[Tensor[i32, ["B"]]], x: Tensor[i32, [-1]]) -> None:
    out.store(load_tile_like(x, out) + 1)


@cutile.entry
def _copy_i32(out: Mut[Tensor[i32, ["B"]]], x: Tensor[i32, [-1]]) -> None:
    out.store(load_tile_like(x, out))


@cutile.entry
def _copy_i64(out: Mut[Tensor[i64, ["B"]]], x: Tensor[i64, [-1]]) -> None:
    out.store(load_tile_like(x, out))


class PendingReplay:
    """A replay queued by `DecodeGraph.enqueue`: ``wait()`` waits for its work and gives
    the ids it chose (greedy: i64 ``(steps, batch)``, read back once; sampling: an empty
    array, the host reads the logits). Its ids live in one of the graph's two sets of
    rows until the replay after the next rewrites them: read them before that."""

    def __init__(self, batch: Batch, owner: DecodeGraph | None, which: int) -> None:
        self._batch, self._owner, self._which = batch, owner, which
        self._generation = owner._generations[which] if owner is not None else 0
        self._read: np.ndarray[Any, Any] | None = None

    @property
    def batch(self) -> Batch:
        """The batch that runs the replay (the next replay continues it: ``after=``)."""
        return self._batch

    def settle(self) -> None:
        """Waits for the replay's work, reading nothing back."""
        _wait_for(self._batch)

    def wait(self) -> np.ndarray[Any, Any]:
        if self._read is None:
            self.settle()
            owner = self._owner
            if owner is None:
                self._read = np.empty((0, 0), np.int64)
            elif owner._generations[self._which] != self._generation:
                raise ModelError("PendingReplay.wait(): this replay's ids were rewritten by a later replay (two "
                                 "replays after it were queued before they were read); read each replay's ids "
                                 "before queuing the one after the next")
            else:
                self._read = owner._token_sets[self._which].to_numpy()
        return self._read


class DecodeGraph:
    """``steps`` decode steps of one cache captured once as a CUDA graph and replayed
    (on the interpreter, a host graph: the recorded launches run again).

    The graph keeps its state on the device: each step's positions and lengths are made
    from the last step's by two small kernels, and, with ``greedy``, each step's argmax
    goes to a row of `tokens` that the next step embeds. A replay then needs nothing
    from the host: it runs ``steps`` tokens per sequence and the host reads them back
    once. Greedy decoding captures two graphs, each writing its own `tokens` buffer and
    embedding the other's last row first; replays alternate between them, so `enqueue`
    queues the next replay while the last one runs, and the host reads that one's ids
    (`PendingReplay.wait`) while the device works on the next. Without ``greedy``
    (``steps`` 1) the host samples each step's logits and gives the ids to the next
    replay, copied in by `cutile.Graph.update`. With ``dependent_launches`` (the default)
    the graph's kernels are programmatic dependent launches (`cutile.dependent_launches`,
    Tile IR 13.4): each starts while the one before finishes and waits for it at its
    start."""

    def __init__(self, model: Qwen3Model, cache: KVCache, *, greedy: bool, steps: int = 1,
                 dependent_launches: bool = True) -> None:
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise ModelError(f"DecodeGraph: parameter 'steps' must be an int >= 1, got {steps!r}")
        if steps > 1 and not greedy:
            raise ModelError(f"DecodeGraph: {steps} steps per replay need greedy decoding (sampling reads each "
                             "step's logits on the host)")
        self.model, self.cache, self.greedy, self.steps = model, cache, greedy, steps
        batch = cache.batch
        self.bufs = model.step_buffers(batch)
        count = 2 if greedy else 1
        # each graph's argmax rows, as views made once: argmax makes its workspace once per
        # out= tensor
        self._token_sets = [api.zeros((steps, batch), "i64") for _ in range(count)]
        self._row_sets = [[tokens[step] for step in range(steps)] for tokens in self._token_sets]
        self._newest = count - 1  # the set the last replay wrote (graph 0 embeds its last row first)
        self._generations = [0] * count  # each set's replays queued: a queued replay's ids are current while it matches
        self.ids = api.zeros((batch,), "i64")  # the ids a sampled step embeds (a graph input)
        self.positions = api.zeros((batch,), i32)
        self.seq_lens = _i32(cache.lengths)  # the lengths before the next step
        self._tile = _pow2_at_least(batch)
        self._device_lengths: list[int] | None = None  # what seq_lens holds, when known
        self._pending: list[PendingReplay] = []  # queued replays, oldest first
        self._latest: list[PendingReplay | None] = [None] * count  # the last replay of each set of rows
        self._check_room(steps)
        # An eager run of each graph's steps loads every kernel and makes every plan's
        # workspaces (a capture can do neither; argmax's are per out= tensor). It writes keys
        # and values past each sequence's length and nothing the real steps read before
        # they rewrite it. Each run (the interpreter runs a capture's steps too) starts from
        # the cache's lengths.
        self.graphs: list[cutile.Graph] = []
        with cutile.dependent_launches(dependent_launches):  # (the eager run loads the kernels compiled so)
            for which in range(count):
                self._restart_lengths()
                self._record(which)
            for which in range(count):
                self._restart_lengths()
                with cutile.graph_scope(f"qwen3 decode x{steps}, graph {which}") as scope:
                    self._record(which)
                self.graphs.append(scope.graph)

    @property
    def graph(self) -> cutile.Graph:
        """The first captured graph (greedy decoding alternates two)."""
        return self.graphs[0]

    @property
    def tokens(self) -> cutile.Tensor:
        """i64 ``(steps, batch)``: each step's argmax in the last replay queued (greedy)."""
        return self._token_sets[self._newest]

    @property
    def last_ids(self) -> cutile.Tensor:
        """The last step's argmax (greedy): give it to the next `replay` to go on."""
        return self._row_sets[self._newest][-1]

    def _check_room(self, steps: int) -> None:
        cache = self.cache
        worst = max(cache.lengths) + steps
        if worst > cache.max_seq:
            raise ModelError(f"DecodeGraph: {steps} steps after a length of {max(cache.lengths)} need "
                             f"{worst} positions; the cache has {cache.max_seq}")

    def _restart_lengths(self) -> None:
        _copy_i32(self.seq_lens[...].partition([self._tile]), _i32(self.cache.lengths)).sync()

    def _record(self, which: int) -> None:
        """The launches of graph ``which``: its steps, the argmax into its own rows."""
        model, bufs, tile = self.model, self.bufs, [self._tile]
        rows = self._row_sets[which]
        for step in range(self.steps):
            _copy_i32(self.positions[...].partition(tile), self.seq_lens).sync()
            _plus_one(self.seq_lens[...].partition(tile), self.positions).sync()
            if not self.greedy:
                ids = self.ids
            else:  # step 0 embeds the other set's last row: what the replay before chose
                ids = rows[step - 1] if step else self._row_sets[(which + 1) % len(self._row_sets)][-1]
            model.decode_into(ids, self.positions, self.seq_lens, self.cache, bufs)
            if self.greedy:
                ck.argmax(bufs.logits, out=rows[step])

    def enqueue(self, ids: cutile.Tensor) -> PendingReplay:
        """Queues ``steps`` steps from ``ids`` (i64 ``(batch,)``: the tokens at each
        sequence's length) without waiting for them, and advances the cache's lengths.
        A greedy replay from `last_ids` queues behind the one still running (an older
        one is waited for first: at most two are queued); other ids, lengths the host
        moved, and sampled steps wait for every queued replay first (they rewrite what
        those replays read; other ids are copied over the last replay's last row, so
        its ids are read back first)."""
        cache = self.cache
        self.model._check_step(ids, cache)
        if ids.dtype != self.ids.dtype:
            raise ModelError(f"DecodeGraph.replay(): parameter 'ids' must be i64 [{cache.batch}], got {ids.dtype} "
                             f"{list(ids.shape)}")
        self._check_room(self.steps)
        tile = [self._tile]
        which = (self._newest + 1) % len(self.graphs)
        source = self.last_ids  # what graph `which` embeds first (greedy)
        new_ids = self.greedy and (ids.address(), ids.strides) != (source.address(), source.strides)
        moved = self._device_lengths != cache.lengths  # the host moved them (or the capture did)
        keep = 1 if self.greedy and not (new_ids or moved) else 0
        while len(self._pending) > keep:
            self._pending.pop(0).settle()
        latest = self._latest[self._newest]
        if new_ids and latest is not None:
            latest.wait()  # its ids are read before the new ones are copied over its last row
        after = self._pending[-1].batch if self._pending else None
        with cutile.batch(f"qwen3 decode replay x{self.steps}", wait=False, after=after) as active:
            if moved:
                _copy_i32(self.seq_lens[...].partition(tile), _i32(cache.lengths)).sync()
            if new_ids:
                _copy_i64(source[...].partition(tile), ids).sync()
            elif not self.greedy:
                self.graphs[which].update(replace={self.ids: ids})
            self.graphs[which].launch().sync()
        cache.lengths = [n + self.steps for n in cache.lengths]
        self._device_lengths = cache.lengths
        self._newest = which
        self._generations[which] += 1
        pending = PendingReplay(active, self if self.greedy else None, which)
        self._pending.append(pending)
        self._latest[which] = pending
        return pending

    def wait(self) -> None:
        """Waits for every queued replay (reading nothing back; each `PendingReplay`
        still reads its ids). A replay that failed raises here, after the others
        were waited for."""
        failure: BaseException | None = None
        while self._pending:
            try:
                self._pending.pop(0).settle()
            except BaseException as exc:  # (every queued replay is still waited for)
                failure = failure or exc
        if failure is not None:
            raise failure

    def replay(self, ids: cutile.Tensor) -> cutile.Tensor:
        """Runs ``steps`` steps from ``ids`` (i64 ``(batch,)``: the tokens at each
        sequence's length), waits for them and advances the cache's lengths; returns the
        logits of the last step (greedy: `tokens` holds every step's argmax)."""
        self.enqueue(ids)
        self.wait()
        return self.bufs.logits

    def step(self, ids: cutile.Tensor) -> cutile.Tensor:
        """One replay of a one-step graph: the logits of the step (`last_ids` holds
        their argmax when greedy)."""
        if self.steps != 1:
            raise ModelError(f"DecodeGraph.step(): this graph runs {self.steps} steps per replay; use replay()")
        return self.replay(ids)

    def close(self) -> None:
        """Waits for the queued replays and destroys the graphs."""
        try:
            self.wait()
        finally:
            for graph in self.graphs:
                graph.close()
