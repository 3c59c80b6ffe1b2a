"""Defaulting of custom resources from the ``default`` values of their structural OpenAPI v3 schema."""

from __future__ import annotations

from typing import Any

from .patches import clone


def apply_defaults(value: Any, schema: dict[str, Any]) -> None:
    """Fill in missing properties that declare a ``default``, recursively (mutates ``value``)."""
    if isinstance(value, dict):
        properties = schema.get("properties")
        if isinstance(properties, dict):
            for name, sub in properties.items():
                if not isinstance(sub, dict):
                    continue
                if name not in value and "default" in sub:
                    value[name] = clone(sub["default"])
                if name in value and name != "metadata":
                    apply_defaults(value[name], sub)
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            known = properties if isinstance(properties, dict) else {}
            for name, item in value.items():
                if name not in known:
                    apply_defaults(item, extra)
    elif isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, dict):
            for item in value:
                apply_defaults(item, items)
