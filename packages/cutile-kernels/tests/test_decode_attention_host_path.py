"""decode_attention on the GPU backend's host side, on cuda_core's fake driver (no GPU
needed): the split kernel's grid is (batch x kv heads, splits) as the plan says, the
merge's (batch, q heads), a plan of one split is one launch of grid (batch, q heads /
heads per block) whether a config or the default asks for it, and the caller's tensors
stay usable after the call; lengths
the host holds (numpy, a list) are checked before any launch, a device tensor's are not. The
kernels compile with tileiras for the fake sm_90 device; the fake driver records
launches instead of running them. (The fake's allocations are 1 MiB apart: every tensor
here stays below that.)"""

import re
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import cutile
from cuda_core.testing import FakeDriver
from cutile import api
from host_path_testkit import fake_gpu, register_layout

from cutile_kernels._decode_attention import DEFAULT, TUNER, decode_attention, decode_kernels, decode_whole_kernel, \
    next_pow2, plan


@pytest.fixture
def fake() -> Iterator[FakeDriver]:
    with fake_gpu(decode_kernels) as driver:
        yield driver


def register(fake: FakeDriver, launch: Any) -> None:
    """Gives the fake the parameter layout of a launch's kernel, made only for this."""
    register_layout(fake, launch)
    launch.cancel()


@pytest.mark.parametrize("batch,max_seq,config", [(2, 1000, {"tile_n": 64, "splits": 0, "waves": 2}),
                                                  (3, 300, {"tile_n": 32, "splits": 4, "waves": 1})])
