"""The stand-in kubelet asks a plugin for its health stream only when the plugin advertises DRAResourceHealth, as a
1.37 kubelet does (a 1.36 kubelet polls every 5 s whatever is advertised, kubernetes#141855): gpudra's agent
advertises it only with its health checks on, and a plugin that registers anew with it is then watched."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, cast

import pytest

from gpudra.agent.kubeletplugin.messages import HEALTH_SERVICES, DeviceHealth, HealthStatus
from gpudra.cluster.kubelet.kubelethealth import ResourceHealthMonitor
from gpudra.cluster.kubelet.pluginwatch import PluginWatcher
from gpudra.kube.client import KubeClient
from gpudra.testing import eventually

pytestmark = pytest.mark.timeout(30)
DRIVER = "gpu.nvidia.com"


@dataclass
class _Info:
    supported_versions: list[str]


@dataclass
class FakePlugin:
    advertised: list[str]
    updates: list[list[DeviceHealth]] = field(default_factory=list)
    streams: int = 0

    @property
    def info(self) -> _Info:
        return _Info(["v1.DRAPlugin", *self.advertised])

    async def watch_health(self) -> AsyncIterator[list[DeviceHealth]]:
        self.streams += 1
        for update in self.updates:
            yield update
        await asyncio.Event().wait()  # the stream stays open


@dataclass
class FakeWatcher:
    plugin: FakePlugin
    asked: int = 0

    async def client(self, driver: str) -> FakePlugin:
        self.asked += 1
        return self.plugin


async def test_a_plugin_without_the_health_service_is_not_asked_until_one_registers_with_it() -> None:
    quiet = FakePlugin(advertised=[])
    watcher = FakeWatcher(quiet)
    monitor = ResourceHealthMonitor(
        cast(KubeClient, None), cast(PluginWatcher, cast(Any, watcher)), tick=0.01
    )
    monitor.watch(DRIVER)
    await eventually(lambda: watcher.asked >= 5)  # it looked at the registration five times ...
    assert quiet.streams == 0  # ... and never opened a stream the plugin does not offer
    update = [DeviceHealth("node-0", "gpu-0", HealthStatus.UNHEALTHY, 1700000000, 30, message="XID 79")]
    watcher.plugin = FakePlugin(advertised=list(HEALTH_SERVICES), updates=[update])
    await eventually(lambda: watcher.plugin.streams == 1)
    await monitor.close()
