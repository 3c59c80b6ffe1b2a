"""The sweep of prepared claims whose ResourceClaim is gone: when a claim counts as gone, for how long, and what an
API outage does (nothing)."""

from __future__ import annotations

from typing import Any, cast

import pytest

from gpudra.agent.checkpoint import ClaimEntry, DeviceRecord
from gpudra.agent.claimpreparer import ClaimPreparer
from gpudra.agent.kubeletplugin.messages import ClaimRef, UnprepareResult
from gpudra.agent.orphans import NodeWarning, OrphanSweeper, overdue
from gpudra.api.dra import ResourceClaim
from gpudra.errors import InvalidInputError, KubeConnectionError, NotFoundError
from gpudra.kube.client import KubeClient


@pytest.mark.parametrize(
    ("since", "missing", "now", "want_since", "want_due"),
    [
        pytest.param({}, ["a"], 10.0, {"a": 10.0}, [], id="first seen missing"),
        pytest.param({"a": 10.0}, ["a"], 10.5, {"a": 10.0}, [], id="within the grace period"),
        pytest.param({"a": 10.0}, ["a"], 11.0, {"a": 10.0}, ["a"], id="missing for the grace period"),
        pytest.param({"a": 10.0}, [], 20.0, {}, [], id="seen again: forgotten"),
        pytest.param({"b": 1.0, "a": 2.0}, ["a", "b", "c"], 5.0, {"a": 2.0, "b": 1.0, "c": 5.0}, ["a", "b"],
                     id="several, sorted"),
    ],
)  # fmt: skip
def test_overdue(
    since: dict[str, float], missing: list[str], now: float, want_since: dict[str, float], want_due: list[str]
) -> None:
    assert overdue(since, missing, now=now, grace=1.0) == (want_since, want_due)


def entry(name: str) -> ClaimEntry:
    device = DeviceRecord(pool_name="n", device_name="gpu-0")
    return ClaimEntry(namespace="default", name=name, state="PrepareCompleted", devices=[device])


class FakeStore:
    def __init__(self, claims: dict[str, ClaimEntry]) -> None:
        self._claims = claims

    def claims(self) -> dict[str, ClaimEntry]:
        return dict(self._claims)


class FakePreparer:
    node = "n"

    def __init__(self, claims: dict[str, ClaimEntry]) -> None:
        self.store = FakeStore(claims)
        self.unprepared: list[ClaimRef] = []

    async def unprepare(self, refs: list[ClaimRef]) -> dict[str, UnprepareResult]:
        self.unprepared += refs
        return {ref.uid: UnprepareResult() for ref in refs}


class FakeClient:
    """The API as the sweeper reads it: claims by name, claims that do not parse, or an outage."""

    def __init__(self) -> None:
        self.claims: dict[str, str] = {}  # name -> uid
        self.unparseable: set[str] = set()
        self.down = False

    async def get(self, resource: Any, name: str, namespace: str) -> ResourceClaim:
        if self.down:
            raise KubeConnectionError("connection refused")
        if name in self.unparseable:
            raise InvalidInputError(f"ResourceClaim {namespace}/{name} does not parse: spec.devices: bad")
        if name not in self.claims:
            raise NotFoundError("not found", status=404)
        return ResourceClaim.from_wire(
            {"metadata": {"name": name, "namespace": namespace, "uid": self.claims[name]}}
        )


def sweeper_of(
    preparer: FakePreparer, client: FakeClient, warn: NodeWarning, now: list[float]
) -> OrphanSweeper:
    """A sweeper over the fakes (they have what it uses), a grace and an interval of 1 s on the clock ``now[0]``."""
    return OrphanSweeper(
        cast(ClaimPreparer, preparer),
        cast(KubeClient, client),
        warn,
        grace=1.0,
        interval=1.0,
        clock=lambda: now[0],
    )


async def test_an_outage_is_no_deletion_and_a_replaced_claim_is() -> None:
    preparer = FakePreparer({"u-old": entry("train"), "u-keep": entry("keep")})
    client = FakeClient()
    client.claims = {"keep": "u-keep"}
    warnings: list[str] = []

    async def warn(reason: str, message: str) -> None:
        warnings.append(f"{reason}: {message}")

    now = [0.0]
    sweeper = sweeper_of(preparer, client, warn, now)
    client.down = True
    assert await sweeper.sweep() == []
    now[0] = 5.0
    assert await sweeper.sweep() == []  # the outage was not counted as missing time
    client.down = False
    client.claims["train"] = "u-new"  # deleted and created again under the same name
    now[0] = 10.0
    assert await sweeper.sweep() == []
    now[0] = 11.0
    assert await sweeper.sweep() == ["u-old"]
    assert preparer.unprepared == [ClaimRef(namespace="default", uid="u-old", name="train")]
    assert len(warnings) == 1 and "default/train (uid u-old)" in warnings[0] and "gpu-0" in warnings[0]


async def test_a_claim_that_does_not_parse_is_kept_and_the_sweep_goes_on() -> None:
    preparer = FakePreparer({"u-odd": entry("odd"), "u-gone": entry("gone")})
    client = FakeClient()
    client.unparseable = {"odd"}

    async def warn(reason: str, message: str) -> None:
        return None

    now = [0.0]
    sweeper = sweeper_of(preparer, client, warn, now)
    assert await sweeper.sweep() == []
    now[0] = 2.0
    assert await sweeper.sweep() == ["u-gone"]
    assert preparer.unprepared == [ClaimRef(namespace="default", uid="u-gone", name="gone")]
