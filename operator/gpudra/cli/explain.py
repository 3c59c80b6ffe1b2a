"""``gpudra explain``: why a claim is pending, or whether a claim from a manifest would fit, and where; with the MIG
planner's section when repartitioning a GPU would serve it. Nothing is written to the cluster."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from gpudra.errors import ConfigurationError, NotFoundError

if TYPE_CHECKING:
    from gpudra.api.dra import ResourceClaim

# The imports inside the functions are deferred: the client, the allocator and the explanations take a second or
# more to import, and `gpudra --help` or another command should not wait for them.


async def explain_command(args: argparse.Namespace) -> int:
    from rich.console import Console

    from gpudra.allocator.requests import claim_key
    from gpudra.allocator.result import Allocation
    from gpudra.api.dra import ResourceClaim
    from gpudra.controller.explaining import explain, explanation, load_view
    from gpudra.kube.client import KubeClient
    from gpudra.kube.resources import RESOURCE_CLAIMS
    from gpudra.planning.migdemand import plan_pending
    from gpudra.reports import allocation_table, mig_plan_report, outcome_report, print_fitted

    if (args.file is None) == (args.name is None):
        raise ConfigurationError("give either `claim NAME` or `--file claim.yaml`")
    client = await KubeClient.from_environment(args.kubeconfig, field_manager="gpudra-explain")
    console = Console()
    try:
        if args.file is not None:
            claim = _read_claim_file(args.file, args.namespace)
            skip = None
        else:
            try:
                claim = await client.get_as(ResourceClaim, RESOURCE_CLAIMS, args.name, args.namespace)
            except NotFoundError as exc:
                raise ConfigurationError(
                    f"no ResourceClaim {args.name!r} in namespace {args.namespace!r}: "
                    f"`kubectl get resourceclaims -n {args.namespace}` lists its claims (-n picks another)"
                ) from exc
            if claim.allocation is not None:
                title = f"claim {args.namespace}/{args.name} is allocated"
                print_fitted(console, allocation_table(title, claim.allocation))
                return 0
            skip = claim.metadata.uid
        view = await load_view(client, skip_claim_uid=skip)
        outcome = explain(view, claim)
        if isinstance(outcome, Allocation):
            print_fitted(console, outcome_report(outcome))
            return 0
        # the planner serves the pending claims together, as the controller does
        waiting = [*(c for c in view.pending if c.metadata.uid != skip), claim]
        plan = plan_pending(view.allocator, waiting, args.driver_name)
        print_fitted(
            console, outcome_report(explanation(view, claim, outcome, plan), _shipped(args.driver_name))
        )
        section = mig_plan_report(plan, claim_key(claim))
        if section is not None:
            print_fitted(console, section)
    finally:
        await client.close()
    return 0


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
        raise ConfigurationError(f"{path} is not a valid ResourceClaim: {exc}") from exc


def _shipped(driver_name: str) -> set[tuple[str, str]]:
    """(DeviceClass name, CEL expression) of every selector of the DeviceClasses gpudra ships, so the report can
    name a class's own selector rather than repeat its expression."""
    from gpudra.devices.classes import load_device_classes

    return {
        (c.metadata.name or "", s.cel.expression)
        for c in load_device_classes(gpu_driver=driver_name)
        for s in c.spec.selectors or ()
        if s.cel is not None
    }
