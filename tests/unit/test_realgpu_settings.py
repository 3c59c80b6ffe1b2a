"""The agent of the real-GPU check (hack/realgpu) runs with settings that cannot change a shared machine's GPUs,
whatever GPUDRA_* variables the caller's environment holds."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpudra.realgpu.rig import Options, Rig, process_environment

SAFE = {
    "GPUDRA_MIG_POLICY": "Static",
    "GPUDRA_PASSTHROUGH_SUPPORT": "false",
    "GPUDRA_SHARED_GPU_REPLICAS": "0",
    "GPUDRA_COMPUTE_DOMAINS": "disabled",
}


def test_settings_that_could_change_a_gpu_are_pinned_against_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, unsafe in {
        "GPUDRA_MIG_POLICY": "Dynamic",
        "GPUDRA_PASSTHROUGH_SUPPORT": "true",
        "GPUDRA_SHARED_GPU_REPLICAS": "4",
        "GPUDRA_COMPUTE_DOMAINS": "enabled",
    }.items():
        monkeypatch.setenv(name, unsafe)
    options = Options(
        backend="nvml",
        simulated_profile="hgx-h200",
        node_name="n",
        driver_name="gpu.nvidia.com",
        driver_root=None,
        health_seconds=1,
        allow_mig_on=False,
        out=tmp_path,
    )
    rig = Rig(options)
    try:
        env = process_environment(rig.settings(metrics_port=1234))
    finally:
        rig.work.rmdir()

    assert {name: env[name] for name in SAFE} == SAFE
    assert env["GPUDRA_DRIVER_ROOT"] == "/"
    assert env["GPUDRA_CDI_DIR"].startswith(str(rig.work))  # never the host's /var/run/cdi
    assert env["GPUDRA_REGISTRY_DIR"].startswith(str(rig.work))  # never the kubelet's plugins_registry
