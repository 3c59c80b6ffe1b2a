"""What preparing a compute-domain claim does on this node (the ClaimPlanner of the compute-domain driver).

A workload's channel claim (device ``channel-0``, ComputeDomainChannelConfig{domainID, allocationMode}):

1. the node must be in an NVLink clique (else the claim waits, with the reason the GPUs give);
2. daemonset mode: the node must not serve another domain already (``check_node_admits``: one IMEX daemon
   per node); the check and the node label are one step under a lock, so two domains arriving together
   cannot both label the node;
3. the node gets the domain's label ``computedomain.gpudra.dev/<uid>=true``, which schedules the domain's
   daemon pod here (daemonset mode); host-managed mode: this agent is the node's daemon, registers the node
   Ready in the domain's clique object, and leases the domain's channel in the clique;
4. the prepare waits (bounded: ``daemon_wait`` seconds) for the domain's daemon on this node to be Ready
   (``check_daemon_ready`` over the clique object ``<uid>.<cliqueID>``, watched); past that the claim fails
   retryably, saying what it waits for, and the kubelet retries;
5. the CDI spec gets the channel device node(s): channel 0 (Single), or every channel (All); host-managed
   mode the domain's leased channel(s).

A daemon claim (device ``daemon-0``, ComputeDomainDaemonConfig{domainID}) gets what the daemon needs: env
``CLIQUE_ID``, ``COMPUTE_DOMAIN_UUID`` and ``IMEX_CONFIG_DIR``, and the per-domain directory
``<plugin dir>/domains/<uid>`` mounted at ``/etc/nvidia-imex`` (the daemon writes nvidia-imex's
configuration and node list there).

Unprepare of the last channel claim of a domain on this node removes the node label (the daemon pod goes),
and in host-managed mode the node's registration and channel lease; also for a claim whose prepare was only
attempted (the kubelet unprepares those too).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, Final, Literal

from gpudra.agent.callsinflight import CallsInFlight
from gpudra.agent.cdi import (
    CLAIM_CLASS,
    CDIDevice,
    CDISpec,
    ContainerEdits,
    DeviceNode,
    Mount,
    claim_device_id,
    claim_device_name,
)
from gpudra.agent.checkpoint import CheckpointStore, ClaimEntry, DeviceRecord
from gpudra.agent.computedomain.leases import ChannelLeases
from gpudra.agent.computedomain.readiness import DaemonReadiness, Notice
from gpudra.agent.computedomain.registration import CliqueRegistration
from gpudra.agent.kubeletplugin.messages import ClaimRef
from gpudra.agent.prepareplan import ClaimPlan
from gpudra.api.dra import DeviceRequestAllocationResult, ResourceClaim
from gpudra.api.nvidia import (
    AllocatedDevice,
    ComputeDomainChannelConfig,
    ComputeDomainDaemonConfig,
    OpaqueConfig,
    resolve_configs,
)
from gpudra.computedomain import (
    CHANNEL_DEVICE,
    DAEMON_DEVICE,
    NODE_LABEL_VALUE,
    ChannelLease,
    DaemonMode,
    DomainRef,
    NodeClique,
    assign_channels,
    channel_injection,
    check_node_admits,
    node_label_key,
    shared_pool_domain,
)
from gpudra.errors import (
    ComputeDomainError,
    GpudraError,
    InvalidInputError,
    PrepareError,
)
from gpudra.kube.client import KubeClient
from gpudra.kube.events import EventRecorder
from gpudra.kube.resources import NODES
from gpudra.telemetry import get_logger

log = get_logger(__name__)
CD_VENDOR: Final = "k8s.compute-domain.nvidia.com"
"""CDI vendor of the compute-domain driver's claim specs (its own file prefix beside the GPU driver's)."""
IMEX_CONFIG_DIR: Final = "/etc/nvidia-imex"
DEVICE_TYPES: Final[dict[str, Literal["channel", "daemon"]]] = {
    CHANNEL_DEVICE: "channel",
    DAEMON_DEVICE: "daemon",
}


def entry_domains(entry: ClaimEntry, device_type: str | None = None) -> set[str]:
    """The domain UIDs a checkpointed claim serves (its channel or daemon configs)."""
    return {
        str(config.get("domainID"))
        for device in entry.devices
        if (device_type is None or device.device_type == device_type)
        and (config := entry.configs.get(device.device_name)) is not None
        and config.get("domainID")
    }


def claim_configs(
    claim: ResourceClaim, results: Sequence[DeviceRequestAllocationResult], driver: str
) -> list[OpaqueConfig]:
    """The effective config of each result; PrepareError when a device is not ours or has no config."""
    for result in results:
        if result.device not in DEVICE_TYPES:
            raise PrepareError(
                f"device {result.device} is not a compute-domain device of this node "
                f"(devices: {', '.join(DEVICE_TYPES)})",
                reason="UnknownDevice",
            )
    allocation = claim.status.allocation if claim.status is not None else None
    configs = (allocation.devices.config if allocation and allocation.devices else None) or []
    devices = [AllocatedDevice(r.request, r.device, DEVICE_TYPES[r.device]) for r in results]
    try:
        effective = resolve_configs(configs, devices, driver=driver)
    except InvalidInputError as exc:
        raise PrepareError(f"invalid opaque config: {exc}", reason="InvalidConfig") from exc
    found: list[OpaqueConfig] = []
    for device, config in zip(devices, effective, strict=True):
        if config is None:
            kind = (
                "ComputeDomainChannelConfig"
                if device.device_type == "channel"
                else "ComputeDomainDaemonConfig"
            )
            raise PrepareError(
                f"device {device.device_name} of request {device.request!r} has no {kind} naming its "
                "ComputeDomain; claim it through the ResourceClaimTemplate the ComputeDomain names",
                reason="InvalidConfig",
            )
        found.append(config)
    return found


def check_shared_pool(result: DeviceRequestAllocationResult, config: OpaqueConfig) -> None:
    """A PodGroup-scoped domain's channel (pool ``computedomain-<uid>``) serves that domain only: PrepareError
    when the claim's config names another one (a hand-written claim taking another domain's channel)."""
    owner = shared_pool_domain(result.pool)
    domains = ComputeDomainChannelConfig | ComputeDomainDaemonConfig
    domain_id = config.domain_id if isinstance(config, domains) else None
    if owner is not None and owner != domain_id:
        raise PrepareError(
            f"device {result.device} of pool {result.pool} is the channel of ComputeDomain {owner}, but the "
            f"claim's config names ComputeDomain {domain_id}; claim it through that domain's "
            "ResourceClaimTemplate",
            reason="InvalidConfig",
        )


class ComputeDomainPlanner:
    """The ClaimPlanner of the compute-domain driver on one node."""

    def __init__(
        self,
        *,
        client: KubeClient,
        store: CheckpointStore,
        node: str,
        driver: str,
        namespace: str,
        mode: DaemonMode,
        clique: Callable[[], NodeClique],
        channel_major: Callable[[], int],
        domains_dir: Path,
        daemon_wait: float,
        node_ip: str = "",
        events: EventRecorder | None = None,
        calls: CallsInFlight | None = None,
    ) -> None:
        """``calls``: the node's kubelet calls in flight; a channel's prepare steps aside from them while it waits
        for its daemon."""
        self._client = client
        self._calls = calls or CallsInFlight()
        self._store = store
        self.node = node
        self.driver = driver
        self.namespace = namespace
        self.mode: DaemonMode = mode
        self._clique = clique
        self._channel_major = channel_major
        self._domains_dir = domains_dir
        self._node_ip = node_ip
        self._lock = asyncio.Lock()
        self._attempted: dict[str, tuple[str, str]] = {}  # claim uid -> (domain uid, display): prepare tried
        self._labeled: set[str] = set()
        self._host: dict[tuple[str, str], CliqueRegistration] = {}  # (domain, clique) -> host-managed entry
        self._leases = ChannelLeases(client, namespace=namespace, node_name=node)
        self._readiness = DaemonReadiness(client, namespace=namespace, node=node, timeout=daemon_wait)
        self._events = events

    # -- plan ------------------------------------------------------------------------------------------------

    async def plan(
        self, ref: ClaimRef, claim: ResourceClaim, results: Sequence[DeviceRequestAllocationResult]
    ) -> ClaimPlan:
        configs = claim_configs(claim, results, self.driver)
        clique = self._clique()
        if not clique.clique_id:
            raise PrepareError(
                f"node {self.node} is in no NVLink clique ({clique.reason}); a ComputeDomain needs one. "
                "The claim is prepared once the GPUs report a clique again",
                reason="NoClique",
            )
        records: list[DeviceRecord] = []
        devices: list[CDIDevice] = []
        applied: dict[str, dict[str, Any]] = {}
        try:
            for result, config in zip(results, configs, strict=True):
                check_shared_pool(result, config)
                edits = await self._device_edits(ref, config, clique.clique_id)
                name = result.device
                records.append(
                    DeviceRecord(
                        pool_name=result.pool,
                        device_name=name,
                        request_names=[result.request.split("/", 1)[0]],
                        cdi_device_ids=[claim_device_id(ref.uid, name, vendor=CD_VENDOR)],
                        share_id=result.share_id,
                        device_type=DEVICE_TYPES[name],
                    )
                )
                devices.append(CDIDevice(claim_device_name(ref.uid, name), edits))
                applied[name] = config.to_wire()
        except ComputeDomainError as exc:
            reason = type(exc).__name__.removesuffix("Error")
            raise PrepareError(str(exc), reason=reason) from exc
        spec = CDISpec(vendor=CD_VENDOR, class_name=CLAIM_CLASS, devices=devices)
        return ClaimPlan(devices=tuple(records), configs=applied, cdi_document=spec.to_json(), gpu_uuids={})

    async def _device_edits(self, ref: ClaimRef, config: OpaqueConfig, clique_id: str) -> ContainerEdits:
        if isinstance(config, ComputeDomainChannelConfig):
            return await self._channel_edits(ref, config, clique_id)
        if isinstance(config, ComputeDomainDaemonConfig):
            return await self._daemon_edits(ref, config, clique_id)
        raise PrepareError(f"{config.kind} cannot configure a compute-domain device", reason="InvalidConfig")

    async def _channel_edits(
        self, ref: ClaimRef, config: ComputeDomainChannelConfig, clique_id: str
    ) -> ContainerEdits:
        uid = config.domain_id
        mode = config.normalized().allocation_mode or "Single"
        domain = DomainRef(uid, f"{uid} (namespace {ref.namespace})", "All" if mode == "All" else "Single")
        async with self._lock:
            self._admit(domain, ref.uid)
            self._attempted[ref.uid] = (uid, domain.display)
            await self._label(uid)
        if self.mode == "host-managed":
            lease = await self._leases.acquire(domain, clique_id)
            await self._host_registration(uid, clique_id).report("Ready")
        else:
            lease = assign_channels(domain, {}, "daemonset", clique_id=clique_id)
        with self._calls.aside():
            await self._readiness.wait(uid, clique_id, notice=self._notice(ref))
        return self._channel_nodes(config, lease)

    def _notice(self, ref: ClaimRef) -> Notice | None:
        """Says on the claim (an Event) that its prepare waits for the daemon, and for what."""
        events = self._events
        if events is None:
            return None

        def said(message: str) -> Awaitable[bool]:
            return events.post(
                ref.event_object(), "Normal", "WaitingForIMEXDaemon", f"node {self.node}: {message}"
            )

        return said

    def _channel_nodes(self, config: ComputeDomainChannelConfig, lease: ChannelLease) -> ContainerEdits:
        try:
            injection = channel_injection(config, major=self._channel_major(), lease=lease)
        except InvalidInputError as exc:
            raise PrepareError(str(exc), reason="ChannelDevice") from exc
        nodes = [
            DeviceNode(path=n.path, type="c", major=n.major, minor=n.minor) for n in injection.device_nodes
        ]
        return ContainerEdits(device_nodes=nodes)

    async def _daemon_edits(
        self, ref: ClaimRef, config: ComputeDomainDaemonConfig, clique_id: str
    ) -> ContainerEdits:
        uid = config.domain_id
        async with self._lock:
            self._admit(DomainRef(uid, f"{uid} (namespace {ref.namespace})"), ref.uid)
        directory = self._domains_dir / uid
        await asyncio.to_thread(directory.mkdir, parents=True, exist_ok=True)
        env = [f"CLIQUE_ID={clique_id}", f"COMPUTE_DOMAIN_UUID={uid}", f"IMEX_CONFIG_DIR={IMEX_CONFIG_DIR}"]
        mount = Mount(str(directory), IMEX_CONFIG_DIR, ["rw", "nosuid", "nodev", "bind"])
        return ContainerEdits(env=env, mounts=[mount])

    def _domains_here(self, except_claim: str) -> list[DomainRef]:
        """Domains with prepared (or being prepared) channel or daemon claims on this node."""
        found: dict[str, DomainRef] = {}
        for uid, entry in self._store.claims().items():
            if uid != except_claim:
                for domain in entry_domains(entry):
                    found.setdefault(domain, DomainRef(domain, f"{domain} (namespace {entry.namespace})"))
        for claim_uid, (domain, display) in self._attempted.items():
            if claim_uid != except_claim:
                found.setdefault(domain, DomainRef(domain, display))
        return list(found.values())

    def _admit(self, domain: DomainRef, claim_uid: str) -> None:
        check_node_admits(self.node, domain, self._domains_here(claim_uid), self.mode)

    async def _label(self, domain_uid: str) -> None:
        if domain_uid in self._labeled:
            return
        patch = {"metadata": {"labels": {node_label_key(domain_uid): NODE_LABEL_VALUE}}}
        try:
            await self._client.patch(NODES, self.node, patch)
        except GpudraError as exc:
            raise PrepareError(
                f"labelling node {self.node} for the domain's daemon: {exc}", reason="ApiError"
            ) from exc
        self._labeled.add(domain_uid)
        log.info("node labelled for ComputeDomain", node=self.node, domain=domain_uid)

    def _host_registration(self, domain_uid: str, clique_id: str) -> CliqueRegistration:
        key = (domain_uid, clique_id)
        if key not in self._host:
            self._host[key] = CliqueRegistration(
                self._client,
                namespace=self.namespace,
                domain_uid=domain_uid,
                clique_id=clique_id,
                node_name=self.node,
                ip_address=self._node_ip,
            )
        return self._host[key]

    async def restore(self) -> None:
        """At start-up, host-managed mode: this agent is again the daemon of every domain it holds prepared
        channels of (a restart must not leave their nodes unregistered); a failure is logged, not fatal."""
        clique = self._clique()
        if self.mode != "host-managed" or not clique.clique_id:
            return
        for domain in sorted({d for e in self._store.claims().values() for d in entry_domains(e, "channel")}):
            try:
                await self._host_registration(domain, clique.clique_id).report("Ready")
            except GpudraError as exc:
                log.warning("re-registering the host IMEX daemon failed", domain=domain, error=str(exc))

    # -- release ---------------------------------------------------------------------------------------------

    async def released(self, uid: str, entry: ClaimEntry | None) -> None:
        attempted = self._attempted.pop(uid, None)
        domains = entry_domains(entry, "channel") if entry is not None else set()
        if attempted is not None:
            domains.add(attempted[0])
        for domain in sorted(domains):
            if domain in self._still_used():
                continue
            await self._forget(domain)

    def _still_used(self) -> set[str]:
        used = {d for e in self._store.claims().values() for d in entry_domains(e, "channel")}
        return used | {domain for domain, _ in self._attempted.values()}

    async def _forget(self, domain_uid: str) -> None:
        """The node serves the domain no more: label off; host-managed: entry and lease released."""
        patch = {"metadata": {"labels": {node_label_key(domain_uid): None}}}
        try:
            await self._client.patch(NODES, self.node, patch)
        except GpudraError as exc:
            log.warning("removing the domain's node label failed", node=self.node, error=str(exc))
        self._labeled.discard(domain_uid)
        for (domain, clique_id), registration in list(self._host.items()):
            if domain == domain_uid:
                await registration.release()
                await self._leases.release(domain_uid, clique_id)
                del self._host[(domain, clique_id)]
        log.info("node released from ComputeDomain", node=self.node, domain=domain_uid)
