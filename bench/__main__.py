"""`make bench` / `python -m bench [NAME ...] [-- ARGS]`: run the benchmarks and print their ratios.

Every benchmark measures its baseline in the same run, so the ratios hold on a noisy shared machine.
"""

from __future__ import annotations

import importlib
import sys

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


def main(argv: list[str]) -> int:
    names = [a for a in argv if not a.startswith("-")] or BENCHMARKS
    flags = [a for a in argv if a.startswith("-")]
    for name in names:
        if name not in BENCHMARKS:
            print(f"unknown benchmark {name!r}; known: {', '.join(BENCHMARKS)}", file=sys.stderr)
            return 2
    for name in names:
        print(f"\n=== bench/{name}.py ===", flush=True)
        module = importlib.import_module(f"bench.{name}")
        module.main(flags)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
