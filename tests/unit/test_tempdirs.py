"""A gpudra up's temporary directory is locked while the run lives; the next run that needs one removes those of
runs that died, and nothing else."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from gpudra.cluster.tempdirs import LOCK_FILE, RunDirectory, sweep


def a_dead_runs_directory(parent: Path) -> Path:
    """What a SIGKILLed gpudra up leaves: its directory, its lock file, no lock held."""
    script = (
        "import tempfile, sys; tempfile.tempdir = sys.argv[1]; from gpudra.cluster.tempdirs import RunDirectory; "
        "d = RunDirectory().path(); (d / 'node-0').mkdir(); print(d)"
    )
    made = subprocess.run(
        [sys.executable, "-c", script, str(parent)], capture_output=True, text=True, timeout=60, check=True
    )
    return Path(made.stdout.strip())


def test_the_directory_of_a_run_that_died_goes_and_a_living_ones_stays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead = a_dead_runs_directory(tmp_path)
    assert (dead / LOCK_FILE).is_file() and (dead / "node-0").is_dir()
    living = RunDirectory()
    path = living.path()  # sweeps first
    assert not dead.exists()
    assert path.parent == tmp_path and path.name.startswith("gpudra-")
    assert (path / LOCK_FILE).read_text() == f"{os.getpid()}\n"
    assert sweep(tmp_path) == [] and path.exists()  # its lock is held
    living.remove()
    assert not path.exists()


def test_directories_that_are_not_a_runs_stay(tmp_path: Path) -> None:
    other = tmp_path / "gpudra-bench-x"
    other.mkdir()  # no lock file: another program's, or an older gpudra's
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / LOCK_FILE).touch()
    (tmp_path / "gpudra-link").symlink_to(tmp_path / "elsewhere")
    (tmp_path / "gpudra-file").touch()
    assert sweep(tmp_path) == []
    assert other.is_dir() and (tmp_path / "elsewhere" / LOCK_FILE).exists()
