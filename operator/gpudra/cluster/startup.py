"""What ``gpudra up`` shows while it starts, and once it is up.

While it starts: one line per stage (API server, nodes registered, slices published, controller ready) with its
progress, drawn by rich's live progress display on a terminal and written as plain lines otherwise (CI logs,
pipes). Once up: one summary, the fleet table first, the URLs, then the commands to try next (``trynext.py``), which
run as printed in a new terminal too.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from rich.console import Console, Group, RenderableType
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TaskID, TextColumn
from rich.text import Text

from gpudra.planning.summaries import FleetRow
from gpudra.reports import fleet_table, print_fitted

STAGE_API_SERVER = "API server"
STAGE_NODES = "nodes registered"
STAGE_SLICES = "slices published"
STAGE_CONTROLLER = "controller ready"


class StartProgress(Protocol):
    """Told by the embedded cluster how far its start has come."""

    def begin(self, stage: str, total: int) -> None: ...

    def advance(self, stage: str, steps: int = 1, detail: str = "") -> None: ...


class NoProgress:
    """For tests and embedding code: shows nothing."""

    def begin(self, stage: str, total: int) -> None:
        pass

    def advance(self, stage: str, steps: int = 1, detail: str = "") -> None:
        pass


@dataclass
class _Stage:
    total: int
    done: int = 0
    started: float = field(default_factory=time.monotonic)


class PlainProgress:
    """A line when a stage completes: ``[gpudra up] slices published 4/4 (0.6 s)``."""

    def __init__(self, console: Console) -> None:
        self._console = console
        self._stages: dict[str, _Stage] = {}

    def begin(self, stage: str, total: int) -> None:
        self._stages[stage] = _Stage(total)

    def advance(self, stage: str, steps: int = 1, detail: str = "") -> None:
        state = self._stages[stage]
        state.done += steps
        if state.done == state.total:
            took = time.monotonic() - state.started
            counts = f" {state.done}/{state.total}" if state.total > 1 else ""
            extra = f" {detail}" if detail else ""
            self._console.print(
                f"[gpudra up] {stage}{counts}{extra} ({took:.1f} s)", markup=False, highlight=False
            )


class RichProgress:
    """rich's live display: a spinner, a bar and M/N per stage."""

    def __init__(self, progress: Progress) -> None:
        self._progress = progress
        self._tasks: dict[str, TaskID] = {}

    def begin(self, stage: str, total: int) -> None:
        self._tasks[stage] = self._progress.add_task(stage, total=total)

    def advance(self, stage: str, steps: int = 1, detail: str = "") -> None:
        task = self._tasks[stage]
        self._progress.advance(task, steps)
        if detail:
            self._progress.update(task, description=f"{stage} {detail}")


@contextmanager
def start_progress(console: Console) -> Iterator[StartProgress]:
    """Rich's display on a terminal (removed once the start is over), plain lines otherwise."""
    if not console.is_terminal:
        yield PlainProgress(console)
        return
    columns = (
        SpinnerColumn(finished_text="[green]✓"),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
    )
    with Progress(*columns, console=console, transient=True) as progress:
        yield RichProgress(progress)


@dataclass(frozen=True)
class Summary:
    """What the summary shows once the cluster is up."""

    api_server: str
    rows: list[FleetRow]
    web_url: str = ""
    metrics_url: str = ""
    log_file: Path | None = None
    seconds: float = 0.0
    tries: tuple[str, ...] = ()  # the commands to try next, each as typed (trynext.py)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def summary(info: Summary) -> RenderableType:
    gpus = sum(r.gpu_count for r in info.rows)
    migs = sum(sum(r.mig_devices.values()) for r in info.rows)
    head = f"gpudra is up: {_count(len(info.rows), 'node')}, {_count(gpus, 'GPU')}"
    head += f", {_count(migs, 'MIG device')}" if migs else ""
    head += f" ({info.seconds:.1f} s)" if info.seconds else ""
    links = [("API server", info.api_server)]
    links += [("web view", info.web_url)] if info.web_url else []
    links += [("metrics", info.metrics_url)] if info.metrics_url else []
    links += [("logs", str(info.log_file))] if info.log_file else []
    width = max(len(name) for name, _ in links) + 2
    lines = [Text(f"  {name + ':':<{width}}{value}", no_wrap=True) for name, value in links]
    return Group(
        Text(head, style="bold green"),
        Text(""),
        fleet_table(info.rows, title=None),
        Text(""),
        *lines,
    )


def print_summary(console: Console, info: Summary) -> None:
    """The summary, then the commands to try next: those are never folded by rich (soft wrap), so a narrow
    terminal wraps them itself and a copied line stays one command."""
    print_fitted(console, summary(info))
    if info.tries:
        console.print("\nTry next, in this terminal or a new one:", markup=False, highlight=False)
    for command in info.tries:
        console.print(f"  {command}", soft_wrap=True, markup=False, highlight=False)
