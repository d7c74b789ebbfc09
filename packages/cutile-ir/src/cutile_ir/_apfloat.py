"""Decimal spelling of floats exactly as MLIR prints them (LLVM APFloat::toString).

MLIR tries 6 significant digits in scientific notation and keeps them if they read back
to the same value; otherwise it prints APFloat's shortest-safe form, or hex when that has
no decimal point. Implemented here on exact rationals so every format gets the same digits.
"""

from __future__ import annotations

import math
from fractions import Fraction

from ._types import FLOAT_FORMATS, ScalarType


def _round_to_format(x: Fraction, p: int, emin: int) -> Fraction:
    if x == 0:
        return x
    a = abs(x)
    e = a.numerator.bit_length() - a.denominator.bit_length()
    while Fraction(2) ** e > a:
        e -= 1
    while Fraction(2) ** (e + 1) <= a:
        e += 1
    e = max(e, emin)
    q = e - (p - 1)
    m = round(a / Fraction(2) ** q)  # half to even
    r = m * Fraction(2) ** q
    return -r if x < 0 else r


def _to_string(v: Fraction, precision_bits: int, fmt_precision: int, max_padding: int, truncate_zero: bool) -> str:
    neg = v < 0
    a = -v if neg else v
    sign = "-" if neg else ""
    if a == 0:
        if not max_padding:
            if truncate_zero:
                return sign + "0.0E+0"
            return sign + "0.0" + "0" * max(0, fmt_precision - 1) + "e+00"
        return sign + "0"
    if not fmt_precision:
        fmt_precision = 2 + precision_bits * 59 // 196
    # a = n * 2**k with n odd
    n, d = a.numerator, a.denominator
    k = -(d.bit_length() - 1)
    tz = (n & -n).bit_length() - 1
    n >>= tz
    k += tz
    if k >= 0:
        sig, exp = n << k, 0
    else:
        sig, exp = n * 5 ** (-k), k
    # AdjustToPrecision on the integer
    bits = sig.bit_length()
    required = (fmt_precision * 196 + 58) // 59
    if bits > required:
        removable = (bits - required) * 59 // 196
        if removable:
            exp += removable
            sig //= 10 ** removable
    digits = str(sig)
    stripped = digits.rstrip("0")
    exp += len(digits) - len(stripped)
    buf = list(reversed(stripped))  # least significant first
    # AdjustToPrecision on the digits (round half up)
    n_d = len(buf)
    if n_d > fmt_precision:
        first = n_d - fmt_precision
        if buf[first - 1] < "5":
            while first < n_d and buf[first] == "0":
                first += 1
            exp += first
            buf = buf[first:]
        else:
            i = first
            while i < n_d:
                if buf[i] == "9":
                    first += 1
                    i += 1
                else:
                    buf[i] = chr(ord(buf[i]) + 1)
                    break
            if first == n_d:
                exp += first
                buf = ["1"]
            else:
                exp += first
                buf = buf[first:]
    nd = len(buf)
    if not max_padding:
        scientific = True
    elif exp >= 0:
        scientific = exp > max_padding or nd + exp > fmt_precision
    else:
        msd = exp + nd - 1
        scientific = False if msd >= 0 else -msd > max_padding
    out = [sign]
    if scientific:
        exp += nd - 1
        out.append(buf[nd - 1])
        out.append(".")
        if nd == 1 and truncate_zero:
            out.append("0")
        else:
            out.extend(buf[nd - 1 - i] for i in range(1, nd))
        if not truncate_zero and fmt_precision > nd - 1:
            out.append("0" * (fmt_precision - nd + 1))
        out.append("E" if truncate_zero else "e")
        out.append("+" if exp >= 0 else "-")
        e = str(abs(exp))
        if not truncate_zero and len(e) < 2:
            e = "0" + e
        out.append(e)
        return "".join(out)
    if exp >= 0:
        out.extend(reversed(buf))
        out.append("0" * exp)
        return "".join(out)
    whole = exp + nd
    i = 0
    if whole > 0:
        while i < whole:
            out.append(buf[nd - i - 1])
            i += 1
        out.append(".")
    else:
        out.append("0.")
        out.append("0" * (-whole))
    while i < nd:
        out.append(buf[nd - i - 1])
        i += 1
    return "".join(out)


def mlir_float(value: float, t: ScalarType) -> str | None:
    """MLIR's decimal spelling of ``value`` (exactly representable in ``t``), or None when
    MLIR prints it in hex (NaN, infinities, and values without a short decimal form)."""
    if math.isnan(value) or math.isinf(value):
        return None
    fmt = FLOAT_FORMATS[t.name]
    p, emin = fmt.precision, fmt.min_exponent
    if value == 0:
        return ("-" if math.copysign(1.0, value) < 0 else "") + "0.000000e+00"
    exact = Fraction(value)
    s = _to_string(exact, p, 6, 0, False)
    if _round_to_format(Fraction(s), p, emin) == exact:
        return s
    s = _to_string(exact, p, 0, 3, True)
    return s if "." in s else None
