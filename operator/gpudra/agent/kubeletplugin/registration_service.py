"""The plugin-watcher Registration service: tells the kubelet who we are and records what it answered."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gpudra.agent.kubeletplugin.messages import DRA_PLUGIN_TYPE, RegistrationState
from gpudra.agent.kubeletplugin.pb import pluginregistration_pb2

log = logging.getLogger(__name__)


class RegistrationServicer:
    """GetInfo answers at any time (some kubelets poll it); NotifyRegistrationStatus updates ``state``."""

    def __init__(self, driver_name: str, endpoint: Path, supported_versions: Sequence[str]) -> None:
        self.driver_name = driver_name
        self.endpoint = endpoint
        self.supported_versions = list(supported_versions)
        self.state = RegistrationState()
        self._changed = asyncio.Event()

    async def GetInfo(self, request: Any, context: Any) -> Any:
        return pluginregistration_pb2.PluginInfo(
            type=DRA_PLUGIN_TYPE,
            name=self.driver_name,
            endpoint=str(self.endpoint),
            supported_versions=self.supported_versions,
        )

    async def NotifyRegistrationStatus(self, request: Any, context: Any) -> Any:
        self.state = RegistrationState(
            registered=request.plugin_registered,
            error=request.error,
            notifications=self.state.notifications + 1,
        )
        if request.plugin_registered:
            log.info("kubelet registered DRA driver %s (endpoint %s)", self.driver_name, self.endpoint)
        else:
            log.error(
                "kubelet rejected DRA driver %s: %s", self.driver_name, request.error or "(no reason given)"
            )
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()
        return pluginregistration_pb2.RegistrationStatusResponse()

    async def wait_for_notification(self) -> RegistrationState:
        """Wait for the kubelet's next NotifyRegistrationStatus and return the new state."""
        await self._changed.wait()
        return self.state
