"""The operator's one settings object, read from the environment once at startup.

Every field is filled by rule: `SKYHOOK_<FIELD NAME IN CAPITALS>` wins, then the environment
name upstream's operator reads (so an existing deployment manifest keeps working), then the
default. pydantic-settings' environment source reads them: a field's aliases are its variables,
in that order. A field's type says how its text is parsed and what it must be, so a value is
checked (and an address split) once, here. Every invalid value is reported at once, naming the
variable it was read from (the lease timings, checked against each other, once all values are
valid); `describe()` gives the effective values for the startup log.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from importlib import metadata
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    AliasChoices,
    BeforeValidator,
    Field,
    ValidationError,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from skyhook_operator import logs
from skyhook_planner.model.settings import PlannerSettings
from skyhook_planner.model.vocabulary import Taint, is_object_name
from skyhook_schemas import keys
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


class BindAddress(str):
    """A `[host]:port` setting, checked and split once: `bind` is (host, port), or None for `0`
    (off). It stays the text as written, so it logs and compares as configured."""

    bind: tuple[str, int] | None

    def __new__(cls, text: str) -> BindAddress:
        if isinstance(text, BindAddress):
            return text  # already split
        address = super().__new__(cls, text)
        address.bind = parse_bind_address(text)
        return address


def _names(text: str) -> list[str]:
    """The names of a comma-separated list, blanks around them ignored."""
    return [name.strip() for name in text.split(",") if name.strip()]


def _parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off", ""}:
        return False
    raise ValueError(f"{text!r} is not a boolean (true or false)")


def _from_text(parse: Callable[[str], Any]) -> BeforeValidator:
    """Environment values are text, parsed by `parse`; a default or an argument is typed already."""
    return BeforeValidator(lambda value: parse(value) if isinstance(value, str) else value)


def _check(ok: Callable[[Any], object], problem: str) -> AfterValidator:
    """Refuses a parsed value `ok` says no to; `problem` is formatted with the value."""

    def check(value: Any) -> Any:
        if not ok(value):
            raise ValueError(problem.format(value))
        return value

    return AfterValidator(check)


def _minimum_seconds(minimum: int) -> AfterValidator:
    return _check(lambda s: s >= minimum, f"{{}} s is shorter than the minimum of {minimum} s")


# The kinds of setting: how the text is read and what the value must be. A problem names the
# value; load_settings puts the variable it came from in front.
NonEmpty = Annotated[str, _check(bool, "must not be empty")]
Image = Annotated[
    str,
    _check(image_tag, "{!r} must name a tag (image:tag, optionally followed by @sha256:<digest>)"),
]
HostPath = Annotated[
    str, _check(lambda path: path.startswith("/"), "{!r} must be an absolute path")
]
TaintText = Annotated[Taint, _from_text(Taint.parse)]
PriorityClassName = Annotated[
    str,
    _check(
        lambda name: not name or is_object_name(name),
        "{!r} is not a PriorityClass name (lowercase letters, digits, '-', '.'; at most 253)",
    ),
]
SecretNames = Annotated[
    str,
    _check(
        lambda text: all(is_object_name(name) for name in _names(text)),
        "{!r} must be Secret names (lowercase letters, digits, '-', '.'), comma-separated",
    ),
]
# The key also names the node annotation `skyhook.nvidia.com/autoTaint_<key>`, whose name part
# holds at most 63 characters: no prefix of its own, and at most 53 characters.
RuntimeRequiredTaint = Annotated[
    TaintText,
    _check(
        lambda taint: "/" not in taint.key and len(taint.key) <= 53,
        "{0.key!r}: the key must have no prefix (no '/') and at most 53 characters: it names "
        "the node annotation skyhook.nvidia.com/autoTaint_<key>",
    ),
]
Switch = Annotated[bool, _from_text(_parse_bool)]
Seconds = Annotated[float, _from_text(parse_seconds)]
NonNegativeSeconds = Annotated[Seconds, _check(lambda s: s >= 0, "{} must not be negative")]
PositiveSeconds = Annotated[Seconds, _check(lambda s: s > 0, "{} must be more than 0")]
AtLeastOneSecond = Annotated[Seconds, _minimum_seconds(1)]
AtLeastOneMinute = Annotated[Seconds, _minimum_seconds(60)]
Concurrency = Annotated[int, _from_text(int), _check(lambda n: n >= 1, "{} must be at least 1")]
Retries = Annotated[int, _from_text(int), _check(lambda n: n >= 0, "{} must not be negative")]
ListBytes = Annotated[int, _from_text(int), _check(lambda n: n >= 1024, "{} must be at least 1024")]
Address = Annotated[BindAddress, _from_text(BindAddress)]
WebhookAddress = Annotated[
    Address,
    _check(
        lambda address: address.bind is not None,
        "the webhooks need a port; turn them off with ENABLE_WEBHOOKS=false",
    ),
]
WebhookCerts = Annotated[
    str,
    _check(lambda v: v in {"operator", "cert-manager"}, "{!r} must be operator or cert-manager"),
]
WebhookUrl = Annotated[
    str,
    _check(
        lambda url: not url or url.startswith("https://"),
        "{!r} must be an https:// URL (the apiserver only calls webhooks over TLS)",
    ),
]
LogLevel = Annotated[
    str,
    _check(
        lambda level: level.lower() in logs.LEVELS,
        "{!r} must be one of " + ", ".join(logs.LEVELS),
    ),
]
StackTraceLevel = Annotated[
    str,
    _check(
        lambda level: not level or level.lower() in logs.LEVELS,
        "{!r} must be empty or one of " + ", ".join(logs.LEVELS),
    ),
]
LogEncoder = Annotated[
    str, _check(lambda name: name in logs.ENCODERS, "{!r} must be " + " or ".join(logs.ENCODERS))
]
TimeEncoder = Annotated[
    str,
    _check(
        lambda name: not name or name in logs.TIME_ENCODERS,
        "{!r} must be empty or one of " + ", ".join(logs.TIME_ENCODERS),
    ),
]


# Each field is declared as `name: Kind = field(<our variable>, _meta(<upstream's variable or
# None>, <doc>), default=...)`.
def _meta(upstream_env: str | None, doc: str) -> tuple[str | None, str]:
    """The variable upstream's operator reads for a setting (None: it has none), and what the
    setting means."""
    return upstream_env, doc


def field(ours: str, meta: tuple[str | None, str], **default: Any) -> Any:
    """A setting read from `ours`, else from upstream's variable; `default` is `default=` or
    `default_factory=`."""
    upstream_env, doc = meta
    names = (ours, upstream_env) if upstream_env else (ours,)
    return Field(validation_alias=AliasChoices(*names), description=doc, **default)


class _Environment(EnvSettingsSource):
    """pydantic-settings' environment source over `environ` (None: os.environ), remembering the
    variable each field's value was read from, so that a problem names it."""

    def __init__(
        self, settings_cls: type[BaseSettings], environ: Mapping[str, str] | None = None
    ) -> None:
        self._environ = environ
        self.read_from: dict[str, str] = {}
        super().__init__(settings_cls)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return super()._load_env_vars() if self._environ is None else dict(self._environ)

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        value, variable, is_complex = super().get_field_value(field, field_name)
        if variable == field_name:
            # Neither of its variables is set. With populate_by_name the source also looks under
            # the field's own name, which is for arguments only: not read.
            return None, variable, is_complex
        if value is not None:
            self.read_from[field_name] = variable
        return value, variable, is_complex


