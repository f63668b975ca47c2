"""Pure pieces: flag markers, argument expansion, the flag decision, argv forms, settings,
interrupt decoding, config interrupt selection, history and log formatting."""

from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from skyhook_agent.errors import InputError
from skyhook_agent.flags import check_results_body
from skyhook_agent.history import with_entry
from skyhook_agent.interrupts import INTERRUPT_TYPES, decode_interrupt
from skyhook_agent.invocation import Invocation, parse_controller_argv
from skyhook_agent.layout import step_marker
from skyhook_agent.logs import LinePrefixer
from skyhook_agent.runner import expand_arguments, should_run
from skyhook_agent.settings import AgentSettings, ResourceId, parse_resource_id
from skyhook_schemas.package_config import Step
from skyhook_schemas.podpackage import encode_interrupt_argument as encode_interrupt


def make_step(path: str = "a.sh", idempotence: bool = False) -> Step:
    return Step(path, path, (), (0,), True, idempotence, False)


@pytest.mark.parametrize(
    ("arguments", "returncodes", "marker"),
    [([], [0], "W11fWzBd"), (["apply"], [0], "WydhcHBseSddX1swXQ==")],
    ids=["no-args", "shellscript-apply"],
)
def test_step_marker_matches_upstream_flag_names(
    arguments: list[str], returncodes: list[int], marker: str
) -> None:
    assert step_marker(arguments, returncodes) == marker


def test_expand_arguments_reports_every_missing_variable() -> None:
    args, missing = expand_arguments(["a", "env:X", "env:NOPE", "xenv:Y", "env:"], {"X": "1"})
    assert args == ["a", "1", "xenv:Y"]
    assert missing == [(2, "NOPE"), (4, "")]


@pytest.mark.parametrize(
    ("mode", "flag", "always", "self_idempotent", "runs"),
    [
        ("apply", False, False, False, True),
        ("apply", True, False, False, False),
        ("post-interrupt", True, False, False, False),
        ("apply", True, True, False, True),
        ("apply", True, False, True, True),
        ("config", True, False, False, True),
        ("upgrade", True, False, False, True),
        ("uninstall", True, False, False, True),
    ],
    ids=["no-flag", "flag-skips", "post-interrupt-skips", "always-run", "self-idempotent",
         "config-reruns", "upgrade-reruns", "uninstall-reruns"],
)  # fmt: skip
def test_flag_decision(
    mode: str, flag: bool, always: bool, self_idempotent: bool, runs: bool
) -> None:
    run, reason = should_run(make_step(idempotence=self_idempotent), mode, flag, always)
    assert run is runs
    assert bool(reason) is flag


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["apply", "/root", "/c"], Invocation("apply", Path("/root"), "/c")),
        (["interrupt", "/root", "/c", "b64"], Invocation("interrupt", Path("/root"), "/c", "b64")),
        (["apply", "/c"], Invocation("apply", Path("/root"), "/c")),
        (["interrupt", "/c", "b64"], Invocation("interrupt", Path("/root"), "/c", "b64")),
    ],
    ids=["current", "current-interrupt", "legacy", "legacy-interrupt"],
)
def test_controller_argv_forms(argv: list[str], expected: Invocation) -> None:
    assert parse_controller_argv(argv) == expected


@pytest.mark.parametrize("argv", [[], ["apply"], ["a", "b", "c", "d", "e"]])
def test_controller_argv_wrong_count(argv: list[str]) -> None:
    with pytest.raises(InputError, match="expected 2 to 4 arguments"):
        parse_controller_argv(argv)


def test_settings_defaults_and_parsing() -> None:
    assert AgentSettings.from_env({}) == AgentSettings()
    settings = AgentSettings.from_env({
        "SKYHOOK_AGENT_WRITE_LOGS": "False", "COPY_RESOLV": "TRUE", "OVERLAY_ALWAYS_RUN_STEP": "1",
        "SKYHOOK_AGENT_BUFFER_LIMIT": "16", "SKYHOOK_ROOT_DIR": "/var/lib/skyhook/x",
    })  # fmt: skip
    assert (settings.write_logs, settings.copy_resolv, settings.always_run_step) == (
        False, True, False)  # fmt: skip
    assert (settings.buffer_limit, settings.state_dir) == (16, "/var/lib/skyhook/x")


