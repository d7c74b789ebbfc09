"""What the interpreter checks that a GPU cannot: races between blocks in unsafe
kernels, and (checked mode) reads of memory nothing wrote."""

from __future__ import annotations

import logging

import numpy as np
import pytest

import cutile
from cutile import api
import cutile.core as ct
from cutile.core import Mut, Tensor, f32, get_num_tile_blocks, get_tile_block_id, i32, load_tile_like


@cutile.entry(unsafe=True)
def every_block_writes_tile_zero(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    p = z.partition([64])
    p.store(0, load_tile_like(x, z))  # all blocks write tile 0


@cutile.entry(unsafe=True)
def reversed_tiles(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    b, _, _ = get_tile_block_id()
    n, _, _ = get_num_tile_blocks()
    p = z.partition([64])
    p.store(n - 1 - b, load_tile_like(x, z))


@cutile.entry
def reads_own_tile(z: Mut[Tensor[f32, ["B"]]]):
    z.store(z.load() + 1)


def test_race_between_blocks_is_reported_with_both_blocks_and_the_line() -> None:
    z = api.zeros([256]).partition([64])
    with pytest.raises(cutile.KernelRuntimeError) as info:
        every_block_writes_tile_zero(z, api.ones([256])).sync()
    text = str(info.value)
    assert "race: blocks (0, 0, 0) and (1, 0, 0) both write element [0] of 'z'" in text
    assert "p.store(0, load_tile_like(x, z))" in text
    assert info.value.location is not None and info.value.location.line > 0


def test_disjoint_unsafe_writes_pass() -> None:
    xs = np.arange(256, dtype=np.float32)
    z = api.full([256], np.nan).partition([64])
    z, _ = reversed_tiles(z, api.from_numpy(xs)).sync()
    expected = np.concatenate([xs[192:], xs[128:192], xs[64:128], xs[:64]])
    np.testing.assert_array_equal(z.to_numpy(), expected)


def test_checked_mode_reports_reads_of_unwritten_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUTILE_CHECKED", "1")
    z = api.empty([200]).partition([64])
    with pytest.raises(cutile.KernelRuntimeError, match=r"block \(0, 0, 0\) reads element \[0\] of 'z', which nothing has written"):
        reads_own_tile(z).sync()


def test_checked_mode_accepts_initialized_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUTILE_CHECKED", "1")
    z = api.zeros([200]).partition([64])
    z = reads_own_tile(z).sync()
    np.testing.assert_array_equal(z.to_numpy(), np.ones(200, np.float32))


def test_unchecked_mode_reads_the_poison_of_empty() -> None:
    z = api.empty([64]).partition([64])
    z = reads_own_tile(z).sync()
    assert np.isnan(z.to_numpy()).all()


def test_interpreter_is_announced_once(caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    from cutile import _backend

    _backend.reset_for_tests(None)
    monkeypatch.setenv("CUTILE_BACKEND", "auto")
    monkeypatch.setattr(_backend, "gpu_unavailable_reason", lambda: "no NVIDIA driver was found")
    assert _backend.current() == "interpreter"
    assert _backend.current() == "interpreter"
    notes = [r for r in caplog.records if "running kernels on the CPU interpreter" in r.getMessage()]
    assert len(notes) == 1 and notes[0].name == "cutile.backend" and notes[0].levelno == logging.WARNING
    assert "no NVIDIA driver was found" in notes[0].getMessage()


def test_forcing_the_gpu_without_one_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from cutile import _backend

    _backend.reset_for_tests(None)
    monkeypatch.setenv("CUTILE_BACKEND", "gpu")
    monkeypatch.setattr(_backend, "gpu_unavailable_reason", lambda: "no NVIDIA driver was found")
    with pytest.raises(cutile.BackendError, match="CUTILE_BACKEND=gpu but no GPU can be used"):
        _backend.current()
    monkeypatch.setenv("CUTILE_BACKEND", "tpu")
    with pytest.raises(cutile.BackendError, match="CUTILE_BACKEND"):
        _backend.current()


@cutile.entry(unsafe=True)
def stores_past_the_end(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    b, _, _ = get_tile_block_id()
    p = z.partition([64])
    p.store(b + 5, load_tile_like(x, z))


def test_a_store_outside_the_tensor_is_reported_at_its_line() -> None:
    with pytest.raises(cutile.KernelRuntimeError, match=r"stores at tile index \[5\] of 'z', outside its \[2\] tiles") as info:
        stores_past_the_end(api.zeros([128]).partition([64]), api.ones([128])).sync()
    assert "p.store(b + 5" in str(info.value)


@cutile.entry(unsafe=True)
def counts_into_one_element(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    b, _, _ = get_tile_block_id()
    ct.atomic_add(z, ct.zeros((16,), i32), 1.0)      # every block adds 16 to element 0


@cutile.entry(unsafe=True)
def stores_and_counts(z: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]]):
    b, _, _ = get_tile_block_id()
    if b == 0:
        z.partition([16]).store(0, ct.ones((16,), f32))
    else:
        ct.atomic_add(z, ct.zeros((16,), i32), 1.0)   # <- the atomic update racing the store


def test_atomic_updates_from_several_blocks_do_not_race() -> None:
    z, _ = counts_into_one_element(api.zeros([64]).partition([16]), api.ones([64])).sync()
    assert z.to_numpy()[0] == 64.0


def test_a_plain_store_and_another_blocks_atomic_update_race() -> None:
    with pytest.raises(cutile.KernelRuntimeError,
                       match=r"race: block \(0, 0, 0\) writes element \[0\] of 'z' and block \(1, 0, 0\) updates it atomically"):
        stores_and_counts(api.zeros([64]).partition([16]), api.ones([64])).sync()


# -- integer division by zero ------------------------------------------------------------
@cutile.entry
def divides(q: Mut[Tensor[i32, ["B"]]], r: Mut[Tensor[i32, ["B"]]], x: Tensor[i32, [-1]], y: Tensor[i32, [-1]]):
    a = load_tile_like(x, q)
    b = load_tile_like(y, q)
    q.store(a // b)
    r.store(a % b)


@cutile.entry
def modulo_by(r: Mut[Tensor[i32, ["B"]]], x: Tensor[i32, [-1]], n: i32):
    r.store(load_tile_like(x, r) % n)


@cutile.entry
def divides_floats(q: Mut[Tensor[f32, ["B"]]], x: Tensor[f32, [-1]], y: Tensor[f32, [-1]]):
    q.store(load_tile_like(x, q) // load_tile_like(y, q) + load_tile_like(x, q) / load_tile_like(y, q))


def _divide(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n = x.size
    q, r = divides(api.zeros([n], dtype=i32).partition([64]), api.zeros([n], dtype=i32).partition([64]),
                   api.from_numpy(x), api.from_numpy(y)).sync()[:2]
    return q.to_numpy(), r.to_numpy()


def test_integer_division_with_padding_lanes_follows_python() -> None:
    # 333 elements: the last tile's padding lanes divide by zero, which no store keeps.
    rng = np.random.default_rng(7)
    x = rng.integers(-1000, 1000, 333).astype(np.int32)
    y = rng.integers(1, 50, 333).astype(np.int32) * rng.choice([-1, 1], 333).astype(np.int32)
    q, r = _divide(x, y)
    np.testing.assert_array_equal(q, np.floor(x.astype(np.float64) / y).astype(np.int32))
    np.testing.assert_array_equal(r, x.astype(np.float64) - np.floor(x.astype(np.float64) / y) * y)


@pytest.mark.parametrize("position", [0, 100, 332])
def test_integer_division_by_zero_names_the_block_and_the_line(position: int) -> None:
    rng = np.random.default_rng(position)
    x = rng.integers(-1000, 1000, 333).astype(np.int32)
    y = rng.integers(1, 50, 333).astype(np.int32)
    y[position] = 0
    with pytest.raises(cutile.KernelRuntimeError) as info:
        _divide(x, y)
    text = str(info.value)
    block = position // 64
    assert f"in block ({block}, 0, 0): integer division by zero in '//': the divisor is 0 at element " \
           f"[{position % 64}] of the tile" in text
    assert "q.store(a // b)" in text and "^" in text
    assert info.value.location is not None and info.value.location.line > 0


def test_integer_modulo_by_a_zero_scalar_is_reported() -> None:
    x = api.from_numpy(np.arange(100, dtype=np.int32))
    with pytest.raises(cutile.KernelRuntimeError, match=r"in block \(0, 0, 0\): integer division by zero in '%'"):
        modulo_by(api.zeros([100], dtype=i32).partition([64]), x, 0).sync()
    r, _ = modulo_by(api.zeros([100], dtype=i32).partition([64]), x, 7).sync()
    np.testing.assert_array_equal(r.to_numpy(), np.arange(100) % 7)


def test_float_division_by_zero_keeps_ieee_results() -> None:
    x = np.array([1.0, -1.0, 0.0] * 30, dtype=np.float32)
    q, _, _ = divides_floats(api.zeros([90]).partition([64]), api.from_numpy(x), api.zeros([90])).sync()
    with np.errstate(all="ignore"):
        expected = np.floor_divide(x.astype(np.float64), 0.0) + x.astype(np.float64) / 0.0
    np.testing.assert_array_equal(q.to_numpy(), expected.astype(np.float32))


@cutile.entry
def divides_where_nonzero(q: Mut[Tensor[i32, ["B"]]], x: Tensor[i32, [-1]], y: Tensor[i32, [-1]]):
    a = load_tile_like(x, q)
    b = load_tile_like(y, q)
    q.store(ct.where(b != 0, a // b + a % b, -1))   # the lanes dividing by zero are discarded


@cutile.entry
def sums_quotients(q: Mut[Tensor[i32, ["B"]]], x: Tensor[i32, [-1]], y: Tensor[i32, [-1]]):
    ratio = load_tile_like(x, q) // load_tile_like(y, q)
    q.store(ct.full((64,), 0, i32) + ct.sum(ratio * 2))  # the reduction uses every lane


def test_a_select_may_discard_lanes_that_divide_by_zero() -> None:
    rng = np.random.default_rng(11)
    x = rng.integers(-500, 500, 333).astype(np.int32)
    y = rng.integers(-3, 4, 333).astype(np.int32)  # many zeros
    q, _, _ = divides_where_nonzero(api.zeros([333], dtype=i32).partition([64]), api.from_numpy(x),
                                    api.from_numpy(y)).sync()
    wide_x, safe_y = x.astype(np.float64), np.where(y == 0, 1, y).astype(np.float64)
    quotient = np.floor(wide_x / safe_y)
    expected = np.where(y != 0, quotient + (wide_x - quotient * safe_y), -1)
    np.testing.assert_array_equal(q.to_numpy(), expected.astype(np.int32))


def test_a_division_by_zero_used_beyond_element_wise_ops_is_reported_at_the_division() -> None:
    x = np.arange(128, dtype=np.int32)
    y = np.ones(128, dtype=np.int32)
    y[70] = 0
    with pytest.raises(cutile.KernelRuntimeError) as info:
        sums_quotients(api.zeros([128], dtype=i32).partition([64]), api.from_numpy(x), api.from_numpy(y)).sync()
    text = str(info.value)
    assert "in block (1, 0, 0): integer division by zero in '//': the divisor is 0 at element [6] of the tile" in text
    assert "ratio = load_tile_like(x, q) // load_tile_like(y, q)" in text


# -- read/write races between blocks ----------------------------------------------------
@cutile.entry(unsafe=True)
def reads_the_next_tile(z: Mut[Tensor[f32, ["B"]]]):
    b, _, _ = get_tile_block_id()
    p = z.partition([64])
    p.store(b, p.load(b + 1))        # block b reads the tile block b + 1 writes later


@cutile.entry(unsafe=True)
def reads_the_previous_tile(z: Mut[Tensor[f32, ["B"]]]):
    b, _, _ = get_tile_block_id()
    p = z.partition([64])
    p.store(b, p.load(b - 1) + 1.0)  # block b reads what block b - 1 wrote


@cutile.entry(unsafe=True)
def gathers_another_blocks_tile(z: Mut[Tensor[f32, ["B"]]]):
    b, _, _ = get_tile_block_id()
    n, _, _ = get_num_tile_blocks()
    i = ct.arange(64, i32) + ((b + 1) % n) * 64
    got = ct.gather(z, i)
    z.partition([64]).store(b, got)


@cutile.entry(unsafe=True)
def counts_then_reads_the_count(z: Mut[Tensor[f32, ["B"]]]):
    b, _, _ = get_tile_block_id()
    if b == 0:
        ct.atomic_add(z, ct.zeros((16,), i32), 1.0)
    else:
        z.partition([16]).store(b, z.partition([16]).load(0))   # <- reads the counter


@cutile.entry(unsafe=True)
def every_block_reads_tile_zero(out: Mut[Tensor[f32, ["B"]]], table: Mut[Tensor[f32, ["B"]]]):
    b, _, _ = get_tile_block_id()
    out.partition([64]).store(b, table.partition([64]).load(0) * 2.0)


@cutile.entry(unsafe=True)
def rewrites_its_tile(z: Mut[Tensor[f32, ["B"]]]):
    b, _, _ = get_tile_block_id()
    p = z.partition([64])
    p.store(b, p.load(b) * 2.0)
    p.store(b, p.load(b) + 1.0)      # its own writes, read back: no race


def test_a_write_after_another_blocks_read_is_a_race() -> None:
    z = api.from_numpy(np.arange(256, dtype=np.float32)).partition([64])
    with pytest.raises(cutile.KernelRuntimeError) as info:
        reads_the_next_tile(z).sync()
    text = str(info.value)
    assert "race: block (0, 0, 0) reads element [64] of 'z' and block (1, 0, 0) writes it" in text
    assert "p.store(b, p.load(b + 1))" in text


def test_a_read_of_another_blocks_write_is_a_race() -> None:
    # 200 elements: the last tile is partial, the race is found all the same.
    z = api.from_numpy(np.arange(200, dtype=np.float32)).partition([64])
    with pytest.raises(cutile.KernelRuntimeError) as info:
        reads_the_previous_tile(z).sync()
    text = str(info.value)
    assert "race: block (0, 0, 0) writes element [0] of 'z' and block (1, 0, 0) reads it" in text
    assert "p.store(b, p.load(b - 1) + 1.0)" in text


def test_a_gather_of_another_blocks_tile_is_a_race() -> None:
    z = api.from_numpy(np.arange(192, dtype=np.float32)).partition([64])
    with pytest.raises(cutile.KernelRuntimeError,
                       match=r"race: block \(0, 0, 0\) reads element \[64\] of 'z' and block \(1, 0, 0\) writes it"):
        gathers_another_blocks_tile(z).sync()


def test_a_plain_read_of_another_blocks_atomic_update_is_a_race() -> None:
    with pytest.raises(cutile.KernelRuntimeError,
                       match=r"race: block \(0, 0, 0\) updates element \[0\] of 'z' atomically and block \(1, 0, 0\) "
                             r"reads it"):
        counts_then_reads_the_count(api.zeros([64]).partition([16])).sync()


def test_reads_by_several_blocks_and_a_blocks_own_accesses_are_free() -> None:
    rng = np.random.default_rng(3)
    table = rng.standard_normal(320).astype(np.float32)
    out, kept = every_block_reads_tile_zero(api.zeros([320]).partition([64]),
                                            api.from_numpy(table).partition([64])).sync()
    np.testing.assert_array_equal(out.to_numpy(), np.tile(table[:64].astype(np.float64) * 2, 5).astype(np.float32))
    np.testing.assert_array_equal(kept.to_numpy(), table)
    xs = rng.standard_normal(333).astype(np.float32)
    z = rewrites_its_tile(api.from_numpy(xs).partition([64])).sync()
    np.testing.assert_array_equal(z.to_numpy(), (xs.astype(np.float64) * 2 + 1).astype(np.float32))


def test_the_race_check_agrees_with_every_pair_of_accesses() -> None:
    # The check keeps one code per element (its first block and that block's kinds of
    # access); compared here with the definition, pair by pair, on random programs.
    import re
    from types import SimpleNamespace

    from cutile._interpreter import ATOMIC, READ, WRITE, Interpreter

    conflicts = {(READ, WRITE), (WRITE, READ), (WRITE, WRITE), (READ, ATOMIC), (ATOMIC, READ),
                 (WRITE, ATOMIC), (ATOMIC, WRITE)}
    verbs = {"reads": READ, "writes": WRITE, "updates": ATOMIC}
    rng = np.random.default_rng(2024)
    kinds = np.array([READ, WRITE, ATOMIC])
    for _ in range(400):
        # Each element is read by all, updated atomically by all, owned by one block,
        # or touched by anyone in any way (the only racy kind), so both outcomes occur.
        blocks, elements = int(rng.integers(2, 6)), int(rng.integers(1, 8))
        modes = rng.choice(["read", "atomic", "owned", "mixed"], elements, p=[0.25, 0.25, 0.25, 0.25])
        owners = rng.integers(0, blocks, elements)
        program: list[list[tuple[int, np.ndarray]]] = []
        for block in range(blocks):
            accesses = []
            for e in rng.integers(0, elements, int(rng.integers(1, 5))):
                mode = modes[e]
                if mode == "owned" and owners[e] != block:
                    continue
                kind = {"read": READ, "atomic": ATOMIC}.get(str(mode), int(rng.choice(kinds)))
                accesses.append((kind, np.array([e])))
            program.append(accesses)
        touched = [{(kind, int(e)) for kind, where in accesses for e in where} for accesses in program]
        racy = any(e == f and (k, j) in conflicts
                   for a in range(blocks) for b in range(a + 1, blocks)
                   for k, e in touched[a] for j, f in touched[b])
        interpreter = Interpreter(None, (blocks, 1, 1))  # type: ignore[arg-type]
        state = SimpleNamespace(name="t", accesses=np.zeros(elements, np.int32))
        op = SimpleNamespace(location=None)
        try:
            for block, accesses in enumerate(program):
                interpreter.block_id = (block, 0, 0)
                for kind, where in accesses:
                    interpreter._record(op, state, (where,), kind)  # type: ignore[arg-type]
        except cutile.KernelRuntimeError as exc:
            assert racy, (program, str(exc))
            text = str(exc)
            found = re.search(r"block \((\d+), 0, 0\) (\w+) element \[(\d+)\] of 't'(?: atomically)? and block "
                              r"\((\d+), 0, 0\) (\w+) it", text)
            if found is None:  # "blocks A and B both write element [e]"
                both = re.search(r"blocks \((\d+), 0, 0\) and \((\d+), 0, 0\) both write element \[(\d+)\]", text)
                assert both is not None, text
                a, b, e = (int(g) for g in both.groups())
                first, second = (WRITE, e), (WRITE, e)
            else:
                a, verb_a, e, b, verb_b = found.groups()
                a, b, e = int(a), int(b), int(e)
                first, second = (verbs[verb_a], e), (verbs[verb_b], e)
            assert a < b and first in touched[a] and second in touched[b]
            assert (first[0], second[0]) in conflicts
        else:
            assert not racy, program
