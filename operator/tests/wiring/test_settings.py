"""Settings from the environment: our names win, upstream's names work, every error is named."""

import re
from dataclasses import replace
from importlib import metadata
from pathlib import Path

import pytest
from pydantic import AliasChoices

from skyhook_operator.settings import (
    Settings,
    SettingsError,
    load_settings,
    parse_bind_address,
    parse_seconds,
)
from skyhook_planner.model.settings import PlannerSettings
from skyhook_planner.model.vocabulary import Taint


def test_defaults_match_upstream() -> None:
    settings = load_settings({})
    assert settings.namespace == "skyhook"
    assert settings.agent_version == "latest"
    assert settings.runtime_required_taint == Taint(
        "skyhook.nvidia.com", "NoSchedule", "runtime-required"
    )
    assert settings.default_interval == 600


def test_upstream_names_are_read_and_ours_win() -> None:
    env = {"NAMESPACE": "up", "AGENT_IMAGE": "a/b:1.2", "SKYHOOK_AGENT_IMAGE": "mine/agent:9"}
    settings = load_settings(env)
    assert settings.namespace == "up"
    assert settings.agent_image == "mine/agent:9"


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        pytest.param("90", 90, id="plain"),
        pytest.param("10m", 600, id="minutes"),
        pytest.param("1h30m", 5400, id="hours"),
        pytest.param("2.5s", 2.5, id="fraction"),
    ],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_seconds(text) == seconds


def test_every_problem_is_reported_with_its_variable() -> None:
    env = {
        "AGENT_IMAGE": "no-tag",
        "COPY_DIR_ROOT": "relative",
        "DEFAULT_INTERVAL": "10s",
        "RUNTIME_REQUIRED_TAINT": "key=value:Sometimes",
        "SKYHOOK_WRITE_CONCURRENCY": "x",
    }
    with pytest.raises(SettingsError) as caught:
        load_settings(env)
    text = str(caught.value)
    for name in env:
        assert name in text
    assert len(caught.value.problems) == len(env)


def test_planner_settings_carry_the_same_values() -> None:
    settings = load_settings({"NAMESPACE": "ops", "RUNTIME_REQUIRED_TAINT": "x=y:NoExecute"})
    planner = settings.for_planner()
    assert planner.namespace == "ops"
    assert planner.runtime_required_taint == Taint("x", "NoExecute", "y")


@pytest.mark.parametrize(
    ("image", "version"),
    [
        pytest.param("ghcr.io/nvidia/skyhook/agent:6.2.0", "6.2.0", id="tag"),
        pytest.param(
            "ghcr.io/nvidia/skyhook/agent:6.2.0@sha256:" + "ab" * 32, "6.2.0", id="tag-and-digest"
        ),
        pytest.param("registry.local:5000/skyhook/agent:v1", "v1", id="registry-port"),
    ],
)
def test_agent_version_is_the_tag_without_a_digest(image: str, version: str) -> None:
    settings = load_settings({"AGENT_IMAGE": image})
    assert settings.agent_version == version
    assert settings.for_planner().agent_version == version


@pytest.mark.parametrize(
    "image",
    [
        pytest.param("ghcr.io/nvidia/skyhook/agent@sha256:" + "ab" * 32, id="digest-only"),
        pytest.param("registry.local:5000/skyhook/agent", id="registry-port-no-tag"),
    ],
)
def test_agent_image_without_a_tag_is_refused(image: str) -> None:
    with pytest.raises(SettingsError) as caught:
        load_settings({"AGENT_IMAGE": image})
    assert "AGENT_IMAGE" in str(caught.value)
    assert "must name a tag" in str(caught.value)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        pytest.param("1.5m", 90, id="fractional-minutes"),
        pytest.param("300ms", 0.3, id="milliseconds"),
        pytest.param("2h45m30s", 9930, id="go-composite"),
    ],
)
def test_settings_take_every_go_duration(text: str, seconds: float) -> None:
    """Settings and SCR fields read durations with one grammar, Go's."""
    assert parse_seconds(text) == pytest.approx(seconds)
    assert load_settings({"SKYHOOK_RETRY_INTERVAL": text}).retry_interval == pytest.approx(seconds)


def test_retry_backoff_and_operator_version_reach_the_planner() -> None:
    settings = load_settings(
        {
            "SKYHOOK_RETRY_BACKOFF_BASE": "3s",
            "SKYHOOK_RETRY_BACKOFF_MAX": "1m",
            "SKYHOOK_OPERATOR_VERSION": "v9.9.9",
        }
    )
    planner = settings.for_planner()
    assert (planner.retry_backoff_base_s, planner.retry_backoff_max_s) == (3, 60)
    assert planner.operator_version == "v9.9.9"


