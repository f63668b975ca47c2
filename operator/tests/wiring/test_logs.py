"""The operator's log lines as upstream's variables ask for them: LOG_LEVEL with zap's level
names, LOG_ENCODER=json lines a pipeline built for upstream reads, LOG_TIME_ENCODER and
LOG_STACK_TRACE_LEVEL."""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Iterator

import pytest

from skyhook_operator import logs
from skyhook_operator.settings import SettingsError, load_settings

log = logging.getLogger("skyhook_operator.test")


@pytest.fixture(autouse=True)
def _utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Times in UTC, which zap's layouts write as `Z`."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    ours = logging.getLogger("skyhook_operator").level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    logging.getLogger("skyhook_operator").setLevel(ours)


def _configured(environ: dict[str, str]) -> None:
    settings = load_settings(environ)
    logs.configure(
        settings.log_level,
        encoder=settings.log_encoder,
        time_encoder=settings.log_time_encoder,
        stack_trace_level=settings.log_stack_trace_level,
    )


def _lines(capsys: pytest.CaptureFixture[str]) -> list[str]:
    return capsys.readouterr().err.splitlines()


def test_upstream_json_lines_carry_zaps_keys(capsys: pytest.CaptureFixture[str]) -> None:
    _configured({"LOG_ENCODER": "json", "LOG_LEVEL": "info"})
    log.info("pass: %d PatchNode", 3)
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        log.exception("pass failed")
    first, second = (json.loads(line) for line in _lines(capsys))
    assert {k: first[k] for k in ("level", "logger", "msg")} == {
        "level": "info",
        "logger": "skyhook_operator.test",
        "msg": "pass: 3 PatchNode",
    }
    # rfc3339 unless LOG_TIME_ENCODER says otherwise
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", first["ts"]), first["ts"]
    assert second["level"] == "error" and "RuntimeError: boom" in second["error"]


def test_zaps_warn_level_is_read_and_hides_info(capsys: pytest.CaptureFixture[str]) -> None:
    _configured({"LOG_LEVEL": "warn"})
    log.info("hidden")
    log.warning("shown")
    lines = _lines(capsys)
    assert len(lines) == 1 and "shown" in lines[0] and "[WARNING " in lines[0]


@pytest.mark.parametrize(
    ("encoder", "pattern"),
    [
        ("epoch", r"\d{10}\.\d+"),
        ("millis", r"\d{13}\.\d+"),
        ("nano", r"\d{19}"),
        ("iso8601", r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"),
        ("rfc3339nano", r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,6})?Z"),
    ],
)
def test_each_time_encoder_writes_its_form(
    capsys: pytest.CaptureFixture[str], encoder: str, pattern: str
) -> None:
    _configured({"LOG_ENCODER": "json", "LOG_TIME_ENCODER": encoder})
    log.info("x")
    ts = json.loads(_lines(capsys)[0])["ts"]
    assert re.fullmatch(pattern, str(ts)), ts


def test_a_time_encoder_applies_to_console_lines_too(capsys: pytest.CaptureFixture[str]) -> None:
    _configured({"LOG_TIME_ENCODER": "rfc3339"})
    log.info("x")
    assert re.match(r"\[\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\] ", _lines(capsys)[0])


def test_entries_from_the_stack_trace_level_up_say_who_logged_them(
    capsys: pytest.CaptureFixture[str],
) -> None:
    _configured({"LOG_ENCODER": "json", "LOG_STACK_TRACE_LEVEL": "warn"})
    log.info("no stack")
    log.warning("with stack")
    quiet, loud = (json.loads(line) for line in _lines(capsys))
    assert "stacktrace" not in quiet
    assert "test_entries_from_the_stack_trace_level_up_say_who_logged_them" in loud["stacktrace"]
    assert "logging/__init__.py" not in loud["stacktrace"]


def test_bad_values_are_refused_naming_the_variable() -> None:
    with pytest.raises(SettingsError) as refused:
        load_settings(
            {"LOG_ENCODER": "xml", "LOG_TIME_ENCODER": "julian", "LOG_STACK_TRACE_LEVEL": "loud"}
        )
    text = str(refused.value)
    for variable in ("LOG_ENCODER", "LOG_TIME_ENCODER", "LOG_STACK_TRACE_LEVEL"):
        assert variable in text, text
