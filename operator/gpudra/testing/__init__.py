"""Helpers for tests of gpudra and of what runs on it (like ``structlog.testing``): wait for a condition or for a
watch event, never for a fixed time.

- ``eventually(check)`` calls ``check`` (async, or a plain function for state read in memory) until it returns
  something truthy and returns that; past ``timeout`` it fails with the last value, so the failure says what was
  seen.
- ``watch_until(client, resource, test)`` lists, then watches from the list's resourceVersion, and returns the first
  object that passes ``test``: a change cannot slip between a check and the wait, as it can with a sleep.
- ``HeldCall(fn)`` stands in for a blocking function (an NVML call, say) and holds each call at its start until
  released, so a test can act while the call is under way and then wait for it to end.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, overload

from gpudra.kube.client import KubeClient
from gpudra.kube.resources import Resource

T = TypeVar("T")
Body = dict[str, Any]


@overload
async def eventually(
    check: Callable[[], Awaitable[T | None]], timeout: float = ..., *, interval: float = ..., what: str = ...
) -> T: ...


@overload
async def eventually(
    check: Callable[[], T | None], timeout: float = ..., *, interval: float = ..., what: str = ...
) -> T: ...


async def eventually(
    check: Callable[[], Any],
    timeout: float = 15.0,
    *,
    interval: float = 0.05,
    what: str = "condition",
) -> Any:
    """Retry ``check`` until it returns a truthy value and return it (generous timeouts: CI machines are noisy)."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not met within {timeout}s (last value {value!r})")
        await asyncio.sleep(interval)


async def watch_until(
    client: KubeClient,
    resource: Resource,
    test: Callable[[Body], bool],
    *,
    namespace: str | None = None,
    label_selector: str | None = None,
    field_selector: str | None = None,
    timeout: float = 15.0,
) -> Body:
    """The first object of ``resource`` that passes ``test``: one that already does, else the first watch event
    (ADDED or MODIFIED) that does."""

    async def wait() -> Body:
        items, version = await client.list_raw(
            resource, namespace, label_selector=label_selector, field_selector=field_selector
        )
        for item in items:
            if test(item):
                return item
        while True:
            events = client.watch(
                resource,
                namespace,
                resource_version=version,
                label_selector=label_selector,
                field_selector=field_selector,
            )
            async for kind, obj in events:
                version = (obj.get("metadata") or {}).get("resourceVersion") or version
                if kind in ("ADDED", "MODIFIED") and test(obj):
                    return obj

    try:
        return await asyncio.wait_for(wait(), timeout)
    except TimeoutError:
        raise AssertionError(f"no {resource.plural} passed the test within {timeout}s") from None


class HeldCall:
    """``fn``, each call held at its start until :attr:`release` is set (at most ``hold`` seconds): :attr:`entered`
    is set when a call arrives, :attr:`returned` when it has ended. Events of ``threading``: the call runs in a
    worker thread."""

    def __init__(self, fn: Callable[..., Any], *, hold: float = 60.0) -> None:
        self._fn = fn
        self._hold = hold
        self.entered, self.release, self.returned = threading.Event(), threading.Event(), threading.Event()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.entered.set()
        self.release.wait(timeout=self._hold)
        try:
            return self._fn(*args, **kwargs)
        finally:
            self.returned.set()
