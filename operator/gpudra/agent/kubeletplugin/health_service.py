"""The optional DRAResourceHealth stream: forwards device health lists from an async source to the kubelet."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from typing import Any

from gpudra.agent.kubeletplugin.pb import dra_health_v1alpha1_pb2 as health_pb2
from gpudra.agent.kubeletplugin.types import DeviceHealth, HealthSource, HealthStatus

log = logging.getLogger(__name__)


def health_to_pb(devices: Sequence[DeviceHealth]) -> Any:
    return health_pb2.NodeWatchResourcesResponse(
        devices=[
            health_pb2.DeviceHealth(
                device=health_pb2.DeviceIdentifier(pool_name=d.pool_name, device_name=d.device_name),
                health=int(d.health),
                last_updated_time=d.last_updated_time,
                health_check_timeout_seconds=d.health_check_timeout_seconds,
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
        )
        for d in message.devices
    ]


class DRAResourceHealthServicer:
    """Each kubelet stream gets a fresh iterator from the source; the stream ends when the source ends."""

    def __init__(self, source: HealthSource) -> None:
        self._source = source

    async def NodeWatchResources(self, request: Any, context: Any) -> AsyncIterator[Any]:
        log.info("kubelet opened the device health stream")
        async for devices in self._source():
            yield health_to_pb(devices)
        log.info("device health source ended; closing the kubelet's stream")
