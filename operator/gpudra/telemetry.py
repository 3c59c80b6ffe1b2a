"""Logging: structlog configured once per process, bridged to stdlib logging so kopf's and aiohttp's records
come out in the same format. ``console`` is readable locally; ``json`` is one object per line for clusters.

Records go to the console (standard error) at one level and, when a log file is given (``gpudra up`` keeps one in
its demo directory), to that file at another. kopf's per-event routine ("Handler 'x' succeeded.", "... is
processed: 1 succeeded; 0 failed.") is kept to DEBUG: at INFO it was half of all lines once a few objects exist.
"""

from __future__ import annotations

import logging
import re
import sys
from pathlib import Path
from typing import Literal

from gpudra.errors import ConfigurationError

# structlog imports rich, and through it pygments, whenever they are installed, for tracebacks in colour: 3 MiB and
# 70 modules in every gpudra process, the agent on each GPU node included. Imported with rich hidden it loads
# neither. The console prints exceptions as Python does, in every process whatever it imported first (the renderer
# below is told so); the commands that draw (gpudra up, the reports) import rich themselves.
_RICH_HIDDEN = "rich" not in sys.modules
if _RICH_HIDDEN:
    sys.modules["rich"] = None  # type: ignore[assignment]  # `import rich` raises ImportError while this is set
try:
    import structlog
finally:
    if _RICH_HIDDEN:
        del sys.modules["rich"]

LogFormat = Literal["console", "json"]

_KOPF_ROUTINE = re.compile(
    r"^(Handler '[^']*' succeeded\.|\S.* is processed: \d+ succeeded; \d+ failed\."
    r"|OS signals are ignored: running not in the main thread\.|Unprocessed streams left for .*)$"
)


class _KopfRoutine(logging.Filter):
    """Drop kopf's per-event success lines unless the handler shows DEBUG; also its notices that an embedded
    operator runs in a thread, and that events still queued at shutdown were not processed."""

    def __init__(self, handler: logging.Handler) -> None:
        super().__init__()
        self._handler = handler

    def filter(self, record: logging.LogRecord) -> bool:
        if self._handler.level <= logging.DEBUG or not record.name.startswith("kopf"):
            return True
        return _KOPF_ROUTINE.match(record.getMessage()) is None


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is at the time, so a live display that redirects it (rich's progress)
    keeps log lines above itself instead of being torn by them."""

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)


def _level(name: str) -> int:
    level = logging.getLevelName(name.upper())
    if not isinstance(level, int):
        raise ConfigurationError(f"unknown log level {name!r} (DEBUG, INFO, WARNING, ERROR, CRITICAL)")
    return level


def configure_logging(
    fmt: LogFormat = "console",
    level: str = "INFO",
    *,
    console_level: str | None = None,
    log_file: Path | None = None,
) -> None:
    """Records at ``level`` and above are kept: on the console at ``console_level`` (default ``level``), and in
    ``log_file`` (appended, no colours) when given."""
    shared: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )

    def formatter(colors: bool) -> logging.Formatter:
        renderer: structlog.types.Processor = (
            structlog.processors.JSONRenderer()
            if fmt == "json"
            else structlog.dev.ConsoleRenderer(
                colors=colors, exception_formatter=structlog.dev.plain_traceback
            )
        )
        return structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=shared,
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.processors.format_exc_info,
                renderer,
            ],
        )

    keep = _level(level)
    console: logging.Handler = _StderrHandler(sys.stderr)
    console.setLevel(max(keep, _level(console_level)) if console_level else keep)
    console.setFormatter(formatter(sys.stderr.isatty()))
    handlers = [console]
    if log_file is not None:
        log_file.parent.mkdir(parents=True, exist_ok=True)
        to_file = logging.FileHandler(log_file, encoding="utf-8")
        to_file.setLevel(keep)
        to_file.setFormatter(formatter(False))
        handlers.append(to_file)
    for handler in handlers:
        handler.addFilter(_KopfRoutine(handler))
    root = logging.getLogger()
    for old in root.handlers:
        old.close()
    root.handlers[:] = handlers
    root.setLevel(min(h.level for h in handlers))
    for noisy in ("aiohttp.access", "kubernetes_asyncio"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def get_logger(name: str) -> structlog.stdlib.BoundLogger:
    logger: structlog.stdlib.BoundLogger = structlog.stdlib.get_logger(name)
    return logger
