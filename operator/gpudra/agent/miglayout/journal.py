"""The MIG applier's plan checkpoint: which desired state is being applied and each GPU's target layout.

Written atomically (:mod:`gpudra.agent.atomic_files`) before the first step and after every step, removed when
the node reaches its target. After a crash the applier finds the plan of the same desired state, keeps its
targets (so a partial plan around in-use instances resumes toward the same layout) and re-plans the remaining
steps from what the hardware shows. A file that cannot be read is reported and set aside, never trusted:
re-planning from the hardware alone is always safe, because plans never destroy in-use instances.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from gpudra.agent.atomic_files import remove_durably, write_atomically
from gpudra.mig import MigLayout, Placement
from gpudra.telemetry import get_logger

log = get_logger(__name__)
KIND = "gpudra.dev/mig-plan"
VERSION = 1


class _GpuTarget(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    mig_enabled: bool
    instances: list[tuple[str, int]]  # (profile, start)


class _Document(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: str
    version: int
    node: str
    key: str
    targets: dict[int, _GpuTarget]
    steps_done: int = 0


class PlanJournal:
    """One file per node agent (``<state dir>/mig-plan.json``)."""

    def __init__(self, path: Path, *, node: str) -> None:
        self.path = path
        self.node = node

    def load(self, key: str) -> tuple[dict[int, MigLayout], int] | None:
        """The targets and step count of an unfinished plan for ``key``; None when there is none (or only one for
        another desired state, which the new state replaces)."""
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return None
        try:
            doc = _Document.model_validate(json.loads(raw))
            if doc.kind != KIND or doc.version != VERSION or doc.node != self.node:
                raise ValueError(
                    f"foreign plan file (kind {doc.kind}, version {doc.version}, node {doc.node})"
                )
        except (ValueError, ValidationError) as exc:
            aside = self.path.with_name(f"{self.path.name}.unreadable-{int(time.time())}")
            self.path.replace(aside)
            log.error("MIG plan checkpoint unreadable; set aside, re-planning from the hardware",
                      path=str(aside), error=str(exc))  # fmt: skip
            return None
        if doc.key != key:
            return None
        targets = {
            index: MigLayout(
                t.mig_enabled, tuple(Placement(start, profile) for profile, start in t.instances)
            )
            for index, t in doc.targets.items()
        }
        return targets, doc.steps_done

    def save(self, key: str, targets: dict[int, MigLayout], steps_done: int) -> None:
        doc = _Document(
            kind=KIND,
            version=VERSION,
            node=self.node,
            key=key,
            targets={
                index: _GpuTarget(
                    mig_enabled=layout.mig_enabled,
                    instances=[(p.profile, p.start) for p in layout.instances],
                )
                for index, layout in targets.items()
            },
            steps_done=steps_done,
        )
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(self.path, (doc.model_dump_json(indent=1) + "\n").encode())

    def clear(self) -> None:
        if self.path.exists():
            remove_durably(self.path)
