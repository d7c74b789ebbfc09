"""Checked by mypy (test_typing.py), never run: the static types of op results."""

from __future__ import annotations

from typing import assert_type

import cuda_core

import cuda_async as ca


def launch(stream: cuda_core.Stream | None) -> int:
    return 1


async def check() -> None:
    op = ca.DeviceOp.from_fn(launch, name="k")
    assert_type(op.sync(), int)
    assert_type(op.map(str).sync(), str)
    assert_type(op.then(lambda n: ca.value(float(n))).sync(), float)
    assert_type(ca.zip(op, ca.value("s")).sync(), tuple[int, str])
    assert_type(ca.all_of([op, op]).sync(), list[int])
    assert_type(op.shared().sync_on(None), int)
    assert_type(op.schedule().result(), int)
    assert_type(await op, int)
    assert_type(await op.schedule(), int)
    assert_type(op.graph().launch().sync(), int)
