"""Channel and daemon prepare decisions of the compute-domain driver, against an in-memory API."""

from __future__ import annotations

import asyncio
import copy
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import pytest

from gpudra.agent.callsinflight import CallsInFlight
from gpudra.agent.checkpoint import CheckpointStore, ClaimEntry, DeviceRecord
from gpudra.agent.computedomain import readiness
from gpudra.agent.computedomain.driver import ComputeDomainDriver, published_devices, read_channel_major
from gpudra.agent.computedomain.planner import ComputeDomainPlanner, claim_configs, entry_domains
from gpudra.agent.kubeletplugin.messages import ClaimRef
from gpudra.agent.prepareplan import select_results
from gpudra.api.computedomain import ComputeDomainClique
from gpudra.api.crdgen import crd_for
from gpudra.api.dra import ResourceClaim
from gpudra.cluster.apiserver.patches import apply_merge, json_patch
from gpudra.computedomain.clique import NodeClique
from gpudra.computedomain.names import DaemonMode, clique_object_name, node_label_key, shared_pool_name
from gpudra.errors import ConflictError, InvalidInputError, NotFoundError, PrepareError
from gpudra.kube.client import KubeClient
from gpudra.kube.events import EventRecorder
from gpudra.kube.resources import COMPUTE_DOMAIN_CLIQUES, Resource, TypedResource
from gpudra.testing import eventually

NODE = "tray-0"
CLIQUE = "6b3f7d0e-2c1a-4f55-9e0b-1d2c3b4a5f60.7"
CLIQUE_SCHEMA = crd_for(ComputeDomainClique)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
DRIVER = "compute-domain.nvidia.com"
MAJOR = 511