# The environment source load_settings reads through (its environment, or a test's mapping);
# None: a fresh one over os.environ.
_environment: ContextVar[_Environment | None] = ContextVar("environment", default=None)


# The planner's defaults are the operator's: written once, in PlannerSettings.
_PLANNER = PlannerSettings()


# Every group of settings shares it: a group is checked as the whole is.
_CONFIG = SettingsConfigDict(
    frozen=True,
    case_sensitive=True,
    # load_settings' overrides name fields, not variables.
    populate_by_name=True,
    # Every value is text our types parse (a taint, an address, a duration), never JSON.
    enable_decoding=False,
    # BindAddress: `Address` constructs it from text (the check), pydantic checks the type.
    arbitrary_types_allowed=True,
)


# skyhook_schemas.keys reads the group as the process starts, for every name it spells; the
# setting shows it and refuses a value given any later (a test's mapping).
ApiGroup = Annotated[
    str,
    _check(
        lambda group: group == keys.GROUP,
        "{!r}: this process speaks " + keys.GROUP + "; set the variable before it starts",
    ),
]


class _PodSettings(BaseSettings):
    """What stage and interrupt pods are built with."""

    model_config = _CONFIG

    api_group: ApiGroup = field(
        keys.API_GROUP_VARIABLE,
        _meta(
            None,
            "API group the operator reconciles and whose prefix its node, pod and ConfigMap "
            f"keys carry: {' or '.join(keys.KINDS)} (upstream from v0.18).",
        ),
        default=keys.GROUP,
    )

    namespace: NonEmpty = field(
        "SKYHOOK_NAMESPACE",
        _meta("NAMESPACE", "Namespace for stage pods and the SCRs' ConfigMaps."),
        default=_PLANNER.namespace,
    )
    agent_image: Image = field(
        "SKYHOOK_AGENT_IMAGE",
        _meta(
            "AGENT_IMAGE",
            "Image of the agent that runs each stage; must carry a tag (a digest may follow, "
            "`repo:tag@sha256:...`). The tag is the agentVersion written into node metadata.",
        ),
        default=_PLANNER.agent_image,
    )
    pause_image: Image = field(
        "SKYHOOK_PAUSE_IMAGE",
        _meta(
            "PAUSE_IMAGE",
            "Image of the idle container interrupt and health check pods end with (a stage "
            "pod ends with `done`, on its package image).",
        ),
        default=_PLANNER.pause_image,
    )
    copy_dir_root: HostPath = field(
        "SKYHOOK_COPY_DIR_ROOT",
        _meta("COPY_DIR_ROOT", "Host directory where package content is copied."),
        default=_PLANNER.copy_dir_root,
    )
    agent_log_root: HostPath = field(
        "SKYHOOK_AGENT_LOG_ROOT",
        _meta("AGENT_LOG_ROOT", "Host directory the agent writes its logs under."),
        default=_PLANNER.agent_log_root,
    )
    runtime_required_taint: RuntimeRequiredTaint = field(
        "SKYHOOK_RUNTIME_REQUIRED_TAINT",
        _meta(
            "RUNTIME_REQUIRED_TAINT",
            "Taint `key[=value]:Effect` removed from a node once every runtimeRequired SCR "
            "completed on it.",
        ),
        default=_PLANNER.runtime_required_taint,
    )
    reapply_on_reboot: Switch = field(
        "SKYHOOK_REAPPLY_ON_REBOOT",
        _meta(
            "REAPPLY_ON_REBOOT",
            "When a node's bootID changes outside an interrupt, forget its state for every "
            "SCR so all packages run again. A runtimeRequired SCR with autoTaintNewNodes first "
            "puts the runtime-required taint back on the node; the reset waits for it.",
        ),
        default=_PLANNER.reapply_on_reboot,
    )
    image_pull_secret: str = field(
        "SKYHOOK_IMAGE_PULL_SECRET",
        _meta("IMAGE_PULL_SECRET", "Pull secret name put on every pod; empty: none."),
        default=_PLANNER.image_pull_secret,
    )
    package_secrets: SecretNames = field(
        "SKYHOOK_PACKAGE_SECRETS",
        _meta(
            None,
            "Comma-separated Secrets of the operator namespace a package's env may read "
            "(valueFrom.secretKeyRef); empty: none. A Skyhook reading any other is refused "
            "at admission and not run.",
        ),
        default="",
    )
    package_priority_class_name: PriorityClassName = field(
        "SKYHOOK_PACKAGE_PRIORITY_CLASS_NAME",
        _meta(
            "PACKAGE_PRIORITY_CLASS_NAME",
            "PriorityClass put on every stage, interrupt and health-check pod; empty: none. "
            "Only system-node-critical or system-cluster-critical change the kubelet's "
            "admission.",
        ),
        default=_PLANNER.package_priority_class_name,
    )