def test_stage_timeout_retries_and_pod_retention_reach_the_planner() -> None:
    """Upstream's Job settings are read under their names too; ours win."""
    defaults = load_settings({}).for_planner()
    assert (defaults.stage_timeout_s, defaults.stage_retries) == (3600, 3)
    assert (defaults.pod_ttl_succeeded_s, defaults.pod_ttl_failed_s) == (3600, 86400)
    upstream = load_settings(
        {
            "JOB_STAGE_TIMEOUT": "30m",
            "JOB_BACKOFF_LIMIT": "0",
            "JOB_TTL_SUCCEEDED": "2h",
            "JOB_TTL_FAILED": "1m",
            "SKYHOOK_STAGE_TIMEOUT": "0",
        }
    ).for_planner()
    assert (upstream.stage_timeout_s, upstream.stage_retries) == (0, 0)
    assert (upstream.pod_ttl_succeeded_s, upstream.pod_ttl_failed_s) == (7200, 60)


def test_pod_retention_under_a_minute_and_negative_limits_are_refused() -> None:
    with pytest.raises(SettingsError) as caught:
        load_settings(
            {
                "JOB_TTL_SUCCEEDED": "0",
                "SKYHOOK_POD_TTL_FAILED": "59s",
                "SKYHOOK_STAGE_RETRIES": "-1",
                "JOB_STAGE_TIMEOUT": "-5",
            }
        )
    problems = caught.value.problems
    assert len(problems) == 4
    assert any(p.startswith("JOB_TTL_SUCCEEDED: ") and "minimum of 60 s" in p for p in problems)
    assert any(p.startswith("SKYHOOK_POD_TTL_FAILED: ") for p in problems)
    assert any(p.startswith("SKYHOOK_STAGE_RETRIES: ") for p in problems)
    assert any(p.startswith("JOB_STAGE_TIMEOUT: ") for p in problems)


def test_operator_version_defaults_to_the_installed_one() -> None:
    installed = metadata.version("skyhook-operator")
    assert load_settings({}).for_planner().operator_version == f"v{installed}"


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("skyhook.nvidia.com=runtime-required:NoSchedule", id="key-value"),
        pytest.param("dedicated:NoExecute", id="key-only"),
    ],
)
def test_taint_text_round_trips(text: str) -> None:
    taint = Taint.parse(text)
    assert str(taint) == text
    assert (
        load_settings({"RUNTIME_REQUIRED_TAINT": text})
        .describe()
        .count(f"runtime_required_taint = {text}")
        == 1
    )


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("example.com/dedicated=gpu:NoSchedule", id="prefixed"),
        pytest.param("k" * 54 + ":NoSchedule", id="54-characters"),
    ],
)
def test_a_runtime_required_taint_key_that_cannot_name_the_marker_is_refused(text: str) -> None:
    with pytest.raises(SettingsError) as caught:
        load_settings({"RUNTIME_REQUIRED_TAINT": text})
    (problem,) = caught.value.problems
    assert problem.startswith("RUNTIME_REQUIRED_TAINT")
    assert "must have no prefix (no '/') and at most 53 characters" in problem
    assert load_settings({"RUNTIME_REQUIRED_TAINT": "k" * 53 + ":NoSchedule"})


def test_the_package_priority_class_reaches_the_planner_and_a_bad_name_is_refused() -> None:
    settings = load_settings({"PACKAGE_PRIORITY_CLASS_NAME": "system-node-critical"})
    assert settings.for_planner().package_priority_class_name == "system-node-critical"
    assert load_settings({}).for_planner().package_priority_class_name == ""
    with pytest.raises(SettingsError) as caught:
        load_settings({"PACKAGE_PRIORITY_CLASS_NAME": "Node_Critical"})
    (problem,) = caught.value.problems
    assert problem.startswith("PACKAGE_PRIORITY_CLASS_NAME")
    assert "'Node_Critical' is not a PriorityClass name" in problem


def test_a_taint_removal_is_not_a_taint() -> None:
    with pytest.raises(ValueError, match="removes a taint"):
        Taint.parse("key=value:NoSchedule-")


