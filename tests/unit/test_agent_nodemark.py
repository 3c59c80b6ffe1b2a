"""What the agent writes on its Node (the published label and generation annotation) and the devices-published
gauge: written on change only, retried after a failure, and a count that vanished shows 0."""

from __future__ import annotations

from typing import Any

from gpudra.agent.devicecounts import PublishedDeviceCounts
from gpudra.agent.nodemark import GENERATION_ANNOTATION, PUBLISHED_LABEL, NodeMark
from gpudra.api.dra import Device
from gpudra.devices.dynamic import build_node_devices
from gpudra.errors import KubeError
from gpudra.hardware.simulated import simulated_backend
from gpudra.metrics import Metrics


class PatchClient:
    """Records Node patches; fails the ones it is told to."""

    def __init__(self) -> None:
        self.patches: list[tuple[str, dict[str, Any]]] = []
        self.failing = False

    async def patch(self, res: Any, name: str, body: dict[str, Any]) -> dict[str, Any]:
        if self.failing:
            raise KubeError("the API server is away")
        self.patches.append((name, body))
        return body


def marks(client: PatchClient) -> list[tuple[str, str]]:
    return [
        (b["metadata"]["labels"][PUBLISHED_LABEL], b["metadata"]["annotations"][GENERATION_ANNOTATION])
        for _, b in client.patches
    ]


async def test_the_node_is_marked_on_change_only_and_a_failed_mark_is_retried() -> None:
    client = PatchClient()
    # the ignore below: a fake client; the patch is all it uses
    mark = NodeMark(client, "n1")  # type: ignore[arg-type]
    written_before = mark.written
    assert not written_before
    assert not await mark.mark(published=True, generation=1)
    assert not await mark.mark(published=True, generation=1)
    client.failing = True
    assert await mark.mark(published=True, generation=2)  # retry
    client.failing = False
    assert not await mark.mark(published=True, generation=2)
    assert not await mark.mark(published=False, generation=2)
    assert mark.written
    assert {name for name, _ in client.patches} == {"n1"}
    assert marks(client) == [("true", "1"), ("true", "2"), ("false", "2")]


def test_the_gauge_counts_devices_by_type_and_profile_and_zeroes_those_gone() -> None:
    def devices(profile: str) -> list[Device]:
        return build_node_devices(simulated_backend(profile, "n1").backend.read_inventory(), {}).devices

    metrics = Metrics()
    counts = PublishedDeviceCounts(metrics, node="n1", driver="gpu.nvidia.com")

    def shown(type_: str, profile: str = "") -> float | None:
        labels = {"node": "n1", "driver": "gpu.nvidia.com", "type": type_, "profile": profile}
        return metrics.registry.get_sample_value("gpudra_devices_published", labels)

    counts.show(devices("dgx-a100"))  # MIG on every GPU: 2 x 1g.5gb, 1 x 2g.10gb, 1 x 3g.20gb each
    assert (shown("mig", "1g.5gb"), shown("mig", "2g.10gb"), shown("mig", "3g.20gb")) == (16, 8, 8)
    assert shown("gpu") is None
    counts.show(devices("dgx-h100"))  # whole GPUs only
    assert (shown("mig", "1g.5gb"), shown("mig", "2g.10gb"), shown("mig", "3g.20gb")) == (0, 0, 0)
    assert shown("gpu") == 8