class _PassSettings(BaseSettings):
    """How passes run, retry and keep their pods."""

    model_config = _CONFIG

    default_interval: AtLeastOneMinute = field(
        "SKYHOOK_DEFAULT_INTERVAL",
        _meta(
            "DEFAULT_INTERVAL",
            "Seconds (or a Go duration such as `10m`) between passes when nothing changes; "
            "at least 60.",
        ),
        default=600.0,
    )
    pass_debounce: NonNegativeSeconds = field(
        "SKYHOOK_PASS_DEBOUNCE",
        _meta(
            None,
            "Seconds a pass waits after the first watch event so a burst of events "
            "becomes one pass; 0 runs at once.",
        ),
        default=0.05,
    )
    retry_interval: NonNegativeSeconds = field(
        "SKYHOOK_RETRY_INTERVAL",
        _meta(
            None,
            "Seconds before the next pass while any SCR is incomplete or a write failed "
            "(upstream's 2 s requeue).",
        ),
        default=2.0,
    )
    write_concurrency: Concurrency = field(
        "SKYHOOK_WRITE_CONCURRENCY",
        _meta(
            None,
            "How many API writes the operator sends at once (node patches, pod creations "
            "and deletions are independent per node).",
        ),
        default=16,
    )
    image_artifact_refresh: NonNegativeSeconds = field(
        "SKYHOOK_IMAGE_ARTIFACT_REFRESH",
        _meta(
            None,
            "Seconds between checks of an image compatibility artifact's source (an OCI "
            "reference's digest, a ConfigMap); a changed digest is pulled again.",
        ),
        default=30.0,
    )
    insecure_registries: str = field(
        "SKYHOOK_INSECURE_REGISTRIES",
        _meta(
            None,
            "Comma-separated registry hosts (host:port) that image compatibility artifacts "
            "are pulled from over plain HTTP.",
        ),
        default="",
    )
    image_artifact_registries: str = field(
        "SKYHOOK_IMAGE_ARTIFACT_REGISTRIES",
        _meta(
            None,
            "Comma-separated registry hosts (host[:port]) image compatibility artifacts may be "
            "fetched from, and redirected to (a registry's blob storage host), besides the "
            "registries of the images and artifacts the Skyhooks' packages name; a pod naming "
            "an artifact elsewhere is refused without a request.",
        ),
        default="",
    )
    image_artifact_max_bytes: ListBytes = field(
        "SKYHOOK_IMAGE_ARTIFACT_MAX_BYTES",
        _meta(
            None,
            "The largest response (manifest, artifact layer, token) read from a registry for "
            "an image compatibility artifact; a larger one is refused.",
        ),
        default=1024 * 1024,
    )
    image_artifact_cache_size: Concurrency = field(
        "SKYHOOK_IMAGE_ARTIFACT_CACHE_SIZE",
        _meta(
            None,
            "Image compatibility artifacts (and answers per source) kept in memory at most; "
            "the least recently used is dropped first.",
        ),
        default=256,
    )
    drain_timeout: NonNegativeSeconds = field(
        "SKYHOOK_DRAIN_TIMEOUT",
        _meta(
            None,
            "Seconds a drain waits for evicted pods to be gone before it reports a "
            "failure and starts over.",
        ),
        default=600.0,
    )
    legacy_cleanup_delay: Seconds = field(
        "SKYHOOK_LEGACY_CLEANUP_DELAY",
        _meta(
            "LEGACY_CLEANUP_DELAY",
            "After state was carried over from the other API group, keep that group's copies "
            "on nodes and ConfigMaps this long (a rollback within it finds them), then remove "
            "them; 0 or less: at once.",
        ),
        default=86400.0,
    )
    retry_backoff_base: NonNegativeSeconds = field(
        "SKYHOOK_RETRY_BACKOFF_BASE",
        _meta(
            None,
            "Seconds before a failed stage pod is retried; doubles with each retry of the "
            "same stage.",
        ),
        default=_PLANNER.retry_backoff_base_s,
    )
    retry_backoff_max: AtLeastOneSecond = field(
        "SKYHOOK_RETRY_BACKOFF_MAX",
        _meta(None, "Longest wait, in seconds, before retrying a failed stage pod."),
        default=_PLANNER.retry_backoff_max_s,
    )
    stage_timeout: NonNegativeSeconds = field(
        "SKYHOOK_STAGE_TIMEOUT",
        _meta(
            "JOB_STAGE_TIMEOUT",
            "How long one attempt at a stage may run (an interrupt: the whole interrupt) before "
            "its pod is stopped and the attempt counts as failed, for a package without "
            "`stageTimeout`; 0: no limit.",
        ),
        default=_PLANNER.stage_timeout_s,
    )
    stage_retries: Retries = field(
        "SKYHOOK_STAGE_RETRIES",
        _meta(
            "JOB_BACKOFF_LIMIT",
            "How many times a failed stage is tried again before it is left erroring until the "
            "package is edited, rerun or reset; 0: one attempt only. A pod the cluster ended "
            "(condition `DisruptionTarget`: an eviction, a preemption) or its node lost spends "
            "no attempt: the same attempt runs again.",
        ),
        default=_PLANNER.stage_retries,
    )
    pod_ttl_succeeded: AtLeastOneMinute = field(
        "SKYHOOK_POD_TTL_SUCCEEDED",
        _meta(
            "JOB_TTL_SUCCEEDED",
            "How long a succeeded stage pod is kept for its logs, while its node still records "
            "the stage as done (a rerun, a configMap edit or a reset removes it at once).",
        ),
        default=_PLANNER.pod_ttl_succeeded_s,
    )
    pod_ttl_failed: AtLeastOneMinute = field(
        "SKYHOOK_POD_TTL_FAILED",
        _meta(
            "JOB_TTL_FAILED",
            "How long a failed stage pod (the first and the last failed attempt of a stage) is "
            "kept for its logs.",
        ),
        default=_PLANNER.pod_ttl_failed_s,
    )
    status_node_lists_bytes: ListBytes = field(
        "SKYHOOK_STATUS_NODE_LISTS_BYTES",
        _meta(
            None,
            "Bytes a Skyhook's per-node status lists (nodeStatus, nodeState, nodeBootIds) may "
            "take; past it they list only the nodes not complete that fit, and "
            "nodesPerPackage counts every node (docs/status-at-scale.md).",
        ),
        default=_PLANNER.status_node_lists_bytes,
    )
    operator_version: NonEmpty = field(
        "SKYHOOK_OPERATOR_VERSION",
        _meta(
            None,
            "The version written into the `version` annotation of each SCR and the "
            "`version_<scr>` annotation of each node; defaults to the installed operator's.",
        ),
        default_factory=_installed_version,
    )