@pytest.mark.parametrize(
    ("env", "metrics", "probes"),
    [
        # Upstream's ports: its kube-rbac-proxy serves metrics on 8443, ours does the same.
        pytest.param({}, ":8443", ":8081", id="upstream-defaults"),
        pytest.param(
            {"METRICS_PORT": ":9090", "SKYHOOK_METRICS_PORT": "127.0.0.1:9191"},
            "127.0.0.1:9191",
            ":8081",
            id="ours-wins",
        ),
        pytest.param({"PROBE_PORT": "[::1]:8181"}, ":8443", "[::1]:8181", id="ipv6-host"),
        pytest.param({"METRICS_PORT": "0", "PROBE_PORT": "0"}, "0", "0", id="off"),
    ],
)
def test_metrics_and_probe_addresses(env: dict[str, str], metrics: str, probes: str) -> None:
    settings = load_settings(env)
    assert (settings.metrics_port, settings.probe_port) == (metrics, probes)


@pytest.mark.parametrize(
    ("env", "secure", "cert_dir"),
    [
        pytest.param({}, True, "", id="secure-self-signed-by-default"),
        pytest.param({"SKYHOOK_METRICS_SECURE": "false"}, False, "", id="plain-http"),
        pytest.param({"SKYHOOK_METRICS_CERT_DIR": "/certs"}, True, "/certs", id="mounted"),
    ],
)
def test_metrics_are_secure_unless_told(env: dict[str, str], secure: bool, cert_dir: str) -> None:
    settings = load_settings(env)
    assert (settings.metrics_secure, settings.metrics_cert_dir) == (secure, cert_dir)


@pytest.mark.parametrize(
    ("text", "bind"),
    [
        pytest.param(":8080", ("", 8080), id="every-interface"),
        pytest.param("127.0.0.1:1", ("127.0.0.1", 1), id="host"),
        pytest.param("[::1]:8080", ("::1", 8080), id="ipv6"),
        pytest.param("0", None, id="off"),
    ],
)
def test_bind_addresses(text: str, bind: tuple[str, int] | None) -> None:
    assert parse_bind_address(text) == bind


@pytest.mark.parametrize("text", ["8080", ":http", ":0", ":65536", "host:"])
def test_bad_bind_addresses_name_the_variable(text: str) -> None:
    with pytest.raises(SettingsError) as caught:
        load_settings({"PROBE_PORT": text})
    assert caught.value.problems[0].startswith("PROBE_PORT: ")
    assert "[host]:port" in caught.value.problems[0]


def test_every_setting_is_read_from_its_skyhook_name_first() -> None:
    for name, info in Settings.model_fields.items():
        assert isinstance(info.validation_alias, AliasChoices), name
        assert info.validation_alias.choices[0] == f"SKYHOOK_{name.upper()}"


def test_addresses_are_split_once_at_load() -> None:
    settings = load_settings({"PROBE_PORT": "[::1]:8181", "METRICS_PORT": "0"})
    assert settings.probe_port.bind == ("::1", 8181)
    assert settings.metrics_port.bind is None
    assert settings.webhook_port.bind == ("", 9443)


@pytest.mark.parametrize(
    ("env", "problem"),
    [
        pytest.param(
            {"DEFAULT_INTERVAL": "10s"},
            "DEFAULT_INTERVAL: 10.0 s is shorter than the minimum of 60 s",
            id="minimum",
        ),
        pytest.param(
            {"SKYHOOK_WEBHOOK_PORT": "0"},
            "SKYHOOK_WEBHOOK_PORT: the webhooks need a port; turn them off with "
            "ENABLE_WEBHOOKS=false",
            id="webhooks-need-a-port",
        ),
        pytest.param(
            {"SKYHOOK_NAMESPACE": "", "NAMESPACE": "ops"},
            "SKYHOOK_NAMESPACE: must not be empty",
            id="ours-is-the-one-read",
        ),
        pytest.param(
            {"LEADER_ELECTION": "maybe"},
            "LEADER_ELECTION: 'maybe' is not a boolean (true or false)",
            id="parse-error",
        ),
        pytest.param(
            {"SKYHOOK_RETRY_INTERVAL": "soon"},
            "SKYHOOK_RETRY_INTERVAL: 'soon' is not a duration such as 90s, 10m or 1h30m",
            id="duration",
        ),
    ],
)
def test_a_problem_is_its_variable_then_what_is_wrong(env: dict[str, str], problem: str) -> None:
    with pytest.raises(SettingsError) as caught:
        load_settings(env)
    assert caught.value.problems == [problem]


