"""The optional DRAResourceHealth stream: forwards device health lists from an async source to the kubelet.

Served as v1 and v1alpha1 (the same messages in two gRPC packages): the 1.37 kubelet dials v1, older ones
v1alpha1."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from types import ModuleType
from typing import Any

from gpudra.agent.kubeletplugin.messages import DeviceHealth, HealthSource, HealthStatus, HealthVersion
from gpudra.agent.kubeletplugin.pb import dra_health_v1_pb2, dra_health_v1alpha1_pb2

log = logging.getLogger(__name__)


HEALTH_PB_MODULES: dict[HealthVersion, ModuleType] = {
    "v1": dra_health_v1_pb2,
    "v1alpha1": dra_health_v1alpha1_pb2,
}


def health_to_pb(health_pb2: ModuleType, devices: Sequence[DeviceHealth]) -> Any:
    return health_pb2.NodeWatchResourcesResponse(
        devices=[
            health_pb2.DeviceHealth(
                device=health_pb2.DeviceIdentifier(pool_name=d.pool_name, device_name=d.device_name),
                health=int(d.health),
                last_updated_time=d.last_updated_time,
                health_check_timeout_seconds=d.health_check_timeout_seconds,
                message=d.message,
            )
            for d in devices
        ]
    )


def health_from_pb(message: Any) -> list[DeviceHealth]:
    return [
        DeviceHealth(
            pool_name=d.device.pool_name,
            device_name=d.device.device_name,
            health=HealthStatus(d.health)
            if d.health in HealthStatus._value2member_map_
            else HealthStatus.UNKNOWN,
            last_updated_time=d.last_updated_time,
            health_check_timeout_seconds=d.health_check_timeout_seconds,
            message=d.message,
        )
        for d in message.devices
    ]


class DRAResourceHealthServicer:
    """Each kubelet stream gets a fresh iterator from the source; the stream ends when the source ends."""

    def __init__(self, version: HealthVersion, source: HealthSource) -> None:
        self.version = version
        self._pb = HEALTH_PB_MODULES[version]
        self._source = source
        self.streams_opened = 0

    async def NodeWatchResources(self, request: Any, context: Any) -> AsyncIterator[Any]:
        self.streams_opened += 1
        log.info("kubelet opened the device health stream (%s)", self.version)
        async for devices in self._source():
            yield health_to_pb(self._pb, devices)
        log.info("device health source ended; closing the kubelet's stream")
