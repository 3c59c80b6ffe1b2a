"""resource.k8s.io/v1 models (Kubernetes 1.34 / 1.35): DeviceClass, ResourceClaim, ResourceClaimTemplate,
ResourceSlice, DeviceTaintRule (v1 from 1.37; v1alpha3 before, the same fields gpudra reads). Only the fields gpudra
reads or writes; unknown wire fields are ignored on read.

Quantities stay strings here ("80Gi"); ``gpudra.api.quantity`` parses them.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from gpudra.api.base import WireModel
from gpudra.api.interning import Interner
from gpudra.api.meta import Condition, ObjectMeta

GROUP = "resource.k8s.io"
VERSION = "v1"
API_VERSION = f"{GROUP}/{VERSION}"

# ---------------------------------------------------------------- ResourceSlice


AttributeKind = Literal["int", "bool", "string", "version"]
ScalarValue = int | bool | str


class DeviceAttribute(WireModel):
    """Exactly one of int, bool, string, version, or (DRAListTypeAttributes, alpha in Kubernetes 1.36) one of
    the lists ints, bools, strings, versions. A list holds values of one kind; Kubernetes treats it as a set
    (order and duplicates do not matter to matchAttribute and distinctAttribute).

    Frozen: a device's scalar attributes are shared between equal devices (:func:`shared_attributes`)."""

    model_config = ConfigDict(frozen=True)

    int_: int | None = Field(default=None, alias="int")
    bool_: bool | None = Field(default=None, alias="bool")
    string: str | None = None
    version: str | None = None
    ints: list[int] | None = None
    bools: list[bool] | None = None
    strings: list[str] | None = None
    versions: list[str] | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> DeviceAttribute:
        set_ = (
            (self.int_ is not None)
            + (self.bool_ is not None)
            + (self.string is not None)
            + (self.version is not None)
            + (self.ints is not None)
            + (self.bools is not None)
            + (self.strings is not None)
            + (self.versions is not None)
        )  # written out: every attribute of every published device passes here
        if set_ != 1:
            raise ValueError(
                "a device attribute must have exactly one of int, bool, string, version, ints, bools, strings, "
                "versions"
            )
        return self

    @property
    def is_list(self) -> bool:
        return (
            self.ints is not None
            or self.bools is not None
            or self.strings is not None
            or (self.versions is not None)
        )

    @property
    def value(self) -> ScalarValue:
        """The scalar value (a list attribute has none: see ``values``)."""
        for v in (self.int_, self.bool_, self.string, self.version):
            if v is not None:
                return v
        raise ValueError("a list attribute has no single value")

    @property
    def values(self) -> tuple[ScalarValue, ...]:
        """The list's values in published order, or the scalar as a one-value tuple."""
        for items in (self.ints, self.bools, self.strings, self.versions):
            if items is not None:
                return tuple(items)
        return (self.value,)

    @property
    def kind(self) -> AttributeKind:
        """The kind of the value, or of each value of a list."""
        if self.int_ is not None or self.ints is not None:
            return "int"
        if self.bool_ is not None or self.bools is not None:
            return "bool"
        if self.string is not None or self.strings is not None:
            return "string"
        return "version"


class CapacityRequestPolicyRange(WireModel):
    min: str
    max: str | None = None
    step: str | None = None


class CapacityRequestPolicy(WireModel):
    default: str | None = None
    valid_values: list[str] | None = None
    valid_range: CapacityRequestPolicyRange | None = None


class DeviceCapacity(WireModel):
    """Frozen: a capacity without a request policy is shared between equal devices (:func:`shared_capacity`)."""

    model_config = ConfigDict(frozen=True)

    value: str
    request_policy: CapacityRequestPolicy | None = None


_ATTRIBUTES = Interner(DeviceAttribute)
_CAPACITIES = Interner(DeviceCapacity)


def shared_attributes(attributes: dict[str, DeviceAttribute]) -> dict[str, DeviceAttribute]:
    """``attributes`` with each scalar value replaced by the process's one instance of it (a list attribute, whose
    list could be changed in place, is kept as it is)."""
    out = {}
    for name, attribute in attributes.items():
        if not attribute.is_list:
            value = attribute.value
            attribute = _ATTRIBUTES.interned((attribute.kind, type(value), value), attribute)
        out[name] = attribute
    return out


def shared_capacity(capacity: dict[str, DeviceCapacity]) -> dict[str, DeviceCapacity]:
    """``capacity`` with each value without a request policy replaced by the process's one instance of it."""
    return {
        name: value if value.request_policy is not None else _CAPACITIES.interned(value.value, value)
        for name, value in capacity.items()
    }


