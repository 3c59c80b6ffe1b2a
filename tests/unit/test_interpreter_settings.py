"""Interpreter settings an embedded cluster holds while it runs: several clusters in one process (as in tests)
share them, and the setting the process had comes back only when the last one stops."""

from __future__ import annotations

from gpudra.cluster.interpreter import SharedSetting


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
