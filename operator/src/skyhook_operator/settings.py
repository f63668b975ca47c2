"""The operator's one settings object, read from the environment once at startup.

Every field is filled by rule: `SKYHOOK_<FIELD NAME IN CAPITALS>` wins, then the environment
name upstream's operator reads (so an existing deployment manifest keeps working), then the
default. All problems are collected and reported together; `describe()` gives the effective
values for the startup log.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from skyhook_operator.planner.model import PlannerSettings, Taint, image_tag

_DURATION = re.compile(r"^(?:(?P<h>\d+)h)?(?:(?P<m>\d+)m)?(?:(?P<s>\d+(?:\.\d+)?)s)?$")


class SettingsError(ValueError):
    """Every invalid setting, one line each, naming the environment variable."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


def _meta(env: str | None, doc: str) -> dict[str, Any]:
    return {"upstream_env": env, "doc": doc}


@dataclass(frozen=True)
class Settings:
    """Operator settings; each field's metadata carries its upstream env name and its meaning."""

    namespace: str = field(
        default="skyhook",
        metadata=_meta("NAMESPACE", "Namespace for stage pods and the SCRs' ConfigMaps."),
    )
    agent_image: str = field(
        default="ghcr.io/nvidia/skyhook/agent:latest",
        metadata=_meta(
            "AGENT_IMAGE",
            "Image of the agent that runs each stage; must carry a tag (a digest may follow, "
            "`repo:tag@sha256:...`). The tag is the agentVersion written into node metadata.",
        ),
    )
    pause_image: str = field(
        default="registry.k8s.io/pause:3.10",
        metadata=_meta("PAUSE_IMAGE", "Image of the idle container each stage pod ends with."),
    )
    copy_dir_root: str = field(
        default="/var/lib/skyhook",
        metadata=_meta("COPY_DIR_ROOT", "Host directory where package content is copied."),
    )
    agent_log_root: str = field(
        default="/var/log/skyhook",
        metadata=_meta("AGENT_LOG_ROOT", "Host directory the agent writes its logs under."),
    )
    runtime_required_taint: Taint = field(
        default=Taint("skyhook.nvidia.com", "NoSchedule", "runtime-required"),
        metadata=_meta(
            "RUNTIME_REQUIRED_TAINT",
            "Taint `key[=value]:Effect` removed from a node once every runtimeRequired SCR "
            "completed on it.",
        ),
    )
    reapply_on_reboot: bool = field(
        default=False,
        metadata=_meta(
            "REAPPLY_ON_REBOOT",
            "When a node's bootID changes outside an interrupt, forget its state for every "
            "SCR so all packages run again.",
        ),
    )
    image_pull_secret: str = field(
        default="",
        metadata=_meta("IMAGE_PULL_SECRET", "Pull secret name put on every pod; empty: none."),
    )
    default_interval: float = field(
        default=600.0,
        metadata=_meta(
            "DEFAULT_INTERVAL",
            "Seconds (or a Go duration such as `10m`) between passes when nothing changes; "
            "at least 60.",
        ),
    )
    pass_debounce: float = field(
        default=0.05,
        metadata=_meta(
            None,
            "Seconds a pass waits after the first watch event so a burst of events "
            "becomes one pass; 0 runs at once.",
        ),
    )
    retry_interval: float = field(
        default=2.0,
        metadata=_meta(
            None,
            "Seconds before the next pass while any SCR is incomplete or a write failed "
            "(upstream's 2 s requeue).",
        ),
    )
    write_concurrency: int = field(
        default=16,
        metadata=_meta(
            None,
            "How many API writes one pass sends at once (node patches, pod creations "
            "and deletions are independent per node).",
        ),
    )
    drain_timeout: float = field(
        default=600.0,
        metadata=_meta(
            None,
            "Seconds a drain waits for evicted pods to be gone before it reports a "
            "failure and starts over.",
        ),
    )
    kopf_prefix: str = field(
        default="operator.skyhook.nvidia.com",
        metadata=_meta(
            None,
            "Annotation prefix under which kopf keeps its own progress and diff-base on "
            "Skyhook objects.",
        ),
    )
    log_level: str = field(
        default="info",
        metadata=_meta("LOG_LEVEL", "debug, info, warning or error."),
    )

    @property
    def agent_version(self) -> str:
        """The agent image's tag, as upstream writes it into node metadata."""
        return image_tag(self.agent_image)

    def describe(self) -> list[str]:
        """`name = value` lines for the startup log."""
        return [f"{f.name} = {_show(getattr(self, f.name))}" for f in dataclasses.fields(self)]

    def for_planner(self) -> PlannerSettings:
        """The subset the pure planner decides with."""
        return PlannerSettings(
            namespace=self.namespace,
            agent_image=self.agent_image,
            pause_image=self.pause_image,
            copy_dir_root=self.copy_dir_root,
            agent_log_root=self.agent_log_root,
            runtime_required_taint=self.runtime_required_taint,
            reapply_on_reboot=self.reapply_on_reboot,
            image_pull_secret=self.image_pull_secret,
        )


