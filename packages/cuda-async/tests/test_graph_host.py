"""CUDA graph API in host mode: capture records, launch replays, update copies inputs."""

from __future__ import annotations

import pytest
from cuda_async_testkit import Counter, HostTensor, add, scale

import cuda_async as ca


def test_op_graph_records_without_running_then_replays() -> None:
    counter = Counter()
    z, x, y = HostTensor("z", [0, 0]), HostTensor("x", [1, 2]), HostTensor("y", [3, 4])
    graph = add(z, x, y, counter).then(lambda out: scale(out[0], 2.0, counter)).graph(name="step")
    # On the host there is no device to defer to: capture runs the work once.
    assert counter.calls == ["launch of add", "launch of scale"]
    assert graph.is_host and graph.node_count == 2 and "step" in repr(graph)
    assert graph.inputs == [x, y] and graph.outputs == [z] and graph.resources == [x, y, z]
    z.data[:] = [0, 0]
    (out,) = graph.launch().sync()
    assert out is z and z.data == [8, 12] and graph.launches == 1
    assert counter.calls[2:] == ["launch of add", "launch of scale"]


def test_update_copies_new_inputs_before_the_next_replay() -> None:
    z, x, y = HostTensor("z", [0, 0]), HostTensor("x", [1, 2]), HostTensor("y", [3, 4])
    graph = add(z, x, y).graph()
    graph.update(HostTensor("x2", [100, 200]))
    graph.launch().sync()
    assert z.data == [103, 204] and x.data == [100, 200]
    graph.update(None, HostTensor("y2", [0, 1]))  # type: ignore[arg-type]
    graph.launch().sync()
    assert z.data == [100, 201]
    graph.update(replace={y: HostTensor("y3", [1, 1])})
    graph.launch().sync()
    assert z.data == [101, 201]


def test_update_refuses_a_different_layout_or_foreign_resource() -> None:
    z, x, y = HostTensor("z", [0, 0]), HostTensor("x", [1, 2]), HostTensor("y", [3, 4])
    graph = add(z, x, y).graph()
    with pytest.raises(ca.GraphUpdateError, match=r"input 0 \(x\) was captured as \('f64', 2\); x3 is \('f64', 3\)"):
        graph.update(HostTensor("x3", [1, 2, 3]))
    with pytest.raises(ca.GraphUpdateError, match="not used by the captured work"):
        graph.update(replace={HostTensor("q", [1, 2]): HostTensor("r", [1, 2])})
    with pytest.raises(ca.GraphUpdateError, match="at most 2 input"):
        graph.update(x, y, z)
    with pytest.raises(ca.GraphUpdateError, match="Resource or ResourceView objects"):
        graph.update([1, 2])  # type: ignore[arg-type]
    assert issubclass(ca.GraphUpdateError, ValueError)


