#!/usr/bin/env python3
"""Safe reads on the GPU: element-offset loads and bounds-checked gathers against
copy bandwidth, measured in one run on one GPU.

- the safe 2-D 5-point stencil (the discrete Laplacian, zero outside the tensor) on
  a 16384 x 16384 fp32 tensor, as a fraction of the device-to-device copy bandwidth
  of the same tensor (bytes read + written), in several formulations, each over a
  sweep of tiles and worker warps:
  - ``load_at``: five element-offset loads (``x.load(at=(i, j - 1), ...)``), as a
    user writes it; the compiler reads each tile one column off a 16-byte boundary
    as the two aligned tiles around it, spliced in registers, and the loads share
    the centre tile;
  - ``load_at, one tile each``: the same loads at offsets known only at run time
    (``d = -1`` passed in), so each is one tile at an element offset (a view one
    element off the 16-byte alignment: one element per load instruction), the form
    before the splice;
  - ``gathers + splice``: bounds-checked gathers (masks, no branches) of the centre,
    the rows above and below and the tiles 4 columns either side, spliced by the
    kernel itself (``extract`` / ``cat``);
  - ``copy`` (a cutile kernel storing its input tile): the ceiling of one tile load
    and store per block, at the same tiles;
- an embedding lookup of 4096 rows x 4096 bf16 from a 151936-row table: the safe,
  bounds-checked gather against the unchecked gather of an unsafe kernel, and both
  as a fraction of the copy bandwidth of the bytes they move (rows read + written).

Targets (issue "Safe reads anywhere"): stencil >= 0.85x copy; checked gather within
5% of the unchecked one and >= 0.85x copy. Run on the GPU machine with
``python scripts/bench_reads.py`` (``--only stencil`` or ``--only gather`` for one
workload). Every result is checked against numpy. Where torch is installed it is a
peer measured in the same run (``F.conv2d`` with the 3x3 stencil's weights;
``index_select``). ``--check-only`` (or ``--smoke``) runs every variant once on small
sizes, on the interpreter too. ``--sass NVDISASM`` needs no GPU: it compiles each
stencil variant of the sweep for sm_90 and prints its registers and static counts of
instructions and memory instructions (``nvdisasm`` from the CUDA toolkit or the
``nvidia-cuda-nvdisasm`` wheel).

Kernels are defined in a factory, so this file keeps annotations evaluated at
definition (no `from __future__ import annotations`).
"""

import argparse
import re
import statistics
import struct
import subprocess
import sys
import tempfile
from collections.abc import Callable
from typing import Any

import numpy as np


MEMORY_OPS = ("LDG", "STG", "LDS", "STS", "LDSM", "STSM", "UTMA", "LDGSTS", "UBLKCP", "LDL", "STL", "BAR",
              "SYNCS.ARRIVE", "SHFL")


