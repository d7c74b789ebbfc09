"""Using an op, attribute, enum value, type or section that the chosen version lacks is a
clear error; each version-dependent layout is exercised by the catalog round trips."""

from __future__ import annotations

from typing import Callable, Sequence

import pytest

from cutile_ir import (
    F32, F8E8M0FNU, I16, I32, I4, I8, V13_1, V13_2, V13_3, Builder, DenseElements, Global, Module,
    PartitionViewType, PointerType, TensorViewType, Type, Version, VersionError, add_function, ptr, scalar, tile,
    write_bytecode,
)


def _module(fill: Callable[[Builder], object], args: Sequence[Type] = ()) -> Module:
    """A kernel with ``args`` whose body is ``fill``, then a return."""
    m = Module()
    b = Builder(add_function(m, "k", args))
    fill(b)
    b.return_()
    return m


def _x(b: Builder):  # type: ignore[no-untyped-def]
    return b.constant(1.0, tile(4, F32))


def _for_unsigned(b: Builder) -> None:
    one = b.constant(1, scalar(I32))
    with b.for_(one, b.block.args[0], one, unsigned_cmp=True):
        b.continue_()


def _load_inbounds(b: Builder) -> None:
    tv = TensorViewType(F32, (64,), (1,))
    pv = b.make_partition_view(b.make_tensor_view(b.block.args[0], result_types=[tv]),
                               result_types=[PartitionViewType((16,), tv)])
    b.load_view_tko(pv, [b.constant(0, scalar(I32))], memory_ordering_semantics="weak", inbounds=[True])


CASES: list[tuple[str, Version, Callable[[], Module], str]] = [
    ("fpowi", V13_3, lambda: _module(lambda b: b.fpowi(_x(b), b.constant(2, tile(4, I32)))),
     r"'fpowi': op needs bytecode 13.4"),
    ("atan2", V13_1, lambda: _module(lambda b: b.atan2(_x(b), _x(b))), r"'atan2': op needs bytecode 13.2, writing 13.1"),
    ("exp rounding", V13_2, lambda: _module(lambda b: b.exp(_x(b), rounding_mode="approx")),
     r"'exp': attribute 'rounding_mode' = approx needs bytecode 13.3, writing 13.2 \(only the default full"),
    ("negi overflow", V13_1, lambda: _module(lambda b: b.negi(b.constant(1, tile(4, I32)), overflow="no_wrap")),
     r"'negi': attribute 'overflow' = no_wrap needs bytecode 13.2"),
    ("ftoi saturating", V13_3,
     lambda: _module(lambda b: b.ftoi(_x(b), signedness="signed", rounding_mode="nearest_int_to_zero", saturating=True,
                                      result_types=[tile(4, I16)])),
     r"'ftoi': optional attribute 'saturating' needs bytecode 13.4, writing 13.3"),
    ("mmaf fast_acc", V13_2,
     lambda: _module(lambda b: b.mmaf(b.constant(1.0, tile((4, 4), F32)), b.constant(1.0, tile((4, 4), F32)),
                                      b.constant(1.0, tile((4, 4), F32)), fast_acc=True)),
     r"'mmaf': optional attribute 'fast_acc' needs bytecode 13.3"),
    ("for unsigned", V13_1, lambda: _module(_for_unsigned, [scalar(I32)]),
     r"'for': optional attribute 'unsignedCmp' needs bytecode 13.2"),
    ("print token", V13_1, lambda: _module(lambda b: b.print_tko(str="x", token=b.make_token())),
     r"'print_tko': optional operand 'token' needs bytecode 13.2"),
    ("print result used", V13_1, lambda: _module(lambda b: b.join_tokens([b.print_tko(str="x")])),
     r"'print_tko': result 'result_token' needs bytecode 13.2 but is used"),
    ("rounding nearest_away", V13_3, lambda: _module(lambda b: b.addf(_x(b), _x(b), rounding_mode="nearest_away")),
     r"'addf': value nearest_away of attribute 'rounding_mode' needs bytecode 13.4"),
    ("i4 type", V13_2, lambda: _module(lambda b: b.trunci(b.constant(1, tile(4, I8)), result_types=[tile(4, I4)])),
     r"type tile<4xi4> needs bytecode 13.3"),
    ("f8E8M0FNU", V13_1, lambda: _module(lambda b: b.constant(127, tile(4, F8E8M0FNU))),
     r"type tile<4xf8E8M0FNU> needs bytecode 13.2, writing 13.1"),
    ("alloca", V13_2, lambda: _module(lambda b: b.alloca(num_elem=4, alignment=4, result_types=[scalar(ptr(F32))])),
     r"'alloca': op needs bytecode 13.3"),
    ("ptr attr", V13_3, lambda: _module(lambda b: None, [scalar(PointerType(F32, "none"))]),
     r"ptr<f32, <none>>.* needs bytecode 13.4"),
    ("inbounds", V13_3, lambda: _module(_load_inbounds, [scalar(ptr(F32))]),
     r"'load_view_tko': attribute 'inbounds' = \(True,\) needs bytecode 13.4"),
]


@pytest.mark.parametrize("name, version, build, message", CASES, ids=[c[0] for c in CASES])
def test_version_gating(name: str, version: Version, build: Callable[[], Module], message: str) -> None:
    m = build()
    with pytest.raises(VersionError, match=message):
        write_bytecode(m, version)
    write_bytecode(m, "13.4")  # the newest version takes it


def test_globals_and_producer_gating() -> None:
    m = Module(producer="cutile 0.1")
    with pytest.raises(VersionError, match="the producer string needs bytecode 13.3, writing 13.2"):
        write_bytecode(m, V13_2)
    m = Module()
    m.globals.append(Global("g", DenseElements.splat(tile(4, I32), 1), constant=True))
    with pytest.raises(VersionError, match="global @g: constant/private globals need bytecode 13.3"):
        write_bytecode(m, V13_2)
    write_bytecode(m, V13_3)


@pytest.mark.parametrize("text", ["13.0", "13.5", "14.1", "x"])
def test_unsupported_versions(text: str) -> None:
    with pytest.raises(VersionError, match="unsupported bytecode version|cannot parse"):
        write_bytecode(Module(), text)


def test_partition_view_layout_changes_at_13_3() -> None:
    tv = TensorViewType(F32, (64,), (1,))
    pv = PartitionViewType((16,), tv)

    def build() -> Module:
        m = Module()
        f = add_function(m, "k", [scalar(ptr(F32))])
        b = Builder(f)
        b.make_partition_view(b.make_tensor_view(f.args[0], result_types=[tv]), result_types=[pv])
        b.return_()
        return m

    # same module, different type-table bytes: 13.2 writes a trailing has-padding varint,
    # 13.3 a leading flags varint
    a, c = write_bytecode(build(), V13_2), write_bytecode(build(), V13_3)
    assert len(a) == len(c) and a[10:] != c[10:]
