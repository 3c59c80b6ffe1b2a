"""MIG facts as NVML reports them: a recording's profiles give the catalog's MIG facts for its model, and the
agent's node report carries them once per model, compactly."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from gpudra.agent.miglayout.applier import MigApplier
from gpudra.agent.miglayout.journal import PlanJournal
from gpudra.hardware.gpus.backend import MigProfileInfo
from gpudra.hardware.gpus.catalog import MIB, load_catalog
from gpudra.hardware.gpus.migfacts import mig_model, mig_spec
from gpudra.hardware.simulated import simulated_backend
from gpudra.mig.desired import NodeReport
from gpudra.mig.keep import place_counts_keeping
from gpudra.mig.layout import GpuMigState
from gpudra.mig.space import placement_space

RECORDINGS = sorted((Path(__file__).parents[1] / "fixtures" / "nvml").glob("*.json"))


@pytest.mark.parametrize("path", RECORDINGS, ids=[p.stem for p in RECORDINGS])
def test_recorded_profiles_give_the_catalogs_mig_facts(path: Path) -> None:
    recording: dict[str, Any] = json.loads(path.read_text())
    for index, profiles in recording["mig_profiles"].items():
        pci_device_id = recording["inventory"]["gpus"][int(index)]["pci_device_id"]
        model = load_catalog().by_pci_device_id(pci_device_id)
        assert model is not None and model.mig is not None
        spec = mig_spec([MigProfileInfo.model_validate(p) for p in profiles])
        assert spec is not None
        assert (spec.memory_slices, spec.compute_slices, spec.max_devices) == (
            model.mig.memory_slices, model.mig.compute_slices, model.mig.max_devices,
        )  # fmt: skip
        facts = ("name", "profile_id", "slice_count", "placement_size", "memory_mib", "starts", "suffix")
        assert [tuple(getattr(p, f) for f in facts) for p in spec.profiles] == [
            tuple(getattr(p, f) for f in facts) for p in model.mig.profiles
        ], "the same profiles in the same order, whatever order NVML listed them in"
        assert (spec.jpeg_capacity, spec.ofa_capacity) == (model.mig.jpeg_capacity, model.mig.ofa_capacity)


@pytest.mark.parametrize("path", RECORDINGS, ids=[p.stem for p in RECORDINGS])
def test_the_facts_place_every_layout_where_the_catalog_does(path: Path) -> None:
    """The controller plans with the catalog's model and the agent creates with the one from its NVML report:
    each counts-only layout, placed on an empty GPU, lands on the same placements from both."""
    recording: dict[str, Any] = json.loads(path.read_text())
    for index, profiles in recording["mig_profiles"].items():
        model = load_catalog().by_pci_device_id(recording["inventory"]["gpus"][int(index)]["pci_device_id"])
        assert model is not None and model.mig is not None
        infos = [MigProfileInfo.model_validate(p) for p in profiles]
        reported = mig_model(model.model_id, model.memory_mib * MIB, infos)
        empty = GpuMigState(model.model_id, int(index), True)
        space = placement_space(model)
        for counts in {tuple(sorted(space.layout_of(bits).counts().items())) for bits in space.layouts}:
            assert place_counts_keeping(reported, empty, dict(counts)) == place_counts_keeping(
                model, empty, dict(counts)
            )


def test_no_placements_no_mig() -> None:
    assert mig_spec([]) is None


def test_the_node_report_carries_each_models_facts_once(tmp_path: Path) -> None:
    node = simulated_backend("dgx-h100", "dgx-h100-0")
    applier = MigApplier(
        node.backend, PlanJournal(tmp_path / "plan.json", node="dgx-h100-0"), node="dgx-h100-0"
    )
    report = asyncio.run(applier.report_gpus())
    assert len(report.gpus) == 8 and [f.model for f in report.models] == ["H100-SXM5-80GB"]
    assert report.models[0].profiles == node.backend.mig_profiles(0)
    text = report.to_json()
    assert len(text) < 8192  # a Node's annotations may hold 256 KiB in all
    parsed = NodeReport.from_json(text)
    assert parsed is not None and parsed.models == report.models
