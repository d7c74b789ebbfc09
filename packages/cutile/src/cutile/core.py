"""The kernel language, for ``from cutile.core import ...`` in kernel modules.

``Tensor`` here is cutile's runtime tensor class; subscripted (``Tensor[f32,
[-1]]``) it is the parameter annotation; ``uniform`` is the device function of
`api.rand`'s random numbers. Everything else comes from ``cutile_compiler.language``.
"""

from cutile_compiler import language as _language
from cutile_compiler.language import *  # noqa: F403  (the whole kernel language)
from cutile._tensor import Tensor  # type: ignore[assignment]  # over the language's annotation-only Tensor

from cutile._random import uniform  # the counter-based random numbers of api.rand, for kernels

# the language's __all__ is computed from the compiler's registry at run time (static tools
# read its ``as`` imports), hence getattr
__all__ = [*getattr(_language, "__all__"), "uniform"]  # ("Tensor" is the runtime class here)
