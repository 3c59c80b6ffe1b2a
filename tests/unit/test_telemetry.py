"""Logging: the console and a log file at their own levels; kopf's per-event routine kept to DEBUG."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

from gpudra.errors import ConfigurationError
from gpudra.telemetry import configure_logging


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    """The root logger and structlog as they were: configure_logging caches each structlog logger on its first use,
    and a logger cached in a later test would never reach that test's ``capture_logs``."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    config = structlog.get_config()
    yield
    structlog.configure(**config)
    for handler in root.handlers:
        if handler not in handlers:
            handler.close()
    root.handlers[:], root.level = handlers, level


def emit_sample() -> None:
    kopf = logging.getLogger("kopf.objects")
    kopf.info("Handler 'claim_event' succeeded.")
    kopf.info("Resuming is processed: 1 succeeded; 0 failed.")
    kopf.info("Activity 'login' succeeded.")
    logging.getLogger("gpudra.agent").info("slices published")
    logging.getLogger("gpudra.agent").warning("watch failed; re-listing")


def test_file_keeps_info_and_console_only_warnings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "demo" / "gpudra.log"
    configure_logging("console", "INFO", console_level="WARNING", log_file=log)
    emit_sample()
    err = capsys.readouterr().err
    assert "watch failed" in err and "slices published" not in err
    text = log.read_text()
    assert "slices published" in text and "Activity 'login' succeeded." in text
    assert "claim_event" not in text and "is processed" not in text


def test_debug_shows_kopf_routine(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("console", "DEBUG")
    emit_sample()
    err = capsys.readouterr().err
    assert "Handler 'claim_event' succeeded." in err and "slices published" in err


def test_an_unknown_level_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="unknown log level 'LOUD'"):
        configure_logging("console", "LOUD")
