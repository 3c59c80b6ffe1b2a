"""The metrics and health server of the agent and the controller: it listens on every address of the pod (IPv4
and IPv6) unless told one, and nothing a caller sends it changes anything: GET and HEAD only."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest

from gpudra.config import ControllerSettings
from gpudra.metrics import Metrics, metrics_app, serve_metrics

PATHS = ("/metrics", "/healthz", "/readyz")


def test_every_route_only_reads() -> None:
    app = metrics_app(Metrics().registry, lambda: True)
    routes = {(r.resource.canonical, r.method) for r in app.router.routes() if r.resource is not None}
    assert {path for path, _ in routes} == set(PATHS)
    assert {method for _, method in routes} <= {"GET", "HEAD"}


@pytest.fixture
async def served() -> AsyncIterator[tuple[Metrics, list[str]]]:
    metrics = Metrics()
    host = ControllerSettings().metrics_host  # the default: every address
    runner = await serve_metrics(metrics_app(metrics.registry, lambda: False), host, 0)
    urls = []
    for address in runner.addresses:
        host = address[0]
        urls.append(f"http://{'127.0.0.1' if host == '0.0.0.0' else '[::1]'}:{address[1]}")
    try:
        yield metrics, urls
    finally:
        await runner.cleanup()


async def test_it_listens_on_every_address_by_default(served: tuple[Metrics, list[str]]) -> None:
    _, urls = served
    assert any(url.startswith("http://127.0.0.1:") for url in urls)
    async with aiohttp.ClientSession() as session:
        for url in urls:
            async with session.get(f"{url}/healthz") as response:
                assert response.status == 200


async def test_writes_are_refused_and_change_nothing(served: tuple[Metrics, list[str]]) -> None:
    metrics, urls = served
    metrics.computedomain_cleanups.labels("complete").inc()
    before = metrics.registry.get_sample_value("gpudra_computedomain_cleanups_total", {"result": "complete"})
    async with aiohttp.ClientSession() as session:
        for path in PATHS:
            for method in ("POST", "PUT", "PATCH", "DELETE"):
                async with session.request(method, f"{urls[0]}{path}", data=b"x") as response:
                    assert response.status == 405, (method, path)
        async with session.get(f"{urls[0]}/readyz") as response:
            assert response.status == 503
        async with session.get(f"{urls[0]}/metrics") as response:
            text = await response.text()
    assert 'gpudra_computedomain_cleanups_total{result="complete"} 1.0' in text
    after = metrics.registry.get_sample_value("gpudra_computedomain_cleanups_total", {"result": "complete"})
    assert after == before == 1.0
