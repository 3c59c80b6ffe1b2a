"""``gpudra explain``: why a claim is pending, or whether a claim from a manifest would fit, and where; ``explain
pod NAME`` does so for every claim of a pod. The default output fits 80 columns (the sentence and the nearest
nodes), ``-o wide`` prints everything, ``-o json`` the same as data (``explainoutput``). Exit status 0: every claim
fits now (or is allocated); 1: one cannot fit; 2: bad input. Nothing is written to the cluster."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from gpudra.errors import ConfigurationError, NotFoundError

T = TypeVar("T", bound="WireModel")

if TYPE_CHECKING:
    from gpudra.api.base import WireModel
    from gpudra.api.core import Pod
    from gpudra.api.dra import ResourceClaim, ResourceClaimTemplate
    from gpudra.cli.explainoutput import Answer, PodNotes
    from gpudra.controller.explaining import ClusterView
    from gpudra.kube.client import KubeClient
    from gpudra.kube.resources import TypedResource
    from gpudra.planning.preparestatus import KubeletWarning

# The imports inside the functions are deferred: the client, the allocator and the explanations take a second or
# more to import, and `gpudra --help` or another command should not wait for them.


async def explain_command(args: argparse.Namespace) -> int:
    from gpudra.cli.explainoutput import exit_status
    from gpudra.kube.client import KubeClient

    if args.kind == "pod" and (args.name is None or args.file is not None):
        raise ConfigurationError("give `pod NAME` (without --file)")
    if args.kind != "pod" and (args.file is None) == (args.name is None):
        raise ConfigurationError("give either `claim NAME`, `pod NAME` or `--file claim.yaml`")
    client = await KubeClient.from_environment(args.kubeconfig, field_manager="gpudra-explain")
    try:
        answers, notes = await _answers(client, args)
    finally:
        await client.close()
    _print(answers, notes, args)
    return exit_status(answers)


async def _answers(client: KubeClient, args: argparse.Namespace) -> tuple[list[Answer], PodNotes]:
    from gpudra.cli.explainoutput import PodNotes
    from gpudra.controller.explaining import load_view
    from gpudra.kube.resources import RESOURCE_CLAIMS

    if args.file is not None:
        claim = _read_claim_file(args.file, args.namespace)
        return [_answer(await load_view(client), claim, args.driver_name)], PodNotes()
    if args.kind == "pod":
        return await _pod_answers(client, args)
    claim = await _get(client, RESOURCE_CLAIMS, args.name, args.namespace)
    stranded = await _stranded(client, claim)
    if stranded is not None:
        return [stranded], PodNotes()
    pod = await _waiting_pod(client, claim) if claim.allocation is None else None
    if pod is None:
        return [_answer(await load_view(client), claim, args.driver_name)], PodNotes()
    view, kept = await _pod_view(client, pod)
    note = f"explained for its pod {pod.metadata.name}, over the nodes that pod may go to" if kept else ""
    answer = _answer_for_pod(view, kept, claim, args.driver_name, note)
    return [answer], _pod_notes(pod, view, kept, [answer])


async def _get(client: KubeClient, resource: TypedResource[T], name: str, namespace: str) -> T:
    """The object, or a sentence naming what is missing and how to list what there is."""
    try:
        return await client.get(resource, name, namespace)
    except NotFoundError as exc:
        raise ConfigurationError(
            f"no {resource.kind} {name!r} in namespace {namespace!r}: `kubectl get {resource.plural} -n "
            f"{namespace}` lists them (-n picks another)"
        ) from exc


async def _pod_answers(client: KubeClient, args: argparse.Namespace) -> tuple[list[Answer], PodNotes]:
    """Every claim of the pod: those that exist as they stand, a template's claim not made yet as it would be, and
    the claim kube-scheduler would make for the pod's extended resources while it has not made one, each over the
    nodes the pod may go to; a template's claim kube-controller-manager could not make, with its Warning
    (``gpudra.planning.claimcreation``). Then the pod's notes: its scheduling gates, kube-scheduler's word when
    every claim fits (``gpudra.planning.podscheduling``), and the kubelet's Warning that it could not prepare them,
    while it still says why the pod waits."""
    from gpudra.cli.explainoutput import STRANDED, Answer
    from gpudra.kube.resources import DEVICE_CLASSES, PODS, RESOURCE_CLAIMS
    from gpudra.planning.claimcreation import (
        CREATE_WARNING,
        NOT_CREATED_REASON,
        creation_warning,
        not_created_note,
        not_created_words,
    )
    from gpudra.planning.podclaims import claim_from_template, extended_resource_classes, pod_claims

    pod = await _get(client, PODS, args.name, args.namespace)
    existing, _ = await client.list(RESOURCE_CLAIMS, args.namespace)
    classes, _ = await client.list(DEVICE_CLASSES)
    mapping = extended_resource_classes(
        (c.metadata.name or "", c.spec.extended_resource_name) for c in classes
    )
    entries = pod_claims(pod, (c.metadata for c in existing), mapping)
    if not entries:
        raise ConfigurationError(f"pod {args.namespace}/{args.name} has no resource claims")
    templates = {c.name: c.resource_claim_template_name for c in pod.spec.resource_claims or []}
    view, kept = await _pod_view(client, pod)
    answers: list[Answer] = []
    made: list[ResourceClaim] = []
    # kube-controller-manager's Warnings that it could not make a claim, read once a template's claim is missing
    creating: list[dict[str, Any]] | None = None
    for entry in entries:
        note = ""
        if entry.implicit is not None:
            claim = entry.implicit
            note = f"not created yet; explained as the claim kube-scheduler would make for {entry.pod_claim}"
        elif entry.name is not None:
            claim = await _get(client, RESOURCE_CLAIMS, entry.name, args.namespace)
            made.append(claim)
            stranded = await _stranded(client, claim, pod, existing)
            if stranded is not None:
                answers.append(stranded)
                continue
        else:
            template_name = templates.get(entry.pod_claim) or ""
            template = await _template(client, template_name, args.namespace)
            if creating is None:
                creating = await _pod_events(client, pod, CREATE_WARNING)
            refused = creation_warning(pod, creating, entry.pod_claim)
            if template is None or refused is not None:
                answers.append(
                    Answer(
                        f"{args.namespace}/{pod.metadata.name}-{entry.pod_claim}",
                        STRANDED,
                        reason=NOT_CREATED_REASON,
                        words=not_created_words(args.namespace, template_name, refused),
                        note=not_created_note(template_name),
                    )
                )
                continue
            claim = claim_from_template(pod, entry.pod_claim, template)
            note = f"not created yet; explained as the claim template {template_name} makes"
        answers.append(_answer_for_pod(view, kept, claim, args.driver_name, note))
    warning = await _kubelet_warning(client, pod, made) if len(made) == len(entries) else None
    return answers, _pod_notes(pod, view, kept, answers, warning)


def _pod_notes(
    pod: Pod,
    view: ClusterView,
    kept: dict[str, str],
    answers: list[Answer],
    kubelet: KubeletWarning | None = None,
) -> PodNotes:
    """What is said of the pod beside its claims: the nodes it is kept off, its scheduling gates, kube-scheduler's
    word when every claim fits (``gpudra.planning.podscheduling``), the kubelet's Warning."""
    from gpudra.cli.explainoutput import PodNotes
    from gpudra.planning.podscheduling import scheduling_gates, unschedulable

    gates = scheduling_gates(pod)
    stuck = unschedulable(pod) if not gates and all(a.fits for a in answers) else None
    devices_on = len(view.allocator.snapshot.node_names())
    return PodNotes(devices_on, kept, kubelet, gates, pod.metadata.namespace or "default", stuck)


