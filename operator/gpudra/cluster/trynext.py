"""The "Try next" lines ``gpudra up`` prints once it is up: commands that run as printed, in its terminal or in a
new one (#39). They start with what a new terminal lacks: the directory the examples are relative to, the virtual
environment that puts ``gpudra`` and ``kubectl-gpudra`` on PATH, and the KUBECONFIG. Then a pod that gets a GPU
and prints it, and a pod that cannot fit, with its explanation.

:func:`current_shell` reads the process's environment; :func:`try_next` is pure.
"""

from __future__ import annotations

import shlex
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

EXAMPLE_POD = Path("examples/gpu-pod.yaml")  # pod gpu-pod, one GPU, nvidia-smi -L
EXAMPLE_TOO_BIG = Path(
    "examples/gpu-pod-too-big.yaml"
)  # pod too-big, claim sixteen-gpus: 16 GPUs on one node
KUBECTL_INSTALL = "https://kubernetes.io/docs/tasks/tools/"


@dataclass(frozen=True)
class Shell:
    """Where the printed commands are to run, and what a new terminal needs before them."""

    directory: Path  # where gpudra up runs: the examples are relative to it
    activate: Path | None  # the activate script of the virtual environment gpudra runs from, if it does
    gpudra: str  # the command that runs gpudra: `gpudra`, or `python -m gpudra` by its interpreter's path
    kubectl_found: bool


def current_shell() -> Shell:
    """This process's shell: its directory, its virtual environment, whether ``gpudra`` and ``kubectl`` are on
    PATH."""
    activate = Path(sys.prefix) / "bin" / "activate"
    in_venv = sys.prefix != sys.base_prefix and activate.is_file()
    gpudra = "gpudra" if in_venv or shutil.which("gpudra") else f"{shlex.quote(sys.executable)} -m gpudra"
    return Shell(
        directory=Path.cwd(),
        activate=activate if in_venv else None,
        gpudra=gpudra,
        kubectl_found=shutil.which("kubectl") is not None,
    )


def _shown(path: Path, directory: Path) -> str:
    """``path`` as typed after ``cd directory``: relative when under it, absolute otherwise."""
    resolved = path.resolve()
    try:
        shown = str(resolved.relative_to(directory.resolve()))
    except ValueError:
        shown = str(resolved)
    return shlex.quote(shown)


def _aligned(pairs: list[tuple[str, str]]) -> list[str]:
    """Commands with their ``# comment`` (if any) in one column."""
    width = max((len(command) for command, comment in pairs if comment), default=0) + 3
    return [f"{command:<{width}}# {comment}" if comment else command for command, comment in pairs]


def try_next(kubeconfig: Path, shell: Shell) -> list[str]:
    """The commands to print, each as typed; with the examples when ``shell.directory`` has them."""
    examples = all((shell.directory / example).is_file() for example in (EXAMPLE_POD, EXAMPLE_TOO_BIG))
    pairs: list[tuple[str, str]] = []
    if examples:
        pairs.append((f"cd {shlex.quote(str(shell.directory.resolve()))}", ""))
    if shell.activate is not None:
        pairs.append(
            (f"source {_shown(shell.activate, shell.directory)}", "gpudra and kubectl-gpudra on PATH")
        )
    pairs.append((f"export KUBECONFIG={shlex.quote(str(kubeconfig.resolve()))}", ""))
    if examples:
        pairs += [
            (f"kubectl apply -f {EXAMPLE_POD}", "a pod that claims one GPU"),
            ("kubectl wait --for=condition=Ready pod/gpu-pod --timeout=60s", ""),
            ("kubectl logs gpu-pod", "the GPU it got, as nvidia-smi -L shows it"),
            (f"kubectl apply -f {EXAMPLE_TOO_BIG}", "a pod whose claim wants 16 GPUs"),
            (f"{shell.gpudra} explain pod too-big", "why it cannot fit (exit status 1: it cannot)"),
        ]
    else:
        pairs += [
            ("kubectl get resourceslices", "each node's GPUs as DRA devices"),
            (f"{shell.gpudra} status -o wide", ""),
        ]
    lines = _aligned(pairs)
    if not shell.kubectl_found:
        lines.append(f"# kubectl is not on PATH: {KUBECTL_INSTALL}")
    return lines
