"""The GPU catalog and the simulated NVML, checked against NVML readings recorded on real GPUs.

Every ``tests/fixtures/nvml/*.json`` is a ``gpudra hardware record`` of one node. The catalog must hold the
numbers the hardware reported, and a simulated node of the same model, in the same environment, must answer the
recorder's queries as the hardware did, so gpudra's inventory and published devices come out the same.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpudra.api.dra import Device
from gpudra.cli import main
from gpudra.devices.build import build_devices
from gpudra.hardware.gpus.catalog import MIB, Catalog, GpuModel, load_catalog
from gpudra.hardware.gpus.inventory import MigDeviceInfo, NodeInventory
from gpudra.hardware.nvml.backend import NvmlBackend
from gpudra.hardware.nvml.recording import ReadOnlyNvml, ReadOnlyViolation, record
from gpudra.hardware.simulated import FakeNvml
from gpudra.hardware.simulated.profiles import FabricKind, GpuSlot, NodeProfile

FIXTURES = Path(__file__).parents[1] / "fixtures" / "nvml"
RECORDINGS = sorted(FIXTURES.glob("*.json"))
# What depends on the machine a GPU sits in rather than on the GPU model and driver.
MACHINE_FIELDS = {"uuid", "numa_node", "fabric", "virtualization_mode", "nvlink_link_count", "pci", "index"}


@pytest.fixture(params=RECORDINGS, ids=[p.stem for p in RECORDINGS])
def recording(request: pytest.FixtureRequest) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(Path(request.param).read_text())
    return data


def _model(gpu: dict[str, Any]) -> GpuModel:
    model = load_catalog().by_pci_device_id(gpu["pci"]["device_id"])
    assert model is not None, (
        f"no catalog model has PCI device id {gpu['pci']['device_id']:#x} ({gpu['name']})"
    )
    return model


def test_recordings_exist_and_name_their_driver() -> None:
    assert RECORDINGS, f"no recordings in {FIXTURES}"
    for path in RECORDINGS:
        driver = json.loads(path.read_text())["system"]["driver_version"]
        assert path.stem.endswith(f"-{driver}"), f"{path.name} must end with its driver version {driver}"


def test_device_facts_match_the_catalog(recording: dict[str, Any]) -> None:
    for gpu in recording["gpus"]:
        model = _model(gpu)
        assert gpu["name"] == model.product_name
        assert gpu["brand"] == {"value": model.brand_constant, "name": model.brand}
        assert gpu["architecture"] == {"value": model.architecture_constant, "name": model.architecture}
        assert gpu["cuda_compute_capability"] == model.compute_capability
        assert gpu["memory_total_bytes"] == model.memory_mib * MIB
        assert ("error" not in gpu["mig_mode"]) == model.mig_capable
        if gpu["nvlink_link_count"].get("return") == "NVML_SUCCESS":
            assert gpu["nvlink_link_count"]["value"] == model.nvlink_count


def test_mig_profiles_and_placements_match_the_catalog(recording: dict[str, Any]) -> None:
    for gpu in recording["gpus"]:
        model = _model(gpu)
        assert model.mig is not None
        readable = {p["constant"]: p for p in gpu["gpu_instance_profiles"] if "info" in p}
        constants = [p.constant for p in model.mig.profiles]
        assert None not in constants  # the catalog names each profile's NVML constant
        assert sorted(readable) == sorted(c for c in constants if c is not None)
        for profile in model.mig.profiles:
            recorded = readable[profile.constant]
            expected = {
                "id": profile.profile_id,
                "name": f"MIG {profile.name}",
                "sliceCount": profile.slice_count,
                "instanceCount": profile.instance_count,
                "multiprocessorCount": profile.multiprocessors,
                "memorySizeMB": profile.memory_mib,
                "copyEngineCount": profile.copy_engines,
                "decoderCount": profile.decoders,
                "encoderCount": profile.encoders,
                "jpegCount": profile.jpeg_engines,
                "ofaCount": profile.ofa_engines,
            }
            assert {key: recorded["info"][key] for key in expected} == expected, profile.name
            placements = [(p["start"], p["size"]) for p in recorded["placements"]]
            assert placements == [(start, profile.placement_size) for start in profile.starts], profile.name


def _replica(recording: dict[str, Any]) -> FakeNvml:
    """A simulated node of the recorded model in the recorded environment (bus ids, driver, NVLink seen)."""
    gpus = recording["inventory"]["gpus"]
    model = _model(recording["gpus"][0])
    nvlinks = recording["gpus"][0]["nvlink_link_count"]
    if nvlinks.get("return") != "NVML_SUCCESS":  # a VM without NVLink hides the links
        model = model.model_copy(update={"nvlink_count": 0})
    system = recording["system"]
    node = NodeProfile(
        name="replica",
        model_id=model.model_id,
        slots=tuple(GpuSlot(g["pci_bus_id"], g["numa_node"], g["pcie_root"]) for g in gpus),
        fabric=FabricKind.UNSUPPORTED,
        addressing_mode=gpus[0]["addressing_mode"],
        driver_version=system["driver_version"],
        cuda_driver_version=system["cuda_driver_version"],
    )
    catalog = Catalog(models={**load_catalog().models, model.model_id: model})
    return FakeNvml.from_profile(node, node_name=recording["inventory"]["node_name"], catalog=catalog)


def _comparable_gpu(gpu: dict[str, Any]) -> dict[str, Any]:
    """A recorded GPU without machine-specific fields; NVML error codes reduced to "failed" (the driver picks
    INVALID_ARGUMENT or NOT_SUPPORTED for profile constants it lacks, and gpudra treats both alike)."""
    result = {key: value for key, value in gpu.items() if key not in MACHINE_FIELDS}
    result["pci_device_id"] = gpu["pci"]["device_id"]
    result["gpu_instance_profiles"] = [
        {**p, "error": "failed"} if "error" in p else p for p in gpu["gpu_instance_profiles"]
    ]
    return result


def test_the_simulation_answers_the_recorder_as_the_hardware_did(recording: dict[str, Any]) -> None:
    simulated = record(NvmlBackend("replica", ReadOnlyNvml(_replica(recording))))
    assert simulated["system"] == recording["system"]
    for real_gpu, sim_gpu in zip(recording["gpus"], simulated["gpus"], strict=True):
        assert _comparable_gpu(sim_gpu) == _comparable_gpu(real_gpu)
    assert simulated["mig_profiles"] == recording["mig_profiles"]


def test_the_simulation_gives_the_same_inventory_and_devices(recording: dict[str, Any]) -> None:
    simulated = record(NvmlBackend(recording["inventory"]["node_name"], ReadOnlyNvml(_replica(recording))))
    real_inventory = NodeInventory.model_validate(recording["inventory"])
    sim_inventory = NodeInventory.model_validate(simulated["inventory"])
    machine = {"uuid", "fabric"}
    for real_gpu, sim_gpu in zip(real_inventory.gpus, sim_inventory.gpus, strict=True):
        assert sim_gpu.model_dump(exclude=machine) == real_gpu.model_dump(exclude=machine)

    def published(inventory: NodeInventory) -> list[dict[str, Any]]:
        devices = [d.model_dump(mode="json", exclude_none=True) for d in build_devices(inventory)]
        for device in devices:
            device["attributes"].pop("uuid")
        return devices

    assert published(sim_inventory) == published(real_inventory)


def test_recorder_reads_existing_mig_and_compute_instances() -> None:
    nvml = FakeNvml.from_profile("dgx-a100", node_name="node-0")
    recording = record(NvmlBackend("node-0", ReadOnlyNvml(nvml)))
    json.dumps(recording)  # JSON-ready
    gpu = recording["gpus"][0]
    mig_devices = recording["inventory"]["gpus"][0]["mig_devices"]
    assert gpu["mig_mode"] == {"current": 1, "pending": 1}
    assert gpu["max_mig_device_count"] == 7
    instances = sorted((g["profile_id"], g["start"], g["size"]) for g in gpu["gpu_instances"])
    assert instances == sorted(
        (d["gi_profile_id"], d["placement_start"], d["placement_size"]) for d in mig_devices
    )
    one_g = next(g for g in gpu["gpu_instances"] if g["profile_id"] == 19)  # 1g.5gb: one 1-slice CI profile
    assert [p["info"]["sliceCount"] for p in one_g["compute_instance_profiles"] if "info" in p] == [1]
    assert len(one_g["compute_instances"]) == 1
    assert isinstance(gpu["compute_instance_profiles"]["19"], list)
    assert gpu["compute_instance_profiles"]["0"].startswith("not readable")  # no 7g instance exists


def test_recorder_never_changes_the_gpu() -> None:
    nvml = FakeNvml.from_profile("dgx-h100", node_name="node-0")
    read_only = ReadOnlyNvml(nvml)
    read_only.nvmlInit()
    assert read_only.nvmlDeviceGetCount() == 8
    assert read_only.NVML_ERROR_IN_USE == nvml.NVML_ERROR_IN_USE
    for name in (
        "nvmlDeviceSetMigMode",
        "nvmlDeviceCreateGpuInstance",
        "nvmlGpuInstanceDestroy",
        "nvmlEventSetCreate",
    ):
        with pytest.raises(ReadOnlyViolation, match=name):
            getattr(read_only, name)
    backend = NvmlBackend("node-0", read_only)
    with pytest.raises(ReadOnlyViolation):
        backend.set_mig_mode(0, True)
    assert nvml.gpu(0).mig_pending is False


def test_hardware_record_command_writes_a_recording(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "a30.json"
    assert main(["hardware", "record", "--simulated-profile", "a30x4", "--output", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["recorded_with"]["binding"] == "simulated:a30x4"
    assert [g["name"] for g in data["gpus"]] == ["NVIDIA A30"] * 4
    assert {d["name"] for d in data["devices"]} >= {"gpu-0", "gpu-3"}
    assert main(["hardware", "record", "--simulated-profile", "no-such-node"]) == 2
    assert "unknown node profile 'no-such-node'" in capsys.readouterr().err


def _attribute_keys(devices: list[dict[str, Any]]) -> set[str]:
    return {key for device in devices for value in device["attributes"].values() for key in value}


def test_hardware_record_writes_attribute_values_by_their_api_names(tmp_path: Path) -> None:
    out = tmp_path / "h100.json"
    assert main(["hardware", "record", "--simulated-profile", "dgx-h100", "--output", str(out)]) == 0
    keys = _attribute_keys(json.loads(out.read_text())["devices"])
    assert {"int", "string", "version"} <= keys
    assert not keys & {"int_", "bool_"}


def test_recorded_devices_read_the_same_in_either_spelling(recording: dict[str, Any]) -> None:
    devices = [Device.model_validate(d) for d in recording["devices"]]
    api = [d.to_wire() for d in devices]
    field_names = [d.model_dump(mode="json", exclude_none=True) for d in devices]
    assert "int_" in _attribute_keys(field_names)  # the spelling of recordings written before
    assert [Device.model_validate(d) for d in api] == devices
    assert [Device.model_validate(d) for d in field_names] == devices


def _full_gpu_instance(nvml: FakeNvml, gpu: int) -> tuple[MigDeviceInfo, dict[str, Any]]:
    """On an emptied MIG GPU, the instance of the profile spanning all compute slices (7g), created as claims
    create theirs; with the recorder's view of that GPU instance."""
    backend = NvmlBackend("node-0", nvml)
    backend.set_mig_mode(gpu, True)
    for instance in backend.gpu_instances(gpu):
        backend.destroy_mig_device(gpu, instance.gi_id)
    largest = max(backend.mig_profiles(gpu), key=lambda p: p.slice_count)
    created = backend.create_mig_device(gpu, largest.profile, largest.placements[0])
    recorded = record(NvmlBackend("node-0", ReadOnlyNvml(nvml)))["gpus"][gpu]
    (gi,) = [g for g in recorded["gpu_instances"] if g.get("id") == created.gi_id]
    return created, gi


