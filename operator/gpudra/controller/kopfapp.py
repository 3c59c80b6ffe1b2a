"""The controller process: a kopf operator with gpudra's handlers, runnable in-process (``gpudra up``) or alone.

It watches in two ways, each for what it is for: kopf for the kinds whose handlers need retries and finalizers
(ComputeDomains, MigLayouts), and the process's shared informers (``gpudra.kube.informer.Informers``, one per kind
and selection) for every cache and view: claims, slices, DeviceClasses, claim templates, Nodes, waiting pods, the
domains' daemon pods and cliques. Handlers stay thin: parse the body, call a pure function, apply through the
client layer, map errors.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import Counter
from collections.abc import Callable, Coroutine, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from types import TracebackType
from typing import Any

import kopf

from gpudra.api.core import Namespace, Node
from gpudra.api.dra import DeviceClass, ResourceClaim, ResourceSlice
from gpudra.config import ControllerSettings
from gpudra.controller.computedomains import CHANGE_HANDLED_KINDS, register_compute_domains
from gpudra.controller.configchecks import register_config_checks
from gpudra.controller.diffbase import LeanDiffBaseStorage, LeanProgressStorage
from gpudra.controller.explainschedule import ExplainSchedule
from gpudra.controller.kopfstreams import KopfStreams
from gpudra.controller.miglayouts import MigLayoutReconciler
from gpudra.controller.pending import PendingClaims
from gpudra.controller.pendingpods import PendingPods
from gpudra.controller.usage import Attribution
from gpudra.controller.webview.server import WebViewServer
from gpudra.controller.webview.state import FleetView
from gpudra.errors import ConfigurationError, GpudraError, KubeError
from gpudra.kube.client import KubeClient
from gpudra.kube.informer import Informers
from gpudra.kube.kubeconfig import Credentials, in_cluster_credentials, read_credentials
from gpudra.kube.resources import DEVICE_CLASSES, NAMESPACES, NODES, RESOURCE_CLAIMS, RESOURCE_SLICES
from gpudra.metrics import Metrics
from gpudra.planning.podclaims import implicit_uid
from gpudra.planning.summaries import slice_device_counts
from gpudra.telemetry import get_logger

log = get_logger(__name__)
STOP_CHECK_SECONDS = 0.5
"""How long a thread waits on a threading stop flag before it is asked again (a stop is seen at once)."""
KOPF_DISCOVERY_SECONDS = 5.0
"""How long a stop waits for kopf to finish discovering the API's resources (controller/kopfstreams.py)."""
WATCH_GATHER_SECONDS = 0.1
"""A watch of the controller's informers whose events come closer together than this is read at most this often:
at 1,000 nodes with 150 claim events a second, reading each event alone was about half of the controller's CPU
(docs/performance.md). An event after a quiet spell is read at once; in a busy one, an event waits up to this."""


class _Logged:
    """A failure in one use of an event is logged and does not keep the event from the next use: a bug in one
    consumer must not starve the others (kopf isolates handlers the same way). A class, not a
    ``contextlib.contextmanager``: three of them a claim change, whose generators were 2 % of a controller's CPU."""

    __slots__ = ("_uid", "_what")

    def __init__(self, what: str, uid: str) -> None:
        self._what = what
        self._uid = uid

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool:
        if not isinstance(exc, Exception):
            return False
        log.exception("handling a claim change failed", part=self._what, uid=self._uid, exc_info=exc)
        return True


@dataclass
class Controller:
    """The controller's parts: kopf's handlers (``registry``), the informers every cache and view shares, and the
    loops that run beside them."""

    registry: kopf.OperatorRegistry
    informers: Informers
    pending: PendingClaims
    """What the controller says of the pending claims (the web view draws from it the claims no scheduler will
    allocate)."""
    loops: list[tuple[str, Callable[[], Coroutine[Any, Any, None]]]] = field(default_factory=list)
    """(name, the loop) of each loop to run beside kopf until the controller stops."""
    warm: Callable[[], None] = lambda: None
    """Run once every informer has listed, before the controller is ready."""


