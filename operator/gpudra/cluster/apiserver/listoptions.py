"""The query of a list or a watch read as kube-apiserver reads it: ``limit`` and ``timeoutSeconds`` are Go integers,
a list's ``resourceVersion`` an unsigned one; anything else is a 400 in Go's words (kube-apiserver v1.37.2,
tests/badinput/requests.yaml)."""

from __future__ import annotations

import re
from collections.abc import Mapping

from .status import bad_request
from .validation.fielderrors import go_quote

_GO_INT = re.compile(r"[+-]?[0-9]+")


def check_list_options(query: Mapping[str, str], *, watching: bool) -> None:
    for name in ("limit", "timeoutSeconds"):
        text = query.get(name)
        if text is None:
            continue
        if not _GO_INT.fullmatch(text):
            raise bad_request(f"strconv.ParseInt: parsing {go_quote(text)}: invalid syntax")
        if not -(2**63) <= int(text) < 2**63:
            raise bad_request(f"strconv.ParseInt: parsing {go_quote(text)}: value out of range")
    version = query.get("resourceVersion") or ""
    if version and not watching and not (version.isascii() and version.isdigit() and int(version) < 2**64):
        why = "value out of range" if version.isascii() and version.isdigit() else "invalid syntax"
        raise bad_request(
            f"invalid resource version: resourceVersion: Invalid value: {go_quote(version)}: "
            f"strconv.ParseUint: parsing {go_quote(version)}: {why}"
        )
