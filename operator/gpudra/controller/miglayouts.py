"""The controller's MigLayout reconciler: hands each node its desired MIG state and aggregates MigLayout status.

kopf's MigLayout events and the controller's shared Nodes informer keep a cache of MigLayouts and Nodes and wake
one loop; the loop resolves every layout to mig-parted entries (inline, mig-parted's defaults, or a ConfigMap),
computes the rollout with the pure :mod:`gpudra.mig.rollout`, then writes only what changed: the Nodes'
``gpudra.dev/mig-desired`` annotation (merge patches, no resourceVersion, so no 409 retry loops) and each
MigLayout's status subresource. Warning Events go to a MigLayout when it becomes Blocked or Invalid
(deduplicated).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import replace
from typing import Any

import yaml
from pydantic import ValidationError

from gpudra.api.miglayout import MigLayout
from gpudra.api.timestamps import rfc3339
from gpudra.config import ControllerSettings
from gpudra.errors import GpudraError, InvalidInputError, KubeError
from gpudra.kube.client import KubeClient
from gpudra.kube.events import EventRecorder
from gpudra.kube.resources import CONFIGMAPS, NODES, TypedResource
from gpudra.mig import (
    BLOCKED,
    CONFIG_LABEL,
    CONFIG_STATE_LABEL,
    DESIRED_ANNOTATION,
    INVALID,
    STATE_ANNOTATION,
    LayoutInput,
    MigConfigEntry,
    MigPartedConfig,
    NodeInput,
    NodeOutcome,
    NodeReport,
    default_configs,
    layout_status,
    parse_entries,
    parse_mig_parted,
    plan_rollout,
)
from gpudra.telemetry import get_logger

log = get_logger(__name__)
CONFIG_FILE_TTL = 5.0
MIGLAYOUTS = TypedResource(
    "gpudra.dev", "v1alpha1", "miglayouts", "MigLayout", namespaced=False, model=MigLayout
)


class MigLayoutReconciler:
    def __init__(self, client: KubeClient, settings: ControllerSettings) -> None:
        self._client = client
        self._settings = settings
        self._events = EventRecorder(client, "gpudra-controller")
        self.layouts: dict[str, dict[str, Any]] = {}
        self.nodes: dict[str, dict[str, Any]] = {}
        self._wake = asyncio.Event()
        self._defaults = default_configs()
        self._defaults_of: tuple[tuple[int, str], ...] = ()  # the reported MIG facts the defaults include
        self._files: dict[tuple[str, str, str], tuple[float, MigPartedConfig | InvalidInputError]] = {}
        self._reports: dict[str, tuple[str, NodeReport | None]] = {}  # node -> (its state annotation, parsed)

    def layout_event(self, kind: str, body: dict[str, Any]) -> None:
        self._remember(self.layouts, kind, body)

    def node_event(self, kind: str, body: dict[str, Any]) -> None:
        self._remember(self.nodes, kind, body)

    def _remember(self, cache: dict[str, dict[str, Any]], kind: str, body: dict[str, Any]) -> None:
        name = body["metadata"]["name"]
        if kind == "DELETED":
            cache.pop(name, None)
        else:
            cache[name] = body
        self._wake.set()

    async def run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):  # not wait_for: on 3.11 it can swallow a cancellation
                async with asyncio.timeout(self._settings.mig_resync_seconds):
                    await self._wake.wait()
            self._wake.clear()
            await asyncio.sleep(0.05)  # let a burst of events land in the caches first
            try:
                await self.reconcile()
            except GpudraError as exc:
                log.error("MigLayout reconcile failed; will retry", error=str(exc))
                await asyncio.sleep(1.0)
                self._wake.set()

    # -- resolving layouts ---------------------------------------------------------------------------------

    async def _config_file(self, namespace: str, name: str, key: str) -> MigPartedConfig:
        """The parsed file, read at most every CONFIG_FILE_TTL seconds (node events wake the loop often)."""
        cached = self._files.get((namespace, name, key))
        if cached is not None and time.monotonic() - cached[0] < CONFIG_FILE_TTL:
            if isinstance(cached[1], InvalidInputError):
                raise cached[1]
            return cached[1]
        try:
            file: MigPartedConfig | InvalidInputError = await self._read_config_file(namespace, name, key)
        except InvalidInputError as exc:
            file = exc
        self._files[(namespace, name, key)] = (time.monotonic(), file)
        if isinstance(file, InvalidInputError):
            raise file
        return file

    async def _read_config_file(self, namespace: str, name: str, key: str) -> MigPartedConfig:
        try:
            config_map = await self._client.get_raw(CONFIGMAPS, name, namespace)
        except KubeError as exc:
            raise InvalidInputError(f"ConfigMap {namespace}/{name}: {exc}") from exc
        text = (config_map.get("data") or {}).get(key)
        if text is None:
            raise InvalidInputError(f"ConfigMap {namespace}/{name} has no key {key!r}")
        try:
            return parse_mig_parted(yaml.safe_load(text))
        except yaml.YAMLError as exc:
            raise InvalidInputError(f"ConfigMap {namespace}/{name} key {key!r}: not YAML: {exc}") from exc

    async def _named(self, config: str, namespace: str, name: str, key: str) -> tuple[MigConfigEntry, ...]:
        file = await self._config_file(namespace, name, key) if name else self._defaults
        return file.entries(config)

    async def _layout_input(self, body: dict[str, Any]) -> LayoutInput:
        meta = body["metadata"]
        base = LayoutInput(
            meta["name"], int(meta.get("generation") or 1), meta.get("creationTimestamp", ""), {}
        )
        try:
            spec = MigLayout.from_wire(body).spec
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
            return replace(base, parsed=False, problem=f"invalid spec: {problems}")
        layout = replace(
            base,
            match_labels=spec.node_selector.match_labels or {},
            policy=spec.policy,
            allow_partial=spec.allow_partial,
            config=spec.layout.config,
        )
        try:
            if (spec.layout.entries is None) == (spec.layout.config is None):
                raise InvalidInputError("spec.layout: set exactly one of config or entries")
            if spec.layout.entries is not None:
                raw = [e.model_dump(by_alias=True, exclude_none=True) for e in spec.layout.entries]
                entries = parse_entries(raw, "spec.layout.entries")
            else:
                ref = spec.layout.config_map
                where = (ref.namespace, ref.name, ref.key) if ref else ("", "", "")
                entries = await self._named(spec.layout.config or "", *where)
        except InvalidInputError as exc:
            return replace(layout, problem=str(exc))
        return replace(layout, entries=entries)

    async def _label_configs(self, names: set[str]) -> dict[str, tuple[tuple[MigConfigEntry, ...], str]]:
        namespace, _, name = self._settings.mig_config_map.partition("/")
        resolved: dict[str, tuple[tuple[MigConfigEntry, ...], str]] = {}
        for config in names:
            try:
                resolved[config] = (
                    await self._named(config, namespace, name, self._settings.mig_config_map_key),
                    "",
                )
            except InvalidInputError as exc:
                resolved[config] = ((), str(exc))
        return resolved

    # -- reconcile -----------------------------------------------------------------------------------------

    async def reconcile(self) -> None:
        nodes = []
        for body in list(self.nodes.values()):
            meta = body["metadata"]
            annotations = meta.get("annotations") or {}
            report = self._report(meta["name"], annotations.get(STATE_ANNOTATION))
            nodes.append(
                NodeInput(meta["name"], meta.get("labels") or {}, annotations.get(DESIRED_ANNOTATION), report)
            )
        self._reports = {n.name: self._reports[n.name] for n in nodes if n.name in self._reports}
        self._refresh_defaults(nodes)
        layouts = [await self._layout_input(body) for body in list(self.layouts.values())]
        labels = {n.labels[CONFIG_LABEL] for n in nodes if CONFIG_LABEL in n.labels}
        rollout = plan_rollout(layouts, nodes, await self._label_configs(labels))
        for node, text in rollout.desired.items():
            log.info("MIG desired state handed to node", node=node, desired=text)
            await self._client.patch(NODES, node, {"metadata": {"annotations": {DESIRED_ANNOTATION: text}}})
        for node, problem in rollout.failed_labels.items():
            await self._fail_label(node, problem)
        for layout in layouts:
            await self._write_status(layout, rollout.nodes.get(layout.name, []))

    def _refresh_defaults(self, nodes: list[NodeInput]) -> None:
        """mig-parted's default configs over the catalog and the MIG facts the nodes reported (a model the
        catalog lacks gets its all-<profile> configs)."""
        reported = {f.pci_device_id: f for n in nodes if n.report is not None for f in n.report.models}
        key = tuple(sorted((pci, f.to_json()) for pci, f in reported.items()))
        if key != self._defaults_of:
            self._defaults = default_configs(reported={pci: f.mig_model() for pci, f in reported.items()})
            self._defaults_of = key

    def _report(self, node: str, text: str | None) -> NodeReport | None:
        """The node's parsed state report, parsed again only when its text changed (every node event of the
        cluster wakes the reconciler; most change something else)."""
        if text is None:
            return None
        cached = self._reports.get(node)
        if cached is None or cached[0] != text:
            cached = self._reports[node] = (text, NodeReport.from_json(text))
        return cached[1]

    async def _fail_label(self, node: str, problem: str) -> None:
        body = self.nodes.get(node) or {}
        if (body.get("metadata", {}).get("labels") or {}).get(CONFIG_STATE_LABEL) != "failed":
            await self._client.patch(NODES, node, {"metadata": {"labels": {CONFIG_STATE_LABEL: "failed"}}})
        await self._events.post(
            {"apiVersion": "v1", "kind": "Node", **body}, "Warning", "MigConfigInvalid", problem
        )

    async def _write_status(self, layout: LayoutInput, outcomes: list[NodeOutcome]) -> None:
        body = self.layouts.get(layout.name)
        if body is None:
            return
        previous = body.get("status") or {}
        status = layout_status(layout, outcomes, previous, rfc3339())
        if status == previous:
            return
        try:
            updated = await self._client.patch(
                MIGLAYOUTS, layout.name, {"status": status}, subresource="status"
            )
        except KubeError as exc:
            log.warning("writing MigLayout status failed; will retry", layout=layout.name, error=str(exc))
            self._wake.set()
            return
        self.layouts[layout.name] = updated
        for cond in status["conditions"]:
            if cond["type"] in (BLOCKED, INVALID) and cond["status"] == "True":
                await self._events.post(updated, "Warning", cond["reason"], cond["message"])
