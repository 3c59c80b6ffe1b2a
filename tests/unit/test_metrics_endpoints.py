"""The metrics and health server of the agent and the controller: it listens on every address of the pod (IPv4
and IPv6) unless told one, and nothing a caller sends it changes anything: GET and HEAD only. Malformed or slow
callers get an error and are dropped; the server goes on answering the others."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
import pytest
from prometheus_client import CollectorRegistry, Gauge
from prometheus_client.exposition import generate_latest

from gpudra.config import ControllerSettings
from gpudra.errors import ConfigurationError
from gpudra.metrics import ALLOCATION_LABELS, Metrics, metrics_app, serve_metrics

PATHS = ("/metrics", "/healthz", "/readyz")


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


async def test_head_answers_without_a_body_and_unknown_paths_are_404(
    served: tuple[Metrics, list[str]],
) -> None:
    _, urls = served
    async with aiohttp.ClientSession() as session:
        async with session.head(f"{urls[0]}/metrics") as response:
            assert response.status == 200 and response.content_type == "text/plain"
            assert int(response.headers["Content-Length"]) > 0 and await response.read() == b""
        async with session.get(f"{urls[0]}/nothing") as response:
            assert response.status == 404
        async with session.get(f"{urls[0]}/healthz?verbose=1") as response:
            assert response.status == 200 and await response.text() == "ok"


def _address(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    return host.strip("[]"), int(port)


async def _raw(url: str, request: bytes) -> bytes:
    reader, writer = await asyncio.open_connection(*_address(url))
    writer.write(request)
    await writer.drain()
    answer = await asyncio.wait_for(reader.read(), 30)
    writer.close()
    return answer


async def test_malformed_requests_get_400_and_the_server_goes_on(served: tuple[Metrics, list[str]]) -> None:
    _, urls = served
    for request in (
        b"nonsense\r\n\r\n",
        b"GET /healthz SPDY/9\r\n\r\n",
        b"GET /healthz HTTP/1.1\r\nContent-Length: lots\r\n\r\n",
        "GET /healthz HTTP/1.1\r\nContent-Length: \u00b2\r\n\r\n".encode("latin-1"),
        b"GET /healthz HTTP/1.1\r\nContent-Length: " + b"9" * 5000 + b"\r\n\r\n",
    ):
        assert (await _raw(urls[0], request)).startswith(b"HTTP/1.1 400 "), request
    too_long = b"GET /healthz HTTP/1.1\r\nX: " + b"x" * 100_000 + b"\r\n\r\n"
    assert (await _raw(urls[0], too_long)).startswith(b"HTTP/1.1 431 ")
    plain = await _raw(urls[0], b"GET /healthz HTTP/1.0\r\n\r\n")
    assert plain.startswith(b"HTTP/1.1 200 OK\r\n") and plain.endswith(b"\r\n\r\nok")


async def test_a_caller_that_never_finishes_does_not_hold_up_the_others(
    served: tuple[Metrics, list[str]],
) -> None:
    _, urls = served
    _, stalled = await asyncio.open_connection(*_address(urls[0]))
    stalled.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # and never the blank line
    await stalled.drain()
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"{urls[0]}/healthz", timeout=aiohttp.ClientTimeout(total=5)) as response,
        ):
            assert response.status == 200
    finally:
        stalled.close()


async def test_metrics_can_be_asked_for_by_name(served: tuple[Metrics, list[str]]) -> None:
    """``?name[]=`` answers those series only, as prometheus-client's own handler does: a caller that watches one
    counter (a benchmark, every half second) does not pay for the whole registry."""
    metrics, urls = served
    metrics.watch_events.labels("resourceclaims").inc(3)
    metrics.computedomain_cleanups.labels("complete").inc()
    async with aiohttp.ClientSession() as session:
        params = {"name[]": "gpudra_watch_events_total"}
        async with session.get(f"{urls[0]}/metrics", params=params) as response:
            assert response.status == 200
            text = await response.text()
        async with session.get(f"{urls[0]}/metrics") as response:
            everything = await response.text()
    assert 'gpudra_watch_events_total{resource="resourceclaims"} 3.0' in text
    assert "gpudra_computedomain_cleanups_total" not in text
    assert "gpudra_computedomain_cleanups_total" in everything


async def test_allocated_device_series_scrape_as_a_labelled_gauge_and_go_once_no_claim_holds_them(
    served: tuple[Metrics, list[str]],
) -> None:
    metrics, urls = served
    labels = ("train", "default", "gpu.nvidia.com", "node-0", "gpu-0", "", "", "GPU-0", "trainer", "default")
    reference = CollectorRegistry()  # what prometheus-client's own labelled gauge writes for the same series
    Gauge(
        "gpudra_device_allocated",
        metrics.device_allocated.documentation,
        list(ALLOCATION_LABELS),
        registry=reference,
    ).labels(*labels).set(1)
    metrics.device_allocated.hold(labels)
    metrics.device_allocated.hold(labels)  # a claim re-created under its name, on the same device
    metrics.device_allocated.release(labels)  # its predecessor's deletion
    async with aiohttp.ClientSession() as session:
        for params in ({}, {"name[]": "gpudra_device_allocated"}):
            async with session.get(f"{urls[0]}/metrics", params=params) as response:
                text = await response.text()
            assert generate_latest(reference).decode() in text
        metrics.device_allocated.release(labels)
        async with session.get(f"{urls[0]}/metrics") as response:
            text = await response.text()
    assert "# TYPE gpudra_device_allocated gauge" in text
    assert 'dra_claim_name="train"' not in text


async def test_a_port_already_taken_is_refused_naming_the_setting(served: tuple[Metrics, list[str]]) -> None:
    """It used to end the agent or the controller with an OSError traceback."""
    _, urls = served
    port = int(urls[0].rsplit(":", 1)[1])
    with pytest.raises(ConfigurationError) as caught:
        await serve_metrics(metrics_app(CollectorRegistry(), lambda: True), "", port)
    assert str(caught.value).startswith(
        f"the metrics server cannot listen on every address:{port} (GPUDRA_METRICS_PORT, GPUDRA_METRICS_HOST): "
    )
    assert "address already in use" in str(caught.value)
