"""Device counts for the CLI table and metrics."""

from __future__ import annotations

from gpudra.api.dra import Device, DeviceAttribute
from gpudra.devices.summary import summarize


def device(name: str, **attributes: str) -> Device:
    return Device(
        name=name, attributes={key: DeviceAttribute(string=value) for key, value in attributes.items()}
    )


def test_counts_gpus_by_product_and_mig_by_profile() -> None:
    devices = [
        device("gpu-0", type="gpu", productName="NVIDIA H100 80GB HBM3"),
        device("gpu-1", type="gpu", productName="NVIDIA H100 80GB HBM3"),
        device("gpu-2", type="gpu", productName="NVIDIA L4"),
        device("gpu-3-mig-1g10gb-19-0", type="mig", profile="1g.10gb"),
        device("gpu-3-mig-1g10gb-19-1", type="mig", profile="1g.10gb"),
        device("gpu-3-mig-3g40gb-9-4", type="mig", profile="3g.40gb"),
        device("channel-0", type="channel"),
        Device(name="odd"),
    ]
    summary = summarize(devices)
    assert (summary.total, summary.gpus, summary.migs) == (8, 3, 3)
    assert summary.by_type == {"channel": 1, "gpu": 3, "mig": 3, "unknown": 1}
    assert summary.rows() == [
        ("gpu", "NVIDIA H100 80GB HBM3", 2),
        ("gpu", "NVIDIA L4", 1),
        ("mig", "1g.10gb", 2),
        ("mig", "3g.40gb", 1),
        ("channel", "", 1),
        ("unknown", "", 1),
    ]


def test_no_devices_is_an_empty_summary() -> None:
    summary = summarize([])
    assert (summary.total, summary.gpus, summary.migs, summary.rows()) == (0, 0, 0, [])
