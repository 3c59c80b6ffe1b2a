"""The embedded cluster's stand-in kubelet: one per simulated node, the DRA part of a real kubelet's pod sync.

It watches the pods bound to its node. For a new pod it reads the pod's claims, checks the pod is in each
claim's ``status.reservedFor``, and calls NodePrepareResources of each driver the claims are allocated from over
that driver's REAL plugin sockets (those in the registry directory, registration first, the newest plugin of a
driver preferred, like the kubelet: :mod:`gpudra.cluster.kubelet.pluginwatch`);
then it marks the pod Running and Ready. A failure posts Event FailedPrepareDynamicResources on the pod and is
retried with backoff; meanwhile the pod is Pending with its containers waiting (ContainerCreating), as a real
kubelet shows it. The statuses it writes are those of a 1.37 kubelet (see podstatus.py). When a pod goes away,
its claims that no other pod on the node still uses are unprepared (retried until they succeed).

Containers do not run. A pod whose containers' commands are known to end (containerlife.py: ``echo hi``, ``sh -c
'sleep 5; exit 0'``...) and that would not be restarted (restartPolicy Never, or OnFailure when they succeed) ends
as a kubelet ends it: after the sum of its sleeps it is Succeeded (``Completed``) or Failed (``Error``), and its
claims are unprepared. Like a kubelet, it posts Pulled, Created and Started Events for each container it starts (no
image is pulled: the message says the image is present). One exception runs: a ComputeDomain's IMEX daemon pod
(labelled as the controller's DaemonSet labels it) runs as a simulated daemon coroutine, the same registration code
as ``gpudra imex-daemon``, with the env a container would get: the pod's own env plus what the CDI specs of its
prepared claims add (CLIQUE_ID), read from the node's CDI directory as a container runtime would.

What each container would log is written into the shared :class:`PodLogBook` when the pod starts (see
containerview.py: its CDI devices, device nodes, env and mounts, and ``nvidia-smi -L`` as the simulated NVML
answers it); the node endpoint (kubeletserver.py) serves it to ``kubectl logs``. Each container gets the CDI
devices of the claims it names, only those of the request it names when it names one, as the kubelet does.

It consumes each plugin's DRAResourceHealth stream and keeps the running pods' ``allocatedResourcesStatus`` current
(kubelethealth.py, resourcehealth.py), as a 1.37 kubelet with ResourceHealthStatus does.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from gpudra.agent.computedomain.daemon import DaemonIdentity, run_daemon
from gpudra.agent.kubeletplugin import ClaimRef, PreparedDevice, PrepareResult
from gpudra.agent.kubeletplugin.kubelet_client import KubeletClient
from gpudra.api.core import Pod
from gpudra.api.timestamps import rfc3339
from gpudra.computedomain import COMPONENT_LABEL, OBJECT_LABEL
from gpudra.errors import (
    ConflictError,
    GpudraError,
    KubeError,
    KubeletPluginError,
    NotFoundError,
    PrepareError,
)
from gpudra.hardware.gpus.inventory import NodeInventory
from gpudra.kube.client import KubeClient
from gpudra.kube.events import EventRecorder
from gpudra.kube.informer import Informer
from gpudra.kube.resources import PODS, RESOURCE_CLAIMS
from gpudra.telemetry import get_logger

from .containerlife import Lifetime, pod_lifetime
from .containerview import container_log, container_view, runs_nvidia_smi
from .kubelethealth import ResourceHealthMonitor
from .kubeletserver import PodLogBook
from .pluginwatch import PluginWatcher
from .podstatus import PodStatusWriter, pod_ip
from .resourcehealth import ClaimDevice

log = get_logger(__name__)
FAILED_PREPARE = "FailedPrepareDynamicResources"
PodClient = Callable[[KubeClient, dict[str, Any]], Awaitable[KubeClient]]
"""The client a pod's container uses (its ServiceAccount's identity), from the kubelet's client and the pod."""


def pod_claim_names(pod: dict[str, Any]) -> list[str]:
    """The ResourceClaim names a pod uses; PrepareError while a template's claim is not created yet."""
    statuses = {
        s.get("name"): s.get("resourceClaimName")
        for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []
    }
    names = []
    for entry in (pod.get("spec") or {}).get("resourceClaims") or []:
        name = entry.get("resourceClaimName") or statuses.get(entry.get("name"))
        if not name:
            meta = pod.get("metadata") or {}  # a 1.37 kubelet's words (k8s.io/dynamic-resource-allocation)
            raise PrepareError(
                f'pod "{meta.get("namespace")}/{meta.get("name")}": ResourceClaim not created yet',
                reason="Waiting",
            )
        names.append(name)
    return names


