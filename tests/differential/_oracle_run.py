"""Both allocators on one scenario, reduced to what must agree: the outcome class (allocated, unschedulable on the
node, or an error that aborts the pod's scheduling attempt in kube-scheduler), per claim the devices in result
order with their request, adminAccess, share (with its consumed capacity), tolerations and binding conditions, and
the node selector; for an error, Kubernetes' message (gpudra's ``Failure.aborts``) up to the CEL library's own
text of a runtime error, which two CEL implementations word differently.

The oracle is hack/oracle (Kubernetes' k8s.io/dynamic-resource-allocation/structured allocator): one process
answers scenarios as JSON lines, built by ``hack/oracle/build.sh`` (``make oracle``) into a cache outside the
work tree.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

from gpudra.allocator import Allocation, Allocator, ClusterSnapshot, NodeInfo
from gpudra.api.dra import DeviceClass, DeviceRequestAllocationResult, ResourceClaim, ResourceSlice
from gpudra.api.quantity import parse_quantity

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "hack" / "oracle" / "build.sh"
ADMIN_LABELS = {"default": {"resource.kubernetes.io/admin-access": "true"}}

SEED = int(os.environ.get("GPUDRA_ORACLE_SEED") or random.SystemRandom().randrange(2**32))
"""Hypothesis seed of this run; GPUDRA_ORACLE_SEED=<seed> replays it."""
EXAMPLES = int(os.environ.get("GPUDRA_ORACLE_EXAMPLES") or 2000)


@dataclass
class Tally:
    """What this run checked, for the terminal summary."""

    scenarios: int = 0
    allocated: int = 0
    oracle_errors: int = 0
    with_lists: int = 0
    """Scenarios with list-typed attributes (DRAListTypeAttributes on in the oracle)."""
    implementations: set[str] = field(default_factory=set)
    version: str = ""
    outcomes: dict[str, int] = field(default_factory=dict)


TALLY = Tally()


class Oracle:
    """One long-lived oracle process; ``ask`` sends a scenario and returns its answer."""

    def __init__(self, binary: str) -> None:
        self._proc = subprocess.Popen(
            [binary], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1
        )
        self._ids = iter(range(1 << 62))

    def ask(self, scenario: dict[str, Any]) -> dict[str, Any]:
        assert self._proc.stdin is not None and self._proc.stdout is not None
        ident = str(next(self._ids))
        self._proc.stdin.write(json.dumps({**scenario, "id": ident}) + "\n")
        line = self._proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the allocator oracle exited with {self._proc.wait()}")
        answer: dict[str, Any] = json.loads(line)
        assert answer["id"] == ident, answer
        return answer

    def close(self) -> None:
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        self._proc.wait(timeout=30)
        if self._proc.stdout is not None:
            self._proc.stdout.close()


def build_oracle() -> str:
    """Build (or find) the oracle binary; raises with the build's output when it cannot be built."""
    done = subprocess.run([str(BUILD)], capture_output=True, text=True, timeout=1200, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"hack/oracle/build.sh failed ({done.returncode}):\n{done.stderr[-4000:]}")
    return done.stdout.strip().splitlines()[-1]


# ---------------------------------------------------------------- comparison form


Device = tuple[str, str, str, str, bool, bool, tuple[tuple[str, Fraction], ...], str, str]
"""request, driver, pool, device, adminAccess, shared, consumed capacity, tolerations, binding conditions."""


TIMED_OUT = "timed out"
"""Kubernetes' outcome when its search ran past kube-scheduler's filter timeout (10 s, as hack/oracle sets it): how
long a search takes depends on the machine and its load, so such a scenario has no answer to compare with."""
_FILTER_TIMEOUT = "context deadline exceeded"
OUTCOMES = ("allocated", "unschedulable", "error", TIMED_OUT)
_CEL_RUNTIME = "CEL runtime error: "


@dataclass(frozen=True)
class Verdict:
    outcome: str
    """One of OUTCOMES."""
    claims: tuple[tuple[tuple[Device, ...], str], ...] = ()
    error: str = ""
    """For "error": the allocator's error, cut after "CEL runtime error: " (the CEL library's own text)."""
    detail: str = ""

    @property
    def allocated(self) -> bool:
        return self.outcome == "allocated"

    def __str__(self) -> str:
        if not self.allocated:
            return f"{self.outcome} ({self.detail})"
        return "\n".join(
            f"  claim {i}: "
            + ", ".join(f"{d[0]}:{d[2]}/{d[3]}" + ("#share" if d[5] else "") for d in devices)
            + (f" nodeSelector={selector}" if selector else "")
            for i, (devices, selector) in enumerate(self.claims)
        )