async def _template(client: KubeClient, name: str, namespace: str) -> ResourceClaimTemplate | None:
    """The ResourceClaimTemplate, or None when it does not exist."""
    from gpudra.kube.resources import RESOURCE_CLAIM_TEMPLATES

    try:
        return await client.get(RESOURCE_CLAIM_TEMPLATES, name, namespace)
    except NotFoundError:
        return None


async def _waiting_pod(client: KubeClient, claim: ResourceClaim) -> Pod | None:
    """The pod not bound yet that the claim is for (``gpudra.planning.podclaims.waiting_pod_of``), if one waits."""
    from gpudra.kube.resources import PODS
    from gpudra.planning.podclaims import may_wait_on_claims, waiting_pod_of

    unbound, _ = await client.list(PODS, claim.metadata.namespace, field_selector="spec.nodeName=")
    pod = waiting_pod_of(claim.metadata, unbound)
    return pod if pod is not None and may_wait_on_claims(pod, gated=True) else None


async def _pod_view(client: KubeClient, pod: Pod) -> tuple[ClusterView, dict[str, str]]:
    """The cluster's view for the pod: for a pod not bound yet, only the nodes kube-scheduler's node filters let
    it go to, with what keeps it off each of the others that publish devices."""
    from gpudra.controller.explaining import load_view, pod_view
    from gpudra.kube.resources import NODES

    nodes, _ = await client.list(NODES)  # one list, for the view and for the pod's node filters
    view = await load_view(client, nodes=nodes)
    if pod.spec.node_name:
        return view, {}
    return pod_view(view, pod.to_wire(), [n.to_wire() for n in nodes])


