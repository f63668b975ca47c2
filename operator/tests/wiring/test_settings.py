"""Settings from the environment: our names win, upstream's names work, every error is named."""

import pytest

from skyhook_operator.planner.model import Taint
from skyhook_operator.settings import SettingsError, load_settings, parse_duration


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
    assert parse_duration(text) == seconds


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