def build_controller(settings: ControllerSettings, metrics: Metrics, client: KubeClient) -> Controller:
    """kopf handles what needs its retries and finalizers (ComputeDomains, MigLayouts); every other kind is
    watched by one shared informer per kind."""
    registry = kopf.OperatorRegistry()
    informers = Informers(client, gather_seconds=WATCH_GATHER_SECONDS)
    published: dict[str, tuple[str, Counter[str]]] = {}
    pending = PendingClaims(client, metrics, driver=settings.driver_name, mig_planner=settings.mig_planner)
    pods = PendingPods(client, informers, pending)
    attribution = Attribution(metrics)
    domains = register_compute_domains(registry, informers, settings, metrics, client)
    claim_checks = register_config_checks(informers, settings, client)
    mig_layouts = MigLayoutReconciler(client, settings)
    classes: dict[str, DeviceClass] = {}

    @kopf.on.event("gpudra.dev", "v1alpha1", "miglayouts", registry=registry)
    def miglayout_event(type: str, body: kopf.Body, **_: Any) -> None:
        mig_layouts.layout_event(type, dict(body))

    async def node_event(kind: str, body: dict[str, Any]) -> None:
        mig_layouts.node_event(kind, body)
        name = str(body["metadata"]["name"])
        pending.live.node_changed(name, None if kind == "DELETED" else Node.model_validate(body))

    async def class_event(kind: str, body: dict[str, Any]) -> None:
        name = str(body["metadata"]["name"])
        if kind == "DELETED":
            classes.pop(name, None)
        else:
            classes[name] = DeviceClass.model_validate(body)
        pending.live.class_changed(name, classes.get(name))

    async def namespace_event(kind: str, body: dict[str, Any]) -> None:
        labels = None if kind == "DELETED" else (body["metadata"].get("labels") or {})
        pending.live.namespace_changed(str(body["metadata"]["name"]), labels)

    claims = informers.informer(RESOURCE_CLAIMS, parse=ResourceClaim.model_validate)
    slices = informers.informer(RESOURCE_SLICES, parse=ResourceSlice.model_validate)

    # One handler for every use of a claim's change: parsed once (by the informer, which admitted it), each use
    # isolated from the others' failures.
    async def claim_event(kind: str, body: dict[str, Any]) -> None:
        uid = str(body["metadata"].get("uid") or "")
        claim = None if kind == "DELETED" else claims.parsed(body, ResourceClaim)
        with _Logged("claim usage", uid):
            attribution.claim_changed(uid, claim)
            pending.claim_changed(uid, claim)
            pods.claim_changed(uid, claim)
        with _Logged("claim's ComputeDomains", uid):
            domains.claim_changed(claim, uid)
        with _Logged("claim config checks", uid):
            await claim_checks(kind, body)

    async def slice_event(kind: str, body: dict[str, Any]) -> None:
        name = str(body["metadata"]["name"])
        slice_ = None if kind == "DELETED" else slices.parsed(body, ResourceSlice)
        attribution.slice_changed(name, slice_)
        pending.live.slice_changed(name, slice_)
        old_node, old = published.pop(name, ("", Counter()))
        node, counts = (
            ("", Counter[str]()) if slice_ is None else slice_device_counts(slice_, settings.driver_name)
        )
        if node:
            published[name] = (node, counts)
        totals: Counter[str] = Counter()
        for other_node, other in published.values():
            if other_node in {node, old_node}:
                totals.update({f"{other_node}\0{t}": n for t, n in other.items()})
        for key in {f"{old_node}\0{t}" for t in old} | {f"{node}\0{t}" for t in counts}:
            n, t = key.split("\0")
            if n:
                metrics.cluster_devices.labels(n, t).set(totals.get(key, 0))

    informers.informer(NODES, parse=Node.model_validate).subscribe(node_event)
    informers.informer(DEVICE_CLASSES, parse=DeviceClass.model_validate).subscribe(class_event)
    claims.subscribe(claim_event)
    slices.subscribe(slice_event)
    informers.informer(NAMESPACES, parse=Namespace.model_validate).subscribe(namespace_event)

    for informer in informers.each():  # last, so that a change counts once every handler of it is done
        informer.subscribe(partial(_counted, metrics.watch_events.labels(informer.resource.plural).inc))

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        if settings.kubeconfig is not None:
            # kopf's own kubeconfig login reads only $KUBECONFIG: the client and kopf must be the same user
            return _connection_info(read_credentials(settings.kubeconfig))
        # kopf's own service-account login dials https://kubernetes.default.svc, which needs cluster DNS (and its
        # service proxy): the pod's client dials KUBERNETES_SERVICE_HOST, and kopf must reach the same server
        in_cluster = in_cluster_credentials()
        if in_cluster is not None:
            return _connection_info(in_cluster)
        return kopf.login_with_kubeconfig(**kwargs)

    # Not a kopf timer: timers put a finalizer on every claim, and a controller must never block the deletion of
    # objects it does not own. One loop over the unallocated claims the claim handler keeps instead.
    loops: list[tuple[str, Callable[[], Coroutine[Any, Any, None]]]] = [
        ("pending claims", partial(_explain_loop, pending, pods, settings, metrics, classes)),
        ("usage", attribution.refresh_loop),
        ("MigLayouts", mig_layouts.run),
        ("ComputeDomain status", domains.run),
    ]
    return Controller(registry, informers, pending, loops, warm=pending.live.warm)


