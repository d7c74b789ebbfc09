#!/usr/bin/env python3
"""cutile_kernels' decode_attention against torch SDPA and the bandwidth roofline of
reading the KV cache, measured in one run on one GPU.

Shapes (issue 16): 32 q heads over 8 kv heads, head_dim 128, batch 1, 8 and 64, every
sequence at the full context of 1k, 8k and 32k positions, bf16 (``--dtype f16`` too).
The bytes are the K and V caches read once (q and the output are noise); the roofline is
a device-to-device copy moving the same bytes (``copy_`` of a tensor of half of them:
read + written), measured in the same run.

Each cutile result is checked first against SDPA in f32 over the first two sequences
(a mismatch stops the script), then timed with `cutile.bench.do_bench` over the launch
form (``decode_attention.launch(..., out=out).op``: device time alone, L2 flushed before
each rep). The peers: ``torch.nn.functional.scaled_dot_product_attention`` with
``enable_gqa=True`` on q as (batch, 32, 1, 128) over the padded caches, without a mask
(every sequence is full: its fastest kernel) and with a boolean length mask (what a
ragged batch needs).

    scripts/on_gpu_machine.sh python3 scripts/bench_decode.py [--dtype bf16 f16] [--record]

``--record`` first searches decode_attention's configs at these shapes (``--budget``
seconds per shape) and saves the winners as
``cutile_kernels/records/<arch>/decode_attention.json`` (to commit), which the timed run
then uses. ``--smoke`` runs small shapes on the CPU interpreter against numpy (CI).
"""

import argparse
import math
import sys
from typing import Any

import numpy as np

from _bench_common import BandwidthTable, InterpreterTensors, TorchTensors, choose_backend, lacks_gpu


class Checked(Exception):
    """A result differs from its reference."""


Q_HEADS, KV_HEADS, HEAD_DIM = 32, 8, 128
BATCHES = (1, 8, 64)
CONTEXTS = (1024, 8192, 32768)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="small shapes on the CPU interpreter, against numpy")
    parser.add_argument("--dtype", nargs="*", default=["bf16"], choices=["bf16", "f16"])
    parser.add_argument("--reps", type=int, default=50)
    parser.add_argument("--record", action="store_true",
                        help="first search the configs at the benchmark's shapes and save the record "
                             "(packages/cutile-kernels/src/cutile_kernels/records/<arch>/decode_attention.json)")
    parser.add_argument("--budget", type=float, default=30.0, help="seconds of search per shape with --record")
    args = parser.parse_args(argv)
    choose_backend(args.smoke)

    from cutile_kernels._decode_attention import TUNER, decode_attention, plan

    if lacks_gpu("bench_decode.py", args.smoke):
        return 2
    if args.smoke:
        shapes = [(2, 4, 2, 100, 64), (1, 4, 1, 1500, 64)]  # one launch, two
        reps, warmup = 2, 1
    else:
        shapes = [(b, Q_HEADS, KV_HEADS, n, HEAD_DIM) for b in BATCHES for n in CONTEXTS]
        reps, warmup = args.reps, 10
    if args.record:
        record = TUNER.make_record(shapes, budget=args.budget,
                                   **({"warmup": 1, "reps": 2, "paired_reps": 2} if args.smoke else {}))
        if args.smoke:  # a record of interpreter timings is no record to commit
            print(f"searched {TUNER.name}: {len(record.winners)} buckets (not saved)")
        else:
            record.save(TUNER.record_path)
            print(f"saved {TUNER.record_path} ({', '.join(record.winners)})")

    lib: Any = Numpy() if args.smoke else Torch()
    table = BandwidthTable(warmup=warmup, reps=reps)
    timed = table.timed

    for dtype in args.dtype:
        for batch, q_heads, kv_heads, context, head_dim in shapes:
            q = lib.randn((batch, q_heads, head_dim), dtype)
            k = lib.randn((batch, kv_heads, context, head_dim), dtype)
            v = lib.randn((batch, kv_heads, context, head_dim), dtype)
            lens = lib.lengths(batch, context)
            out = lib.empty((batch, q_heads, head_dim), dtype)
            decode_attention(q, k, v, lens, out=out)
            lib.check(f"{dtype} batch {batch} context {context}", out, q, k, v, lens)
            config = TUNER.config((batch, q_heads, kv_heads, context, head_dim))
            split = plan(config, (batch, q_heads, kv_heads, context, head_dim))
            form = f"1 launch, {split.heads_per_block} q/block" if split.one_launch else f"{split.splits} splits"
            label = f"{dtype} b={batch} ctx={context} ({form}, tile {split.tile_n})"
            moved = 2 * lib.nbytes(k)
            copy_gbs = timed(label, "copy (same bytes)", moved, lib.copy_of(moved))
            cutile_gbs = timed(label, "cutile", moved,
                               lambda: decode_attention.launch(q, k, v, lens, out=out).op)
            peer_gbs = [timed(label, name, moved, peer) for name, peer in lib.peers(q, k, v, lens).items()]
            table.ratio(label, "cutile / copy", cutile_gbs / copy_gbs)
            if peer_gbs:
                table.ratio(label, "cutile / best SDPA (speedup)", cutile_gbs / max(peer_gbs))
            lib.release()

    table.print("shape", 30)
    print(f"results: OK ({'interpreter, wall clock: not figures' if args.smoke else 'GPU, device time'}; "
          "target: cutile / copy >= 0.85x and faster than SDPA)")
    return 0


