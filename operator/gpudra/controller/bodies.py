"""kopf hands handlers raw bodies; handlers read them through models. One object that does not parse is logged
and skipped, never raised: a bad object must not stop a handler for every other object."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import ValidationError

from gpudra.api.base import WireModel
from gpudra.api.meta import ObjectMeta
from gpudra.kube.client import fault
from gpudra.telemetry import get_logger

log = get_logger(__name__)
M = TypeVar("M", bound=WireModel)


def parse_body(model: type[M], body: Mapping[str, Any]) -> M | None:
    """The body as ``model``; None (logged with the field at fault) when it does not parse."""
    try:
        return model.model_validate(dict(body))
    except ValidationError as exc:
        field, problem = fault(exc)
        meta = body.get("metadata") or {}
        log.warning(
            "object ignored: it does not parse", kind=body.get("kind"), namespace=meta.get("namespace"),
            name=meta.get("name"), field=field, problem=problem,
        )  # fmt: skip
        return None


def body_key(body: Mapping[str, Any]) -> str:
    """ "namespace/name" of a body, whether or not the rest of it parses (a deleted object's last state)."""
    return ObjectMeta.model_validate(body.get("metadata") or {}).namespaced_name
