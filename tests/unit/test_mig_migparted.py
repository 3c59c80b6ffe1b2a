"""mig-parted ``version: v1`` files: strict parsing, per-GPU selection, and mig-parted's default configs."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from gpudra.mig.migparted import (
    MigConfigEntry,
    MigPartedConfigError,
    default_configs,
    entry_for_gpu,
    parse_entries,
    parse_mig_parted,
)

H100_ID = 0x233010DE
A100_80_ID = 0x20B210DE

FILE = """
version: v1
mig-configs:
  all-disabled:
    - devices: all
      mig-enabled: false
  custom:
    - device-filter: ["0x233010DE"]
      devices: [0, 1]
      mig-enabled: true
      mig-devices: {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}
    - device-filter: "0x20B210DE"
      devices: all
      mig-enabled: true
      mig-devices: {}
"""


def test_parses_a_valid_file() -> None:
    config = parse_mig_parted(yaml.safe_load(FILE))
    assert set(config.configs) == {"all-disabled", "custom"}
    first, second = config.entries("custom")
    assert first.device_filter == (H100_ID,)
    assert first.devices == (0, 1)
    assert first.counts == {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}
    assert second.device_filter == (A100_80_ID,)
    assert second.counts == {}
    assert config.entries("all-disabled") == (MigConfigEntry("all", False),)


def test_round_trips_through_its_document_form() -> None:
    config = parse_mig_parted(yaml.safe_load(FILE))
    assert parse_mig_parted(config.to_document()) == config


def test_selects_the_entry_for_each_gpu() -> None:
    entries = parse_mig_parted(yaml.safe_load(FILE)).entries("custom")
    assert entry_for_gpu(entries, 0, H100_ID) == entries[0]
    assert entry_for_gpu(entries, 2, H100_ID) is None  # index not listed: leave the GPU as it is
    assert entry_for_gpu(entries, 5, A100_80_ID) == entries[1]
    assert entry_for_gpu(entries, 0, 0x20B010DE) is None  # other model


def test_later_entry_wins_when_two_select_a_gpu() -> None:
    entries = parse_entries(
        [
            {"devices": "all", "mig-enabled": False},
            {"devices": [1], "mig-enabled": True, "mig-devices": {"7g.80gb": 1}},
        ]
    )
    assert entry_for_gpu(entries, 1, H100_ID) == entries[1]
    assert entry_for_gpu(entries, 0, H100_ID) == entries[0]


def _entry(**fields: Any) -> list[dict[str, Any]]:
    base: dict[str, Any] = {"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 1}}
    base.update(fields)
    return [{k: v for k, v in base.items() if v is not None}]


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (_entry(migDevices={"1g.10gb": 1}), "unknown field 'migDevices'"),
        (_entry(**{"mig-devices": None}), "field 'mig-devices' is required when mig-enabled is true"),
        (_entry(**{"mig-enabled": False}), "field 'mig-devices' must be empty when mig-enabled is false"),
        (_entry(**{"mig-enabled": "yes"}), "'mig-enabled' is required and must be true or false"),
        (_entry(devices="some"), "expected 'all' or a list of GPU indexes"),
        (_entry(devices=None), "missing field 'devices'"),
        (_entry(**{"device-filter": ["H100"]}), "'H100' is not a PCI device id"),
        (_entry(**{"mig-devices": {"1g.10gb": -1}}), "count must be a non-negative integer"),
        ([], "expected a non-empty list of entries"),
    ],
)
def test_entry_errors_name_the_field(raw: Any, message: str) -> None:
    with pytest.raises(MigPartedConfigError, match=None) as err:
        parse_entries(raw)
    assert message in str(err.value)


def test_file_errors() -> None:
    with pytest.raises(MigPartedConfigError, match="unknown field 'configs'"):
        parse_mig_parted({"version": "v1", "configs": {}})
    with pytest.raises(MigPartedConfigError, match="version must be 'v1'"):
        parse_mig_parted({"version": "v2", "mig-configs": {"a": [{"devices": "all", "mig-enabled": False}]}})
    with pytest.raises(MigPartedConfigError, match=r"mig-configs\.bad\[0\]: unknown field 'extra'"):
        parse_mig_parted(
            {"version": "v1", "mig-configs": {"bad": [{"devices": "all", "mig-enabled": False, "extra": 1}]}}
        )
    with pytest.raises(MigPartedConfigError, match="no mig-parted config named 'nope'"):
        parse_mig_parted(yaml.safe_load(FILE)).entries("nope")


def test_default_config_names() -> None:
    configs = default_configs()
    names = set(configs.configs)
    assert {
        "all-disabled",
        "all-enabled",
        "all-balanced",
        "all-1g.10gb",
        "all-1g.10gb.me",
        "all-7g.80gb",
    } <= names
    assert "all-1g.10gb+me" not in names
    h100 = entry_for_gpu(configs.entries("all-balanced"), 3, H100_ID)
    assert h100 is not None
    assert h100.counts == {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}
    a100_40 = entry_for_gpu(configs.entries("all-balanced"), 0, 0x20B010DE)
    assert a100_40 is not None
    assert a100_40.counts == {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}
    seven = entry_for_gpu(configs.entries("all-1g.10gb"), 0, H100_ID)
    assert seven is not None
    assert seven.counts == {"1g.10gb": 7}
    assert entry_for_gpu(configs.entries("all-disabled"), 0, H100_ID) == MigConfigEntry("all", False)
    enabled = entry_for_gpu(configs.entries("all-enabled"), 0, H100_ID)
    assert enabled is not None
    assert enabled.mig_enabled
    assert enabled.counts == {}
    # the generated file is itself a valid mig-parted file
    assert parse_mig_parted(yaml.safe_load(yaml.safe_dump(configs.to_document()))) == configs
