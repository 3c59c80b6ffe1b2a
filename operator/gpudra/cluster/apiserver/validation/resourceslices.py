"""resource.k8s.io/v1 ResourceSlice validation as kube-apiserver does it: exactly one of nodeName, nodeSelector,
allNodes and perDeviceNodeSelection; a pool with a name and a positive slice count; at most 128 devices with
unique DNS-label names; at most 32 attributes and capacities per device, each attribute with exactly one value (a
string or version of at most 64 bytes, a version in semver form) under a qualified name; device taints with a
known effect. Shared counters by version (KubeVersion.counters_apart): in 1.34 a device consumes counters of its
own slice's counter sets; from 1.35 a slice holds devices or counter sets, never both, and a device names a
counter set of any slice of its pool (which the API server cannot check)."""

from __future__ import annotations

import functools
import re
from typing import Any

from ..versions import KubeVersion
from . import names
from .core import node_selector
from .fielderrors import Literal, forbidden, invalid_value, not_supported, required, too_long, too_many
from .resourceclaims import Errors, listed, qualified, unique

DEVICES_MAX = 128
ATTRIBUTES_MAX = 32
VALUE_MAX = 64
SHARED_COUNTERS_MAX = 32
COUNTERS_PER_DEVICE_MAX = 32
DEVICE_COUNTERS_PER_SLICE_MAX = 1024
BINDING_CONDITIONS_MAX = 4
POOL_NAME_MAX = 253
COUNTER_SETS_MAX = 8  # 1.35+: per slice
COUNTERS_PER_SET_MAX = 32  # 1.35+
CONSUMPTIONS_PER_DEVICE_MAX = 2  # 1.35+
DEVICES_WITH_ADVANCED_MAX = 64  # 1.35+: taints or consumesCounters (and list attributes, 1.36+)
_NUMERIC = r"(0|[1-9]\d*)"
_PRE = r"(0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)"
_BUILD = r"[0-9a-zA-Z-]+"
_SEMVER = re.compile(rf"^{_NUMERIC}\.{_NUMERIC}\.{_NUMERIC}(-{_PRE}(\.{_PRE})*)?(\+{_BUILD}(\.{_BUILD})*)?$")
_NODE_FIELDS = ("nodeName", "nodeSelector", "allNodes", "perDeviceNodeSelection")


