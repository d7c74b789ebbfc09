"""The kernel language, for ``from cutile.core import ...`` in kernel modules.

``Tensor`` here is cutile's runtime tensor class; subscripted (``Tensor[f32,
[-1]]``) it is the parameter annotation; ``uniform`` is the device function of
`api.rand`'s random numbers. Everything else comes from ``cutile_compiler.language``,
whose DSL functions load on first use (importing this module does not load the
compiler's front end).
"""

from typing import TYPE_CHECKING, Any

from cutile_compiler import language as _language

if TYPE_CHECKING:
    from cutile_compiler.language import *  # noqa: F403  (the whole kernel language)
from cutile._tensor import Tensor as Tensor  # type: ignore[assignment]  # over the language's annotation-only Tensor

from cutile._random import uniform as uniform  # the counter-based random numbers of api.rand, for kernels

if not TYPE_CHECKING:  # (static tools read the star import above)
    def __getattr__(name: str) -> Any:
        # The language's names, each the language's own object (its DSL functions load
        # on first use); private and special names that tools probe for (``__path__``...)
        # are not forwarded.
        if name == "__all__":
            return [*_language.__all__, "uniform"]  # ("Tensor" is the runtime class here)
        if not name.startswith("_"):
            try:
                return getattr(_language, name)
            except AttributeError:
                pass
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted({*globals(), *dir(_language)})
