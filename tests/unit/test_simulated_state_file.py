"""The simulated GPUs' state file (``GPUDRA_SIMULATED_STATE``): what a killed agent finds again when it starts, as
real GPUs keep their MIG mode and instances. A call about one GPU pickles that GPU alone to see whether the file
must be written, and the file holds each GPU pickled apart; files written before that still load."""

from __future__ import annotations

import itertools
import pickle
from pathlib import Path

import pytest

from gpudra.hardware.nvml.backend import NvmlBackend
from gpudra.hardware.simulated import fake_nvml_base
from gpudra.hardware.simulated.fake_nvml import FakeNvml

NODE = "dgx-1"


def node(state: Path) -> tuple[FakeNvml, NvmlBackend]:
    fake = FakeNvml.from_profile("dgx-h100", node_name=NODE)
    fake.persist_to(state)
    return fake, NvmlBackend(NODE, nvml=fake)


def reloaded(state: Path) -> NvmlBackend:
    return NvmlBackend(NODE, nvml=FakeNvml.load(state, keep_persisting=False))


def test_what_a_call_changed_on_one_gpu_is_found_again_with_the_others(tmp_path: Path) -> None:
    state = tmp_path / "gpus.state"
    _, backend = node(state)
    backend.set_mig_mode(1, True)
    backend.set_mig_mode(3, True)
    made = backend.create_mig_device(3, "1g.10gb", 2)
    backend.create_mig_device(1, "3g.40gb", 4)
    assert reloaded(state).read_inventory() == backend.read_inventory()
    backend.destroy_mig_device(3, made.gi_id)
    again = reloaded(state).read_inventory()
    assert again == backend.read_inventory()
    assert [len(g.mig_devices) for g in again.gpus] == [0, 1, 0, 0, 0, 0, 0, 0]


def test_a_call_that_changes_nothing_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    state = tmp_path / "gpus.state"
    _, backend = node(state)
    writes: list[Path] = []
    write = fake_nvml_base.write_atomically

    def counted(path: Path, data: bytes) -> None:
        writes.append(path)
        write(path, data)

    monkeypatch.setattr(fake_nvml_base, "write_atomically", counted)
    backend.set_mig_mode(2, True)
    assert writes == [state]
    backend.set_mig_mode(2, True)  # already on
    backend.read_inventory()
    assert writes == [state]


def test_instances_made_after_a_restart_get_handles_of_their_own(tmp_path: Path) -> None:
    state = tmp_path / "gpus.state"
    _, backend = node(state)
    backend.set_mig_mode(0, True)
    first = backend.create_mig_device(0, "1g.10gb", 0)
    after = NvmlBackend(NODE, nvml=FakeNvml.load(state))
    second = after.create_mig_device(0, "1g.10gb", 1)
    devices = after.read_inventory().gpus[0].mig_devices
    assert {d.uuid for d in devices} == {first.uuid, second.uuid}
    assert len({(d.gi_id, d.ci_id) for d in devices}) == 2
    assert reloaded(state).read_inventory() == after.read_inventory()


class _CountAsPickled:
    """Pickled as the ``itertools.count`` such a file holds (pickling a count itself is deprecated from Python 3.12
    and refused from 3.14; loading one stays possible)."""

    def __init__(self, start: int) -> None:
        self.start = start

    def __reduce__(self) -> tuple[type[itertools.count[int]], tuple[int]]:
        return itertools.count, (self.start,)


def test_a_state_file_of_the_gpus_themselves_still_loads(tmp_path: Path) -> None:
    """The format before 2026-12-01: the GPUs pickled in one piece, each with its serials in a count."""
    fake, backend = node(tmp_path / "new.state")
    backend.set_mig_mode(5, True)
    made = backend.create_mig_device(5, "2g.20gb", 0)
    gpus = fake._all
    for gpu in gpus:
        gpu._serials = _CountAsPickled(gpu.__dict__.pop("_last_serial") + 1)  # type: ignore[attr-defined]
    old = tmp_path / "old.state"
    old.write_bytes(pickle.dumps(fake_nvml_base._SavedState(gpus, "580.65.06", 13000)))
    loaded = NvmlBackend(NODE, nvml=FakeNvml.load(old))
    assert [d.uuid for d in loaded.read_inventory().gpus[5].mig_devices] == [made.uuid]
    second = loaded.create_mig_device(5, "2g.20gb", 2)
    assert {d.uuid for d in reloaded(old).read_inventory().gpus[5].mig_devices} == {made.uuid, second.uuid}
