"""Interpreter settings an embedded cluster holds while it runs: several clusters in one process (as in tests)
share them, and the setting the process had comes back only when the last one stops."""

from __future__ import annotations

import gc
import resource

import pytest

from gpudra.cluster.interpreter import (
    START_FULL_COLLECTION_EVERY,
    SharedSetting,
    ensure_open_files,
    rare_full_collections,
)
from gpudra.errors import ConfigurationError


def test_the_last_holder_to_release_restores_what_the_first_found() -> None:
    value = ["original"]
    setting: SharedSetting[str] = SharedSetting(lambda: value[0], lambda v: value.__setitem__(0, v))
    setting.hold("tuned")
    setting.hold("tuned")
    assert value[0] == "tuned"
    setting.release()
    assert value[0] == "tuned"  # the second cluster still runs
    setting.release()
    assert value[0] == "original"
    setting.release()  # a stop after a failed start releases nothing it did not hold
    assert value[0] == "original"


def _failing_start(inside: list[tuple[int, ...]]) -> None:
    with rare_full_collections():
        inside.append(gc.get_threshold())
        raise RuntimeError("a start that fails")


def test_full_collections_are_rarer_only_inside_and_the_thresholds_come_back() -> None:
    found = gc.get_threshold()
    gc.set_threshold(10_000, 10, 10)
    inside: list[tuple[int, ...]] = []
    try:
        with pytest.raises(RuntimeError):
            _failing_start(inside)
        assert gc.get_threshold() == (10_000, 10, 10)
    finally:
        gc.set_threshold(*found)
    assert inside == [(10_000, 10, START_FULL_COLLECTION_EVERY)] and START_FULL_COLLECTION_EVERY > 10


def test_a_fleet_gets_the_open_files_it_needs_or_is_refused_saying_why() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert hard == resource.RLIM_INFINITY or hard > 1_100, "this test lowers the soft limit to 1,000"
    resource.setrlimit(resource.RLIMIT_NOFILE, (1_000, hard))
    try:
        ensure_open_files(1_100, "a fleet of 200 simulated nodes")
        assert resource.getrlimit(resource.RLIMIT_NOFILE) == (1_100, hard)
        if hard != resource.RLIM_INFINITY:
            with pytest.raises(ConfigurationError) as refused:
                ensure_open_files(hard + 1, "a fleet of 5,000 simulated nodes")
            assert str(refused.value) == (
                f"a fleet of 5,000 simulated nodes needs about {hard + 1:,} open files and this process may open "
                f"{hard:,} (ulimit -Hn): raise the limit, or start fewer nodes"
            )
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
