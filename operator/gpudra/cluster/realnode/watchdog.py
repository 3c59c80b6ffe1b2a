"""``python -m gpudra.cluster.realnode.watchdog CLUSTER NODE...``: ends a cluster's real nodes when the process
that started them ends without ending them (SIGKILL, a crash).

The cluster starts it in a session of its own (a Ctrl-C meant for ``gpudra up`` does not reach it) with its stdin
the read end of a pipe whose write end only the cluster holds. When that pipe closes (the cluster stopped, or
died), it kills every process left in each node's cgroup and removes the cgroups (cgroups.py), then exits. After
a clean stop there is nothing left to kill.

The cluster writes through the same pipe the temporary directories its nodes keep their files in (containerd's
store, about 1 GB a node), each ended by a NUL byte. Once the nodes' processes are gone, the watchdog removes
them, as a clean stop does. A directory with anything mounted in it (as this process sees the machine's mounts)
is left in place and named: removing it would remove what the mount shows.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from gpudra.cluster.realnode.cgroups import NodeCgroup
from gpudra.cluster.tempdirs import remove_directory
from gpudra.errors import GpudraError

SEPARATOR = b"\0"


def encode_directory(path: Path) -> bytes:
    """How the cluster names a directory to remove on the watchdog's pipe."""
    return os.fsencode(str(path.absolute())) + SEPARATOR


def directories_named(data: bytes) -> list[Path]:
    """The absolute directories named on the pipe (a part after the last separator was cut off: left out)."""
    parts = data.split(SEPARATOR)[:-1]
    return [Path(os.fsdecode(part)) for part in parts if part.startswith(b"/")]


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("usage: python -m gpudra.cluster.realnode.watchdog CLUSTER NODE...", file=sys.stderr)
        return 2
    cluster, nodes = argv[0], argv[1:]
    data = b""
    while chunk := sys.stdin.buffer.read(4096):
        data += chunk
    failed = 0
    for node in nodes:
        try:
            killed = NodeCgroup.on_this_machine(cluster, node).kill()
        except (GpudraError, OSError) as exc:
            print(f"gpudra watchdog: could not end real node {node}: {exc}", file=sys.stderr)
            failed += 1
            continue
        if killed:
            print(f"gpudra watchdog: ended {len(killed)} process(es) of real node {node}", file=sys.stderr)
    if failed:
        return 1  # a node's processes may still use its files
    for directory in directories_named(data):
        problem = remove_directory(directory)
        if problem:
            print(f"gpudra watchdog: {problem}", file=sys.stderr)
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
