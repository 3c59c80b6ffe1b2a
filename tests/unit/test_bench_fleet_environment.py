"""`python -m bench fleet` measures the checkout it is run from, also when PYTHONPATH names it relatively."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from bench.fleet import child_environment


def test_a_relative_pythonpath_reaches_the_child_as_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    environ = {"PYTHONPATH": os.pathsep.join(["operator", "/abs/other", ""]), "HOME": "/root"}
    child = child_environment(environ)
    assert child["PYTHONPATH"].split(os.pathsep) == [str(tmp_path / "operator"), "/abs/other", ""]
    assert child["HOME"] == "/root" and environ["PYTHONPATH"].startswith("operator")
    assert "PYTHONPATH" not in child_environment({"HOME": "/root"})
