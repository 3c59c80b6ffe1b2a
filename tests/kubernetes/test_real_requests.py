"""The hostile requests of tests/requestkit.py, sent to kube-apiserver: it still answers each as
tests/badinput/requests.yaml records (which the embedded server is held to, tests/badinput/test_requests.py).
When a new Kubernetes version answers otherwise, record again (tests/badinput/record_requests.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpudra.cluster.kubernetes.binaries import find_binaries, kubernetes_version
from gpudra.cluster.kubernetes.controlplane import KubernetesControlPlane
from requestkit import CASES, real_session, recorded, send


@pytest.mark.timeout(300)
async def test_kube_apiserver_answers_as_recorded(tmp_path: Path) -> None:
    records = recorded()
    if f"v{kubernetes_version()}" != records["server"]:
        pytest.skip(f"the answers are recorded from kube-apiserver {records['server']} (record_requests.py)")
    control_plane = KubernetesControlPlane(tmp_path / "cp", find_binaries())
    await control_plane.start()
    try:
        async with real_session(control_plane) as (http, version):
            assert version == records["server"]
            answers = {case.name: await send(http, case) for case in CASES}
    finally:
        await control_plane.stop()
    assert answers == records["records"]