def test_grids_follow_the_plan(fake: FakeDriver, batch: int, max_seq: int, config: dict[str, Any]) -> None:
    q_heads, kv_heads, head_dim = 8, 2, 64
    q = api.empty([batch, q_heads, head_dim], dtype="bf16")
    k = api.empty([batch, kv_heads, max_seq, head_dim], dtype="bf16")
    v = api.empty([batch, kv_heads, max_seq, head_dim], dtype="bf16")
    lens = api.empty([batch], dtype="i32")
    out = api.empty([batch, q_heads, head_dim], dtype="bf16")
    full = {**DEFAULT, **config}
    split = plan(full, (batch, q_heads, kv_heads, max_seq, head_dim))
    assert not split.one_launch
    split_kernel, merge_kernel = decode_kernels(q.dtype, lens.dtype, 2, 4, 0)
    acc = api.empty([batch * kv_heads, split.splits, 8 * head_dim], dtype="f32")
    stats = [api.empty([batch * kv_heads, split.splits, 8], dtype="f32") for _ in range(2)]
    register(fake, split_kernel(acc.permute(0, 1, 2).partition([1, 1, 8 * head_dim]),
                                stats[0].permute(0, 1, 2).partition([1, 1, 8]),
                                stats[1].permute(0, 1, 2).partition([1, 1, 8]), q, k, v, lens, 0.1, split.tiles_per_split,
                                KV_HEADS=kv_heads, GROUP=q_heads // kv_heads, BN=split.tile_n))
    spare = api.empty([batch, q_heads, head_dim], dtype="bf16")
    register(fake, merge_kernel(spare.partition([1, 1, head_dim]), acc, stats[0], stats[1], KV_HEADS=kv_heads,
                                GROUP=q_heads // kv_heads, SP=next_pow2(split.splits)))
    assert decode_attention(q, k, v, lens, out=out, config=full) is out
    split_launch, merge_launch = fake.launches[-2], fake.launches[-1]
    assert split_launch["grid"] == (batch * kv_heads, split.splits, 1)
    assert merge_launch["grid"] == (batch, q_heads, 1)
    dropped = decode_attention.launch(q, k, v, lens, out=out, config=full)  # the tensors were given back
    dropped.cancel()  # and are again
    decode_attention.launch(q, k, v, lens, out=out, config=full).cancel()


def test_the_two_launches_op_once_taken_cannot_be_cancelled(fake: FakeDriver) -> None:
    q, out = api.empty([1, 4, 64], dtype="f16"), api.empty([1, 4, 64], dtype="f16")
    k, v = api.empty([1, 1, 64, 64], dtype="f16"), api.empty([1, 1, 64, 64], dtype="f16")
    pending = decode_attention.launch(q, k, v, api.empty([1], dtype="i32"), out=out,
                                      config={"splits": 2, "tile_n": 32})
    assert pending.op is pending.op
    with pytest.raises(cutile.OwnershipError, match="cannot be cancelled"):
        pending.cancel()
    del pending


def register_kernels(fake: FakeDriver, q: Any, k: Any, v: Any, lens: Any, config: dict[str, Any]) -> None:
    """Gives the fake both kernels' layouts for these operands under ``config`` (a full one)."""
    batch, q_heads, head_dim = q.shape
    kv_heads, max_seq = k.shape[1], k.shape[2]
    split = plan(config, (batch, q_heads, kv_heads, max_seq, head_dim))
    if split.one_launch:
        whole = decode_whole_kernel(q.dtype, lens.dtype, config["occupancy"], config["num_worker_warps"],
                                    config["latency"])
        heads = split.heads_per_block
        register(fake, whole(api.empty(list(q.shape), dtype=q.dtype).partition([1, heads, head_dim]), q, k, v, lens,
                             0.1, GROUP=q_heads // kv_heads, GP=max(8, heads), BN=split.tile_n))
        return
    split_kernel, merge_kernel = decode_kernels(q.dtype, lens.dtype, config["occupancy"], config["num_worker_warps"],
                                                config["latency"])
    acc = api.empty([batch * kv_heads, split.splits, 8 * head_dim], dtype="f32")
    stats = [api.empty([batch * kv_heads, split.splits, 8], dtype="f32") for _ in range(2)]
    register(fake, split_kernel(acc.permute(0, 1, 2).partition([1, 1, 8 * head_dim]),
                                stats[0].permute(0, 1, 2).partition([1, 1, 8]),
                                stats[1].permute(0, 1, 2).partition([1, 1, 8]), q, k, v, lens, 0.1, split.tiles_per_split,
                                KV_HEADS=kv_heads, GROUP=q_heads // kv_heads, BN=split.tile_n))
    register(fake, merge_kernel(api.empty(list(q.shape), dtype=q.dtype).partition([1, 1, head_dim]), acc, stats[0],
                                stats[1], KV_HEADS=kv_heads, GROUP=q_heads // kv_heads, SP=next_pow2(split.splits)))


def test_host_lengths_are_checked_and_uploaded_device_lengths_left_to_the_kernel(fake: FakeDriver) -> None:
    q, out = api.empty([2, 4, 64], dtype="f16"), api.empty([2, 4, 64], dtype="f16")
    k, v = api.empty([2, 1, 64, 64], dtype="f16"), api.empty([2, 1, 64, 64], dtype="f16")
    config = {**DEFAULT, "tile_n": 32, "splits": 1}
    device_lens = api.from_numpy(np.array([3, 65], np.int32))  # past max_seq: only the kernel sees it
    register_kernels(fake, q, k, v, device_lens, config)
    register_kernels(fake, q, k, v, api.empty([2], dtype="i64"), config)  # a list is uploaded as i64
    before = len(fake.launches)
    for host_lens in (np.array([3, 65], np.int32), [3, 65]):
        with pytest.raises(cutile.ArgumentError, match=re.escape("'seq_lens' holds 65 at [1]; each length must be "
                                                                 "from 0 to the caches' max_seq 64")):
            decode_attention(q, k, v, host_lens, out=out, config=config)
    assert len(fake.launches) == before  # refused before any launch
    decode_attention(q, k, v, [3, 64], out=out, config=config)
    assert len(fake.launches) == before + 1  # one split: one launch
    decode_attention(q, k, v, device_lens, out=out, config=config)  # not read on the host
    assert len(fake.launches) == before + 2


@pytest.mark.parametrize("head_blocks,heads", [(1, 4), (2, 2), (4, 1)])
def test_one_split_is_one_launch_over_the_outputs_head_blocks(fake: FakeDriver, head_blocks: int,
                                                                heads: int) -> None:
    batch, q_heads, kv_heads, max_seq, head_dim = 3, 8, 2, 200, 64
    q, out = api.empty([batch, q_heads, head_dim], dtype="f16"), api.empty([batch, q_heads, head_dim], dtype="f16")
    k = api.empty([batch, kv_heads, max_seq, head_dim], dtype="f16")
    v = api.empty([batch, kv_heads, max_seq, head_dim], dtype="f16")
    lens = api.empty([batch], dtype="i32")
    config = {**DEFAULT, "splits": 1, "head_blocks": head_blocks}
    register_kernels(fake, q, k, v, lens, config)
    before = len(fake.launches)
    assert decode_attention(q, k, v, lens, out=out, config=config) is out
    assert len(fake.launches) == before + 1
    assert fake.launches[-1]["grid"] == (batch, q_heads // heads, 1)


@pytest.mark.parametrize("batch,max_seq,launches", [(2, 256, 1), (3, 256, 1), (1, 2048, 2)])
def test_the_tuners_config_reaches_the_one_launch_path(fake: FakeDriver, monkeypatch: pytest.MonkeyPatch,
                                                       batch: int, max_seq: int, launches: int) -> None:
    """No config given: the tuner's (here its default: no record for the fake's arch is
    read) decides, and a plan of one split runs as one launch."""
    monkeypatch.setattr(TUNER.tuner, "_winners", {})  # no record nor cached winner
    monkeypatch.setattr(TUNER.tuner, "_chosen", {})
    q_heads, kv_heads, head_dim = 8, 2, 64
    q, out = api.empty([batch, q_heads, head_dim], dtype="bf16"), api.empty([batch, q_heads, head_dim], dtype="bf16")
    k = api.empty([batch, kv_heads, max_seq, head_dim], dtype="bf16")
    v = api.empty([batch, kv_heads, max_seq, head_dim], dtype="bf16")
    lens = api.empty([batch], dtype="i32")
    assert TUNER.config((batch, q_heads, kv_heads, max_seq, head_dim)) == DEFAULT
    register_kernels(fake, q, k, v, lens, DEFAULT)
    before = len(fake.launches)
    decode_attention(q, k, v, lens, out=out)
    assert len(fake.launches) == before + launches
    if launches == 1:
        assert fake.launches[-1]["grid"] == (batch, kv_heads, 1)  # a block per kv head and its 4 q heads
    else:
        assert fake.launches[-2]["grid"] == (batch * kv_heads, 32, 1)  # 32 splits of 64 positions
