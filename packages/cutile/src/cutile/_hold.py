"""`hold`: an op that does no work and holds tensors from the call that makes it.

A launch claims its tensor arguments when it is made (``kernel(...)``): from then on a
conflicting use is refused, naming the parameter. An op of several launches chained by
``then`` makes its later launches only as the one before is enqueued (their arguments
may be what that one writes: a temporary, a workspace), so they claim nothing at the
call. ``cutile.hold(...)`` first in such a chain claims, at the call, the caller's
tensors those later launches use; when the chain starts, its job takes the holds over
(the later launches join that job, so they do not conflict with them) and keeps them
until its work completes.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import cuda_async

from cutile._errors import ArgumentTypeError, LaunchError
from cutile._tensor import Tensor, overlaps_itself


class _Held:
    """The claim of a `hold` op until the op starts (its job takes it over), or its
    release when the op is dropped unrun."""

    __slots__ = ("claim",)

    def __init__(self, claim: cuda_async.ClaimPlan) -> None:
        self.claim: cuda_async.ClaimPlan | None = claim

    def hand_over(self) -> cuda_async.ClaimPlan | None:
        claim, self.claim = self.claim, None
        return claim

    def __del__(self) -> None:
        claim = getattr(self, "claim", None)
        if claim is not None:
            claim.drop()  # (from a finalizer: queued, given back by the ledger's next user)


def _no_work(stream: Any) -> None:
    return None


def hold(name: str, *, reads: Iterable[tuple[str, Tensor]] = (),
         writes: Iterable[tuple[str, Tensor]] = ()) -> cuda_async.DeviceOp[None]:
    """An op that does no work and holds ``reads`` (read) and ``writes`` (written)
    from this call until the job it runs in completes: claimed now, as a launch claims
    its arguments, so a conflict with a pending launch or a running op is refused now
    (`OwnershipError` naming ``name`` and the parameter), and while it is pending a
    conflicting use by others is refused naming it. Put first in a ``then`` chain
    (``cutile.hold(...).then(...)``) whose later launches use those tensors.

    Args:
        name: the holder, as messages name it (``"matmul"``: "matmul: parameter 'out'").
        reads, writes: (parameter name, tensor) pairs. Empty tensors hold nothing.
    Raises:
        OwnershipError: a tensor consumed, or held against this use.
        LaunchError: a tensor of ``writes`` over read-only memory, or whose strides
            make two of its elements one.
    """
    spans = []
    claims = []
    for writing, pairs in ((False, reads), (True, writes)):
        for param, t in pairs:
            if type(t) is not Tensor:
                raise ArgumentTypeError(f"{name}: parameter '{param}' must be a cutile Tensor, got {type(t).__name__}")
            storage = t._live(f"{name}: parameter '{param}'")
            if writing and storage.readonly:  # (as a launch refuses a Mut parameter over it)
                raise LaunchError(f"{name}: parameter '{param}' is written but its memory is read-only")
            if writing and overlaps_itself(t.shape, t.strides):  # (likewise)
                raise LaunchError(f"{name}: parameter '{param}' is written but its strides {list(t.strides)} make "
                                  "elements share memory (blocks would race); pass a copy (api.copy)")
            start, end = t.byte_range()
            if start == end:
                continue
            low, high = storage.base_address + start, storage.base_address + end
            resource = storage.resource
            label = f"{name} (parameter '{param}')"
            spans.append((resource, storage.device, low, high, writing, label))
            claims.append((storage.device, low, high, writing, label, f"{name}: parameter '{param}'", resource.name))
    plan = cuda_async.ClaimPlan(claims)
    cuda_async.claim(plan)  # (raises, naming the parameter, before anything is held)
    held = _Held(plan)
    accesses = cuda_async.AccessSet(tuple(span[0] for span in spans if not span[4]),
                                    tuple(span[0] for span in spans if span[4]), spans=tuple(spans))
    return cuda_async.FnOp.from_accesses(_no_work, accesses, name=f"{name} (holds)", claim_from=held.hand_over)
