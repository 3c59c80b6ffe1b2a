"""RFC 3339 timestamps as Kubernetes writes them in metadata and conditions (``2026-11-24T00:57:05Z``)."""

from __future__ import annotations

from datetime import UTC, datetime
from functools import lru_cache


def rfc3339(when: float | None = None) -> str:
    """``when`` (seconds since the epoch; now by default) to the second, in UTC, as Kubernetes writes it."""
    moment = datetime.now(UTC) if when is None else datetime.fromtimestamp(when, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_rfc3339(stamp: str) -> datetime:
    """A Kubernetes timestamp (``Z`` or an offset, fractions allowed) as an aware datetime (ValueError if not one)."""
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


@lru_cache(maxsize=4096)
def epoch_seconds(stamp: str) -> float:
    """``parse_rfc3339(stamp)`` as seconds since the epoch, each stamp parsed once while it is among the 4,096 last
    asked: a controller asks for every pending claim's age at each tick of its explainer, and creation stamps have
    whole seconds, so many claims share one."""
    return parse_rfc3339(stamp).timestamp()
