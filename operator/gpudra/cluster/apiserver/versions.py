"""The Kubernetes version the embedded API server emulates (1.34 to 1.37, 1.37 by default): what ``/version``
says, which API versions it serves, which feature gates it has on, and which of the validation rules that changed
between these releases apply. Pure data; the rest of the server asks this object.

Sources: kube-apiserver 1.37.2 run here (``/apis``, ``/version``, the answers to the bad-input corpus), and the
k8s.io/api and k8s.io/kubernetes sources of 1.34.0, 1.35.0, 1.36.0 and 1.37.2 (limits, enums, feature gates).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gpudra.errors import ConfigurationError

OLDEST_MINOR = 34
NEWEST_MINOR = 37
DEFAULT_MINOR = 37

OPTIONAL_GATES: dict[str, int] = {
    "DRAListTypeAttributes": 36,
    "DRAWorkloadResourceClaims": 36,
    "DRADeviceCompatibilityGroups": 37,
}
"""Gates off by default that may be turned on, by the first minor that knows them (kube-apiserver refuses to start
with a gate it does not know). Every other DRA gate gpudra uses (partitionable devices, consumable capacity,
binding conditions, device taints and taint rules, extended resources, resource health) is on at every emulated
version, as ``gpudra up --control-plane kubernetes`` turns them on: beta and on by default from 1.36, GA in 1.37
for taints, taint rules and extended resources; alpha and off by default in 1.34 and 1.35."""


def parse_minor(text: str | None) -> int:
    """The minor of ``1.37``, ``v1.37.2`` or ``37``; None or empty: the default. ConfigurationError outside 1.34 to
    1.37."""
    if not text:
        return DEFAULT_MINOR
    match = re.fullmatch(r"v?(?:1\.)?(\d+)(?:\.\d+)?(?:[-+].*)?", text.strip())
    minor = int(match.group(1)) if match else -1
    if not OLDEST_MINOR <= minor <= NEWEST_MINOR:
        raise ConfigurationError(
            f"the embedded API server emulates Kubernetes 1.{OLDEST_MINOR} to 1.{NEWEST_MINOR}, not {text!r}"
        )
    return minor


@dataclass(frozen=True)
class KubeVersion:
    """One emulated release. ``gates_on``: gates off by default turned on (``DRAListTypeAttributes``)."""

    minor: int = DEFAULT_MINOR
    gates_on: frozenset[str] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        unknown = sorted(g for g in self.gates_on if OPTIONAL_GATES.get(g, NEWEST_MINOR + 1) > self.minor)
        if unknown:
            raise ConfigurationError(
                f"Kubernetes 1.{self.minor} has no feature gate {', '.join(unknown)} that the embedded API server "
                f"can turn on (it knows {', '.join(g for g, m in OPTIONAL_GATES.items() if m <= self.minor) or 'none'})"
            )

    @property
    def git_version(self) -> str:
        return f"v1.{self.minor}.0-gpudra"

    def document(self) -> dict[str, str]:
        """``/version`` as kube-apiserver of this minor writes it (emulation fields since 1.31)."""
        return {
            "major": "1",
            "minor": str(self.minor),
            "emulationMajor": "1",
            "emulationMinor": str(self.minor),
            "minCompatibilityMajor": "1",
            "minCompatibilityMinor": str(self.minor - 1),
            "gitVersion": self.git_version,
            "gitCommit": "0000000000000000000000000000000000000000",
            "gitTreeState": "clean",
            "buildDate": "2026-08-26T00:00:00Z",
            "goVersion": "go1.26.0",
            "compiler": "gc",
            "platform": "linux/amd64",
        }

    @property
    def taint_rule_version(self) -> str:
        """The version DeviceTaintRule is served at: v1 from 1.37 (GA), v1beta2 in 1.36, v1alpha3 before. Before
        1.37 it is off by default (``--runtime-config``); the embedded server serves it as gpudra's real control
        plane enables it."""
        return "v1" if self.minor >= 37 else "v1beta2" if self.minor == 36 else "v1alpha3"

    @property
    def counters_apart(self) -> bool:
        """1.35+: a ResourceSlice has devices or sharedCounters, never both; a device's consumesCounters names a
        counter set of any slice of its pool (at most 8 sets per slice, 2 consumptions per device, 64 devices in a
        slice with taints or consumesCounters). 1.34: the counter sets are the slice's own."""
        return self.minor >= 35

    @property
    def device_taints_max(self) -> int:
        """Taints per device: 4 in 1.34, 16 from 1.35 (k8s.io/api DeviceTaintsMaxLength)."""
        return 16 if self.minor >= 35 else 4

    @property
    def taint_effects(self) -> tuple[str, ...]:
        """Device taint effects: ``None`` (informational) from 1.35."""
        return ("NoExecute", "NoSchedule", "None") if self.minor >= 35 else ("NoExecute", "NoSchedule")

    @property
    def qualified_name_wording(self) -> bool:
        """1.35+ says a fully qualified name "must be a domain and a name separated by a slash" (1.34: "must
        include a domain")."""
        return self.minor >= 35

    @property
    def rule_values(self) -> bool:
        """Before 1.37 a CRD's CEL rule error shows the value's type (``Invalid value: "object": ...``); 1.37.2
        leaves it out (``Invalid value: <message>``)."""
        return self.minor < 37

    @property
    def evicts_extended_resource_claims(self) -> bool:
        """kube-controller-manager's device-taint eviction reads a pod's extended-resource claim
        (``status.extendedResourceClaimStatus``) as well as those its spec names: in 1.37.2 (resourceclaim.PodClaims,
        the fix of kubernetes#141290), not in 1.34.4, 1.35.4 or 1.36.3, whose controller reads the spec only."""
        return self.minor >= 37

    @property
    def declarative(self) -> bool:
        """Declarative validation is GA from 1.36 and its errors are the ones returned where a rule is declared on
        the type (duplicates show the whole item, an attribute with two values names the values set, a bad
        attribute name is reported on the map); as kube-apiserver 1.37.2 answers the bad-input corpus."""
        return self.minor >= 36