class _EndpointSettings(BaseSettings):
    """The metrics and probe endpoints."""

    model_config = _CONFIG

    metrics_port: Address = field(
        "SKYHOOK_METRICS_PORT",
        _meta(
            "METRICS_PORT",
            "`[host]:port` serving Prometheus metrics at `/metrics` (an empty host: every "
            "interface); `0` turns the endpoint off.",
        ),
        default=":8443",
    )
    metrics_secure: Switch = field(
        "SKYHOOK_METRICS_SECURE",
        _meta(
            None,
            "Serve `/metrics` over HTTPS, only to callers whose bearer token the apiserver "
            "accepts (TokenReview) and who may `get` the non-resource URL `/metrics` "
            "(SubjectAccessReview); false: plain HTTP to anyone (local development).",
        ),
        default=True,
    )
    publish_legacy_metrics: Switch = field(
        "SKYHOOK_PUBLISH_LEGACY_METRICS",
        _meta(
            "PUBLISH_LEGACY_METRICS",
            "Speaking nodewright.nvidia.com, publish every `skyhook_*` gauge beside its "
            "`nodewright_*` twin (label `skyhook_name` beside `nodewright_name`), as upstream "
            "v0.18-v0.20; false: only `nodewright_*`. Speaking skyhook.nvidia.com: `skyhook_*` "
            "only, whatever this says.",
        ),
        default=True,
    )
    metrics_cert_dir: str = field(
        "SKYHOOK_METRICS_CERT_DIR",
        _meta(
            None,
            "Directory holding `tls.crt` and `tls.key` for the secure `/metrics` (reloaded "
            "within a minute of a change); empty: a self-signed certificate made at startup.",
        ),
        default="",
    )
    probe_port: Address = field(
        "SKYHOOK_PROBE_PORT",
        _meta(
            "PROBE_PORT",
            "`[host]:port` serving `/healthz` (liveness) and `/readyz` (readiness); `0` "
            "turns the probes off.",
        ),
        default=":8081",
    )


