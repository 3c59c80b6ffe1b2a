"""What a test asks of the simulated NVML binding."""

from __future__ import annotations

from typing import Any

import pytest

from gpudra.hardware.simulated.fake_nvml import FakeNvml


def p2p_queries(fake: FakeNvml, monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    """Each ``nvmlDeviceGetP2PStatus`` call made on ``fake`` from now on (still answered): the NVLink peers of a
    reading, 56 calls on an 8-GPU node."""
    pairs: list[tuple[Any, ...]] = []
    asked = fake.nvmlDeviceGetP2PStatus

    def counted(*args: Any) -> Any:
        pairs.append(args)
        return asked(*args)

    monkeypatch.setattr(fake, "nvmlDeviceGetP2PStatus", counted)
    return pairs
