"""The kernel suite: the programs cutile must compile (sm_90, sm_100) and run.

Plain functions over the kernel language only (no runtime import), so that both
the compile tests here and the numerics tests of the cutile package
(``packages/cutile/tests/test_kernel_suite.py``, which loads this file by path)
wrap the same sources with ``cutile.entry``. `SUITE` says, per kernel, whether it
is unsafe and which hints it carries.

Persistent kernels come in two kinds. Safe ones take their output as a mapped
partition (``t.partition(tile).map(map_shape, blocks=n)``) and store only at the
indices its schedule mints (``for idx in z.tiles():``), which the compiler proves
disjoint between blocks: ``mapped_gemm`` (grouped order, the host's ``map([G, 1])``),
the chunked row kernels on an owned axis, a two-output kernel (``tiles_with``) and
a sub-range update (``tiles_within``). The unsafe twin ``persistent_gemm`` computes
the same tile order itself and is ``@cutile.entry(unsafe=True)``, launched with an
explicit grid (allowed to differ from its Mut partition's grid only in unsafe
kernels); the interpreter checks that no two blocks write one element, and stores
are still masked at the edges.
"""

from typing import Any

from cutile_compiler.language import add as add_with  # the suite's first kernel is called add
from cutile_compiler.language import (
    Constant,
    Mut,
    Tensor,
    arange,
    argmax,
    argmin,
    assume,
    atomic_add,
    atomic_cas,
    div,
    f8e4m3fn,
    f8e5m2,
    fma,
    gather,
    i32,
    reduce,
    scan,
    scatter,
    sqrt,
    tf32,
    bf16,
    bid,
    cdiv,
    cumsum,
    exp,
    f16,
    f32,
    full,
    get_tile_block_id,
    load_tile_like,
    cat,
    max,
    maximum,
    min,
    minimum,
    mma,
    num_blocks,
    rsqrt,
    sum,
    where,
    zeros,
)


def add(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]], y: Tensor[f32, [-1]]):
    tx = load_tile_like(x, z)
    ty = load_tile_like(y, z)
    z.store(tx + ty)


def saxpy(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]], y: Tensor[f32, [-1]], a: f32):
    z.store(a * load_tile_like(x, z) + load_tile_like(y, z))


def gemm(z: Mut[Tensor[f32, ["BM", "BN"]]], x: Tensor[f16, [-1, "K"]], y: Tensor[f16, ["K", -1]],
         BM: Constant[int], BN: Constant[int], BK: Constant[int], K: Constant[int]):
    part_x = x.partition([BM, BK])
    part_y = y.partition([BK, BN])
    bm, bn, _ = get_tile_block_id()
    acc = z.load()
    for k in range(cdiv(K, BK)):
        acc = mma(part_x.load([bm, k], latency=3), part_y.load([k, bn], latency=3), acc)
    z.store(acc)