def _key(name: str, limit: int = 63 + 1 + 32) -> str:
    """A map key as Kubernetes shows it in a field path: cut in the middle when longer than ``limit``."""
    limit = max(limit, 16)
    if len(name) <= limit:
        return name
    keep = limit - 3
    return name[: (keep + 1) // 2] + "..." + name[len(name) - keep // 2 :]


def pool_name(name: str, path: str) -> Errors:
    if not name:
        return [required(path)]
    errors: Errors = [too_long(path, POOL_NAME_MAX)] if len(name) > POOL_NAME_MAX else []
    for part in name.split("/"):
        errors += names.each(path, part, names.dns1123_subdomain(part))
    return errors


@functools.lru_cache(maxsize=4096)
def _good_name(name: str) -> bool:
    return not qualified(name, "")


@functools.lru_cache(maxsize=4096)
def _good_version(version: str) -> bool:
    return len(version) <= VALUE_MAX and _SEMVER.match(version) is not None


def _plain_attribute(name: str, value: Any) -> bool:
    """The common case, checked quickly: a valid name and exactly one valid value."""
    if not isinstance(value, dict) or len(value) != 1 or not _good_name(name):
        return False
    kind, item = next(iter(value.items()))
    if kind == "string":
        return len(item) <= VALUE_MAX
    return kind in ("int", "bool") or (kind == "version" and _good_version(item))


LIST_KINDS = {
    "ints": "IntValues",
    "bools": "BoolValues",
    "strings": "StringValues",
    "versions": "VersionValues",
}
ATTRIBUTE_VALUES_MAX = 48  # ResourceSliceMaxAttributeValuesPerDevice: scalars and list items together
DEVICES_WITH_LISTS_MAX = 64  # ResourceSliceMaxDevicesWithAdvancedFeatures


def _has_lists(spec: dict[str, Any] | None) -> bool:
    return any(
        isinstance(a, dict) and any(k in a for k in LIST_KINDS)
        for d in (spec or {}).get("devices") or ()
        if isinstance(d, dict)
        for a in (d.get("attributes") or {}).values()
    )


def drop_list_attributes(spec: dict[str, Any], old: dict[str, Any] | None) -> None:
    """kube-apiserver with DRAListTypeAttributes off: a write drops the list fields of attributes (an attribute
    holding only a list is then refused as empty), unless the stored slice already has lists."""
    if _has_lists(old):
        return
    for device in spec.get("devices") or ():
        for attribute in (device.get("attributes") or {}).values() if isinstance(device, dict) else ():
            for kind in LIST_KINDS:
                if isinstance(attribute, dict):
                    attribute.pop(kind, None)


def _value_count(attributes: dict[str, Any]) -> int:
    count = 0
    for value in attributes.values():
        lists = [v for k, v in value.items() if k in LIST_KINDS and v] if isinstance(value, dict) else []
        count += sum(len(v) for v in lists) if lists else 1
    return count


def _list_values(value: dict[str, Any], path: str) -> Errors:
    errors: Errors = []
    for kind in LIST_KINDS:
        if kind not in value:
            continue
        items = value[kind] or []
        if not items:
            errors.append(invalid_value(f"{path}.{kind}", Literal("[]"), "must not be empty if specified"))
        for i, item in enumerate(items):
            here = f"{path}.{kind}[{i}]"
            if kind == "strings" and len(str(item)) > VALUE_MAX:
                errors.append(too_long(here, VALUE_MAX))
            if kind == "versions":
                if not _SEMVER.match(str(item)):
                    errors.append(
                        invalid_value(
                            here, str(item), "must be a string compatible with semver.org spec 2.0.0"
                        )
                    )
                if len(str(item)) > VALUE_MAX:
                    errors.append(too_long(here, VALUE_MAX))
    return errors


def _attribute(value: Any, path: str) -> Errors:
    value = value if isinstance(value, dict) else {}
    errors: Errors = _list_values(value, path)
    if "string" in value and len(str(value["string"])) > VALUE_MAX:
        errors.append(too_long(f"{path}.string", VALUE_MAX))
    if "version" in value:
        version = str(value["version"])
        if not _SEMVER.match(version):
            errors.append(
                invalid_value(
                    f"{path}.version", version, "must be a string compatible with semver.org spec 2.0.0"
                )
            )
        if len(version) > VALUE_MAX:
            errors.append(too_long(f"{path}.version", VALUE_MAX))
    present = [k for k in ("int", "bool", "string", "version", *LIST_KINDS) if k in value]
    if not present:
        errors.append(required(path, "exactly one value must be specified"))
    elif len(present) > 1:
        shown = {go: value.get(wire) for wire, go in _GO_ATTRIBUTE.items()}
        errors.append(invalid_value(path, Literal(_go_struct(shown)), "exactly one value must be specified"))
    return errors


_GO_ATTRIBUTE = {
    "int": "IntValue",
    "bool": "BoolValue",
    "string": "StringValue",
    "version": "VersionValue",
}
"""The Go struct kube-apiserver prints for an attribute with two values: 1.34's, the version this server claims
(it has no list fields; tests/badinput/real.yaml holds what v1.34.4 printed)."""


def _go_struct(fields: dict[str, Any]) -> str:
    parts = []
    for name, value in fields.items():
        if value is None:
            rendered = "null"
        elif isinstance(value, bool):
            rendered = "true" if value else "false"
        elif isinstance(value, str):
            rendered = '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
        else:
            rendered = str(value)
        parts.append(f'"{name}":{rendered}')
    return "{" + ",".join(parts) + "}"


def _capacity(value: Any, path: str, multi: bool) -> Errors:
    policy = value.get("requestPolicy") if isinstance(value, dict) else None
    if policy is None:
        return []
    if not multi:
        return [forbidden(f"{path}.requestPolicy", "allowMultipleAllocations must be true")]
    if policy.get("validValues") and policy.get("validRange") is not None:
        return [
            forbidden(
                f"{path}.requestPolicy",
                'exactly one policy can be specified, cannot specify "validValues" and "validRange" at the same time',
            )
        ]
    if (policy.get("validValues") or policy.get("validRange") is not None) and policy.get("default") is None:
        which = "validValues" if policy.get("validValues") else "validRange"
        return [required(f"{path}.requestPolicy.default", f"required when {which} is defined")]
    return []


def _taint(taint: dict[str, Any], path: str, kube: KubeVersion) -> Errors:
    errors = names.label_name(f"{path}.key", str(taint.get("key") or ""))
    value = str(taint.get("value") or "")
    if value:
        errors += names.each(f"{path}.value", value, names.label_value(value))
    effect = taint.get("effect") or ""
    if not effect:
        errors.append(required(f"{path}.effect"))
    elif effect not in kube.taint_effects:
        errors.append(not_supported(f"{path}.effect", effect, kube.taint_effects))
    return errors


def taint_rule(spec: dict[str, Any], kube: KubeVersion) -> Errors:
    """A DeviceTaintRule's spec: the names its selector matches (a driver name, a pool name, a device name), then
    its one taint, validated as a device's."""
    selector = spec.get("deviceSelector")
    selector = selector if isinstance(selector, dict) else {}
    errors: Errors = []
    driver, pool, device = (str(selector.get(k) or "") for k in ("driver", "pool", "device"))
    if driver:
        errors += names.driver_name("spec.deviceSelector.driver", driver)
    if pool:
        errors += pool_name(pool, "spec.deviceSelector.pool")
    if device:
        errors += names.each("spec.deviceSelector.device", device, names.dns1123_label(device))
    taint = spec.get("taint")
    if not isinstance(taint, dict) or not taint:
        return [*errors, required("spec.taint")]
    return errors + _taint(taint, "spec.taint", kube)


def _counters(counters: Any, path: str) -> Errors:
    errors: Errors = []
    for name in counters or {}:
        errors += names.each(f"{path}[{_key(name, 63)}]", name, names.dns1123_label(name))
    return errors


def _device(
    device: dict[str, Any], path: str, sets: dict[str, set[str]] | None, per_device: bool, kube: KubeVersion
) -> Errors:
    """``sets``: the slice's counter sets, which the device's consumesCounters must name (1.34); None from 1.35,
    where they may be in another slice of the pool."""
    name = str(device.get("name") or "")
    errors = names.each(f"{path}.name", name, names.dns1123_label(name))
    attributes, capacity = device.get("attributes") or {}, device.get("capacity") or {}
    if len(attributes) + len(capacity) > ATTRIBUTES_MAX:
        errors.append(
            invalid_value(
                path,
                len(attributes) + len(capacity),
                f"the total number of attributes and capacities must not exceed {ATTRIBUTES_MAX}",
            )
        )
    values = _value_count(attributes)
    if values > ATTRIBUTE_VALUES_MAX:
        errors.append(
            invalid_value(
                path, values, f"the total number of attribute values must not exceed {ATTRIBUTE_VALUES_MAX}"
            )
        )
    for key, value in attributes.items():
        if _plain_attribute(key, value):
            continue
        here = f"{path}.attributes[{_key(key)}]"
        errors += qualified(key, here) + _attribute(value, here)
    multi = device.get("allowMultipleAllocations") is True
    for key, value in capacity.items():
        if _good_name(key) and not (isinstance(value, dict) and value.get("requestPolicy") is not None):
            continue
        here = f"{path}.capacity[{_key(key)}]"
        errors += qualified(key, here) + _capacity(value, here, multi)
    errors += listed(
        device.get("taints"), kube.device_taints_max, f"{path}.taints", lambda t, p: _taint(t, p, kube)
    )
    consumes = device.get("consumesCounters") or []
    errors += unique(consumes, f"{path}.consumesCounters", lambda c: c.get("counterSet", ""), "counterSet")
    if sets is None and len(consumes) > CONSUMPTIONS_PER_DEVICE_MAX:
        errors.append(too_many(f"{path}.consumesCounters", len(consumes), CONSUMPTIONS_PER_DEVICE_MAX))
    total = 0
    for i, use in enumerate(consumes):
        here = f"{path}.consumesCounters[{i}]"
        counters = use.get("counters") or {}
        total += len(counters)
        if not use.get("counterSet"):
            errors.append(required(f"{here}.counterSet"))
        errors += [required(f"{here}.counters")] if not counters else _counters(counters, f"{here}.counters")
        if sets is None:
            if len(counters) > COUNTERS_PER_SET_MAX:
                errors.append(too_many(f"{here}.counters", len(counters), COUNTERS_PER_SET_MAX))
            continue
        known = sets.get(str(use.get("counterSet") or ""))
        if known is None:
            errors.append(
                invalid_value(
                    f"{here}.counterSet",
                    use.get("counterSet", ""),
                    "must reference a counterSet defined in the ResourceSlice sharedCounters",
                )
            )
            continue
        for counter in counters:
            if counter not in known:
                errors.append(
                    invalid_value(
                        f"{here}.counters",
                        counter,
                        "must reference a counter defined in the ResourceSlice sharedCounters",
                    )
                )
    if sets is not None and total > COUNTERS_PER_DEVICE_MAX:
        errors.append(
            invalid_value(
                path, total, f"the total number of counters must not exceed {COUNTERS_PER_DEVICE_MAX}"
            )
        )
    errors += _node_access(device, path, per_device)
    return errors + _binding(device, path)


def _node_access(device: dict[str, Any], path: str, per_device: bool) -> Errors:
    set_here = [f for f in _NODE_FIELDS[:3] if device.get(f) is not None]
    if not per_device:
        if set_here:
            return [
                invalid_value(
                    path,
                    Literal("null"),
                    "`nodeName`, `nodeSelector` and `allNodes` can only be set if `perDeviceNodeSelection` is set to "
                    "true in the ResourceSlice spec",
                )
            ]
        return []
    why = (
        "exactly one of `nodeName`, `nodeSelector`, or `allNodes` is required when `perDeviceNodeSelection` is "
        "set to true in the ResourceSlice spec"
    )
    if not set_here:
        return [required(path, why)]
    if len(set_here) > 1:
        return [invalid_value(path, "{" + ", ".join(f"`{f}`" for f in set_here) + "}", why)]
    return []


def _binding(device: dict[str, Any], path: str) -> Errors:
    conditions = device.get("bindingConditions") or []
    failures = device.get("bindingFailureConditions") or []
    errors: Errors = []
    for field, items in (("bindingConditions", conditions), ("bindingFailureConditions", failures)):
        errors += listed(
            items, BINDING_CONDITIONS_MAX, f"{path}.{field}", lambda v, p: names.label_name(p, str(v))
        )
        errors += unique(items, f"{path}.{field}", str)
    if failures and not conditions:
        errors.append(
            invalid_value(
                f"{path}.bindingConditions",
                [],
                "bindingConditions are required to use bindingFailureConditions",
            )
        )
    if conditions and not failures:
        errors.append(
            invalid_value(
                f"{path}.bindingFailureConditions",
                [],
                "bindingFailureConditions are required to use bindingConditions",
            )
        )
    return errors


def _counter_set(item: dict[str, Any], path: str) -> Errors:
    name = str(item.get("name") or "")
    errors = (
        [required(f"{path}.name")]
        if not name
        else names.each(f"{path}.name", name, names.dns1123_label(name))
    )
    counters = item.get("counters") or {}
    return errors + (
        [required(f"{path}.counters")] if not counters else _counters(counters, f"{path}.counters")
    )


def slice_spec(spec: dict[str, Any], old: dict[str, Any] | None, kube: KubeVersion) -> Errors:
    errors = names.driver_name("spec.driver", str(spec.get("driver") or ""))
    pool = spec.get("pool") or {}
    errors += pool_name(str(pool.get("name") or ""), "spec.pool.name")
    if (pool.get("resourceSliceCount") or 0) <= 0:
        errors.append(
            invalid_value(
                "spec.pool.resourceSliceCount",
                pool.get("resourceSliceCount") or 0,
                "must be greater than zero",
            )
        )
    if (pool.get("generation") or 0) < 0:
        errors.append(
            invalid_value("spec.pool.generation", pool["generation"], "must be greater than or equal to zero")
        )
    if old is not None:
        for path, new_value, old_value in (
            ("spec.pool.name", pool.get("name"), (old.get("pool") or {}).get("name")),
            ("spec.driver", spec.get("driver"), old.get("driver")),
            ("spec.nodeName", spec.get("nodeName"), old.get("nodeName")),
        ):
            if new_value != old_value:
                errors.append(invalid_value(path, new_value or "", "field is immutable"))
    errors += _where(spec)
    if kube.counters_apart:
        return errors + _devices_and_counters_apart(spec, kube)
    sets = {str(s.get("name") or ""): set(s.get("counters") or {}) for s in spec.get("sharedCounters") or ()}
    per_device = spec.get("perDeviceNodeSelection") is True
    devices = spec.get("devices")
    most = DEVICES_WITH_LISTS_MAX if _has_lists(spec) else DEVICES_MAX
    errors += listed(devices, most, "spec.devices", lambda d, p: _device(d, p, sets, per_device, kube))
    errors += unique(devices, "spec.devices", lambda d: d.get("name", ""), "name")
    consumed = sum(
        len(c.get("counters") or {}) for d in devices or () for c in d.get("consumesCounters") or ()
    )
    if consumed > DEVICE_COUNTERS_PER_SLICE_MAX:
        errors.append(
            invalid_value(
                "spec.devices",
                consumed,
                f"the total number of counters in devices must not exceed {DEVICE_COUNTERS_PER_SLICE_MAX}",
            )
        )
    shared = spec.get("sharedCounters") or []
    if sum(len(s.get("counters") or {}) for s in shared) > SHARED_COUNTERS_MAX:
        errors.append(
            invalid_value(
                "spec.sharedCounters",
                sum(len(s.get("counters") or {}) for s in shared),
                f"the total number of shared counters must not exceed {SHARED_COUNTERS_MAX}",
            )
        )
    errors += listed(shared, -1, "spec.sharedCounters", _counter_set)
    return errors + unique(shared, "spec.sharedCounters", lambda s: s.get("name", ""), "name")


def _advanced(device: Any) -> bool:
    return isinstance(device, dict) and bool(device.get("taints") or device.get("consumesCounters"))


def _devices_and_counters_apart(spec: dict[str, Any], kube: KubeVersion) -> Errors:
    """1.35+: devices or counter sets; at most 64 devices where one has taints, consumesCounters (or, 1.36+, list
    attributes), at most 8 counter sets of at most 32 counters each."""
    errors: Errors = []
    devices, shared = spec.get("devices"), spec.get("sharedCounters")
    if devices is not None and shared is not None:
        errors.append(invalid_value("spec", "", "only one of `sharedCounters` or `devices` is allowed"))
    per_device = spec.get("perDeviceNodeSelection") is True
    advanced = _has_lists(spec) or any(_advanced(d) for d in devices or ())
    most = DEVICES_WITH_ADVANCED_MAX if advanced else DEVICES_MAX
    errors += listed(devices, most, "spec.devices", lambda d, p: _device(d, p, None, per_device, kube))
    errors += unique(devices, "spec.devices", lambda d: d.get("name", ""), "name")

    def counter_set(item: dict[str, Any], path: str) -> Errors:
        found = _counter_set(item, path)
        counters = item.get("counters") or {}
        if len(counters) > COUNTERS_PER_SET_MAX:
            found.append(too_many(f"{path}.counters", len(counters), COUNTERS_PER_SET_MAX))
        return found

    errors += listed(shared, COUNTER_SETS_MAX, "spec.sharedCounters", counter_set)
    return errors + unique(shared or [], "spec.sharedCounters", lambda s: s.get("name", ""), "name")


def _where(spec: dict[str, Any]) -> Errors:
    errors: Errors = []
    chosen: list[str] = []
    node = spec.get("nodeName")
    if node is not None:
        if node:
            chosen.append("`nodeName`")
            errors += names.each("spec.nodeName", node, names.dns1123_subdomain(node))
        else:
            errors.append(
                invalid_value("spec.nodeName", node, "must be either unset or set to a non-empty string")
            )
    if spec.get("nodeSelector") is not None:
        chosen.append("`nodeSelector`")
        selector = spec["nodeSelector"]
        errors += node_selector(selector, "spec.nodeSelector")
        terms = selector.get("nodeSelectorTerms") or []
        if len(terms) != 1:
            errors.append(
                invalid_value(
                    "spec.nodeSelector.nodeSelectorTerms", terms, "must have exactly one node selector term"
                )
            )
    for field in ("allNodes", "perDeviceNodeSelection"):
        value = spec.get(field)
        if value is True:
            chosen.append(f"`{field}`")
        elif value is not None:
            errors.append(invalid_value(f"spec.{field}", value, "must be either unset or set to true"))
    which = "exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required"
    if not chosen:
        errors.append(required("spec", which))
    elif len(chosen) > 1:
        errors.append(
            invalid_value("spec", "{" + ", ".join(chosen) + "}", f"{which}, but multiple fields are set")
        )
    return errors
