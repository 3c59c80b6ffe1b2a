"""Object metadata, owner references and conditions (meta/v1 subset)."""

from __future__ import annotations

from typing import Protocol

from pydantic import Field

from gpudra.api.base import WireModel


class OwnerReference(WireModel):
    api_version: str
    kind: str
    name: str
    uid: str
    controller: bool | None = None
    block_owner_deletion: bool | None = None


class ObjectMeta(WireModel):
    name: str | None = None
    generate_name: str | None = None
    namespace: str | None = None
    uid: str | None = None
    resource_version: str | None = None
    generation: int | None = None
    creation_timestamp: str | None = None
    deletion_timestamp: str | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    owner_references: list[OwnerReference] | None = None
    finalizers: list[str] | None = None

    @property
    def namespaced_name(self) -> str:
        """ "namespace/name", as kubectl and the events name an object ("default" when the namespace is unset)."""
        return f"{self.namespace or 'default'}/{self.name or ''}"


class PartialObjectMetadata(WireModel):
    """Any object read for its metadata only (as kubectl's ``PartialObjectMetadata``): the rest of it is not
    validated, which costs a fraction of the whole model's validation."""

    metadata: ObjectMeta


class Condition(WireModel):
    """metav1.Condition."""

    type: str = Field(description="the condition's type, e.g. Ready or Applied")
    status: str = Field(description="True, False or Unknown")
    reason: str = Field("", description="a CamelCase reason for the last transition")
    message: str = Field("", description="a human-readable explanation of the last transition")
    last_transition_time: str | None = Field(None, description="when the status last changed (RFC 3339)")
    observed_generation: int | None = Field(
        None, description="the metadata.generation the condition is based on"
    )


class KubeObject(Protocol):
    """What every top-level ``gpudra.api`` model has: an Event names it, a cache keys it by its metadata."""

    api_version: str
    kind: str
    metadata: ObjectMeta
