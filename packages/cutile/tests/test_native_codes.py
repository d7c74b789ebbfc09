"""The native launch path's C enums agree with the Python tables they mirror.

`cutile._native` hands the C code (native/_native_launch.c) small integers: the C
type each scalar parameter is packed as (`_SCALAR_CODES`, C's ``P_`` enum) and the
kind of each argument check (`ObjectBinding._TENSOR`..., C's ``CHECK_`` enum). The C
source is parsed here, so changing either side alone fails.
"""

from __future__ import annotations

import re

import pytest

from cuda_core import _launch
from cutile import _gpu, _native
from cutile._binding import ObjectBinding
from cutile_compiler import _dtypes as dt

_ENUM = re.compile(r"\benum\s*\{([^}]*)\}\s*;")


def c_enums(source: str) -> dict[str, int]:
    """Every enumerator of the anonymous ``enum { ... };`` declarations in ``source``,
    valued as C values them (an explicit ``= N``, else one more than the previous, from 0)."""
    source = re.sub(r"/\*.*?\*/|//[^\n]*", "", source, flags=re.S)
    values: dict[str, int] = {}
    for body in _ENUM.findall(source):
        following = 0
        for item in filter(None, (part.strip() for part in body.split(","))):
            name, _, value = (piece.strip() for piece in item.partition("="))
            following = int(value, 0) if value else following
            values[name] = following
            following += 1
    return values


def enum_with_prefix(prefix: str) -> dict[str, int]:
    found = {name: value for name, value in c_enums(_native._SOURCE.read_text()).items() if name.startswith(prefix)}
    assert found, f"no {prefix}* enumerators in {_native._SOURCE}"
    return found


def test_the_parser_values_enumerators_as_c_does() -> None:
    assert c_enums("enum { A, B = 5, C, /* D, */ E = 0x10, F };\nenum {G};") == {
        "A": 0, "B": 5, "C": 6, "E": 16, "F": 17, "G": 0}


def test_the_c_scalar_codes_are_the_python_ones() -> None:
    assert enum_with_prefix("P_") == {"P_" + ctype.upper(): code for ctype, code in _native._SCALAR_CODES.items()}


def test_every_scalar_c_type_cuda_core_packs_has_a_native_code() -> None:
    assert set(_native._SCALAR_CODES) == set(_launch.PARAM_CTYPES) - {"ptr"}


@pytest.mark.parametrize("dtype", dt.ALL_DTYPES, ids=str)
def test_each_dtype_packed_as_a_c_scalar_has_a_native_code(dtype: dt.DType) -> None:
    # (the raw-byte floats are converted per call and take the Python path)
    packed_as = _gpu._PARAM_TYPES[dtype]
    assert packed_as.startswith("bytes") == (dtype in _gpu._RAW_SCALARS)
    if dtype not in _gpu._RAW_SCALARS:
        assert packed_as in _native._SCALAR_CODES


def test_the_c_check_kinds_are_the_bindings() -> None:
    assert enum_with_prefix("CHECK_") == {
        "CHECK_TENSOR": ObjectBinding._TENSOR, "CHECK_CONSTANT": ObjectBinding._CONSTANT, "CHECK_SCALAR": ObjectBinding._SCALAR}
