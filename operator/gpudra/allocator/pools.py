"""Pools as the allocator sees them: devices of the newest generation of one (driver, pool), validated.

A :class:`PoolView` is built from all slices of one pool (every node's, so completeness is judged on the whole
pool). Devices keep Kubernetes' order: slices sorted by name, devices in slice order. Counter sets are pool-
wide and may come from the device slices (1.34 layout) or from counters-only slices (1.35 layout). A pool with
duplicate device names, duplicate counter-set names, or a device consuming an unknown counter set or counter
is *invalid*: never allocated from, and named in explanations.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, NamedTuple

from gpudra.allocator.cel.celview import CelDevice, Schema, cel_device, schema_of
from gpudra.api.dra import Device, DeviceAttribute, DeviceTaint, ResourceSlice
from gpudra.api.quantity import parse_quantity
from gpudra.errors import InvalidInputError


class DeviceId(NamedTuple):
    driver: str
    pool: str
    device: str

    def __str__(self) -> str:
        return f"{self.driver}/{self.pool}/{self.device}"


class PoolKey(NamedTuple):
    driver: str
    pool: str

    def __str__(self) -> str:
        return f"{self.driver}/{self.pool}"


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """A node as the allocator needs it: its name and labels (for nodeSelector and allNodes slices)."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)


AttrValue = tuple[str, int | bool | str | frozenset[int | bool | str]]
"""An attribute value tagged with its kind, so that int 1 and bool True never compare equal. A list attribute
(DRAListTypeAttributes) is the kind of its values and the set of them."""


def members(value: AttrValue) -> tuple[AttrValue, ...]:
    """The scalar values an attribute stands for in matchAttribute and distinctAttribute: itself for a scalar,
    each distinct value for a list (Kubernetes compares lists as sets, a scalar as a set of one)."""
    kind, v = value
    if type(v) is frozenset:
        return tuple((kind, x) for x in v)
    return (value,)


@dataclass(frozen=True, slots=True)
class CapacitySpec:
    """One published capacity of a device, parsed."""

    name: str
    value: Fraction
    default: Fraction | None = None
    valid_values: tuple[Fraction, ...] | None = None
    range_min: Fraction | None = None
    range_max: Fraction | None = None
    range_step: Fraction | None = None
    has_policy: bool = False


@dataclass(slots=True, eq=False)
class DeviceEntry:
    """One device of a pool, with everything the search needs precomputed once."""

    id: DeviceId
    device: Device
    slice_name: str
    node_name: str | None
    node_selector: dict[str, Any] | None
    all_nodes: bool
    attributes: dict[str, AttrValue]
    taints: tuple[DeviceTaint, ...]
    consumes: tuple[tuple[str, str, Fraction], ...]
    multi: bool
    capacity: dict[str, CapacitySpec]
    binds_to_node: bool
    has_binding_conditions: bool
    view: CelDevice | None = None
    """The CEL view of the device, built with the entry (None when an attribute or capacity is malformed)."""
    view_error: str = ""
    """Why there is no view: every selector fails on this device with it."""
    schema: Schema = ()
    """The device's driver, attribute names and kinds, capacity names (see ``index``); devices with the same
    schema fall in one group of the cluster's index."""
    matches: dict[str, bool | Exception] = field(default_factory=dict)
    """Per CEL expression: the cached outcome (or the runtime error) for this device."""

    def attribute(self, qualified_name: str) -> AttrValue | None:
        return self.attributes.get(qualified_name)


@dataclass(slots=True)
class PoolView:
    """The usable state of one pool (newest generation)."""

    key: PoolKey
    generation: int
    complete: bool
    invalid_reason: str | None
    entries: list[DeviceEntry]
    counter_sets: dict[str, dict[str, Fraction]]
    slices: list[ResourceSlice]
    has_binding_conditions: bool = False
    node_local: str | None = None
    """The node name when every device slice of the pool is bound to that one node."""
    multiplicity: dict[str, int] = field(default_factory=dict)
    """Per qualified attribute name: the most devices of the pool that share one value of it (an upper bound on
    what one request under matchAttribute can take from the pool)."""
    schemas: frozenset[Schema] = frozenset()
    """The schemas of the pool's devices."""
    ids: frozenset[DeviceId] = frozenset()
    has_multi: bool = False
    """Whether some device allows multiple allocations."""
    elsewhere: tuple[DeviceEntry, ...] = ()
    """A node's view only: the devices of the generation's other slices (not the node's), whose allocations
    still consume the pool's counters."""


def qualify(name: str, driver: str) -> str:
    return name if "/" in name else f"{driver}/{name}"


def _attributes(driver: str, device: Device) -> dict[str, AttrValue]:
    out: dict[str, AttrValue] = {}
    attrs = device.attributes or {}
    items: Iterable[tuple[str, DeviceAttribute]] = attrs.items()
    if any("/" in name for name in attrs):
        # Bare names first so that an explicitly qualified duplicate wins, as Kubernetes' lookup does.
        items = sorted(attrs.items(), key=lambda kv: "/" in kv[0])
    for name, attr in items:
        out[qualify(name, driver)] = _tagged(attr)
    return out


