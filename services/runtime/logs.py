"""structlog setup: JSON lines in services, correlation/causation bound per message.

The JSON is msgspec's, written as bytes: a handler logs each launcher's steps, and the
standard library's encoder and a text logger were a tenth of its CPU in a burst of
creates."""

from __future__ import annotations

import logging
import sys

import msgspec
import structlog

_json = msgspec.json.Encoder(enc_hook=repr)  # a value JSON cannot hold is logged as its repr


def _render(_logger: object, _name: str, event: structlog.types.EventDict) -> bytes:
    return _json.encode(event)


def configure(json: bool = True, level: int = logging.INFO) -> None:
    if not json:
        structlog.configure(
            processors=[
                structlog.contextvars.merge_contextvars,
                structlog.processors.add_log_level,
                structlog.processors.TimeStamper(fmt="iso", utc=True),
                structlog.processors.format_exc_info,
                structlog.dev.ConsoleRenderer(),
            ],
            wrapper_class=structlog.make_filtering_bound_logger(level),
            logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
            cache_logger_on_first_use=True,
        )
        return
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            _render,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.BytesLoggerFactory(file=sys.stderr.buffer),
        cache_logger_on_first_use=True,
    )
