"""Fleet files: ``gpudra up --fleet fleet.yaml``.

A fleet file lists node groups (a profile, how many, names, labels, taints, and per group a driver version, a MIG
configuration and an NVLink domain) and, optionally, profiles of its own in the built-in profiles' format
(``hardware/simulated/profiles.yaml``); a profile may be a recording of a real node (``gpudra hardware record``).
The schema is pydantic; every error names the file and the line. ``--nodes PROFILE:COUNT,...`` is the same fleet written
short: one group per profile.
"""

from __future__ import annotations

import dataclasses
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator

from gpudra.cluster.sim.fleetmig import FleetMig, apply_mig
from gpudra.cluster.sim.yamlpos import located
from gpudra.errors import ConfigurationError
from gpudra.hardware.gpus.catalog import Catalog, load_catalog
from gpudra.hardware.simulated.machine import MachineSpec, machine_of_profile
from gpudra.hardware.simulated.profiles import (
    FABRIC_STATE_COMPLETED,
    FABRIC_STATUS_SUCCESS,
    NAME_PATTERN,
    NODE_PROFILES,
    NVL72_CLIQUE_ID,
    SIMULATION_NAMESPACE,
    EntryModel,
    FabricReading,
    Loc,
    NodeProfile,
    ProfileEntry,
    SpecError,
    node_profile,
    resolve_entry,
)
from gpudra.hardware.simulated.recorded import machine_of_recording, read_recording

API_VERSION: Literal["sim.gpudra.dev/v1alpha1"] = "sim.gpudra.dev/v1alpha1"
MAX_NODES = 10_000
_QUALIFIED = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
_VERSION = r"^\d+\.\d+(\.\d+)?$"
_CUDA = r"^\d+\.\d$"


@dataclass(frozen=True)
class FleetNode:
    """One simulated node: its name, its profile (the ``gpudra.dev/node-profile`` label), its position among the
    nodes of that profile (the tray number in a GB200 rack), Node labels and taints, and its machine (None: the
    profile's, built at start)."""

    name: str
    profile: str
    fleet_index: int
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Mapping[str, str], ...] = ()
    machine: MachineSpec | None = None

    def hardware(self) -> MachineSpec:
        if self.machine is not None:
            return self.machine
        return machine_of_profile(node_profile(self.profile), self.name, self.fleet_index)


class FleetProfile(ProfileEntry):
    """A fleet file's profile entry: the built-in format, plus ``recording`` and the named MIG forms."""

    mig: FleetMig | None = None  # the built-in form, extended
    recording: str | None = Field(
        default=None, description="a `gpudra hardware record` JSON file, relative to the fleet file"
    )

    @model_validator(mode="after")
    def _recording_alone(self) -> FleetProfile:
        if self.recording is not None:
            extra = sorted(
                to_key(k) for k in self.model_fields_set if k not in {"name", "description", "recording"}
            )
            if extra:
                raise ValueError(f"a recorded profile is the node as recorded; remove {', '.join(extra)}")
        return self


class Taint(EntryModel):
    key: str
    value: str = ""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]

    @field_validator("key")
    @classmethod
    def _key(cls, key: str) -> str:
        return _qualified(key, "taint key")

    @field_validator("value")
    @classmethod
    def _value(cls, value: str) -> str:
        return _label_value(value)


class NodeGroup(EntryModel):
    profile: str = Field(description="a built-in profile or one of the file's")
    count: int = Field(default=1, ge=1, le=MAX_NODES)
    name: str | None = Field(default=None, pattern=NAME_PATTERN, description="node names <name>-<i>")
    labels: dict[str, str] = Field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    driver_version: str | None = Field(default=None, pattern=_VERSION)
    cuda_driver_version: str | None = Field(default=None, pattern=_CUDA)
    mig: FleetMig | None = None
    nvlink_domain: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z0-9][-A-Za-z0-9_.]*$",
        description="the NVLink domain (fabric cluster) of the group's GPUs: a name, or a cluster UUID",
    )

    @field_validator("labels")
    @classmethod
    def _labels(cls, labels: dict[str, str]) -> dict[str, str]:
        for key, value in labels.items():
            _qualified(key, "label key")
            _label_value(value)
        return labels


