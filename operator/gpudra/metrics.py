"""All Prometheus metrics of gpudra, on a registry owned by the process (passed down, never a module global),
and the routes that serve them with health endpoints (metricsserver.py serves them)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.metrics_core import GaugeMetricFamily

from gpudra.metricsserver import Answer, MetricsServer, Query, Route, serve

ALLOCATION_LABELS = (
    "dra_claim_name", "dra_claim_namespace", "dra_driver_name", "dra_pool_name", "dra_device_name",
    "dra_mig_profile", "dra_mig_device_uuid", "gpu_uuid", "pod", "namespace",
)  # fmt: skip
"""dcgm-exporter's DRA label names (plus the GPU UUID and the consuming pod) on per-device allocation series."""


class HeldSeries:
    """A gauge whose series are 1 while some holder holds them, and absent once none does: a label tuple is
    counted by its holders (a claim re-created under its name on the same device has its predecessor's labels,
    and its predecessor's deletion may be handed after its add). Scraped as a gauge of the same name, labels and
    values as prometheus-client's own would give; holding and releasing are a dict's operations, where a
    labelled gauge makes and drops a child with its own lock for each series (about 4 % of a controller's CPU in
    bench controller, at 50 claims a second)."""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str], registry: CollectorRegistry):
        self._name = name
        self.documentation = documentation
        self._labelnames = tuple(labelnames)
        self._held: dict[tuple[str, ...], int] = {}
        registry.register(self)

    def hold(self, labels: tuple[str, ...]) -> None:
        self._held[labels] = self._held.get(labels, 0) + 1

    def release(self, labels: tuple[str, ...]) -> None:
        held = self._held.pop(labels, 0) - 1
        if held > 0:
            self._held[labels] = held

    def describe(self) -> list[GaugeMetricFamily]:
        return [GaugeMetricFamily(self._name, self.documentation, labels=self._labelnames)]

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(self._name, self.documentation, labels=self._labelnames)
        for labels in list(self._held):  # a copy: a scrape from another thread sees one moment
            family.add_metric(labels, 1.0)
        yield family


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.devices_published = Gauge(
            "gpudra_devices_published",
            "Devices this node's agent publishes in its ResourceSlices, by device type and MIG profile.",
            ["node", "driver", "type", "profile"],
            registry=r,
        )
        self.slices_published = Gauge(
            "gpudra_resourceslices_published",
            "ResourceSlices this node's agent currently owns.",
            ["node", "driver"],
            registry=r,
        )
        self.slice_syncs = Counter(
            "gpudra_resourceslice_syncs_total",
            "Slice reconciliations by outcome: unchanged, updated, failed.",
            ["node", "result"],
            registry=r,
        )
        self.slice_sync_seconds = Histogram(
            "gpudra_resourceslice_sync_seconds",
            "Time to bring this node's ResourceSlices in line with the hardware.",
            ["node"],
            registry=r,
        )
        self.cluster_devices = Gauge(
            "gpudra_cluster_devices",
            "Devices of this driver published in the cluster, as the controller sees them, by node and type.",
            ["node", "type"],
            registry=r,
        )
        self.pending_claims = Gauge(
            "gpudra_pending_claims",
            "Claims of this driver pending past the grace period, by the allocator's reason code.",
            ["reason"],
            registry=r,
        )
        self.known_pending_reasons: set[str] = set()
        self.allocation_failures = Counter(
            "gpudra_allocation_failures_total",
            "Pending claims explained, counted once per claim and reason code (bounded label set).",
            ["reason"],
            registry=r,
        )
        self.watch_events = Counter(
            "gpudra_watch_events_total",
            "Changes the controller's informers handed to every one of their handlers, by resource (a rate that "
            "falls behind the API server's means the controller does not keep up).",
            ["resource"],
            registry=r,
        )
        self.explain_round_seconds = Histogram(
            "gpudra_explain_round_seconds",
            "Time one round of explaining pending claims and pods took (one round every pending interval; the "
            "count says the explainer is running).",
            buckets=(0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10),
            registry=r,
        )
        self.claim_pending_seconds = Histogram(
            "gpudra_claim_pending_seconds",
            "Time from creation to allocation of claims that were seen pending.",
            buckets=(1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600),
            registry=r,
        )
        self.device_allocated = HeldSeries(
            "gpudra_device_allocated",
            "1 for each allocated device, labelled with its claim, pool, device, MIG profile and UUIDs, and the pod "
            "using it (dcgm-exporter's dra_* label names, so dashboards can join on them).",
            ALLOCATION_LABELS,
            registry=r,
        )
        self.node_allocated = Gauge(
            "gpudra_node_allocated",
            "Allocated GPU resources per node: devices, memory (bytes), multiprocessors, memory_slices (MIG).",
            ["node", "resource"],
            registry=r,
        )
        self.node_capacity = Gauge(
            "gpudra_node_capacity",
            "Published GPU resources per node: devices, memory (bytes), multiprocessors, memory_slices (MIG).",
            ["node", "resource"],
            registry=r,
        )
        self.hardware_reads = Counter(
            "gpudra_hardware_reads_total",
            "Inventory reads through the GPU backend by outcome.",
            ["node", "result"],
            registry=r,
        )
        self.prepare_requests = Counter(
            "gpudra_prepare_requests_total",
            "Claims the kubelet asked this node to prepare, by outcome (ok, failed).",
            ["node", "result"],
            registry=r,
        )
        self.unprepare_requests = Counter(
            "gpudra_unprepare_requests_total",
            "Claims the kubelet asked this node to unprepare, by outcome (ok, failed).",
            ["node", "result"],
            registry=r,
        )
        self.prepare_errors = Counter(
            "gpudra_prepare_errors_total",
            "Failed prepares and unprepares by operation and reason code (WrongNode, DeviceInUse, ...).",
            ["node", "operation", "reason"],
            registry=r,
        )
        self.prepare_seconds = Histogram(
            "gpudra_prepare_seconds",
            "Time to prepare one claim (read the claim, configure sharing, write the CDI spec).",
            ["node"],
            registry=r,
        )
        self.unprepare_seconds = Histogram(
            "gpudra_unprepare_seconds",
            "Time to unprepare one claim.",
            ["node"],
            registry=r,
        )
        self.prepared_devices = Gauge(
            "gpudra_prepared_devices",
            "Devices of claims prepared on this node (checkpoint state PrepareCompleted).",
            ["node"],
            registry=r,
        )
        self.prepared_device_counts: dict[str, dict[str, Callable[[], int]]] = {}
        """Node -> driver -> how many devices the driver has prepared there, summed by ``prepared_devices`` when
        scraped (:class:`gpudra.agent.preparemetrics.PrepareMetrics` sets its driver's)."""
        self.recovery_actions = Counter(
            "gpudra_prepare_recovery_actions_total",
            "Start-up reconcile actions: regenerated, rolled_back, finished, orphan_removed, checkpoint_reset.",
            ["node", "action"],
            registry=r,
        )

        self.computedomains = Gauge(
            "gpudra_computedomains",
            "ComputeDomains the controller tracks, by status.status (Ready, NotReady).",
            ["status"],
            registry=r,
        )
        self.computedomain_ready_seconds = Histogram(
            "gpudra_computedomain_ready_seconds",
            "Time from a ComputeDomain's creation to its first Ready status, observed once per domain.",
            buckets=(0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1800),
            registry=r,
        )
        self.computedomain_status_writes = Counter(
            "gpudra_computedomain_status_writes_total",
            "ComputeDomain status writes by outcome: written, failed (no-op recomputations are not written).",
            ["result"],
            registry=r,
        )
        self.computedomain_status_conflicts = Counter(
            "gpudra_computedomain_status_conflicts_total",
            "ComputeDomain status writes the API server answered with 409 Conflict (expected 0: merge patches "
            "carry no resourceVersion).",
            registry=r,
        )
        self.computedomain_cleanups = Counter(
            "gpudra_computedomain_cleanups_total",
            "ComputeDomain deletions by outcome: complete, retried, incomplete (gave up, finalizer released).",
            ["result"],
            registry=r,
        )