def sass_summary(cubin: bytes, nvdisasm: str) -> tuple[int, int, dict[str, int]]:
    """(registers per thread, instructions, {memory instruction: count}) of a one-kernel
    cubin, counted in its code (static counts)."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as file:
        file.write(cubin)
        file.flush()
        text = subprocess.run([nvdisasm, "-c", file.name], capture_output=True, text=True, check=True).stdout
    mix: dict[str, int] = {}
    instructions = re.findall(r"/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]+)", text)
    for mnemonic in instructions:
        if mnemonic.startswith(MEMORY_OPS):
            mix[mnemonic] = mix.get(mnemonic, 0) + 1
    return _register_count(cubin), len(instructions), dict(sorted(mix.items()))


def _register_count(cubin: bytes) -> int:
    """EIATTR_REGCOUNT of the cubin's .nv.info section (ELF64; -1 when absent)."""
    section_table, = struct.unpack_from("<Q", cubin, 0x28)
    entry_size, count, names_index = struct.unpack_from("<HHH", cubin, 0x3A)

    def section(i: int) -> tuple[int, ...]:
        return struct.unpack_from("<IIQQQQIIQQ", cubin, section_table + i * entry_size)

    names_offset = section(names_index)[4]
    for i in range(count):
        name_at, _, _, _, offset, size, *_ = section(i)
        start = names_offset + name_at
        if cubin[start:cubin.index(b"\0", start)] != b".nv.info":
            continue
        position = offset
        while position < offset + size:
            form, attribute = cubin[position], cubin[position + 1]
            if form == 0x04:  # EIFMT_SVAL: a u16 size, then the value
                length, = struct.unpack_from("<H", cubin, position + 2)
                if attribute == 0x2F:  # EIATTR_REGCOUNT: (symbol, registers)
                    return int(struct.unpack_from("<II", cubin, position + 4)[1])
                position += 4 + length
            else:  # EIFMT_HVAL carries a u16, EIFMT_NVAL nothing
                position += 4 if form == 0x03 else 2
    return -1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=16384, help="the stencil's tensor is size x size fp32")
    parser.add_argument("--vocab", type=int, default=151936, help="rows of the embedding table")
    parser.add_argument("--rows", type=int, default=4096, help="rows looked up")
    parser.add_argument("--width", type=int, default=4096, help="bf16 elements per row")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--only", choices=("stencil", "gather"), help="run one workload")
    parser.add_argument("--check-only", "--smoke", action="store_true", dest="check_only",
                        help="only check every kernel's result (runs on the interpreter too, with small sizes)")
    parser.add_argument("--sass", metavar="NVDISASM",
                        help="no GPU needed: compile each stencil variant of the sweep for sm_90 and print its "
                             "registers and memory instructions, disassembled by this nvdisasm")
    args = parser.parse_args()

    import cutile
    import cutile.core as ct
    from cuda_core import Event
    from cutile import _gpu, api
    from cutile.core import Constant, Mut, Tensor, bf16, f32, i32

    timed = not args.check_only and args.sass is None
    if timed and cutile.backend() != "gpu":
        print("bench_reads.py needs a GPU (--check-only runs anywhere)", file=sys.stderr)
        return 2
    stream = _gpu.default_stream() if timed else None
    try:  # an optional peer, never a dependency
        import torch
    except ImportError:
        torch = None
    peer = torch is not None and timed and torch.cuda.is_available()
    peer_stream = torch.cuda.ExternalStream(int(stream.handle)) if peer else None

    def device_time_ms(enqueue: Callable[[], None]) -> float:
        """Median over repeats of one enqueue between CUDA events on cutile's stream."""
        if not timed:
            return float("nan")
        for _ in range(3):
            enqueue()
        samples = []
        for _ in range(args.repeats):
            start, end = Event.create(), Event.create()
            start.record(stream)
            enqueue()
            end.record(stream)
            end.synchronize()
            samples.append(start.elapsed_ms(end))
        return statistics.median(samples)

    def copy_ms(tensor: Any) -> float:
        """One device-to-device copy of ``tensor``'s bytes into a tensor of its shape."""
        if not timed:
            return float("nan")
        target = api.empty(list(tensor.shape), dtype=tensor.dtype)
        source_memory, target_memory = _gpu.device_memory(tensor._storage), _gpu.device_memory(target._storage)
        return device_time_ms(lambda: target_memory.copy_from(source_memory, tensor.nbytes, stream=stream))

    def launch_ms(kernel: Any, launch: Any, values: dict[str, Any]) -> tuple[float, Any]:
        """The device time of one launch, enqueued as the runtime does after the first
        run, and what that first run returned (whose values are checked)."""
        plan = launch.plan()
        options = launch._options
        returned = launch.sync()  # compiles and loads once
        return device_time_ms(lambda: _gpu.enqueue(kernel, plan, values, options, stream)), returned

    def stencil_load_at(y: Mut[Tensor[f32, ["BM", "BN"]]], x: Tensor[f32, [-1, -1]], BM: Constant[int],
                        BN: Constant[int]):
        i, j = ct.bid(0) * BM, ct.bid(1) * BN
        vertical = x.load(at=(i - 1, j), shape=(BM, BN)) + x.load(at=(i + 1, j), shape=(BM, BN))
        horizontal = x.load(at=(i, j - 1), shape=(BM, BN)) + x.load(at=(i, j + 1), shape=(BM, BN))
        y.store(4 * x.load(at=(i, j), shape=(BM, BN)) - vertical - horizontal)

    def stencil_one_tile_each(y: Mut[Tensor[f32, ["BM", "BN"]]], x: Tensor[f32, [-1, -1]], d: i32,
                              BM: Constant[int], BN: Constant[int]):
        # d = -1 at run time: the compiler knows nothing of the offsets' alignment
        i, j = ct.bid(0) * BM, ct.bid(1) * BN
        vertical = x.load(at=(i + d, j), shape=(BM, BN)) + x.load(at=(i - d, j), shape=(BM, BN))
        horizontal = x.load(at=(i, j + d), shape=(BM, BN)) + x.load(at=(i, j - d), shape=(BM, BN))
        y.store(4 * x.load(at=(i, j), shape=(BM, BN)) - vertical - horizontal)

    def stencil_gathers(y: Mut[Tensor[f32, ["BM", "BN"]]], x: Tensor[f32, [-1, -1]], BM: Constant[int],
                        BN: Constant[int]):
        rows = (ct.arange(BM, i32) + ct.bid(0) * BM).reshape((BM, 1))
        cols = (ct.arange(BN, i32) + ct.bid(1) * BN).reshape((1, BN))
        centre = ct.gather(x, (rows, cols))
        # column j - 1 and j + 1 from the tiles 4 columns (16 bytes) either side: element
        # k of each group of 4 is element k - 1 or k + 1 of the centre's or the neighbour's
        groups = (BM, BN // 4, 4)
        one = (BM, BN // 4, 1)
        c = centre.reshape(groups)
        before = ct.gather(x, (rows, cols - 4)).reshape(groups)
        after = ct.gather(x, (rows, cols + 4)).reshape(groups)
        c0, c1 = ct.extract(c, (0, 0, 0), one), ct.extract(c, (0, 0, 1), one)
        c2, c3 = ct.extract(c, (0, 0, 2), one), ct.extract(c, (0, 0, 3), one)
        left = ct.cat(ct.cat(ct.extract(before, (0, 0, 3), one), c0, axis=2), ct.cat(c1, c2, axis=2), axis=2)
        right = ct.cat(ct.cat(c1, c2, axis=2), ct.cat(c3, ct.extract(after, (0, 0, 0), one), axis=2), axis=2)
        vertical = ct.gather(x, (rows - 1, cols)) + ct.gather(x, (rows + 1, cols))
        y.store(4 * centre - vertical - left.reshape((BM, BN)) - right.reshape((BM, BN)))

    def tile_copy(y: Mut[Tensor[f32, ["BM", "BN"]]], x: Tensor[f32, [-1, -1]], BM: Constant[int],
                  BN: Constant[int]):
        y.store(x.load(index=(ct.bid(0), ct.bid(1)), shape=(BM, BN)))

    def entry(function: Any, warps: int) -> Any:
        return cutile.entry(function, hints=None if warps == 4 else {"num_worker_warps": warps})

    STENCILS = {name: {warps: entry(function, warps) for warps in (4, 8)} for name, function in (
        ("load_at", stencil_load_at), ("load_at, one tile each", stencil_one_tile_each),
        ("gathers + splice", stencil_gathers), ("copy", tile_copy))}
    #: (formulation, tile, worker warps): tiles up to 4096 elements with 4 warps, 8192 with 8 (more spill)
    SWEEP = [("load_at", tile, warps) for tile in ((32, 128), (16, 128), (16, 256), (8, 256), (32, 64), (64, 64))
             for warps in (4, 8)]
    SWEEP += [("load_at", tile, 8) for tile in ((64, 128), (32, 256))]
    SWEEP += [("load_at, one tile each", (32, 128), 4), ("load_at, one tile each", (16, 256), 8)]
    SWEEP += [("gathers + splice", tile, warps) for tile, warps in (((32, 128), 4), ((16, 128), 4), ((16, 256), 8),
                                                                     ((32, 128), 8), ((64, 128), 8))]
    SWEEP += [("copy", tile, warps) for tile, warps in (((32, 128), 4), ((64, 128), 8))]

    def lookup_kernel(checked: bool) -> Any:
        def embedding(out: Mut[Tensor[bf16, ["BM", "BN"]]], table: Tensor[bf16, [-1, -1]], ids: Tensor[i32, [-1]],
                      BM: Constant[int], BN: Constant[int]):
            rows = ids.load(index=(ct.bid(0),), shape=(BM,)).reshape((BM, 1))
            cols = (ct.arange(BN, i32) + ct.bid(1) * BN).reshape((1, BN))
            out.store(ct.gather(table, (rows, cols), unchecked=not checked))
        return cutile.entry(embedding, unsafe=not checked)

    LOOKUPS = {checked: lookup_kernel(checked) for checked in (True, False)}

    rows: list[tuple[str, str, float, float, bool]] = []  # workload, variant, GB/s, fraction of copy, correct

    if args.sass is not None:
        print(f"{'stencil 2-D fp32, sm_90':42} {'variant':22} {'regs':>4} {'instrs':>6}  memory instructions "
              "(static counts)")
        for name, tile, warps in SWEEP:
            # tensors of the facts a launch gives tileiras (16-byte aligned, dims and strides divisible by 16)
            out, source = api.empty([512, 512]).partition(list(tile)), api.empty([512, 512])
            extra = (-1,) if name == "load_at, one tile each" else ()
            cubin = cutile.compile(STENCILS[name][warps], out, source, *extra, arch="sm_90").cubin
            registers, instructions, mix = sass_summary(cubin, args.sass)
            print(f"{name:42} {f'tile {tile[0]}x{tile[1]}, {warps} warps':22} {registers:4} {instructions:6}  "
                  + ", ".join(f"{count} {op}" for op, count in mix.items()))
        return 0

    # -- the stencil ----------------------------------------------------------------------------
    n = args.size
    rng = np.random.default_rng(0)
    stencil_best: tuple[float, str] = (0.0, "")
    if args.only in (None, "stencil"):
        x_host = rng.integers(-8, 9, (n, n)).astype(np.float32)  # small integers: every result is exact
        x = api.from_numpy(x_host)
        moved = 2 * n * n * 4
        copy_gbs = moved / copy_ms(x) / 1e6
        rows.append(("copy fp32 (device to device)", f"{n}x{n}", copy_gbs, 1.0, True))
        padded = np.pad(x_host, 1)
        laplacian = 4 * x_host - padded[:-2, 1:-1] - padded[2:, 1:-1] - padded[1:-1, :-2] - padded[1:-1, 2:]
        del padded
        for name, tile, warps in SWEEP if timed else [(name, (16, 32), 4) for name in STENCILS]:
            kernel = STENCILS[name][warps]
            out = api.full([n, n], np.nan).partition(list(tile))  # poisoned: every element must be stored
            extra = (-1,) if name == "load_at, one tile each" else ()
            ms, (out, x, *_) = launch_ms(kernel, kernel(out, x, *extra), {"y": out._tensor, "x": x,
                                                                           **({"d": -1} if extra else {})})
            correct = bool(np.array_equal(out.unpartition().to_numpy(), x_host if name == "copy" else laplacian))
            del out
            gbs = moved / ms / 1e6
            variant = f"tile {tile[0]}x{tile[1]}, {warps} warps"
            rows.append((f"stencil 2-D fp32: {name}", variant, gbs, gbs / copy_gbs, correct))
            if name != "copy" and correct and gbs / copy_gbs > stencil_best[0]:
                stencil_best = (gbs / copy_gbs, f"{name}, {variant}")
        if peer:
            with torch.cuda.stream(peer_stream):
                xt = torch.from_dlpack(x)[None, None]
                weight = torch.tensor([[0.0, -1.0, 0.0], [-1.0, 4.0, -1.0], [0.0, -1.0, 0.0]],
                                      device="cuda")[None, None]
                ms = device_time_ms(lambda: torch.nn.functional.conv2d(xt, weight, padding=1))
                yt = torch.nn.functional.conv2d(xt, weight, padding=1)
                torch.cuda.synchronize()
                correct = bool(np.array_equal(yt[0, 0].cpu().numpy(), laplacian))
                gbs = moved / ms / 1e6
                rows.append(("stencil 2-D fp32: torch conv2d (peer)", "3x3 weights", gbs, gbs / copy_gbs, correct))
                del xt, yt
        del x, laplacian

    # -- the embedding lookup -------------------------------------------------------------------
    checked_best, unchecked_best, lookup_copy_gbs = 0.0, 0.0, float("nan")
    if args.only in (None, "gather"):
        table_host = rng.standard_normal((args.vocab, args.width), dtype=np.float32)
        table = api.from_numpy(table_host, bf16)
        table_values = np.asarray(table.to_numpy()).astype(np.float32)
        ids_host = rng.integers(0, args.vocab, args.rows).astype(np.int32)
        ids = api.from_numpy(ids_host)
        expected = table_values[ids_host]
        moved = 2 * args.rows * args.width * 2
        sample = api.empty([args.rows, args.width], dtype=bf16)
        lookup_copy_gbs = moved / copy_ms(sample) / 1e6
        rows.append(("copy bf16 (device to device)", f"{args.rows}x{args.width}", lookup_copy_gbs, 1.0, True))
        for tile in ((16, 512), (32, 256), (8, 1024), (64, 128)) if timed else ((8, 32),):
            for checked in (True, False):
                out = api.full([args.rows, args.width], np.nan, dtype=bf16).partition(list(tile))
                kernel = LOOKUPS[checked]
                ms, (out, table, ids) = launch_ms(kernel, kernel(out, table, ids),
                                                  {"out": out._tensor, "table": table, "ids": ids})
                correct = bool(np.array_equal(np.asarray(out.unpartition().to_numpy()).astype(np.float32),
                                              expected))
                gbs = moved / ms / 1e6
                name = "gather bf16, bounds-checked (safe)" if checked else "gather bf16, unchecked (unsafe)"
                rows.append((name, f"tile {tile[0]}x{tile[1]}", gbs, gbs / lookup_copy_gbs, correct))
                if checked:
                    checked_best = max(checked_best, gbs)
                else:
                    unchecked_best = max(unchecked_best, gbs)
        if peer:
            with torch.cuda.stream(peer_stream):
                table_t, ids_t = torch.from_dlpack(table), torch.from_dlpack(ids).long()
                out_t = torch.empty((args.rows, args.width), dtype=torch.bfloat16, device="cuda")
                ms = device_time_ms(lambda: torch.index_select(table_t, 0, ids_t, out=out_t))
                torch.cuda.synchronize()
                correct = bool(np.array_equal(out_t.float().cpu().numpy(), expected))
                gbs = moved / ms / 1e6
                rows.append(("gather bf16, torch index_select (peer)", "", gbs, gbs / lookup_copy_gbs, correct))

    print(f"safe reads on the {cutile.backend()} backend" + (f", median of {args.repeats} launches" if timed else
          " (results checked only)") + "; bytes = read + written")
    print(f"{'workload':42} {'variant':22} {'GB/s':>8} {'of copy':>8}")
    for workload, variant, gbs, fraction, correct in rows:
        print(f"{workload:42} {variant:22} {gbs:8.0f} {fraction:8.1%}" + ("" if correct else "  WRONG"))
    if timed and args.only in (None, "stencil"):
        fraction, variant = stencil_best
        print(f"\nbest stencil: {fraction:.1%} of copy ({variant}): target >= 85% "
              + ("MET" if fraction >= 0.85 else "NOT MET"))
    if timed and args.only in (None, "gather") and unchecked_best > 0:
        fraction = checked_best / lookup_copy_gbs
        ratio = checked_best / unchecked_best
        print(f"best bounds-checked gather: {fraction:.1%} of copy, target >= 85% "
              + ("MET" if fraction >= 0.85 else "NOT MET")
              + f"; {ratio:.3f}x the best unchecked gather, target >= 0.95x " + ("MET" if ratio >= 0.95 else "NOT MET"))
    correct = all(ok for *_, ok in rows)
    print("results: " + ("OK" if correct else "WRONG"))
    return 0 if correct else 1


if __name__ == "__main__":
    sys.exit(main())
