"""The stand-in kubelet's plugin watcher and DRA plugin manager: which plugin of a driver to call.

As the kubelet (1.33+) does: every socket in the registry directory (dot-files ignored) is a plugin; the kubelet
calls GetInfo, registers it under the driver name it reports, and keeps every registered plugin of a driver, in the
order they appeared. A call goes to the newest one that is connected; one whose socket file went away is
deregistered. This is what lets two agent instances of a rolling update serve side by side, the newer one taking
the calls. Here "appeared" is the socket file's change time, and "connected" means no call to it failed in the
last ``backoff`` seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from pathlib import Path

from gpudra.agent.kubeletplugin.kubelet_client import KubeletClient
from gpudra.errors import KubeletPluginError
from gpudra.telemetry import get_logger

log = get_logger(__name__)


@dataclass
class _Plugin:
    client: KubeletClient
    inode: int
    appeared: int  # the socket file's ctime in nanoseconds
    failed_at: float = 0.0


class PluginWatcher:
    def __init__(self, registry_dir: Path, *, backoff: float = 2.0) -> None:
        self.registry_dir = registry_dir
        self._backoff = backoff
        self._plugins: dict[Path, _Plugin] = {}
        self._scanning = asyncio.Lock()
        """One scan at a time: callers that arrive together (a node's pods starting at once) would otherwise each
        register the same new socket, and all but the last client would be dropped without being closed."""

    async def client(self, driver: str) -> KubeletClient:
        """The plugin of ``driver`` to call now: the newest connected one (else the newest)."""
        await self._scan()
        mine = sorted(
            (p for p in self._plugins.values() if p.client.info is not None and p.client.info.name == driver),
            key=lambda p: p.appeared,
            reverse=True,
        )
        if not mine:
            raise KubeletPluginError(f"DRA driver {driver} is not registered")
        now = time.monotonic()
        connected = [p for p in mine if now - p.failed_at >= self._backoff]
        return (connected or mine)[0].client

    def failed(self, client: KubeletClient) -> None:
        """A call to the plugin failed: prefer the others for a while."""
        for plugin in self._plugins.values():
            if plugin.client is client:
                plugin.failed_at = time.monotonic()

    async def _scan(self) -> None:
        async with self._scanning:
            await self._scan_once()

    async def _scan_once(self) -> None:
        present: dict[Path, tuple[int, int]] = {}
        if self.registry_dir.is_dir():
            for path in self.registry_dir.iterdir():
                if path.name.startswith(".") or not path.is_socket():
                    continue
                with contextlib.suppress(FileNotFoundError):
                    stat = path.stat()
                    present[path] = (stat.st_ino, stat.st_ctime_ns)
        for path in [p for p, plugin in self._plugins.items() if present.get(p, (None,))[0] != plugin.inode]:
            plugin = self._plugins.pop(path)
            log.info("DRA plugin deregistered", socket=str(path))
            await plugin.client.close()
        for path, (inode, appeared) in present.items():
            if path in self._plugins:
                continue
            client = KubeletClient(path)
            try:
                await client.register()
            except KubeletPluginError as exc:
                log.info("plugin socket not registered (yet)", socket=str(path), error=str(exc))
                await client.close()
                continue
            self._plugins[path] = _Plugin(client, inode, appeared)

    async def close(self) -> None:
        plugins, self._plugins = self._plugins, {}
        for plugin in plugins.values():
            await plugin.client.close()
