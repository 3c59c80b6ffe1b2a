"""What an allocated claim's status says of its prepare: the devices whose driver wrote them not Ready (the agent
writes ``status.devices`` with a ``Ready`` condition at each prepare, ``False`` with the failure's reason and
message when it failed). A pod whose claim is allocated but not prepared waits in ContainerCreating, and a kubelet
tries the prepare again only at its next periodic sync of the pod, a minute or more later: ``gpudra explain`` says
both."""

from __future__ import annotations

from dataclasses import dataclass

from gpudra.api.dra import ResourceClaim

RETRY_WORDS = (
    "the kubelet tries the prepare again at its next sync of the pod, a minute or more after it failed"
)


@dataclass(frozen=True)
class NotPrepared:
    """One device of the claim its driver could not prepare, as the status says."""

    driver: str
    pool: str
    device: str
    reason: str
    message: str


def not_prepared(claim: ResourceClaim) -> tuple[NotPrepared, ...]:
    """The claim's devices whose ``Ready`` condition is ``False``, in the status's order."""
    found = []
    for entry in (claim.status.devices if claim.status is not None else None) or []:
        ready = next((c for c in entry.conditions or [] if c.type == "Ready"), None)
        if ready is not None and ready.status == "False":
            found.append(NotPrepared(entry.driver, entry.pool, entry.device, ready.reason, ready.message))
    return tuple(found)


def not_prepared_words(devices: tuple[NotPrepared, ...]) -> list[str]:
    """One line per distinct failure (a claim of eight GPUs that failed for one reason says it once)."""
    said: dict[tuple[str, str], list[str]] = {}
    for d in devices:
        said.setdefault((d.reason, d.message), []).append(d.device)
    return [
        f"not prepared ({', '.join(names)}): {reason}: {message}" for (reason, message), names in said.items()
    ]
