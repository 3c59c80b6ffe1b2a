"""Start-up reconcile of prepared claims, run BEFORE the plugin registers with the kubelet.

- The checkpoint is loaded; a corrupt, foreign or too-new file is reported (log + ``report_problem``, which the
  agent turns into a Node Event), kept aside by the store, and the agent starts from an empty checkpoint.
- PrepareCompleted claims get their CDI spec rewritten when it is missing or differs (a reboot wipes
  /var/run/cdi: kubernetes #141433) and their sharing settings re-applied.
- PrepareStarted claims (a crash before the kubelet got an answer) are rolled back; the kubelet retries prepare.
- UnprepareStarted claims (a crash during unprepare) are finished.
- Dynamic MIG instances of claims rolled back or finished are destroyed (found by their recorded placement, so an
  instance created just before a crash, whose ids were never written, goes too); one that cannot be destroyed
  keeps its claim in the checkpoint (``failed``) and the kubelet's next call tries again.
- A PrepareCompleted claim whose dynamic MIG instance is gone (MIG instances do not survive a reboot or a GPU
  reset) is forgotten (``instances_lost``): its spec names a device that no longer exists, and the kubelet's next
  prepare, which comes before the pod's containers start again, creates the instance anew.
- ``bare_instances`` (the GPU driver; the compute-domain driver runs beside its operations and does not): MIG GPU
  instances without a compute instance are destroyed, on any MIG-enabled GPU. A process killed between creating
  (or destroying) the GPU instance and its compute instance leaves one, for a claim or for a MigLayout step; it
  holds memory slices that no MIG device shows.
- Spec files no checkpoint entry owns are deleted, but only when the checkpoint could be trusted: after a reset
  the agent cannot tell which specs running pods still need, so it leaves them.
- Half-written temp files are removed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from gpudra.agent.claimpreparer import ClaimPreparer
from gpudra.agent.startreading import StartReading
from gpudra.errors import CheckpointError, GpudraError
from gpudra.metrics import Metrics
from gpudra.telemetry import get_logger

log = get_logger(__name__)
ProblemReporter = Callable[[CheckpointError], Awaitable[None]]


@dataclass
class RecoveryReport:
    checkpoint_problem: str = ""
    regenerated: list[str] = field(default_factory=list)
    rolled_back: list[str] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    instances_lost: list[str] = field(default_factory=list)
    orphans_removed: list[str] = field(default_factory=list)
    temp_files_removed: int = 0
    bare_instances_destroyed: int = 0


async def _ignore(problem: CheckpointError) -> None:
    return None


async def recover(
    preparer: ClaimPreparer,
    *,
    report_problem: ProblemReporter = _ignore,
    metrics: Metrics | None = None,
    bare_instances: bool = False,
    start: StartReading | None = None,
) -> RecoveryReport:
    """Bring the checkpoint, the CDI directory and the GPUs' sharing settings back in line. ``start``: the
    agent's start reading, which the look for bare GPU instances uses while it is current."""
    store, effects = preparer.store, preparer.effects
    specs = effects.specs
    report = RecoveryReport()
    trusted = True
    try:
        await store.load()
    except CheckpointError as exc:
        trusted = False
        report.checkpoint_problem = str(exc)
        log.error("checkpoint cannot be trusted; starting empty", node=preparer.node, error=str(exc))
        await report_problem(exc)
        await store.reset()
    report.temp_files_removed = len(await asyncio.to_thread(specs.remove_temp_files))
    for uid, entry in sorted(store.claims().items()):
        async with store.claim_lock(uid):
            lost = entry.state == "PrepareCompleted" and await effects.instances_lost(uid, entry)
            if entry.state == "PrepareCompleted" and not lost:
                if await effects.restore(uid, entry):
                    report.regenerated.append(uid)
                continue
            try:
                await preparer.undo(uid, entry)
            except (
                GpudraError
            ) as exc:  # e.g. a MIG instance still in use: kept, the kubelet's retry repeats it
                log.error("could not undo a claim; kept for a retry", uid=uid, error=str(exc))
                report.failed.append(uid)
                continue
            if lost:
                report.instances_lost.append(uid)
            else:
                (report.rolled_back if entry.state == "PrepareStarted" else report.finished).append(uid)
    if bare_instances:
        try:
            reading = start.current() if start is not None else None
            report.bare_instances_destroyed = await effects.destroy_bare_instances(
                reading.inventory if reading is not None else None
            )
        except GpudraError as exc:
            log.error("could not look for GPU instances without a compute instance", error=str(exc))
    if trusted:
        owned = set(store.claims())
        for uid in await asyncio.to_thread(specs.claim_uids):
            if uid not in owned:
                await asyncio.to_thread(specs.delete, uid)
                report.orphans_removed.append(uid)
    log.info(
        "prepared claims reconciled",
        node=preparer.node,
        regenerated=len(report.regenerated),
        rolled_back=len(report.rolled_back),
        finished=len(report.finished),
        orphans_removed=len(report.orphans_removed),
    )
    if metrics is not None:
        for action, count in (
            ("regenerated", len(report.regenerated)),
            ("rolled_back", len(report.rolled_back)),
            ("finished", len(report.finished)),
            ("orphan_removed", len(report.orphans_removed)),
            ("bare_instance_destroyed", report.bare_instances_destroyed),
            ("checkpoint_reset", int(not trusted)),
        ):
            if count:
                metrics.recovery_actions.labels(preparer.node, action).inc(count)
    return report