class _LeaseSettings(BaseSettings):
    """Leader election through a Lease."""

    model_config = _CONFIG

    leader_election: Switch = field(
        "SKYHOOK_LEADER_ELECTION",
        _meta(
            "LEADER_ELECTION",
            "Run two or more replicas with one leader: only the holder of a coordination.k8s.io "
            "Lease in the operator namespace plans and writes; the others keep their watches "
            "warm and take over when it stops (at once) or dies (after `lease_duration`).",
        ),
        default=False,
    )
    lease_name: NonEmpty = field(
        "SKYHOOK_LEASE_NAME",
        _meta(
            None,
            "Name of the Lease; upstream's, so an upstream operator and ours never both lead.",
        ),
        default="3c22c1ae.nvidia.com",
    )
    lease_duration: Seconds = field(
        "SKYHOOK_LEASE_DURATION",
        _meta(
            None,
            "Seconds after the holder's last renewal before another replica may take the Lease.",
        ),
        default=15.0,
    )
    lease_renew_deadline: Seconds = field(
        "SKYHOOK_LEASE_RENEW_DEADLINE",
        _meta(
            None,
            "Seconds after its last successful renewal at which the leader stops writing; "
            "shorter than `lease_duration`, so it stops before anyone else may start.",
        ),
        default=10.0,
    )
    lease_retry_period: Seconds = field(
        "SKYHOOK_LEASE_RETRY_PERIOD",
        _meta(
            None,
            "Seconds between attempts to renew (leader) or take (others) the Lease.",
        ),
        default=2.0,
    )
    leader_identity: NonEmpty = field(
        "SKYHOOK_LEADER_IDENTITY",
        _meta(
            None,
            "Name this replica holds the Lease under (a random suffix is added per start); "
            "default: the host name, which in a pod is the pod's name.",
        ),
        default_factory=socket.gethostname,
    )

    @model_validator(mode="after")
    def _lease_timings_in_order(self) -> _LeaseSettings:
        """The lease timings only work in this order: retry < renew deadline < duration."""
        retry, deadline, duration = (
            self.lease_retry_period,
            self.lease_renew_deadline,
            self.lease_duration,
        )
        if not 0 < retry < deadline < duration:
            raise ValueError(
                "SKYHOOK_LEASE_RETRY_PERIOD, SKYHOOK_LEASE_RENEW_DEADLINE, SKYHOOK_LEASE_DURATION: "
                f"need 0 < retry period ({retry}) < renew deadline ({deadline}) < duration "
                f"({duration})"
            )
        return self


