"""CDI spec files for prepared claims, with NVIDIA's naming (vendor k8s.gpu.nvidia.com, class claim).

One transient spec per claim, ``<cdi dir>/k8s.gpu.nvidia.com-claim_<claimUID>.json``, holding one CDI
device per allocated device named ``<claimUID>-<canonical device name>`` (``...-gpu-0``); the kubelet gets
the fully qualified id ``k8s.gpu.nvidia.com/claim=<claimUID>-gpu-0``. Each file declares the lowest
``cdiVersion`` its content needs, so that older container runtimes accept it (containerd 1.7.0 reads at
most 0.5.0).

No ``device`` class base spec is written (NVIDIA writes ``k8s.gpu.nvidia.com-device_base.json`` with
``gpu-<minor>`` devices): every claim spec carries its complete edits (device nodes, control nodes, env),
so a claim needs exactly one CDI id per device and there is no long-lived node-wide file that goes stale
when MIG instances are created or destroyed (the stale-spec complaints in NVIDIA's tracker), nor a second
file that must exist before the first container starts. The claim files are regenerated from the checkpoint
at start-up.

``NVIDIA_VISIBLE_DEVICES`` is written once per claim, in the spec-wide edits, listing the UUIDs of all the
claim's devices: per-device entries of the same variable would overwrite one another (CDI applies edits in
order, the last value wins). Device access itself comes from the device nodes, which CDI merges across
devices and claims.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gpudra.agent.atomic_files import remove_temp_files, write_atomically
from gpudra.errors import InvalidInputError

NVIDIA_VENDOR = "k8s.gpu.nvidia.com"
CLAIM_CLASS = "claim"
DEFAULT_CDI_DIR = Path("/var/run/cdi")
CDI_VERSIONS = ("0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0")

_KIND_PART = re.compile(r"^[A-Za-z]([A-Za-z0-9_.-]*[A-Za-z0-9])?$")
_DEVICE_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9_.:-]*[A-Za-z0-9])?$")
_CLAIM_UID = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?$")
_ENV = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


@dataclass(frozen=True, slots=True)
class DeviceNode:
    path: str
    host_path: str | None = None
    type: str | None = None
    major: int | None = None
    minor: int | None = None
    file_mode: int | None = None
    permissions: str | None = None
    uid: int | None = None
    gid: int | None = None

    def to_json(self) -> dict[str, Any]:
        names = {"host_path": "hostPath", "file_mode": "fileMode"}
        return {
            names.get(key, key): getattr(self, key)
            for key in self.__slots__
            if getattr(self, key) is not None
        }


@dataclass(frozen=True, slots=True)
class Mount:
    host_path: str
    container_path: str
    options: Sequence[str] = ()
    type: str | None = None

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"hostPath": self.host_path, "containerPath": self.container_path}
        if self.options:
            body["options"] = list(self.options)
        if self.type:
            body["type"] = self.type
        return body


@dataclass(frozen=True, slots=True)
class Hook:
    hook_name: str
    path: str
    args: Sequence[str] = ()
    env: Sequence[str] = ()
    timeout: int | None = None

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"hookName": self.hook_name, "path": self.path}
        if self.args:
            body["args"] = list(self.args)
        if self.env:
            body["env"] = list(self.env)
        if self.timeout is not None:
            body["timeout"] = self.timeout
        return body


@dataclass(frozen=True, slots=True)
class ContainerEdits:
    env: Sequence[str] = ()
    device_nodes: Sequence[DeviceNode] = ()
    mounts: Sequence[Mount] = ()
    hooks: Sequence[Hook] = ()
    additional_gids: Sequence[int] = ()

    def __add__(self, other: ContainerEdits) -> ContainerEdits:
        return ContainerEdits(
            env=[*self.env, *other.env],
            device_nodes=[*self.device_nodes, *other.device_nodes],
            mounts=[*self.mounts, *other.mounts],
            hooks=[*self.hooks, *other.hooks],
            additional_gids=[*self.additional_gids, *other.additional_gids],
        )

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {}
        if self.env:
            body["env"] = list(self.env)
        if self.device_nodes:
            body["deviceNodes"] = [d.to_json() for d in self.device_nodes]
        if self.mounts:
            body["mounts"] = [m.to_json() for m in self.mounts]
        if self.hooks:
            body["hooks"] = [h.to_json() for h in self.hooks]
        if self.additional_gids:
            body["additionalGids"] = list(self.additional_gids)
        return body


@dataclass(frozen=True, slots=True)
class CDIDevice:
    name: str
    container_edits: ContainerEdits
    annotations: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CDISpec:
    vendor: str
    class_name: str
    devices: Sequence[CDIDevice]
    container_edits: ContainerEdits = ContainerEdits()
    annotations: Mapping[str, str] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        return f"{self.vendor}/{self.class_name}"

    def qualified_ids(self) -> list[str]:
        return [qualified_name(self.vendor, self.class_name, d.name) for d in self.devices]

    def to_json(self) -> dict[str, Any]:
        """The spec document, validated, with the lowest cdiVersion it needs."""
        validate_spec(self)
        body: dict[str, Any] = {"cdiVersion": required_version(self), "kind": self.kind}
        if self.annotations:
            body["annotations"] = dict(self.annotations)
        body["devices"] = []
        for device in self.devices:
            entry: dict[str, Any] = {"name": device.name}
            if device.annotations:
                entry["annotations"] = dict(device.annotations)
            entry["containerEdits"] = device.container_edits.to_json()
            body["devices"].append(entry)
        edits = self.container_edits.to_json()
        if edits:
            body["containerEdits"] = edits
        return body


def _all_edits(spec: CDISpec) -> list[ContainerEdits]:
    return [spec.container_edits, *(d.container_edits for d in spec.devices)]


def required_version(spec: CDISpec) -> str:
    """The lowest CDI spec version that can express ``spec``."""
    edits = _all_edits(spec)
    if any(e.additional_gids for e in edits):
        return "0.7.0"
    if spec.annotations or any(d.annotations for d in spec.devices) or "." in spec.class_name:
        return "0.6.0"
    if any(not d.name[:1].isalpha() for d in spec.devices) or any(
        n.host_path for e in edits for n in e.device_nodes
    ):
        return "0.5.0"
    if any(m.type for e in edits for m in e.mounts):
        return "0.4.0"
    return "0.3.0"


def validate_claim_uid(claim_uid: str) -> str:
    """The UID, when it can name a file or directory of its own (no path separator, no leading dot)."""
    if not _CLAIM_UID.match(claim_uid):
        raise InvalidInputError(f"claim UID {claim_uid!r} cannot name a CDI spec file")
    return claim_uid


def validate_vendor(vendor: str) -> None:
    if not _KIND_PART.match(vendor):
        raise InvalidInputError(
            f"CDI vendor {vendor!r} must start with a letter, end with a letter or digit, "
            "and contain only letters, digits, '_', '-' and '.'"
        )


def validate_class(class_name: str) -> None:
    if not _KIND_PART.match(class_name):
        raise InvalidInputError(
            f"CDI class {class_name!r} must start with a letter, end with a letter or digit, "
            "and contain only letters, digits, '_', '-' and '.'"
        )


def validate_device_name(name: str) -> None:
    if not _DEVICE_NAME.match(name):
        raise InvalidInputError(
            f"CDI device name {name!r} must start and end with a letter or digit "
            "and contain only letters, digits, '_', '-', '.' and ':'"
        )


def qualified_name(vendor: str, class_name: str, device_name: str) -> str:
    """The fully qualified CDI device id ``vendor/class=name``, after checking each part."""
    validate_vendor(vendor)
    validate_class(class_name)
    validate_device_name(device_name)
    return f"{vendor}/{class_name}={device_name}"


def validate_spec(spec: CDISpec) -> None:
    validate_vendor(spec.vendor)
    validate_class(spec.class_name)
    if not spec.devices:
        raise InvalidInputError(f"CDI spec {spec.kind} has no devices")
    seen: set[str] = set()
    for device in spec.devices:
        validate_device_name(device.name)
        if device.name in seen:
            raise InvalidInputError(f"CDI spec {spec.kind} declares device {device.name!r} twice")
        seen.add(device.name)
    for edits in _all_edits(spec):
        for variable in edits.env:
            if not _ENV.match(variable):
                raise InvalidInputError(f"CDI env entry {variable!r} is not NAME=value")
        for node in edits.device_nodes:
            if not node.path.startswith("/"):
                raise InvalidInputError(f"CDI device node path {node.path!r} is not absolute")
        for mount in edits.mounts:
            if not mount.container_path.startswith("/"):
                raise InvalidInputError(f"CDI mount path {mount.container_path!r} is not absolute")
        for gid in edits.additional_gids:
            if gid <= 0:
                raise InvalidInputError(f"CDI additionalGids entry {gid} must be a positive group id")


# NVIDIA device nodes ---------------------------------------------------------------------------------

CONTROL_DEVICE_NODES: tuple[DeviceNode, ...] = (
    DeviceNode(path="/dev/nvidiactl"),
    DeviceNode(path="/dev/nvidia-uvm"),
    DeviceNode(path="/dev/nvidia-uvm-tools"),
)
"""Nodes every CUDA container needs besides its GPUs' own."""


