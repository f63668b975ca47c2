"""The operator's one settings object, read from the environment once at startup.

Every field is filled by rule: `SKYHOOK_<FIELD NAME IN CAPITALS>` wins, then the environment
name upstream's operator reads (so an existing deployment manifest keeps working), then the
default. All problems are collected and reported together; `describe()` gives the effective
values for the startup log.
"""

from __future__ import annotations

import dataclasses
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

from skyhook_planner.model.settings import PlannerSettings
from skyhook_planner.model.vocabulary import Taint
from skyhook_schemas.durations import parse_duration
from skyhook_schemas.images import image_tag


class SettingsError(ValueError):
    """Every invalid setting, one line each, naming the environment variable."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


def _installed_version() -> str:
    """`v<version>` of the installed skyhook-operator distribution, spelled as upstream
    spells its versions."""
    try:
        return f"v{metadata.version('skyhook-operator')}"
    except metadata.PackageNotFoundError:
        return "dev"


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
    image_artifact_refresh: float = field(
        default=30.0,
        metadata=_meta(
            None,
            "Seconds between checks of an image compatibility artifact's source (an OCI "
            "reference's digest, a ConfigMap); a changed digest is pulled again.",
        ),
    )
    insecure_registries: str = field(
        default="",
        metadata=_meta(
            None,
            "Comma-separated registry hosts (host:port) that image compatibility artifacts "
            "are pulled from over plain HTTP.",
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
    retry_backoff_base: float = field(
        default=10.0,
        metadata=_meta(
            None,
            "Seconds before a failed stage pod is retried; doubles with each retry of the "
            "same stage.",
        ),
    )
    retry_backoff_max: float = field(
        default=300.0,
        metadata=_meta(None, "Longest wait, in seconds, before retrying a failed stage pod."),
    )
    operator_version: str = field(
        default_factory=_installed_version,
        metadata=_meta(
            None,
            "The version written into the `version` annotation of each SCR and the "
            "`version_<scr>` annotation of each node; defaults to the installed operator's.",
        ),
    )
    metrics_port: str = field(
        default=":8080",
        metadata=_meta(
            "METRICS_PORT",
            "`[host]:port` serving Prometheus metrics at `/metrics` (an empty host: every "
            "interface); `0` turns the endpoint off.",
        ),
    )
    probe_port: str = field(
        default=":8081",
        metadata=_meta(
            "PROBE_PORT",
            "`[host]:port` serving `/healthz` (liveness) and `/readyz` (readiness); `0` "
            "turns the probes off.",
        ),
    )
    leader_election: bool = field(
        default=False,
        metadata=_meta(
            "LEADER_ELECTION",
            "Run two or more replicas with one leader: only the holder of a coordination.k8s.io "
            "Lease in the operator namespace plans and writes; the others keep their watches "
            "warm and take over when it stops (at once) or dies (after `lease_duration`).",
        ),
    )
    lease_name: str = field(
        default="3c22c1ae.nvidia.com",
        metadata=_meta(
            None,
            "Name of the Lease; upstream's, so an upstream operator and ours never both lead.",
        ),
    )
    lease_duration: float = field(
        default=15.0,
        metadata=_meta(
            None,
            "Seconds after the holder's last renewal before another replica may take the Lease.",
        ),
    )
    lease_renew_deadline: float = field(
        default=10.0,
        metadata=_meta(
            None,
            "Seconds after its last successful renewal at which the leader stops writing; "
            "shorter than `lease_duration`, so it stops before anyone else may start.",
        ),
    )
    lease_retry_period: float = field(
        default=2.0,
        metadata=_meta(
            None,
            "Seconds between attempts to renew (leader) or take (others) the Lease.",
        ),
    )
    leader_identity: str = field(
        default_factory=socket.gethostname,
        metadata=_meta(
            None,
            "Name this replica holds the Lease under (a random suffix is added per start); "
            "default: the host name, which in a pod is the pod's name.",
        ),
    )
    enable_webhooks: bool = field(
        default=True,
        metadata=_meta(
            "ENABLE_WEBHOOKS",
            "Serve the admission webhooks that refuse an invalid Skyhook or DeploymentPolicy "
            "at `kubectl apply` and fill in policy defaults.",
        ),
    )
    webhook_port: str = field(
        default=":9443",
        metadata=_meta(None, "`[host]:port` the admission webhooks are served on (HTTPS)."),
    )
    webhook_certs: str = field(
        default="operator",
        metadata=_meta(
            None,
            "Where the webhooks' serving certificate comes from: `operator` (a Secret the "
            "operator creates and renews, its CA put into the webhook configurations) or "
            "`cert-manager` (mounted at `webhook_cert_dir`; cert-manager injects the CA).",
        ),
    )
    webhook_cert_dir: str = field(
        default="/tmp/k8s-webhook-server/serving-certs",
        metadata=_meta(None, "Directory holding the serving certificate `tls.crt` and `tls.key`."),
    )
    webhook_secret_name: str = field(
        default="webhook-cert",
        metadata=_meta(
            "WEBHOOK_SECRET_NAME", "Secret in the operator namespace holding the certificate."
        ),
    )
    webhook_service_name: str = field(
        default="skyhook-operator-webhook-service",
        metadata=_meta(
            "WEBHOOK_SERVICE_NAME",
            "Service the apiserver calls the webhooks through; the certificate is made for it.",
        ),
    )
    webhook_url: str = field(
        default="",
        metadata=_meta(
            None,
            "Out of the cluster only: the `https://host:port` the apiserver reaches this "
            "operator at. The operator then creates the webhook configurations itself, calling "
            "this URL; empty: the chart's configurations call the Service.",
        ),
    )
    webhook_check_interval: float = field(
        default=60.0,
        metadata=_meta(
            None,
            "Seconds between checks that the certificate is current and the webhook "
            "configurations carry its CA.",
        ),
    )
    alert_poll_interval: float = field(
        default=30.0,
        metadata=_meta(
            None,
            "Seconds between reads of the alerts of each Prometheus URL an alertGate names; "
            "a Skyhook held by an alert looks again this often.",
        ),
    )
    alert_query_timeout: float = field(
        default=5.0,
        metadata=_meta(
            None,
            "Seconds a read of Prometheus alerts may take; a slower one fails (and holds).",
        ),
    )
    event_interval: float = field(
        default=30.0,
        metadata=_meta(
            None,
            "Seconds between two writes of one Event object: occurrences in between are "
            "added to its count and go out together (a new Event is posted at once).",
        ),
    )
    clock_offset_file: str = field(
        default="",
        metadata=_meta(
            None,
            "TEST HOOK, never set in production: a file holding seconds added to the "
            "planner's clock, read at every pass, so tests move the operator's time (into a "
            "maintenance window) instead of waiting. Empty: the real clock.",
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
        return [f"{f.name} = {getattr(self, f.name)}" for f in dataclasses.fields(self)]

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
            retry_backoff_base_s=self.retry_backoff_base,
            retry_backoff_max_s=self.retry_backoff_max,
            operator_version=self.operator_version,
            alert_recheck_s=self.alert_poll_interval,
        )


def parse_seconds(text: str) -> float:
    """Seconds from a plain number (`90`, `2.5`) or a Go duration (`90s`, `10m`, `1h30m`);
    raises ValueError otherwise."""
    try:
        return float(text)
    except ValueError:
        pass
    seconds = parse_duration(text)
    if seconds is None:
        raise ValueError(f"{text.strip()!r} is not a duration such as 90s, 10m or 1h30m")
    return seconds


def parse_bind_address(text: str) -> tuple[str, int] | None:
    """(host, port) from `[host]:port` (`:8080`, `127.0.0.1:8080`, `[::1]:8080`; an empty
    host means every interface), or None for `0` (off); raises ValueError otherwise."""
    text = text.strip()
    if text == "0":
        return None
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{text!r} is not [host]:port with a port from 1 to 65535 (or 0: off)")
    return host.removeprefix("[").removesuffix("]"), int(port)


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
    if name in {
        "pass_debounce",
        "retry_interval",
        "drain_timeout",
        "retry_backoff_base",
        "image_artifact_refresh",
    } and (value < 0):
        return f"{value} must not be negative"
    if name in {"alert_poll_interval", "alert_query_timeout", "event_interval"} and value <= 0:
        return f"{value} must be more than 0"
    if name == "retry_backoff_max" and value < 1:
        return f"{value} s is shorter than the minimum of 1 s"
    if name in {"lease_name", "leader_identity"} and not value:
        return "must not be empty"
    if name == "operator_version" and not value:
        return "must not be empty"
    if name in {"metrics_port", "probe_port"}:
        try:
            parse_bind_address(value)
        except ValueError as error:
            return str(error)
    if name == "webhook_port":
        try:
            if parse_bind_address(value) is None:
                return "the webhooks need a port; turn them off with ENABLE_WEBHOOKS=false"
        except ValueError as error:
            return str(error)
    if name == "webhook_certs" and value not in {"operator", "cert-manager"}:
        return f"{value!r} must be operator or cert-manager"
    if name == "webhook_url" and value and not value.startswith("https://"):
        return f"{value!r} must be an https:// URL (the apiserver only calls webhooks over TLS)"
    if name == "webhook_check_interval" and value < 1:
        return f"{value} s is shorter than the minimum of 1 s"
    if name == "write_concurrency" and value < 1:
        return f"{value} must be at least 1"
    return None


def _default(f: dataclasses.Field[Any]) -> Any:
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return f.default


def _parse(f: dataclasses.Field[Any], raw: str) -> Any:
    if f.type == "Taint":
        return Taint.parse(raw)
    if f.type == "bool":
        return _parse_bool(raw)
    if f.type == "float":
        return parse_seconds(raw)
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
            value = _default(f)
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
    problems += _lease_problems(values)
    if problems:
        raise SettingsError(problems)
    return Settings(**values)


def _lease_problems(values: Mapping[str, Any]) -> list[str]:
    """The lease timings only work in this order: retry < renew deadline < duration."""
    retry, deadline, duration = (
        values.get(n) for n in ("lease_retry_period", "lease_renew_deadline", "lease_duration")
    )
    if retry is None or deadline is None or duration is None:
        return []  # already reported
    if not 0 < retry < deadline < duration:
        return [
            "SKYHOOK_LEASE_RETRY_PERIOD, SKYHOOK_LEASE_RENEW_DEADLINE, SKYHOOK_LEASE_DURATION: "
            f"need 0 < retry period ({retry}) < renew deadline ({deadline}) < duration "
            f"({duration})"
        ]
    return []
