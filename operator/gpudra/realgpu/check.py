"""The real-GPU check's steps, in order, each recorded as pass, fail or skip with what it saw.

record -> mig-mode -> cluster -> agent-start -> slices -> allocate -> prepare -> cdi-device-nodes -> unprepare ->
health-watch -> agent-stop. A step that fails skips those that need it; the agent, once started, is always
stopped with SIGTERM and checked. The agent is not started when a GPU has MIG mode on (now or pending) unless
``allow_mig_on``: its start-up recovery destroys MIG GPU instances that hold no compute instance, which on a shared
machine may be someone else's, half made."""

from __future__ import annotations

import asyncio
import json
import os
import stat
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from gpudra.agent.cdi import ClaimSpecDir
from gpudra.agent.kubeletplugin import ClaimRef
from gpudra.agent.kubeletplugin.kubelet_client import KubeletClient
from gpudra.agent.kubeletplugin.messages import HEALTH_SERVICES
from gpudra.allocator import Allocation, Allocator, ClusterSnapshot
from gpudra.api.dra import ResourceClaim, ResourceSlice
from gpudra.api.timestamps import rfc3339
from gpudra.cluster.realnode.devices import simulated_device_paths
from gpudra.devices import load_device_classes
from gpudra.kube.client import KubeClient
from gpudra.kube.resources import EVENTS, RESOURCE_CLAIMS, RESOURCE_SLICES
from gpudra.realgpu.findings import (
    attribute,
    compare_slices,
    gpu_line,
    gpus_with_mig_on,
    health_findings,
    node_devices,
    recorded_gpus,
    spec_device_nodes,
    spec_env,
)
from gpudra.realgpu.rig import NAMESPACE, Options, Rig
from gpudra.realgpu.summary import Status, Step, Summary

STEPS = [
    "record",
    "mig-mode",
    "cluster",
    "agent-start",
    "slices",
    "allocate",
    "prepare",
    "cdi-device-nodes",
    "unprepare",
    "health-watch",
    "agent-stop",
]
CLAIM_NAME = "realgpu-check"
RECORD_TIMEOUT_SECONDS = 120.0
Outcome = tuple[Status, dict[str, Any]]