def test_resource_id() -> None:
    assert parse_resource_id("demo-u-1_tuning_2.0.2") == ResourceId("demo-u-1", "tuning", "2.0.2")
    for bad in ("", "a_b", "a_b_c_d", "a__c"):
        with pytest.raises(InputError):
            parse_resource_id(bad)


@pytest.mark.parametrize(
    ("kind", "fields", "commands"),
    [
        ("node_restart", {}, [["reboot"]]),
        ("service_restart", {"services": ["a", "b"]},
         [["systemctl", "daemon-reload"], ["systemctl", "restart", "a"],
          ["systemctl", "restart", "b"]]),
        ("service_restart", {}, [["systemctl", "daemon-reload"]]),
        ("restart_all_services", {}, [["service", "procps", "force-reload"]]),
        ("no_op", {}, []),
        ("script_interrupt", {}, []),
    ],
)  # fmt: skip
def test_interrupt_round_trip(kind: str, fields: dict[str, list[str]], commands: list) -> None:  # type: ignore[type-arg]
    interrupt = decode_interrupt(encode_interrupt(kind, **fields))
    assert interrupt.type == kind
    assert [list(c) for c in interrupt.commands] == commands


def test_registry_is_exactly_upstreams_five_types() -> None:
    assert set(INTERRUPT_TYPES) == {
        "node_restart", "service_restart", "restart_all_services", "no_op", "script_interrupt"
    }  # fmt: skip


def test_history_prepends_newest_entry() -> None:
    now = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
    first = with_entry({"current-version": "unknown", "history": []}, "1.0.0", now)
    second = with_entry(first, "uninstalled", now)
    assert second == {
        "current-version": "uninstalled",
        "history": [{"version": "uninstalled", "time": "2025-01-02T03:04:05+00:00"},
                    {"version": "1.0.0", "time": "2025-01-02T03:04:05+00:00"}],
    }  # fmt: skip


def test_check_results_body_marks_failures_true() -> None:
    results = [(make_step("a.sh"), True), (make_step("b.sh"), False)]
    assert check_results_body(results) == "a.sh False\nb.sh True"


@given(st.lists(st.binary(max_size=50), max_size=10))
def test_prefixer_keeps_every_byte_and_prefixes_every_line(chunks: list[bytes]) -> None:
    prefixer = LinePrefixer("[out]", clock=lambda: datetime(2025, 1, 1))
    text = "".join(prefixer.feed(chunk) for chunk in chunks) + prefixer.finish()
    prefix = "[out]2025-01-01T00:00:00 "
    *lines, tail = text.split("\n")
    assert tail == ""  # every emitted line is complete
    assert all(line.startswith(prefix) for line in lines)
    original = b"".join(chunks)
    expected = original.split(b"\n")
    if expected[-1] == b"":
        expected.pop()  # no line after a final newline
    assert [line[len(prefix) :] for line in lines] == [
        raw.decode("utf-8", errors="replace") for raw in expected
    ]


@given(st.lists(st.text()), st.lists(st.integers()), st.lists(st.text()), st.lists(st.integers()))
def test_step_markers_differ_whenever_arguments_or_returncodes_differ(
    args_a: list[str], rcs_a: list[int], args_b: list[str], rcs_b: list[int]
) -> None:
    same = (args_a, rcs_a) == (args_b, rcs_b)
    assert (step_marker(args_a, rcs_a) == step_marker(args_b, rcs_b)) is same


@given(st.lists(st.text()), st.dictionaries(st.text(), st.text()))
def test_every_argument_is_either_expanded_or_reported(
    arguments: list[str], env: dict[str, str]
) -> None:
    expanded, missing = expand_arguments(arguments, env)
    assert len(expanded) + len(missing) == len(arguments)
    assert all(arguments[index] == f"env:{name}" for index, name in missing)
