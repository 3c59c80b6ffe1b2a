"""A binary of the control plane as a child process: started with its flags, its output in a log file, ready
when its health endpoint answers (an HTTP(S) URL, or ``unix://<path>``: a socket that accepts connections) or,
without one, when its ``ready`` check says so; stopped with SIGTERM (SIGKILL after a grace period), restartable.

With ``restart``, a process that exits on its own (a crash, the OOM killer, a ``kill`` from outside) is started
again, as a kubelet restarts a DaemonSet pod or a static pod: after 1 s, then twice as long after each exit that
follows within a minute of the last start, up to 30 s; a line in the log says so each time. ``stop`` ends that.

It ends with the process that started it, even when that one is killed with SIGKILL and runs no clean-up: it is
started through ``setpriv --pdeathsig KILL`` (util-linux), which asks the kernel to send it SIGKILL when its parent
ends; the binary keeps that through its ``exec``. Without setpriv on PATH it is started as it is, and a line says
that it may outlive a killed ``gpudra up``."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import shutil
import signal
import socket
import ssl
import time
from collections.abc import Callable
from pathlib import Path

import aiohttp

from gpudra.errors import GpudraError
from gpudra.telemetry import get_logger

log = get_logger(__name__)
RESTART_DELAY = 1.0
RESTART_DELAY_MAX = 30.0
RESTART_STABLE_SECONDS = 60.0
"""A process that stayed up this long before it exited is restarted after RESTART_DELAY again."""


class ProcessFailed(GpudraError):
    """A control-plane binary exited or never became healthy; the message quotes the end of its log."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@functools.cache
def _setpriv() -> str | None:
    found = shutil.which("setpriv")
    if found is None:
        log.warning(
            "setpriv (util-linux) is not on PATH: a child process may outlive gpudra up when it is killed "
            "with SIGKILL"
        )
    return found


def ending_with_parent(argv: list[str]) -> list[str]:
    """``argv``, started so that the kernel kills it (SIGKILL) when the process that started it ends."""
    setpriv = _setpriv()
    return [setpriv, "--pdeathsig", "KILL", "--", *argv] if setpriv else argv


def log_tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(text[-lines:])


class ManagedProcess:
    def __init__(
        self,
        name: str,
        argv: list[str],
        log_file: Path,
        health_url: str,
        *,
        ssl_context: ssl.SSLContext | bool = False,
        healthy: Callable[[int, str], bool] = lambda status, _body: status == 200,
        env: dict[str, str] | None = None,
        ready: Callable[[], bool] | None = None,
        restart: bool = False,
    ) -> None:
        self.name = name
        self._restart = restart
        self._supervisor: asyncio.Task[None] | None = None
        self.restarts = 0
        self._ready = ready
        self.argv = argv
        self.log_file = log_file
        self.health_url = health_url
        self._ssl = ssl_context
        self._healthy = healthy
        self._env = env
        self.process: asyncio.subprocess.Process | None = None

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.returncode is None

    async def start(self, *, timeout: float = 60.0) -> None:
        await self._spawn()
        await self.wait_healthy(timeout)
        if self._restart and self._supervisor is None:
            self._supervisor = asyncio.create_task(self._supervise(timeout), name=f"supervise {self.name}")

    async def _supervise(self, timeout: float) -> None:
        """Start the process again whenever it exits on its own (``stop`` cancels this first)."""
        delay = RESTART_DELAY
        while True:
            process = self.process
            if process is None:
                return
            started = time.monotonic()
            code = await process.wait()
            if time.monotonic() - started >= RESTART_STABLE_SECONDS:
                delay = RESTART_DELAY
            log.warning("process exited; starting it again", name=self.name, code=code, delay_seconds=delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, RESTART_DELAY_MAX)
            try:
                await self._spawn()
                await self.wait_healthy(timeout)
            except (ProcessFailed, OSError) as exc:
                log.warning("process did not come back; trying again", name=self.name, error=str(exc))
                if self.process is not None and self.process.returncode is None:  # up, but never healthy
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(self.process.pid, signal.SIGKILL)
                continue
            self.restarts += 1
            log.info("process started again", name=self.name, pid=self.process.pid if self.process else None)

    async def _spawn(self) -> None:
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        with self.log_file.open("ab") as out:
            self.process = await asyncio.create_subprocess_exec(
                *ending_with_parent(self.argv),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                start_new_session=True,  # a Ctrl-C meant for gpudra up is handled by gpudra up, which stops us
                env=None if self._env is None else {**os.environ, **self._env},
            )
        log.debug("control plane process started", name=self.name, pid=self.process.pid)

    async def wait_healthy(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        async with aiohttp.ClientSession(trust_env=False) as session:
            while True:
                if self.process is not None and self.process.returncode is not None:
                    raise ProcessFailed(
                        f"{self.name} exited with code {self.process.returncode}; "
                        f"the end of {self.log_file}:\n{log_tail(self.log_file)}"
                    )
                healthy, last = await self._probe(session)
                if healthy:
                    return
                if time.monotonic() > deadline:
                    raise ProcessFailed(
                        f"{self.name} was not healthy after {timeout:.0f}s ({self.health_url}: {last}); "
                        f"the end of {self.log_file}:\n{log_tail(self.log_file)}"
                    )
                await asyncio.sleep(0.2)

    async def _probe(self, session: aiohttp.ClientSession) -> tuple[bool, str]:
        """(healthy, what was seen)."""
        if self._ready is not None:
            return self._ready(), "not ready yet"
        if self.health_url.startswith("unix://"):
            try:
                _, writer = await asyncio.open_unix_connection(self.health_url.removeprefix("unix://"))
            except OSError as exc:
                return False, repr(exc)
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
            return True, ""
        try:
            async with session.get(
                self.health_url, ssl=self._ssl, timeout=aiohttp.ClientTimeout(total=2)
            ) as response:
                body = await response.text()
                return self._healthy(response.status, body), f"{response.status} {body[-300:]}"
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            return False, repr(exc)

    async def stop(self, *, grace: float = 10.0, kill: bool = False) -> None:
        supervisor, self._supervisor = self._supervisor, None
        if supervisor is not None:
            supervisor.cancel()
            await asyncio.gather(supervisor, return_exceptions=True)
        process, self.process = self.process, None
        if process is None or process.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL if kill else signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), grace)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            await process.wait()