class _WebhookSettings(BaseSettings):
    """The admission webhooks and their certificate."""

    model_config = _CONFIG

    enable_webhooks: Switch = field(
        "SKYHOOK_ENABLE_WEBHOOKS",
        _meta(
            "ENABLE_WEBHOOKS",
            "Serve the admission webhooks that refuse an invalid Skyhook or DeploymentPolicy "
            "at `kubectl apply` and fill in policy defaults.",
        ),
        default=True,
    )
    webhook_port: WebhookAddress = field(
        "SKYHOOK_WEBHOOK_PORT",
        _meta(None, "`[host]:port` the admission webhooks are served on (HTTPS)."),
        default=":9443",
    )
    webhook_certs: WebhookCerts = field(
        "SKYHOOK_WEBHOOK_CERTS",
        _meta(
            None,
            "Where the webhooks' serving certificate comes from: `operator` (a Secret the "
            "operator creates and renews, its CA put into the webhook configurations) or "
            "`cert-manager` (mounted at `webhook_cert_dir`; cert-manager injects the CA).",
        ),
        default="operator",
    )
    webhook_cert_dir: str = field(
        "SKYHOOK_WEBHOOK_CERT_DIR",
        _meta(None, "Directory holding the serving certificate `tls.crt` and `tls.key`."),
        default="/tmp/k8s-webhook-server/serving-certs",
    )
    webhook_secret_name: str = field(
        "SKYHOOK_WEBHOOK_SECRET_NAME",
        _meta("WEBHOOK_SECRET_NAME", "Secret in the operator namespace holding the certificate."),
        default="webhook-cert",
    )
    webhook_service_name: str = field(
        "SKYHOOK_WEBHOOK_SERVICE_NAME",
        _meta(
            "WEBHOOK_SERVICE_NAME",
            "Service the apiserver calls the webhooks through; the certificate is made for it.",
        ),
        default="skyhook-operator-webhook-service",
    )
    webhook_url: WebhookUrl = field(
        "SKYHOOK_WEBHOOK_URL",
        _meta(
            None,
            "Out of the cluster only: the `https://host:port` the apiserver reaches this "
            "operator at. The operator then creates the webhook configurations itself, calling "
            "this URL; empty: the chart's configurations call the Service.",
        ),
        default="",
    )
    webhook_check_interval: AtLeastOneSecond = field(
        "SKYHOOK_WEBHOOK_CHECK_INTERVAL",
        _meta(
            None,
            "Seconds between checks that the certificate is current and the webhook "
            "configurations carry its CA.",
        ),
        default=60.0,
    )
    pod_image_excluded_namespaces: str = field(
        "SKYHOOK_POD_IMAGE_EXCLUDED_NAMESPACES",
        _meta(
            None,
            "Out of the cluster only (with `webhook_url`): comma-separated namespaces whose "
            "pods the pod image webhook is never called for, besides the operator's own "
            "(the chart's `webhook.podImage` values do this in the cluster).",
        ),
        default="kube-system,kube-public,kube-node-lease",
    )


