"""Fuzzing the embedded API server: random and mutated bodies, media types and queries, sent to every resource path
it serves (built-ins and the project's CRDs; collections, objects and status), as any process on the machine can.

It must answer every request with a status below 500, within a second, and stay up. The server runs in a process of
its own (``gpudra up --api-server-process``), so a crash is seen as one. ``GPUDRA_FUZZ_EXAMPLES`` requests per run
(300 by default, about ten seconds), from a random seed hypothesis prints with a failure (``GPUDRA_FUZZ_SEED``
replays one).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from _corpus import HERE, ROOT
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from gpudra.cluster.apiserver.identity import ADMIN
from gpudra.cluster.apiserver.process import APIServerProcess

EXAMPLES = int(os.environ.get("GPUDRA_FUZZ_EXAMPLES", "300"))
SEED = int(os.environ.get("GPUDRA_FUZZ_SEED", str(random.randrange(2**32))))
STALL = 1.0
"""Seconds a request may take; a slower answer is a stall."""
MEDIA_TYPES = [
    "application/json",
    "application/yaml",
    "application/merge-patch+json",
    "application/json-patch+json",
    "application/strategic-merge-patch+json",
    "application/apply-patch+yaml",
    "application/vnd.kubernetes.protobuf",
    "text/plain",
    "application/json; charset=utf-8",
    "",
    'application/x-what; q="1"',
]
METHODS = ["POST", "PUT", "PATCH", "GET", "DELETE"]
YAML_SCALARS = [
    "2020-01-01",
    "2001-12-14t21:59:43.10-05:00",
    "!!binary aGVsbG8=",
    "!!set {a, b}",
    "!!omap [a: 1]",
    "!!pairs [a: 1]",
    "!!python/object:os.system ls",
    "1e3",
    ".inf",
    "-.inf",
    ".nan",
    "0o17",
    "0x1F",
    "1_000",
    "~",
    "{null: 1}",
    "{1: a, true: b, 1.5: c, 1.0: d}",
    "{[a]: b}",
    "&x [1, *x]",
    "{<<: {a: 1}, b: 2}",
    '"\\udcff"',
    '"\\x00"',
]


class Payload(bytes):
    """A body, shown short (hypothesis prints the failing example; some bodies are megabytes)."""

    def __repr__(self) -> str:
        head = bytes(self[:200])
        return f"{head!r}{f' ... ({len(self)} bytes)' if len(self) > 200 else ''}"


class Server:
    """The server process and what the fuzzer sends to: its resource paths and a valid object of each kind."""

    def __init__(
        self, url: str, token: str, paths: list[tuple[str, str, str]], seeds: dict[str, dict[str, Any]]
    ) -> None:
        self.url = url
        self.token = token
        """The admin's: the fuzzer's requests pass authentication and authorization."""
        self.paths = paths
        """(collection path, object name, kind) of every served resource, cluster-scoped and in ``default``."""
        self.seeds = seeds


def request(url: str, method: str, body: bytes | None, ctype: str, token: str) -> tuple[int, bytes]:
    headers = {"Content-Type": ctype} if ctype else {}
    headers["Authorization"] = f"Bearer {token}"
    call = urllib.request.Request(url, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(call, timeout=STALL + 1) as rsp:
            return rsp.status, rsp.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def served_paths(url: str, token: str) -> list[tuple[str, str, str]]:
    """Every served resource (discovery), as (collection path, object name, kind)."""
    groups = [("/api/v1", "v1")] + [
        (f"/apis/{version['groupVersion']}", version["groupVersion"])
        for group in json.loads(request(url + "/apis", "GET", None, "", token)[1])["groups"]
        for version in group["versions"]
    ]
    paths = []
    for prefix, _ in groups:
        for resource in json.loads(request(url + prefix, "GET", None, "", token)[1])["resources"]:
            if "/" in resource["name"]:
                continue
            scope = "/namespaces/default" if resource["namespaced"] else ""
            paths.append((f"{prefix}{scope}/{resource['name']}", "fuzz", resource["kind"]))
    return paths


def seed_objects() -> dict[str, dict[str, Any]]:
    """Valid objects by kind, to mutate: the examples and the bad-input corpus."""
    objects: dict[str, dict[str, Any]] = {}
    for path in sorted((ROOT / "examples").rglob("*.yaml")) + sorted(HERE.glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            if isinstance(document, dict) and isinstance(document.get("kind"), str):
                objects.setdefault(document["kind"], document)
    return objects


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    process = APIServerProcess(kubeconfig=tmp_path_factory.mktemp("fuzz") / "kubeconfig")
    url = asyncio.run(process.start())
    token = process.tokens.issue(ADMIN)
    try:
        for path in sorted((ROOT / "crds").glob("*.yaml")):
            for document in yaml.safe_load_all(path.read_text()):
                if document and document.get("kind") == "CustomResourceDefinition":
                    crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
                    assert (
                        request(url + crds, "POST", json.dumps(document).encode(), "application/json", token)[
                            0
                        ]
                        == 201
                    )
        yield Server(url, token, served_paths(url, token), seed_objects())
        assert process.pid is not None
        os.kill(process.pid, 0)  # still there
        assert request(url + "/healthz", "GET", None, "", token)[0] == 200
    finally:
        asyncio.run(process.stop())


# ---- what is sent ------------------------------------------------------------------------------------------
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=20,
)


def paths_in(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield prefix
    if isinstance(value, dict):
        for key, member in value.items():
            yield from paths_in(member, (*prefix, key))
    elif isinstance(value, list):
        for i, member in enumerate(value):
            yield from paths_in(member, (*prefix, i))


@st.composite
def mutated(draw: st.DrawFn, obj: dict[str, Any]) -> Any:
    """``obj`` with a few of its values replaced, removed, or given a sibling."""
    value: Any = json.loads(json.dumps(obj))
    for _ in range(draw(st.integers(1, 4))):
        places = list(paths_in(value))
        place = draw(st.sampled_from(places))
        replacement = draw(JSON_VALUES)
        if not place:
            value = replacement
            continue
        parent: Any = value
        for step in place[:-1]:
            parent = parent[step]
        action = draw(st.sampled_from(["replace", "remove", "add"]))
        if action == "remove":
            del parent[place[-1]]
        elif action == "add" and isinstance(parent, dict):
            parent[draw(st.text(max_size=10))] = replacement
        else:
            parent[place[-1]] = replacement
    return value


def nested(depth: int, opener: str) -> str:
    closer = "]" if opener == "[" else "}"
    inner = '{"a":' if opener == "{" else "["
    return inner * depth + ("1" if opener == "{" else "") + closer * depth


@st.composite
def bodies(draw: st.DrawFn, server: Server, kind: str) -> Payload | None:
    raw = draw(raw_bodies(server, kind))
    return None if raw is None else Payload(raw)


@st.composite
def raw_bodies(draw: st.DrawFn, server: Server, kind: str) -> bytes | None:
    shape = draw(
        st.sampled_from(
            ["none", "bytes", "json", "mutated", "mutated-yaml", "deep", "duplicate", "big", "alias"]
        )
    )
    base = server.seeds.get(kind) or {"apiVersion": "v1", "kind": kind, "metadata": {"name": "fuzz"}}
    if shape == "none":
        return None
    if shape == "bytes":
        return draw(st.binary(max_size=200))
    if shape == "json":
        return json.dumps(draw(JSON_VALUES)).encode()
    if shape == "deep":
        depth = draw(st.sampled_from([150, 199, 200, 201, 999, 1000, 5000, 10001, 20000]))
        return (
            '{"kind":'
            + json.dumps(kind)
            + ',"metadata":{"name":"fuzz"},"x":'
            + nested(depth, draw(st.sampled_from("[{")))
            + "}"
        ).encode()
    if shape == "duplicate":
        text = json.dumps(draw(mutated(base)))
        return text.replace('{"', '{"metadata":{},"', 1).encode()
    if shape == "big":
        return json.dumps(
            {**base, "x": "x" * draw(st.sampled_from([1024 * 1024, 3 * 1024 * 1024 + 1]))}
        ).encode()
    if shape == "alias":
        levels = draw(st.integers(1, 8))
        text = 'a0: &a0 ["x","x","x","x","x","x","x","x","x"]\n' + "".join(
            f"a{i}: &a{i} [{','.join([f'*a{i - 1}'] * 9)}]\n" for i in range(1, levels)
        )
        return (yaml.safe_dump(base) + text).encode()
    body = draw(mutated(base))
    if shape == "yaml-scalar":
        key = draw(st.sampled_from(["x", "data", "spec", "metadata"]))
        value = draw(st.sampled_from(YAML_SCALARS))
        line = f"{key}: {{k: {value}}}\n" if draw(st.booleans()) else f"{key}: {value}\n"
        kept = {k: v for k, v in body.items() if k != key} if isinstance(body, dict) else {}
        return (yaml.safe_dump(kept) + line).encode()
    if shape == "mutated-yaml":
        return yaml.safe_dump(body).encode()
    return json.dumps(body).encode()


@st.composite
def requests(draw: st.DrawFn, server: Server) -> tuple[str, str, bytes | None, str]:
    collection, name, kind = draw(st.sampled_from(server.paths))
    method = draw(st.sampled_from(METHODS))
    target = draw(st.sampled_from(["collection", "object", "status"]))
    path = (
        collection
        if target == "collection"
        else f"{collection}/{name}" + ("/status" if target == "status" else "")
    )
    query = draw(
        st.lists(
            st.sampled_from(
                [
                    "fieldValidation=Strict",
                    "fieldValidation=Warn",
                    "fieldValidation=Ignore",
                    "fieldValidation=Nope",
                    "dryRun=All",
                    "fieldSelector=metadata.name%3Dfuzz",
                    "fieldSelector=spec.nodeName%3Dx",
                    "fieldSelector=%3D%3D%21",
                    "labelSelector=a%20in%20(b",
                    "labelSelector=a%3Db",
                    "propagationPolicy=Nope",
                    "fieldManager=fuzz&force=true",
                    "resourceVersion=abc",
                    "limit=-1",
                ]
            ),
            max_size=3,
        )
    )
    url = server.url + path + ("?" + "&".join(query) if query else "")
    return method, url, draw(bodies(server, kind)), draw(st.sampled_from(MEDIA_TYPES))


@pytest.mark.timeout(240)
def test_no_request_fails_stalls_or_stops_the_server(server: Server) -> None:
    @seed(SEED)
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(sent=requests(server))
    def one(sent: tuple[str, str, bytes | None, str]) -> None:
        method, url, body, ctype = sent
        started = time.monotonic()
        status, answer = request(url, method, body, ctype, server.token)
        took = time.monotonic() - started
        replay = f"GPUDRA_FUZZ_SEED={SEED}"
        assert status < 500, f"{method} {url} ({ctype}): {status} {answer[:300]!r} ({replay})"
        assert took < STALL, f"{method} {url} ({ctype}) took {took:.2f}s ({replay})"

    one()


def test_the_fuzzer_reaches_every_kind(server: Server) -> None:
    """Every kind the server serves is a target, and those the project writes have a valid object to mutate."""
    kinds = {kind for _, _, kind in server.paths}
    assert {"ResourceClaim", "ResourceSlice", "DeviceClass", "Pod", "ComputeDomain", "MigLayout"} <= kinds
    assert {"ResourceClaim", "ResourceClaimTemplate", "DeviceClass", "ResourceSlice", "ComputeDomain"} <= set(
        server.seeds
    )
