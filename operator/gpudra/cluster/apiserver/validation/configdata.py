"""The size limit on what a ConfigMap or a Secret holds: 1 MiB of values, as kube-apiserver counts it.

A ConfigMap's ``data`` and ``binaryData`` values together (the error's field path is ``[]``, as kube-apiserver
words it); a Secret's ``data`` (decoded) and ``stringData`` values together (the API server merges
``stringData`` into ``data`` before it validates).
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from ..versions import KubeVersion
from .fielderrors import FieldError, too_long

LIMIT = 1024 * 1024


def _text_bytes(values: Any) -> int:
    return sum(len(str(v).encode()) for v in (values or {}).values()) if isinstance(values, dict) else 0


def _binary_bytes(values: Any) -> int:
    if not isinstance(values, dict):
        return 0
    total = 0
    for value in values.values():
        try:
            total += len(base64.b64decode(str(value), validate=True))
        except (binascii.Error, ValueError):
            total += len(str(value)) * 3 // 4  # the decoder refuses it; count about what it holds
    return total


def config_map(obj: dict[str, Any], old: dict[str, Any] | None, _: KubeVersion) -> list[FieldError]:
    if _text_bytes(obj.get("data")) + _binary_bytes(obj.get("binaryData")) > LIMIT:
        return [too_long("[]", LIMIT)]
    return []


def secret(obj: dict[str, Any], old: dict[str, Any] | None, _: KubeVersion) -> list[FieldError]:
    data = obj.get("data") if isinstance(obj.get("data"), dict) else {}
    text = obj.get("stringData") if isinstance(obj.get("stringData"), dict) else {}
    kept = {k: v for k, v in (data or {}).items() if k not in (text or {})}
    if _binary_bytes(kept) + _text_bytes(text) > LIMIT:
        return [too_long("data", LIMIT)]
    return []
