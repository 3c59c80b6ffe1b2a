"""Settings: flags over GPUDRA_* environment variables; bad values stop the process with the setting named."""

import pytest

from gpudra.config import AgentSettings, load_settings
from gpudra.errors import ConfigurationError


def test_environment_twin_of_every_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUDRA_NODE_NAME", "node-7")
    monkeypatch.setenv("GPUDRA_HARDWARE_POLL_SECONDS", "2.5")
    settings = load_settings(AgentSettings)
    assert settings.node_name == "node-7"
    assert settings.hardware_poll_seconds == 2.5


def test_flags_win_over_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUDRA_NODE_NAME", "from-env")
    assert load_settings(AgentSettings, node_name="from-flag").node_name == "from-flag"


def test_bad_value_names_the_setting() -> None:
    with pytest.raises(ConfigurationError, match="hardware_poll_seconds: Input should be greater than 0"):
        load_settings(AgentSettings, node_name="n", hardware_poll_seconds=0)


def test_missing_node_name_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPUDRA_NODE_NAME", raising=False)
    with pytest.raises(ConfigurationError, match="node_name: Field required"):
        load_settings(AgentSettings)
