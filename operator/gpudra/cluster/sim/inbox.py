"""Faults for a simulated node whose agent runs in a process of its own (``gpudra up --agent-processes``).

The node's simulated GPUs live in that process, so ``gpudra up`` cannot change them directly: it drops each fault
as a file into the node's inbox directory, and the agent's process (``gpudra.cluster.sim.agentmain``) applies it
to its GPUs with the same :func:`~gpudra.cluster.sim.faults.inject` and writes the outcome beside it. A request is
``<id>.fault.json``; its answer ``<id>.outcome.json`` (``phase``: Injected, NotHeard or Rejected; ``message``).
Both are written whole (a temporary file renamed), and each side removes what it has read.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid
from collections.abc import Awaitable, Mapping
from pathlib import Path
from typing import Any

from gpudra.cluster.sim.faults import FaultOutcome, FaultRejected, inject, parse_fault
from gpudra.hardware.simulated import FakeNvml
from gpudra.telemetry import get_logger

log = get_logger(__name__)
REQUEST = ".fault.json"
OUTCOME = ".outcome.json"
POLL_SECONDS = 0.05


def _write_whole(path: Path, data: dict[str, Any]) -> None:
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(json.dumps(data))
    os.replace(temporary, path)


class FaultInbox:
    def __init__(self, directory: Path) -> None:
        self.directory = directory

    async def send(self, body: dict[str, Any], *, timeout: float = 10.0) -> FaultOutcome:
        """Hand the fault to the node's agent process and wait for its outcome (FaultRejected if refused)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        name = uuid.uuid4().hex
        request, outcome = self.directory / f"{name}{REQUEST}", self.directory / f"{name}{OUTCOME}"
        await asyncio.to_thread(_write_whole, request, body)
        deadline = time.monotonic() + timeout
        while not outcome.exists():
            if time.monotonic() > deadline:
                request.unlink(missing_ok=True)
                node = body.get("nodeName", "the node")
                return FaultOutcome(
                    f"the agent process of {node} did not take the fault within {timeout:g}s (is it running?); "
                    "nothing happened",
                    heard=False,
                )
            await asyncio.sleep(POLL_SECONDS)
        answer = json.loads(await asyncio.to_thread(outcome.read_text))
        outcome.unlink(missing_ok=True)
        if answer.get("phase") == "Rejected":
            raise FaultRejected(str(answer.get("message", "")))
        return FaultOutcome(str(answer.get("message", "")), heard=answer.get("phase") == "Injected")

    def serve_pending(self, node: str, nvml: FakeNvml) -> int:
        """Apply every fault waiting in the inbox to ``nvml`` and answer each; how many there were."""
        served = 0
        for request in sorted(self.directory.glob(f"*{REQUEST}")):
            try:
                body = json.loads(request.read_text())
            except (OSError, ValueError):
                continue  # being removed by a sender that gave up
            answer = _apply(node, nvml, body)
            _write_whole(request.with_name(request.name.removesuffix(REQUEST) + OUTCOME), answer)
            request.unlink(missing_ok=True)
            log.info("simulated fault", node=node, phase=answer["phase"], message=answer["message"])
            served += 1
        return served

    async def serving(self, node: str, nvml: FakeNvml, work: Awaitable[None]) -> None:
        """Serve the inbox while ``work`` (the node's agent) runs."""
        self.directory.mkdir(parents=True, exist_ok=True)
        server = asyncio.create_task(self._serve(node, nvml), name=f"faults {node}")
        try:
            await work
        finally:
            server.cancel()
            await asyncio.gather(server, return_exceptions=True)

    async def _serve(self, node: str, nvml: FakeNvml) -> None:
        while True:
            await asyncio.to_thread(self.serve_pending, node, nvml)
            await asyncio.sleep(POLL_SECONDS)


def _apply(node: str, nvml: FakeNvml, body: object) -> dict[str, str]:
    fleet: Mapping[str, FakeNvml] = {node: nvml}
    try:
        outcome = inject(fleet, parse_fault(body))
    except FaultRejected as exc:
        return {"phase": "Rejected", "message": str(exc)}
    return {"phase": "Injected" if outcome.heard else "NotHeard", "message": outcome.message}