def _answer_for_pod(
    view: ClusterView, kept: dict[str, str], claim: ResourceClaim, driver_name: str, note: str
) -> Answer:
    """:func:`_answer` over the pod's view (:func:`_pod_view`); for an unallocated claim whose pod kube-scheduler's
    node filters keep off every node publishing devices, that no scheduler allocates it while they do (the
    pod's notes name the nodes and why)."""
    from gpudra.allocator import claim_key
    from gpudra.cli.explainoutput import STRANDED, Answer
    from gpudra.controller.explaining import no_node_left
    from gpudra.planning.podnodes import NO_NODE_REASON, NO_NODE_WORDS

    if claim.allocation is not None or not no_node_left(view, kept):
        return _answer(view, claim, driver_name, note, kept)
    return Answer(claim_key(claim), STRANDED, reason=NO_NODE_REASON, words=NO_NODE_WORDS, note=note)


async def _kubelet_warning(
    client: KubeClient, pod: Pod, claims: list[ResourceClaim]
) -> KubeletWarning | None:
    """The kubelet's latest Warning that it could not prepare the pod's ``claims`` (all of them made), while it
    still stands (``gpudra.planning.preparestatus``). Events the user may not list say nothing."""
    from gpudra.planning.preparestatus import PREPARE_WARNING, kubelet_warning, waits_for_prepare

    if not waits_for_prepare(pod, claims):
        return None  # not bound, started, prepared, or the driver says why: no need to read Events
    return kubelet_warning(pod, await _pod_events(client, pod, PREPARE_WARNING))


async def _pod_events(client: KubeClient, pod: Pod, reason: str) -> list[dict[str, Any]]:
    """The pod's ``reason`` Events (one list, with field selectors); none when the user may not list Events."""
    from gpudra.errors import KubeError
    from gpudra.kube.resources import EVENTS

    selector = f"involvedObject.kind=Pod,involvedObject.name={pod.metadata.name},reason={reason}"
    try:
        events, _ = await client.list_raw(EVENTS, pod.metadata.namespace, field_selector=selector)
    except KubeError as exc:
        if exc.status != 403:
            raise
        return []
    return events


async def _stranded(
    client: KubeClient,
    claim: ResourceClaim,
    pod: Pod | None = None,
    existing: list[ResourceClaim] | None = None,
) -> Answer | None:
    """The answer for an unallocated claim whose pod (``pod``, else the pod that controls the claim) is bound to a
    node: no scheduler will allocate it (``gpudra.planning.boundclaims``); None for any other claim. ``existing``:
    the claims of its namespace, listed when not given."""
    from gpudra.allocator import claim_key
    from gpudra.cli.explainoutput import STRANDED, Answer
    from gpudra.kube.resources import PODS, RESOURCE_CLAIMS
    from gpudra.planning.boundclaims import BOUND_REASON, bound_pod_words, first_of_entry
    from gpudra.planning.podclaims import pod_owner

    namespace = claim.metadata.namespace or "default"
    if claim.allocation is not None:
        return None
    if pod is None:
        owner = pod_owner(claim.metadata)
        if owner is None:
            return None
        try:
            pod = await client.get(PODS, owner.name, namespace)
        except NotFoundError:
            return None
        if pod.metadata.uid != owner.uid:
            return None
    node = pod.spec.node_name
    if not node:
        return None
    if existing is None:  # the claim was read before its pod: it may have been allocated since
        existing, _ = await client.list(RESOURCE_CLAIMS, namespace)
        now = next((c for c in existing if c.metadata.uid == claim.metadata.uid), None)
        if now is None or now.allocation is not None:  # kube-scheduler allocates, then binds
            return None
    first = first_of_entry(claim.metadata, ((c.metadata, c.allocation is not None) for c in existing))
    words = bound_pod_words(f"{namespace}/{pod.metadata.name}", node, first)
    return Answer(claim_key(claim), STRANDED, reason=BOUND_REASON, words=words)


