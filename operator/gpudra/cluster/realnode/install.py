"""gpudra installed on the real nodes as a user installs it: ``helm install`` of the project's chart
(charts/gpudra), with the images loaded on the nodes, the simulated GPUs, and the API server's address for its
pods (the cluster runs no service proxy).

The values are written to a file beside the cluster's other files (``helm-values.yaml``) so that a user can read
exactly what was installed, or run ``helm upgrade`` with them.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Collection
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

import gpudra
from gpudra.cluster.kubernetes.binaries import cache_dir
from gpudra.cluster.realnode.node import REAL_NODE_LABEL
from gpudra.cluster.realnode.runtime import NodeImages
from gpudra.cluster.realnode.sandbox import run
from gpudra.errors import ConfigurationError

RELEASE = "gpudra"
DRIVER_ROOT = "/run/nvidia/driver"
"""The simulated GPUs' driver root in each real node (sandbox.py binds the node's own there)."""


def repo_chart() -> Path:
    """charts/gpudra of the checkout gpudra runs from."""
    chart = Path(gpudra.__file__).resolve().parents[2] / "charts" / "gpudra"
    if not (chart / "Chart.yaml").is_file():
        raise ConfigurationError(
            f"--real-nodes installs gpudra with the project's Helm chart, and {chart} has none: "
            "run gpudra up from a checkout of the repository"
        )
    return chart


def find_helm() -> Path:
    """helm as ``make helm`` builds it (the newest in the cache), else the one on PATH."""
    built = sorted((cache_dir() / "helm").glob("v*/bin/helm"), key=lambda p: p.stat().st_mtime)
    if built and os.access(built[-1], os.X_OK):
        return built[-1]
    found = shutil.which("helm")
    if found is None:
        raise ConfigurationError(
            "--real-nodes installs gpudra with helm: run `make helm` first (or put helm on PATH)"
        )
    return Path(found)


def settings_env(settings: BaseModel, *, exclude: Collection[str] = ()) -> dict[str, str]:
    """``GPUDRA_<FIELD>`` for each field of ``settings`` that differs from its default (and is not in
    ``exclude``), as the chart's ``env`` values take them: JSON for lists and maps."""
    env = {}
    for name, spec in type(settings).model_fields.items():
        value = getattr(settings, name)
        if name in exclude or value is None or value == spec.get_default(call_default_factory=True):
            continue
        if isinstance(value, BaseModel):
            text = value.model_dump_json()
        elif isinstance(value, list | dict):
            text = json.dumps(value)
        elif isinstance(value, bool):
            text = str(value).lower()
        else:
            text = str(value)
        env[f"GPUDRA_{name.upper()}"] = text
    return env


def chart_values(
    images: NodeImages,
    *,
    api_host: str,
    api_port: int,
    controller_env: dict[str, str],
    agent_env: dict[str, str],
) -> dict[str, Any]:
    """The values ``gpudra up --real-nodes`` installs the chart with."""
    on_real_nodes = {REAL_NODE_LABEL: "true"}
    return {
        # the images are loaded on every node: nothing to pull
        "image": {"repository": images.gpudra_repository, "tag": images.gpudra_tag, "pullPolicy": "Never"},
        "kubernetesServiceHost": api_host,
        "kubernetesServicePort": str(api_port),
        "driverRoot": DRIVER_ROOT,
        "simulated": {"enabled": True},
        "controller": {"replicas": 1, "nodeSelector": on_real_nodes, "env": controller_env},
        "agent": {"nodeSelector": on_real_nodes, "env": agent_env},
    }


def write_values(values: dict[str, Any], path: Path) -> Path:
    path.write_text(yaml.safe_dump(values, sort_keys=False))
    return path


async def helm_install(helm: Path, kubeconfig: Path, chart: Path, namespace: str, values_file: Path) -> str:
    """``helm install`` of the chart in ``namespace`` (created), with the values of ``values_file``."""
    return await run(
        [
            str(helm),
            "install",
            RELEASE,
            str(chart),
            "--namespace",
            namespace,
            "--create-namespace",
            "--values",
            str(values_file),
            "--kubeconfig",
            str(kubeconfig),
        ]
    )
