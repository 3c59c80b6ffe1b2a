"""Hostile requests, below the level of a manifest: what a body's bytes, its media type, its size or a query can
do to an API server. ``tests/badinput/requests.yaml`` holds what kube-apiserver answered to each (recorded by
``tests/badinput/record_requests.py``); tests/badinput/test_requests.py sends each to the embedded server and
tests/kubernetes/test_real_requests.py to kube-apiserver, and both compare with the recording.

A case's body is built when it is sent (some are megabytes). Cases that create an object name it uniquely, so the
order they run in does not matter; ``SETUP`` is created first (the target of the PATCH cases).
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import re
import ssl
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from gpudra.cluster.kubernetes.controlplane import KubernetesControlPlane
from gpudra.testing import eventually

ROOT = Path(__file__).parent.parent
RECORDS = ROOT / "tests" / "badinput" / "requests.yaml"
JSON = "application/json"
MIB = 1024 * 1024
NS = "/api/v1/namespaces/default"
CLAIMS = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims"
DOMAINS = "/apis/resource.nvidia.com/v1beta1/namespaces/default/computedomains"


@dataclass(frozen=True)
class Case:
    name: str
    method: str
    path: str
    body: Callable[[], bytes] = lambda: b""
    ctype: str | None = JSON
    query: str = ""

    @property
    def url(self) -> str:
        return self.path + (f"?{self.query}" if self.query else "")


def config_map(name: str, extra: str = "") -> bytes:
    return ('{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"' + name + '"}' + extra + "}").encode()


def claim(name: str, parameters: str) -> bytes:
    return (
        '{"apiVersion":"resource.k8s.io/v1","kind":"ResourceClaim","metadata":{"name":"' + name + '"},'
        '"spec":{"devices":{"requests":[{"name":"gpu","exactly":{"deviceClassName":"gpu.nvidia.com"}}],'
        '"config":[{"opaque":{"driver":"gpu.nvidia.com","parameters":' + parameters + "}}]}}}"
    ).encode()


def domain(api_version: str, kind: str, name: str) -> bytes:
    return json.dumps(
        {
            "apiVersion": api_version,
            "kind": kind,
            "metadata": {"name": name},
            "spec": {"numNodes": 1, "channel": {"resourceClaimTemplate": {"name": f"{name}-channel"}}},
        }
    ).encode()


def arrays(depth: int) -> str:
    return "[" * depth + "]" * depth


def objects(depth: int) -> str:
    return '{"a":' * depth + "1" + "}" * depth


def yaml_config_map(name: str, rest: str) -> bytes:
    return f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n{rest}".encode()


ALIAS_BOMB = yaml_config_map(
    "bomb",
    'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    + "".join(f"{b}: &{b} [{','.join([f'*{a}'] * 9)}]\n" for a, b in zip("abcdef", "bcdefg", strict=True)),
)
"""464 bytes; 53 MB of JSON once every alias is expanded."""


def _resource(path: str) -> str:
    """``events.events.k8s.io`` for ``/apis/events.k8s.io/v1/events``, ``pods`` for ``/api/v1/pods``."""
    parts = path.split("/")
    return parts[-1] if parts[1] == "api" else f"{parts[-1]}.{parts[2]}"


SETUP = Case("setup", "POST", NS + "/configmaps", lambda: config_map("target"))

CASES = [
    # -- nesting
    Case(
        "json-nested-1000-strict",
        "POST",
        NS + "/configmaps",
        lambda: config_map("d1", ',"x":' + arrays(1000)),
        query="fieldValidation=Strict",
    ),
    Case(
        "json-nested-1000-ignore",
        "POST",
        NS + "/configmaps",
        lambda: config_map("d2", ',"x":' + arrays(1000)),
        query="fieldValidation=Ignore",
    ),
    Case("json-nested-10001", "POST", NS + "/configmaps", lambda: config_map("d3", ',"x":' + arrays(10001))),
    Case("json-top-level-nested-10001", "POST", NS + "/configmaps", lambda: arrays(10001).encode()),
    Case("claim-parameters-nested-150", "POST", CLAIMS, lambda: claim("p150", objects(150))),
    Case("claim-parameters-nested-1000", "POST", CLAIMS, lambda: claim("p1000", objects(1000))),
    Case("claim-parameters-nested-10001", "POST", CLAIMS, lambda: claim("p10001", objects(10001))),
    Case(
        "yaml-nested-10001",
        "POST",
        NS + "/configmaps",
        lambda: yaml_config_map("y1", "x: " + arrays(10001)),
        ctype="application/yaml",
    ),
    Case(
        "yaml-nested-5000",
        "POST",
        NS + "/configmaps",
        lambda: yaml_config_map("y2", "x: " + arrays(5000)),
        ctype="application/yaml",
    ),
    Case(
        "merge-patch-nested-10001",
        "PATCH",
        NS + "/configmaps/target",
        lambda: ('{"x":' + arrays(10001) + "}").encode(),
        ctype="application/merge-patch+json",
    ),
    # -- Unicode
    Case("name-lone-surrogate", "POST", NS + "/configmaps", lambda: config_map("a\\udcff")),
    Case(
        "data-lone-surrogate",
        "POST",
        NS + "/configmaps",
        lambda: config_map("u1", ',"data":{"k":"a\\udcffb"}'),
    ),
    Case(
        "data-invalid-utf8",
        "POST",
        NS + "/configmaps",
        lambda: config_map("u2", ',"data":{"k":"a\xffb"}').replace(b"\xc3\xbf", b"\xff"),
    ),
    Case(
        "yaml-lone-surrogate",
        "POST",
        NS + "/configmaps",
        lambda: yaml_config_map("u3", 'data:\n  a: "x\\udcffy"\n'),
        ctype="application/yaml",
    ),
    # -- YAML read as Go reads it (go-yaml, then JSON), and what JSON cannot hold
    *(
        Case(
            f"yaml-{name}",
            "POST",
            NS + "/configmaps",
            functools.partial(yaml_config_map, name, rest),
            ctype="application/yaml",
            query="fieldValidation=Strict",
        )
        for name, rest in (
            ("timestamp", "data: {a: 2020-01-01}\n"),
            ("binary", "data: {a: !!binary aGVsbG8=}\n"),
            ("set", "x: !!set {a, b}\n"),
            ("exponent", "data: {a: 1e3}\n"),
            ("infinity", "data: {a: .inf}\n"),
            ("null-key", "x: {null: 1}\n"),
            ("key-types", "data: {1: a, 1.5: b, true: c}\n"),
        )
    ),
    Case("json-nan", "POST", NS + "/configmaps", lambda: config_map("nan", ',"x":NaN')),
    Case("json-minus-infinity", "POST", NS + "/configmaps", lambda: config_map("inf", ',"x":-Infinity')),
    # -- sizes
    Case(
        "body-over-3mib",
        "POST",
        NS + "/configmaps",
        lambda: config_map("s1", ',"data":{"k":"%s"}' % ("x" * (3 * MIB + 10))),
    ),
    Case(
        "patch-over-3mib",
        "PATCH",
        NS + "/configmaps/target",
        lambda: ('{"data":{"a":"%s"}}' % ("x" * (3 * MIB))).encode(),
        ctype="application/merge-patch+json",
    ),
    Case(
        "configmap-data-2mib",
        "POST",
        NS + "/configmaps",
        lambda: config_map("s2", ',"data":{"k":"%s"}' % ("x" * (2 * MIB))),
    ),
    Case(
        "configmap-binary-data-2mib",
        "POST",
        NS + "/configmaps",
        lambda: config_map("s3", ',"binaryData":{"k":"%s"}' % ("eHh4" * (700 * 1024))),
    ),
    Case(
        "configmap-data-1mib",
        "POST",
        NS + "/configmaps",
        lambda: config_map("s4", ',"data":{"ab":"%s"}' % ("x" * (MIB - 1))),
    ),
    Case(
        "secret-string-data-2mib",
        "POST",
        NS + "/secrets",
        lambda: (
            '{"apiVersion":"v1","kind":"Secret","metadata":{"name":"s5"},"stringData":{"a":"%s"}}'
            % ("x" * (2 * MIB))
        ).encode(),
    ),
    Case(
        "annotations-300kib",
        "POST",
        NS + "/configmaps",
        lambda: (
            '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"s6","annotations":{"a":"%s"}}}'
            % ("x" * (300 * 1024))
        ).encode(),
    ),
    # -- YAML aliases
    Case("yaml-alias-bomb", "POST", NS + "/configmaps", lambda: ALIAS_BOMB, ctype="application/yaml"),
    Case(
        "yaml-alias-small",
        "POST",
        NS + "/configmaps",
        lambda: yaml_config_map("alias", "data:\n  a: &v hello\n  b: *v\n"),
        ctype="application/yaml",
    ),
    # -- media types
    Case("post-text-plain", "POST", NS + "/configmaps", lambda: config_map("m1"), ctype="text/plain"),
    Case("post-no-content-type", "POST", NS + "/configmaps", lambda: config_map("m2"), ctype=None),
    Case(
        "post-json-charset",
        "POST",
        NS + "/configmaps",
        lambda: config_map("m3"),
        ctype="application/json; charset=utf-8",
    ),
    Case(
        "post-json-patch-type",
        "POST",
        NS + "/configmaps",
        lambda: config_map("m4"),
        ctype="application/json-patch+json",
    ),
    Case("post-text-yaml", "POST", NS + "/configmaps", lambda: yaml_config_map("m5", ""), ctype="text/yaml"),
    Case(
        "put-text-plain", "PUT", NS + "/configmaps/target", lambda: config_map("target"), ctype="text/plain"
    ),
    Case("patch-json", "PATCH", NS + "/configmaps/target", lambda: b'{"data":{"a":"b"}}'),
    Case(
        "patch-text-plain-missing-object",
        "PATCH",
        NS + "/configmaps/none",
        lambda: b'{"data":{"a":"b"}}',
        ctype="text/plain",
    ),
    Case(
        "patch-strategic-custom",
        "PATCH",
        DOMAINS + "/none",
        lambda: b'{"metadata":{"labels":{"a":"b"}}}',
        ctype="application/strategic-merge-patch+json",
    ),
    # -- apiVersion and kind against the path
    Case(
        "claim-api-version-v9",
        "POST",
        CLAIMS,
        lambda: (
            b'{"apiVersion":"resource.k8s.io/v9","kind":"ResourceClaim","metadata":{"name":"v9"},"spec":{}}'
        ),
    ),
    Case(
        "claim-api-version-v1beta1",
        "POST",
        CLAIMS,
        lambda: (
            b'{"apiVersion":"resource.k8s.io/v1beta1","kind":"ResourceClaim","metadata":{"name":"b1"},'
            b'"spec":{"devices":{"requests":[{"name":"gpu","deviceClassName":"gpu.nvidia.com"}]}}}'
        ),
    ),
    Case(
        "claim-api-version-other-group",
        "POST",
        CLAIMS,
        lambda: b'{"apiVersion":"apps/v1","kind":"ResourceClaim","metadata":{"name":"apps"},"spec":{}}',
    ),
    Case(
        "claim-kind-device-class",
        "POST",
        CLAIMS,
        lambda: (
            b'{"apiVersion":"resource.k8s.io/v1","kind":"DeviceClass","metadata":{"name":"k1"},"spec":{}}'
        ),
    ),
    Case(
        "claim-kind-unknown",
        "POST",
        CLAIMS,
        lambda: b'{"apiVersion":"resource.k8s.io/v1","kind":"Foo","metadata":{"name":"k2"}}',
    ),
    Case(
        "claim-kind-missing",
        "POST",
        CLAIMS,
        lambda: b'{"apiVersion":"resource.k8s.io/v1","metadata":{"name":"k3"},"spec":{}}',
    ),
    Case(
        "claim-api-version-missing",
        "POST",
        CLAIMS,
        lambda: b'{"kind":"ResourceClaim","metadata":{"name":"k4"},"spec":{}}',
    ),
    Case(
        "configmap-api-version-v2",
        "POST",
        NS + "/configmaps",
        lambda: b'{"apiVersion":"v2","kind":"ConfigMap","metadata":{"name":"k5"}}',
    ),
    Case(
        "domain-api-version-v9",
        "POST",
        DOMAINS,
        lambda: domain("resource.nvidia.com/v9", "ComputeDomain", "k6"),
    ),
    Case("domain-api-version-other-group", "POST", DOMAINS, lambda: domain("apps/v1", "ComputeDomain", "k7")),
    Case("domain-kind-unknown", "POST", DOMAINS, lambda: domain("resource.nvidia.com/v1beta1", "Foo", "k8")),
    Case(
        "namespace-api-version-bool",
        "POST",
        "/api/v1/namespaces",
        lambda: b'{"apiVersion": true, "kind": "Namespace", "metadata": {"name": "t1"}}',
    ),
    Case(
        "domain-kind-array",
        "POST",
        DOMAINS,
        lambda: b'{"apiVersion": "resource.nvidia.com/v1beta1", "kind": [], "metadata": {"name": "t2"}}',
    ),
    Case("body-an-array", "POST", "/api/v1/namespaces", lambda: b"[1,2]"),
    Case("body-a-string", "POST", CLAIMS, lambda: b'"x"'),
    Case(
        "unknown-fields-odd-names-warn",
        "POST",
        NS + "/configmaps",
        lambda: config_map("w1", ',"\\u001f":[],"a\\tb":1,"\\u00e9":1,"x\\"y":1'),
        query="fieldValidation=Warn",
    ),
    # -- duplicate keys
    Case(
        "duplicate-key-strict",
        "POST",
        NS + "/configmaps",
        lambda: config_map("k9", ',"data":{"a":"1","a":"2"}'),
        query="fieldValidation=Strict",
    ),
    Case(
        "duplicate-key-warn",
        "POST",
        NS + "/configmaps",
        lambda: config_map("k10", ',"data":{"a":"1","a":"2"}'),
        query="fieldValidation=Warn",
    ),
    Case(
        "duplicate-key-ignore",
        "POST",
        NS + "/configmaps",
        lambda: config_map("k11", ',"data":{"a":"1","a":"2"}'),
        query="fieldValidation=Ignore",
    ),
    Case(
        "duplicate-name-claim-strict",
        "POST",
        CLAIMS,
        lambda: (
            b'{"apiVersion":"resource.k8s.io/v1","kind":"ResourceClaim","metadata":{"name":"k12","name":"k12"},'
            b'"spec":{"devices":{"requests":[{"name":"gpu","exactly":{"deviceClassName":"gpu.nvidia.com"}}]}}}'
        ),
        query="fieldValidation=Strict",
    ),
    Case(
        "duplicate-key-and-unknown-field-strict",
        "POST",
        NS + "/configmaps",
        lambda: config_map("k13", ',"data":{"a":"1","a":"2"},"x":1'),
        query="fieldValidation=Strict",
    ),
    Case(
        "yaml-duplicate-key-strict",
        "POST",
        NS + "/configmaps",
        lambda: yaml_config_map("k14", 'data:\n  a: "1"\n  a: "2"\n'),
        ctype="application/yaml",
        query="fieldValidation=Strict",
    ),
    # -- field selectors
    *(
        Case(f"field-selector-{_resource(path)}-{label}", "GET", path, query=f"fieldSelector={label}%3Dx")
        for path, label in (
            (CLAIMS, "spec.foo"),
            (CLAIMS, "metadata.name"),
            ("/api/v1/namespaces", "metadata.namespace"),
            ("/api/v1/nodes", "spec.unschedulable"),
            ("/api/v1/nodes", "spec.nodeName"),
            ("/api/v1/pods", "spec.nodeName"),
            ("/api/v1/pods", "spec.priority"),
            ("/api/v1/events", "involvedObject.name"),
            ("/api/v1/events", "regarding.name"),
            ("/apis/events.k8s.io/v1/events", "regarding.name"),
            ("/apis/events.k8s.io/v1/events", "involvedObject.name"),
            (NS + "/configmaps", "data.x"),
            ("/api/v1/secrets", "type"),
            ("/apis/apps/v1/daemonsets", "spec.x"),
            ("/apis/batch/v1/jobs", "spec.x"),
            ("/apis/resource.k8s.io/v1/resourceslices", "spec.driver"),
            ("/apis/resource.k8s.io/v1/resourceslices", "spec.pool.name"),
            ("/apis/resource.k8s.io/v1/resourceslices", "spec.allNodes"),
            ("/apis/resource.k8s.io/v1/deviceclasses", "spec.x"),
            (DOMAINS, "spec.numNodes"),
        )
    ),
    *(
        Case(f"list-{name}", "GET", CLAIMS, query=query)
        for name, query in (
            ("limit-not-a-number", "limit=abc"),
            ("limit-a-fraction", "limit=1.5"),
            ("limit-out-of-range", "limit=99999999999999999999"),
            ("timeout-not-a-number", "timeoutSeconds=abc"),
            ("watch-timeout-not-a-number", "watch=1&timeoutSeconds=abc"),
            ("resource-version-not-a-number", "resourceVersion=abc"),
            ("resource-version-negative", "resourceVersion=-1"),
            ("field-selector-unescaped-equals", "fieldSelector=metadata.name%3D%3D%3D"),
            ("field-selector-escaped-equals", "fieldSelector=metadata.name%3Da%5C%3Db"),
        )
    ),
    Case("field-selector-watch-unknown", "GET", CLAIMS, query="watch=true&fieldSelector=spec.foo%3Dx"),
    Case("field-selector-deletecollection-unknown", "DELETE", CLAIMS, query="fieldSelector=spec.foo%3Dx"),
]


def answer(status: int, body: Any, warnings: list[str]) -> dict[str, Any]:
    """What is compared of an answer: the code and, for a Status, its reason, message and causes' fields; for an
    object, its kind and what it stores under ``data``; the Warning headers."""
    got: dict[str, Any] = {"code": status}
    if isinstance(body, dict) and body.get("kind") == "Status":
        got["reason"] = body.get("reason")
        got["message"] = body.get("message")
        causes = (body.get("details") or {}).get("causes")
        if causes:
            got["causes"] = [{"field": c.get("field"), "message": c.get("message")} for c in causes]
    elif isinstance(body, dict):
        got["kind"] = body.get("kind")
        if isinstance(body.get("data"), dict):
            got["data"] = {
                k: v if len(v) < 40 else f"{v[:20]}... ({len(v)} characters)" for k, v in body["data"].items()
            }
    if warnings:
        got["warnings"] = warnings
    return got


def recorded() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(RECORDS.read_text())
    return document


async def send(http: aiohttp.ClientSession, case: Case) -> dict[str, Any]:
    """Send one case; its answer as ``answer`` reports it (a watch: its first line)."""
    headers = {"Content-Type": case.ctype} if case.ctype else {}
    skip = () if case.ctype else ("Content-Type",)
    sent = case.body()
    async with http.request(
        case.method,
        case.url,
        data=io.BytesIO(sent) if sent else None,
        headers=headers,
        skip_auto_headers=skip,
    ) as rsp:
        text = await (rsp.content.readline() if "watch=" in case.query else rsp.read())
        try:
            body = json.loads(text) if text.strip() else None
        except ValueError:
            body = text.decode(errors="replace")[:200]
        except RecursionError:  # an object nested too deeply for Python's parser: its kind is enough
            kind = re.search(rb'"kind":"(\w+)"', text)
            body = {"kind": kind.group(1).decode() if kind else None}
        return answer(rsp.status, body, rsp.headers.getall("Warning", []))


async def install_crds(http: aiohttp.ClientSession) -> None:
    """The project's CRDs, and the target of the PATCH cases."""
    for path in sorted((ROOT / "crds").glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            if document and document.get("kind") == "CustomResourceDefinition":
                async with http.post(
                    "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=document
                ) as rsp:
                    assert rsp.status == 201, await rsp.text()
    async with http.post(SETUP.url, data=SETUP.body(), headers={"Content-Type": JSON}) as rsp:
        assert rsp.status == 201, await rsp.text()


@contextlib.asynccontextmanager
async def real_session(
    control_plane: KubernetesControlPlane,
) -> AsyncIterator[tuple[aiohttp.ClientSession, str]]:
    """A session with kube-apiserver as its admin, the CRDs installed and served; and the server's version."""
    context = ssl.create_default_context(cafile=str(control_plane.ca))
    pki = control_plane.layout.pki
    context.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
    connector = aiohttp.TCPConnector(ssl=context)
    async with aiohttp.ClientSession(base_url=control_plane.url, connector=connector) as http:
        await install_crds(http)

        async def served() -> bool:  # a CRD is served a moment after it is created
            async with http.get(DOMAINS) as rsp:
                return rsp.status == 200

        await eventually(served, timeout=30, what="the CRDs served")
        async with http.get("/version") as rsp:
            version = str((await rsp.json())["gitVersion"])
        yield http, version