def _answer(
    view: ClusterView,
    claim: ResourceClaim,
    driver_name: str,
    note: str = "",
    kept: Mapping[str, str] | None = None,
) -> Answer:
    """Allocated, would fit now, or why not (with the MIG planner's answer, planned for the pending claims
    together, as the controller does; ``kept``: the nodes the claim's pod may not go to, where it plans nothing
    for the claim)."""
    from gpudra.allocator import Allocation, claim_key
    from gpudra.cli.explainoutput import ALLOCATED, FITS, PENDING, Answer
    from gpudra.controller.explaining import explain, explanation
    from gpudra.planning.migdemand import plan_pending
    from gpudra.planning.preparestatus import not_prepared

    key = claim_key(claim)
    if claim.allocation is not None:
        return Answer(
            key, ALLOCATED, allocation=claim.allocation, note=note, not_prepared=not_prepared(claim)
        )
    outcome = explain(view, claim)
    if isinstance(outcome, Allocation):
        return Answer(key, FITS, fitted=outcome, note=note)
    uid = claim.metadata.uid
    waiting = [*(c for c in view.pending if uid is None or c.metadata.uid != uid), claim]
    plan = plan_pending(view.allocator, waiting, driver_name, view.mig_models, {key: list(kept or {})})
    return Answer(key, PENDING, explanation=explanation(view, claim, outcome, plan), plan=plan, note=note)


def _print(answers: list[Answer], notes: PodNotes, args: argparse.Namespace) -> None:
    from rich.console import Console

    from gpudra.cli.explainoutput import WIDTH, answer_data, short_report, wide_report
    from gpudra.reports import print_fitted

    if args.output == "json":
        data = [answer_data(a) for a in answers]
        pod = {"pod": f"{args.namespace}/{args.name}", "claims": data}
        body: dict[str, Any] = pod if args.kind == "pod" else data[0]
        body.update(notes.data())
        sys.stdout.write(json.dumps(body, indent=2) + "\n")
        return
    if args.output == "wide":
        console, shipped = Console(), _shipped(args.driver_name)
        reports = [*notes.head(limit=None), *(wide_report(a, shipped) for a in answers), *notes.tail()]
        for report in reports:
            print_fitted(console, report)
        return
    console = Console()
    console.width = min(console.width, WIDTH) if console.is_terminal else WIDTH
    with console.capture() as captured:
        head = notes.head()
        for line in head:
            console.print(line)
        for i, report in enumerate([*(short_report(answer) for answer in answers), *notes.tail()]):
            if i or head:
                console.print()
            console.print(report)
    sys.stdout.write("".join(line.rstrip() + "\n" for line in captured.get().splitlines()))


def _read_claim_file(path: Path, namespace: str) -> ResourceClaim:
    """The one ResourceClaim of a manifest; its namespace defaults to ``-n``'s and its name to the file's stem."""
    import yaml
    from pydantic import ValidationError

    from gpudra.api.dra import ResourceClaim

    try:
        body = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigurationError(f"cannot read {path}: {exc}") from exc
    if not isinstance(body, dict) or body.get("kind") != "ResourceClaim":
        raise ConfigurationError(f"{path} must hold one ResourceClaim")
    body.setdefault("metadata", {}).setdefault("namespace", namespace)
    body["metadata"].setdefault("name", path.stem)
    try:
        return ResourceClaim.model_validate(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise ConfigurationError(
            f"{path} is not a valid ResourceClaim: {where}: {first['msg']}{more}; "
            f"`kubectl apply --dry-run=server -f {path}` shows what the API server says"
        ) from exc


def _shipped(driver_name: str) -> set[tuple[str, str]]:
    """(DeviceClass name, CEL expression) of every selector of the DeviceClasses gpudra ships, so the report can
    name a class's own selector rather than repeat its expression."""
    from gpudra.devices import load_device_classes

    return {
        (c.metadata.name or "", s.cel.expression)
        for c in load_device_classes(gpu_driver=driver_name)
        for s in c.spec.selectors or ()
        if s.cel is not None
    }