def test_the_a100_7g_40gb_gets_the_compute_instance_that_exists() -> None:
    """NVIDIA's driver asked for compute-instance profile 8 on an A100 7g.40gb (7 compute slices in 8 memory
    slices) and NVML said NOT_SUPPORTED (their #1480). gpudra picks the compute instance whose slice count is the
    GPU instance's: 7c.7g.40gb, the largest of the five the GPU instance lists."""
    created, gi = _full_gpu_instance(FakeNvml.from_profile("dgx-a100", node_name="node-0"), 0)
    assert (created.profile, created.placement_size) == ("7g.40gb", 8)
    ci_profiles = [p["info"] for p in gi["compute_instance_profiles"] if "info" in p]
    assert sorted(p["sliceCount"] for p in ci_profiles) == [1, 2, 3, 4, 7]
    (ci,) = gi["compute_instances"]
    assert next(p for p in ci_profiles if p["id"] == ci["profile_id"])["sliceCount"] == 7
    assert created.multiprocessors == 98


def test_the_recorded_7g_profiles_have_7_compute_slices_in_8_memory_slices(recording: dict[str, Any]) -> None:
    """What misled NVIDIA's driver, in the readings of real GPUs: the 7g GPU instance's sliceCount (compute
    slices, what the compute instance must match) is 7 while its placements span 8 memory slices; the simulation
    of the recorded model then creates the compute instance of 7 slices."""
    for gpu in recording["gpus"]:
        (seven,) = [
            p
            for p in gpu["gpu_instance_profiles"]
            if p.get("constant_name") == "NVML_GPU_INSTANCE_PROFILE_7_SLICE"
        ]
        assert seven["info"]["sliceCount"] == 7
        assert [(p["start"], p["size"]) for p in seven["placements"]] == [(0, 8)]
    created, gi = _full_gpu_instance(_replica(recording), 0)
    (ci,) = gi["compute_instances"]
    ci_profile = next(
        p["info"] for p in gi["compute_instance_profiles"] if p.get("info", {}).get("id") == ci["profile_id"]
    )
    assert (created.placement_size, ci_profile["sliceCount"]) == (8, 7)
