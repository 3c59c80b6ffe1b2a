"""CDI spec building and the per-claim spec files."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from gpudra.agent.cdi import (
    CONTROL_DEVICE_NODES,
    CDIDevice,
    CDISpec,
    ClaimDevice,
    ClaimSpecDir,
    ContainerEdits,
    DeviceNode,
    Mount,
    build_claim_spec,
    claim_device_id,
    gpu_device_nodes,
    mig_device_nodes,
    qualified_name,
    required_version,
)
from gpudra.errors import InvalidInputError

CLAIM = "6f1c3e2a-0b4d-4c1e-9a7f-2d5e8b9c0a11"
PLAIN = ContainerEdits(env=["A=1"])


def spec(
    name: str = "gpu-0",
    edits: ContainerEdits = PLAIN,
    *,
    class_name: str = "claim",
    annotations: dict[str, str] | None = None,
    device_annotations: dict[str, str] | None = None,
) -> CDISpec:
    return CDISpec(
        vendor="k8s.gpu.nvidia.com",
        class_name=class_name,
        devices=[CDIDevice(name, edits, device_annotations or {})],
        annotations=annotations or {},
    )


@pytest.mark.parametrize(
    ("cdi_spec", "version"),
    [
        (spec(), "0.3.0"),
        (spec(edits=ContainerEdits(mounts=[Mount("/a", "/b", type="bind")])), "0.4.0"),
        (spec(name=f"{CLAIM}-gpu-0"), "0.5.0"),
        (
            spec(edits=ContainerEdits(device_nodes=[DeviceNode("/dev/nvidia0", host_path="/dev/nvidia3")])),
            "0.5.0",
        ),
        (spec(annotations={"gpudra.dev/claim": CLAIM}), "0.6.0"),
        (spec(device_annotations={"gpudra.dev/uuid": "GPU-1"}), "0.6.0"),
        (spec(class_name="claim.v2"), "0.6.0"),
        (spec(edits=ContainerEdits(additional_gids=[44])), "0.7.0"),
        (spec(name=f"{CLAIM}-gpu-0", edits=ContainerEdits(additional_gids=[44])), "0.7.0"),
    ],
)
def test_lowest_cdi_version_the_content_needs(cdi_spec: CDISpec, version: str) -> None:
    assert required_version(cdi_spec) == version
    assert cdi_spec.to_json()["cdiVersion"] == version


@pytest.mark.parametrize(
    ("vendor", "class_name", "device", "problem"),
    [
        ("k8s.gpu.nvidia.com", "claim", "gpu-0", None),
        ("k8s.gpu.nvidia.com", "claim", f"{CLAIM}-gpu-0-mig-1g12gb-19-0", None),
        ("k8s.gpu.nvidia.com", "claim", "a:b_c.d", None),
        ("1vendor.com", "claim", "gpu-0", "vendor"),
        ("vendor.com.", "claim", "gpu-0", "vendor"),
        ("k8s.gpu.nvidia.com", "claim/x", "gpu-0", "class"),
        ("k8s.gpu.nvidia.com", "-claim", "gpu-0", "class"),
        ("k8s.gpu.nvidia.com", "claim", "gpu/0", "device name"),
        ("k8s.gpu.nvidia.com", "claim", "-gpu-0", "device name"),
        ("k8s.gpu.nvidia.com", "claim", "gpu-0-", "device name"),
        ("k8s.gpu.nvidia.com", "claim", "", "device name"),
    ],
)
def test_name_validation(vendor: str, class_name: str, device: str, problem: str | None) -> None:
    if problem is None:
        assert qualified_name(vendor, class_name, device) == f"{vendor}/{class_name}={device}"
    else:
        with pytest.raises(InvalidInputError, match=f"CDI {problem}"):
            qualified_name(vendor, class_name, device)


def test_invalid_specs_are_refused() -> None:
    with pytest.raises(InvalidInputError, match="twice"):
        CDISpec("k8s.gpu.nvidia.com", "claim", [CDIDevice("a", PLAIN), CDIDevice("a", PLAIN)]).to_json()
    with pytest.raises(InvalidInputError, match="no devices"):
        CDISpec("k8s.gpu.nvidia.com", "claim", []).to_json()
    with pytest.raises(InvalidInputError, match="not NAME=value"):
        spec(edits=ContainerEdits(env=["JUSTANAME"])).to_json()
    with pytest.raises(InvalidInputError, match="not absolute"):
        spec(edits=ContainerEdits(device_nodes=[DeviceNode("dev/nvidia0")])).to_json()


MPS_CLIENT = ContainerEdits(
    env=["CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps"],
    mounts=[Mount("/var/lib/gpudra/mps/x/pipe", "/tmp/nvidia-mps", ["rw", "bind"])],
)


def claim_spec() -> CDISpec:
    return build_claim_spec(
        CLAIM,
        [
            ClaimDevice("gpu-0", ["GPU-aaaa"], ContainerEdits(device_nodes=gpu_device_nodes(0))),
            ClaimDevice(
                "gpu-1-mig-1g12gb-19-0",
                ["MIG-bbbb"],
                ContainerEdits(device_nodes=mig_device_nodes(1, 21, 22)) + MPS_CLIENT,
            ),
        ],
    )


def test_claim_spec_json_shape() -> None:
    """Spec-wide: control nodes and every UUID of the claim; a device's own nodes and (an MPS device's) client
    setup in that device's edits, so a container given only the other device never sees them."""
    body = claim_spec().to_json()
    assert body == {
        "cdiVersion": "0.5.0",
        "kind": "k8s.gpu.nvidia.com/claim",
        "devices": [
            {"name": f"{CLAIM}-gpu-0", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0"}]}},
            {
                "name": f"{CLAIM}-gpu-1-mig-1g12gb-19-0",
                "containerEdits": {
                    "env": ["CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps"],
                    "deviceNodes": [
                        {"path": "/dev/nvidia1"},
                        {"path": "/dev/nvidia-caps/nvidia-cap21"},
                        {"path": "/dev/nvidia-caps/nvidia-cap22"},
                    ],
                    "mounts": [
                        {
                            "hostPath": "/var/lib/gpudra/mps/x/pipe",
                            "containerPath": "/tmp/nvidia-mps",
                            "options": ["rw", "bind"],
                        }
                    ],
                },
            },
        ],
        "containerEdits": {
            "env": ["NVIDIA_VISIBLE_DEVICES=GPU-aaaa,MIG-bbbb"],
            "deviceNodes": [{"path": n.path} for n in CONTROL_DEVICE_NODES],
        },
    }
    assert claim_spec().qualified_ids() == [
        claim_device_id(CLAIM, "gpu-0"),
        claim_device_id(CLAIM, "gpu-1-mig-1g12gb-19-0"),
    ]
    assert claim_device_id(CLAIM, "gpu-0") == f"k8s.gpu.nvidia.com/claim={CLAIM}-gpu-0"


def test_a_dev_root_puts_the_host_side_of_nvidia_device_nodes_under_it() -> None:
    """Under the GPU Operator the driver's /dev may live under /run/nvidia/driver on the host: the runtime must read
    the nodes there, and the container still sees /dev/nvidia*. Nodes with numbers of their own (IMEX channels)
    and nodes that are not NVIDIA's (VFIO) are left as they are."""
    channel = DeviceNode("/dev/nvidia-caps-imex-channels/channel0", type="c", major=508, minor=0)
    vfio = DeviceNode("/dev/vfio/12")
    spec = build_claim_spec(
        CLAIM,
        [
            ClaimDevice(
                "gpu-1-mig-1g12gb-19-0",
                ["MIG-bbbb"],
                ContainerEdits(device_nodes=mig_device_nodes(1, 21, 22)),
            ),
            ClaimDevice("other", [], ContainerEdits(device_nodes=[channel, vfio])),
        ],
        dev_root="/run/nvidia/driver/",
    ).to_json()
    mig, other = (d["containerEdits"]["deviceNodes"] for d in spec["devices"])
    assert [(n["path"], n["hostPath"]) for n in mig] == [
        (path, f"/run/nvidia/driver{path}")
        for path in ("/dev/nvidia1", "/dev/nvidia-caps/nvidia-cap21", "/dev/nvidia-caps/nvidia-cap22")
    ]
    assert [n.get("hostPath") for n in other] == [None, None]
    assert {n["hostPath"] for n in spec["containerEdits"]["deviceNodes"]} == {
        f"/run/nvidia/driver{n.path}" for n in CONTROL_DEVICE_NODES
    }
    gpu = [ClaimDevice("gpu-0", ["GPU-aaaa"], ContainerEdits(device_nodes=gpu_device_nodes(0)))]
    assert build_claim_spec(CLAIM, gpu, dev_root="/").to_json() == build_claim_spec(CLAIM, gpu).to_json()


def test_device_node_fields_use_cdi_spelling() -> None:
    node = DeviceNode("/dev/nvidia0", host_path="/dev/nvidia0", type="c", major=195, minor=0, file_mode=0o666)
    assert node.to_json() == {
        "path": "/dev/nvidia0",
        "hostPath": "/dev/nvidia0",
        "type": "c",
        "major": 195,
        "minor": 0,
        "fileMode": 0o666,
    }


def test_write_list_delete(tmp_path: Path) -> None:
    specs = ClaimSpecDir(tmp_path / "cdi")
    assert specs.claim_uids() == []
    path = specs.write(CLAIM, claim_spec())
    assert path == tmp_path / "cdi" / f"k8s.gpu.nvidia.com-claim_{CLAIM}.json"
    assert json.loads(path.read_text()) == claim_spec().to_json()
    assert specs.read(CLAIM) == claim_spec().to_json()
    specs.write("second-claim", build_claim_spec("second-claim", [ClaimDevice("gpu-2", ["GPU-c"], PLAIN)]))
    (tmp_path / "cdi" / "k8s.gpu.nvidia.com-device_base.json").write_text("{}")  # not a claim file
    (tmp_path / "cdi" / "other-vendor-claim_x.json").write_text("{}")
    assert specs.claim_uids() == sorted([CLAIM, "second-claim"])
    assert specs.delete(CLAIM) is True
    assert specs.delete(CLAIM) is False
    assert specs.read(CLAIM) is None
    assert specs.claim_uids() == ["second-claim"]


def test_rewrite_is_atomic_and_leaves_no_temp_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    specs = ClaimSpecDir(tmp_path)
    specs.write(CLAIM, claim_spec())
    before = (tmp_path / f"k8s.gpu.nvidia.com-claim_{CLAIM}.json").read_text()
    specs.write(CLAIM, claim_spec())
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"k8s.gpu.nvidia.com-claim_{CLAIM}.json"]

    def crash(src: object, dst: object) -> None:
        raise OSError("power cut")

    monkeypatch.setattr(os, "replace", crash)
    other = build_claim_spec(CLAIM, [ClaimDevice("gpu-7", ["GPU-z"], PLAIN)])
    with pytest.raises(OSError, match="power cut"):
        specs.write(CLAIM, other)
    assert (tmp_path / f"k8s.gpu.nvidia.com-claim_{CLAIM}.json").read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"k8s.gpu.nvidia.com-claim_{CLAIM}.json"]


def test_specs_are_written_and_deleted_without_waiting_for_the_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the checkpoint is the durable record; the agent's start repairs specs (test_prepare_recovery.py)
    synced: list[int] = []
    monkeypatch.setattr(os, "fsync", synced.append)
    specs = ClaimSpecDir(tmp_path)
    specs.write(CLAIM, claim_spec())
    specs.write_document(CLAIM, claim_spec().to_json())
    assert specs.delete(CLAIM) is True
    assert synced == []


def test_temp_files_left_by_a_crash_are_ignored_and_cleaned(tmp_path: Path) -> None:
    specs = ClaimSpecDir(tmp_path)
    leftover = tmp_path / f".k8s.gpu.nvidia.com-claim_{CLAIM}.json.x1y2.tmp"
    leftover.write_text('{"cdiVers')
    assert specs.claim_uids() == []
    assert specs.remove_temp_files() == [leftover]
    assert not leftover.exists()


def test_claim_uid_cannot_escape_the_directory(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="cannot name a CDI spec file"):
        ClaimSpecDir(tmp_path).path_for("../../etc/passwd")


def test_spec_of_another_class_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="does not belong"):
        ClaimSpecDir(tmp_path).write(CLAIM, spec(class_name="device"))