def persistent_gemm(z: Mut[Tensor[f32, ["BM", "BN"]]], x: Tensor[f16, [-1, "K"]], y: Tensor[f16, ["K", -1]],
                    BM: Constant[int], BN: Constant[int], BK: Constant[int], K: Constant[int],
                    GROUP_M: Constant[int]):
    part_x = x.partition([BM, BK])
    part_y = y.partition([BK, BN])
    part_z = z.partition([BM, BN])  # unsafe: any tile of z may be stored
    tiles_m = part_z.num_tiles(0)
    tiles_n = part_z.num_tiles(1)
    in_group = GROUP_M * tiles_n
    for tile in range(bid(0), tiles_m * tiles_n, num_blocks(0)):
        first_m = (tile // in_group) * GROUP_M
        group_m = minimum(tiles_m - first_m, GROUP_M)
        pm = first_m + (tile % in_group) % group_m
        pn = (tile % in_group) // group_m
        acc = zeros((BM, BN), f32)
        for k in range(cdiv(K, BK)):
            acc = mma(part_x.load([pm, k]), part_y.load([k, pn]), acc)
        part_z.store((pm, pn), acc)


def mapped_gemm(z: Mut[Tensor[f32, ["BM", "BN"]]], x: Tensor[f16, [-1, "K"]], y: Tensor[f16, ["K", -1]],
                BM: Constant[int], BN: Constant[int], BK: Constant[int], K: Constant[int]):
    """The safe persistent GEMM: z is mapped on the host (``map([G, 1], blocks=n)``: groups
    of G tile rows), each block stores the tiles its share of the schedule mints."""
    part_x = x.partition([BM, BK])
    part_y = y.partition([BK, BN])
    for idx in z.tiles():
        bm, bn = idx
        acc = zeros((BM, BN), f32)
        for k in range(cdiv(K, BK)):
            acc = mma(part_x.load([bm, k]), part_y.load([k, bn]), acc)
        z.store(acc, idx)


def chunked_softmax(z: Mut[Tensor[f32, ["BM", "BN"]]], x: Tensor[f32, [-1, -1]], BM: Constant[int],
                    BN: Constant[int]):
    """Row softmax over any number of columns: z is mapped ``[1, OWNED]``, so each schedule
    item owns BM whole rows and walks their column chunks twice (online max and sum, then
    the normalized chunks)."""
    for idx in z.tiles():
        rows, _ = idx
        row_max = full((BM, 1), -float("inf"), f32)
        row_sum = zeros((BM, 1), f32)
        for c in range(z.num_tiles(1)):
            t = x.load(index=(rows, c), shape=(BM, BN), padding="neg_inf")
            new_max = maximum(row_max, max(t, axis=1, keepdims=True))
            row_sum = row_sum * exp(row_max - new_max) + sum(exp(t - new_max), axis=1, keepdims=True)
            row_max = new_max
        for c in range(z.num_tiles(1)):
            t = x.load(index=(rows, c), shape=(BM, BN), padding="neg_inf")
            z.store(exp(t - row_max) / row_sum, (rows, c))


def chunked_layernorm(z: Mut[Tensor[f32, ["BM", "BN"]]], x: Tensor[f32, [-1, -1]], w: Tensor[f32, [-1]],
                      b: Tensor[f32, [-1]], eps: f32, BM: Constant[int], BN: Constant[int]):
    """LayerNorm over any number of columns on an owned axis (z mapped ``[1, OWNED]``): a pass
    summing each row's chunks and their squares, a pass storing the normalized chunks."""
    n = x.shape[1].astype(f32)
    for idx in z.tiles():
        rows, _ = idx
        total = zeros((BM, 1), f32)
        squares = zeros((BM, 1), f32)
        for c in range(z.num_tiles(1)):
            t = x.load(index=(rows, c), shape=(BM, BN))
            total = total + sum(t, axis=1, keepdims=True)
            squares = squares + sum(t * t, axis=1, keepdims=True)
        mean = total / n
        scale = rsqrt(maximum(squares / n - mean * mean, 0.0) + eps)
        for c in range(z.num_tiles(1)):
            t = x.load(index=(rows, c), shape=(BM, BN))
            weight = w.load(index=(c,), shape=(BN,)).reshape((1, BN))
            bias = b.load(index=(c,), shape=(BN,)).reshape((1, BN))
            z.store((t - mean) * scale * weight + bias, (rows, c))


def sum_and_product(z: Mut[Tensor[f32, ["BM", "BN"]]], w: Mut[Tensor[f32, ["BM", "BN"]]],
                    x: Tensor[f32, [-1, -1]], y: Tensor[f32, [-1, -1]], BM: Constant[int], BN: Constant[int]):
    """Two outputs of one schedule: ``tiles_with`` mints indices both z and w accept."""
    for idx in z.tiles_with(w):
        a = x.load(index=idx, shape=(BM, BN))
        b = y.load(index=idx, shape=(BM, BN))
        z.store(a + b, idx)
        w.store(a * b, idx)


def cache_update(cache: Mut[Tensor[f32, ["BS", "D"]]], new: Tensor[f32, [-1, -1]], start: i32,
                 BS: Constant[int], D: Constant[int]):
    """A KV-cache style update: the rows of ``new`` go to tile rows ``start...`` of the cache;
    ``tiles_within`` visits only those tiles (the rest of the cache is not touched)."""
    for idx in cache.tiles_within(((start, cdiv(new.shape[0], BS)), None)):
        r, c = idx
        cache.store(new.load(index=(r - start, c), shape=(BS, D)), idx)


def split_k_gemm(z: Mut[Tensor[f32, ["BM", "BN"]]], x: Tensor[f16, [-1, "K"]], y: Tensor[f16, ["K", -1]],
                 BM: Constant[int], BN: Constant[int], BK: Constant[int], K: Constant[int], SPLITS: Constant[int]):
    """z += x @ y with the K loop split among SPLITS blocks per output tile (grid axis 2),
    each adding its partial tile atomically (z starts at zero)."""
    bm, bn, split = get_tile_block_id()
    part_x = x.partition([BM, BK])
    part_y = y.partition([BK, BN])
    part_z = z.partition([BM, BN])  # unsafe: SPLITS blocks update each tile
    steps = cdiv(K, BK)
    per_split = cdiv(steps, SPLITS)
    acc = zeros((BM, BN), f32)
    for k in range(split * per_split, minimum((split + 1) * per_split, steps)):
        acc = mma(part_x.load([bm, k]), part_y.load([k, bn]), acc)
    part_z.atomic_add((bm, bn), acc)


def batched_matmul(z: Mut[Tensor[f32, [1, "BM", "BN"]]], a: Tensor[f16, [-1, -1, "K"]],
                   b: Tensor[f16, [-1, "K", -1]], BM: Constant[int], BN: Constant[int], BK: Constant[int],
                   K: Constant[int]):
    i, m, n = get_tile_block_id()
    part_a = a.partition([1, BM, BK])
    part_b = b.partition([1, BK, BN])
    acc = zeros((1, BM, BN), f32)
    for k in range(cdiv(K, BK)):
        acc = mma(part_a.load([i, m, k]), part_b.load([i, k, n]), acc)
    z.store(acc)


def softmax(z: Mut[Tensor[f32, ["BM", "BN"]]], x: Tensor[f32, [-1, -1]], BM: Constant[int], BN: Constant[int]):
    t = x.load(index=(bid(0), 0), shape=(BM, BN), padding="neg_inf")  # one block holds whole rows
    e = exp(t - max(t, axis=1, keepdims=True))
    z.store(e / sum(e, axis=1, keepdims=True))


def rmsnorm(z: Mut[Tensor[f32, ["BM", "BN"]]], x: Tensor[f32, [-1, -1]], w: Tensor[f32, [-1]], eps: f32,
            BM: Constant[int], BN: Constant[int]):
    t = x.load(index=(bid(0), 0), shape=(BM, BN))
    n = x.shape[1].astype(f32)
    scale = rsqrt(sum(t * t, axis=1, keepdims=True) / n + eps)
    z.store(t * scale * w.load(index=(0,), shape=(BN,)).reshape((1, BN)))


def layernorm(z: Mut[Tensor[f32, ["BM", "BN"]]], x: Tensor[f32, [-1, -1]], w: Tensor[f32, [-1]],
              b: Tensor[f32, [-1]], eps: f32, BM: Constant[int], BN: Constant[int]):
    t = x.load(index=(bid(0), 0), shape=(BM, BN))
    n = x.shape[1]
    mean = sum(t, axis=1, keepdims=True) / n.astype(f32)
    inside = arange(BN).reshape((1, BN)) < n
    centered = where(inside, t - mean, 0.0)
    var = sum(centered * centered, axis=1, keepdims=True) / n.astype(f32)
    weight = w.load(index=(0,), shape=(BN,)).reshape((1, BN))
    bias = b.load(index=(0,), shape=(BN,)).reshape((1, BN))
    z.store(centered * rsqrt(var + eps) * weight + bias)


def transpose(z: Mut[Tensor[f32, ["T", "T"]]], x: Tensor[f32, [-1, -1]], T: Constant[int]):
    i, j, _ = get_tile_block_id()
    z.store(x.load(index=(j, i), shape=(T, T)).T)


def attention(o: Mut[Tensor[f32, [1, "BM", "D"]]], q: Tensor[f16, [-1, -1, "D"]], k: Tensor[f16, [-1, -1, "D"]],
              v: Tensor[f16, [-1, -1, "D"]], scale: f32, BM: Constant[int], BN: Constant[int], D: Constant[int]):
    """Causal flash attention forward: one (head, query block) per block, online softmax."""
    head, m, _ = get_tile_block_id()
    qt = q.load(index=(head, m, 0), shape=(1, BM, D)).reshape((BM, D))
    part_k = k.partition([1, BN, D])
    part_v = v.partition([1, BN, D])
    seq = q.shape[1]
    rows = (arange(BM) + m * BM).reshape((BM, 1))
    row_max = full((BM, 1), -float("inf"), f32)
    row_sum = zeros((BM, 1), f32)
    acc = zeros((BM, D), f32)
    for n in range(minimum(cdiv((m + 1) * BM, BN), cdiv(seq, BN))):
        kt = part_k.load([head, n, 0]).reshape((BN, D))
        s = mma(qt, kt.T, zeros((BM, BN), f32)) * scale
        cols = (arange(BN) + n * BN).reshape((1, BN))
        s = where((cols <= rows) & (cols < seq), s, -float("inf"))
        new_max = maximum(row_max, max(s, axis=1, keepdims=True))
        p = exp(s - new_max)
        alpha = exp(row_max - new_max)
        row_sum = row_sum * alpha + sum(p, axis=1, keepdims=True)
        vt = part_v.load([head, n, 0]).reshape((BN, D))
        acc = mma(p.astype(f16), vt, acc * alpha)
        row_max = new_max
    o.store((acc / row_sum).reshape((1, BM, D)))


def stencil_1d_kernel(dtype: Any) -> Any:
    """The 1-D 5-point stencil ``y[i] = x[i-2] - 4 x[i-1] + 6 x[i] - 4 x[i+1] + x[i+2]``
    (zero outside x) over ``dtype``, a safe kernel: element-offset loads of a read-only
    tensor, the edges padded."""
    def stencil_1d(y: Mut[Tensor[dtype, ["B"]]], x: Tensor[dtype, [-1]], B: Constant[int]):
        i = bid(0) * B
        near = x.load(at=(i - 1,), shape=(B,)) + x.load(at=(i + 1,), shape=(B,))
        far = x.load(at=(i - 2,), shape=(B,)) + x.load(at=(i + 2,), shape=(B,))
        y.store(far - 4 * near + 6 * x.load(at=(i,), shape=(B,)))
    return stencil_1d


def stencil_2d_kernel(dtype: Any) -> Any:
    """The 2-D 5-point stencil (the discrete Laplacian) ``y = 4 x[i, j] - x[i-1, j] -
    x[i+1, j] - x[i, j-1] - x[i, j+1]`` (zero outside x) over ``dtype``, a safe kernel."""
    def stencil_2d(y: Mut[Tensor[dtype, ["BM", "BN"]]], x: Tensor[dtype, [-1, -1]], BM: Constant[int],
                   BN: Constant[int]):
        i, j = bid(0) * BM, bid(1) * BN
        vertical = x.load(at=(i - 1, j), shape=(BM, BN)) + x.load(at=(i + 1, j), shape=(BM, BN))
        horizontal = x.load(at=(i, j - 1), shape=(BM, BN)) + x.load(at=(i, j + 1), shape=(BM, BN))
        y.store(4 * x.load(at=(i, j), shape=(BM, BN)) - vertical - horizontal)
    return stencil_2d


def embedding_kernel(dtype: Any) -> Any:
    """An embedding lookup ``out[r] = table[ids[r]]`` over ``dtype``, a safe kernel: a
    bounds-checked gather of the read-only table (an id outside it reads zeros)."""
    def embedding(out: Mut[Tensor[dtype, ["BM", "BN"]]], table: Tensor[dtype, [-1, -1]], ids: Tensor[i32, [-1]],
                  BM: Constant[int], BN: Constant[int]):
        rows = ids.load(index=(bid(0),), shape=(BM,)).reshape((BM, 1))
        cols = (arange(BN, i32) + bid(1) * BN).reshape((1, BN))
        out.store(gather(table, (rows, cols)))
    return embedding


stencil_1d = stencil_1d_kernel(f32)
stencil_2d = stencil_2d_kernel(f32)
embedding = embedding_kernel(bf16)


#: name -> (function, unsafe, hints)
SUITE: dict[str, tuple[Any, bool, dict[str, Any] | None]] = {
    "add": (add, False, None),
    "saxpy": (saxpy, False, None),
    "gemm": (gemm, False, {"sm_90": {"num_worker_warps": 8}, "sm_100": {"num_ctas": 1}}),
    "persistent_gemm": (persistent_gemm, True, {"occupancy": 1}),
    "mapped_gemm": (mapped_gemm, False, {"occupancy": 1, "sm_90": {"num_worker_warps": 8}}),
    "chunked_softmax": (chunked_softmax, False, None),
    "chunked_layernorm": (chunked_layernorm, False, None),
    "sum_and_product": (sum_and_product, False, None),
    "cache_update": (cache_update, False, None),
    "split_k_gemm": (split_k_gemm, True, None),
    "batched_matmul": (batched_matmul, False, None),
    "softmax": (softmax, False, None),
    "rmsnorm": (rmsnorm, False, None),
    "layernorm": (layernorm, False, None),
    "transpose": (transpose, False, None),
    "stencil_1d": (stencil_1d, False, None),
    "stencil_2d": (stencil_2d, False, None),
    "embedding": (embedding, False, None),
    "attention": (attention, False, None),
}


# -- one kernel per group of language features, compiled (not a numerics suite) ----------------
def features_float(z: Mut[Tensor[f32, ["BM", "BN"]]], a8: Tensor[f8e4m3fn, [-1, -1]], b8: Tensor[f8e5m2, [-1, -1]],
                   a: Tensor[f32, [-1, -1]], BM: Constant[int], BN: Constant[int]):
    i, j, _ = get_tile_block_id()
    e4 = a8.load(index=(i, 0), shape=(BM, 64))
    e5 = b8.load(index=(0, j), shape=(64, BN))
    acc = mma(e4, a8.load(index=(0, j), shape=(64, BN)), z.load())
    acc = mma(b8.load(index=(i, 0), shape=(BM, 64)), e5, acc)
    half = mma(e4, a8.load(index=(0, j), shape=(64, BN)), zeros((BM, BN), f16))
    acc = acc + half.astype(f32)
    t = a.load(index=(i, 0), shape=(BM, 64))
    acc = mma(t.astype(tf32), a.load(index=(0, j), shape=(64, BN)).astype(tf32), acc)
    acc = add_with(acc, 1.0, rounding="zero", flush_to_zero=True)
    acc = div(acc, 3.0, rounding="approx")
    acc = fma(acc, acc, acc, rounding="positive_inf")
    acc = div(acc, 7.0, rounding="full")
    acc = sqrt(acc * acc, rounding="approx", flush_to_zero=True)
    z.store(acc.astype(f16, rounding="zero").astype(f32))


def features_memory(z: Mut[Tensor[i32, ["B"]]], x: Tensor[f32, [-1]], idx: Tensor[i32, [-1]], B: Constant[int]):
    i = load_tile_like(idx, z)
    n = assume(x.shape[0], div_by=16, lower=0)
    inside = i < n
    v = gather(x, i, mask=inside, padding=0.0, latency=4)
    old = atomic_add(z, i % B, 1, mask=inside, order="acq_rel", scope="device")
    atomic_cas(z, arange(B), old, old + 1, order="acquire", scope="sys")
    scatter(z, arange(B), cumsum(v.astype(i32)), mask=inside, latency=2)
    total = reduce(v, 0, lambda acc, e: acc + e, 0.0)
    running = scan(old, 0, lambda acc, e: maximum(acc, e), -1, reverse=True)
    print("block %d: total %8.3f, running %d", bid(0), total, running)
    assert total > -1e30, "the total is finite"
    z.atomic_xor(running)


def features_reductions(z: Mut[Tensor[f32, ["BM", 4]]], x: Tensor[bf16, [-1, -1]], y: Tensor[f16, [-1, -1]],
                        BM: Constant[int]):
    """max/min from their NaN identity and argmax/argmin's total order, on 16-bit floats."""
    i, _, _ = get_tile_block_id()
    a = x.load(index=(i, 0), shape=(BM, 64))
    b = y.load(index=(i, 0), shape=(BM, 64))
    columns = (max(a, axis=1, keepdims=True).astype(f32), min(b, axis=1, keepdims=True).astype(f32),
               argmax(a, axis=1, keepdims=True).astype(f32), argmin(b, axis=1, keepdims=True).astype(f32))
    z.store(cat(cat(columns[0], columns[1], 1), cat(columns[2], columns[3], 1), 1))


#: name -> (function, unsafe, hints), compiled only
FEATURES: dict[str, tuple[Any, bool, dict[str, Any] | None]] = {
    "features_float": (features_float, False, None),
    "features_memory": (features_memory, True, None),
    "features_reductions": (features_reductions, False, None),
}