def gpu_device_nodes(minor: int) -> tuple[DeviceNode, ...]:
    return (DeviceNode(path=f"/dev/nvidia{minor}"),)


def mig_device_nodes(parent_minor: int, gi_cap_minor: int, ci_cap_minor: int) -> tuple[DeviceNode, ...]:
    """A MIG device: its parent GPU plus the access capabilities of its GPU and compute instance
    (minors from /proc/driver/nvidia-caps/mig-minors)."""
    return (
        DeviceNode(path=f"/dev/nvidia{parent_minor}"),
        DeviceNode(path=f"/dev/nvidia-caps/nvidia-cap{gi_cap_minor}"),
        DeviceNode(path=f"/dev/nvidia-caps/nvidia-cap{ci_cap_minor}"),
    )


@dataclass(frozen=True, slots=True)
class ClaimDevice:
    """One prepared device of a claim: its canonical name (``gpu-0``, ``gpu-0-mig-1g12gb-19-0``), the UUIDs it
    exposes, and the edits it needs (device nodes, extra env such as per-device MPS limits, mounts)."""

    canonical_name: str
    uuids: Sequence[str]
    edits: ContainerEdits


def under_dev_root(edits: ContainerEdits, dev_root: str) -> ContainerEdits:
    """``edits`` with the host side of each NVIDIA device node (``/dev/nvidia*`` without numbers of its own) under
    ``dev_root``: ``/`` when the driver is installed on the host, as most nodes have it; the driver root
    (``/run/nvidia/driver`` under the GPU Operator's driver container) when it holds a ``dev`` of its own
    (:func:`gpudra.agent.devicenodes.device_root`). The runtime reads the node's type and numbers from
    ``<dev_root>/dev/...``; in the container it keeps its ``/dev`` path."""
    root = dev_root.rstrip("/")
    if not root:
        return edits
    nodes = [
        replace(n, host_path=root + n.path)
        if n.host_path is None and n.major is None and n.path.startswith("/dev/nvidia")
        else n
        for n in edits.device_nodes
    ]
    return replace(edits, device_nodes=nodes)


