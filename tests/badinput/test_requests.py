"""Hostile requests to the embedded API server, each answered as kube-apiserver answered it (``requests.yaml``,
recorded against kube-apiserver v1.37.2 by ``record_requests.py``): the same status code, reason and message, the
same field paths, the same Warning headers on success; never a 500, and each answered within a second.

``DIFFERENT`` lists the cases where the embedded server answers otherwise, on purpose (docs/fidelity.md): JSON and
YAML nested deeper than it reads (200 levels; kube-apiserver reads 10,000). It refuses them with a 400 that says so.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import aiohttp
import pytest

from authkit import admin_headers
from gpudra.cluster.apiserver import EmbeddedAPIServer
from gpudra.cluster.apiserver.bodies import DEPTH_LIMIT
from requestkit import CASES, SETUP, Case, install_crds, recorded, send

RECORDED = recorded()
DIFFERENT = {
    "json-nested-1000-strict",
    "json-nested-1000-ignore",
    "claim-parameters-nested-1000",
    "yaml-nested-5000",
}


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    apiserver = EmbeddedAPIServer()
    url = await apiserver.start()
    async with aiohttp.ClientSession(base_url=url, headers=admin_headers(apiserver)) as session:
        await install_crds(session)
        yield session
    await apiserver.stop()


def test_every_case_is_recorded_against_kube_apiserver() -> None:
    assert RECORDED["server"].startswith("v1.37.")
    assert set(RECORDED["records"]) == {case.name for case in CASES}
    assert len({case.name for case in CASES}) == len(CASES)
    assert SETUP.name not in RECORDED["records"]


def comparable(answer: dict[str, object]) -> dict[str, object]:
    """kube-apiserver sends a stray Warning with some refusals (``unknown field "spec"`` with a custom resource of
    another version): Warning headers are compared on success only."""
    if int(str(answer["code"])) >= 400:
        return {k: v for k, v in answer.items() if k != "warnings"}
    return answer


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", [c for c in CASES if c.name not in DIFFERENT], ids=lambda c: c.name)
async def test_answered_as_kube_apiserver_answers(case: Case, http: aiohttp.ClientSession) -> None:
    started = time.monotonic()
    got = await send(http, case)
    assert time.monotonic() - started < 1.0
    assert comparable(got) == comparable(RECORDED["records"][case.name])


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", [c for c in CASES if c.name in DIFFERENT], ids=lambda c: c.name)
async def test_nested_deeper_than_it_reads_is_refused_saying_so(
    case: Case, http: aiohttp.ClientSession
) -> None:
    got = await send(http, case)
    assert got["code"] == 400, got
    assert f"the embedded API server reads at most {DEPTH_LIMIT} (kube-apiserver 10000)" in str(
        got["message"]
    )