class Check:
    def __init__(self, options: Options, summary: Summary) -> None:
        self.options = options
        self.summary = summary
        self.rig = Rig(options)
        self.recording: dict[str, Any] = {}
        self.published: list[dict[str, Any]] = []
        self.claim: ClaimRef | None = None
        self.allocated: dict[str, Any] = {}
        self.kubelet: KubeletClient | None = None

    async def step(self, name: str, run: Callable[[], Awaitable[Outcome]]) -> bool:
        """Run one step and record it; True when it passed. Any error is the step's failure, with its words: the
        check reports what went wrong on a machine it has never seen, and goes on to stop the agent."""
        start = time.monotonic()
        try:
            status, detail = await run()
        except Exception as exc:  # recorded in the summary, never lost
            status, detail = "fail", {"error": f"{type(exc).__name__}: {exc}"}
        self.summary.add(Step(name, status, detail, time.monotonic() - start))
        return status == "pass"

    async def run(self) -> None:
        try:
            started = (
                await self.step("record", self.record)
                and await self.step("mig-mode", self.mig_mode)
                and await self.step("cluster", self.cluster)
                and await self.step("agent-start", self.agent_start)
            )
            if started:
                await self._with_agent()
        finally:
            if self.rig.agent is not None:
                await self.step("agent-stop", self.agent_stop)
            if self.kubelet is not None:
                await self.kubelet.close()
            await self.rig.close()
            failed = next((s.name for s in self.summary.steps if s.status == "fail"), "an earlier step")
            self.summary.skip_rest(STEPS, f"not run: {failed} failed")

    async def _with_agent(self) -> None:
        if (
            await self.step("slices", self.slices)
            and await self.step("allocate", self.allocate)
            and await self.step("prepare", self.prepare)
        ):
            await self.step("cdi-device-nodes", self.cdi_device_nodes)
            await self.step("unprepare", self.unprepare)
        await self.step("health-watch", self.health_watch)

    # -- before the agent --------------------------------------------------------------------------------------

    async def record(self) -> Outcome:
        """``gpudra hardware record``, as a user runs it (read-only: only NVML's query calls pass)."""
        path = self.options.out / "recording.json"
        argv = [sys.executable, "-m", "gpudra", "hardware", "record", "-o", str(path)]
        argv += ["--node-name", self.options.node_name]
        if self.options.backend == "simulated":
            argv += ["--simulated-profile", self.options.simulated_profile]
        process = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            _, err = await asyncio.wait_for(process.communicate(), RECORD_TIMEOUT_SECONDS)
        except TimeoutError:  # an NVML call that hangs: nothing of the check may outlive it
            process.kill()
            await process.wait()
            raise TimeoutError(
                f"gpudra hardware record did not finish in {RECORD_TIMEOUT_SECONDS:.0f} s"
            ) from None
        if process.returncode != 0:
            return "fail", {"exit_code": process.returncode, "stderr": err.decode(errors="replace")[-2000:]}
        self.recording = json.loads(path.read_text())
        inventory = self.recording.get("inventory") or {}
        detail = {
            "file": str(path),
            "driver_version": inventory.get("driver_version"),
            "cuda_driver_version": inventory.get("cuda_driver_version"),
            "gpus": [gpu_line(g) for g in recorded_gpus(self.recording)],
            "recorded_with": self.recording.get("recorded_with"),
        }
        if "error" in inventory or not recorded_gpus(self.recording):
            return "fail", {**detail, "error": inventory.get("error") or "no GPU recorded"}
        return "pass", detail

    async def mig_mode(self) -> Outcome:
        on = gpus_with_mig_on(self.recording)
        if not on:
            return "pass", {"gpus_with_mig_on": []}
        if self.options.allow_mig_on:
            return "pass", {"gpus_with_mig_on": on, "allowed": "--allow-mig-on"}
        return "fail", {
            "gpus_with_mig_on": on,
            "refused": "the agent was not started: with MIG mode on, its start-up recovery destroys GPU instances "
            "without compute instances, which on a shared machine may be someone else's; run with --allow-mig-on "
            "where that is acceptable",
        }

    async def cluster(self) -> Outcome:
        url = await self.rig.start_cluster()
        return "pass", {
            "api_server": url,
            "kubeconfig": str(self.rig.kubeconfig),
            "node": self.options.node_name,
        }

    async def agent_start(self) -> Outcome:
        if self.options.backend == "simulated" and self.options.driver_root is None:
            self._stand_in_device_nodes()
        pid = await self.rig.start_agent()
        return "pass", {"pid": pid, "log": str(self.rig.agent_log), "driver_root": str(self.rig.driver_root)}

    def _stand_in_device_nodes(self) -> None:
        """With simulated GPUs: empty files where the driver's device nodes would be (the control nodes, each
        recorded GPU's, its MIG devices' nvidia-caps) under the agent's driver root, a directory of the check's."""
        minors = [int(g["minor"]) for g in recorded_gpus(self.recording)]
        for path in simulated_device_paths(minors):
            stand_in = self.rig.driver_root / path.lstrip("/")
            stand_in.parent.mkdir(parents=True, exist_ok=True)
            stand_in.touch()

    # -- with the agent ----------------------------------------------------------------------------------------

    async def slices(self) -> Outcome:
        client = self._client()
        items, _ = await client.list_raw(RESOURCE_SLICES)
        self.published = node_devices(items, self.options.node_name, self.options.driver_name)
        problems, detail = compare_slices(self.published, self.recording)
        mine = [s for s in items if s.get("spec", {}).get("nodeName") == self.options.node_name]
        events, _ = await client.list_raw(EVENTS, "default")
        detail["slices"] = len(mine)
        detail["node_warnings"] = [
            f"{e.get('reason')}: {e.get('message')}"
            for e in events
            if e.get("type") == "Warning" and e.get("involvedObject", {}).get("kind") == "Node"
        ]
        return ("fail", {**detail, "problems": problems}) if problems else ("pass", detail)

    async def allocate(self) -> Outcome:
        """A claim for one whole GPU (class gpu.nvidia.com; a MIG device, class mig.nvidia.com, where only MIG
        devices are published), allocated by gpudra's allocator on the published slices and written into its status
        as a scheduler does, reserved for a pod that stands for the workload."""
        client = self._client()
        types = {attribute(d, "type") for d in self.published}
        device_class = "gpu.nvidia.com" if "gpu" in types or "mig" not in types else "mig.nvidia.com"
        body = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": CLAIM_NAME, "namespace": NAMESPACE},
            "spec": {
                "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": device_class}}]}
            },
        }
        created = await client.create(RESOURCE_CLAIMS, body, NAMESPACE)
        items, _ = await client.list_raw(RESOURCE_SLICES)
        allocator = Allocator(
            ClusterSnapshot(ResourceSlice.model_validate(s) for s in items),
            load_device_classes(gpu_driver=self.options.driver_name),
        )
        outcome = allocator.allocate(self.options.node_name, [ResourceClaim.model_validate(created)])
        if not isinstance(outcome, Allocation):
            return "fail", {"error": f"no allocation on {self.options.node_name}: {outcome}"}
        result = outcome.claims[0].result.model_copy(update={"allocation_timestamp": rfc3339()})
        created["status"] = {
            "allocation": result.to_wire(),
            "reservedFor": [{"resource": "pods", "name": f"{CLAIM_NAME}-pod", "uid": str(uuid.uuid4())}],
        }
        written = await client.replace(RESOURCE_CLAIMS, created, subresource="status")
        self.claim = ClaimRef(namespace=NAMESPACE, uid=written["metadata"]["uid"], name=CLAIM_NAME)
        results = written["status"]["allocation"]["devices"]["results"]
        self.allocated = next(d for d in self.published if d.get("name") == results[0]["device"])
        return "pass", {
            "claim": f"{NAMESPACE}/{CLAIM_NAME}",
            "uid": self.claim.uid,
            "device_class": device_class,
            "results": results,
        }

    async def prepare(self) -> Outcome:
        """NodePrepareResources as the kubelet calls it: found by its registration socket, GetInfo, a version
        picked, NotifyRegistrationStatus, then the call on the advertised endpoint."""
        sockets = sorted(self.rig.registry_dir.glob("*.sock"))
        if not sockets:
            return "fail", {"error": f"no registration socket in {self.rig.registry_dir}"}
        self.kubelet = KubeletClient(sockets[0])
        info = await self.kubelet.register()
        claim = self._claim()
        result = (await self.kubelet.prepare([claim]))[claim.uid]
        detail: dict[str, Any] = {
            "registration_socket": str(sockets[0]),
            "supported_versions": list(info.supported_versions),
            "api_version": self.kubelet.api_version,
            "devices": [
                {"pool": d.pool_name, "device": d.device_name, "cdi_device_ids": list(d.cdi_device_ids)}
                for d in result.devices
            ],
        }
        if result.error or not result.devices:
            return "fail", {**detail, "error": result.error or "no device prepared"}
        return "pass", detail

    async def cdi_device_nodes(self) -> Outcome:
        """The claim's CDI spec: every device node it names exists on the host (a character device with NVML; with
        simulated GPUs, one of the check's stand-ins), and NVIDIA_VISIBLE_DEVICES names the allocated GPU."""
        spec = await asyncio.to_thread(ClaimSpecDir(self.rig.cdi_dir).read, self._claim().uid)
        if spec is None:
            return "fail", {"error": f"no CDI spec for the claim in {self.rig.cdi_dir}"}
        nodes = {
            path: _device_node(Path(path), real=self.options.backend == "nvml")
            for path in spec_device_nodes(spec)
        }
        visible = spec_env(spec).get("NVIDIA_VISIBLE_DEVICES", "")
        gpu_uuid = attribute(self.allocated, "uuid")
        detail: dict[str, Any] = {"kind": spec.get("kind"), "device_nodes": nodes, "visible_devices": visible}
        if self.options.backend == "simulated":
            detail["note"] = (
                f"simulated GPUs: the nodes are stand-ins the check made under {self.rig.driver_root}"
            )
        problems = [f"{path}: {state}" for path, state in nodes.items() if not state.startswith("ok")]
        if not nodes:
            problems.append("the spec names no device node")
        if gpu_uuid not in visible.split(","):
            problems.append(f"NVIDIA_VISIBLE_DEVICES does not name the allocated GPU {gpu_uuid}")
        return ("fail", {**detail, "problems": problems}) if problems else ("pass", detail)

    async def unprepare(self) -> Outcome:
        assert self.kubelet is not None  # prepare passed
        claim = self._claim()
        result = (await self.kubelet.unprepare([claim]))[claim.uid]
        left = sorted(p.name for p in self.rig.cdi_dir.glob("*")) if self.rig.cdi_dir.exists() else []
        detail = {"cdi_files_left": left}
        problems = [result.error] if result.error else []
        if left:
            problems.append(f"CDI spec files left in {self.rig.cdi_dir}: {left}")
        return ("fail", {**detail, "problems": problems}) if problems else ("pass", detail)

    async def health_watch(self) -> Outcome:
        """The plugin's health stream, as the kubelet watches it, for ``health_seconds``."""
        if self.kubelet is None:
            sockets = sorted(self.rig.registry_dir.glob("*.sock"))
            if not sockets:
                return "fail", {"error": f"no registration socket in {self.rig.registry_dir}"}
            self.kubelet = KubeletClient(sockets[0])
            await self.kubelet.register()
        info = self.kubelet.info
        advertised = [s for s in HEALTH_SERVICES if info is not None and s in info.supported_versions]
        if not advertised:
            return "fail", {"error": "the plugin does not advertise a health service"}
        updates: list[list[dict[str, Any]]] = []

        async def listen() -> None:
            assert self.kubelet is not None
            async for update in self.kubelet.watch_health():
                updates.append(
                    [{"device": h.device_name, "health": h.health.name, "message": h.message} for h in update]
                )

        ended = "the stream ended early"
        try:
            await asyncio.wait_for(listen(), self.options.health_seconds)
        except TimeoutError:
            ended = ""
        problems, detail = health_findings(updates, (str(d.get("name")) for d in self.published))
        if ended:
            problems.append(ended)
        detail.update(service=advertised[0], seconds=self.options.health_seconds)
        return ("fail", {**detail, "problems": problems}) if problems else ("pass", detail)

    async def agent_stop(self) -> Outcome:
        """SIGTERM, as the kubelet stops the agent's pod: it exits 0 within the grace period, its process group
        is gone, and so are its sockets and any CDI spec."""
        code = await self.rig.terminate_agent()
        sockets = sorted(str(p) for p in self.rig.work.rglob("*.sock"))
        specs = sorted(p.name for p in self.rig.cdi_dir.glob("*.json")) if self.rig.cdi_dir.exists() else []
        detail = {"exit_code": code, "sockets_left": sockets, "cdi_files_left": specs}
        problems = []
        if code is None:
            problems.append("still running after the grace period; killed")
        elif code != 0:
            problems.append(f"exit code {code}")
        if self.rig.agent_group_alive():
            problems.append("processes of the agent's process group are left")
        if sockets:
            problems.append(f"sockets left: {sockets}")
        if specs:
            problems.append(f"CDI spec files left: {specs}")
        return ("fail", {**detail, "problems": problems}) if problems else ("pass", detail)

    # -- helpers -------------------------------------------------------------------------------------------------

    def _client(self) -> KubeClient:
        assert self.rig.client is not None  # the cluster step passed
        return self.rig.client

    def _claim(self) -> ClaimRef:
        assert self.claim is not None  # the allocate step passed
        return self.claim


def _device_node(path: Path, *, real: bool) -> str:
    """``ok ...`` when ``path`` is there as it should be (a character device on a real host), else what is wrong."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return "missing"
    except OSError as exc:
        return f"unreadable: {exc}"
    if stat.S_ISCHR(mode):
        device = path.stat().st_rdev
        return f"ok (character device {os.major(device)}:{os.minor(device)})"
    if real:
        return "not a character device"
    return "ok (stand-in file)"