class Counter(WireModel):
    value: str


class CounterSet(WireModel):
    name: str
    counters: dict[str, Counter]


class DeviceCounterConsumption(WireModel):
    counter_set: str
    counters: dict[str, Counter]


class DeviceTaint(WireModel):
    key: str
    value: str | None = None
    effect: Literal["NoSchedule", "NoExecute", "None"]
    time_added: str | None = None


class Device(WireModel):
    name: str
    attributes: dict[str, DeviceAttribute] | None = None
    capacity: dict[str, DeviceCapacity] | None = None
    consumes_counters: list[DeviceCounterConsumption] | None = None
    node_name: str | None = None
    node_selector: dict[str, Any] | None = None
    all_nodes: bool | None = None
    taints: list[DeviceTaint] | None = None
    binds_to_node: bool | None = None
    binding_conditions: list[str] | None = None
    binding_failure_conditions: list[str] | None = None
    allow_multiple_allocations: bool | None = None

    @field_validator("attributes", mode="after")
    @classmethod
    def _share_attributes(cls, value: dict[str, DeviceAttribute] | None) -> dict[str, DeviceAttribute] | None:
        return None if value is None else shared_attributes(value)

    @field_validator("capacity", mode="after")
    @classmethod
    def _share_capacity(cls, value: dict[str, DeviceCapacity] | None) -> dict[str, DeviceCapacity] | None:
        return None if value is None else shared_capacity(value)

    def attribute_text(self, name: str) -> str:
        """The attribute ``name`` (as published: qualified or not) as text, whatever its kind: a list's values
        joined by commas, "" when the device has no such attribute. The one way product code reads a device's
        attribute for display and counting."""
        attribute = (self.attributes or {}).get(name)
        if attribute is None:
            return ""
        return ",".join(str(v) for v in attribute.values)

    @property
    def repels_claims(self) -> bool:
        """Whether a taint with an effect other than None is on the device (a claim must tolerate it)."""
        return any(t.effect != "None" for t in self.taints or [])


class ResourcePool(WireModel):
    name: str
    generation: int
    resource_slice_count: int


class ResourceSliceSpec(WireModel):
    driver: str
    pool: ResourcePool
    node_name: str | None = None
    node_selector: dict[str, Any] | None = None
    all_nodes: bool | None = None
    per_device_node_selection: bool | None = None
    devices: list[Device] | None = None
    shared_counters: list[CounterSet] | None = None


class ResourceSlice(WireModel):
    api_version: str = API_VERSION
    kind: str = "ResourceSlice"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: ResourceSliceSpec


# ---------------------------------------------------------------- DeviceTaintRule


class DeviceTaintSelector(WireModel):
    """Which devices a rule taints: all of driver, pool and device that are set must match (v1alpha3 of 1.34 also
    had deviceClassName and CEL selectors, dropped in 1.35: gpudra reads them only to refuse to guess)."""

    driver: str | None = None
    pool: str | None = None
    device: str | None = None
    device_class_name: str | None = None
    selectors: list[dict[str, Any]] | None = None


class DeviceTaintRuleSpec(WireModel):
    device_selector: DeviceTaintSelector | None = None
    taint: DeviceTaint


class DeviceTaintRule(WireModel):
    api_version: str = API_VERSION
    kind: str = "DeviceTaintRule"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: DeviceTaintRuleSpec


# ---------------------------------------------------------------- selectors, classes


class CELDeviceSelector(WireModel):
    expression: str


class DeviceSelector(WireModel):
    cel: CELDeviceSelector | None = None


class OpaqueDeviceConfiguration(WireModel):
    driver: str
    parameters: dict[str, Any]


class DeviceClassConfiguration(WireModel):
    opaque: OpaqueDeviceConfiguration | None = None


class DeviceClassSpec(WireModel):
    selectors: list[DeviceSelector] | None = None
    config: list[DeviceClassConfiguration] | None = None
    extended_resource_name: str | None = None


class DeviceClass(WireModel):
    api_version: str = API_VERSION
    kind: str = "DeviceClass"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: DeviceClassSpec = Field(default_factory=DeviceClassSpec)


# ---------------------------------------------------------------- ResourceClaim spec


class DeviceToleration(WireModel):
    key: str | None = None
    operator: Literal["Exists", "Equal"] = "Equal"
    value: str | None = None
    effect: Literal["NoSchedule", "NoExecute", "None"] | None = None
    toleration_seconds: int | None = None


class CapacityRequirements(WireModel):
    requests: dict[str, str] | None = None


