"""Fleet files (`gpudra up --fleet`): node groups with names, labels, taints, driver versions, MIG configs and
NVLink domains; profiles of one's own in the built-in format; recordings as nodes; errors that name the line."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from textwrap import dedent

import pytest
import yaml

from gpudra.cluster.fleet import parse_fleet
from gpudra.cluster.sim.fleetfile import FleetProfile, load_fleet
from gpudra.errors import ConfigurationError
from gpudra.hardware.simulated import FakeNvml
from gpudra.hardware.simulated.machine import machine_of_profile
from gpudra.hardware.simulated.profiles import NODE_PROFILES

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "sim" / "fleet.yaml"
H100_RECORDING = ROOT / "tests" / "fixtures" / "nvml" / "h100-sxm5-80gb-580.159.04.json"


def fleet_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "fleet.yaml"
    path.write_text(dedent(text).lstrip())
    return path


def test_the_example_fleet() -> None:
    nodes = {n.name: n for n in load_fleet(EXAMPLE)}
    assert list(nodes) == [
        "train-0", "train-1", "infer-0", "infer-1",
        "gb200-nvl72-0", "gb200-nvl72-1", "gb200-nvl72-2", "gb200-nvl72-3", "recorded-h100-0",
    ]  # fmt: skip
    train = nodes["train-0"]
    assert train.labels == {"pool": "training", "topology.kubernetes.io/zone": "zone-a"}
    assert train.taints == ({"key": "dedicated", "value": "training", "effect": "NoSchedule"},)
    infer = nodes["infer-1"].hardware()
    assert (infer.driver_version, infer.cuda_driver_version) == ("570.172.08", 12080)
    for gpu in infer.gpus:
        assert gpu.mig_enabled and [d.profile for d in gpu.mig_devices] == ["1g.10gb"] * 7
    racks = [nodes[f"gb200-nvl72-{i}"].hardware().gpus[0].fabric for i in range(4)]
    assert racks[0] == racks[1] != racks[2] == racks[3]
    assert nodes["gb200-nvl72-3"].fleet_index == 3
    recorded = nodes["recorded-h100-0"].hardware()
    assert recorded.gpus[0].uuid == json.loads(H100_RECORDING.read_text())["inventory"]["gpus"][0]["uuid"]


def test_nodes_flag_is_the_same_fleet_written_short() -> None:
    short = parse_fleet("dgx-a100:2,gb200-nvl72:1", set(NODE_PROFILES))
    assert [(n.name, n.profile, n.fleet_index) for n in short] == [
        ("dgx-a100-0", "dgx-a100", 0), ("dgx-a100-1", "dgx-a100", 1), ("gb200-nvl72-0", "gb200-nvl72", 0),
    ]  # fmt: skip
    assert short[1].hardware() == machine_of_profile(NODE_PROFILES["dgx-a100"], "dgx-a100-1", 1)


def test_built_in_profiles_are_fleet_file_entries(tmp_path: Path) -> None:
    """Each entry of profiles.yaml, renamed, is a valid fleet-file profile giving the same machine."""
    document = yaml.safe_load(
        (ROOT / "operator" / "gpudra" / "hardware" / "simulated" / "profiles.yaml").read_text()
    )
    entries = [FleetProfile.model_validate(e) for e in document["profiles"]]
    assert {e.name for e in entries} == set(NODE_PROFILES)
    copies = [{**raw, "name": f"my-{raw['name']}"} for raw in document["profiles"]]
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump({"profiles": copies, "nodes": [{"profile": c["name"]} for c in copies]}))
    for node in load_fleet(path):
        builtin = node.profile.removeprefix("my-")
        profile = dataclasses.replace(NODE_PROFILES[builtin], name=node.profile)  # GB200 racks derive from it
        assert node.hardware() == machine_of_profile(profile, node.name, 0)


def test_profile_of_ones_own_with_base_gpus_and_mig_entries(tmp_path: Path) -> None:
    path = fleet_file(tmp_path, """
        profiles:
        - name: half-a100
          base: dgx-a100-80gb
          gpus: 4
          mig:
            entries:
            - {devices: [0, 1], mig-enabled: true, mig-devices: {3g.40gb: 2}}
            - {devices: [2], mig-enabled: true, mig-devices: {}}
        nodes:
        - profile: half-a100
    """)  # fmt: skip
    (node,) = load_fleet(path)
    gpus = node.hardware().gpus
    assert len(gpus) == 4
    assert [sorted((d.profile, d.start) for d in g.mig_devices) for g in gpus] == [
        [("3g.40gb", 0), ("3g.40gb", 4)], [("3g.40gb", 0), ("3g.40gb", 4)], [], [],
    ]  # fmt: skip
    assert [g.mig_enabled for g in gpus] == [True, True, True, False]
    nvml = FakeNvml.from_machine(node.hardware())
    assert len(nvml.gpu(0).gpu_instances) == 2


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "nodes:\n- profile: dgx-h100\n  count: 0\n",
            "fleet.yaml:3: nodes[0].count: Input should be greater than or equal to 1",
        ),
        (
            "nodes:\n- profile: dgx-h200\n",
            "fleet.yaml:2: nodes[0].profile: unknown profile 'dgx-h200' (known: a30x4,",
        ),
        (
            "nodes:\n- profile: l4x4\n  lables: {a: b}\n",
            "fleet.yaml:3: nodes[0].lables: Extra inputs are not permitted",
        ),
        (
            "nodes:\n- profile: l4x4\n  labels: {'a b': c}\n",
            "fleet.yaml:3: nodes[0].labels: Value error, 'a b' is not a valid label key",
        ),
        (
            "nodes:\n- profile: l4x4\n  taints: [{key: x, effect: Never}]\n",
            "fleet.yaml:3: nodes[0].taints[0].effect: Input should be 'NoSchedule'",
        ),
        (
            "nodes:\n- profile: l4x4\n  nvlinkDomain: rack-a\n",
            "fleet.yaml:3: nodes[0].nvlinkDomain: GPU 0 (L4) has no NVLink fabric to join",
        ),
        (
            "nodes:\n- profile: dgx-h100\n  mig: {config: all-1g.5gb}\n",
            "fleet.yaml:3: nodes[0].mig.config: 'all-1g.5gb' has no entry for these GPUs (for these GPUs: all-1g.10gb,",
        ),
        (
            "nodes:\n- profile: dgx-h100\n  mig: {config: all-best}\n",
            "nodes[0].mig.config: 'all-best' is not a mig-parted config",
        ),
        (
            "nodes:\n- profile: l4x4\n  mig: {config: all-enabled}\n",
            "nodes[0].mig.entries: NVIDIA L4 (L4) does not support MIG",
        ),
        (
            "nodes:\n- profile: dgx-h100\n  mig:\n    devices:\n    - {profile: 4g.40gb, start: 0}\n"
            "    - {profile: 3g.40gb, start: 0}",
            "fleet.yaml:5: nodes[0].mig.devices: 4g.40gb@0 [0, 4) overlaps 3g.40gb@0 [0, 4)",
        ),
        (
            "nodes:\n- profile: dgx-h100\n  mig: {config: all-balanced, devices: []}\n",
            "nodes[0].mig: Value error, give one of devices, config or entries, not devices and config",
        ),
        (
            "profiles:\n- name: x\n  base: dgx-z\nnodes:\n- profile: x\n",
            "fleet.yaml:3: profiles[0].base: unknown profile 'dgx-z'",
        ),
        (
            "profiles:\n- name: x\n  gpu: Z100\n  gpus: 2\nnodes:\n- profile: x\n",
            "fleet.yaml:3: profiles[0].gpu: unknown GPU model 'Z100'",
        ),
        (
            "profiles:\n- name: x\n  gpu: H100-SXM5-80GB\nnodes:\n- profile: x\n",
            "fleet.yaml:2: profiles[0].gpus: give `gpus` (how many) or `pci`",
        ),
        (
            "profiles:\n- name: x\n  base: dgx-h100\n  mig:\n    devices:\n    - {profile: 1g.10gb, start: 0}\n"
            "    - {profile: 1g.10gb, start: 9}\nnodes:\n- profile: x\n",
            "fleet.yaml:7: profiles[0].mig.devices[1].start: 1g.10gb starts at 0, 1, 2, 3, 4, 5, 6, not 9",
        ),
        (
            "profiles:\n- name: dgx-h100\n  base: dgx-h100\nnodes:\n- profile: dgx-h100\n",
            "fleet.yaml:2: profiles[0].name: profile 'dgx-h100' is defined already",
        ),
        (
            "profiles:\n- name: r\n  recording: nowhere.json\nnodes:\n- profile: r\n",
            "fleet.yaml:3: profiles[0].recording: cannot read the recording",
        ),
        (
            "profiles:\n- name: r\n  recording: x.json\n  gpus: 2\nnodes:\n- profile: r\n",
            "fleet.yaml:2: profiles[0]: Value error, a recorded profile is the node as recorded; remove gpus",
        ),
        ("nodes: []\n", "fleet.yaml:1: nodes: Tuple should have at least 1 item"),
        ("- profile: l4x4\n", "a fleet file is a mapping with `nodes:`"),
        ("nodes:\n- profile: l4x4\n  count: [1\n", "not YAML"),
    ],
)
def test_errors_name_the_line_and_field(tmp_path: Path, text: str, message: str) -> None:
    path = fleet_file(tmp_path, text)
    with pytest.raises(ConfigurationError) as caught:
        load_fleet(path)
    assert message in str(caught.value).replace(str(tmp_path) + "/", "")


def test_several_nodes_of_one_recording_get_uuids_of_their_own(tmp_path: Path) -> None:
    path = fleet_file(tmp_path, f"""
        profiles:
        - {{name: rec, recording: {H100_RECORDING}}}
        nodes:
        - {{profile: rec, count: 2}}
    """)  # fmt: skip
    first, second = (n.hardware().gpus[0].uuid for n in load_fleet(path))
    assert first != second
