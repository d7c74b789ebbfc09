"""GPU architecture names (``"sm_90"``), parsed in one place for every layer.

The plain ``sm_XY`` form is the one tileiras's ``--gpu-name`` takes; the verifier's
target checks, the compiler's toolchain checks and kernel hints' per-arch keys all
read an arch through `parse_arch`, so each refuses the same spellings with the
same message.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ._errors import ArchError

#: The oldest architecture Tile IR targets (Ampere).
MIN_SM = 80

_PLAIN = re.compile(r"sm_([1-9][0-9]{1,2})")
# Near-misses whose intended arch is clear: "sm_90a", "90", "compute_90", "9.0", "SM_90".
_LOOSE = re.compile(r"(?:sm_?|compute_?)?(\d)\.?(\d{1,2})[af]?", re.IGNORECASE)


@dataclass(frozen=True, order=True)
class Arch:
    """A GPU architecture by its SM number: 90 for ``sm_90`` (compute capability 9.0),
    100 for ``sm_100`` (10.0). ``str(arch)`` is the name tileiras takes."""

    sm: int

    @property
    def major(self) -> int:
        return self.sm // 10

    @property
    def minor(self) -> int:
        return self.sm % 10

    def __str__(self) -> str:
        return f"sm_{self.sm}"


def parse_arch(text: object, what: str = "arch") -> Arch:
    """The `Arch` an arch string names (``"sm_90"`` -> ``Arch(90)``).

    Only the plain form ``sm_XY`` is an arch: ``"sm_90a"``, ``"90"``, ``"compute_90"``,
    ``"9.0"``, ``"sm90"`` or ``"hopper"`` raise `~cutile_ir.ArchError` naming the spelling to use,
    as do archs older than sm_80, which Tile IR does not target. ``what`` names the
    parameter in the message (``"arch"``, ``"hints key"``).
    """
    if not isinstance(text, str):
        raise ArchError(f"{what} must be a string such as 'sm_90', got {text!r} ({type(text).__name__})")
    match = _PLAIN.fullmatch(text)
    if match is None:
        loose = _LOOSE.fullmatch(text.strip())
        guess = f"sm_{loose.group(1)}{loose.group(2)}" if loose else None
        plain = _PLAIN.fullmatch(guess) if guess else None
        # (a guess older than Tile IR's targets would be refused in turn: suggest none)
        hint = f"write {guess!r}" if plain and int(plain.group(1)) >= MIN_SM else "write e.g. 'sm_80', 'sm_90' or 'sm_100'"
        raise ArchError(
            f"{what} {text!r} is not a GPU name tileiras accepts: it takes the plain form 'sm_XY' "
            f"(not 'sm_90a', '90' or 'compute_90'); {hint}"
        )
    arch = Arch(int(match.group(1)))
    if arch.sm < MIN_SM:
        raise ArchError(f"{what} {text!r} is too old for Tile IR: tileiras targets sm_{MIN_SM} (Ampere) and newer")
    return arch