class ExactDeviceRequest(WireModel):
    device_class_name: str
    selectors: list[DeviceSelector] | None = None
    allocation_mode: Literal["ExactCount", "All"] | None = None
    count: int | None = None
    admin_access: bool | None = None
    tolerations: list[DeviceToleration] | None = None
    capacity: CapacityRequirements | None = None


class DeviceSubRequest(WireModel):
    name: str
    device_class_name: str
    selectors: list[DeviceSelector] | None = None
    allocation_mode: Literal["ExactCount", "All"] | None = None
    count: int | None = None
    tolerations: list[DeviceToleration] | None = None
    capacity: CapacityRequirements | None = None


class DeviceRequest(WireModel):
    name: str
    exactly: ExactDeviceRequest | None = None
    first_available: list[DeviceSubRequest] | None = None


class DeviceConstraint(WireModel):
    requests: list[str] | None = None
    match_attribute: str | None = None
    distinct_attribute: str | None = None


class DeviceClaimConfiguration(WireModel):
    requests: list[str] | None = None
    opaque: OpaqueDeviceConfiguration | None = None


class DeviceClaim(WireModel):
    requests: list[DeviceRequest] | None = None
    constraints: list[DeviceConstraint] | None = None
    config: list[DeviceClaimConfiguration] | None = None


class ResourceClaimSpec(WireModel):
    devices: DeviceClaim = Field(default_factory=DeviceClaim)


# ---------------------------------------------------------------- ResourceClaim status


class DeviceRequestAllocationResult(WireModel):
    request: str
    driver: str
    pool: str
    device: str
    admin_access: bool | None = None
    tolerations: list[DeviceToleration] | None = None
    binding_conditions: list[str] | None = None
    binding_failure_conditions: list[str] | None = None
    share_id: str | None = Field(default=None, alias="shareID")
    consumed_capacity: dict[str, str] | None = None


class DeviceAllocationConfiguration(WireModel):
    source: Literal["FromClass", "FromClaim"]
    requests: list[str] | None = None
    opaque: OpaqueDeviceConfiguration | None = None


class DeviceAllocationResult(WireModel):
    results: list[DeviceRequestAllocationResult] | None = None
    config: list[DeviceAllocationConfiguration] | None = None


class NodeSelectorRequirement(WireModel):
    key: str
    operator: str
    values: list[str] | None = None


class NodeSelectorTerm(WireModel):
    match_expressions: list[NodeSelectorRequirement] | None = None
    match_fields: list[NodeSelectorRequirement] | None = None


class NodeSelector(WireModel):
    node_selector_terms: list[NodeSelectorTerm]


class AllocationResult(WireModel):
    devices: DeviceAllocationResult | None = None
    node_selector: NodeSelector | None = None
    allocation_timestamp: str | None = None

    @property
    def results(self) -> list[DeviceRequestAllocationResult]:
        return (self.devices.results or []) if self.devices is not None else []

    @property
    def node(self) -> str | None:
        """The node of a node-local allocation: its ``metadata.name In [node]`` field selector, as the scheduler
        writes it; None when the devices are not node-local."""
        for term in self.node_selector.node_selector_terms if self.node_selector is not None else []:
            for field in term.match_fields or []:
                if field.key == "metadata.name" and field.operator == "In" and field.values:
                    return field.values[0]
        return None


class ResourceClaimConsumerReference(WireModel):
    api_group: str | None = None
    resource: str
    name: str
    uid: str


class AllocatedDeviceStatus(WireModel):
    driver: str
    pool: str
    device: str
    share_id: str | None = Field(default=None, alias="shareID")
    conditions: list[Condition] | None = None
    data: dict[str, Any] | None = None
    network_data: dict[str, Any] | None = None


class ResourceClaimStatus(WireModel):
    allocation: AllocationResult | None = None
    reserved_for: list[ResourceClaimConsumerReference] | None = None
    devices: list[AllocatedDeviceStatus] | None = None


class ResourceClaim(WireModel):
    api_version: str = API_VERSION
    kind: str = "ResourceClaim"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: ResourceClaimSpec = Field(default_factory=ResourceClaimSpec)
    status: ResourceClaimStatus | None = None

    @property
    def allocation(self) -> AllocationResult | None:
        return self.status.allocation if self.status is not None else None


class ResourceClaimTemplateSpec(WireModel):
    metadata: ObjectMeta | None = None
    spec: ResourceClaimSpec


class ResourceClaimTemplate(WireModel):
    api_version: str = API_VERSION
    kind: str = "ResourceClaimTemplate"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: ResourceClaimTemplateSpec