MIG_CAP_PREFIX = "/dev/nvidia-caps/nvidia-cap"
MIG_CAP_FILE_MODE = 0o444
"""The mode the NVIDIA driver gives a MIG instance's access capability (``DeviceFileMode: 292`` in its
``/proc/driver/nvidia/capabilities/gpu<N>/mig/gi<G>[/ci<C>]/access`` file)."""


def with_cap_numbers(edits: ContainerEdits, caps_major: int | None) -> ContainerEdits:
    """``edits`` with each MIG access capability node (``/dev/nvidia-caps/nvidia-cap<minor>``) a character device of
    major ``caps_major`` (the ``nvidia-caps`` line of /proc/devices) and its own minor: the runtime makes it in the
    container, so the host need not have it. The host has one only where something ran ``nvidia-modprobe -f`` for
    the instance, and a CDI spec naming a host node that is not there stops the container at its creation.
    ``None`` (a simulated node, whose stand-in nodes the host has): left as paths."""
    if caps_major is None:
        return edits
    nodes = [
        n if (minor := _cap_minor(n)) is None
        else replace(n, type="c", major=caps_major, minor=minor, file_mode=MIG_CAP_FILE_MODE)
        for n in edits.device_nodes
    ]  # fmt: skip
    return replace(edits, device_nodes=nodes)


def _cap_minor(node: DeviceNode) -> int | None:
    """The minor of a MIG capability node named by path alone (the driver names it by its minor), else None."""
    number = node.path.removeprefix(MIG_CAP_PREFIX)
    return int(number) if node.major is None and number != node.path and number.isdigit() else None


def claim_device_name(claim_uid: str, canonical_name: str) -> str:
    return f"{claim_uid}-{canonical_name}"


def claim_device_id(claim_uid: str, canonical_name: str, *, vendor: str = NVIDIA_VENDOR) -> str:
    """The CDI id the kubelet gets for one device of a claim."""
    return qualified_name(vendor, CLAIM_CLASS, claim_device_name(claim_uid, canonical_name))