async def _counted(count: Callable[[], None], kind: str, body: dict[str, Any]) -> None:
    count()


def _connection_info(credentials: Credentials) -> kopf.ConnectionInfo:
    return kopf.ConnectionInfo(
        server=credentials.server,
        ca_path=credentials.ca_path,
        ca_data=credentials.ca_data,
        insecure=credentials.insecure or None,
        token=credentials.token,
        certificate_path=credentials.certificate_path,
        certificate_data=credentials.certificate_data,
        private_key_path=credentials.private_key_path,
        private_key_data=credentials.private_key_data,
        default_namespace=credentials.namespace,
    )


async def _explain_loop(
    pending: PendingClaims,
    pods: PendingPods,
    settings: ControllerSettings,
    metrics: Metrics,
    device_classes: Mapping[str, DeviceClass],
) -> None:
    """Explain each claim unallocated for longer than the grace period as soon as it is, then again every pending
    interval, and tell the pods that have waited as long on them. A tick looks for the claims whose time has come
    (a look at the claims kept in memory); only they are explained, over the live view of the cluster."""
    schedule = ExplainSchedule(settings.pending_grace_seconds, settings.pending_interval_seconds)
    while True:
        await asyncio.sleep(schedule.tick)
        classes = dict(device_classes)
        now = time.time()
        past_grace = schedule.past_grace(list(pending.unallocated.values()), now)
        claims = [c for c in past_grace if schedule.due(c.metadata.uid or "", now)]
        if not schedule.round_due(now, anything=bool(claims or pods.waiting)):
            continue
        try:
            with metrics.explain_round_seconds.time():
                done = await pods.check_all(
                    claims,
                    classes,
                    grace_seconds=settings.pending_grace_seconds,
                    due=partial(schedule.due, now=now),
                    planned=past_grace,
                )
        except GpudraError as exc:  # the API server restarting, say: explain again next round
            log.warning("explaining pending claims failed; will retry", error=str(exc))
            continue
        except Exception:  # a bug must not end the explanations for good
            log.exception("explaining pending claims failed unexpectedly; will retry")
            continue
        schedule.explained(done, now, set(pending.unallocated) | {implicit_uid(u) for u in pods.waiting})


async def _credentials_accepted(client: KubeClient) -> None:
    """A ConfigurationError when the API server refuses the controller's credentials, before anything starts:
    the informers and kopf would otherwise each fail on it, kopf with its tracebacks and advice to install an
    API client. A server not reachable yet is left to them: they retry."""
    try:
        await client.server_version()
    except KubeError as exc:
        if exc.status == 401:
            await client.close()
            raise ConfigurationError(
                "the API server refused the controller's credentials (401 Unauthorized): the token of its "
                "ServiceAccount, or the kubeconfig's user, is not valid for this cluster"
            ) from exc


