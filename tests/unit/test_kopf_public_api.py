"""gpudra uses kopf only through its public API, and never searches the process's heap: kopf's internals change
between the minor versions the dependency allows (``kopf>=1.37,<2``), and a heap scan costs a visit of every object
of the process. The product and the tests are read as source (an import of kopf's private modules, an attribute of
them, a private attribute of a kopf registry, or ``gc.get_objects()``)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ROOT / "operator" / "gpudra"
FORBIDDEN = {
    "kopf's private modules": re.compile(r"\bkopf\._\w"),
    "a kopf registry's private handlers": re.compile(
        r"\.\_(changing|watching|indexing|spawning|webhooks|activities)\b"
    ),
}
HEAP_SCAN = re.compile(r"\bget_objects\s*\(")


def uses(pattern: re.Pattern[str], files: list[Path]) -> list[str]:
    return [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in files
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if pattern.search(line)
    ]


def sources(*folders: Path) -> list[Path]:
    return sorted(
        p for folder in folders for p in folder.rglob("*.py") if p.resolve() != Path(__file__).resolve()
    )


@pytest.mark.parametrize("what", sorted(FORBIDDEN))
def test_no_source_reaches_into_kopf(what: str) -> None:
    files = sources(PRODUCT, ROOT / "tests")
    assert len(files) > 100  # the sources were found
    assert not uses(FORBIDDEN[what], files), f"{what} used"


def test_the_product_never_scans_the_heap() -> None:
    assert not uses(HEAP_SCAN, sources(PRODUCT)), "gc.get_objects() used"
