"""List-typed attributes on the real control plane: the agent's dry-run probe reads kube-apiserver's
DRAListTypeAttributes gate right, kube-scheduler keeps claims within an NVLink island through includes() and
matchAttribute on gpudra.dev/nvlinkPeers, and with the gate off kube-apiserver refuses includes() in a new claim
with the path and message the embedded API server gives."""

from __future__ import annotations

from _realkit import StartKubernetes, needs_minor

from gpudra.cluster.apiserver.versions import OPTIONAL_GATES
from listattrkit import GATE, gate_off_scenario, gate_on_scenario, start


@needs_minor(OPTIONAL_GATES[GATE], f"no {GATE} feature gate to turn on")
async def test_with_the_gate_on_kube_scheduler_keeps_claims_within_an_nvlink_island(
    start_kubernetes: StartKubernetes,
) -> None:
    await gate_on_scenario(await start(start_kubernetes, GATE))


async def test_with_the_gate_off_kube_apiserver_drops_lists_and_refuses_includes(
    start_kubernetes: StartKubernetes,
) -> None:
    await gate_off_scenario(await start(start_kubernetes))
