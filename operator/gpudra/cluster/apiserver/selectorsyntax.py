"""Label and field selectors as the API server parses them from ``labelSelector`` / ``fieldSelector``.

Label selectors: ``k``, ``!k``, ``k=v``, ``k==v``, ``k!=v``, ``k in (a,b)``, ``k notin (a,b)``, ``k>1``,
``k<1``. Field selectors: ``path=v``, ``path==v``, ``path!=v`` joined by commas; a path is a dotted lookup
into the object (``metadata.name``, ``spec.nodeName``, ``involvedObject.kind`` ...); a missing field reads
as the empty string.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from .status import APIStatusError, bad_request

_LABEL_RE = re.compile(
    r"""^\s*(?P<neg>!)?\s*(?P<key>[A-Za-z0-9_./-]+)\s*
        (?:(?P<op>==|=|!=|>|<)\s*(?P<value>[A-Za-z0-9_.-]*)
          |\s+(?P<setop>in|notin)\s*\((?P<values>[^)]*)\)
        )?\s*$""",
    re.VERBOSE,
)


_UNESCAPED_EQUALS = re.compile(r"(?<!\\)=")
r"""An ``=`` in a field selector's value must be escaped (``\=``), as ``\,`` and ``\\`` are."""
_ESCAPED = re.compile(r"\\(.)")


@dataclass(frozen=True, slots=True)
class LabelRequirement:
    key: str
    op: str  # exists, !exists, =, !=, in, notin, >, <
    values: frozenset[str] = frozenset()

    def matches(self, labels: dict[str, str]) -> bool:
        op = self.op
        present = self.key in labels
        if op == "exists":
            return present
        if op == "!exists":
            return not present
        value = labels.get(self.key)
        if op in ("=", "in"):
            return present and value in self.values
        if op in ("!=", "notin"):
            return not present or value not in self.values
        if not present:
            return False
        try:
            number, bound = int(str(value)), int(next(iter(self.values)))
        except ValueError:
            return False
        return number > bound if op == ">" else number < bound


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside parentheses."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p for p in (p.strip() for p in parts) if p]


@dataclass(frozen=True, slots=True)
class LabelSelector:
    requirements: tuple[LabelRequirement, ...]

    @classmethod
    def parse(cls, text: str | None) -> LabelSelector | None:
        if not text or not text.strip():
            return None
        reqs = []
        for part in _split_top_level(text):
            m = _LABEL_RE.match(part)
            if m is None:
                raise bad_request(f"unable to parse requirement: invalid label selector {part!r}")
            key = m["key"]
            if m["neg"]:
                if m["op"] or m["setop"]:
                    raise bad_request(f"unable to parse requirement: {part!r}")
                reqs.append(LabelRequirement(key, "!exists"))
            elif m["setop"]:
                values = frozenset(v.strip() for v in m["values"].split(",") if v.strip())
                reqs.append(LabelRequirement(key, m["setop"], values))
            elif m["op"]:
                op = "=" if m["op"] == "==" else m["op"]
                if op in (">", "<") and not m["value"].lstrip("-").isdigit():
                    raise bad_request(f"unable to parse requirement: {part!r}: value must be an integer")
                reqs.append(LabelRequirement(key, op, frozenset([m["value"]])))
            else:
                reqs.append(LabelRequirement(key, "exists"))
        return cls(tuple(reqs))

    def matches(self, obj: dict[str, Any]) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return all(r.matches(labels) for r in self.requirements)


def field_value(obj: dict[str, Any], path: str) -> str:
    """The string form of a dotted field path, as field selectors compare it ('' when missing)."""
    value: Any = obj
    for part in path.split("."):
        if not isinstance(value, dict):
            return ""
        value = value.get(part)
        if value is None:
            return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list):
        return ""
    return str(value)


@dataclass(frozen=True, slots=True)
class FieldSelector:
    requirements: tuple[tuple[str, bool, str], ...]  # (path, equal, value)

    @classmethod
    def parse(cls, text: str | None) -> FieldSelector | None:
        if not text or not text.strip():
            return None
        reqs = []
        for part in _split_top_level(text):
            for op, equal in (("!=", False), ("==", True), ("=", True)):
                if op in part:
                    path, _, value = part.partition(op)
                    if not path.strip():
                        raise bad_request(f"invalid selector: {text!r}; no field in {part!r}")
                    if _UNESCAPED_EQUALS.search(value):
                        raise bad_request("invalid field selector: unescaped character in value: 61")
                    reqs.append((path.strip(), equal, _ESCAPED.sub(r"\1", value.strip())))
                    break
            else:
                raise bad_request(f"invalid selector: {text!r}; can't understand {part!r}")
        return cls(tuple(reqs))

    def matches(self, obj: dict[str, Any]) -> bool:
        return all((field_value(obj, path) == value) == equal for path, equal, value in self.requirements)

    def equality(self, path: str) -> str | None:
        """The value this selector requires ``path`` to equal, if it does."""
        for p, equal, value in self.requirements:
            if p == path and equal:
                return value
        return None


def parse_selectors(
    label: str | None, field: str | None
) -> tuple[LabelSelector | None, FieldSelector | None]:
    try:
        return LabelSelector.parse(label), FieldSelector.parse(field)
    except APIStatusError:
        raise
    except ValueError as exc:  # pragma: no cover - defensive
        raise bad_request(str(exc)) from exc
