"""`make demo` and `make test` on a machine whose python3 is older than gpudra needs (3.11): the first run says so
and what to run instead, before making anything (it used to make a virtualenv with that interpreter, fail in pip,
and fail the same way on every later run, even with PYTHON naming a newer one, until the virtualenv was
removed by hand)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def interpreter(path: Path, version: str) -> Path:
    """A stand-in for an interpreter of ``version``: it answers --version, and fails anything else."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'#!/bin/sh\n[ "$1" = --version ] && echo "Python {version}" && exit 0\nexit 1\n')
    path.chmod(0o755)
    return path


async def make_venv(python: Path | str, venv: Path) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        "make", "--no-print-directory", "-C", str(ROOT), "venv", f"PYTHON={python}", f"VENV={venv}",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(proc.communicate(), timeout=120)
    assert proc.returncode is not None
    return proc.returncode, out.decode()


async def test_an_interpreter_older_than_3_11_is_refused_with_what_to_run(tmp_path: Path) -> None:
    old = interpreter(tmp_path / "bin" / "python3", "3.10.13")
    status, out = await make_venv(old, tmp_path / "venv")
    assert status != 0, out
    assert (
        f"gpudra needs Python 3.11 or newer, and {old} is Python 3.10.13: run make again with PYTHON=python3.11"
        in out
    )
    assert not (tmp_path / "venv").exists()


async def test_a_virtualenv_made_with_an_older_interpreter_is_made_again(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    interpreter(venv / "bin" / "python", "3.10.13")  # what a first run under python3 = 3.10 left
    status, out = await make_venv(interpreter(tmp_path / "bin" / "python3", "3.9.18"), venv)
    assert status != 0 and f"{venv} was made with Python 3.10.13, older than gpudra needs" in out, out
    assert "and " + str(tmp_path / "bin" / "python3") + " is Python 3.9.18" in out, out
    assert (venv / "bin" / "python").exists()  # nothing removed while no interpreter can make it again

    # with an interpreter that can, it is made again (the install after it is left out here: a stamp says done)
    proc = await asyncio.create_subprocess_exec(
        str(ROOT / "hack" / "venv" / "make.sh"), sys.executable, str(venv),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out_bytes, _ = await asyncio.wait_for(proc.communicate(), timeout=120)
    assert proc.returncode == 0, out_bytes.decode()
    made = await asyncio.create_subprocess_exec(
        str(venv / "bin" / "python"),
        "-c",
        "import sys; print(sys.version_info >= (3, 11))",
        stdout=asyncio.subprocess.PIPE,
    )
    printed, _ = await asyncio.wait_for(made.communicate(), timeout=60)
    assert printed.decode().strip() == "True"


async def pythons(tmp_path: Path, minors: str) -> tuple[int, str]:
    """`make test-pythons` for ``minors``, with pyenv's versions under ``tmp_path/pyenv`` and nothing else to find."""
    proc = await asyncio.create_subprocess_exec(
        str(ROOT / "hack" / "venv" / "pythons.sh"),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        env={"PATH": "/usr/bin:/bin", "PYTHON_MINORS": minors, "PYENV_ROOT": str(tmp_path / "pyenv"),
             "VENVS": str(tmp_path), "HOME": str(tmp_path)},
    )  # fmt: skip
    out, _ = await asyncio.wait_for(proc.communicate(), timeout=120)
    assert proc.returncode is not None
    return proc.returncode, out.decode()


async def test_test_pythons_says_which_versions_it_did_not_find(tmp_path: Path) -> None:
    status, out = await pythons(tmp_path, "97")
    assert status == 0, out
    assert "Python 3.97: not on this machine (neither python3.97 on PATH nor under " in out
    assert "no Python newer than 3.11 found: nothing was run on one" in out


async def test_test_pythons_takes_pyenvs_newest_patch_and_fails_where_no_virtualenv_is_made(
    tmp_path: Path,
) -> None:
    """Two patches of 3.98 under pyenv: the newer is taken (10 after 9, not after 1 as text); a stand-in that
    cannot make a virtualenv is a failed version with its log named, and the whole run fails."""
    for patch in ("9", "10"):
        stand_in = tmp_path / "pyenv" / "versions" / f"3.98.{patch}" / "bin" / "python"
        stand_in.parent.mkdir(parents=True)
        stand_in.write_text(f'#!/bin/sh\ncase "$2" in *platform*) echo 3.98.{patch};; esac\nexit 0\n')
        stand_in.chmod(0o755)
    status, out = await pythons(tmp_path, "98")
    assert status == 1, out
    log = tmp_path / ".venv-3.98.log"
    assert (
        f"Python 3.98.10 ({stand_in}): its virtualenv {tmp_path}/.venv-3.98 could not be made; see {log}"
        in out
    )
    assert log.exists()
