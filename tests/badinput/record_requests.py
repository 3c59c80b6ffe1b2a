"""Record what kube-apiserver answers to every request of tests/requestkit.py into ``requests.yaml`` (not a test).

Starts its own control plane from the binaries ``make kubernetes`` built (etcd and kube-apiserver of the
default version, on loopback), installs the project's CRDs, sends every case as the admin, and writes the
answers with the server's ``/version``::

    PYTHONPATH=operator:tests python tests/badinput/record_requests.py
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

import yaml

from gpudra.cluster.kubernetes.binaries import find_binaries
from gpudra.cluster.kubernetes.controlplane import KubernetesControlPlane
from requestkit import CASES, RECORDS, real_session, send


async def main() -> int:
    with tempfile.TemporaryDirectory(prefix="gpudra-record-") as root:
        control_plane = KubernetesControlPlane(Path(root) / "cp", find_binaries())
        await control_plane.start()
        try:
            async with real_session(control_plane) as (http, version):
                records = {}
                for case in CASES:
                    records[case.name] = await send(http, case)
                    print(case.name, records[case.name], file=sys.stderr)
        finally:
            await control_plane.stop()
    document = {"server": version, "records": records}
    RECORDS.write_text(yaml.safe_dump(document, sort_keys=True, width=120, allow_unicode=True))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
