"""Record what a real API server answers to every manifest of the bad-input corpus (not a test).

Run against a real cluster with the project's CRDs applied (``kubectl apply -f crds/``), for example the
real-control-plane tier of the same minor version as the embedded server's ``/version``::

    KUBECONFIG=... python tests/badinput/record.py [NAME ...]

For each ``*.yaml`` here (or each NAME given) it runs ``kubectl apply -f`` (kubectl's default:
``fieldValidation=Strict``) and writes what kubectl printed and its exit code to ``real-v1.<minor>.yaml``, with the
server's ``/version``; NAMEs are merged into the records already there. An object the real server accepts is
deleted again. ``test_refused.py`` compares the embedded server's answers with these records.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

HERE = Path(__file__).parent


def main(names: list[str]) -> int:
    version = json.loads(
        subprocess.run(["kubectl", "get", "--raw", "/version"], capture_output=True, check=True).stdout
    )
    records: dict[str, dict[str, object]] = {}
    paths = [HERE / f"{name}.yaml" for name in names] or sorted(HERE.glob("*.yaml"))
    for path in paths:
        if path.name.startswith("real-") or path.name in ("expected.yaml", "requests.yaml"):
            continue
        done = subprocess.run(["kubectl", "apply", "-f", str(path)], capture_output=True, text=True)
        output = (done.stdout + done.stderr).replace(str(path), path.name).strip()
        records[path.stem] = {"exit": done.returncode, "kubectl": output}
        if done.returncode == 0:
            subprocess.run(["kubectl", "delete", "-f", str(path), "--wait=false"], capture_output=True)
        print(path.stem, done.returncode, output[:160], file=sys.stderr)
    document = {"server": version["gitVersion"], "records": records}
    target = HERE / f"real-v{version['major']}.{version['minor']}.yaml"
    if names and target.exists():
        document = yaml.safe_load(target.read_text())
        document["records"].update(records)
    target.write_text(yaml.safe_dump(document, sort_keys=True, width=200, allow_unicode=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
