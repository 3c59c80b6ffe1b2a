"""KubeletPlugin: serves the DRA socket (v1, v1beta1, optional health) and registers it with the kubelet.

Order matters to the kubelet: the DRA socket must answer before the registration socket appears, because the
kubelet dials the endpoint right after GetInfo. A stale registration socket from a previous process is
removed first (which deregisters that process), then the stale DRA socket. At stop the registration socket
goes first, and only socket files this instance created are removed (a newer agent may already have replaced
them).

Rolling updates (``instance``, the pod UID): two instances of one driver run side by side on a node, each with
sockets of its own, named as Kubernetes' kubelet plugin helper names them (``RollingUpdate``):
``<driver>-<uid>-reg.sock`` (or, when that path is too long for a unix socket, ``<driver>-<hash of uid>-reg.sock``
or ``dra-<hash of driver and uid>-reg.sock``) and ``dra-<uid>.sock``. The kubelet (1.33+) keeps both registered and
calls the newest one that answers; an instance that stops removes only its own sockets.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import logging
import os
import re
import stat
from pathlib import Path
from types import TracebackType
from typing import Self

from gpudra.agent.kubeletplugin.dra_service import PB_MODULES, DRAPluginServicer
from gpudra.agent.kubeletplugin.grpcserver import PluginServer
from gpudra.agent.kubeletplugin.health_service import HEALTH_PB_MODULES, DRAResourceHealthServicer
from gpudra.agent.kubeletplugin.messages import (
    HEALTH_SERVICES,
    V1_SERVICE,
    V1BETA1_SERVICE,
    CallObserver,
    HealthSource,
    PluginHandler,
    RegistrationState,
)
from gpudra.agent.kubeletplugin.pb import pluginregistration_pb2
from gpudra.agent.kubeletplugin.registration_service import RegistrationServicer
from gpudra.errors import ConfigurationError

log = logging.getLogger(__name__)

DEFAULT_PLUGINS_DIR = Path("/var/lib/kubelet/plugins")
DEFAULT_REGISTRY_DIR = Path("/var/lib/kubelet/plugins_registry")
MAX_SOCKET_PATH_BYTES = 107  # sun_path is 108 bytes on Linux, including the terminating NUL
_DRIVER_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def _digest(data: str, size: int) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data.encode()).digest()[:size]).decode().rstrip("=")


def rolling_update_registration_socket(registry_dir: Path, driver: str, instance: str) -> str:
    """The registration socket's file name of one instance: the first of the helper's three candidates whose
    path fits a unix socket."""
    candidates = [
        f"{driver}-{instance}-reg.sock",
        f"{driver}-{_digest(instance, 8)}-reg.sock",
        f"dra-{_digest(driver + chr(0) + instance, 16)}-reg.sock",
    ]
    for name in candidates:
        if len(os.fsencode(str(registry_dir / name))) <= MAX_SOCKET_PATH_BYTES:
            return name
    return candidates[-1]


def instance_dra_socket(plugin_dir: Path, instance: str) -> Path:
    """One instance's DRA socket: ``dra-<instance>.sock``, or with a digest of the instance id when that path
    would not fit a unix socket (a kubelet root deep in a temporary directory, a long driver name)."""
    path = plugin_dir / f"dra-{instance}.sock"
    if len(os.fsencode(str(path))) <= MAX_SOCKET_PATH_BYTES:
        return path
    return plugin_dir / f"dra-{_digest(instance, 16)}.sock"


def _remove_stale(path: Path) -> None:
    """Remove a leftover socket (or file, or link) so that bind() succeeds; refuse to remove a directory."""
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return
    if stat.S_ISDIR(mode):
        raise ConfigurationError(f"{path} is a directory; the kubelet plugin needs that path for its socket")
    log.info("removing stale socket file %s", path)
    path.unlink(missing_ok=True)


class KubeletPlugin:
    """The kubelet-facing half of a DRA driver. Start it, keep it running, stop it on shutdown."""

    def __init__(
        self,
        driver_name: str,
        handler: PluginHandler,
        *,
        plugin_dir: Path | None = None,
        registry_dir: Path = DEFAULT_REGISTRY_DIR,
        health_source: HealthSource | None = None,
        observer: CallObserver | None = None,
        stop_grace_seconds: float = 5.0,
        instance: str = "",
    ) -> None:
        if not _DRIVER_NAME.match(driver_name) or len(driver_name) > 63:
            raise ConfigurationError(
                f"driver name {driver_name!r} is not a DNS subdomain of at most 63 characters"
                " (e.g. gpu.nvidia.com)"
            )
        self.driver_name = driver_name
        self.plugin_dir = (
            plugin_dir if plugin_dir is not None else DEFAULT_PLUGINS_DIR / driver_name
        ).absolute()
        self.registry_dir = registry_dir.absolute()
        if instance:
            self.dra_socket = instance_dra_socket(self.plugin_dir, instance)
            name = rolling_update_registration_socket(self.registry_dir, driver_name, instance)
            self.registration_socket = self.registry_dir / name
        else:
            self.dra_socket = self.plugin_dir / "dra.sock"
            self.registration_socket = self.registry_dir / f"{driver_name}-reg.sock"
        self.supported_versions = [V1_SERVICE, V1BETA1_SERVICE] + (
            list(HEALTH_SERVICES) if health_source else []
        )
        self._handler = handler
        self._observer = observer
        self._grace = stop_grace_seconds
        self._registration = RegistrationServicer(driver_name, self.dra_socket, self.supported_versions)
        self._health = [
            DRAResourceHealthServicer(v, health_source) for v in ("v1", "v1alpha1") if health_source
        ]
        self._dra_server: PluginServer | None = None
        self._registration_server: PluginServer | None = None
        self._inodes: dict[Path, int] = {}

    @property
    def registration_state(self) -> RegistrationState:
        """What the kubelet last said through NotifyRegistrationStatus."""
        return self._registration.state

    async def wait_for_registration_status(self) -> RegistrationState:
        """Wait for the kubelet's next NotifyRegistrationStatus."""
        return await self._registration.wait_for_notification()

    @property
    def health_streams_opened(self) -> dict[str, int]:
        """Health stream version -> how many streams the kubelet opened in it (which version a kubelet dials)."""
        return {servicer.version: servicer.streams_opened for servicer in self._health}

    @property
    def serving(self) -> bool:
        return self._registration_server is not None

    async def start(self) -> None:
        if self._dra_server is not None:
            raise ConfigurationError(f"kubelet plugin {self.driver_name} is already started")
        for path in (self.dra_socket, self.registration_socket):
            if len(os.fsencode(str(path))) > MAX_SOCKET_PATH_BYTES:
                raise ConfigurationError(
                    f"socket path {path} is longer than {MAX_SOCKET_PATH_BYTES} bytes;"
                    " choose a shorter directory"
                )
        for directory in (self.plugin_dir, self.registry_dir):
            directory.mkdir(parents=True, exist_ok=True)
        _remove_stale(self.registration_socket)
        _remove_stale(self.dra_socket)
        try:
            self._dra_server = await self._serve_dra()
            self._registration_server = await self._serve_registration()
        except BaseException:
            await self.stop()
            raise
        log.info(
            "kubelet plugin %s serving %s, registration socket %s, versions %s",
            self.driver_name,
            self.dra_socket,
            self.registration_socket,
            self.supported_versions,
        )

    async def stop(self) -> None:
        """Deregister (registration socket first), stop serving, remove the sockets this instance made."""
        registration, self._registration_server = self._registration_server, None
        dra, self._dra_server = self._dra_server, None
        if registration is not None:
            await registration.stop(0)
            self._remove_own(self.registration_socket)
        if dra is not None:
            await dra.stop(self._grace)
            self._remove_own(self.dra_socket)

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    async def _serve_dra(self) -> PluginServer:
        server = PluginServer()
        for version in ("v1", "v1beta1"):
            service = PB_MODULES[version].DESCRIPTOR.services_by_name["DRAPlugin"]
            server.add(service, DRAPluginServicer(version, self._handler, self._observer))
        for servicer in self._health:
            server.add(
                HEALTH_PB_MODULES[servicer.version].DESCRIPTOR.services_by_name["DRAResourceHealth"], servicer
            )
        return await self._bind(server, self.dra_socket)

    async def _serve_registration(self) -> PluginServer:
        server = PluginServer()
        server.add(pluginregistration_pb2.DESCRIPTOR.services_by_name["Registration"], self._registration)
        return await self._bind(server, self.registration_socket)

    async def _bind(self, server: PluginServer, path: Path) -> PluginServer:
        await server.start(path)
        with contextlib.suppress(FileNotFoundError):
            self._inodes[path] = os.stat(path).st_ino
        return server

    def _remove_own(self, path: Path) -> None:
        inode = self._inodes.pop(path, None)
        try:
            current = path.lstat().st_ino
        except FileNotFoundError:
            return
        if inode is not None and current == inode:
            path.unlink(missing_ok=True)
        else:
            log.info("leaving %s in place: another process replaced it", path)