class Settings(_WebhookSettings, _LeaseSettings, _EndpointSettings, _PassSettings, _PodSettings):
    """Operator settings; each field's aliases are the variables it is read from, in order.
    The groups it is made of hold the fields in the order they are listed and checked."""

    model_config = _CONFIG

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Arguments win over the environment; no .env file, no secrets directory.
        environment = _environment.get()
        return init_settings, _Environment(settings_cls) if environment is None else environment

    alert_poll_interval: PositiveSeconds = field(
        "SKYHOOK_ALERT_POLL_INTERVAL",
        _meta(
            None,
            "Seconds between reads of the alerts of each Prometheus URL an alertGate names; "
            "a Skyhook held by an alert looks again this often.",
        ),
        default=_PLANNER.alert_recheck_s,
    )
    alert_query_timeout: PositiveSeconds = field(
        "SKYHOOK_ALERT_QUERY_TIMEOUT",
        _meta(
            None,
            "Seconds a read of Prometheus alerts may take; a slower one fails (and holds).",
        ),
        default=5.0,
    )
    event_interval: PositiveSeconds = field(
        "SKYHOOK_EVENT_INTERVAL",
        _meta(
            None,
            "Seconds between two writes of one Event object: occurrences in between are "
            "added to its count and go out together (a new Event is posted at once).",
        ),
        default=30.0,
    )
    shutdown_timeout: AtLeastOneSecond = field(
        "SKYHOOK_SHUTDOWN_TIMEOUT",
        _meta(
            None,
            "Seconds from SIGTERM to exit at most, whatever the apiserver does: writes going "
            "out get most of it, the Lease release the rest. Keep it below the pod's "
            "terminationGracePeriodSeconds (Kubernetes' default: 30).",
        ),
        default=20.0,
    )
    clock_offset_file: str = field(
        "SKYHOOK_CLOCK_OFFSET_FILE",
        _meta(
            None,
            "TEST HOOK, never set in production: a file holding seconds added to the "
            "planner's clock, read at every pass, so tests move the operator's time (into a "
            "maintenance window) instead of waiting. Empty: the real clock.",
        ),
        default="",
    )
    log_level: LogLevel = field(
        "SKYHOOK_LOG_LEVEL",
        _meta(
            "LOG_LEVEL",
            "debug, info, warn (or warning) or error; zap's dpanic, panic and "
            "fatal log nothing of ours, which logs nothing above error.",
        ),
        default="info",
    )
    log_encoder: LogEncoder = field(
        "SKYHOOK_LOG_ENCODER",
        _meta(
            "LOG_ENCODER",
            "console (one bracketed line per entry) or json (one zap-style "
            "object per line: level, ts, logger, msg, error, stacktrace).",
        ),
        default="console",
    )
    log_time_encoder: TimeEncoder = field(
        "SKYHOOK_LOG_TIME_ENCODER",
        _meta(
            "LOG_TIME_ENCODER",
            "How entries' times are written: rfc3339, rfc3339nano, "
            "iso8601, epoch, millis or nano. Empty: rfc3339 in json, our date and time "
            "with milliseconds in console.",
        ),
        default="",
    )
    log_stack_trace_level: StackTraceLevel = field(
        "SKYHOOK_LOG_STACK_TRACE_LEVEL",
        _meta(
            "LOG_STACK_TRACE_LEVEL",
            "Entries at this level and above carry the stack that "
            "logged them (a level as LOG_LEVEL). Empty: none do (an error's traceback is "
            "logged anyway).",
        ),
        default="",
    )

    @property
    def agent_version(self) -> str:
        """The agent image's tag, as upstream writes it into node metadata."""
        return image_tag(self.agent_image)

    def describe(self) -> list[str]:
        """`name = value` lines for the startup log."""
        return [f"{name} = {getattr(self, name)}" for name in type(self).model_fields]

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
            package_secrets=frozenset(_names(self.package_secrets)),
            package_priority_class_name=self.package_priority_class_name,
            retry_backoff_base_s=self.retry_backoff_base,
            retry_backoff_max_s=self.retry_backoff_max,
            stage_timeout_s=self.stage_timeout,
            stage_retries=self.stage_retries,
            pod_ttl_succeeded_s=self.pod_ttl_succeeded,
            pod_ttl_failed_s=self.pod_ttl_failed,
            status_node_lists_bytes=self.status_node_lists_bytes,
            operator_version=self.operator_version,
            alert_recheck_s=self.alert_poll_interval,
        )


