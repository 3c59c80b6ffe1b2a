"""Which prepared devices get a status.devices entry: a node's own devices, not a PodGroup-scoped ComputeDomain's
channel, which many nodes prepare for one claim (an entry could not say which node it is about)."""

from __future__ import annotations

from typing import Any, cast

from gpudra.agent.checkpoint import DeviceRecord
from gpudra.agent.claimstatus import ClaimStatus
from gpudra.agent.computedomain.driver import ComputeDomainDriver
from gpudra.agent.kubeletplugin.messages import ClaimRef
from gpudra.api.dra import DeviceRequestAllocationResult
from gpudra.computedomain.names import shared_pool_name
from gpudra.errors import PrepareError
from gpudra.kube.client import KubeClient
from gpudra.kube.events import EventRecorder
from gpudra.kube.resources import Resource

NODE = "tray-0"
DRIVER = "compute-domain.nvidia.com"
SHARED = shared_pool_name("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0")
REF = ClaimRef(namespace="train", uid="claim-uid", name="train-channel-x")


class Api:
    def __init__(self) -> None:
        self.patches: list[dict[str, Any]] = []

    async def get_raw(self, res: Resource, name: str, namespace: str | None = None) -> dict[str, Any]:
        return {"metadata": {"uid": REF.uid, "resourceVersion": "7"}, "status": {}}

    async def patch(
        self, res: Resource, name: str, body: dict[str, Any], *_: Any, **__: Any
    ) -> dict[str, Any]:
        self.patches.append(body)
        return body


class Events:
    def __init__(self) -> None:
        self.reasons: list[str] = []

    async def post(self, involved: Any, type_: str, reason: str, message: str) -> bool:
        self.reasons.append(reason)
        return True


def status(api: Api, events: Events) -> ClaimStatus:
    return ClaimStatus(
        cast(KubeClient, api),
        cast(EventRecorder, events),
        driver=DRIVER,
        node=NODE,
        shared_pool=ComputeDomainDriver.shared_pool,
    )


async def test_a_nodes_channel_gets_its_entry_and_a_shared_channel_none() -> None:
    api, events = Api(), Events()
    await status(api, events).prepared(REF, [DeviceRecord(pool_name=NODE, device_name="channel-0")])
    ((entry,),) = [p["status"]["devices"] for p in api.patches]
    assert (entry["pool"], entry["device"]) == (NODE, "channel-0")

    api = Api()
    await status(api, events).prepared(REF, [DeviceRecord(pool_name=SHARED, device_name="channel-0")])
    assert api.patches == []


async def test_a_failed_prepare_of_a_shared_channel_is_said_in_an_event_only() -> None:
    api, events = Api(), Events()
    result = DeviceRequestAllocationResult(request="channel", driver=DRIVER, pool=SHARED, device="channel-0")
    await status(api, events).failed(REF, None, [result], PrepareError("waiting", reason="DaemonNotReady"))
    assert (api.patches, events.reasons) == ([], ["FailedPrepare"])