class MemoryApi:
    """get / patch (merge and apply: labels only, apply creating; JSON) / create / replace over a dict, with
    resourceVersion checks; list and watch (by metadata.name) of clique objects."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str | None, str], dict[str, Any]] = {
            ("nodes", None, NODE): {"metadata": {"name": NODE, "labels": {}, "resourceVersion": "1"}}
        }
        self.version = 1
        self.watches: list[asyncio.Queue[tuple[str, dict[str, Any]]]] = []
        self.reads: Counter[str] = Counter()
        """GETs by plural."""

    def _store(self, key: tuple[str, str | None, str], body: dict[str, Any]) -> dict[str, Any]:
        kind = "MODIFIED" if key in self.objects else "ADDED"
        self.version += 1
        self.objects[key] = {**body, "metadata": {**body["metadata"], "resourceVersion": str(self.version)}}
        for queue in self.watches:
            queue.put_nowait((kind, self.objects[key]))
        return self.objects[key]

    async def list_raw(
        self, res: Resource, namespace: str | None = None, **_: Any
    ) -> tuple[list[dict[str, Any]], str]:
        found = [
            dict(o)
            for (plural, ns, _), o in self.objects.items()
            if plural == res.plural and namespace in (None, ns)
        ]
        return found, str(self.version)

    async def watch(
        self, res: Resource, namespace: str | None = None, *, field_selector: str | None = None, **_: Any
    ) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        name = dict(f.split("=", 1) for f in (field_selector or "").split(",") if f).get("metadata.name")
        queue: asyncio.Queue[tuple[str, dict[str, Any]]] = asyncio.Queue()
        self.watches.append(queue)
        try:
            while True:
                kind, body = await queue.get()
                if name in (None, body["metadata"]["name"]) and namespace in (
                    None,
                    body["metadata"].get("namespace"),
                ):
                    yield kind, body
        finally:
            self.watches.remove(queue)

    def _key(self, res: Resource, name: str, namespace: str | None) -> tuple[str, str | None, str]:
        return (res.plural, namespace if res.namespaced else None, name)

    async def get(self, res: TypedResource[Any], name: str, namespace: str | None = None) -> Any:
        return res.model.from_wire(await self.get_raw(res, name, namespace))

    async def get_raw(self, res: Resource, name: str, namespace: str | None = None) -> dict[str, Any]:
        self.reads[res.plural] += 1
        try:
            return dict(self.objects[self._key(res, name, namespace)])
        except KeyError:
            raise NotFoundError(f"{res.plural}/{name} not found", status=404) from None

    async def patch(
        self,
        res: Resource,
        name: str,
        patch: Any,
        namespace: str | None = None,
        *,
        patch_type: str = "merge",
        force: bool = False,
    ) -> dict[str, Any]:
        key = self._key(res, name, namespace)
        if patch_type == "apply" and key not in self.objects:
            return self._store(key, {**patch, "metadata": {**patch["metadata"], "namespace": namespace}})
        if patch_type == "apply":  # the daemons list merged by nodeName, as the API server does
            return self._store(key, apply_merge(copy.deepcopy(self.objects[key]), patch, CLIQUE_SCHEMA))
        if patch_type == "json":
            if key not in self.objects:
                raise NotFoundError(f"{res.plural}/{name} not found", status=404)
            # a failed test raises the embedded server's 422 (a KubeError, as the client raises it)
            return self._store(key, json_patch(copy.deepcopy(self.objects[key]), patch))
        body = self.objects[key]
        labels = body["metadata"].setdefault("labels", {})
        for key, value in patch["metadata"]["labels"].items():
            if value is None:
                labels.pop(key, None)
            else:
                labels[key] = value
        return body

    async def create(
        self, res: Resource, body: dict[str, Any], namespace: str | None = None
    ) -> dict[str, Any]:
        key = self._key(res, body["metadata"]["name"], namespace)
        if key in self.objects:
            raise ConflictError("exists", status=409)
        return self._store(key, body)

    async def replace(self, res: Resource, body: dict[str, Any]) -> dict[str, Any]:
        key = self._key(res, body["metadata"]["name"], body["metadata"].get("namespace"))
        if self.objects[key]["metadata"]["resourceVersion"] != body["metadata"].get("resourceVersion"):
            raise ConflictError("stale", status=409)
        return self._store(key, body)

    def daemon(self, domain: str, status: str) -> None:
        name = clique_object_name(domain, CLIQUE)
        entry = {"nodeName": NODE, "ipAddress": "10.0.0.1", "cliqueID": CLIQUE, "index": 0, "status": status}
        self._store(
            ("computedomaincliques", "gpudra", name),
            {"metadata": {"name": name, "namespace": "gpudra"}, "daemons": [entry]},
        )


def claim(uid: str, device: str, params: dict[str, Any] | None, pool: str = NODE) -> ResourceClaim:
    config = [{"source": "FromClaim", "opaque": {"driver": DRIVER, "parameters": params}}] if params else []
    result = {"request": "channel", "driver": DRIVER, "pool": pool, "device": device}
    return ResourceClaim.model_validate(
        {
            "metadata": {"name": f"c-{uid}", "namespace": "train", "uid": uid},
            "spec": {"devices": {"requests": [{"name": "channel"}]}},
            "status": {"allocation": {"devices": {"results": [result], "config": config}}},
        }
    )


def channel(domain: str, mode: str = "Single") -> dict[str, Any]:
    return {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomainChannelConfig",
        "domainID": domain,
        "allocationMode": mode,
    }


async def planner_for(
    tmp_path: Path,
    api: MemoryApi,
    *,
    mode: DaemonMode = "daemonset",
    clique: str = CLIQUE,
    daemon_wait: float = 0.05,
    events: EventRecorder | None = None,
    calls: CallsInFlight | None = None,
) -> ComputeDomainPlanner:
    store = CheckpointStore(tmp_path / "checkpoint.json", node=NODE, driver=DRIVER)
    await store.load()
    return ComputeDomainPlanner(
        client=cast(KubeClient, api),
        store=store,
        node=NODE,
        driver=DRIVER,
        namespace="gpudra",
        mode=mode,
        clique=lambda: NodeClique(clique, "" if clique else "GPU 2: fabric registration state NOT_STARTED"),
        channel_major=lambda: MAJOR,
        domains_dir=tmp_path / "domains",
        daemon_wait=daemon_wait,
        events=events,
        calls=calls,
    )


async def plan(
    planner: ComputeDomainPlanner, uid: str, device: str, params: dict[str, Any] | None, pool: str = NODE
) -> Any:
    model = claim(uid, device, params, pool)
    assert model.status is not None and model.status.allocation is not None
    results = model.status.allocation.devices.results if model.status.allocation.devices else None
    return await planner.plan(ClaimRef(namespace="train", uid=uid, name=f"c-{uid}"), model, results or [])


def minors(document: dict[str, Any]) -> list[int]:
    return [n["minor"] for d in document["devices"] for n in d["containerEdits"].get("deviceNodes") or []]


@pytest.mark.parametrize(
    ("device", "params", "reason", "said"),
    [
        ("channel-0", None, "InvalidConfig", "has no ComputeDomainChannelConfig"),
        ("daemon-0", channel("d1"), "InvalidConfig", "ComputeDomainChannelConfig cannot configure"),
        ("channel-0", {**channel("d1"), "domainId": "typo"}, "InvalidConfig", "unknown field"),
        ("channel-7", channel("d1"), "UnknownDevice", "not a compute-domain device"),
    ],
)
def test_claim_configs_refuse_what_is_not_a_domain_claim(
    device: str, params: dict[str, Any] | None, reason: str, said: str
) -> None:
    model = claim("u1", device, params)
    assert model.status is not None and model.status.allocation is not None
    devices = model.status.allocation.devices
    with pytest.raises(PrepareError) as caught:
        claim_configs(model, (devices.results if devices else None) or [], DRIVER)
    assert caught.value.reason == reason and said in str(caught.value)


async def test_channel_waits_for_the_daemon_then_gets_channel_0(tmp_path: Path) -> None:
    api = MemoryApi()
    planner = await planner_for(tmp_path, api)
    with pytest.raises(PrepareError) as caught:
        await plan(planner, "u1", "channel-0", channel("d1"))
    assert caught.value.reason == "DaemonNotReady" and "has not registered yet" in str(caught.value)
    assert api.objects[("nodes", None, NODE)]["metadata"]["labels"] == {node_label_key("d1"): "true"}
    api.daemon("d1", "NotReady")
    with pytest.raises(PrepareError, match="with index 0 but not Ready"):
        await plan(planner, "u1", "channel-0", channel("d1"))
    api.daemon("d1", "Ready")
    done = await plan(planner, "u1", "channel-0", channel("d1"))
    assert minors(done.cdi_document) == [0]
    node = done.cdi_document["devices"][0]["containerEdits"]["deviceNodes"][0]
    assert node == {
        "path": "/dev/nvidia-caps-imex-channels/channel0",
        "type": "c",
        "major": MAJOR,
        "minor": 0,
    }
    assert done.cdi_document["kind"] == "k8s.compute-domain.nvidia.com/claim"
    assert "env" not in done.cdi_document.get("containerEdits", {})  # never overrides the GPU claim's env
    assert done.devices[0].cdi_device_ids == ["k8s.compute-domain.nvidia.com/claim=u1-channel-0"]


class SaidEvents:
    def __init__(self) -> None:
        self.said: list[tuple[str, str, str]] = []

    async def post(self, involved: dict[str, Any], type_: str, reason: str, message: str) -> bool:
        self.said.append((involved["metadata"]["name"], reason, message))
        return True


async def test_a_waiting_prepare_is_answered_when_the_daemon_turns_ready_and_says_why_it_waits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(readiness, "NOTICE_AFTER", 0.1)
    api, events = MemoryApi(), SaidEvents()
    planner = await planner_for(tmp_path, api, daemon_wait=10, events=cast(EventRecorder, events))
    waiting = asyncio.create_task(plan(planner, "u1", "channel-0", channel("d1")))
    await eventually(lambda: events.said, 5, what="the notice that the prepare waits")
    assert not waiting.done()
    assert events.said == [
        (
            "c-u1",
            "WaitingForIMEXDaemon",
            f"node {NODE}: waiting for the IMEX daemon of ComputeDomain d1 on node {NODE}: it has not registered "
            "yet; the channel is prepared once it is Ready",
        )
    ]
    api.daemon("d1", "NotReady")
    await eventually(lambda: all(q.empty() for q in api.watches), 5, what="the planner reading the change")
    assert not waiting.done()
    api.daemon("d1", "Ready")
    done = await asyncio.wait_for(waiting, 2)
    assert minors(done.cdi_document) == [0]
    assert api.watches == []  # the watch of the clique object closed with the last waiter


async def test_a_channel_waiting_for_its_daemon_holds_back_no_status_write(tmp_path: Path) -> None:
    """The node's claims' status writes wait while the kubelet's calls are answered (0.5 s at most); a channel's
    prepare that waits up to 20 s for its IMEX daemon spends nothing meanwhile and is not counted then."""
    api, calls = MemoryApi(), CallsInFlight()
    planner = await planner_for(tmp_path, api, daemon_wait=10, calls=calls)

    async def call() -> Any:
        with calls.one():  # as the preparer holds each kubelet call
            return await plan(planner, "u1", "channel-0", channel("d1"))

    waiting = asyncio.create_task(call())
    await eventually(lambda: api.watches, 5, what="the prepare waiting for its daemon")
    await asyncio.wait_for(calls.none(), 5)
    assert not waiting.done()
    api.daemon("d1", "Ready")
    done = await asyncio.wait_for(waiting, 5)
    assert minors(done.cdi_document) == [0]


async def test_a_nodes_channel_claims_waiting_together_read_the_clique_object_once(tmp_path: Path) -> None:
    api = MemoryApi()
    planner = await planner_for(tmp_path, api, daemon_wait=10)
    first = asyncio.create_task(plan(planner, "u1", "channel-0", channel("d1")))
    await eventually(lambda: api.watches, 5, what="the first claim watching the clique object")
    others = [asyncio.create_task(plan(planner, f"u{i}", "channel-0", channel("d1"))) for i in (2, 3, 4)]
    api.daemon("d1", "Ready")
    done = await asyncio.wait_for(asyncio.gather(first, *others), 5)
    assert [minors(d.cdi_document) for d in done] == [[0]] * 4
    assert api.reads["computedomaincliques"] == 1  # the later claims read the open watch, not the API server
    assert api.watches == []


async def test_all_mode_gets_every_channel(tmp_path: Path) -> None:
    api = MemoryApi()
    api.daemon("d1", "Ready")
    done = await plan(await planner_for(tmp_path, api), "u1", "channel-0", channel("d1", "All"))
    assert minors(done.cdi_document) == list(range(2048))


async def test_no_clique_waits_with_the_gpus_reason(tmp_path: Path) -> None:
    planner = await planner_for(tmp_path, MemoryApi(), clique="")
    with pytest.raises(PrepareError) as caught:
        await plan(planner, "u1", "channel-0", channel("d1"))
    assert caught.value.reason == "NoClique" and "GPU 2: fabric registration state NOT_STARTED" in str(
        caught.value
    )


async def test_daemonset_mode_admits_one_domain_per_node(tmp_path: Path) -> None:
    api = MemoryApi()
    planner = await planner_for(tmp_path, api)
    with pytest.raises(PrepareError):  # waiting for d1's daemon: the node is d1's now
        await plan(planner, "u1", "channel-0", channel("d1"))
    with pytest.raises(PrepareError) as caught:
        await plan(planner, "u2", "channel-0", channel("d2"))
    assert caught.value.reason == "ComputeDomainPlacement"
    assert "already runs the IMEX daemon of ComputeDomain d1" in str(caught.value)
    assert node_label_key("d2") not in api.objects[("nodes", None, NODE)]["metadata"]["labels"]
    await planner.released("u1", None)  # the kubelet unprepares the attempted claim: the node is free
    assert api.objects[("nodes", None, NODE)]["metadata"]["labels"] == {}
    with pytest.raises(PrepareError) as caught:
        await plan(planner, "u2", "channel-0", channel("d2"))
    assert caught.value.reason == "DaemonNotReady"


async def test_host_managed_domains_lease_disjoint_channels_and_register_the_node(tmp_path: Path) -> None:
    api = MemoryApi()
    planner = await planner_for(tmp_path, api, mode="host-managed")
    first = await plan(planner, "u1", "channel-0", channel("d1"))
    second = await plan(planner, "u2", "channel-0", channel("d2"))
    assert (minors(first.cdi_document), minors(second.cdi_document)) == ([0], [1])
    with pytest.raises(PrepareError, match=r"holds|needs every IMEX channel"):
        await plan(planner, "u3", "channel-0", channel("d3", "All"))
    clique = await api.get_raw(COMPUTE_DOMAIN_CLIQUES, clique_object_name("d1", CLIQUE), "gpudra")
    assert [(d["nodeName"], d["status"]) for d in clique["daemons"]] == [(NODE, "Ready")]
    await planner.released("u1", None)
    clique = await api.get_raw(COMPUTE_DOMAIN_CLIQUES, clique_object_name("d1", CLIQUE), "gpudra")
    assert clique["daemons"] == []
    third = await plan(planner, "u4", "channel-0", channel("d4"))
    assert minors(third.cdi_document) == [0]  # d1's channel came free with its last node


async def test_daemon_claim_gets_clique_env_and_config_dir(tmp_path: Path) -> None:
    params = {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomainDaemonConfig",
        "domainID": "d1",
    }
    done = await plan(await planner_for(tmp_path, MemoryApi()), "u1", "daemon-0", params)
    edits = done.cdi_document["devices"][0]["containerEdits"]
    assert f"CLIQUE_ID={CLIQUE}" in edits["env"] and "COMPUTE_DOMAIN_UUID=d1" in edits["env"]
    assert edits["mounts"][0]["hostPath"] == str(tmp_path / "domains" / "d1")
    assert (tmp_path / "domains" / "d1").is_dir()


def test_entry_domains_reads_the_checkpointed_configs() -> None:
    entry = ClaimEntry(
        namespace="train",
        name="c",
        state="PrepareCompleted",
        devices=[DeviceRecord(pool_name=NODE, device_name="channel-0", device_type="channel")],
        configs={"channel-0": channel("d1")},
    )
    assert entry_domains(entry) == {"d1"} and entry_domains(entry, "daemon") == set()


def test_published_devices_carry_the_clique_or_a_no_clique_taint() -> None:
    channel_device, _ = published_devices(NodeClique(CLIQUE))
    assert channel_device.attributes is not None and channel_device.attributes["cliqueID"].value == CLIQUE
    assert channel_device.allow_multiple_allocations and not channel_device.taints
    lost = published_devices(NodeClique("", "fabric lost"))
    assert all(d.taints and d.taints[0].key == "compute-domain.nvidia.com/no-clique" for d in lost)
    assert all("cliqueID" not in (d.attributes or {}) for d in lost)


def test_channel_major_from_proc_devices(tmp_path: Path) -> None:
    proc = tmp_path / "devices"
    proc.write_text(
        "Character devices:\n  1 mem\n195 nvidia\n508 nvidia-caps-imex-channels\n\nBlock devices:\n"
    )
    assert read_channel_major(proc) == 508
    proc.write_text("Character devices:\n195 nvidia\n")
    with pytest.raises(InvalidInputError, match="no nvidia-caps-imex-channels entry"):
        read_channel_major(proc)


DOMAIN_A = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
DOMAIN_B = "11111111-2222-3333-4444-555555555555"


def test_a_podgroup_scoped_domains_channel_is_prepared_on_any_node_and_another_nodes_is_not() -> None:
    ref = ClaimRef(namespace="train", uid="u1", name="c-u1")
    shared = claim("u1", "channel-0", channel(DOMAIN_A), pool=shared_pool_name(DOMAIN_A))
    driver = ComputeDomainDriver.shared_pool
    assert [r.pool for r in select_results(shared, ref, driver=DRIVER, node=NODE, shared_pool=driver)] == [
        shared_pool_name(DOMAIN_A)
    ]
    other_node = claim("u1", "channel-0", channel(DOMAIN_A), pool="tray-9")
    with pytest.raises(PrepareError) as caught:
        select_results(other_node, ref, driver=DRIVER, node=NODE, shared_pool=driver)
    assert caught.value.reason == "WrongNode"


async def test_a_podgroup_scoped_domains_channel_gets_channel_0_once_the_daemon_is_ready(
    tmp_path: Path,
) -> None:
    api = MemoryApi()
    planner = await planner_for(tmp_path, api)
    api.daemon(DOMAIN_A, "Ready")
    done = await plan(planner, "u1", "channel-0", channel(DOMAIN_A), pool=shared_pool_name(DOMAIN_A))
    assert minors(done.cdi_document) == [0]
    assert api.objects[("nodes", None, NODE)]["metadata"]["labels"] == {node_label_key(DOMAIN_A): "true"}


async def test_another_domains_channel_is_refused(tmp_path: Path) -> None:
    planner = await planner_for(tmp_path, MemoryApi())
    with pytest.raises(PrepareError) as caught:
        await plan(planner, "u1", "channel-0", channel(DOMAIN_B), pool=shared_pool_name(DOMAIN_A))
    assert caught.value.reason == "InvalidConfig"
    assert (
        f"is the channel of ComputeDomain {DOMAIN_A}, but the claim's config names ComputeDomain {DOMAIN_B}"
        in (str(caught.value))
    )
