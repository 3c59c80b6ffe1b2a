"""The two Kubernetes value types of DRA selectors, as plain Python values: Quantity and Semver.

Kubernetes' CEL environment gives ``device.capacity`` entries the type ``kubernetes.Quantity`` and version
attributes the type ``kubernetes.Semver``; ``quantity("40Gi")`` and ``semver("8.0.0")`` build them. These
classes carry the semantics of their CEL methods (compareTo, add, sign, asInteger, major, ...) so that every
evaluator in this package agrees on them. They are immutable, hashable and compare equal only to their own
kind (``Quantity(1) != 1``), which the selector result cache relies on.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from fractions import Fraction

from gpudra.api.quantity import format_quantity, parse_quantity
from gpudra.errors import InvalidInputError

_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1


def _sign(value: Fraction | int) -> int:
    return (value > 0) - (value < 0)


@dataclass(frozen=True, slots=True)
class Quantity:
    """An exact Kubernetes resource quantity (``80Gi``, ``500m``); the value is a Fraction of base units.
    ``ordinal`` is the value as an int when it is whole (the common case, compared faster), else the Fraction."""

    value: Fraction
    ordinal: int | Fraction = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        whole = self.value.denominator == 1
        object.__setattr__(self, "ordinal", self.value.numerator if whole else self.value)

    @classmethod
    def parse(cls, text: str) -> Quantity:
        """Parse ``text`` (``"40Gi"``); raise InvalidInputError when it is not a quantity."""
        return cls(parse_quantity(text))

    @staticmethod
    def is_valid(text: str) -> bool:
        try:
            parse_quantity(text)
        except InvalidInputError:
            return False
        return True

    def compare_to(self, other: Quantity) -> int:
        a, b = self.ordinal, other.ordinal
        return (a > b) - (a < b)

    def add(self, other: Quantity | int) -> Quantity:
        return Quantity(self.value + (other.value if isinstance(other, Quantity) else other))

    def sub(self, other: Quantity | int) -> Quantity:
        return Quantity(self.value - (other.value if isinstance(other, Quantity) else other))

    def sign(self) -> int:
        return _sign(self.value)

    def is_integer(self) -> bool:
        """True when the value is whole and fits a CEL int (int64), as Kubernetes' isInteger()."""
        return self.value.denominator == 1 and _INT64_MIN <= self.value.numerator <= _INT64_MAX

    def as_integer(self) -> int:
        if not self.is_integer():
            raise InvalidInputError(
                f"cannot convert quantity {self} to an integer (not whole or out of range)"
            )
        return self.value.numerator

    def as_approximate_float(self) -> float:
        return float(self.value)

    def __str__(self) -> str:
        try:
            return format_quantity(self.value)
        except InvalidInputError:
            return str(self.value)


_SEMVER = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[A-Za-z-][0-9A-Za-z-]*)(?:\.(?:0|[1-9]\d*|\d*[A-Za-z-][0-9A-Za-z-]*))*))?"
    r"(?:\+([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?$"
)
_LOOSE = re.compile(r"^v?(\d+)(?:\.(\d+))?(?:\.(\d+))?((?:[-+].*)?)$")


@dataclass(frozen=True, slots=True)
class Semver:
    """A semantic version (semver 2.0). Build metadata is kept for display but ignored by comparisons."""

    major: int
    minor: int
    patch: int
    prerelease: tuple[int | str, ...] = ()
    build: str = ""
    precedence: tuple[int, int, int, int, tuple[tuple[int, int, str], ...]] = field(
        init=False, repr=False, compare=False
    )

    @classmethod
    def parse(cls, text: str, *, normalize: bool = False) -> Semver:
        """Parse strict semver (``"8.0.0"``). With ``normalize`` also ``v1.2`` and leading zeros (``1.02``),
        as Kubernetes' ``semver(text, true)``. Raise InvalidInputError when it is not a version."""
        if normalize:
            loose = _LOOSE.match(text)
            if loose is not None:
                major, minor, patch, rest = loose.groups()
                text = f"{int(major)}.{int(minor or 0)}.{int(patch or 0)}{rest}"
        match = _SEMVER.match(text)
        if match is None:
            raise InvalidInputError(
                f"{text!r} is not a semantic version (expected MAJOR.MINOR.PATCH, e.g. 8.0.0)"
            )
        major, minor, patch, pre, build = match.groups()
        prerelease = tuple(int(p) if p.isdigit() else p for p in pre.split(".")) if pre else ()
        return cls(int(major), int(minor), int(patch), prerelease, build or "")

    @staticmethod
    def is_valid(text: str, *, normalize: bool = False) -> bool:
        try:
            Semver.parse(text, normalize=normalize)
        except InvalidInputError:
            return False
        return True

    def __post_init__(self) -> None:
        # A release sorts after its prereleases; numeric identifiers sort before alphanumeric ones.
        pre = tuple((0, p, "") if isinstance(p, int) else (1, 0, p) for p in self.prerelease)
        object.__setattr__(
            self, "precedence", (self.major, self.minor, self.patch, 0 if self.prerelease else 1, pre)
        )

    def compare_to(self, other: Semver) -> int:
        mine, theirs = self.precedence, other.precedence
        return (mine > theirs) - (mine < theirs)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Semver) and self.precedence == other.precedence

    def __hash__(self) -> int:
        return hash(self.precedence)

    def __str__(self) -> str:
        text = f"{self.major}.{self.minor}.{self.patch}"
        if self.prerelease:
            text += "-" + ".".join(str(p) for p in self.prerelease)
        return text + (f"+{self.build}" if self.build else "")