def metrics_app(registry: CollectorRegistry, ready: Callable[[], bool]) -> dict[str, Route]:
    """/metrics in the Prometheus text format (``?name[]=`` sample names: only those, as prometheus-client's own
    handler does), /healthz (process alive), /readyz (``ready()`` is true). Read-only: GET (and HEAD) only, nothing
    a caller sends changes the process (docs/security.md)."""

    def metrics(query: Query) -> Answer:
        names = query.get("name[]")
        chosen = registry.restricted_registry(names) if names else registry
        return Answer(200, generate_latest(chosen), CONTENT_TYPE_LATEST)

    def readyz(_: Query) -> Answer:
        return Answer(200, b"ok") if ready() else Answer(503, b"not ready")

    return {
        "/metrics": metrics,
        "/healthz": lambda _: Answer(200, b"ok"),
        "/readyz": readyz,
    }


async def serve_metrics(
    routes: dict[str, Route],
    host: str,
    port: int,
    *,
    setting: str = "GPUDRA_METRICS_PORT, GPUDRA_METRICS_HOST",
) -> MetricsServer:
    """Serve ``routes`` on ``host`` (empty: every address, IPv4 and IPv6) and ``port``; ``setting``: what the
    user set them with (the agent's and the controller's variables by default)."""
    return await serve(routes, host, port, setting=setting)
