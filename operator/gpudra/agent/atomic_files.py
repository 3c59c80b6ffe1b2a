"""Crash-safe file replacement: temp file in the same directory, fsync, rename, fsync the directory.

After a crash at any point the target holds either the old content or the new one, never a mix. Temp files
are dot-files ending in ``.tmp`` so that directory scanners (the CDI cache reads ``*.json``/``*.yaml``, the
kubelet ignores dot-files) never pick up a half-written one; a crash can leave one behind, and
``remove_temp_files`` clears them at start-up.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

TEMP_SUFFIX = ".tmp"


def fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path: Path, data: bytes, *, mode: int = 0o644, durable: bool = True) -> None:
    """Replace ``path`` with ``data`` atomically, and durably unless ``durable`` is False."""
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=TEMP_SUFFIX)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        os.chmod(temp, mode)
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise
    if durable:
        fsync_directory(path.parent)


def remove_durably(path: Path) -> bool:
    """Delete ``path`` and fsync its directory; False when it did not exist."""
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    fsync_directory(path.parent)
    return True


def remove_temp_files(directory: Path, name_prefix: str) -> list[Path]:
    """Remove temp files left by a crash during ``write_atomically`` of files whose names start with the
    prefix.
    """
    removed = []
    for temp in directory.glob(f".{name_prefix}*{TEMP_SUFFIX}"):
        with contextlib.suppress(FileNotFoundError):
            temp.unlink()
            removed.append(temp)
    return sorted(removed)