class FleetFile(EntryModel):
    api_version: Literal["sim.gpudra.dev/v1alpha1"] = API_VERSION
    kind: Literal["Fleet"] = "Fleet"
    profiles: tuple[FleetProfile, ...] = ()
    nodes: tuple[NodeGroup, ...] = Field(min_length=1)


def to_key(name: str) -> str:
    return FleetProfile.model_fields[name].alias or name


def _qualified(key: str, what: str) -> str:
    if not _QUALIFIED.match(key) or len(key.rpartition("/")[2]) > 63:
        raise ValueError(f"{key!r} is not a valid {what} ([prefix/]name, name at most 63 characters)")
    return key


def _label_value(value: str) -> str:
    if not _LABEL_VALUE.match(value):
        raise ValueError(f"{value!r} is not a valid label value (at most 63 letters, digits, '-', '_', '.')")
    return value


# -- loading ---------------------------------------------------------------------------------------------------


def load_fleet(path: Path, catalog: Catalog | None = None) -> list[FleetNode]:
    """The nodes of a fleet file; ConfigurationError naming the file, line and field of the first problem."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigurationError(f"cannot read the fleet file {path}: {exc}") from exc
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigurationError(f"{path}: not YAML: {exc}") from exc
    if not isinstance(document, dict):
        raise ConfigurationError(f"{path}: a fleet file is a mapping with `nodes:` (and `profiles:`)")
    document = {k: v for k, v in document.items() if not str(k).startswith("x-")}  # x-*: anchors only
    try:
        fleet = FleetFile.model_validate(document)
    except ValidationError as exc:
        lines = [located(path, text, e["loc"], e["msg"]) for e in exc.errors()[:5]]
        raise ConfigurationError("invalid fleet file:\n  " + "\n  ".join(lines)) from None
    try:
        return resolve_fleet(fleet, catalog or load_catalog(), path.parent)
    except SpecError as exc:
        raise ConfigurationError("invalid fleet file:\n  " + located(path, text, exc.loc, str(exc))) from None


def resolve_fleet(fleet: FleetFile, catalog: Catalog, directory: Path) -> list[FleetNode]:
    """The nodes of a validated fleet; SpecError with the path of the field at fault."""
    sources = _Sources(dict(NODE_PROFILES))
    for i, entry in enumerate(fleet.profiles):
        where: Loc = ("profiles", i)
        if entry.name in sources.profiles or entry.name in sources.recorded:
            raise SpecError(f"profile {entry.name!r} is defined already; give yours another name "
                            f"(`base: {entry.name}` starts from it)", (*where, "name"))  # fmt: skip
        if entry.recording is not None:
            try:
                sources.recorded[entry.name] = read_recording(directory / entry.recording)
            except ConfigurationError as exc:
                raise SpecError(str(exc), (*where, "recording")) from exc
            continue
        try:
            sources.profiles[entry.name] = resolve_entry(entry, sources.profiles, catalog)
        except SpecError as exc:
            raise SpecError(str(exc), (*where, *exc.loc)) from exc
        if entry.mig is not None and (entry.mig.config or entry.mig.entries):
            sources.mig[entry.name] = (entry.mig, (*where, "mig"))
    return sources.nodes(fleet.nodes, catalog)


@dataclass
class _Sources:
    """What node groups are made of: profiles, recordings, and the named MIG configs of the file's profiles."""

    profiles: dict[str, NodeProfile]
    recorded: dict[str, dict[str, Any]] = field(default_factory=dict)
    mig: dict[str, tuple[FleetMig, Loc]] = field(default_factory=dict)

    def nodes(self, groups: Sequence[NodeGroup], catalog: Catalog) -> list[FleetNode]:
        nodes: list[FleetNode] = []
        positions: dict[str, int] = {}  # profile -> nodes of it so far
        numbers: dict[str, int] = {}  # name prefix -> nodes named so far
        copies = {p: sum(g.count for g in groups if g.profile == p) for p in self.recorded}
        for i, group in enumerate(groups):
            where: Loc = ("nodes", i)
            if group.profile not in self.profiles and group.profile not in self.recorded:
                known = ", ".join(sorted([*self.profiles, *self.recorded]))
                raise SpecError(f"unknown profile {group.profile!r} (known: {known})", (*where, "profile"))
            prefix = group.name or group.profile
            for _ in range(group.count):
                position = positions.get(group.profile, 0)
                positions[group.profile] = position + 1
                number = numbers.get(prefix, 0)
                numbers[prefix] = number + 1
                name = f"{prefix}-{number}"
                if group.profile in self.recorded:
                    derive = name if copies[group.profile] > 1 else None
                    machine = machine_of_recording(
                        self.recorded[group.profile], node_name=derive, catalog=catalog
                    )
                else:
                    machine = machine_of_profile(self.profiles[group.profile], name, position)
                    if group.profile in self.mig:
                        machine = _with_mig(machine, *self.mig[group.profile], catalog)
                machine = _overrides(machine, group, catalog, where)
                taints = tuple(t.model_dump() for t in group.taints)
                nodes.append(FleetNode(name, group.profile, position, dict(group.labels), taints, machine))
        return nodes


