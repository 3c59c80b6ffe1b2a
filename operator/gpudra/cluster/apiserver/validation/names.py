"""Kubernetes' name rules (DNS labels and subdomains, C identifiers, qualified names, label values), each
returning the messages apimachinery's ``k8s.io/apimachinery/pkg/util/validation`` gives, word for word."""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence

from .fielderrors import FieldError, invalid_value, too_long

_LABEL = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_SUBDOMAIN = _LABEL + "(\\." + _LABEL + ")*"
_DNS1035 = "[a-z]([-a-z0-9]*[a-z0-9])?"
_C_IDENTIFIER = "[A-Za-z_][A-Za-z0-9_]*"
_QNAME = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_LABEL_VALUE = "(" + _QNAME + ")?"
_COMPILED = {
    p: re.compile("^" + p + "$") for p in (_LABEL, _SUBDOMAIN, _DNS1035, _C_IDENTIFIER, _QNAME, _LABEL_VALUE)
}


def _regex_error(message: str, pattern: str, *examples: str) -> str:
    if not examples:
        return f"{message} (regex used for validation is '{pattern}')"
    shown = " or ".join(f"'{e}', " for e in examples)
    return f"{message} (e.g. {shown}regex used for validation is '{pattern}')"


def _matches(pattern: str, value: str) -> bool:
    return _COMPILED[pattern].match(value) is not None


def max_len(length: int) -> str:
    return f"must be no more than {length} characters"


@functools.lru_cache(maxsize=4096)
def dns1123_label(value: str) -> tuple[str, ...]:
    errors = [max_len(63)] if len(value) > 63 else []
    if not _matches(_LABEL, value):
        if _matches(_SUBDOMAIN, value):
            errors.append("must not contain dots")
        else:
            errors.append(
                _regex_error(
                    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "
                    "must start and end with an alphanumeric character",
                    _LABEL,
                    "my-name",
                    "123-abc",
                )
            )
    return tuple(errors)


@functools.lru_cache(maxsize=4096)
def dns1123_subdomain(value: str) -> tuple[str, ...]:
    errors = [max_len(253)] if len(value) > 253 else []
    if not _matches(_SUBDOMAIN, value):
        errors.append(
            _regex_error(
                "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
                "and must start and end with an alphanumeric character",
                _SUBDOMAIN,
                "example.com",
            )
        )
    return tuple(errors)


@functools.lru_cache(maxsize=4096)
def dns1035_label(value: str) -> tuple[str, ...]:
    errors = [max_len(63)] if len(value) > 63 else []
    if not _matches(_DNS1035, value):
        errors.append(
            _regex_error(
                "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an "
                "alphabetic character, and end with an alphanumeric character",
                _DNS1035,
                "my-name",
                "abc-123",
            )
        )
    return tuple(errors)


@functools.lru_cache(maxsize=4096)
def c_identifier(value: str) -> tuple[str, ...]:
    if _matches(_C_IDENTIFIER, value):
        return ()
    return (
        _regex_error(
            "a valid C identifier must start with alphabetic character or '_', followed by a string of "
            "alphanumeric characters or '_'",
            _C_IDENTIFIER,
            "my_name",
            "MY_NAME",
            "MyName",
        ),
    )


_QNAME_ERROR = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric "
    "character"
)


@functools.lru_cache(maxsize=4096)
def qualified_name(value: str) -> tuple[str, ...]:
    """Label keys, annotation keys, finalizers: an optional DNS subdomain prefix and '/' then a name."""
    errors: list[str] = []
    parts = value.split("/")
    if len(parts) > 2:
        return (
            "a qualified name "
            + _regex_error(_QNAME_ERROR, _QNAME, "MyName", "my.name", "123-abc")
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
        )
    name = parts[-1]
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix:
            errors.append("prefix part must be non-empty")
        else:
            errors.extend("prefix part " + m for m in dns1123_subdomain(prefix))
    if not name:
        errors.append("name part must be non-empty")
    elif len(name) > 63:
        errors.append("name part " + max_len(63))
    if not _matches(_QNAME, name):
        errors.append("name part " + _regex_error(_QNAME_ERROR, _QNAME, "MyName", "my.name", "123-abc"))
    return tuple(errors)


@functools.lru_cache(maxsize=4096)
def label_value(value: str) -> tuple[str, ...]:
    errors = [max_len(63)] if len(value) > 63 else []
    if not _matches(_LABEL_VALUE, value):
        errors.append(
            _regex_error(
                "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
                "and must start and end with an alphanumeric character",
                _LABEL_VALUE,
                "MyValue",
                "my_value",
                "12345",
            )
        )
    return tuple(errors)


def each(path: str, value: str, messages: Sequence[str]) -> list[FieldError]:
    """One ``Invalid value`` error per message."""
    return [invalid_value(path, value, m) for m in messages]


def label_name(path: str, value: str) -> list[FieldError]:
    return each(path, value, qualified_name(value))


def labels(path: str, values: Mapping[str, str]) -> list[FieldError]:
    errors: list[FieldError] = []
    for name, value in values.items():
        errors += label_name(path, name)
        errors += each(path, value, label_value(value))
    return errors


def driver_name(path: str, value: str) -> list[FieldError]:
    """A DRA / CSI driver name: a DNS subdomain of at most 63 characters, compared in lower case."""
    errors = [FieldError("FieldValueRequired", path, "", "")] if not value else []
    if len(value) > 63:
        errors.append(too_long(path, 63))
    return errors + each(path, value, dns1123_subdomain(value.lower()))
