"""Debian's chromium, driven through Playwright (tests/browser/driver.mjs) for the web view's browser tests.

``browser`` is a fixture: a running driver to send commands to. Without chromium, node or playwright-core the
tests skip, unless GPUDRA_REQUIRE_BROWSER=1 (set by `make test`, which installs them), where they fail."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

BROWSER_DIR = Path(__file__).resolve().parent / "browser"
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")


def missing() -> str | None:
    """What is missing to run the browser tests, or None."""
    if shutil.which("node") is None:
        return "node is not on PATH"
    if not Path(CHROMIUM).exists():
        return f"no chromium at {CHROMIUM} (apt-get install chromium)"
    if not (BROWSER_DIR / "node_modules" / "playwright-core").is_dir():
        return "playwright-core is not installed (npm ci --prefix tests/browser)"
    return None


class Browser:
    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self._process = process

    async def send(self, op: str, deadline: float = 60.0, **args: Any) -> dict[str, Any]:
        assert self._process.stdin is not None and self._process.stdout is not None
        self._process.stdin.write(json.dumps({"op": op, **args}).encode() + b"\n")
        await self._process.stdin.drain()
        line = await asyncio.wait_for(self._process.stdout.readline(), deadline)
        if not line:
            raise AssertionError(f"the browser driver ended during {op}")
        answer: dict[str, Any] = json.loads(line)
        if not answer.get("ok"):
            raise AssertionError(f"browser {op} {args}: {answer.get('error')}")
        return answer

    async def wait(self, selector: str, text: str | None = None, timeout: float = 30.0) -> str:
        answer = await self.send(
            "wait", timeout + 5, selector=selector, text=text, timeoutMs=int(timeout * 1000)
        )
        return str(answer["text"])

    async def count(self, selector: str) -> int:
        return int((await self.send("count", selector=selector))["value"])

    async def evaluate(self, expression: str) -> Any:
        return (await self.send("eval", expression=expression))["value"]


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    reason = missing()
    if reason is not None:
        if os.environ.get("GPUDRA_REQUIRE_BROWSER") == "1":
            pytest.fail(f"browser tests required but {reason}")
        pytest.skip(reason)
    process = await asyncio.create_subprocess_exec(
        "node", str(BROWSER_DIR / "driver.mjs"), cwd=BROWSER_DIR,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, env={**os.environ, "CHROMIUM": CHROMIUM},
    )  # fmt: skip
    try:
        yield Browser(process)
    finally:
        if process.returncode is None:
            assert process.stdin is not None
            process.stdin.write(b'{"op": "close"}\n')
            process.stdin.close()
            try:
                await asyncio.wait_for(process.wait(), 20)
            except TimeoutError:
                process.kill()
                await process.wait()
