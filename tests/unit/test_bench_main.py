"""`python -m bench NAME ... ARGS`: the names come first, and the arguments after them reach each benchmark named."""

from __future__ import annotations

import importlib
import types

import pytest
from bench import __main__ as bench_main


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, list[str]]]:
    seen: list[tuple[str, list[str]]] = []

    def fake_import(name: str) -> types.SimpleNamespace:
        return types.SimpleNamespace(main=lambda argv: seen.append((name, argv)))

    monkeypatch.setattr(importlib, "import_module", fake_import)
    return seen


def test_a_flag_with_a_value_reaches_the_benchmark(calls: list[tuple[str, list[str]]]) -> None:
    assert bench_main.main(["fleet", "--nodes", "1000"]) == 0
    assert calls == [("bench.fleet", ["--nodes", "1000"])]


def test_quick_alone_runs_the_quick_set(calls: list[tuple[str, list[str]]]) -> None:
    assert bench_main.main(["--quick"]) == 0
    assert calls == [(f"bench.{name}", ["--quick"]) for name in bench_main.QUICK]


def test_help_without_a_name_lists_the_benchmarks_and_runs_none(
    calls: list[tuple[str, list[str]]], capsys: pytest.CaptureFixture[str]
) -> None:
    assert bench_main.main(["--help"]) == 0
    assert calls == []
    assert "controller" in capsys.readouterr().out


def test_an_unknown_name_runs_nothing(calls: list[tuple[str, list[str]]]) -> None:
    assert bench_main.main(["fleet", "fleets"]) == 2
    assert calls == []