def _tagged(attr: DeviceAttribute) -> AttrValue:
    """``(attr.kind, attr.value)`` in one pass; a list attribute's values as a set."""
    if attr.int_ is not None:
        return ("int", attr.int_)
    if attr.bool_ is not None:
        return ("bool", attr.bool_)
    if attr.string is not None:
        return ("string", attr.string)
    if attr.is_list:
        return (attr.kind, frozenset(attr.values))
    return ("version", attr.version or "")


def _capacity(device: Device) -> dict[str, CapacitySpec]:
    out: dict[str, CapacitySpec] = {}
    for name, cap in (device.capacity or {}).items():
        policy = cap.request_policy
        if policy is None:
            out[name] = CapacitySpec(name, parse_quantity(cap.value))
            continue
        rng = policy.valid_range
        out[name] = CapacitySpec(
            name=name,
            value=parse_quantity(cap.value),
            default=parse_quantity(policy.default) if policy.default is not None else None,
            valid_values=tuple(parse_quantity(v) for v in policy.valid_values)
            if policy.valid_values
            else None,
            range_min=parse_quantity(rng.min) if rng is not None else None,
            range_max=parse_quantity(rng.max) if rng is not None and rng.max is not None else None,
            range_step=parse_quantity(rng.step) if rng is not None and rng.step is not None else None,
            has_policy=True,
        )
    return out


def make_entry(slice_: ResourceSlice, device: Device) -> DeviceEntry:
    spec = slice_.spec
    per_device = bool(spec.per_device_node_selection)
    consumes = tuple(
        (c.counter_set, name, parse_quantity(counter.value))
        for c in device.consumes_counters or ()
        for name, counter in c.counters.items()
    )
    view: CelDevice | None = None
    view_error = ""
    try:
        view = cel_device(spec.driver, device)
    except InvalidInputError as error:
        view_error = f"device {device.name} publishes a malformed value: {error}"
    return DeviceEntry(
        id=DeviceId(spec.driver, spec.pool.name, device.name),
        device=device,
        slice_name=slice_.metadata.name or "",
        node_name=device.node_name if per_device else spec.node_name,
        node_selector=device.node_selector if per_device else spec.node_selector,
        all_nodes=bool(device.all_nodes if per_device else spec.all_nodes),
        attributes=_attributes(spec.driver, device),
        taints=tuple(t for t in device.taints or () if t.effect != "None"),
        consumes=consumes,
        multi=bool(device.allow_multiple_allocations),
        capacity=_capacity(device),
        binds_to_node=bool(device.binds_to_node),
        has_binding_conditions=bool(device.binding_conditions),
        view=view,
        view_error=view_error,
        schema=schema_of(view) if view is not None else (),
    )


def build_pool(
    key: PoolKey,
    slices: Iterable[ResourceSlice],
    previous: PoolView | None = None,
    complete: bool | None = None,
) -> PoolView | None:
    """The view of a pool from all its slices, or None when it has none. Entries of slices that did not change
    (same object) are reused from ``previous`` so CEL views and match caches survive unrelated updates.
    ``complete`` overrides the count of the newest generation's slices against resourceSliceCount."""
    all_slices = list(slices)
    if not all_slices:
        return None
    generation = max(s.spec.pool.generation for s in all_slices)
    newest = sorted((s for s in all_slices if s.spec.pool.generation == generation), key=_slice_name)
    wanted = newest[0].spec.pool.resource_slice_count
    if complete is None:
        complete = len(newest) == wanted  # more slices than announced is incomplete too, as in Kubernetes
    reuse: dict[int, list[DeviceEntry]] = {}
    if previous is not None:
        for entry in previous.entries:
            reuse.setdefault(id(entry.device), []).append(entry)
    entries: list[DeviceEntry] = []
    counter_sets: dict[str, dict[str, Fraction]] = {}
    invalid: str | None = None
    seen: set[str] = set()
    for slice_ in newest:
        for counter_set in slice_.spec.shared_counters or ():
            if counter_set.name in counter_sets and invalid is None:
                invalid = f"duplicate counter set name {counter_set.name}"
            counter_sets[counter_set.name] = {
                n: parse_quantity(c.value) for n, c in counter_set.counters.items()
            }
        for device in slice_.spec.devices or ():
            if device.name in seen and invalid is None:
                invalid = f"duplicate device name {device.name}"
            seen.add(device.name)
            cached = reuse.get(id(device))
            entries.append(cached.pop() if cached else make_entry(slice_, device))
    if invalid is None:
        invalid = _check_counters(entries, counter_sets)
    device_nodes = {s.spec.node_name for s in newest if s.spec.devices}
    node_local = None
    if len(device_nodes) == 1:
        only = next(iter(device_nodes))
        node_local = only
    return PoolView(
        key=key,
        generation=generation,
        complete=complete,
        invalid_reason=invalid,
        entries=entries,
        counter_sets=counter_sets,
        slices=newest,
        has_binding_conditions=any(e.has_binding_conditions for e in entries),
        node_local=node_local,
        multiplicity=_multiplicity(entries),
        schemas=frozenset(e.schema for e in entries),
        ids=frozenset(e.id for e in entries),
        has_multi=any(e.multi for e in entries),
    )


