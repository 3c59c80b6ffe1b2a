"""Settings: flags over GPUDRA_* environment variables; bad values stop the process with the setting named as the
user set it (the flag, or the variable) and the value it had."""

import pytest

from gpudra.config import AgentSettings, ControllerSettings, load_settings
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


def test_a_bad_flag_is_named_as_the_flag_with_the_value_given() -> None:
    with pytest.raises(ConfigurationError) as caught:
        load_settings(AgentSettings, node_name="n", hardware_poll_seconds=0)
    assert str(caught.value) == (
        "invalid AgentSettings: --hardware-poll-seconds: Input should be greater than 0 (got 0)"
    )


def test_a_bad_environment_variable_is_named_as_the_variable_a_pod_spec_sets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The Helm chart passes settings as GPUDRA_* variables: the error names the one to fix, and what it said."""
    monkeypatch.setenv("GPUDRA_LOG_FORMAT", "xml")
    monkeypatch.setenv("GPUDRA_WEB_PORT", "70000")
    monkeypatch.setenv("GPUDRA_LOG_LEVEL", "LOUD")
    with pytest.raises(ConfigurationError) as caught:
        load_settings(ControllerSettings)
    assert str(caught.value) == (
        "invalid ControllerSettings: GPUDRA_LOG_FORMAT: Input should be 'console' or 'json' (got 'xml'); "
        "GPUDRA_LOG_LEVEL: Input should be DEBUG, INFO, WARNING, ERROR or CRITICAL (got 'LOUD'); "
        "GPUDRA_WEB_PORT: Input should be less than or equal to 65535 (got '70000')"
    )


def test_a_log_level_is_any_case_of_a_level_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUDRA_LOG_LEVEL", "debug")
    assert load_settings(ControllerSettings).log_level == "debug"


def test_missing_node_name_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPUDRA_NODE_NAME", raising=False)
    with pytest.raises(ConfigurationError, match="GPUDRA_NODE_NAME: Field required"):
        load_settings(AgentSettings)


def test_a_list_variable_that_is_not_json_is_named_not_a_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    """A list or map setting is JSON (docs/install.md); ``13,31`` used to stop the agent with pydantic-settings'
    traceback, naming neither the variable nor what to write."""
    monkeypatch.setenv("GPUDRA_HEALTH_IGNORED_XIDS", "13,31")
    with pytest.raises(ConfigurationError) as caught:
        load_settings(AgentSettings, node_name="n")
    assert str(caught.value) == (
        "invalid AgentSettings: GPUDRA_HEALTH_IGNORED_XIDS: not JSON (Extra data: line 1 column 3 (char 2)) "
        "(got '13,31')"
    )
    monkeypatch.setenv("GPUDRA_HEALTH_IGNORED_XIDS", "[13, 31]")
    assert load_settings(AgentSettings, node_name="n").health_ignored_xids == [13, 31]
