"""The temporary directory of one ``gpudra up`` (its nodes' files when the kubeconfig's directory is too deep for
their socket paths), and the sweep of those whose run died without removing them (SIGKILL, a crash).

A run's directory, ``<tmp>/gpudra-XXXXXXXX``, holds ``gpudra-up.lock``, locked (``flock``) for as long as the run
lives and naming its PID. The lock file is locked before it gets its name, so a directory with that file and no
lock held is one whose run is gone: the next ``gpudra up`` that needs a directory of its own removes such
directories, unless something is mounted in one (removing it would remove what the mount shows). Directories
without the file (another program's, or an older gpudra's) are left alone.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
from pathlib import Path

PREFIX = "gpudra-"
LOCK_FILE = "gpudra-up.lock"


def mount_points(mountinfo: str) -> list[Path]:
    """The mount points of ``/proc/self/mountinfo`` (its fifth field, with the kernel's octal escapes undone)."""
    points = []
    for line in mountinfo.splitlines():
        fields = line.split(" ")
        if len(fields) > 4:
            points.append(Path(fields[4].encode().decode("unicode_escape").encode("latin-1").decode()))
    return points


def mounted_within(directory: Path, points: list[Path]) -> list[Path]:
    return [p for p in points if p == directory or directory in p.parents]


def remove_directory(directory: Path) -> str | None:
    """Remove ``directory`` and everything in it; a sentence when it stays."""
    if not directory.exists():
        return None
    inside = mounted_within(directory, mount_points(Path("/proc/self/mountinfo").read_text()))
    if inside:
        return f"left {directory} in place: {inside[0]} is mounted there"
    shutil.rmtree(directory, ignore_errors=True)
    return f"could not remove all of {directory}" if directory.exists() else None


def sweep(parent: Path | None = None) -> list[Path]:
    """Remove the directories of runs that died; the ones removed."""
    removed = []
    for entry in sorted(Path(parent or tempfile.gettempdir()).glob(PREFIX + "*")):
        if entry.is_symlink() or not entry.is_dir() or not (entry / LOCK_FILE).is_file():
            continue
        try:
            handle = os.open(entry / LOCK_FILE, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(handle)  # its run lives
            continue
        try:
            if remove_directory(entry) is None:
                removed.append(entry)
        finally:
            os.close(handle)
    return removed


class RunDirectory:
    """Made on the first :meth:`path` call (after a sweep), locked until :meth:`remove`."""

    def __init__(self) -> None:
        self._path: Path | None = None
        self._lock: int | None = None

    def path(self) -> Path:
        if self._path is None:
            sweep()
            path = Path(tempfile.mkdtemp(prefix=PREFIX))
            unnamed = path / f".{LOCK_FILE}.{os.getpid()}"
            self._lock = os.open(unnamed, os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o600)
            fcntl.flock(self._lock, fcntl.LOCK_EX)
            os.write(self._lock, f"{os.getpid()}\n".encode())
            os.rename(unnamed, path / LOCK_FILE)  # locked before a sweep can see it
            self._path = path
        return self._path

    @property
    def made(self) -> Path | None:
        return self._path

    def remove(self) -> None:
        path, self._path = self._path, None
        if path is not None:
            shutil.rmtree(path, ignore_errors=True)
        if self._lock is not None:
            with contextlib.suppress(OSError):
                os.close(self._lock)
            self._lock = None