def container_devices(
    pod: dict[str, Any], prepared: Mapping[str, Sequence[PreparedDevice]]
) -> dict[str, list[str]]:
    """Container name -> the CDI ids it gets: of each claim it names, the devices of the request it names (all
    of them when it names none); ``prepared`` maps a ResourceClaim name to its prepared devices."""
    spec = pod.get("spec") or {}
    entries = [e.get("name") for e in spec.get("resourceClaims") or []]
    claim_names = dict(zip(entries, pod_claim_names(pod), strict=True))
    result: dict[str, list[str]] = {}
    for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        ids: list[str] = []
        for ref in (container.get("resources") or {}).get("claims") or []:
            request = str(ref.get("request") or "").split("/")[0]
            for device in prepared.get(claim_names.get(ref.get("name"), ""), ()):
                if not request or not device.request_names or request in device.request_names:
                    ids += [i for i in device.cdi_device_ids if i not in ids]
        result[str(container.get("name", ""))] = ids
    return result


def simulated_pod_ip(node: str) -> str:
    digest = hashlib.sha256(node.encode()).digest()
    return f"10.{digest[0]}.{digest[1]}.{max(digest[2], 1)}"


def is_imex_daemon(pod: dict[str, Any]) -> bool:
    labels = pod["metadata"].get("labels") or {}
    return labels.get(COMPONENT_LABEL) == "daemon" and OBJECT_LABEL in labels


def token_volume(pod: Mapping[str, Any]) -> str | None:
    """The name of the pod's volume that projects its ServiceAccount's token (``kube-api-access-*``), if any."""
    for volume in (pod.get("spec") or {}).get("volumes") or []:
        sources = (volume.get("projected") or {}).get("sources") or []
        if any("serviceAccountToken" in source for source in sources):
            return str(volume.get("name") or "")
    return None


def reserved_for_pod(pod: Mapping[str, Any], reserved_for: Sequence[Mapping[str, Any]]) -> bool:
    """Whether a claim's ``reservedFor`` lets the pod use it, as a 1.37 kubelet decides: the pod by UID, or
    (DRAWorkloadResourceClaims) the PodGroup the pod names in ``spec.schedulingGroup``, by name: a pod does not
    know its PodGroup's UID. A cluster without the gate never reserves a claim for a PodGroup."""
    group = ((pod.get("spec") or {}).get("schedulingGroup") or {}).get("podGroupName")
    for entry in reserved_for:
        if entry.get("uid") == pod["metadata"]["uid"]:
            return True
        if group and (entry.get("apiGroup"), entry.get("resource"), entry.get("name")) == (
            "scheduling.k8s.io",
            "podgroups",
            group,
        ):
            return True
    return False


