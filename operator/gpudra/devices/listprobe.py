"""Whether the API server keeps list-typed attributes (Kubernetes' DRAListTypeAttributes gate, alpha in 1.36, off
by default): the ResourceSlice a server-side dry run creates to find out, and what its answer means.

kube-apiserver with the gate off drops the list fields of an attribute on write; the probe's only attribute holds
only a list, so the server then refuses it (``exactly one value must be specified``). With the gate on it returns
the slice with the list. A server older than 1.36 knows no list fields at all and drops them as well. Nothing is
stored: the create runs with ``dryRun=All``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpudra.devices.nvlinkpeers import NVLINK_PEERS

PROBE_DEVICE = "list-attribute-probe"
PROBE_VALUE = "probe"


@dataclass(frozen=True)
class ListSupport:
    """``kept``: publish list attributes. ``settled``: the answer came from the server's validation (not an
    outage or a refusal for another reason), so it holds until a write is refused. ``reason``: a sentence for
    the log and the Node's Event."""

    kept: bool
    settled: bool
    reason: str


def probe_slice(*, driver: str, node_name: str) -> dict[str, Any]:
    """A one-device ResourceSlice of this node's pool whose only attribute is a one-item ``strings`` list."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"generateName": f"{node_name}-list-probe-"},
        "spec": {
            "driver": driver,
            "nodeName": node_name,
            "pool": {"name": node_name, "generation": 0, "resourceSliceCount": 1},
            "devices": [{"name": PROBE_DEVICE, "attributes": {NVLINK_PEERS: {"strings": [PROBE_VALUE]}}}],
        },
    }


def support_from_answer(answer: dict[str, Any]) -> ListSupport:
    """What the dry-run create returned: the list kept, or dropped."""
    devices = (answer.get("spec") or {}).get("devices") or []
    attribute = ((devices[0] if devices else {}).get("attributes") or {}).get(NVLINK_PEERS) or {}
    if attribute.get("strings") == [PROBE_VALUE]:
        return ListSupport(
            True, True, "the API server keeps list-typed attributes (DRAListTypeAttributes is on)"
        )
    return ListSupport(
        False,
        True,
        "the API server drops list-typed attributes (Kubernetes' DRAListTypeAttributes gate is off or unknown "
        "to it); publishing scalar attributes only",
    )


def support_from_refusal(status: int, message: str) -> ListSupport:
    """The dry-run create failed. 422 (Invalid) is the server's validation dropping the list and refusing what is
    left: settled. Anything else (forbidden, unreachable, ...) says nothing about the gate: checked again later."""
    if status == 422:
        return ListSupport(
            False,
            True,
            "the API server refuses list-typed attributes (Kubernetes' DRAListTypeAttributes gate is off); "
            f"publishing scalar attributes only; it answered: {message}",
        )
    return ListSupport(
        False,
        False,
        f"could not check whether the API server keeps list-typed attributes ({message}); publishing scalar "
        "attributes only until a check succeeds",
    )
