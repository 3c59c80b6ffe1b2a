"""CustomResourceDefinition checks and the status the server sets on them (NamesAccepted, Established)."""

from __future__ import annotations

from typing import Any

from gpudra.api.timestamps import rfc3339

from . import status as st
from .registry import CRD_GROUP, Registry


def now_rfc3339() -> str:
    return rfc3339()


def validate_crd(registry: Registry, crd: dict[str, Any]) -> None:
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    group, plural, kind = spec.get("group"), names.get("plural"), names.get("kind")
    name = crd["metadata"].get("name", "")
    if not group or not plural or not kind or not spec.get("versions"):
        raise st.invalid(
            "CustomResourceDefinition",
            CRD_GROUP,
            name,
            "spec",
            "Required value: group, names and versions",
        )
    if name != f"{plural}.{group}":
        raise st.invalid(
            "CustomResourceDefinition",
            CRD_GROUP,
            name,
            "metadata.name",
            f'Invalid value: {name!r}: must be spec.names.plural+"."+spec.group',
        )
    for rt in registry.by_storage((group, plural)):
        if not rt.is_custom:
            raise st.invalid("CustomResourceDefinition", CRD_GROUP, name, "spec.group", "built-in resource")


def crd_status(crd: dict[str, Any]) -> dict[str, Any]:
    names = dict((crd.get("spec") or {}).get("names") or {})
    names.setdefault("singular", str(names.get("kind", "")).lower())
    names.setdefault("listKind", f"{names.get('kind', '')}List")
    old = {c.get("type"): c for c in ((crd.get("status") or {}).get("conditions") or ())}
    conditions = []
    for ctype, reason, message in (
        ("NamesAccepted", "NoConflicts", "no conflicts found"),
        ("Established", "InitialNamesAccepted", "the initial names have been accepted"),
    ):
        since = (old.get(ctype) or {}).get("lastTransitionTime") or now_rfc3339()
        conditions.append(
            {
                "type": ctype,
                "status": "True",
                "reason": reason,
                "message": message,
                "lastTransitionTime": since,
            }
        )
    versions = [v.get("name") for v in (crd.get("spec") or {}).get("versions") or () if v.get("storage")]
    return {"acceptedNames": names, "conditions": conditions, "storedVersions": versions}
