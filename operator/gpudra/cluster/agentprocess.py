"""A simulated node's agent as a process of its own (``gpudra up --agent-processes``), as its DaemonSet pod runs
on a real node: ``python -m gpudra agent`` with its settings in GPUDRA_* variables, ready when its /readyz
answers (the DaemonSet's readiness probe), killable with SIGKILL at any point and started again over the same
directories and the same simulated GPUs (their state is kept in a file, as real GPUs keep theirs). One that exits on
its own is started again, with back-off, as the kubelet restarts a DaemonSet's pod (``ManagedProcess(restart=)``);
``kill`` and ``stop`` are deliberate and end it for good."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from gpudra.cluster.processes import ManagedProcess, free_port
from gpudra.config import AgentSettings


def settings_environment(settings: AgentSettings) -> dict[str, str]:
    """GPUDRA_* variables that give a new process exactly these settings (what differs from the defaults)."""
    env: dict[str, str] = {}
    for name, value in settings.model_dump(mode="json", exclude_defaults=True).items():
        env[f"GPUDRA_{name.upper()}"] = value if isinstance(value, str) else json.dumps(value)
    return env


class AgentProcess:
    """``faults``: the fault inbox the process serves for ``gpudra sim fault`` (:mod:`gpudra.cluster.sim.inbox`);
    its own, so that during a rolling update faults reach the instance that holds the node."""

    def __init__(self, settings: AgentSettings, log_file: Path, *, faults: Path | None = None) -> None:
        port = free_port()
        self.settings = settings.model_copy(update={"metrics_host": "127.0.0.1", "metrics_port": port})
        self.faults = faults
        self._process = ManagedProcess(
            f"gpudra agent {settings.node_name}",
            [
                sys.executable,
                "-m",
                "gpudra",
                "agent",
                *(("--simulated-faults", str(faults)) if faults else ()),
            ],
            log_file,
            f"http://127.0.0.1:{port}/readyz",
            env=settings_environment(self.settings),
            restart=True,  # as the DaemonSet's pod is
        )
        self.starts = 0

    @property
    def running(self) -> bool:
        return self._process.running

    @property
    def pid(self) -> int | None:
        process = self._process.process
        return None if process is None else process.pid

    @property
    def restarts(self) -> int:
        """How often it was started again after exiting on its own."""
        return self._process.restarts

    async def start(self, *, timeout: float = 60.0) -> None:
        self.starts += 1
        await self._process.start(timeout=timeout)

    async def kill(self) -> None:
        """SIGKILL, as a node's OOM killer or a crash would end it: nothing runs on the way out."""
        await self._process.stop(kill=True)

    async def stop(self) -> None:
        await self._process.stop()
