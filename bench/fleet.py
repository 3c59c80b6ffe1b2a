"""`gpudra up --once` with a large simulated fleet of dgx-h100 nodes: seconds until every node is registered, its
agent serves the kubelet plugin and its ResourceSlices are published, and the peak memory of the process.

Each size runs ``gpudra up --once`` as a process of its own. Its peak memory is the largest sum of the resident
memory of that process and its children, sampled five times a second from /proc. A fleet a quarter the size is
measured first in the same run as the baseline: time growing linearly with the fleet gives a ratio of about 4.
Then 1,000 nodes (or the whole fleet, if smaller) start beside one busy core: a process of its own spinning
for the whole run, as another tenant of the machine would, and the time is printed against the same fleet
started idle in the same run (not with ``--quick``).

    python -m bench fleet [--quick | --nodes=N]

Goals (issue #38): 5,000 nodes (40,000 GPUs) up in <= 150 s and <= 4 GiB; 4x the nodes in <= 5x the time;
1,000 nodes beside one busy core in < 60 s.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from bench import goals
from bench.busycore import BusyCore

BUSY_NODES = 1000
UP_LINE = re.compile(r"gpudra is up: (\d+) nodes, (\d+) GPUs \(([\d.]+) s\)")


@dataclass(frozen=True)
class Result:
    nodes: int
    gpus: int
    up_s: float
    """From start to every node's slices published, as ``gpudra up`` reports it."""
    wall_s: float
    """The whole process: imports, start, printing the fleet, shutdown."""
    peak_mib: float
    cpu_s: float
    """CPU time of the process and its children (user and system): less dependent on the machine's load."""
    load: tuple[float, float]
    """The machine's load average (over a minute) when the run started and when it ended."""


def _tree_rss_kib(root: int) -> int:
    """Resident memory of ``root`` and its descendants, in KiB (0 once it is gone)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    tree, frontier = {root}, [root]
    while frontier:
        pid = frontier.pop()
        children = [child for child, parent in parents.items() if parent == pid]
        tree.update(children)
        frontier.extend(children)
    total = 0
    for pid in tree:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1])
    return total


class _PeakSampler(threading.Thread):
    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.peak_kib = pid, 0
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.2):
            self.peak_kib = max(self.peak_kib, _tree_rss_kib(self.pid))


def child_environment(environ: dict[str, str]) -> dict[str, str]:
    """``environ`` with each ``PYTHONPATH`` entry made absolute: the child runs in a directory of its own, where a
    relative entry (``PYTHONPATH=operator``, as the tests are run) names nothing, and the child would silently
    import the gpudra installed in the environment (another checkout's) instead of the one under test."""
    entries = environ.get("PYTHONPATH")
    if not entries:
        return dict(environ)
    absolute = [str(Path(entry).resolve()) if entry else entry for entry in entries.split(os.pathsep)]
    return environ | {"PYTHONPATH": os.pathsep.join(absolute)}


def measure(nodes: int) -> Result:
    with tempfile.TemporaryDirectory(prefix="gpudra-bench-fleet-") as tmp:
        command = [
            sys.executable,
            "-m",
            "gpudra",
            "up",
            "--once",
            "--nodes",
            f"dgx-h100:{nodes}",
            "--kubeconfig",
            str(Path(tmp) / "kubeconfig"),
            "--web-port",
            "-1",
            "--metrics-port",
            "-1",
        ]
        load = os.getloadavg()[0]
        started = time.monotonic()
        with open(Path(tmp) / "out", "w+b") as out:
            process = subprocess.Popen(
                command,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=tmp,
                env=child_environment(dict(os.environ)),
            )
            sampler = _PeakSampler(process.pid)
            sampler.start()
            _, status, usage = os.wait4(process.pid, 0)
            sampler.done.set()
            sampler.join()
            process.returncode = os.waitstatus_to_exitcode(status)
            wall = time.monotonic() - started
            out.seek(0)
            text = out.read().decode(errors="replace")
    found = UP_LINE.search(text)
    if process.returncode != 0 or found is None:
        up = f"it printed: {found[0]}; " if found is not None else ""  # a failure while it stopped
        raise RuntimeError(
            f"gpudra up --once with {nodes} nodes failed ({process.returncode}; {up}peak "
            f"{sampler.peak_kib / 1024:,.0f} MiB):\n{text[-3000:]}"
        )
    return Result(
        nodes=int(found[1]),
        gpus=int(found[2]),
        up_s=float(found[3]),
        wall_s=wall,
        peak_mib=max(sampler.peak_kib, usage.ru_maxrss) / 1024,  # kilobytes on Linux
        cpu_s=usage.ru_utime + usage.ru_stime,
        load=(load, os.getloadavg()[0]),
    )


def _line(label: str, r: Result) -> str:
    return (
        f"{label:8} {r.nodes:5} nodes {r.gpus:6} GPUs: up in {r.up_s:6.1f} s ({r.up_s / r.nodes * 1000:.1f} ms a "
        f"node), process {r.wall_s:6.1f} s, CPU {r.cpu_s:6.1f} s, peak {r.peak_mib:,.0f} MiB, load "
        f"{r.load[0]:.1f} to {r.load[1]:.1f}"
    )


def run(nodes: int, *, busy_core: bool = True) -> None:
    baseline = measure(max(nodes // 4, 1))
    print(_line("baseline", baseline), flush=True)
    scaled = measure(nodes)
    print(_line("scaled", scaled), flush=True)
    growth = scaled.nodes / baseline.nodes
    ratio = scaled.up_s / baseline.up_s
    print(
        f"ratio scaled/baseline {ratio:.2f} for {growth:.0f}x the nodes; "
        f"{goals.at_most(ratio, growth * 1.25, 'x the baseline')}"
    )
    print(f"  {scaled.nodes} nodes up in {scaled.up_s:.1f} s; {goals.at_most(scaled.up_s, 150, 's')}")
    print(f"  peak memory {scaled.peak_mib:,.0f} MiB; {goals.at_most(scaled.peak_mib, 4096, 'MiB')}")
    if not busy_core:
        return
    size = min(BUSY_NODES, nodes)
    idle = next((r for r in (scaled, baseline) if r.nodes == size), None)
    if idle is None:
        idle = measure(size)
        print(_line("idle", idle), flush=True)
    with BusyCore():
        busy = measure(size)
    print(_line("busy", busy), flush=True)
    print(
        f"  {busy.nodes} nodes beside one busy core up in {busy.up_s:.1f} s, {busy.up_s / idle.up_s:.2f}x the "
        f"time idle; {goals.below(busy.up_s, 60, 's')}"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench fleet", description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000, help="dgx-h100 nodes of the scaled run")
    parser.add_argument("--quick", action="store_true", help="100 nodes, no run beside a busy core (CI)")
    args = parser.parse_args(argv)
    run(100 if args.quick else args.nodes, busy_core=not args.quick)


if __name__ == "__main__":
    main()