def _with_mig(machine: MachineSpec, mig: FleetMig, where: Loc, catalog: Catalog) -> MachineSpec:
    try:
        return apply_mig(machine, mig, catalog)
    except SpecError as exc:
        raise SpecError(str(exc), (*where, *exc.loc)) from exc


def _overrides(machine: MachineSpec, group: NodeGroup, catalog: Catalog, where: Loc) -> MachineSpec:
    """The group's driver versions, MIG and NVLink domain on the machine."""
    if group.driver_version is not None:
        machine = dataclasses.replace(machine, driver_version=group.driver_version)
    if group.cuda_driver_version is not None:
        major, minor = group.cuda_driver_version.split(".")
        machine = dataclasses.replace(machine, cuda_driver_version=1000 * int(major) + 10 * int(minor))
    if group.mig is not None:
        machine = _with_mig(machine, group.mig, (*where, "mig"), catalog)
    if group.nvlink_domain is not None:
        machine = _in_domain(machine, group.nvlink_domain, (*where, "nvlinkDomain"))
    return machine


def _in_domain(machine: MachineSpec, domain: str, where: Loc) -> MachineSpec:
    """Every GPU in the NVLink fabric cluster ``domain`` (a UUID, or a name a UUID is derived from)."""
    try:
        cluster = str(uuid.UUID(domain))
    except ValueError:
        cluster = str(uuid.uuid5(SIMULATION_NAMESPACE, f"nvlink-domain/{domain}"))
    gpus = []
    for index, gpu in enumerate(machine.gpus):
        if gpu.fabric is None:
            raise SpecError(f"GPU {index} ({gpu.model_id}) has no NVLink fabric to join", where)
        clique = gpu.fabric.clique_id or NVL72_CLIQUE_ID
        fabric = FabricReading(cluster, clique, FABRIC_STATE_COMPLETED, FABRIC_STATUS_SUCCESS)
        gpus.append(dataclasses.replace(gpu, fabric=fabric))
    return dataclasses.replace(machine, gpus=tuple(gpus))


def fleet_of_groups(groups: Sequence[tuple[str, int]]) -> list[FleetNode]:
    """``--nodes``: one group of each (profile, count), nodes named <profile>-<i>."""
    fleet = FleetFile(nodes=tuple(NodeGroup(profile=p, count=n) for p, n in groups))
    return resolve_fleet(fleet, load_catalog(), Path.cwd())
