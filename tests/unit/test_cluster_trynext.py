"""The "Try next" lines of ``gpudra up`` where no clone's examples/ is at hand, or no virtual environment or kubectl
(tests/e2e/test_try_next.py runs the full set, as typed, against a running cluster)."""

from __future__ import annotations

from pathlib import Path

from gpudra.cluster.trynext import KUBECTL_INSTALL, Shell, try_next


def test_outside_a_clone_no_example_is_offered_and_gpudra_is_called_as_it_can_be_found(
    tmp_path: Path,
) -> None:
    shell = Shell(directory=tmp_path, activate=None, gpudra="/usr/bin/python3 -m gpudra", kubectl_found=True)
    lines = try_next(tmp_path / "demo" / "kubeconfig", shell)
    assert [line.split("#")[0].strip() for line in lines] == [
        f"export KUBECONFIG={tmp_path / 'demo' / 'kubeconfig'}",
        "kubectl get resourceslices",
        "/usr/bin/python3 -m gpudra status -o wide",
    ]


def test_in_a_clone_the_venv_is_activated_by_its_path_from_there_and_a_missing_kubectl_is_named(
    tmp_path: Path,
) -> None:
    (tmp_path / "examples").mkdir()
    for name in ("gpu-pod.yaml", "gpu-pod-too-big.yaml"):
        (tmp_path / "examples" / name).touch()
    shell = Shell(tmp_path, tmp_path / ".venv" / "bin" / "activate", "gpudra", kubectl_found=False)
    lines = try_next(Path("kc"), shell)
    assert lines[0] == f"cd {tmp_path}"
    assert lines[1].startswith("source .venv/bin/activate ")
    assert lines[2] == f"export KUBECONFIG={Path('kc').resolve()}"
    assert lines[-1] == f"# kubectl is not on PATH: {KUBECTL_INSTALL}"
