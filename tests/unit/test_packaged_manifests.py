"""The manifests and CRDs that ``gpudra up --control-plane kubernetes`` applies ship in the wheel (#33): a
pip-installed gpudra, not a checkout, has them (it said "manifests/base has none: run gpudra up from a checkout");
and the wheel builds without a deprecation warning (#39)."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import yaml

from gpudra.cluster.kubernetes.bootstrap import repo_manifests

ROOT = Path(__file__).resolve().parents[2]


def test_the_package_holds_the_base_and_its_crds() -> None:
    base = repo_manifests()
    listed = yaml.safe_load((base / "kustomization.yaml").read_text())["resources"]
    for entry in listed:
        assert (base / entry).exists(), entry  # ../../crds included
    assert (base / "../../crds/kustomization.yaml").resolve().read_text() == (
        ROOT / "crds" / "kustomization.yaml"
    ).read_text()


def test_the_wheel_carries_them(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-v", "-w", str(tmp_path),
         str(ROOT)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    # a cold `make demo` printed setuptools' "project.license as a TOML table is deprecated" three times (#39)
    assert "deprecat" not in (done.stdout + done.stderr).lower()
    (wheel,) = tmp_path.glob("gpudra-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for path in (ROOT / "manifests" / "base").glob("*.yaml"):
        assert f"gpudra/deploy/manifests/base/{path.name}" in names
    for path in (ROOT / "crds").glob("*.yaml"):
        assert f"gpudra/deploy/crds/{path.name}" in names
