"""``python -m gpudra.cluster.realnode.watchdog CLUSTER NODE...``: ends a cluster's real nodes when the process
that started them ends without ending them (SIGKILL, a crash).

The cluster starts it in a session of its own (a Ctrl-C meant for ``gpudra up`` does not reach it) with its stdin
the read end of a pipe whose write end only the cluster holds. When that pipe closes (the cluster stopped, or
died), it kills every process left in each node's cgroup and removes the cgroups (cgroups.py), then exits. After
a clean stop there is nothing left to kill.
"""

from __future__ import annotations

import sys

from gpudra.cluster.realnode.cgroups import NodeCgroup
from gpudra.errors import GpudraError


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("usage: python -m gpudra.cluster.realnode.watchdog CLUSTER NODE...", file=sys.stderr)
        return 2
    cluster, nodes = argv[0], argv[1:]
    while sys.stdin.buffer.read(4096):
        pass
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
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