def _show(value: Any) -> str:
    return format_taint(value) if isinstance(value, Taint) else str(value)


def parse_duration(text: str) -> float:
    """Seconds from `90`, `90s`, `10m` or `1h30m`; raises ValueError otherwise."""
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        pass
    match = _DURATION.match(text)
    if not text or match is None:
        raise ValueError(f"{text!r} is not a duration such as 90s, 10m or 1h30m")
    return int(match["h"] or 0) * 3600 + int(match["m"] or 0) * 60 + float(match["s"] or 0.0)


def parse_taint(text: str) -> Taint:
    """`key[=value]:Effect`; raises ValueError naming what is wrong."""
    if text.strip().endswith("-"):
        raise ValueError(f"{text!r} ends with '-', which removes a taint rather than naming one")
    return Taint.parse(text.strip())


def format_taint(taint: Taint) -> str:
    head = f"{taint.key}={taint.value}" if taint.value else taint.key
    return f"{head}:{taint.effect}"


def _parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off", ""}:
        return False
    raise ValueError(f"{text!r} is not a boolean (true or false)")


def _check(name: str, value: Any) -> str | None:
    """The problem with one parsed value, or None."""
    if name == "namespace" and not value:
        return "must not be empty"
    if name in {"agent_image", "pause_image"} and not image_tag(value):
        return f"{value!r} must name a tag (image:tag, optionally followed by @sha256:<digest>)"
    if name in {"copy_dir_root", "agent_log_root"} and not value.startswith("/"):
        return f"{value!r} must be an absolute path"
    if name == "default_interval" and value < 60:
        return f"{value} s is shorter than the minimum of 60 s"
    if name == "log_level" and value.lower() not in {"debug", "info", "warning", "error"}:
        return f"{value!r} must be debug, info, warning or error"
    if name in {"pass_debounce", "retry_interval", "drain_timeout"} and value < 0:
        return f"{value} must not be negative"
    if name == "write_concurrency" and value < 1:
        return f"{value} must be at least 1"
    return None


def _parse(f: dataclasses.Field[Any], raw: str) -> Any:
    if f.type in {"Taint"}:
        return parse_taint(raw)
    if f.type == "bool":
        return _parse_bool(raw)
    if f.type == "float":
        return parse_duration(raw)
    if f.type == "int":
        return int(raw)
    return raw


def load_settings(environ: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
    """Settings from the environment (`SKYHOOK_<FIELD>`, then upstream's name), then overrides.

    Raises SettingsError listing every invalid variable.
    """
    environ = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    problems: list[str] = []
    for f in dataclasses.fields(Settings):
        names = [f"SKYHOOK_{f.name.upper()}"]
        if f.metadata["upstream_env"]:
            names.append(f.metadata["upstream_env"])
        source = next((n for n in names if n in environ), None)
        if f.name in overrides:
            value, source = overrides[f.name], f"{f.name} (argument)"
        elif source is None:
            value = f.default
        else:
            try:
                value = _parse(f, environ[source])
            except ValueError as error:
                problems.append(f"{source}: {error}")
                continue
        problem = _check(f.name, value)
        if problem:
            problems.append(f"{source or f.name}: {problem}")
        values[f.name] = value
    if problems:
        raise SettingsError(problems)
    return Settings(**values)


def environment_lines() -> list[str]:
    """Markdown table rows documenting every setting (used to keep the README honest)."""
    rows = []
    for f in dataclasses.fields(Settings):
        names = f"`SKYHOOK_{f.name.upper()}`"
        if f.metadata["upstream_env"]:
            names += f" / `{f.metadata['upstream_env']}`"
        default = _show(getattr(Settings(), f.name))
        rows.append(f"| {names} | `{default}` | {f.metadata['doc']} |")
    return rows
