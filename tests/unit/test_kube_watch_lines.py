"""A watch stream's lines as the client splits them from the chunks the connection delivers."""

from __future__ import annotations

import asyncio
from unittest import mock

import aiohttp
import pytest

from gpudra.errors import KubeConnectionError
from gpudra.kube.client import _lines
from gpudra.kube.transport import WATCH_READ_BUFFER


async def _split(chunks: list[bytes]) -> list[bytes]:
    stream = aiohttp.StreamReader(mock.Mock(_reading_paused=False), 2**16, loop=asyncio.get_running_loop())
    for chunk in chunks:
        stream.feed_data(chunk)
    stream.feed_eof()
    return [line async for line in _lines(stream.iter_any(), "watch pods")]


@pytest.mark.parametrize(
    ("chunks", "lines"),
    [
        ([b'{"a":1}\n{"b":2}\n'], [b'{"a":1}', b'{"b":2}']),
        ([b'{"a"', b":1}\n{", b'"b":2}\n'], [b'{"a":1}', b'{"b":2}']),  # lines cut anywhere
        ([b"x", b"y", b"z\n"], [b"xyz"]),  # a line over several chunks
        ([b"x\n\ny\n"], [b"x", b"", b"y"]),
        ([b"x\ny"], [b"x", b"y"]),  # the stream ended without a last newline
    ],
)
async def test_lines_are_the_ones_sent_however_the_stream_is_cut(
    chunks: list[bytes], lines: list[bytes]
) -> None:
    assert await _split(chunks) == lines


async def test_a_line_longer_than_the_buffer_ends_the_watch_as_a_lost_connection() -> None:
    piece = b"x" * (WATCH_READ_BUFFER // 4)
    with pytest.raises(KubeConnectionError, match="longer than"):
        await _split([piece] * 5 + [b"\n"])
