"""Deleting a ComputeDomain is bounded: failed passes are retried a fixed number of times, then the finalizer is
released anyway, and the summary names what was removed, what is left and which pods were not waited for. And
the one warning the create handler may post: a PodGroup-scoped domain on a cluster without PodGroups."""

from __future__ import annotations

from typing import Any, cast

import pytest

from gpudra.api.computedomain import ComputeDomain
from gpudra.computedomain.names import CHANNEL_SCOPE_ANNOTATION
from gpudra.controller.domainchildren import Cleanup, cleanup_verdict, scope_warning
from gpudra.kube.client import KubeClient
from gpudra.kube.resources import Resource


@pytest.mark.parametrize(
    ("failed", "attempt", "attempts", "verdict"),
    [
        (False, 0, 5, "complete"),
        (False, 4, 5, "complete"),
        (True, 0, 5, "retry"),
        (True, 3, 5, "retry"),
        (True, 4, 5, "incomplete"),
        (True, 0, 1, "incomplete"),
    ],
)
def test_cleanup_is_retried_then_given_up(failed: bool, attempt: int, attempts: int, verdict: str) -> None:
    outcome = Cleanup(failed=["DaemonSet gpudra/x: 500 InternalError"] if failed else [])
    assert cleanup_verdict(outcome, attempt, attempts) == verdict


def test_summary_names_what_is_left_and_the_pods_not_waited_for() -> None:
    outcome = Cleanup(
        removed=["ResourceClaimTemplate team/train-channel", "label computedomain.gpudra.dev/u of node n1"],
        failed=["DaemonSet gpudra/computedomain-daemon-u: 500 InternalError"],
        holding_pods=["team/train-0"],
    )
    text = outcome.summary()
    assert text.startswith("removed 2 object(s) (ResourceClaimTemplate team/train-channel, label")
    assert "could not remove: DaemonSet gpudra/computedomain-daemon-u: 500 InternalError" in text
    assert "not waited for: pod(s) team/train-0 still hold a channel claim" in text


class Discovery:
    """A client that serves PodGroups or not (``serves`` is all scope_warning asks)."""

    def __init__(self, podgroups: bool) -> None:
        self.podgroups = podgroups

    async def serves(self, res: Resource) -> bool:
        return self.podgroups and res.plural == "podgroups"


def scoped_domain(scope: str | None) -> ComputeDomain:
    meta: dict[str, Any] = {
        "name": "train",
        "namespace": "team",
        "uid": "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0",
    }
    if scope is not None:
        meta["annotations"] = {CHANNEL_SCOPE_ANNOTATION: scope}
    return ComputeDomain.from_wire(
        {
            "apiVersion": "resource.nvidia.com/v1beta1",
            "kind": "ComputeDomain",
            "metadata": meta,
            "spec": {"channel": {"resourceClaimTemplate": {"name": "train-channel"}}},
        }
    )


@pytest.mark.parametrize(
    ("scope", "podgroups", "warned"),
    [("PodGroup", False, True), ("PodGroup", True, False), (None, False, False), ("Pod", False, False)],
)
async def test_only_a_podgroup_scoped_domain_on_a_cluster_without_podgroups_is_warned(
    scope: str | None, podgroups: bool, warned: bool
) -> None:
    warning = await scope_warning(cast(KubeClient, Discovery(podgroups)), scoped_domain(scope))
    assert (warning is not None) == warned
    if warning is not None:
        assert "only one pod could run" in warning and "DRAWorkloadResourceClaims" in warning