class Layout:
    """An opaque, comparable, printable layout, as a layer above supplies one."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Layout) and other.text == self.text

    def __hash__(self) -> int:
        return hash(self.text)

    def __str__(self) -> str:
        return self.text


def _viewing_add(z: HostTensor, x: HostTensor, y: HostTensor, how: dict[str, str]) -> ca.DeviceOp[None]:
    """``z = x + y`` whose op says how it reads each input (``how``: name -> layout)."""
    def run(stream: object) -> None:
        z.data[:] = [a + b for a, b in zip(x.data, y.data)]

    def views() -> list[ca.ResourceView]:
        return [ca.ResourceView(t, Layout(how[t.name]), f"argument {t.name!r} of viewing add") for t in (x, y, z)]

    return ca.DeviceOp.from_fn(run, reads=[x, y], writes=[z], name="viewing add", views=views)


def test_update_compares_the_layout_the_captured_op_gave_and_names_its_label() -> None:
    """The layout an op gives per resource is what an update is checked against;
    the storage layout (the whole memory is copied) must match as well."""
    z, x, y = HostTensor("z", [0, 0]), HostTensor("x", [1, 2]), HostTensor("y", [3, 4])
    graph = _viewing_add(z, x, y, {"x": "f32[2]", "y": "i32[2]", "z": "f32[2]"}).graph()
    assert graph.inputs == [x, y]
    assert [(v.resource, v.label, str(v.layout)) for v in graph.input_views] == [
        (x, "argument 'x' of viewing add", "f32[2]"), (y, "argument 'y' of viewing add", "i32[2]")]
    assert graph.view_of(z).label == "argument 'z' of viewing add"
    same_memory = HostTensor("x2", [5, 6])
    with pytest.raises(ca.GraphUpdateError, match=r"input 1 \(argument 'y' of viewing add\) was captured as i32\[2\]; "
                                                  r"new y is f32\[2\]"):
        graph.update(None, ca.ResourceView(same_memory, Layout("f32[2]"), "new y"))
    with pytest.raises(ca.GraphUpdateError, match=r"argument 'z' of viewing add was captured as f32\[2\]; "
                                                  r"x2 is \('f64', 2\)"):
        graph.update(replace={z: same_memory})  # a plain resource is its own layout
    longer = HostTensor("x3", [1, 2, 3])
    with pytest.raises(ca.GraphUpdateError, match=r"input 0 \(argument 'x' of viewing add\): new x has the captured "
                                                  r"layout f32\[2\], but its memory \(\('f64', 3\)\) differs"):
        graph.update(ca.ResourceView(longer, Layout("f32[2]"), "new x"))
    graph.update(ca.ResourceView(same_memory, Layout("f32[2]"), "new x"))
    graph.launch().sync()
    assert z.data == [8, 10]


def test_update_holds_the_new_input_during_the_replay() -> None:
    z, x, y = HostTensor("z", [0, 0]), HostTensor("x", [1, 2]), HostTensor("y", [3, 4])
    graph = add(z, x, y).graph()
    x2 = HostTensor("x2", [5, 5])
    graph.update(x2)
    pending = graph.launch().schedule()
    assert x2.holders == [("replay of launch of add", ca.Access.READ)]
    with pytest.raises(ca.OwnershipError):
        scale(x2, 2.0).sync()
    pending.result()


def test_replays_without_updates_share_one_access_set_and_an_update_makes_its_own() -> None:
    z, x, y = HostTensor("z", [0, 0]), HostTensor("x", [1, 2]), HostTensor("y", [3, 4])
    graph = add(z, x, y).graph()
    first, second = graph.launch(), graph.launch()
    assert first.access_set is second.access_set  # merged once: a replay's host cost
    assert set(first.access_set.accesses) == {(x, ca.Access.READ), (y, ca.Access.READ), (z, ca.Access.WRITE)}
    first.sync()
    second.sync()
    x2 = HostTensor("x2", [10, 20])
    graph.update(x2)
    updated = graph.launch()  # reads the new input, writes the captured one it is copied into
    assert updated.access_set is not first.access_set
    assert dict(updated.access_set.accesses) == {y: ca.Access.READ, x2: ca.Access.READ, x: ca.Access.WRITE,
                                                 z: ca.Access.WRITE}
    updated.sync()
    assert z.data == [13, 24]
    again = graph.launch()
    assert again.access_set is first.access_set
    again.sync()


def test_a_scope_records_several_launches_into_one_graph() -> None:
    counter = Counter()
    x, y = HostTensor("x", [1, 2]), HostTensor("y", [3, 4])
    t, z = HostTensor("t", [0, 0]), HostTensor("z", [0, 0])
    with ca.graph_scope("two launches") as scope:
        assert ca.is_capturing()
        first = add(t, x, y, counter).sync()
        second = add(z, t, y, counter).schedule().result()
        with pytest.raises(ca.GraphCaptureError, match="has not finished"):
            scope.graph  # noqa: B018
    assert not ca.is_capturing()
    graph = scope.graph
    assert graph.result == [first, second] and graph.node_count == 2
    assert graph.inputs == [x, y] and graph.outputs == [t, z]
    t.data[:] = [0, 0]
    z.data[:] = [0, 0]
    graph.launch().sync()
    assert z.data == [7, 10]
    with pytest.raises(ca.GraphCaptureError, match="only valid inside"):
        scope.record(ca.value(1))


def test_allocation_during_capture_is_refused_with_a_clear_message() -> None:
    alloc = ca.DeviceOp.from_fn(lambda s: HostTensor("new", [0]), name="api.zeros", allocates=True)
    with pytest.raises(ca.GraphCaptureError, match="'api.zeros' allocates memory.*allocate its memory before"):
        alloc.graph()
    assert not ca.is_capturing()
    with pytest.raises(ca.GraphCaptureError, match="api.empty cannot run while the CUDA graph 'g'"):
        with ca.graph_scope("g"):
            ca.ensure_not_capturing("api.empty")
    ca.ensure_not_capturing("api.empty")  # fine outside a capture
    assert alloc.sync().data == [0]


def test_captures_do_not_nest() -> None:
    with ca.graph_scope("outer"):
        with pytest.raises(ca.GraphCaptureError, match="already active"):
            with ca.graph_scope("inner"):
                pass


def test_capture_checks_ownership_against_pending_ops() -> None:
    z, x, y = HostTensor("z", [0, 0]), HostTensor("x", [1, 2]), HostTensor("y", [3, 4])
    pending = scale(x, 2.0).schedule()
    with pytest.raises(ca.OwnershipError):
        add(z, x, y).graph()
    pending.result()


def test_a_host_graph_replayed_in_a_loop() -> None:
    acc = HostTensor("acc", [0.0])
    one = HostTensor("one", [1.0])
    graph = add(acc, acc, one).graph()
    acc.data[:] = [0.0]
    for _ in range(10):
        graph.launch().sync()
    assert acc.data == [10.0] and graph.launches == 10


def test_a_closed_graph_refuses_to_launch() -> None:
    z, x, y = HostTensor("z", [0]), HostTensor("x", [1]), HostTensor("y", [2])
    graph = add(z, x, y).graph()
    graph.close()
    with pytest.raises(ValueError, match="has been closed"):
        graph.launch()