def build_claim_spec(
    claim_uid: str,
    devices: Sequence[ClaimDevice],
    *,
    common_edits: ContainerEdits = ContainerEdits(device_nodes=CONTROL_DEVICE_NODES),
    vendor: str = NVIDIA_VENDOR,
    dev_root: str = "/",
    caps_major: int | None = None,
) -> CDISpec:
    """The spec of one claim. Spec-wide edits: ``common_edits`` (control nodes; driver library mounts and
    hooks when the agent injects them) and NVIDIA_VISIBLE_DEVICES with all the claim's UUIDs. What only some of
    its devices need (their device nodes, MPS client setup) is in those devices' own edits. NVIDIA device nodes
    are read from under ``dev_root`` on the host (:func:`under_dev_root`), but MIG capabilities, given
    ``caps_major``, are numbered (:func:`with_cap_numbers`).
    """
    uuids = [u for d in devices for u in d.uuids]
    visible = ContainerEdits(env=[f"NVIDIA_VISIBLE_DEVICES={','.join(uuids) or 'void'}"])
    return CDISpec(
        vendor=vendor,
        class_name=CLAIM_CLASS,
        devices=[
            CDIDevice(
                claim_device_name(claim_uid, d.canonical_name),
                under_dev_root(with_cap_numbers(d.edits, caps_major), dev_root),
            )
            for d in devices
        ],
        container_edits=under_dev_root(common_edits, dev_root) + visible,
    )


def _spec_bytes(document: Mapping[str, Any]) -> bytes:
    """A spec file's content: compact (an indented dump takes json's pure-Python encoder, ~10x slower, on every
    prepare; ``jq . <file>`` shows it indented)."""
    return (json.dumps(document, separators=(",", ":")) + "\n").encode()


class ClaimSpecDir:
    """The per-claim spec files of one vendor in one CDI directory. Methods do file I/O on small files without a
    sync: a prepare and an unprepare write and delete their spec on the event loop (a worker thread's hand-off
    cost more CPU than the write); reading every spec at start-up goes through ``asyncio.to_thread``.

    A spec is replaced atomically (a reader never sees half a file) but not synced to disk: the checkpoint is the
    durable record, and the agent's start rewrites a prepared claim's spec that is missing, unreadable or
    different, and deletes one no entry owns (:mod:`gpudra.agent.recovery`), so a power cut costs nothing a
    restart does not repair, and /var/run/cdi is a tmpfs on most nodes anyway. Two syncs per write made 56
    prepares at once wait on each other's disk flushes."""

    def __init__(self, directory: Path = DEFAULT_CDI_DIR, *, vendor: str = NVIDIA_VENDOR) -> None:
        validate_vendor(vendor)
        self.directory = directory
        self.vendor = vendor
        self.prefix = f"{vendor}-{CLAIM_CLASS}_"

    def path_for(self, claim_uid: str) -> Path:
        return self.directory / f"{self.prefix}{validate_claim_uid(claim_uid)}.json"

    def write(self, claim_uid: str, spec: CDISpec) -> Path:
        """Write (or replace) the claim's spec atomically; return its path."""
        if spec.vendor != self.vendor or spec.class_name != CLAIM_CLASS:
            raise InvalidInputError(f"spec kind {spec.kind} does not belong in {self.prefix}* files")
        path = self.path_for(claim_uid)
        self.directory.mkdir(parents=True, exist_ok=True)
        write_atomically(path, _spec_bytes(spec.to_json()), durable=False)
        return path

    def write_document(self, claim_uid: str, document: Mapping[str, Any]) -> Path:
        """Write a spec document produced earlier by ``CDISpec.to_json()`` (kept in the checkpoint) again."""
        if document.get("kind") != f"{self.vendor}/{CLAIM_CLASS}" or not document.get("devices"):
            raise InvalidInputError(
                f"document of kind {document.get('kind')!r} does not belong in {self.prefix}*"
            )
        path = self.path_for(claim_uid)
        self.directory.mkdir(parents=True, exist_ok=True)
        write_atomically(path, _spec_bytes(document), durable=False)
        return path

    def read(self, claim_uid: str) -> dict[str, Any] | None:
        """The claim's spec; None when there is none or it is not a JSON document (cut short by a power loss)."""
        try:
            loaded = json.loads(self.path_for(claim_uid).read_bytes())
        except FileNotFoundError:
            return None
        except ValueError:  # not JSON, or not UTF-8
            return None
        return loaded if isinstance(loaded, dict) else None

    def delete(self, claim_uid: str) -> bool:
        """Remove the claim's spec; False when there was none (unprepare is idempotent)."""
        try:
            self.path_for(claim_uid).unlink()
        except FileNotFoundError:
            return False
        return True

    def claim_uids(self) -> list[str]:
        """UIDs of the claims that have a spec file here, sorted (for orphan cleanup at start-up)."""
        if not self.directory.is_dir():
            return []
        return sorted(
            p.name[len(self.prefix) : -len(".json")]
            for p in self.directory.glob(f"{self.prefix}*.json")
            if p.is_file()
        )

    def remove_temp_files(self) -> list[Path]:
        """Remove half-written temp files a crash left behind."""
        if not self.directory.is_dir():
            return []
        return remove_temp_files(self.directory, self.prefix)
