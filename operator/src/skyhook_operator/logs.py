"""The operator's log lines, as upstream's operator can be told to write them.

Upstream logs through zap, set by LOG_LEVEL, LOG_ENCODER (`json` or `console`),
LOG_TIME_ENCODER and LOG_STACK_TRACE_LEVEL; the same variables (or SKYHOOK_*) set ours, with
zap's level and time names, so a log pipeline built for upstream's JSON lines reads ours.
A JSON line carries zap's keys: `level`, `ts`, `logger`, `msg`, then `error` (an exception
logged with its traceback) and `stacktrace` (from LOG_STACK_TRACE_LEVEL up).

The formatter is ours, not a JSON logging library's: it is a dozen lines over orjson, which the
operator has anyway, and zap's key names and time encodings are what it must match.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable
from datetime import UTC, datetime

import orjson

# zap's level names, and Python's (ours before these variables were read), to Python's levels.
# zap's dpanic, panic and fatal are above error; the operator logs nothing above error.
LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warn": logging.WARNING,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "dpanic": logging.CRITICAL,
    "panic": logging.CRITICAL,
    "fatal": logging.CRITICAL,
}
ENCODERS = ("console", "json")
# zap's time encoders (zapcore.TimeEncoder's UnmarshalText)
TIME_ENCODERS = ("rfc3339", "rfc3339nano", "iso8601", "epoch", "millis", "nano")

CONSOLE_FORMAT = "[%(asctime)s] %(name)-20.20s [%(levelname)-8.8s] %(message)s"
_ZAP_LEVEL = {
    logging.DEBUG: "debug",
    logging.INFO: "info",
    logging.WARNING: "warn",
    logging.ERROR: "error",
    logging.CRITICAL: "fatal",
}


def _time_encoder(name: str) -> Callable[[float], str | float | int]:
    """zap's encoder of that name: Go's layouts write UTC as `Z`, other zones as an offset."""

    def at(seconds: float) -> datetime:
        return datetime.fromtimestamp(seconds, UTC).astimezone()

    def zone(moment: datetime, colon: bool) -> str:
        offset = moment.strftime("%z")
        if offset == "+0000":
            return "Z"
        return f"{offset[:3]}:{offset[3:]}" if colon else offset

    def rfc3339(seconds: float, fraction: bool) -> str:
        moment = at(seconds)
        text = moment.strftime("%Y-%m-%dT%H:%M:%S")
        if fraction:
            text += f".{moment.microsecond:06d}".rstrip("0").rstrip(".")
        return text + zone(moment, colon=True)

    def iso8601(seconds: float) -> str:
        moment = at(seconds)
        return moment.strftime("%Y-%m-%dT%H:%M:%S") + (
            f".{moment.microsecond // 1000:03d}{zone(moment, colon=False)}"
        )

    encoders: dict[str, Callable[[float], str | float | int]] = {
        "rfc3339": lambda s: rfc3339(s, fraction=False),
        "rfc3339nano": lambda s: rfc3339(s, fraction=True),
        "iso8601": iso8601,
        "epoch": lambda s: s,
        "millis": lambda s: s * 1000,
        "nano": lambda s: int(s * 1_000_000_000),
    }
    return encoders[name]


class _StackTraces(logging.Filter):
    """Attaches the caller's stack to records at `level` and above (zap's stacktrace level).
    A filter runs in the logging call, so the stack is the caller's; logging's own frames are
    left out."""

    def __init__(self, level: int) -> None:
        super().__init__()
        self.level = level

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= self.level and not record.stack_info:
            frames = [f for f in traceback.extract_stack() if f.filename != logging.__file__][
                :-1
            ]  # this filter's own frame
            record.stack_info = "".join(traceback.format_list(frames)).rstrip()
        return True


class JsonFormatter(logging.Formatter):
    """One zap-style JSON object per line."""

    def __init__(self, time_encoder: str) -> None:
        super().__init__()
        self._ts = _time_encoder(time_encoder)

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "level": _ZAP_LEVEL.get(record.levelno, record.levelname.lower()),
            "ts": self._ts(record.created),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            line["error"] = self.formatException(record.exc_info)
        if record.stack_info:
            line["stacktrace"] = record.stack_info
        return orjson.dumps(line).decode()


class _ConsoleFormatter(logging.Formatter):
    """Our bracketed line; with a time encoder set, its time written that way."""

    def __init__(self, time_encoder: str) -> None:
        super().__init__(CONSOLE_FORMAT)
        self._ts = _time_encoder(time_encoder) if time_encoder else None

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        if self._ts is None:
            return super().formatTime(record, datefmt)
        return str(self._ts(record.created))


def configure(
    level: str,
    *,
    encoder: str = "console",
    time_encoder: str = "",
    stack_trace_level: str = "",
    verbose: bool = False,
) -> None:
    """Ours at `level`, other libraries' from info up; `verbose`: ours and aiohttp's at debug.
    urllib3 (ORAS's registry calls) and aiohttp's access log (a line per webhook call) say only
    warnings unless verbose."""
    handler = logging.StreamHandler()
    handler.setFormatter(
        JsonFormatter(time_encoder or "rfc3339")
        if encoder == "json"
        else _ConsoleFormatter(time_encoder)
    )
    if stack_trace_level:
        handler.addFilter(_StackTraces(LEVELS[stack_trace_level.lower()]))
    logging.basicConfig(level=logging.INFO, handlers=[handler], force=True)
    logging.getLogger("skyhook_operator").setLevel(
        logging.DEBUG if verbose else LEVELS[level.lower()]
    )
    if verbose:
        logging.getLogger("aiohttp").setLevel(logging.DEBUG)
    else:
        logging.getLogger("urllib3").setLevel(logging.WARNING)
        logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