def test_the_process_environment_is_read_when_no_mapping_is_given(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What `skyhook-operator run` does: os.environ, ours over upstream's, problems named."""
    monkeypatch.setenv("SKYHOOK_NAMESPACE", "ours")
    monkeypatch.setenv("NAMESPACE", "upstream")
    monkeypatch.setenv("AGENT_IMAGE", "a/b:1.2")
    settings = load_settings()
    assert (settings.namespace, settings.agent_image) == ("ours", "a/b:1.2")
    monkeypatch.setenv("PROBE_PORT", "8080")
    with pytest.raises(SettingsError) as caught:
        load_settings()
    assert [p.split(":")[0] for p in caught.value.problems] == ["PROBE_PORT"]


def test_only_the_variable_read_is_checked_and_named() -> None:
    """Upstream's name is not read when ours is set, so its bad value goes unnoticed; when it
    is the one read, its problem names it, not ours."""
    env = {"SKYHOOK_PROBE_PORT": ":8181", "PROBE_PORT": "nonsense"}
    assert load_settings(env).probe_port == ":8181"
    with pytest.raises(SettingsError) as caught:
        load_settings({"PROBE_PORT": "nonsense", "SKYHOOK_METRICS_PORT": ":9"})
    assert caught.value.problems == [
        "PROBE_PORT: 'nonsense' is not [host]:port with a port from 1 to 65535 (or 0: off)"
    ]


def test_a_fields_own_name_is_not_a_variable() -> None:
    """Only `SKYHOOK_<FIELD>` and upstream's name are read; `namespace=x` is someone else's."""
    settings = load_settings({"namespace": "x", "log_level": "loud", "write_concurrency": "0"})
    assert (settings.namespace, settings.log_level, settings.write_concurrency) == (
        "skyhook",
        "info",
        16,
    )


@pytest.mark.parametrize(
    ("env", "field", "value"),
    [
        pytest.param(
            {"SKYHOOK_INSECURE_REGISTRIES": '["a:5000"]'},
            "insecure_registries",
            '["a:5000"]',
            id="json-list-is-text",
        ),
        pytest.param({"SKYHOOK_NAMESPACE": "null"}, "namespace", "null", id="null-is-text"),
        pytest.param(
            {"RUNTIME_REQUIRED_TAINT": "x=y:NoExecute"},
            "runtime_required_taint",
            Taint("x", "NoExecute", "y"),
            id="taint-is-parsed-not-json",
        ),
    ],
)
def test_values_are_text_never_json(env: dict[str, str], field: str, value: object) -> None:
    assert getattr(load_settings(env), field) == value


def test_overrides_win_and_are_named_as_arguments() -> None:
    env = {"SKYHOOK_NAMESPACE": "env", "NAMESPACE": "upstream"}
    assert load_settings(env, namespace="given").namespace == "given"
    with pytest.raises(SettingsError) as caught:
        load_settings(env, namespace="", write_concurrency=0)
    assert caught.value.problems == [
        "namespace (argument): must not be empty",
        "write_concurrency (argument): 0 must be at least 1",
    ]


def test_the_planners_defaults_are_the_operators() -> None:
    settings = load_settings({})
    # Two differ on purpose: the version is the installed one, and the planner's default
    # leaves package Secrets unchecked (the CLI's forecast does not know the operator's
    # setting) where the operator allows none unless told.
    expected = replace(
        PlannerSettings(), operator_version=settings.operator_version, package_secrets=frozenset()
    )
    assert settings.for_planner() == expected


def test_the_readme_documents_every_setting() -> None:
    """operator/README.md's table: each setting's variables and meaning in order, and its
    default unless computed at start (the installed version, the host name)."""
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    rows = re.findall(r"^\| (`SKYHOOK_.*?`) \| (.*?) \| (.*) \|$", readme, re.MULTILINE)
    documented = []
    for name, info in Settings.model_fields.items():
        assert isinstance(info.validation_alias, AliasChoices)
        variables = " / ".join(f"`{choice}`" for choice in info.validation_alias.choices)
        documented.append((variables, info.description))
        if info.default_factory is None:
            assert (variables, f"`{info.default}`") in [(v, d) for v, d, _ in rows], name
    assert [(v, m) for v, _, m in rows] == documented


def test_an_api_group_other_than_the_one_the_process_speaks_is_refused() -> None:
    """The keys are spelled as the process starts: a later value could not take effect."""
    with pytest.raises(SettingsError) as caught:
        load_settings({"SKYHOOK_API_GROUP": "nodewright.nvidia.com"})
    assert caught.value.problems == [
        "SKYHOOK_API_GROUP: 'nodewright.nvidia.com': this process speaks skyhook.nvidia.com; "
        "set the variable before it starts"
    ]
    assert load_settings({"SKYHOOK_API_GROUP": "skyhook.nvidia.com"}).api_group == (
        "skyhook.nvidia.com"
    )
