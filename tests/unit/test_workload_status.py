"""What the stand-in workload controllers write and what the embedded API server prints of it, as
kube-controller-manager and kube-apiserver do."""

from __future__ import annotations

from typing import Any

from gpudra.cluster.apiserver.workloadtable import job_cells, selector_text
from gpudra.cluster.controlplane import jobstatus, rollout
from gpudra.cluster.controlplane.jobstatus import job_plan
from gpudra.cluster.controlplane.rollout import deployment_status, max_unavailable, replicaset_status

NOW = "2026-11-29T02:00:00Z"


def test_selectors_are_written_as_kubernetes_writes_them() -> None:
    selector = {
        "matchLabels": {"tier": "web", "app": "x"},
        "matchExpressions": [
            {"key": "zone", "operator": "In", "values": ["b", "a"]},
            {"key": "gpu", "operator": "Exists"},
            {"key": "old", "operator": "DoesNotExist"},
        ],
    }
    assert selector_text(selector) == "app=x,gpu,!old,tier=web,zone in (a,b)"
    assert selector_text({}) == "<none>"


def pod(phase: str, ready: bool = False) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": phase}
    if ready:
        status["conditions"] = [{"type": "Ready", "status": "True"}]
    return {"metadata": {"name": "p"}, "status": status}


def job(completions: int | None, parallelism: int | None = None, **status: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"template": {}}
    if completions is not None:
        spec["completions"] = completions
    if parallelism is not None:
        spec["parallelism"] = parallelism
    return {"metadata": {"name": "j", "uid": "u"}, "spec": spec, "status": status}


def test_a_job_keeps_its_pods_going_until_enough_succeeded() -> None:
    plan = job_plan(job(3, 2), [pod("Succeeded"), pod("Running", ready=True)], NOW)
    assert plan.create == 1
    assert plan.status["active"] == 2 and plan.status["ready"] == 1 and plan.status["succeeded"] == 1
    assert "conditions" not in plan.status

    done = job_plan(job(2), [pod("Succeeded"), pod("Succeeded")], NOW)
    assert done.create == 0 and done.status["completionTime"] == NOW
    assert [c["type"] for c in done.status["conditions"]] == ["SuccessCriteriaMet", "Complete"]
    assert job_cells({**job(2), "status": done.status}, "5s", lambda s: f"{s:.0f}s")[:3] == [
        "Complete",
        "2/2",
        "0s",
    ]


def test_a_job_fails_past_its_backoff_limit() -> None:
    plan = job_plan({**job(1), "spec": {"backoffLimit": 1}}, [pod("Failed"), pod("Failed")], NOW)
    assert plan.create == 0
    assert plan.status["conditions"][-1]["reason"] == "BackoffLimitExceeded"


def test_the_completions_column_names_parallel_work_queues() -> None:
    assert job_cells(job(None, 3), "1s", str)[1] == "0/1 of 3"
    assert job_cells(job(None), "1s", str)[1] == "0/1"


def deployment(replicas: int, status: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": "d", "generation": 2},
        "spec": {"replicas": replicas},
        "status": status or {},
    }


def replicaset(name: str, replicas: int, ready: int) -> dict[str, Any]:
    pods = [pod("Running", ready=i < ready) for i in range(replicas)]
    rs = {"metadata": {"name": name, "generation": 1}, "spec": {"replicas": replicas}}
    return {**rs, "status": replicaset_status(rs, pods)}


def test_a_deployment_is_rolled_out_when_the_new_replicaset_is_available() -> None:
    new = replicaset("d-new", 2, 1)
    status = deployment_status(deployment(2), new, [new], NOW)
    assert status["observedGeneration"] == 2
    assert (status["updatedReplicas"], status["availableReplicas"], status["unavailableReplicas"]) == (
        2,
        1,
        1,
    )
    assert [c["status"] for c in status["conditions"]] == ["False", "True"]
    assert status["conditions"][1]["reason"] == "ReplicaSetUpdated"

    new = replicaset("d-new", 2, 2)
    status = deployment_status(deployment(2, status), new, [new], "2026-11-29T02:01:00Z")
    assert "unavailableReplicas" not in status
    available, progressing = status["conditions"]
    assert (available["reason"], progressing["reason"]) == (
        "MinimumReplicasAvailable",
        "NewReplicaSetAvailable",
    )
    assert progressing["lastTransitionTime"] == NOW  # still True: only its reason moved


def test_max_unavailable_rounds_down_and_is_one_when_nothing_may_surge() -> None:
    assert max_unavailable(deployment(8)) == 2
    surge_none = deployment(2)
    surge_none["spec"]["strategy"] = {"rollingUpdate": {"maxSurge": 0, "maxUnavailable": 0}}
    assert max_unavailable(surge_none) == 1


def test_fields_the_stand_ins_ignore_are_named() -> None:
    assert jobstatus.unmodelled({"spec": {"completionMode": "Indexed", "suspend": True}}) == [
        "spec.completionMode=Indexed",
        "spec.suspend",
    ]
    assert jobstatus.unmodelled(job(1)) == []
    assert rollout.unmodelled({"spec": {"paused": True, "minReadySeconds": 5}}) == [
        "spec.paused",
        "spec.minReadySeconds",
    ]
