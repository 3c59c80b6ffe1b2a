"""A node's prepare machinery over real sockets: embedded API server, simulated GPUs, ClaimPreparer behind a
KubeletPlugin, and a KubeletClient playing the kubelet. Shared by the prepare tests."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from gpudra.agent.cdi import ClaimSpecDir
from gpudra.agent.checkpoint import CheckpointStore
from gpudra.agent.claimeffects import ClaimEffects
from gpudra.agent.claimpreparer import ClaimPreparer, no_hook
from gpudra.agent.claimstatus import ClaimStatus
from gpudra.agent.gpuplanner import PrepareOptions
from gpudra.agent.kubeletplugin import ClaimRef, KubeletPlugin
from gpudra.agent.kubeletplugin.kubelet_client import KubeletClient
from gpudra.agent.laterwrites import DEFER_SECONDS, LaterWrites
from gpudra.agent.recovery import RecoveryReport, recover
from gpudra.agent.reservations import DeviceReservations
from gpudra.hardware.nvml.backend import NvmlBackend
from gpudra.hardware.simulated.fake_nvml import FakeNvml
from gpudra.kube.client import KubeClient
from gpudra.kube.events import EventRecorder
from gpudra.kube.resources import EVENTS, NAMESPACES, NODES, RESOURCE_CLAIMS
from gpudra.metrics import Metrics

DRIVER = "gpu.nvidia.com"
NODE = "node-1"
NAMESPACE = "team-a"
GPU_CONFIG = "resource.nvidia.com/v1beta1"


def claim_body(name: str, requests: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "devices": {"requests": [{"name": r, "exactly": {"deviceClassName": DRIVER}} for r in requests]}
        },
    }


@dataclass
class Node:
    """One simulated node's agent side, restartable (``restart`` builds a new preparer over the same disk)."""

    client: KubeClient
    root: Path
    socket_dir: Path
    fake: FakeNvml = field(init=False)
    backend: NvmlBackend = field(init=False)
    metrics: Metrics = field(default_factory=Metrics)
    preparer: ClaimPreparer | None = None
    plugin: KubeletPlugin | None = None
    kubelet: KubeletClient | None = None
    dynamic: set[str] = field(default_factory=set)  # UUIDs of the GPUs in dynamic MIG mode
    shareable: tuple[str, ...] = ()  # devices published with allowMultipleAllocations
    passthrough: bool = False  # gpu-vfio-<i> devices prepared (bound to vfio-pci)
    defer_seconds: float = DEFER_SECONDS  # the longest a status write waits for the node's calls to end

    def __post_init__(self) -> None:
        self.fake = FakeNvml.from_profile("dgx-h100", node_name=NODE)
        self.backend = NvmlBackend(NODE, nvml=self.fake)

    @property
    def cdi_dir(self) -> Path:
        return self.root / "cdi"

    @property
    def checkpoint(self) -> Path:
        return self.root / "state" / "checkpoint.json"

    def specs(self) -> ClaimSpecDir:
        return ClaimSpecDir(self.cdi_dir)

    def uuid(self, gpu: int) -> str:
        return self.fake.gpu(gpu).uuid

    def make_dynamic(self, minor: int) -> int:
        """Put the GPU with this minor in dynamic MIG mode (MIG on, no instances); returns its NVML index."""
        gpu = next(g for g in self.backend.read_inventory().gpus if g.minor == minor)
        self.backend.set_mig_mode(gpu.index, True)
        self.dynamic.add(gpu.uuid)
        return gpu.index

    def instances(self, index: int) -> list[tuple[str, int]]:
        """(profile, placement start) of the MIG instances on a GPU now."""
        gpu = self.backend.read_inventory().gpus[index]
        return [(m.profile, m.placement_start) for m in gpu.mig_devices]

    def build(self, hook: Callable[[str], None] = no_hook) -> ClaimPreparer:
        store = CheckpointStore(self.checkpoint, node=NODE, driver=DRIVER)
        events = EventRecorder(self.client, "gpudra-agent-test", window_seconds=0)
        self.preparer = ClaimPreparer(
            client=self.client,
            backend=self.backend,
            store=store,
            status=ClaimStatus(
                self.client,
                events,
                driver=DRIVER,
                node=NODE,
                later=LaterWrites(defer_seconds=self.defer_seconds),
            ),
            reservations=DeviceReservations(store, shareable=lambda: self.shareable),
            effects=ClaimEffects(self.backend, self.specs(), claim_dirs=self.root / "mps"),
            options=PrepareOptions(mps_root=str(self.root / "mps"), passthrough=self.passthrough),
            dynamic_gpus=lambda: frozenset(self.dynamic),
            metrics=self.metrics,
            hook=hook,
        )
        return self.preparer

    async def start(self, hook: Callable[[str], None] = no_hook) -> RecoveryReport:
        """Recover, serve the plugin, register a kubelet client (the agent's start-up order)."""
        preparer = self.build(hook)
        report = await recover(preparer, report_problem=self._node_event)
        self.plugin = KubeletPlugin(
            DRIVER, preparer, plugin_dir=self.socket_dir / "plugins", registry_dir=self.socket_dir / "reg"
        )
        await self.plugin.start()
        self.kubelet = KubeletClient(self.plugin.registration_socket)
        await self.kubelet.register()
        return report

    async def _node_event(self, problem: Exception) -> None:
        node = await self.client.get_raw(NODES, NODE)
        assert self.preparer is not None
        await EventRecorder(self.client, "gpudra-agent-test").post(
            node, "Warning", "CheckpointUnreadable", str(problem)
        )

    async def written(self) -> None:
        """Wait for the claim status writes the agent makes after its answers (as the agent does before it
        stops)."""
        if self.preparer is not None:
            await self.preparer.status.later.written()

    async def stop(self) -> None:
        await self.written()
        if self.kubelet is not None:
            await self.kubelet.close()
        if self.plugin is not None:
            await self.plugin.stop()
        self.kubelet = self.plugin = None

    async def restart(self, hook: Callable[[str], None] = no_hook) -> RecoveryReport:
        await self.stop()
        return await self.start(hook)

    # -- claims ----------------------------------------------------------------------------------------------

    async def claim(
        self,
        name: str,
        devices: dict[str, str] | None = None,
        *,
        pool: str = NODE,
        config: list[dict[str, Any]] | None = None,
        allocate: bool = True,
    ) -> ClaimRef:
        """Create a claim (request -> device) and write its allocation through the status subresource."""
        devices = devices if devices is not None else {"gpu": "gpu-0"}
        created = await self.client.create(RESOURCE_CLAIMS, claim_body(name, list(devices)), NAMESPACE)
        if allocate:
            created["status"] = {
                "allocation": {
                    "devices": {
                        "results": [
                            {"request": r, "driver": DRIVER, "pool": pool, "device": d}
                            for r, d in devices.items()
                        ],
                        "config": config or [],
                    }
                },
                "reservedFor": [{"resource": "pods", "name": f"{name}-pod", "uid": f"pod-{name}"}],
            }
            created = await self.client.replace(RESOURCE_CLAIMS, created, subresource="status")
        return ClaimRef(namespace=NAMESPACE, uid=created["metadata"]["uid"], name=name)

    async def get_claim(self, ref: ClaimRef) -> dict[str, Any]:
        """The claim once the agent's status writes so far are done."""
        await self.written()
        return await self.client.get_raw(RESOURCE_CLAIMS, ref.name, ref.namespace)

    async def events(self, namespace: str = NAMESPACE) -> list[dict[str, Any]]:
        await self.written()
        items, _ = await self.client.list_raw(EVENTS, namespace)
        return items

    def spec_of(self, ref: ClaimRef) -> dict[str, Any] | None:
        return self.specs().read(ref.uid)


