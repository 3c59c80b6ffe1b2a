"""The IMEX daemon of one ComputeDomain on one node: ``gpudra imex-daemon`` and its simulated twin.

What it does: registers the node in the domain's ComputeDomainClique object (lowest free index below 18,
conflicts retried with randomized backoff), reports NotReady until its IMEX service is up and Ready while
it is, and releases the entry when it stops (SIGTERM when the pod is deleted, or cancellation).

Its IMEX service: with ``command`` (``gpudra imex-daemon --exec nvidia-imex -c ...``) the daemon supervises
that process: Ready while it runs, NotReady when it exits, restarted with backoff. Without a command the
service is simulated and Ready at once (the embedded cluster's daemon pods and CI).

Not done (a real deployment needs them before it can broker memory): writing nvidia-imex's node list
(``nodes_config.cfg``: the peers' IP addresses in index order, from the clique object) and re-reading it
when peers change, and probing the service with ``nvidia-imex-ctl -q`` instead of "process is running".
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from dataclasses import dataclass

from gpudra.agent.computedomain.registration import CliqueRegistration, DaemonStatus, keep_reported
from gpudra.errors import ConfigurationError
from gpudra.kube.client import KubeClient
from gpudra.telemetry import get_logger

log = get_logger(__name__)


@dataclass(frozen=True, slots=True)
class DaemonIdentity:
    """Who the daemon is: from the pod's env (the DaemonSet sets them; CLIQUE_ID comes from the claim)."""

    namespace: str
    domain_uid: str
    clique_id: str
    node_name: str
    ip_address: str


async def _supervise(command: Sequence[str], status: DaemonStatus, stop: asyncio.Event) -> None:
    delay = 1.0
    while not stop.is_set():
        process = await asyncio.create_subprocess_exec(*command)
        status.set("Ready")
        log.info("IMEX service started", command=list(command), pid=process.pid)
        stopped = asyncio.ensure_future(stop.wait())
        exited = asyncio.ensure_future(process.wait())
        try:
            await asyncio.wait([stopped, exited], return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()
            if process.returncode is None:
                process.terminate()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(process.wait(), 10)
            exited.cancel()
        status.set("NotReady")
        if stop.is_set():
            return
        log.warning("IMEX service exited; restarting", code=process.returncode, delay=delay)
        await asyncio.sleep(delay)
        delay = min(delay * 2, 30.0)


async def run_daemon(
    client: KubeClient,
    identity: DaemonIdentity,
    *,
    stop: asyncio.Event,
    command: Sequence[str] = (),
) -> None:
    """Run until ``stop`` is set or the task is cancelled; the registration is released either way."""
    if not identity.clique_id:
        raise ConfigurationError("the IMEX daemon needs CLIQUE_ID (the prepare of its claim sets it)")
    registration = CliqueRegistration(
        client,
        namespace=identity.namespace,
        domain_uid=identity.domain_uid,
        clique_id=identity.clique_id,
        node_name=identity.node_name,
        ip_address=identity.ip_address,
    )
    status = DaemonStatus()
    reporter = asyncio.create_task(keep_reported(registration, status, stop))
    try:
        if command:
            await _supervise(command, status, stop)
        else:
            status.set("Ready")
            await stop.wait()
    finally:
        stop.set()
        await asyncio.shield(reporter)
