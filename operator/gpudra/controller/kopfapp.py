"""The controller process: a kopf operator with gpudra's handlers, runnable in-process (``gpudra up``) or alone.

Handlers stay thin: parse the body, call a pure function, apply through the client layer, map errors.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import kopf

from gpudra.api.dra import DeviceClass, ResourceClaim, ResourceSlice
from gpudra.config import ControllerSettings
from gpudra.controller.bodies import parse_body
from gpudra.controller.computedomains import CHANGE_HANDLED_KINDS, register_compute_domains
from gpudra.controller.configchecks import register_config_checks
from gpudra.controller.diffbase import LeanDiffBaseStorage, LeanProgressStorage
from gpudra.controller.kopflifecycle import Insights, close_stranded_streams, raise_once_discovered
from gpudra.controller.miglayouts import MigLayoutReconciler
from gpudra.controller.pending import PendingClaims, age_seconds
from gpudra.controller.pendingpods import PendingPods
from gpudra.controller.usage import Attribution
from gpudra.controller.webview.server import WebViewServer
from gpudra.errors import GpudraError
from gpudra.kube.client import KubeClient
from gpudra.kube.kubeconfig import Credentials, in_cluster_credentials, read_credentials
from gpudra.metrics import Metrics
from gpudra.planning.summaries import slice_device_counts
from gpudra.telemetry import get_logger

log = get_logger(__name__)


@contextlib.contextmanager
def _logged(what: str, uid: str) -> Iterator[None]:
    """A failure in one use of an event is logged and does not keep the event from the next use."""
    try:
        yield
    except (
        Exception
    ):  # a bug in one consumer must not starve the others (kopf isolates handlers the same way)
        log.exception("handling a claim change failed", part=what, uid=uid)


def build_registry(
    settings: ControllerSettings, metrics: Metrics, client: KubeClient
) -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()
    published: dict[str, tuple[str, Counter[str]]] = {}
    pending = PendingClaims(client, metrics, driver=settings.driver_name, mig_planner=settings.mig_planner)
    pods = PendingPods(client, pending)
    attribution = Attribution(metrics)
    explainers: list[asyncio.Task[None]] = []
    domains = register_compute_domains(registry, settings, metrics, client)
    claim_checks = register_config_checks(registry, settings, client)
    mig_layouts = MigLayoutReconciler(client, settings)

    @kopf.on.event("gpudra.dev", "v1alpha1", "miglayouts", registry=registry)
    def miglayout_event(type: str, body: kopf.Body, **_: Any) -> None:
        mig_layouts.layout_event(type, dict(body))

    @kopf.on.event("", "v1", "nodes", registry=registry)
    def node_event(type: str, body: kopf.Body, **_: Any) -> None:
        mig_layouts.node_event(type, dict(body))

    @kopf.index("resource.k8s.io", "v1", "deviceclasses", registry=registry, id="device_classes")
    def device_classes(name: str, body: kopf.Body, **_: Any) -> dict[str, DeviceClass]:
        parsed = parse_body(DeviceClass, body)
        return {name: parsed} if parsed is not None else {}

    @kopf.on.startup(registry=registry)
    async def start_explainer(**kwargs: Any) -> None:
        # Not a kopf timer: timers put a finalizer on every claim, and a controller must never block the deletion
        # of objects it does not own. One loop over the unallocated claims the claim handler keeps instead.
        explainer = asyncio.get_running_loop().create_task(
            _explain_loop(pending, pods, settings, kwargs["device_classes"])
        )
        explainers.append(explainer)
        explainers.append(asyncio.get_running_loop().create_task(pods.informer.run()))
        explainers.append(asyncio.get_running_loop().create_task(attribution.refresh_loop()))
        explainers.append(asyncio.get_running_loop().create_task(mig_layouts.run()))

    @kopf.on.cleanup(registry=registry)
    async def stop_explainer(**_: Any) -> None:
        for explainer in explainers:
            explainer.cancel()
        await asyncio.gather(*explainers, return_exceptions=True)

    @kopf.on.cleanup(registry=registry)
    async def close_streams(settings: kopf.OperatorSettings, **_: Any) -> None:
        if closed := await close_stranded_streams(settings):
            log.debug("closed watch streams kopf left suspended", streams=closed)

    # One handler for every use of a claim's change (kopf's cost is per handler and event, indexes included: the
    # unallocated claims are kept here, not in a kopf index): parsed once, each use isolated from the others'
    # failures as separate handlers were.
    @kopf.on.event("resource.k8s.io", "v1", "resourceclaims", registry=registry)
    async def claim_event(type: str, body: kopf.Body, uid: str, **kwargs: Any) -> None:
        claim = None if type == "DELETED" else parse_body(ResourceClaim, body)
        with _logged("claim usage", uid):
            attribution.claim_changed(uid, claim)
            pending.claim_changed(uid, claim)
            pods.claim_changed(uid, claim)
        with _logged("claim's ComputeDomains", uid):
            domains.claim_changed(claim, uid)
        with _logged("claim config checks", uid):
            await claim_checks(type, body, kwargs)

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

    @kopf.on.event("resource.k8s.io", "v1", "resourceslices", registry=registry)
    async def slice_event(type: str, name: str, body: kopf.Body, **_: Any) -> None:
        slice_ = None if type == "DELETED" else parse_body(ResourceSlice, body)
        attribution.slice_changed(name, slice_)
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

    return registry


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
    device_classes: kopf.Index[str, DeviceClass],
) -> None:
    """Every interval, explain each claim unallocated for longer than the grace period, and tell the pods that
    have waited as long on them."""
    while True:
        await asyncio.sleep(min(settings.pending_interval_seconds, max(settings.pending_grace_seconds, 0.1)))
        classes = {name: next(iter(store)) for name, store in device_classes.items()}
        now = time.time()
        due = [
            claim
            for claim in list(pending.unallocated.values())
            if age_seconds(claim.metadata, now) >= settings.pending_grace_seconds
        ]
        try:
            await pods.check_all(due, classes, grace_seconds=settings.pending_grace_seconds)
        except GpudraError as exc:  # the API server restarting, say: explain again next round
            log.warning("explaining pending claims failed; will retry", error=str(exc))
        except Exception:  # a bug must not end the explanations for good
            log.exception("explaining pending claims failed unexpectedly; will retry")


async def run_controller(
    settings: ControllerSettings,
    metrics: Metrics,
    *,
    stop: asyncio.Event | threading.Event | None = None,
    ready: asyncio.Event | threading.Event | None = None,
    standalone: bool = True,
    web_view_started: Callable[[str], None] | None = None,
) -> None:
    """Run until ``stop`` is set; ``ready`` is set once kopf has discovered the API's resources (see
    :mod:`gpudra.controller.kopflifecycle`).
    With ``settings.web_port`` set, the web view is served (in a thread of its own) while the controller runs, and
    ``web_view_started`` is told its URL.

    kopf treats every asyncio task created after its start as its own and cancels them when it stops, so an
    embedding process (``gpudra up``, tests) runs it in a thread with its own event loop and threading flags.
    """
    kopf_settings = kopf.OperatorSettings()
    kopf_settings.posting.level = 20  # INFO and above become Events on the objects
    kopf_settings.watching.server_timeout = 300
    kopf_settings.networking.request_timeout = 30
    kopf_settings.persistence.finalizer = "gpudra.dev/controller"
    kopf_settings.persistence.diffbase_storage = LeanDiffBaseStorage(tracked_kinds=CHANGE_HANDLED_KINDS)
    kopf_settings.persistence.progress_storage = LeanProgressStorage()
    client = await KubeClient.from_environment(settings.kubeconfig, field_manager="gpudra-controller")
    web_view = None
    discovered: asyncio.Task[None] | None = None
    try:
        if settings.web_port is not None:
            web_view = WebViewServer(
                settings.web_host,
                settings.web_port,
                driver=settings.driver_name,
                namespace=settings.namespace,
                kubeconfig=settings.kubeconfig,
            )
            url = await asyncio.to_thread(web_view.start)
            if web_view_started is not None:
                web_view_started(url)
        insights = Insights()
        if ready is not None:
            discovered = asyncio.create_task(raise_once_discovered(insights, ready), name="readiness")
        await kopf.operator(
            registry=build_registry(settings, metrics, client),
            settings=kopf_settings,
            clusterwide=True,
            standalone=standalone,
            stop_flag=stop,
            insights=insights,
        )
    finally:
        if discovered is not None:
            discovered.cancel()
        if web_view is not None:
            await asyncio.to_thread(web_view.stop)
        await client.close()
