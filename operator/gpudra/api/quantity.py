"""Kubernetes resource quantities ("80Gi", "1.5", "100m", "1e3"): exact parsing and canonical formatting.

Values are exact ``Fraction``s so that comparisons and sums never round. ``format_quantity`` writes the form the
API server would canonicalise to for the common cases gpudra publishes (byte counts and small integers).
"""

from __future__ import annotations

import functools
import re
from fractions import Fraction

from gpudra.errors import InvalidInputError

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 10**3), "": Fraction(1),
            "k": Fraction(10**3), "M": Fraction(10**6), "G": Fraction(10**9), "T": Fraction(10**12),
            "P": Fraction(10**15), "E": Fraction(10**18)}  # fmt: skip
_PATTERN = re.compile(r"^([+-]?)(\d+\.?\d*|\.\d+)(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E))?$")


def parse_quantity(text: str | int) -> Fraction:
    """Parse a quantity; raise InvalidInputError naming the text when it is not one."""
    if isinstance(text, int):
        return Fraction(text)
    return _parse_text(text)


@functools.lru_cache(maxsize=4096)
def _parse_text(text: str) -> Fraction:
    """Remembered per text: a fleet publishes the same few quantities on every device (Fractions are
    immutable, so sharing them is safe)."""
    match = _PATTERN.match(text.strip())
    if match is None:
        raise InvalidInputError(f"{text!r} is not a valid quantity (examples: 80Gi, 500m, 2, 1e9)")
    sign, number, exponent, suffix = match.groups()
    value = Fraction(number)
    if exponent:
        value *= Fraction(10) ** int(exponent[1:])
    elif suffix in _BINARY:
        value *= _BINARY[suffix]
    elif suffix:
        value *= _DECIMAL[suffix]
    return -value if sign == "-" else value


def format_quantity(value: Fraction | int) -> str:
    """Canonical text: whole multiples of 1024 take the largest binary suffix, else a plain or milli number."""
    value = Fraction(value)
    if value.denominator == 1:
        n = int(value)
        if n != 0 and n % 1024 == 0:
            for suffix, factor in reversed(_BINARY.items()):
                if n % factor == 0:
                    return f"{n // factor}{suffix}"
        return str(n)
    milli = value * 1000
    if milli.denominator == 1:
        return f"{int(milli)}m"
    raise InvalidInputError(f"{value} cannot be written exactly as a quantity")