# The field each variable fills. pydantic reports a problem under the key its value was passed
# as: an environment value under one of its field's variables (which one depends on the
# pydantic-settings version, so the variable read comes from _Environment), an argument under
# its field's name or first variable.


_FIELD_OF = {
    variable: name
    for name, info in Settings.model_fields.items()
    if isinstance(info.validation_alias, AliasChoices)
    for variable in info.validation_alias.choices
    if isinstance(variable, str)
}


def load_settings(environ: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
    """Settings from the environment (`SKYHOOK_<FIELD>`, then upstream's name), then overrides.

    Raises SettingsError listing every invalid variable.
    """
    environment = _Environment(Settings, environ)
    token = _environment.set(environment)
    try:
        return Settings(**overrides)
    except ValidationError as error:
        # Where each value came from: an argument, else the variable read.
        sources = {**environment.read_from, **{name: f"{name} (argument)" for name in overrides}}
        raise SettingsError([_problem(detail, sources) for detail in error.errors()]) from None
    finally:
        _environment.reset(token)


def _problem(detail: ErrorDetails, sources: Mapping[str, str]) -> str:
    """`<variable>: <what is wrong>`, naming where the value came from."""
    text = str(detail["ctx"]["error"]) if detail["type"] == "value_error" else detail["msg"]
    if not detail["loc"]:
        return text  # a check across settings names its variables itself
    name = _FIELD_OF.get(str(detail["loc"][0]), str(detail["loc"][0]))
    return f"{sources.get(name, name)}: {text}"