class HeldStatusWrites:
    """A client whose claim status writes (PATCH of the status subresource) wait until ``release``; ``waiting``
    is set when the first arrives."""

    def __init__(self, client: KubeClient, monkeypatch: pytest.MonkeyPatch) -> None:
        self.release = asyncio.Event()
        self.waiting = asyncio.Event()
        patch = client.patch

        async def held(res: Any, name: str, body: Any, *args: Any, **kwargs: Any) -> Any:
            if kwargs.get("subresource") == "status":
                self.waiting.set()
                await self.release.wait()
            return await patch(res, name, body, *args, **kwargs)

        monkeypatch.setattr(client, "patch", held)


class HeldClaimReads:
    """A client whose reads of the claim named ``name`` (the prepare's GET) wait until ``release``: that claim's
    prepare stays in flight. ``waiting`` is set when the first arrives."""

    def __init__(self, client: KubeClient, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
        self.release = asyncio.Event()
        self.waiting = asyncio.Event()
        get = client.get

        async def held(res: Any, read: str, *args: Any, **kwargs: Any) -> Any:
            if read == name:
                self.waiting.set()
                await self.release.wait()
            return await get(res, read, *args, **kwargs)

        monkeypatch.setattr(client, "get", held)


def gpu_config(
    sharing: dict[str, Any], requests: list[str] | None = None, *, kind: str = "GpuConfig"
) -> dict[str, Any]:
    """A FromClaim opaque config (``kind`` GpuConfig, or MigDeviceConfig for MIG devices)."""
    entry: dict[str, Any] = {
        "source": "FromClaim",
        "opaque": {
            "driver": DRIVER,
            "parameters": {"apiVersion": GPU_CONFIG, "kind": kind, "sharing": sharing},
        },
    }
    if requests:
        entry["requests"] = requests
    return entry


async def make_node(client: KubeClient, root: Path) -> Node:
    await client.apply_object(
        NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
    )
    await client.apply_object(NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}})
    socket_dir = Path(tempfile.mkdtemp(prefix="gpudra-t-"))
    return Node(client=client, root=root, socket_dir=socket_dir)


def cleanup(node: Node) -> None:
    shutil.rmtree(node.socket_dir, ignore_errors=True)


class Crash(BaseException):
    """The process dies here: nothing after this step runs, no rollback."""


def crash_at(step: str) -> Callable[[str], None]:
    """A preparer hook that stops the process (raises :class:`Crash`) when prepare reaches ``step``."""

    def hook(reached: str) -> None:
        if reached == step:
            raise Crash(step)

    return hook


async def crash_and_restart(node: Node, ref: ClaimRef, operation: str, step: str) -> RecoveryReport:
    """Prepare (or prepare, then unprepare) ``ref`` in a process that dies at ``step``; start a new one."""
    preparer = node.build(crash_at(step) if operation == "prepare" else crash_at(""))
    await preparer.store.load()
    if operation == "prepare":
        with pytest.raises(Crash):
            await preparer.prepare([ref])
    else:
        assert (await preparer.prepare([ref]))[ref.uid].error == ""
        preparer.hook = crash_at(step)
        with pytest.raises(Crash):
            await preparer.unprepare([ref])
    return await node.start()  # a new process: recovery, then the plugin registers
