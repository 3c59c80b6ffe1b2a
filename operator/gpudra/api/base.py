"""The base models: ``WireModel`` (camelCase on the wire, snake_case in Python, unknown wire fields ignored) and
``FrozenModel`` (immutable values read from hardware and catalogs: unknown fields are an error)."""

from __future__ import annotations

from typing import Any, Self

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class WireModel(BaseModel):
    """A Kubernetes-shaped model. ``to_wire()`` gives the JSON body the API server expects."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    def to_wire(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")

    @classmethod
    def from_wire(cls, body: dict[str, Any]) -> Self:
        return cls.model_validate(body)


class FrozenModel(BaseModel):
    """An immutable value: hashable, and an unknown field is an error."""

    model_config = ConfigDict(frozen=True, extra="forbid")