def _multiplicity(entries: list[DeviceEntry]) -> dict[str, int]:
    shared: dict[tuple[str, AttrValue], int] = {}
    for entry in entries:
        for name, value in entry.attributes.items():
            for member in members(value):
                shared[(name, member)] = shared.get((name, member), 0) + 1
    most: dict[str, int] = {}
    for (name, _), count in shared.items():
        if count > most.get(name, 0):
            most[name] = count
    return most


def _slice_name(s: ResourceSlice) -> str:
    return s.metadata.name or ""


def _check_counters(entries: list[DeviceEntry], counter_sets: dict[str, dict[str, Fraction]]) -> str | None:
    for entry in entries:
        for set_name, counter, _ in entry.consumes:
            counters = counter_sets.get(set_name)
            if counters is None:
                return f"device {entry.id.device} consumes from unknown counter set {set_name}"
            if counter not in counters:
                return (
                    f"device {entry.id.device} consumes unknown counter {counter} of counter set {set_name}"
                )
    return None


def node_view(node: NodeInfo, key: PoolKey, slices: list[ResourceSlice], view: PoolView) -> PoolView | None:
    """The pool as Kubernetes' allocator sees it from ``node`` (``view`` is the whole pool's newest generation).

    Kubernetes starts from the slices that reach the node: their newest generation is complete when it has
    resourceSliceCount slices; if not, the pool is ignored when any slice of it has a newer generation, and
    otherwise complete when all slices of that generation number resourceSliceCount. So a node can see an
    older generation than the pool's newest, or a complete pool where the whole pool has too many slices.
    Devices come from the slices that reach the node, counters from every slice of the generation."""
    reaching = [s for s in slices if _reaches(node, s)]
    if not reaching:
        return None
    if len(reaching) == len(slices):
        return view
    generation = max(s.spec.pool.generation for s in reaching)
    mine = sorted((s for s in reaching if s.spec.pool.generation == generation), key=_slice_name)
    wanted = mine[0].spec.pool.resource_slice_count
    others: list[ResourceSlice] = []
    if len(mine) == wanted:
        chosen, complete = mine, True
    elif any(s.spec.pool.generation > generation for s in slices):
        return None  # the driver is replacing this generation
    else:
        same = [s for s in slices if s.spec.pool.generation == generation]
        complete = len(same) == wanted
        chosen = mine + [s for s in same if s.spec.shared_counters and s not in mine]
        others = [s for s in same if s.spec.devices and s not in mine]
    if complete and generation == view.generation and len(chosen) == len(view.slices) == wanted:
        return view
    local = build_pool(key, chosen, view, complete=complete)
    if local is not None:
        # The other slices' devices are not the node's, but their counter consumption must be valid too, and
        # their allocations use the pool's counters up as the node's own do.
        local.elsewhere = tuple(make_entry(s, d) for s in others for d in s.spec.devices or ())
        if local.invalid_reason is None:
            local.invalid_reason = _check_counters(list(local.elsewhere), local.counter_sets)
    return local


def _reaches(node: NodeInfo, s: ResourceSlice) -> bool:
    spec = s.spec
    if spec.per_device_node_selection:
        return any(
            node_matches(node, d.node_name, bool(d.all_nodes), d.node_selector) for d in spec.devices or ()
        )
    return node_matches(node, spec.node_name, bool(spec.all_nodes), spec.node_selector)


# ---------------------------------------------------------------- node matching


def node_matches(
    node: NodeInfo, node_name: str | None, all_nodes: bool, selector: dict[str, Any] | None
) -> bool:
    """Whether a slice (or a perDeviceNodeSelection device) with these fields is reachable from ``node``."""
    if node_name:
        return node_name == node.name
    if all_nodes:
        return True
    if selector is not None:
        return selector_matches(selector, node)
    return False


def selector_matches(selector: Mapping[str, Any], node: NodeInfo) -> bool:
    """core/v1 NodeSelector: terms are ORed, requirements in a term ANDed, an empty term matches nothing."""
    terms = selector.get("nodeSelectorTerms") or selector.get("node_selector_terms") or []
    for term in terms:
        exprs = term.get("matchExpressions") or term.get("match_expressions") or []
        fields = term.get("matchFields") or term.get("match_fields") or []
        if not exprs and not fields:
            continue
        if all(_requirement(r, node.labels) for r in exprs) and all(
            _requirement(r, {"metadata.name": node.name}) for r in fields
        ):
            return True
    return False


def _requirement(req: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key, op, values = req.get("key", ""), req.get("operator", ""), list(req.get("values") or [])
    present = key in labels
    value = labels.get(key)
    if op == "In":
        return present and value in values
    if op == "NotIn":
        return not present or value not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt"):
        if not present or len(values) != 1:
            return False
        try:
            have, want = int(value or ""), int(values[0])
        except ValueError:
            return False
        return have > want if op == "Gt" else have < want
    raise InvalidInputError(f"unknown node selector operator {op!r}")
