"""`make bench` / `python -m bench [NAME ...] [ARGS]`: run the benchmarks and print their ratios.

The names come first; everything from the first argument that starts with ``-`` on is given to each benchmark
named (``python -m bench fleet --nodes 1000``).

Every benchmark measures its baseline in the same run, so the ratios hold on a noisy shared machine.
`python -m bench --quick` with no name runs the quick form of the benchmarks of issue #38's goals (the agent,
prepare latency, ComputeDomain, the fleet), one line of each goal that fits in seconds, and prints how long it
took against the goal of about 15 s.
"""

from __future__ import annotations

import importlib
import sys
import time

from bench import goals

BENCHMARKS = [
    "apiserver",
    "cel",
    "allocator",
    "mig",
    "computedomain",
    "fleet",
    "agent",
    "prepare",
    "kubernetes",
    "controller",
    "webview",
]
QUICK = ["agent", "prepare", "computedomain", "fleet"]
QUICK_GOAL_S = 15


def main(argv: list[str]) -> int:
    first_flag = next((i for i, a in enumerate(argv) if a.startswith("-")), len(argv))
    named, flags = argv[:first_flag], argv[first_flag:]
    if not named and flags and flags[0] in ("-h", "--help"):
        print(f"usage: python -m bench [NAME ...] [ARGS]\nNAME: {', '.join(BENCHMARKS)} (default: all;")
        print(f"  --quick alone: {', '.join(QUICK)}); python -m bench NAME --help: that benchmark's ARGS")
        return 0
    names = named or (QUICK if flags == ["--quick"] else BENCHMARKS)
    for name in names:
        if name not in BENCHMARKS:
            print(f"unknown benchmark {name!r}; known: {', '.join(BENCHMARKS)}", file=sys.stderr)
            return 2
    started = time.monotonic()
    for name in names:
        print(f"\n=== bench/{name}.py ===", flush=True)
        began = time.monotonic()
        module = importlib.import_module(f"bench.{name}")
        module.main(flags)
        print(f"(bench/{name}.py took {time.monotonic() - began:.1f} s)", flush=True)
    took = time.monotonic() - started
    if names is QUICK:
        print(f"\nbench --quick took {took:.1f} s; {goals.at_most(took, QUICK_GOAL_S, 's')} (about)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
