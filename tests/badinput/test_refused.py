"""The bad-input corpus at apply: the embedded API server refuses what kube-apiserver refuses, with its words.

Every ``*.yaml`` here that a real kube-apiserver refused (``real-v1.<minor>.yaml``, recorded by ``record.py``
against Kubernetes v1.34.4 and v1.37.2) is sent to the embedded server emulating that minor as ``kubectl apply``
sends it (``fieldValidation=Strict``), and what kubectl would print from the answer must be what kubectl printed
against the real server of that version, word for word. The one exception is the text of CEL type-checker errors,
which comes from a different CEL implementation: there the field path, the position and the caret must still agree.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from _corpus import (
    ACCEPTED,
    CEL_WORDING,
    HERE,
    ISSUE_CASES,
    REAL,
    RECORDS,
    ROOT,
    collection_url,
    manifest,
)

from authkit import admin_headers, admin_session, served_over_https
from gpudra.cluster.apiserver import EmbeddedAPIServer


def kubectl_says(status: dict[str, Any], file: str, obj: dict[str, Any]) -> str:
    """What kubectl apply prints for a refused create (k8s.io/kubectl's error formatting)."""
    causes = (status.get("details") or {}).get("causes") or []
    if status.get("code") == 422 and causes:
        head = f'The {obj["kind"]} "{obj["metadata"]["name"]}" is invalid: '
        if len(causes) == 1:
            return head + f"{causes[0]['field']}: {causes[0]['message']}"
        return head + "\n" + "\n".join(f"* {c['field']}: {c['message']}" for c in causes)
    return f'Error from server ({status["reason"]}): error when creating "{file}": {status["message"]}'


def same_cel_error(got: str, want: str) -> bool:
    """Equal up to the checker's wording: the text before ``ERROR: <input>:L:C:`` and the caret lines agree."""
    position = re.compile(r"^(.*ERROR: <input>:\d+:\d+: ).*?(\n \|.*)$", re.S)
    a, b = position.match(got), position.match(want)
    return a is not None and b is not None and a.groups() == b.groups()


async def install_crds(http: aiohttp.ClientSession) -> None:
    for path in sorted((ROOT / "crds").glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            if document and document.get("kind") == "CustomResourceDefinition":
                async with http.post(
                    "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=document
                ) as rsp:
                    assert rsp.status == 201, await rsp.text()


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[tuple[EmbeddedAPIServer, aiohttp.ClientSession]]:
    """Over HTTPS, as ``gpudra up`` serves it (kubectl sends its token over TLS only)."""
    apiserver = served_over_https(tmp_path / "pki")
    await apiserver.start()
    async with admin_session(apiserver) as http:
        await install_crds(http)
        yield apiserver, http
    await apiserver.stop()


def test_corpus_is_large_enough_and_recorded() -> None:
    """At least 60 manifests, each recorded against a real API server of the default emulated version (v1.37),
    and those that were in the corpus before it grew past 40 against the oldest one (v1.34) too."""
    files = {p.stem for p in HERE.glob("*.yaml") if not p.stem.startswith("real-")} - {"requests"}
    assert len(files) >= 60
    assert sorted(RECORDS) == [34, 37]
    assert files == set(RECORDS[37]["records"])
    assert len(RECORDS[34]["records"]) >= 40 and set(RECORDS[34]["records"]) <= files
    for minor, record in RECORDS.items():
        assert record["server"].startswith(f"v1.{minor}.")


@pytest.mark.parametrize(
    ("minor", "name"),
    [
        (minor, name)
        for minor, record in sorted(RECORDS.items())
        for name in sorted(record["records"])
        if record["records"][name]["exit"]
    ],
)
async def test_refused_as_kube_apiserver_refuses(minor: int, name: str) -> None:
    apiserver = EmbeddedAPIServer(minor=minor)
    url = await apiserver.start()
    try:
        async with aiohttp.ClientSession(base_url=url, headers=admin_headers(apiserver)) as http:
            await install_crds(http)
            obj = manifest(name)
            async with http.post(f"{collection_url(obj)}?fieldValidation=Strict", json=obj) as rsp:
                status = await rsp.json()
                assert rsp.status in (400, 422), status
    finally:
        await apiserver.stop()
    got, want = kubectl_says(status, f"{name}.yaml", obj), RECORDS[minor]["records"][name]["kubectl"]
    if name in CEL_WORDING:
        assert same_cel_error(got, want), f"{got}\n!=\n{want}"
    else:
        assert got == want


@pytest.mark.parametrize("name", ACCEPTED)
async def test_accepted_at_apply_as_kube_apiserver_accepts(
    name: str, server: tuple[EmbeddedAPIServer, aiohttp.ClientSession]
) -> None:
    """What only a controller can know is no reason to refuse: these pass the API server (their Events are
    checked in test_events.py)."""
    _, http = server
    obj = manifest(name)
    async with http.post(f"{collection_url(obj)}?fieldValidation=Strict", json=obj) as rsp:
        assert rsp.status == 201, await rsp.text()


async def test_warn_mode_stores_without_the_unknown_field_and_warns(
    server: tuple[EmbeddedAPIServer, aiohttp.ClientSession],
) -> None:
    """fieldValidation=Warn: created, the unknown field dropped, one Warning header per field (299, quoted)."""
    _, http = server
    obj = manifest("claim-unknown-field")
    async with http.post(f"{collection_url(obj)}?fieldValidation=Warn", json=obj) as rsp:
        assert rsp.status == 201
        assert rsp.headers.getall("Warning") == [
            '299 - "unknown field \\"spec.devices.requests[0].exactly.cout\\""'
        ]
        stored = await rsp.json()
    assert stored["spec"]["devices"]["requests"][0]["exactly"] == {
        "deviceClassName": "gpu.nvidia.com",
        "allocationMode": "ExactCount",
        "count": 1,
    }


# ---- the real kubectl ----------------------------------------------------------------------------------------
KUBECTL = shutil.which("kubectl")


async def kubectl(kubeconfig: Path, *args: str) -> tuple[int, str]:
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    proc = await asyncio.create_subprocess_exec(
        KUBECTL or "kubectl", *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env=env
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode or 0, out.decode()


@pytest.mark.e2e
@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not on PATH")
@pytest.mark.parametrize("name", ISSUE_CASES)
async def test_kubectl_apply_prints_what_it_prints_against_kubernetes(
    name: str, server: tuple[EmbeddedAPIServer, aiohttp.ClientSession], tmp_path: Path
) -> None:
    """The issue's claims, the ComputeDomain with numNodes -3 and the slice with a boolean string: the real kubectl
    exits 1 and prints the field path, exactly as it does against kube-apiserver."""
    apiserver, _ = server
    kubeconfig = tmp_path / "kubeconfig"
    apiserver.write_kubeconfig(kubeconfig)
    shutil.copy(HERE / f"{name}.yaml", tmp_path / f"{name}.yaml")
    code, out = await kubectl(kubeconfig, "apply", "-f", str(tmp_path / f"{name}.yaml"))
    assert code == 1
    assert (
        out.strip().replace(str(tmp_path / f"{name}.yaml"), f"{name}.yaml")
        == REAL["records"][name]["kubectl"]
    )


@pytest.mark.e2e
@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not on PATH")
async def test_kubectl_validate_warn_prints_the_warning(
    server: tuple[EmbeddedAPIServer, aiohttp.ClientSession], tmp_path: Path
) -> None:
    apiserver, _ = server
    kubeconfig = tmp_path / "kubeconfig"
    apiserver.write_kubeconfig(kubeconfig)
    code, out = await kubectl(
        kubeconfig, "apply", "--validate=warn", "-f", str(HERE / "claim-unknown-field.yaml")
    )
    assert code == 0
    assert 'Warning: unknown field "spec.devices.requests[0].exactly.cout"' in out
    assert "resourceclaim.resource.k8s.io/bad-field created" in out


# ---- updates -------------------------------------------------------------------------------------------------
IMMUTABLE_DOMAIN = {
    "apiVersion": "resource.nvidia.com/v1beta1",
    "kind": "ComputeDomain",
    "metadata": {"name": "imm"},
    "spec": {"numNodes": 2, "channel": {"resourceClaimTemplate": {"name": "imm-channel"}}},
}
IMMUTABLE_CLAIM = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaim",
    "metadata": {"name": "imm"},
    "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}},
}


async def test_immutable_specs_are_refused_on_update(
    server: tuple[EmbeddedAPIServer, aiohttp.ClientSession],
) -> None:
    """A ComputeDomain's spec (its CRD's transition rule self == oldSelf) and a claim's spec cannot change; what
    kube-apiserver v1.37.2 printed is quoted (v1.34.4 showed the values: ``"object"``, the claim's Go struct)."""
    _, http = server
    merge = {"Content-Type": "application/merge-patch+json"}
    for obj in (IMMUTABLE_DOMAIN, IMMUTABLE_CLAIM):
        async with http.post(collection_url(obj), json=obj) as rsp:
            assert rsp.status == 201, await rsp.text()
    async with http.patch(
        f"{collection_url(IMMUTABLE_DOMAIN)}/imm", json={"spec": {"numNodes": 3}}, headers=merge
    ) as rsp:
        status = await rsp.json()
    assert kubectl_says(status, "", IMMUTABLE_DOMAIN) == (
        'The ComputeDomain "imm" is invalid: spec: Invalid value: A computeDomain.spec is immutable'
    )
    renamed = {
        "spec": {
            "devices": {"requests": [{"name": "gpu2", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}
        }
    }
    async with http.patch(f"{collection_url(IMMUTABLE_CLAIM)}/imm", json=renamed, headers=merge) as rsp:
        status = await rsp.json()
    said = kubectl_says(status, "", IMMUTABLE_CLAIM)
    assert said == 'The ResourceClaim "imm" is invalid: spec: Invalid value: null: field is immutable'
    async with http.patch(
        f"{collection_url(IMMUTABLE_DOMAIN)}/imm", json={"metadata": {"labels": {"a": "b"}}}, headers=merge
    ) as rsp:
        assert rsp.status == 200  # the rule holds: the spec did not change
