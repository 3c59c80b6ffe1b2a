"""A pod copied from a real cluster passes the copy's admission as it passed the source's: the ServiceAccount and
PriorityClass it names are created first, and what admission sets again is left out of the copied pod."""

from __future__ import annotations

from typing import Any

from gpudra.cluster.apiserver import EmbeddedAPIServer
from gpudra.cluster.sim.podadmission import admissible, priority_classes, service_accounts

TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount"


def copied_pod() -> dict[str, Any]:
    """As a real cluster's admission left it: account, class, priority, token volume and mount."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "train", "namespace": "ml"},
        "spec": {
            "serviceAccountName": "trainer",
            "serviceAccount": "trainer",
            "priorityClassName": "high",
            "priority": 1000,
            "preemptionPolicy": "Never",
            "containers": [
                {
                    "name": "main",
                    "image": "cuda",
                    "volumeMounts": [{"name": "kube-api-access-x7k2p", "mountPath": TOKEN, "readOnly": True}],
                }
            ],
            "volumes": [{"name": "kube-api-access-x7k2p", "projected": {"sources": []}}],
        },
    }


async def test_the_copied_pod_is_admitted_with_its_account_and_class() -> None:
    pod = copied_pod()
    server = EmbeddedAPIServer()
    await server.start()
    try:
        database = server.database
        namespaces = database.registry.get("", "v1", "namespaces")
        accounts = database.registry.get("", "v1", "serviceaccounts")
        classes = database.registry.get("scheduling.k8s.io", "v1", "priorityclasses")
        pods = database.registry.get("", "v1", "pods")
        assert namespaces and accounts and classes and pods
        database.create(namespaces, "", {"metadata": {"name": "ml"}})
        for account in service_accounts([pod]):
            database.create(accounts, "ml", account)
        for priority_class in priority_classes([pod]):
            database.create(classes, "", priority_class)
        stored = database.create(pods, "ml", admissible(pod)).obj
    finally:
        await server.stop()
    spec = stored["spec"]
    assert (spec["serviceAccountName"], spec["priorityClassName"]) == ("trainer", "high")
    assert (spec["priority"], spec["preemptionPolicy"]) == (1000, "Never")
    (volume,) = spec["volumes"]  # the copy's own token volume, not the source's as well
    assert volume["name"].startswith("kube-api-access-") and volume["name"] != "kube-api-access-x7k2p"
    assert [m["name"] for m in spec["containers"][0]["volumeMounts"]] == [volume["name"]]
