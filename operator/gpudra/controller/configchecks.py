"""What the API server cannot refuse, said as soon as an object is written: a claim or claim template whose request
names a DeviceClass that does not exist (yet), and opaque configs for gpudra's drivers that NVIDIA's strict decoding
refuses (an unknown sharing strategy, MPS limits out of range, a misspelt field). Kubernetes accepts both; without
a word here the claim would sit pending, or its pod would fail only when the kubelet prepares it.

Each problem is a Warning Event on the object (``DeviceClassNotFound``, ``InvalidDeviceConfig``) naming the field
path, and one log line; the same problem on the same object generation is reported once.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Iterator
from dataclasses import dataclass
from typing import Any

from gpudra.api.dra import DeviceClass, ResourceClaimTemplate
from gpudra.api.nvidia import decode_opaque
from gpudra.config import ControllerSettings
from gpudra.errors import InvalidInputError
from gpudra.kube.client import KubeClient
from gpudra.kube.events import EventRecorder
from gpudra.kube.informer import Informers
from gpudra.kube.resources import DEVICE_CLASSES, RESOURCE_CLAIM_TEMPLATES
from gpudra.telemetry import get_logger

log = get_logger(__name__)
_REPORTED_LIMIT = 50_000


@dataclass(frozen=True, slots=True)
class Problem:
    reason: str
    field: str
    message: str

    def text(self) -> str:
        return f"{self.field}: {self.message}"


def _requests(devices: dict[str, Any], path: str) -> Iterator[tuple[str, str]]:
    """(field path, class name) of every request and subrequest."""
    for i, request in enumerate(devices.get("requests") or ()):
        exact = request.get("exactly")
        if isinstance(exact, dict):
            yield f"{path}.requests[{i}].exactly.deviceClassName", str(exact.get("deviceClassName") or "")
        for j, sub in enumerate(request.get("firstAvailable") or ()):
            yield (
                f"{path}.requests[{i}].firstAvailable[{j}].deviceClassName",
                str(sub.get("deviceClassName") or ""),
            )


def config_problems(configs: Any, path: str, drivers: Collection[str]) -> list[Problem]:
    """Pure: the opaque configs for ``drivers`` that do not decode, at ``<path>[i].opaque.parameters``."""
    problems = []
    for i, config in enumerate(configs or ()):
        opaque = config.get("opaque") if isinstance(config, dict) else None
        if not isinstance(opaque, dict) or opaque.get("driver") not in drivers:
            continue
        try:
            decode_opaque(opaque.get("parameters") or {})
        except InvalidInputError as error:
            field = f"{path}[{i}].opaque.parameters"
            problems.append(
                Problem("InvalidDeviceConfig", field, f"{error} (driver {opaque['driver']} refuses it)")
            )
    return problems


def claim_spec_problems(
    spec: dict[str, Any], path: str, classes: Collection[str], drivers: Collection[str]
) -> list[Problem]:
    """Pure: the problems of a claim spec at ``path`` (``spec`` of a claim, ``spec.spec`` of a template)."""
    devices = spec.get("devices") or {}
    here = f"{path}.devices"
    problems = [
        Problem(
            "DeviceClassNotFound",
            field,
            f'DeviceClass "{name}" does not exist (yet); the claim stays pending until it is created',
        )
        for field, name in _requests(devices, here)
        if name and name not in classes
    ]
    return problems + config_problems(devices.get("config"), f"{here}.config", drivers)


def problems_of(
    kind: str, body: dict[str, Any], classes: Collection[str], drivers: Collection[str]
) -> list[Problem]:
    """Pure: the problems of a ResourceClaim (unallocated), ResourceClaimTemplate or DeviceClass."""
    spec = body.get("spec") or {}
    if kind == "ResourceClaim":
        if (body.get("status") or {}).get("allocation"):
            return []
        return claim_spec_problems(spec, "spec", classes, drivers)
    if kind == "ResourceClaimTemplate":
        return claim_spec_problems(spec.get("spec") or {}, "spec.spec", classes, drivers)
    return config_problems(spec.get("config"), "spec.config", drivers)


class ConfigChecks:
    def __init__(self, client: KubeClient, drivers: Collection[str]) -> None:
        self._events = EventRecorder(client, "gpudra-controller")
        self._drivers = frozenset(drivers)
        self._reported: set[tuple[str, int, str]] = set()

    async def check(self, kind: str, body: dict[str, Any], classes: Collection[str]) -> list[Problem]:
        problems = problems_of(kind, body, classes, self._drivers)
        meta = body.get("metadata") or {}
        for problem in problems:
            key = (str(meta.get("uid", "")), int(meta.get("generation") or 0), problem.text())
            if key in self._reported:
                continue
            if len(self._reported) > _REPORTED_LIMIT:
                self._reported.clear()
            self._reported.add(key)
            log.warning(
                "object cannot work as written",
                kind=kind,
                namespace=meta.get("namespace"),
                name=meta.get("name"),
                field=problem.field,
                reason=problem.reason,
                problem=problem.message,
            )
            await self._events.post(body, "Warning", problem.reason, problem.text())
        return problems


ClaimCheck = Callable[[str, dict[str, Any]], Awaitable[None]]
"""Checks a claim's change: (event type, body)."""


def register_config_checks(
    informers: Informers, settings: ControllerSettings, client: KubeClient
) -> ClaimCheck:
    """Checks of claim templates and DeviceClasses as the process's informers see them change; claims are checked
    by the returned function, which the controller's one claim handler calls."""
    checks = ConfigChecks(client, (settings.driver_name, settings.compute_domain_driver))
    classes = informers.informer(DEVICE_CLASSES, parse=DeviceClass.model_validate)
    templates = informers.informer(RESOURCE_CLAIM_TEMPLATES, parse=ResourceClaimTemplate.model_validate)

    async def check(kind: str, event: str, body: dict[str, Any]) -> None:
        if event != "DELETED":
            await checks.check(kind, body, {name for _, name in classes.cache})

    async def claim_checks(event: str, body: dict[str, Any]) -> None:
        await classes.synced.wait()  # a class listed after the claims that name it is not missing
        await check("ResourceClaim", event, body)

    async def template_checks(event: str, body: dict[str, Any]) -> None:
        await classes.synced.wait()
        await check("ResourceClaimTemplate", event, body)

    async def class_checks(event: str, body: dict[str, Any]) -> None:
        await check("DeviceClass", event, body)

    templates.subscribe(template_checks)
    classes.subscribe(class_checks)
    return claim_checks
