"""The agent runs on every GPU node: what ``gpudra agent --backend nvml`` imports is what each node pays for in
memory and start-up. It must load nothing of ``bench.agent.FORBIDDEN``: the simulator, kopf, the embedded cluster,
kubernetes_asyncio's generated models, rich and pygments, aiohttp, grpc (grpcio)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from bench.agent import FORBIDDEN

# What `gpudra agent` imports before it runs: the command line, the agent command's own imports, and the NVML
# backend with its binding.
AGENT_IMPORTS = """
import json, sys
import gpudra.cli
from gpudra.agent.main import make_backend, run_agent
from gpudra.hardware.nvml.backend import load_binding
load_binding()
print(json.dumps(sorted(sys.modules)))
"""


def _agent_modules() -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", AGENT_IMPORTS],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        check=True,
    )
    modules: list[str] = json.loads(done.stdout)
    return modules


def test_the_real_backend_agent_imports_nothing_of_the_simulator_kopf_the_cluster_generated_models_or_rich() -> (
    None
):
    modules = _agent_modules()
    loaded = sorted(m for m in modules if any(m == f or m.startswith(f + ".") for f in FORBIDDEN))
    assert loaded == []
    assert "gpudra.agent.runtime" in modules and "pynvml" in modules  # the check saw the agent


def test_the_compute_domain_driver_is_imported_only_when_the_agent_builds_it() -> None:
    """A node whose ``compute_domains`` is ``disabled`` never loads the driver (about 1 MiB, 17 modules); with
    ``auto`` or ``enabled`` the runtime imports it when it builds it."""
    modules = _agent_modules()
    assert [m for m in modules if m.startswith(("gpudra.agent.computedomain", "gpudra.computedomain"))] == []
