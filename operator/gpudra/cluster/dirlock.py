"""One ``gpudra up`` per directory: the directory its kubeconfig goes to holds its nodes' state, sockets and logs,
and a second run there would take them over from the first (it overwrote the kubeconfig and took the first's
plugin sockets: "DRA driver gpu.nvidia.com is not registered" in the first).

``gpudra-up.lock`` in that directory is locked (``flock``) for as long as a run lives and says who holds it (PID,
API server URL). A second start reads it and stops with one sentence naming the running one. A lock file whose
holder died (SIGKILL, a crash: the kernel drops the lock with the process) is taken over, with a line saying so.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from gpudra.errors import ConfigurationError

LOCK_FILE = "gpudra-up.lock"


@dataclass
class DirectoryLock:
    """Held from :meth:`acquire` to :meth:`release`."""

    directory: Path
    handle: IO[str] | None = None
    taken_over: dict[str, object] | None = None
    """What the lock file said when it was taken over from a run that died, else None."""

    @property
    def path(self) -> Path:
        return self.directory / LOCK_FILE

    def acquire(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        handle = self.path.open("a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read(handle)
            handle.close()
            raise ConfigurationError(
                f"another gpudra up runs in {self.directory} (PID {holder.get('pid', '?')}, API server "
                f"{holder.get('url') or 'starting'}): stop it first, or give this one another --kubeconfig "
                "directory"
            ) from None
        previous = _read(handle)
        if previous.get("pid") not in (None, os.getpid()):
            self.taken_over = previous
        self.handle = handle
        self.record(url="")

    def record(self, *, url: str) -> None:
        """Say who holds the lock (this process, and its API server once it serves)."""
        assert self.handle is not None
        self.handle.seek(0)
        self.handle.truncate()
        self.handle.write(json.dumps({"pid": os.getpid(), "url": url}) + "\n")
        self.handle.flush()

    def release(self) -> None:
        if self.handle is None:
            return
        with contextlib.suppress(OSError):
            self.handle.seek(0)
            self.handle.truncate()
        self.handle.close()  # closing drops the lock
        self.handle = None


def _read(handle: IO[str]) -> dict[str, object]:
    handle.seek(0)
    try:
        found = json.loads(handle.read() or "{}")
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}
