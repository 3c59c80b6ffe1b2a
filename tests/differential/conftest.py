"""The allocator oracle process for the differential tests, and the count of scenarios it checked."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from _oracle_run import EXAMPLES, SEED, TALLY, Oracle, build_oracle


@pytest.fixture(scope="session")
def oracle() -> Iterator[Oracle]:
    """Kubernetes' allocator behind hack/oracle. A missing Go toolchain or a failed build fails the tests
    (never a skip): CI has Go and the module proxy, and `make test` builds it first (`make oracle`)."""
    process = Oracle(build_oracle())
    yield process
    process.close()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not TALLY.scenarios:
        return
    outcomes = ", ".join(f"{k} {v}" for k, v in sorted(TALLY.outcomes.items()))
    terminalreporter.write_line(
        f"allocator oracle: {TALLY.scenarios} scenarios checked against Kubernetes' allocator "
        f"k8s.io/dynamic-resource-allocation {TALLY.version} ({', '.join(sorted(TALLY.implementations))}), "
        f"{TALLY.with_lists} with list-typed attributes; Kubernetes: {outcomes}; "
        f"seed {SEED} (replay: GPUDRA_ORACLE_SEED={SEED}, examples {EXAMPLES})"
    )