def _device(r: dict[str, Any]) -> Device:
    consumed = tuple(sorted((k, parse_quantity(v)) for k, v in (r.get("consumedCapacity") or {}).items()))
    return (
        r["request"],
        r["driver"],
        r["pool"],
        r["device"],
        bool(r.get("adminAccess")),
        r.get("shareID") is not None,
        consumed,
        json.dumps(r.get("tolerations") or [], sort_keys=True),
        json.dumps([r.get("bindingConditions") or [], r.get("bindingFailureConditions") or []]),
    )


def _selector(selector: dict[str, Any] | None) -> str:
    if not selector:
        return ""
    terms = []
    for term in selector.get("nodeSelectorTerms") or []:
        parts = []
        for kind in ("matchExpressions", "matchFields"):
            for req in term.get(kind) or []:
                parts.append(f"{kind}:{req['key']} {req['operator']} {sorted(req.get('values') or [])}")
        terms.append(" & ".join(sorted(parts)))
    return " | ".join(terms)


def _verdict(allocations: list[dict[str, Any]]) -> Verdict:
    claims = tuple(
        (
            tuple(_device(r) for r in a.get("devices", {}).get("results") or []),
            _selector(a.get("nodeSelector")),
        )
        for a in allocations
    )
    return Verdict("allocated", claims)


def _error(message: str) -> str:
    at = message.find(_CEL_RUNTIME)
    return message if at < 0 else message[: at + len(_CEL_RUNTIME)]


def kubernetes(oracle: Oracle, scenario: dict[str, Any]) -> Verdict:
    answer = oracle.ask(scenario)
    TALLY.version = answer["version"]
    if answer.get("implementation"):
        TALLY.implementations.add(answer["implementation"])
    if answer["outcome"] == "invalid":
        raise AssertionError(f"the oracle refused the scenario: {answer['message']}")
    if answer["outcome"] == "allocated":
        return _verdict(answer["allocations"])
    message = answer.get("message", "")
    if answer["outcome"] == "error" and message.endswith(_FILTER_TIMEOUT):
        return Verdict(TIMED_OUT, detail=f"error: {message}"[:400])
    error = _error(message) if answer["outcome"] == "error" else ""
    return Verdict(answer["outcome"], error=error, detail=f"{answer['outcome']}: {message}"[:400])


def gpudra(scenario: dict[str, Any]) -> Verdict:
    snapshot = ClusterSnapshot(ResourceSlice.from_wire(s) for s in scenario["slices"])
    snapshot.mark_allocated(DeviceRequestAllocationResult.from_wire(r) for r in scenario["allocated"])
    allocator = Allocator(
        snapshot, [DeviceClass.from_wire(c) for c in scenario["classes"]], namespace_labels=ADMIN_LABELS
    )
    node = scenario["node"]
    claims = [ResourceClaim.from_wire(c) for c in scenario["claims"]]
    outcome = allocator.allocate(NodeInfo(node["name"], node.get("labels") or {}), claims)
    if isinstance(outcome, Allocation):
        return _verdict([{**c.result.to_wire()} for c in outcome.claims])
    if outcome.aborts:
        return Verdict("error", error=_error(outcome.aborts), detail=f"error: {outcome.aborts}"[:400])
    return Verdict("unschedulable", detail=f"{outcome.reason}: {outcome.message}"[:400])


def tally(kube: Verdict, scenario: dict[str, Any]) -> None:
    TALLY.scenarios += 1
    TALLY.with_lists += bool(scenario.get("listTypeAttributes"))
    TALLY.allocated += kube.allocated
    TALLY.outcomes[kube.outcome] = TALLY.outcomes.get(kube.outcome, 0) + 1


def one_line(scenario: dict[str, Any]) -> str:
    """The scenario as one compact JSON line, as hack/oracle reads it."""
    return json.dumps(scenario, separators=(",", ":"))
