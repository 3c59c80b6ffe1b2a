"""The plain-Python side of the kubelet plugin API: what the agent's handler receives and returns.

The gRPC servicers convert protobuf messages to and from these types, so nothing outside this package touches
protobuf. ``PluginHandler`` is the seam the node agent implements; ``CallObserver`` is where metrics attach.
"""

from __future__ import annotations

import enum
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from gpudra.kube.resources import RESOURCE_CLAIMS

DRA_PLUGIN_TYPE = "DRAPlugin"
"""PluginInfo.type of a DRA driver."""

V1_SERVICE = "v1.DRAPlugin"
V1BETA1_SERVICE = "v1beta1.DRAPlugin"
HEALTH_SERVICES = ("v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth")
"""The health stream's versions, newest first, as a plugin advertises them: the 1.37 kubelet dials the first it
knows (v1), the 1.34 to 1.36 kubelets know only v1alpha1. Same messages, different gRPC package."""
HealthVersion = Literal["v1", "v1alpha1"]

ApiVersion = Literal["v1", "v1beta1"]
Method = Literal["prepare", "unprepare"]


@dataclass(frozen=True, slots=True)
class ClaimRef:
    """A claim as the kubelet names it; the plugin reads the ResourceClaim itself."""

    namespace: str
    uid: str
    name: str

    def event_object(self) -> dict[str, Any]:
        """Enough of the ResourceClaim to be an Event's involved object."""
        return {
            "apiVersion": RESOURCE_CLAIMS.api_version,
            "kind": RESOURCE_CLAIMS.kind,
            "metadata": {"namespace": self.namespace, "name": self.name, "uid": self.uid},
        }


@dataclass(frozen=True, slots=True)
class PreparedDevice:
    """One device of a prepared claim, as the kubelet needs it to start containers.

    ``request_names`` holds base request names ("req/sub" is reported as "req"); empty means every request.
    ``cdi_device_ids`` are fully qualified CDI ids (``vendor/class=name``).
    """

    pool_name: str
    device_name: str
    request_names: Sequence[str] = ()
    cdi_device_ids: Sequence[str] = ()
    share_id: str | None = None


@dataclass(frozen=True, slots=True)
class PrepareResult:
    """The outcome for one claim: its devices, or a non-empty ``error`` that fails this claim only."""

    devices: Sequence[PreparedDevice] = ()
    error: str = ""


@dataclass(frozen=True, slots=True)
class UnprepareResult:
    """The outcome of unpreparing one claim; a non-empty ``error`` makes the kubelet retry."""

    error: str = ""


class PluginHandler(Protocol):
    """What the node agent implements. Results are keyed by claim UID.

    The servicer calls these with claims de-duplicated by UID. It tolerates handler bugs: a claim missing
    from the result gets an error entry, an unexpected exception becomes a per-claim error, and (for batches
    of several claims) the claims are retried one by one so that one bad claim does not fail its neighbours.
    Prepare and unprepare must therefore be idempotent, which the kubelet requires anyway.
    """

    async def prepare(self, claims: Sequence[ClaimRef]) -> dict[str, PrepareResult]: ...

    async def unprepare(self, claims: Sequence[ClaimRef]) -> dict[str, UnprepareResult]: ...


class HealthStatus(enum.IntEnum):
    """Device health as the kubelet's health stream encodes it."""

    UNKNOWN = 0
    HEALTHY = 1
    UNHEALTHY = 2


@dataclass(frozen=True, slots=True)
class DeviceHealth:
    """The health of one device; ``last_updated_time`` is unix seconds. The kubelet reads a device as UNKNOWN
    when no report named it for ``health_check_timeout_seconds`` (0: its default, 30 s), counted from when the
    report arrived, so a source must repeat itself sooner than that; ``message`` says why (1.36+ show it)."""

    pool_name: str
    device_name: str
    health: HealthStatus
    last_updated_time: int
    health_check_timeout_seconds: int = 0
    message: str = ""


HealthSource = Callable[[], AsyncIterator[Sequence[DeviceHealth]]]
"""Called once per kubelet stream; each item lists the health of ALL devices of the driver."""


@dataclass(frozen=True, slots=True)
class CallRecord:
    """What one finished Node(Un)PrepareResources call did, for metrics and logs."""

    method: Method
    api_version: ApiVersion
    claims: int
    failed_claims: int
    duration_seconds: float
    handler_exception: bool = False


class CallObserver(Protocol):
    """Per-call hooks; implementations must be quick and must not raise (errors are logged and ignored)."""

    def started(self, method: Method, api_version: ApiVersion, claims: int) -> None: ...

    def finished(self, record: CallRecord) -> None: ...


@dataclass
class CallCounters:
    """A ready-made CallObserver that counts; the agent can export these to prometheus."""

    in_flight: int = 0
    calls: dict[tuple[Method, ApiVersion], int] = field(default_factory=dict)
    claims: dict[Method, int] = field(default_factory=dict)
    failed_claims: dict[Method, int] = field(default_factory=dict)
    handler_exceptions: int = 0
    records: list[CallRecord] = field(default_factory=list)
    keep_records: int = 100

    def started(self, method: Method, api_version: ApiVersion, claims: int) -> None:
        self.in_flight += 1

    def finished(self, record: CallRecord) -> None:
        self.in_flight -= 1
        key = (record.method, record.api_version)
        self.calls[key] = self.calls.get(key, 0) + 1
        self.claims[record.method] = self.claims.get(record.method, 0) + record.claims
        self.failed_claims[record.method] = self.failed_claims.get(record.method, 0) + record.failed_claims
        self.handler_exceptions += int(record.handler_exception)
        self.records.append(record)
        del self.records[: -self.keep_records]


@dataclass(frozen=True, slots=True)
class RegistrationState:
    """What the kubelet last said through NotifyRegistrationStatus; ``notifications`` counts the calls."""

    registered: bool = False
    error: str = ""
    notifications: int = 0


@dataclass(frozen=True, slots=True)
class PluginInfo:
    """What a plugin answers to GetInfo."""

    type: str
    name: str
    endpoint: str
    supported_versions: Sequence[str]
