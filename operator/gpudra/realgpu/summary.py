"""The real-GPU check's record: each step's result (pass, fail or skip, with details) and the run's summary as
JSON. Pure: no I/O."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Status = Literal["pass", "fail", "skip"]


@dataclass
class Step:
    name: str
    status: Status
    detail: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "seconds": round(self.seconds, 2), **self.detail}


@dataclass
class Summary:
    """The steps in the order they ran; ``result`` is pass only when none failed."""

    header: dict[str, Any]
    steps: list[Step] = field(default_factory=list)

    @property
    def result(self) -> Status:
        return "fail" if any(s.status == "fail" for s in self.steps) else "pass"

    def add(self, step: Step) -> Step:
        self.steps.append(step)
        return step

    def skip_rest(self, names: list[str], reason: str) -> None:
        """Record the steps of ``names`` that did not run, each with ``reason``, and put every step in the order
        of ``names``."""
        done = {s.name for s in self.steps}
        self.steps.extend(Step(name, "skip", {"reason": reason}) for name in names if name not in done)
        self.steps.sort(key=lambda s: names.index(s.name) if s.name in names else len(names))

    def to_json(self) -> dict[str, Any]:
        return {
            **self.header,
            "result": self.result,
            "failed": [s.name for s in self.steps if s.status == "fail"],
            "steps": [s.to_json() for s in self.steps],
        }
