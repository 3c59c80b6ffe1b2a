"""The client side of the simulator endpoint: ``gpudra sim fault`` finds the running ``gpudra up`` by the
``simulator.json`` beside its kubeconfig and sends it the fault."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiohttp

from gpudra.cluster.sim.endpoint import ENDPOINT_FILE, FAULTS_PATH
from gpudra.errors import ConfigurationError


def endpoint_of(kubeconfig: Path) -> tuple[str, str]:
    """(URL, token) of the ``gpudra up`` that wrote ``kubeconfig``."""
    path = kubeconfig.parent / ENDPOINT_FILE
    try:
        data = json.loads(path.read_text())
        return str(data["url"]), str(data["token"])
    except FileNotFoundError:
        raise ConfigurationError(
            f"no running gpudra up wrote {path}: start `gpudra up`, or pass the --kubeconfig it printed"
        ) from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigurationError(f"cannot read the simulator endpoint from {path}: {exc}") from exc


async def send_fault(kubeconfig: Path, fault: dict[str, Any]) -> tuple[str, str]:
    """Send the fault to the running ``gpudra up``; (phase, message) of its answer."""
    url, token = endpoint_of(kubeconfig)
    timeout = aiohttp.ClientTimeout(total=30)
    try:
        async with (
            aiohttp.ClientSession(timeout=timeout, trust_env=False) as session,
            session.post(
                url + FAULTS_PATH, json=fault, headers={"Authorization": f"Bearer {token}"}
            ) as reply,
        ):
            answer = await reply.json(content_type=None)
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        raise ConfigurationError(
            f"the gpudra up that wrote {kubeconfig.parent / ENDPOINT_FILE} does not answer at {url} ({exc}); "
            "is it still running?"
        ) from exc
    return str(answer.get("phase", "")), str(answer.get("message", ""))