async def run_controller(
    settings: ControllerSettings,
    metrics: Metrics,
    *,
    stop: asyncio.Event | threading.Event | None = None,
    ready: asyncio.Event | threading.Event | None = None,
    standalone: bool = True,
    web_view_started: Callable[[str], None] | None = None,
) -> None:
    """Run until ``stop`` is set; ``ready`` is set once kopf has started and every informer has listed once.
    With ``settings.web_port`` set, the web view is served over the controller's informers while the controller
    runs, and ``web_view_started`` is told its URL.

    kopf treats every asyncio task created after its start as its own and cancels them when it stops, so the
    informers and the loops beside kopf start before it, and an embedding process (``gpudra up``, tests) runs it
    in a thread with its own event loop and threading flags.
    """
    kopf_settings = kopf.OperatorSettings()
    # kopf runs synchronous callbacks in this pool; its default pool is never shut down, and would leave a thread
    # behind each controller an embedding process starts and stops
    kopf_settings.execution.executor = ThreadPoolExecutor(thread_name_prefix="kopf-sync")
    kopf_settings.posting.level = 20  # INFO and above become Events on the objects
    kopf_settings.watching.server_timeout = 300
    kopf_settings.networking.request_timeout = 30
    kopf_settings.persistence.finalizer = "gpudra.dev/controller"
    kopf_settings.persistence.diffbase_storage = LeanDiffBaseStorage(tracked_kinds=CHANGE_HANDLED_KINDS)
    kopf_settings.persistence.progress_storage = LeanProgressStorage()
    client = await KubeClient.from_environment(settings.kubeconfig, field_manager="gpudra-controller")
    await _credentials_accepted(client)
    web_view = None
    streams = KopfStreams()
    beside: list[asyncio.Task[None]] = []
    try:
        controller = build_controller(settings, metrics, client)
        if settings.web_port is not None:
            _, minor = await client.server_version()
            view = FleetView(
                controller.informers,
                driver=settings.driver_name,
                namespace=settings.namespace,
                kube_minor=minor,
                stranded=controller.pending.stranded,
            )
            controller.pending.told_listeners.append(view.wake)
            web_view = WebViewServer(settings.web_host, settings.web_port, view)
            url = await web_view.start()
            if web_view_started is not None:
                web_view_started(url)
        started = asyncio.Event()
        beside.append(asyncio.create_task(controller.informers.run(), name="informers"))
        beside.extend(asyncio.create_task(loop(), name=f"beside kopf: {n}") for n, loop in controller.loops)
        if ready is not None:
            beside.append(asyncio.create_task(_raise_once_up(controller, started, ready), name="ready"))
        streams.install()
        operator = asyncio.create_task(
            kopf.operator(
                registry=controller.registry,
                settings=kopf_settings,
                clusterwide=True,
                standalone=standalone,
                ready_flag=started,
            ),
            name="kopf",
        )
        stopping = asyncio.create_task(_until_set(stop), name="stop")
        try:
            await asyncio.wait({operator, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()
            if not operator.done():
                await streams.discovered(KOPF_DISCOVERY_SECONDS)
            operator.cancel()  # kopf stops at once, whatever it is busy with (controller/kopfstreams.py)
            with contextlib.suppress(asyncio.CancelledError):
                await operator
            if closed := await streams.close():
                log.debug("closed watch streams kopf left suspended", streams=closed)
            streams.uninstall()
            kopf_settings.execution.executor.shutdown(wait=False, cancel_futures=True)
    finally:
        for task in beside:
            task.cancel()
        await asyncio.gather(*beside, return_exceptions=True)
        if web_view is not None:
            await web_view.stop()
        await client.close()


async def _until_set(flag: asyncio.Event | threading.Event | None) -> None:
    """Until ``flag`` is set (forever when None)."""
    if flag is None:
        await asyncio.Event().wait()
    elif isinstance(flag, asyncio.Event):
        await flag.wait()
    else:
        while not await asyncio.to_thread(flag.wait, STOP_CHECK_SECONDS):
            pass


async def _raise_once_up(
    controller: Controller, started: asyncio.Event, ready: asyncio.Event | threading.Event
) -> None:
    """Set ``ready`` once kopf has run its startup and every informer has listed once (and the controller has
    built what its first rounds read)."""
    await asyncio.gather(started.wait(), controller.informers.synced())
    controller.warm()
    ready.set()
