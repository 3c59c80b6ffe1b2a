"""The stand-in kubelet's device health: it consumes each DRA plugin's health stream and keeps the
``allocatedResourcesStatus`` of its running pods' containers up to date, as the kubelet does with ResourceHealthStatus
on (resourcehealth.py holds what is written).

A stream is opened for a driver the first time a pod's claims are prepared with it, and opened again (with backoff)
whenever it ends; while it is down, the driver's devices read Unknown. As the 1.37 kubelet, only a plugin that
advertises DRAResourceHealth at registration is asked for a stream (gpudra's agent advertises it only with its
health checks on); one that does not is left alone until a plugin of the driver registers anew (a 1.36 kubelet
polls it every 5 s, kubernetes#141855). A pod's status is written again when a report
changes the health of one of its devices, and, for devices whose reports stopped, once their timeout has passed
(checked every ``tick`` seconds, as the kubelet's periodic pod sync would notice it); never when nothing changed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpudra.agent.kubeletplugin.kubelet_client import KubeletClient
from gpudra.agent.kubeletplugin.messages import HEALTH_SERVICES
from gpudra.errors import GpudraError, NotFoundError
from gpudra.kube.client import KubeClient
from gpudra.kube.resources import PODS
from gpudra.telemetry import get_logger

from .pluginwatch import PluginWatcher
from .resourcehealth import (
    ClaimDevice,
    DeviceKey,
    HealthCache,
    allocated_resources_status,
    uses_any,
    with_resources_status,
)

log = get_logger(__name__)
Status = dict[str, list[dict[str, Any]]]


@dataclass
class _Pod:
    pod: dict[str, Any]
    prepared: Mapping[str, Sequence[ClaimDevice]]
    written: Status


class ResourceHealthMonitor:
    def __init__(
        self,
        client: KubeClient,
        plugins: PluginWatcher,
        *,
        tick: float = 2.0,
        max_backoff: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._plugins = plugins
        self._tick = tick
        self._max_backoff = max_backoff
        self._clock = clock
        self.cache = HealthCache()
        self._pods: dict[str, _Pod] = {}  # pod uid -> what was last written
        self._streams: dict[str, asyncio.Task[None]] = {}  # driver -> its stream
        self._lock = asyncio.Lock()

    def status(self, pod: dict[str, Any], prepared: Mapping[str, Sequence[ClaimDevice]]) -> Status:
        """What the pod's containers show now (for the status that starts the pod)."""
        return allocated_resources_status(pod, prepared, self.cache, self._clock())

    def watch(self, driver: str) -> None:
        """Open ``driver``'s health stream unless it is open."""
        if driver not in self._streams:
            self._streams[driver] = asyncio.create_task(self._stream(driver), name=f"health stream {driver}")

    async def started(
        self, pod: dict[str, Any], prepared: Mapping[str, Sequence[ClaimDevice]], written: Status
    ) -> None:
        """The pod runs with ``written`` in its status: keep it current from now on."""
        if not any(prepared.values()):
            return
        entry = _Pod(pod, prepared, written)
        self._pods[pod["metadata"]["uid"]] = entry
        async with self._lock:
            await self._refresh(entry)

    def stopped(self, pod_uid: str) -> None:
        self._pods.pop(pod_uid, None)

    async def run(self) -> None:
        """The periodic check for devices whose reports timed out; cancel to stop, then :meth:`close`."""
        while True:
            await asyncio.sleep(self._tick)
            await self._refresh_pods(None)

    async def _advertising(self, driver: str) -> KubeletClient:
        """The driver's plugin to call, once one advertises a health service (a new registration is looked for
        every ``tick``, in the registry directory only: the plugin itself is not called)."""
        while True:
            plugin = await self._plugins.client(driver)
            if plugin.info is not None and set(HEALTH_SERVICES) & set(plugin.info.supported_versions):
                return plugin
            await asyncio.sleep(self._tick)

    async def _stream(self, driver: str) -> None:
        delay = 0.1
        while True:
            try:
                plugin = await self._advertising(driver)
                async for devices in plugin.watch_health():
                    delay = 0.1
                    await self._refresh_pods(self.cache.update(driver, devices, self._clock()))
            except GpudraError as exc:
                log.debug("device health stream failed; will retry", driver=driver, error=str(exc))
            await self._refresh_pods(self.cache.clear(driver))
            await asyncio.sleep(delay)
            delay = min(delay * 2, self._max_backoff)

    async def _refresh_pods(self, changed: set[DeviceKey] | None) -> None:
        """Write the pods whose status differs from what was written (only those using ``changed`` devices,
        unless None)."""
        async with self._lock:
            for entry in list(self._pods.values()):
                if changed is None or uses_any(entry.prepared, changed):
                    await self._refresh(entry)

    async def _refresh(self, entry: _Pod) -> None:
        wanted = self.status(entry.pod, entry.prepared)
        if wanted == entry.written:
            return
        meta = entry.pod["metadata"]
        try:
            latest = await self._client.get_raw(PODS, meta["name"], meta["namespace"])
            if (latest.get("metadata") or {}).get("uid") != meta["uid"]:
                raise NotFoundError(f"pods/{meta['name']} was replaced")
            statuses = with_resources_status(
                (latest.get("status") or {}).get("containerStatuses") or [], wanted
            )
            await self._client.patch(
                PODS, meta["name"], {"status": {"containerStatuses": statuses}}, meta["namespace"],
                subresource="status",
            )  # fmt: skip
        except NotFoundError:
            self.stopped(meta["uid"])
            return
        except GpudraError as exc:
            log.info("writing a pod's device health failed; will retry", pod=meta["name"], error=str(exc))
            return
        entry.written = wanted

    async def close(self) -> None:
        """Close the streams."""
        for task in self._streams.values():
            task.cancel()
        await asyncio.gather(*self._streams.values(), return_exceptions=True)
        self._streams.clear()
