"""Kubernetes ``Status`` errors of the embedded API server.

Handlers raise :class:`APIStatusError`; the HTTP layer turns it into the ``Status`` object (kind Status,
apiVersion v1, status Failure, reason, details, code) that kopf, kubernetes_asyncio and kubectl parse. It is
a :class:`gpudra.errors.KubeError`, so code that calls the server in-process sees the project's own
hierarchy.
"""

from __future__ import annotations

from typing import Any

from gpudra.errors import KubeError


class APIStatusError(KubeError):
    """An API request failed; ``status`` is the HTTP code, ``reason`` Kubernetes' StatusReason."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        *,
        name: str = "",
        group: str = "",
        kind: str = "",
        causes: list[dict[str, str]] | None = None,
    ) -> None:
        super().__init__(message, status=code, reason=reason)
        self.message = message
        self.details: dict[str, Any] = {}
        if name:
            self.details["name"] = name
        if group:
            self.details["group"] = group
        if kind:
            self.details["kind"] = kind
        if causes:
            self.details["causes"] = causes

    def to_status(self) -> dict[str, Any]:
        """The ``Status`` object Kubernetes sends for this error."""
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.status,
        }
        if self.details:
            body["details"] = self.details
        return body


def bad_request(message: str) -> APIStatusError:
    return APIStatusError(400, "BadRequest", message)


def not_found(resource: str, group: str, name: str) -> APIStatusError:
    qualified = f"{resource}.{group}" if group else resource
    message = (
        f'{qualified} "{name}" not found' if name else "the server could not find the requested resource"
    )
    return APIStatusError(404, "NotFound", message, name=name, group=group, kind=resource)


def already_exists(resource: str, group: str, name: str) -> APIStatusError:
    qualified = f"{resource}.{group}" if group else resource
    return APIStatusError(
        409, "AlreadyExists", f'{qualified} "{name}" already exists', name=name, group=group, kind=resource
    )


def conflict(resource: str, group: str, name: str, why: str) -> APIStatusError:
    qualified = f"{resource}.{group}" if group else resource
    return APIStatusError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {qualified} "{name}": {why}',
        name=name,
        group=group,
        kind=resource,
    )


def invalid(kind: str, group: str, name: str, field: str, why: str) -> APIStatusError:
    return APIStatusError(
        422,
        "Invalid",
        f'{kind}.{group or "core"} "{name}" is invalid: {field}: {why}',
        name=name,
        group=group,
        kind=kind,
        causes=[{"reason": "FieldValueInvalid", "message": why, "field": field}],
    )


STALE = "the object has been modified; please apply your changes to the latest version and try again"
