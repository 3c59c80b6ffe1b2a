"""Another tenant of the machine: a process of its own keeping one core busy while the ``with`` block runs."""

from __future__ import annotations

import subprocess
import sys


class BusyCore:
    def __enter__(self) -> BusyCore:
        self.process = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        return self

    def __exit__(self, *_: object) -> None:
        self.process.kill()
        self.process.wait()