class StandInKubelet:
    def __init__(
        self,
        client: KubeClient,
        node: str,
        registry_dir: Path,
        *,
        cdi_dir: Path | None = None,
        max_backoff: float = 5.0,
        pod_client: PodClient | None = None,
        logs: PodLogBook | None = None,
        inventory: Callable[[], NodeInventory] | None = None,
        health_tick: float = 2.0,
    ) -> None:
        self.node = node
        self._pod_client = pod_client
        self._client = client
        self._cdi_dir = cdi_dir
        self._max_backoff = max_backoff
        self._logs = logs
        self._inventory = inventory
        self._events = EventRecorder(client, "kubelet", window_seconds=30)
        self._informer = Informer(
            client, PODS, self._on_pod, field_selector=f"spec.nodeName={node}", parse=Pod.model_validate,
            events=self._events,
        )  # fmt: skip
        self._plugins = PluginWatcher(registry_dir)
        self.health = ResourceHealthMonitor(client, self._plugins, tick=health_tick, max_backoff=max_backoff)
        self._prepared: dict[
            str, list[tuple[str, ClaimRef]]
        ] = {}  # pod uid -> (driver, claim) handed to prepare
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._latest: dict[str, dict[str, Any]] = {}
        """A starting pod's latest body, by uid, while its start retries (a status written meanwhile: its claims)."""
        self._daemons: dict[str, tuple[asyncio.Event, asyncio.Task[None]]] = {}  # pod uid -> simulated daemon
        self._background: set[asyncio.Task[None]] = set()
        self._terminating: set[str] = set()  # pod uids being torn down
        self._finished: set[str] = set()  # uids of pods whose containers ended (until the pod goes)
        self.node_ip = simulated_pod_ip(node)
        self._pods_started = 0

    @property
    def terminating(self) -> frozenset[str]:
        """UIDs of the pods being torn down now (containers stopping, claims being unprepared)."""
        return frozenset(self._terminating)

    async def run(self) -> None:
        health = asyncio.create_task(self.health.run(), name=f"kubelet {self.node} device health")
        try:
            await self._informer.run()
        finally:
            for task in [*self._tasks.values(), *self._background, health]:
                task.cancel()
            await asyncio.shield(self.health.close())
            for stop, task in self._daemons.values():
                stop.set()
                task.cancel()
            # let the daemons release their clique entries while the client is still open (the cluster
            # closes it after this returns): a release left running afterwards fails on a closed session
            await asyncio.gather(*(task for _, task in self._daemons.values()), return_exceptions=True)
            await asyncio.shield(self._plugins.close())

    async def _on_pod(self, kind: str, pod: dict[str, Any]) -> None:
        meta = pod.get("metadata", {})
        uid = meta.get("uid", "")
        if kind == "DELETED" or meta.get("deletionTimestamp"):
            if kind == "DELETED":
                self._finished.discard(uid)
            task = self._tasks.pop(uid, None)
            if task is not None:
                task.cancel()
            if uid not in self._terminating:
                self._terminating.add(uid)
                self._spawn(self._terminate(pod, finish=kind != "DELETED"))
            return
        if uid in self._tasks:
            self._latest[uid] = pod  # its start retries with the pod as it is now, as a kubelet's pod manager
        phase = (pod.get("status") or {}).get("phase")
        if (
            uid in self._prepared
            or uid in self._tasks
            or uid in self._finished
            or phase in ("Succeeded", "Failed")
        ):
            return  # started, or ended (an event written before it ended may still arrive)
        self._tasks[uid] = asyncio.create_task(self._start_pod(pod), name=f"kubelet {self.node} pod {uid}")

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _connect(self, driver: str) -> KubeletClient:
        return await self._plugins.client(driver)

    async def _claims_to_prepare(self, pod: dict[str, Any]) -> dict[str, list[ClaimRef]]:
        """driver -> the pod's claims allocated devices of that driver."""
        meta = pod["metadata"]
        by_driver: dict[str, list[ClaimRef]] = {}
        for name in pod_claim_names(pod):
            try:
                claim = await self._client.get_raw(RESOURCE_CLAIMS, name, meta["namespace"])
            except NotFoundError as exc:  # a 1.37 kubelet's words, with the API server's
                raise PrepareError(
                    f"fetch ResourceClaim {name}: {exc.detail}", reason="ClaimNotFound"
                ) from exc
            status = claim.get("status") or {}
            if not reserved_for_pod(pod, status.get("reservedFor") or []):
                raise PrepareError(  # a 1.37 kubelet's words
                    f"pod {meta['name']} ({meta['uid']}) is not allowed to use ResourceClaim {name}"
                    f" ({claim['metadata']['uid']})",
                    reason="NotReserved",
                )
            results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
            ref = ClaimRef(namespace=meta["namespace"], uid=claim["metadata"]["uid"], name=name)
            for driver in sorted({str(r.get("driver")) for r in results}):
                by_driver.setdefault(driver, []).append(ref)
        return by_driver

    async def _prepare(self, by_driver: dict[str, list[ClaimRef]]) -> dict[str, list[ClaimDevice]]:
        """Prepare every driver's claims; claim name -> its prepared devices (of every driver)."""
        prepared: dict[str, list[ClaimDevice]] = {}
        for driver, refs in sorted(by_driver.items()):
            plugin = await self._connect(driver)
            self.health.watch(driver)
            try:
                results: dict[str, PrepareResult] = await plugin.prepare(refs)
            except KubeletPluginError:
                self._plugins.failed(plugin)
                raise
            failed = next((r for r in refs if results[r.uid].error), None)
            if failed is not None:  # a 1.37 kubelet's words, of the first claim that failed
                raise PrepareError(
                    f"NodePrepareResources failed for ResourceClaim {failed.name}: {results[failed.uid].error}"
                )
            for ref in refs:
                prepared.setdefault(ref.name, []).extend(
                    ClaimDevice(driver, d) for d in results[ref.uid].devices
                )
        return prepared

    async def _prepare_pod(self, pod: dict[str, Any]) -> dict[str, list[ClaimDevice]]:
        """Prepare the pod's claims (``_prepare``); a failure is a PrepareError in a 1.37 kubelet's words
        (pkg/kubelet/cm/dra/manager.go)."""
        try:
            by_driver = await self._claims_to_prepare(pod)
            # Recorded before the call, as the kubelet checkpoints a claim before NodePrepareResources: a prepare
            # that failed or was cut short (the plugin killed mid-call) may have prepared it all the same, so the
            # pod's deletion must unprepare it.
            self._prepared[pod["metadata"]["uid"]] = [
                (d, r) for d, refs in sorted(by_driver.items()) for r in refs
            ]
            return await self._prepare(by_driver)
        except GpudraError as exc:
            raise PrepareError(f"prepare dynamic resources: {exc}") from exc

    async def _start_pod(self, pod: dict[str, Any]) -> None:
        uid = pod["metadata"]["uid"]
        delay = 0.1
        waiting_written = False
        try:
            while True:
                pod = self._latest.pop(uid, pod)
                try:
                    prepared = await self._prepare_pod(pod)
                    devices = container_devices(
                        pod, {name: [d.device for d in ds] for name, ds in prepared.items()}
                    )
                    if is_imex_daemon(pod):
                        await self._start_daemon(pod, [i for ids in devices.values() for i in ids])
                    ip, started_at = await self._set_running(pod, devices, prepared)
                    break
                except PrepareError as exc:
                    await self._failed(pod, exc)
                except NotFoundError as exc:
                    if "pods/" in str(exc):
                        return  # the pod is gone
                    self._not_started(pod, exc)
                except GpudraError as exc:  # a kubelet retries its status writes without an Event
                    self._not_started(pod, exc)
                if not waiting_written:
                    waiting_written = await self._set_waiting(pod)
                await asyncio.sleep(delay)
                delay = min(delay * 2, self._max_backoff)
            lifetimes = pod_lifetime(pod)
            if lifetimes is not None:
                await asyncio.sleep(max(life.seconds for life in lifetimes))
                await self._set_finished(pod, ip, started_at, lifetimes)
        except GpudraError as exc:  # the pod went while its containers ran, or the server did not answer
            log.info("writing the status of a pod whose containers ended failed", pod=pod["metadata"]["name"],
                     error=str(exc))  # fmt: skip
        finally:
            self._tasks.pop(uid, None)
            self._latest.pop(uid, None)

    async def _failed(self, pod: dict[str, Any], exc: PrepareError) -> None:
        log.info(
            "preparing a pod's claims failed; will retry",
            node=self.node,
            pod=pod["metadata"]["name"],
            error=str(exc),
        )
        await self._events.post(pod, "Warning", FAILED_PREPARE, f"Failed to prepare dynamic resources: {exc}")

    def _not_started(self, pod: dict[str, Any], exc: GpudraError) -> None:
        """Its claims were prepared but its start did not finish (its status not written, its daemon's identity
        not made): tried again, its claims prepared again (a plugin answers that at once)."""
        log.warning(
            "starting a pod with prepared claims failed; will retry",
            node=self.node,
            pod=pod["metadata"]["name"],
            error=str(exc),
        )

    async def _write_status(self, pod: dict[str, Any], status: dict[str, Any]) -> None:
        meta = pod["metadata"]
        await self._client.patch(
            PODS, meta["name"], {"status": status}, meta["namespace"], subresource="status"
        )

    async def _set_waiting(self, pod: dict[str, Any]) -> bool:
        """Pending, containers waiting to be created; False when that could not be written (the pod is gone, or
        the API server did not answer: the next round tries again)."""
        meta = pod["metadata"]
        try:
            latest = await self._client.get_raw(PODS, meta["name"], meta["namespace"])
            status = PodStatusWriter(latest, node_ip=self.node_ip, now=rfc3339()).waiting()
            await self._write_status(latest, status)
        except NotFoundError:
            return False
        except GpudraError as exc:
            log.info("writing a waiting pod's status failed; will retry", pod=meta["name"], error=str(exc))
            return False
        if self._logs is not None:
            waiting = [*status.get("initContainerStatuses", []), *status["containerStatuses"]]
            reasons = {s["name"]: s["state"]["waiting"]["reason"] for s in waiting}
            self._logs.waiting(meta["namespace"], meta["name"], meta["uid"], reasons)
        return True

    async def _set_running(
        self, pod: dict[str, Any], devices: dict[str, list[str]], prepared: dict[str, list[ClaimDevice]]
    ) -> tuple[str, str]:
        """Write the running pod's status and post its containers' Events; (pod IP, start time)."""
        meta = pod["metadata"]
        latest = await self._client.get_raw(PODS, meta["name"], meta["namespace"])
        if (latest.get("spec") or {}).get("hostNetwork"):
            ip = self.node_ip
        else:
            ip = pod_ip(self.node_ip, self._pods_started)
            self._pods_started += 1
        now = rfc3339()
        if self._logs is not None:
            logs = await self._container_logs(latest, devices)
            self._logs.started(meta["namespace"], meta["name"], meta["uid"], logs, now)
        health = self.health.status(latest, prepared)
        writer = PodStatusWriter(latest, node_ip=self.node_ip, now=now)
        await self._write_status(latest, writer.running(ip, health))
        self._spawn(self._post_started(latest))
        await self.health.started(latest, prepared, health)
        return ip, now

    async def _post_started(self, pod: dict[str, Any]) -> None:
        """Pulled, Created and Started of each container, init containers first, as a kubelet posts them."""
        spec = pod.get("spec") or {}
        for field in ("initContainers", "containers"):
            for container in spec.get(field) or []:
                path = f"spec.{field}{{{container.get('name', '')}}}"
                present = f'Container image "{container.get("image", "")}" already present on machine'
                await self._events.post(
                    pod, "Normal", "Pulled", f"{present} and can be accessed by the pod", field_path=path
                )
                await self._events.post(pod, "Normal", "Created", "Container created", field_path=path)
                await self._events.post(pod, "Normal", "Started", "Container started", field_path=path)

    async def _set_finished(
        self, pod: dict[str, Any], ip: str, started_at: str, lifetimes: list[Lifetime]
    ) -> None:
        """The pod's containers ended: its terminal status, then its claims unprepared (what the containers
        logged stays readable)."""
        meta = pod["metadata"]
        latest = await self._client.get_raw(PODS, meta["name"], meta["namespace"])
        writer = PodStatusWriter(latest, node_ip=self.node_ip, now=rfc3339())
        await self._write_status(latest, writer.finished(ip, started_at, lifetimes))
        self._finished.add(meta["uid"])
        if self._logs is not None:
            self._logs.stopped(meta["uid"], keep=True)
        self._terminating.add(meta["uid"])
        self._spawn(self._terminate(latest, finish=False, keep_logs=True))

    async def _container_logs(
        self, pod: dict[str, Any], devices: dict[str, list[str]]
    ) -> dict[str, list[str]]:
        """What each container would log: its CDI edits and, when it runs nvidia-smi, what that prints."""
        spec = pod.get("spec") or {}
        containers = [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
        inventory = None
        if self._inventory is not None and any(runs_nvidia_smi(c) for c in containers):
            inventory = await asyncio.to_thread(self._inventory)
        logs = {}
        for container in containers:
            name = str(container.get("name", ""))
            ids = devices.get(name, []) if self._cdi_dir is not None else []
            view = container_view(self._cdi_dir or Path(), ids)
            logs[name] = container_log(container, view, inventory)
        return logs

    async def _start_daemon(self, pod: dict[str, Any], device_ids: list[str]) -> None:
        """Run the daemon pod's container: the simulated IMEX daemon with the container's env (once: a start tried
        again after its status write failed finds it running)."""
        if pod["metadata"]["uid"] in self._daemons:
            return
        container = ((pod.get("spec") or {}).get("containers") or [{}])[0]
        env = {e.get("name"): e.get("value") for e in container.get("env") or [] if "value" in e}
        if self._cdi_dir is not None:
            env.update(container_view(self._cdi_dir, device_ids).env)
        identity = DaemonIdentity(
            namespace=pod["metadata"]["namespace"],
            domain_uid=str(env.get("COMPUTE_DOMAIN_UUID") or pod["metadata"]["labels"][OBJECT_LABEL]),
            clique_id=str(env.get("CLIQUE_ID") or ""),
            node_name=self.node,
            ip_address=simulated_pod_ip(self.node),
        )
        client = self._client if self._pod_client is None else await self._identity(pod)
        stop = asyncio.Event()
        task = asyncio.create_task(run_daemon(client, identity, stop=stop), name=f"imex-daemon {self.node}")
        self._daemons[pod["metadata"]["uid"]] = (stop, task)

    async def _identity(self, pod: dict[str, Any]) -> KubeClient:
        """The client of the daemon pod's ServiceAccount, whose token a kubelet mounts in the pod's projected
        volume; a token it cannot get is said as a kubelet says it (its volume's FailedMount)."""
        assert self._pod_client is not None
        try:
            return await self._pod_client(self._client, pod)
        except KubeError as exc:
            volume = token_volume(pod)
            if volume is not None:
                message = (
                    f'MountVolume.SetUp failed for volume "{volume}" : failed to fetch token: {exc.detail}'
                )
                await self._events.post(pod, "Warning", "FailedMount", message)
            raise

    async def _stop_daemon(self, pod_uid: str) -> None:
        daemon = self._daemons.pop(pod_uid, None)
        if daemon is not None:
            stop, task = daemon
            stop.set()
            with contextlib.suppress(Exception):
                await task

    async def _terminate(self, pod: dict[str, Any], *, finish: bool, keep_logs: bool = False) -> None:
        """A pod being deleted: stop it and unprepare its claims, then (``finish``: it still exists, graceful
        deletion waits for its node) delete it for good, as the real kubelet does once its containers are gone
        and its resources reclaimed. ``keep_logs``: its containers ended, the pod stays (logs readable)."""
        meta = pod["metadata"]
        delay = 0.1
        try:
            while True:
                try:
                    await self._release(meta["uid"], keep_logs=keep_logs)
                    if finish:
                        with contextlib.suppress(NotFoundError, ConflictError):
                            await self._client.delete(
                                PODS, meta["name"], meta["namespace"], grace_period_seconds=0, uid=meta["uid"]
                            )
                    return
                except Exception as exc:
                    # a background task: an error here would leave the pod terminating for good without a word
                    # (nothing awaits it); say so and try again, as the real kubelet does
                    log.warning(
                        "terminating a pod failed; will retry",
                        node=self.node,
                        pod=meta.get("name"),
                        error=repr(exc),
                    )
                await asyncio.sleep(delay)
                delay = min(delay * 2, self._max_backoff)
        finally:
            self._terminating.discard(meta["uid"])

    async def _release(self, pod_uid: str, *, keep_logs: bool = False) -> None:
        """Stop its containers, then unprepare the pod's claims that no other pod on this node still uses;
        retry until done."""
        await self._stop_daemon(pod_uid)
        self.health.stopped(pod_uid)
        if self._logs is not None:
            self._logs.stopped(pod_uid, keep=keep_logs)
        claims = self._prepared.pop(pod_uid, [])
        in_use = {r.uid for prepared in self._prepared.values() for _, r in prepared}
        pending: dict[str, list[ClaimRef]] = {}
        for driver, ref in claims:
            if ref.uid not in in_use:
                pending.setdefault(driver, []).append(ref)
        try:
            await self._unprepare(pending)
        except BaseException:
            # what is left stays recorded, so that a retry of the pod's termination still unprepares it
            self._prepared.setdefault(pod_uid, []).extend((d, r) for d, refs in pending.items() for r in refs)
            raise

    async def _unprepare(self, pending: dict[str, list[ClaimRef]]) -> None:
        """Unprepare each driver's claims until none is left (``pending`` shrinks as they are done)."""
        delay = 0.1
        while pending:
            for driver, refs in list(pending.items()):
                with contextlib.suppress(GpudraError):
                    plugin = await self._connect(driver)
                    try:
                        results = await plugin.unprepare(refs)
                    except KubeletPluginError:
                        self._plugins.failed(plugin)
                        raise
                    pending[driver] = [r for r in refs if results[r.uid].error]
                if not pending[driver]:
                    del pending[driver]
            if not pending:
                return
            log.warning(
                "unprepare failed; will retry",
                node=self.node,
                claims=[r.name for v in pending.values() for r in v],
            )
            await asyncio.sleep(delay)
            delay = min(delay * 2, self._max_backoff)
