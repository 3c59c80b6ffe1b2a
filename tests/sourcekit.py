"""Reading the project's own source as syntax trees, for tests that check a rule over every module."""

from __future__ import annotations

import ast
from pathlib import Path


def parse_file(path: Path) -> ast.Module:
    """The syntax tree of one source file.

    CPython 3.11 keeps the AST constructor's recursion counter in one place for all threads
    (python/cpython#106905), so a parse that runs while a thread left behind by an earlier test formats a
    traceback (which parses too) can fail with a spurious ``SystemError: AST constructor recursion depth
    mismatch``. Parsing again is then correct: the file did not change."""
    source = path.read_text()
    for _ in range(4):
        try:
            return ast.parse(source, str(path))
        except SystemError:
            continue
    return ast.parse(source, str(path))
