"""A ResourceClaim's status as kube-apiserver validates its writes: reservedFor entries (at most 256, unique by
uid, only on an allocated claim, none added once the claim is being deleted), an allocation that cannot change
once written and whose results name requests of the claim, valid drivers, pools and devices."""

from __future__ import annotations

from typing import Any

from . import names
from .fielderrors import forbidden, not_supported, required
from .resourceclaims import (
    Errors,
    forbid_new_reservations,
    immutable,
    listed,
    opaque_config,
    reference,
    references,
    request_names,
    unique,
)
from .resourceslices import pool_name

RESERVED_FOR_MAX = 256
RESULTS_MAX = 32
_SOURCES = ("FromClaim", "FromClass")


def _consumer(ref: dict[str, Any], path: str) -> Errors:
    return [required(f"{path}.{f}") for f in ("resource", "name", "uid") if not ref.get(f)]


def _result(result: dict[str, Any], path: str, known: dict[str, set[str] | None]) -> Errors:
    errors = reference(str(result.get("request") or ""), f"{path}.request", known)
    errors += names.driver_name(f"{path}.driver", str(result.get("driver") or ""))
    errors += pool_name(str(result.get("pool") or ""), f"{path}.pool")
    device = str(result.get("device") or "")
    return errors + names.each(f"{path}.device", device, names.dns1123_label(device))


def _config(item: dict[str, Any], path: str, known: dict[str, set[str] | None]) -> Errors:
    source = item.get("source") or ""
    errors: Errors = []
    if not source:
        errors.append(required(f"{path}.source"))
    elif source not in _SOURCES:
        errors.append(not_supported(f"{path}.source", source, _SOURCES))
    return errors + references(item.get("requests"), f"{path}.requests", known) + opaque_config(item, path)


def claim_status(claim: dict[str, Any], old: dict[str, Any]) -> Errors:
    status, before = claim.get("status") or {}, old.get("status") or {}
    known = request_names((claim.get("spec") or {}).get("devices") or {})
    reserved = status.get("reservedFor") or []
    errors = listed(reserved, RESERVED_FOR_MAX, "status.reservedFor", _consumer)
    errors += unique(reserved, "status.reservedFor", lambda r: r.get("uid", ""), "uid")
    allocation, previous = status.get("allocation"), before.get("allocation")
    if reserved:
        if allocation is None:
            errors.append(forbidden("status.reservedFor", "may not be specified when `allocated` is not set"))
        elif (claim.get("metadata") or {}).get("deletionTimestamp"):
            old_uids = {r.get("uid") for r in before.get("reservedFor") or ()}
            if any(r.get("uid") not in old_uids for r in reserved):
                errors.append(forbid_new_reservations("status.reservedFor"))
    if allocation is not None and previous is not None:
        errors += immutable("status.allocation", allocation, previous)
    elif allocation is not None:
        devices = allocation.get("devices") or {}
        errors += listed(
            devices.get("results"),
            RESULTS_MAX,
            "status.allocation.devices.results",
            lambda r, p: _result(r, p, known),
        )
        errors += listed(
            devices.get("config"),
            2 * 32,
            "status.allocation.devices.config",
            lambda c, p: _config(c, p, known),
        )
    return errors