def numpy_reference(q: np.ndarray, k: np.ndarray, v: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """float64 attention of each q head over its kv head's first ``lens[b]`` positions."""
    batch, q_heads, head_dim = q.shape
    group = q_heads // k.shape[1]
    out = np.zeros(q.shape)
    for b in range(batch):
        n = int(lens[b])
        for h in range(q_heads):
            s = k[b, h // group, :n] @ q[b, h] / math.sqrt(head_dim)
            p = np.exp(s - s.max())
            out[b, h] = p @ v[b, h // group, :n] / p.sum()
    return out


class Numpy(InterpreterTensors):
    """--smoke: cutile tensors on the interpreter, references in numpy float64."""

    def lengths(self, batch: int, context: int) -> Any:
        return self.api.from_numpy(np.full(batch, context, dtype=np.int32))

    def check(self, what: str, out: Any, q: Any, k: Any, v: Any, lens: Any) -> None:
        values = [np.asarray(t.to_numpy()).astype(np.float64) for t in (out, q, k, v)]
        expected = numpy_reference(values[1], values[2], values[3], lens.to_numpy())
        if not np.allclose(values[0], expected, rtol=0, atol=2e-2):
            raise Checked(f"{what}: wrong result (largest difference {np.abs(values[0] - expected).max()})")

    def peers(self, *arguments: Any) -> dict[str, Any]:
        return {}


class Torch(TorchTensors):
    """On the GPU: torch tensors (decode_attention takes them through DLPack), SDPA peers."""

    def __init__(self) -> None:
        import torch

        super().__init__(torch)

    def lengths(self, batch: int, context: int) -> Any:
        return self.torch.full((batch,), context, device="cuda", dtype=self.torch.int32)

    def check(self, what: str, out: Any, q: Any, k: Any, v: Any, lens: Any) -> None:
        torch = self.torch
        torch.cuda.synchronize()
        first = slice(0, 2)  # two sequences in f32: the whole batch would not fit at 64 x 32k
        expected = torch.nn.functional.scaled_dot_product_attention(
            q[first, :, None].float(), k[first].float(), v[first].float(), enable_gqa=True)[:, :, 0]
        worst = (out[first].float() - expected).abs().max().item()
        if not worst <= 2e-2:
            raise Checked(f"{what}: wrong result (largest difference {worst})")

    def peers(self, q: Any, k: Any, v: Any, lens: Any) -> dict[str, Any]:
        torch, sdpa = self.torch, self.torch.nn.functional.scaled_dot_product_attention
        q4 = q[:, :, None]
        mask = (torch.arange(k.shape[2], device="cuda")[None, :] < lens[:, None].long())[:, None, None, :]
        return {"torch SDPA (enable_gqa)": lambda: sdpa(q4, k, v, enable_gqa=True),
                "torch SDPA (enable_gqa, mask)": lambda: sdpa(q4, k, v, attn_mask=mask, enable_gqa=True)}


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Checked as exc:
        print(f"results: WRONG: {exc}", file=sys.stderr)
        sys.exit(1)
