"""Whether a process may write in a directory, or make it: asked before a process starts anything, so that a path
that is a file, under one, or on a read-only mount stops it with the path named rather than a traceback later."""

from __future__ import annotations

import os
from pathlib import Path


def directory_problem(path: Path) -> str | None:
    """Why this process cannot write in ``path`` (or make it), or None."""
    existing = path
    while not existing.exists():
        if existing.is_symlink():
            return f"{existing} is a link to nothing"
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is not a directory" if existing == path else f"{existing}, on its path, is a file"
    if not os.access(existing, os.W_OK | os.X_OK):
        made = "" if existing == path else f" (to make {path} in it)"
        return f"{existing} is not writable{made}: a read-only mount, or another owner"
    return None
