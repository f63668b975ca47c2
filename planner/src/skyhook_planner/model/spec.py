"""Decode a Skyhook object's `spec` into typed, validated values.

One decoder for the operator (planner, webhook-style checks, CLI). The wire models below mirror
the CRD's schema in pydantic; every problem is reported, each named by its field path
(`spec.packages.tuning.version: "1.x" is not a semver version ...`), together in one
`SpecError`. The rules are upstream's CRD and webhook rules, plus ours: strict SemVer 2.0
versions and `dependsOn` cycles rejected (docs/upstream-differences.md). A rule across fields
(a package's configInterrupts against its configMap, `dependsOn`) is checked once the fields it
compares have decoded. Values copied into the pods and ConfigMaps the operator creates follow
Kubernetes' own rules for them (apirules.py), so what is admitted is what the apiserver takes.
"""

from __future__ import annotations

import fnmatch
import math
import re
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from functools import cached_property
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    Field,
    PlainValidator,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from skyhook_planner.model.alerts import AlertGate, GateWire
from skyhook_planner.model.apirules import (
    MAX_CONFIG_MAP_BYTES,
    config_map_key_problem,
    config_map_size,
    env_var_problems,
    toleration_problems,
)
from skyhook_planner.model.decoding import (
    Closed,
    Duration,
    FalsyIsUnset,
    Loc,
    NonEmpty,
    NonNegativeDuration,
    PullableImage,
    SelectorWire,
    Text,
    Wire,
    check,
    fail,
    in_range,
    messages,
    one_of,
    parsed,
)
from skyhook_planner.model.health import HealthGate, HealthGateWire
from skyhook_planner.model.imagecompat import Artifact, ArtifactError
from skyhook_planner.model.imagecompat import parse as parse_artifact
from skyhook_planner.model.vocabulary import TAINT_EFFECTS, LabelSelector, Toleration
from skyhook_planner.model.windows import MaintenanceWindow, WindowWire
from skyhook_schemas import keys
from skyhook_schemas.durations import parse_duration
from skyhook_schemas.images import (
    ImageReference,
    digest_problem,
    image_tag,
    image_without_tag,
    split_image,
    tag_mismatch_warning,
)
from skyhook_schemas.versions import SpecVersion, parse_spec_version

PACKAGE_NAME = re.compile(r"^[a-z][-a-z0-9]{0,41}[a-z]$")
INTERRUPT_TYPES = ("service", "reboot", "noop", "restartAllServices")
DEFAULT_PRIORITY = 200


class SpecError(ValueError):
    """An invalid Skyhook spec; `messages` holds one `path: problem` line per error."""

    def __init__(self, messages: list[str]) -> None:
        super().__init__("\n".join(messages))
        self.messages = messages


# --- value types ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Interrupt:
    type: str
    services: tuple[str, ...] = ()


@dataclass(frozen=True)
class Resources:
    """Quantities as written in the spec (the pod gets them verbatim)."""

    cpu_request: str
    cpu_limit: str
    memory_request: str
    memory_limit: str


@dataclass(frozen=True)
class ImageCompatibility:
    """Where a package's image compatibility artifact comes from: exactly one of an inline
    artifact, a ConfigMap key in the operator's namespace, or an OCI reference."""

    inline: Artifact | None = None
    config_map: tuple[str, str] | None = None  # (name, key)
    ref: str = ""

    @property
    def source(self) -> str:
        """The key the operator resolves this source under (ClusterSnapshot.image_artifacts)."""
        if self.config_map:
            return f"configmap:{self.config_map[0]}/{self.config_map[1]}"
        return f"oci:{self.ref}" if self.ref else "inline"


@dataclass(frozen=True)
class Uninstall:
    """`uninstall`: whether the package can be uninstalled, and whether it should be now."""

    enabled: bool = False
    apply: bool = False


@dataclass(frozen=True)
class Package:
    name: str
    version: str
    image: str
    container_sha: str = ""
    agent_image_override: str = ""
    interrupt: Interrupt | None = None
    config_interrupts: Mapping[str, Interrupt] = field(default_factory=dict)
    config_map: Mapping[str, str] = field(default_factory=dict)
    depends_on: Mapping[str, str] = field(default_factory=dict)
    env: tuple[Mapping[str, Any], ...] = ()
    resources: Resources | None = None
    graceful_shutdown_s: int | None = None
    # stageTimeout: one attempt's time limit (an interrupt's: the whole interrupt's); None:
    # the operator's default; 0: none.
    stage_timeout_s: float | None = None
    image_compatibility: ImageCompatibility | None = None
    uninstall: Uninstall = Uninstall()
    # The full image reference chosen for one node from image_compatibility (pods pull it).
    chosen_image: str = ""

    @property
    def uninstalling(self) -> bool:
        """Asked to be uninstalled from every selected node (enabled and apply)."""
        return self.uninstall.enabled and self.uninstall.apply

    @cached_property  # read for every node in every pass
    def key(self) -> str:
        """The nodeState key `<name>|<version>`."""
        return keys.package_key(self.name, self.version)


@dataclass(frozen=True)
class Budget:
    """interruptionBudget: at most one of percent/count; neither means 100 %."""

    percent: int | None = None
    count: int | None = None


@dataclass(frozen=True)
class DrainConfig:
    """spec.drainConfig: how a node is drained before an interrupt (rules/drain.py). The
    defaults are what a Skyhook without it has always done: evict every pod a drain moves,
    emptyDir and unmanaged pods included, DaemonSet pods left in place, no time limit."""

    disable_eviction: bool = False  # plain DELETE: no PodDisruptionBudget holds it
    delete_empty_dir_data: bool = True  # False: a pod with an emptyDir volume blocks
    force: bool = True  # False: a pod no controller owns blocks
    ignore_daemon_sets: bool = True
    timeout_s: float | None = None  # time to drained, then the node is erroring; None: none
    grace_period_s: int | None = None  # whole seconds (rounded up); None: each pod's own


@dataclass(frozen=True)
class SkyhookSpec:
    packages: Mapping[str, Package] = field(default_factory=dict)
    node_selector: LabelSelector = field(default_factory=LabelSelector)
    pod_non_interrupt_labels: LabelSelector = field(default_factory=LabelSelector)
    drain: DrainConfig = field(default_factory=DrainConfig)
    # Ours: how long a node whose interrupt waits on protected pods is passed over for nodes
    # that can be interrupted now (passes/admit.py); None: no limit; 0: never passed over.
    non_interrupt_wait_s: float | None = None
    budget: Budget = field(default_factory=Budget)
    deployment_policy: str = ""
    # deploymentPolicyOptions.resetBatchStateOnCompletion; None: the policy decides.
    reset_batch_state: bool | None = None
    additional_tolerations: tuple[Toleration, ...] = ()
    runtime_required: bool = False
    auto_taint_new_nodes: bool = False
    # Cordon a node when its runtime-required taint comes off (plan.runtime_required).
    runtime_required_cordon_after: bool = False
    priority: int = DEFAULT_PRIORITY
    # How this Skyhook holds back the ones after it: "node" (on each node until it is complete
    # there) or "all" (everywhere until it is complete on every node it selects).
    sequencing: str = "node"
    serial: bool = False
    # Spellings upstream's operator runs but that are not what we would write (a shorthand
    # version, a tag on the image): `path: note` lines for an admission warning and an Event.
    warnings: tuple[str, ...] = ()
    # Our additions (model/windows.py, model/alerts.py); a DeploymentPolicy may set them too.
    maintenance_window: MaintenanceWindow | None = None
    alert_gate: AlertGate | None = None
    # Ours (docs/fleet-safety.md): seconds between batch starts (without a policy, between
    # node starts); None: the policy's, else none.
    soak_time_s: float | None = None
    # Ours: seconds a node may take to come back from a reboot interrupt (rules/deadlines.py);
    # None: the policy's, else none.
    reboot_deadline_s: float | None = None
    # Ours: the signals a node must show after its interrupt before it is released
    # (rules/health.py); None: the policy's, else none.
    health_gate: HealthGate | None = None


def unreadable_secrets(spec: SkyhookSpec, readable: Collection[str], namespace: str) -> list[str]:
    """Each package environment variable that reads a Secret outside `readable`, one
    `spec.packages.<key>.env[<i>].valueFrom.secretKeyRef.name: ...` line each. Stage pods run
    in the operator's namespace, so every secretKeyRef names one of its Secrets, the webhook's
    serving key among them: a package reads only those the operator's settings name."""
    allowed = ", ".join(sorted(readable)) or "none"
    return [
        f"spec.packages.{key}.env[{index}].valueFrom.secretKeyRef.name: Secret {name!r} of "
        f"the operator's namespace {namespace!r} is not one packages may read (allowed: "
        f"{allowed}; the chart's packageSecrets, SKYHOOK_PACKAGE_SECRETS)"
        for key, package in spec.packages.items()
        for index, variable in enumerate(package.env)
        if (name := ((variable.get("valueFrom") or {}).get("secretKeyRef") or {}).get("name"))
        is not None
        and name not in readable
    ]


# --- the spec as written ------------------------------------------------------------------------


def decode_spec(raw: Mapping[str, Any]) -> SkyhookSpec:
    """Decode and validate `spec`; raises SpecError listing every problem."""
    try:
        written = _SpecWire.model_validate(raw)
    except ValidationError as error:
        raise SpecError(messages(error, "spec")) from None
    return written.decoded()


class _InterruptWire(Wire):
    type: Annotated[StrictStr, one_of(INTERRUPT_TYPES)]
    services: Annotated[tuple[NonEmpty, ...], FalsyIsUnset] = ()

    @model_validator(mode="after")
    def _services_fit_the_type(self) -> _InterruptWire:
        # Only a service interrupt restarts services: one without any would restart nothing,
        # and the agent refuses services on any other type, so the interrupt would never run.
        if self.type == "service" and not self.services:
            fail((("services",), "required when type is service: the systemd units to restart"))
        if self.type != "service" and self.services:
            fail(
                (
                    ("services",),
                    f"must be empty when type is {self.type}; only service restarts services",
                )
            )
        return self

    def decoded(self) -> Interrupt:
        return Interrupt(self.type, self.services)


class _ResourcesWire(Wire):
    # Quantities as written, a number or a string; an empty one is unset.
    cpu_request: Any = ""
    cpu_limit: Any = ""
    memory_request: Any = ""
    memory_limit: Any = ""

    @model_validator(mode="after")
    def _all_four_valid(self) -> _ResourcesWire:
        given = {to_camel(name): value for name, value in self if value != ""}
        if given and (missing := [to_camel(name) for name, value in self if value == ""]):
            raise ValueError(
                f"if any resource override is set, all four must be; missing {', '.join(missing)}"
            )
        if problems := list(_quantity_problems(given)):
            fail(*problems)
        return self

    def decoded(self) -> Resources | None:
        # Valid: all four or none.
        return Resources(*(str(value) for _, value in self)) if self.cpu_request != "" else None


def _quantity_problems(given: dict[str, Any]) -> Iterator[tuple[Loc, str]]:
    amounts: dict[str, Decimal] = {}
    for name, value in given.items():
        amount = parse_quantity(value)
        if amount is None:
            yield (name,), f"{value!r} is not a Kubernetes quantity"
        elif amount <= 0:
            yield (name,), f"{value!r} must be positive"
        else:
            amounts[name] = amount
    for kind in ("cpu", "memory"):
        request, limit = amounts.get(f"{kind}Request"), amounts.get(f"{kind}Limit")
        if request is not None and limit is not None and limit < request:
            written = (
                f"{given[f'{kind}Limit']!r} must be >= {kind}Request ({given[f'{kind}Request']!r})"
            )
            yield (f"{kind}Limit",), written


def _artifact(body: object) -> Artifact:
    try:
        return parse_artifact(body, where="")
    except ArtifactError as error:
        # Each message is `<path from where>: <problem>`; keep the path below this field.
        parts = (message.partition(": ") for message in error.messages)
        fail(*(((path[1:],) if path else (), problem) for path, _, problem in parts))


def _oci_reference(ref: str) -> str:
    if not ref:
        raise ValueError("must be an OCI reference such as registry/repo:tag")
    split_image(ref)
    return ref


class _ConfigMapRefWire(Wire):
    name: StrictStr = ""
    key: StrictStr = ""

    @model_validator(mode="after")
    def _both(self) -> _ConfigMapRefWire:
        if not self.name or not self.key:
            raise ValueError("name and key are required")
        return self


class _ImageCompatibilityWire(Closed):
    inline: Annotated[Artifact, PlainValidator(_artifact)] | None = None
    config_map_ref: _ConfigMapRefWire | None = None
    ref: Annotated[StrictStr, AfterValidator(_oci_reference)] | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> _ImageCompatibilityWire:
        if sum(v is not None for v in (self.inline, self.config_map_ref, self.ref)) != 1:
            raise ValueError("exactly one of inline, configMapRef, ref is required")
        return self

    def decoded(self) -> ImageCompatibility:
        if self.config_map_ref:
            return ImageCompatibility(
                config_map=(self.config_map_ref.name, self.config_map_ref.key)
            )
        return ImageCompatibility(inline=self.inline, ref=self.ref or "")


def _repository(image: str) -> ImageReference:
    """The repository the package's pods pull `<repository>:<version>` from. A tag is accepted
    (upstream's operator drops it) and the version stays the tag pulled, with a warning when
    the two differ; a digest belongs in containerSHA."""
    reference = split_image(image)
    if reference.digest:
        raise ValueError(f"{image!r} carries a digest; give it as containerSHA instead")
    return reference


def _seconds(text: object) -> int | None:
    if not isinstance(text, str):
        raise ValueError(f"{text!r} is not a string")
    seconds = parse_duration(text) if text else None
    if text and seconds is None:
        raise ValueError(f"{text!r} is not a duration such as 46s or 2m")
    return None if seconds is None else int(seconds)


def _env_var(env: dict[str, Any]) -> dict[str, Any]:
    if problems := list(env_var_problems(env)):
        fail(*problems)
    return env


# Kept as written: the stage pods carry it verbatim.
EnvVar = Annotated[dict[str, Any], AfterValidator(_env_var)]


def _config_map(data: dict[str, str]) -> dict[str, str]:
    problems: list[tuple[Loc, str]] = [
        ((key,), problem) for key in data if (problem := config_map_key_problem(key))
    ]
    if (size := config_map_size(data)) > MAX_CONFIG_MAP_BYTES:
        problems.append(
            (
                (),
                f"keys and values come to {size} bytes; the package's ConfigMap holds at most "
                f"{MAX_CONFIG_MAP_BYTES} (1 MiB)",
            )
        )
    if problems:
        fail(*problems)
    return data


class _UninstallWire(Wire):
    enabled: StrictBool = False
    apply: StrictBool = False

    @model_validator(mode="after")
    def _apply_needs_enabled(self) -> _UninstallWire:
        if self.apply and not self.enabled:
            fail(
                (
                    ("apply",),
                    "requires uninstall.enabled to be true (the package must declare it can be "
                    "uninstalled)",
                )
            )
        return self

    def decoded(self) -> Uninstall:
        return Uninstall(self.enabled, self.apply)


class _PackageWire(Wire):
    name: StrictStr = ""
    version: Annotated[SpecVersion, parsed(parse_spec_version)]
    image: Annotated[ImageReference, parsed(_repository)]
    container_sha: Annotated[StrictStr, check(lambda sha: digest_problem(sha) if sha else None)] = (
        Field("", alias="containerSHA")
    )
    agent_image_override: PullableImage = ""
    interrupt: _InterruptWire | None = None
    config_map: Annotated[dict[StrictStr, StrictStr], FalsyIsUnset, AfterValidator(_config_map)] = (
        Field(default_factory=dict)
    )
    config_interrupts: Annotated[dict[StrictStr, _InterruptWire], FalsyIsUnset] = Field(
        default_factory=dict
    )
    depends_on: Annotated[dict[StrictStr, NonEmpty], FalsyIsUnset] = Field(default_factory=dict)
    env: Annotated[tuple[EnvVar, ...], FalsyIsUnset] = ()
    resources: _ResourcesWire | None = None
    graceful_shutdown: Annotated[int | None, PlainValidator(_seconds)] = None
    stage_timeout: NonNegativeDuration | None = None
    image_compatibility: _ImageCompatibilityWire | None = None
    uninstall: Annotated[_UninstallWire, FalsyIsUnset] = Field(default_factory=_UninstallWire)

    def decoded(self, key: str) -> Package:
        return Package(
            name=key,
            version=self.version.text,
            image=self.image.repository,
            container_sha=self.container_sha,
            agent_image_override=self.agent_image_override,
            interrupt=self.interrupt.decoded() if self.interrupt else None,
            config_interrupts={k: i.decoded() for k, i in self.config_interrupts.items()},
            config_map=self.config_map,
            depends_on=self.depends_on,
            env=self.env,
            resources=self.resources.decoded() if self.resources else None,
            graceful_shutdown_s=self.graceful_shutdown,
            stage_timeout_s=self.stage_timeout,
            image_compatibility=self.image_compatibility.decoded()
            if self.image_compatibility
            else None,
            uninstall=self.uninstall.decoded(),
        )

    def warnings(self, key: str) -> list[str]:
        """Spellings upstream runs that we would not write: `path: note` lines."""
        notes = []
        if self.version.warning:
            notes.append(f"spec.packages.{key}.version: {self.version.warning}")
        if tag := tag_mismatch_warning(self.image, self.version.text):
            notes.append(f"spec.packages.{key}.image: {tag}")
        return notes


class _TolerationWire(Wire):
    key: Text = ""
    operator: Annotated[StrictStr, FalsyIsUnset, one_of(("Equal", "Exists"))] = "Equal"
    value: Text = ""
    effect: Annotated[StrictStr, FalsyIsUnset, one_of(TAINT_EFFECTS)] = ""
    # One that is not an integer is unset, as Skyhook's decoder has always read it.
    toleration_seconds: Annotated[
        int | None, PlainValidator(lambda seconds: seconds if isinstance(seconds, int) else None)
    ] = None

    @model_validator(mode="after")
    def _kubernetes_takes_it(self) -> _TolerationWire:
        problems = toleration_problems(
            self.key, self.operator, self.value, self.effect, self.toleration_seconds
        )
        if found := list(problems):
            fail(*found)
        return self

    def decoded(self) -> Toleration:
        return Toleration(self.key, self.operator, self.value, self.effect, self.toleration_seconds)


class _BudgetWire(Wire):
    percent: Annotated[StrictInt, in_range(0, 100)] | None = None
    count: Annotated[StrictInt, in_range(0)] | None = None

    @model_validator(mode="after")
    def _not_both(self) -> _BudgetWire:
        if self.percent is not None and self.count is not None:
            raise ValueError("set percent or count, not both")
        return self


class _DrainConfigWire(Wire):
    # Upstream's booleans are nullable: null reads as the default.
    disable_eviction: StrictBool | None = None
    delete_empty_dir_data: StrictBool | None = None
    force: StrictBool | None = None
    ignore_daemon_sets: StrictBool | None = None
    timeout: NonNegativeDuration | None = None
    grace_period: NonNegativeDuration | None = None

    def decoded(self) -> DrainConfig:
        def given(value: bool | None, default: bool) -> bool:
            return default if value is None else value

        return DrainConfig(
            disable_eviction=given(self.disable_eviction, False),
            delete_empty_dir_data=given(self.delete_empty_dir_data, True),
            force=given(self.force, True),
            ignore_daemon_sets=given(self.ignore_daemon_sets, True),
            timeout_s=self.timeout or None,  # 0 bounds nothing
            grace_period_s=None if self.grace_period is None else math.ceil(self.grace_period),
        )


class _PolicyOptionsWire(Wire):
    reset_batch_state_on_completion: StrictBool | None = None


def _package_name_problem(key: str) -> str | None:
    if PACKAGE_NAME.match(key):
        return None
    return f"package name {key!r} must match {PACKAGE_NAME.pattern} (2-43 characters)"


PackageKey = Annotated[StrictStr, check(_package_name_problem)]


class _SpecWire(Wire):
    packages: Annotated[dict[PackageKey, _PackageWire], FalsyIsUnset] = Field(default_factory=dict)
    node_selectors: SelectorWire = Field(default_factory=SelectorWire)
    pod_non_interrupt_labels: SelectorWire = Field(default_factory=SelectorWire)
    drain_config: Annotated[_DrainConfigWire, FalsyIsUnset] = Field(
        default_factory=_DrainConfigWire
    )
    pod_non_interrupt_wait: Duration | None = None
    interruption_budget: Annotated[_BudgetWire, FalsyIsUnset] = Field(default_factory=_BudgetWire)
    deployment_policy: StrictStr = ""
    deployment_policy_options: Annotated[_PolicyOptionsWire, FalsyIsUnset] = Field(
        default_factory=_PolicyOptionsWire
    )
    additional_tolerations: Annotated[tuple[_TolerationWire, ...], FalsyIsUnset] = ()
    runtime_required: StrictBool = False
    auto_taint_new_nodes: StrictBool = False
    runtime_required_cordon_after: StrictBool = False
    priority: Annotated[StrictInt, in_range(1)] = DEFAULT_PRIORITY
    sequencing: Literal["node", "all", ""] = "node"
    serial: StrictBool = False
    maintenance_window: WindowWire | None = None
    alert_gate: GateWire | None = None
    soak_time: Duration | None = None
    reboot_deadline: Duration | None = None
    health_gate: HealthGateWire | None = None

    @field_validator("packages")
    @classmethod
    def _packages_agree(cls, packages: dict[str, _PackageWire]) -> dict[str, _PackageWire]:
        if problems := list(_disagreements(packages)):
            fail(*problems)
        return packages

    @model_validator(mode="after")
    def _policy_or_budget(self) -> _SpecWire:
        budget = self.interruption_budget
        if self.deployment_policy and (budget.percent is not None or budget.count is not None):
            exclusive = "deploymentPolicy and interruptionBudget are mutually exclusive"
            fail((("deploymentPolicy",), exclusive))
        return self

    def decoded(self) -> SkyhookSpec:
        names = sorted(self.packages)
        return SkyhookSpec(
            packages={name: self.packages[name].decoded(name) for name in names},
            node_selector=self.node_selectors.decoded(),
            pod_non_interrupt_labels=self.pod_non_interrupt_labels.decoded(),
            drain=self.drain_config.decoded(),
            non_interrupt_wait_s=self.pod_non_interrupt_wait,
            budget=Budget(self.interruption_budget.percent, self.interruption_budget.count),
            deployment_policy=self.deployment_policy,
            reset_batch_state=self.deployment_policy_options.reset_batch_state_on_completion,
            additional_tolerations=tuple(t.decoded() for t in self.additional_tolerations),
            runtime_required=self.runtime_required,
            auto_taint_new_nodes=self.auto_taint_new_nodes,
            runtime_required_cordon_after=self.runtime_required_cordon_after,
            priority=self.priority,
            sequencing=self.sequencing or "node",
            serial=self.serial,
            warnings=tuple(self._warnings(names)),
            maintenance_window=self.maintenance_window.decoded()
            if self.maintenance_window
            else None,
            alert_gate=self.alert_gate.decoded() if self.alert_gate else None,
            soak_time_s=self.soak_time,
            reboot_deadline_s=self.reboot_deadline,
            health_gate=self.health_gate.decoded() if self.health_gate else None,
        )

    def _warnings(self, names: list[str]) -> Iterator[str]:
        for name in names:
            yield from self.packages[name].warnings(name)
        # Upstream admits it too and ignores it; SCRs written for upstream may carry it.
        if self.auto_taint_new_nodes and not self.runtime_required:
            yield (
                "spec.autoTaintNewNodes: has no effect without spec.runtimeRequired: true "
                "(new nodes are only tainted for runtime-required Skyhooks)"
            )
        if self.runtime_required_cordon_after and not self.runtime_required:
            yield (
                "spec.runtimeRequiredCordonAfter: has no effect without spec.runtimeRequired: "
                "true (only the runtime-required taint's removal cordons a node)"
            )


def _disagreements(packages: Mapping[str, _PackageWire]) -> Iterator[tuple[Loc, str]]:
    """What a package's rules need its key or the other packages for."""
    for key, pkg in sorted(packages.items()):
        if pkg.name and pkg.name != key:
            yield (
                (key, "name"),
                f"{pkg.name!r} differs from the package key {key!r}; leave it unset",
            )
        for pattern in pkg.config_interrupts:
            at = (key, "configInterrupts", pattern)
            if "*" not in pattern:
                if pattern not in pkg.config_map:
                    yield at, f"{pattern!r} is not a key of spec.packages.{key}.configMap"
            elif not any(fnmatch.fnmatchcase(k, pattern) for k in pkg.config_map):
                yield at, f"glob {pattern!r} matches no configMap key"
        for dep, version in pkg.depends_on.items():
            target = packages.get(dep)
            if target is None:
                yield (key, "dependsOn", dep), f"no package {dep!r} in spec.packages"
            elif target.version.text != version:
                yield (
                    (key, "dependsOn", dep),
                    f"{keys.package_key(dep, version)} does not exist (spec.packages.{dep}.version is {target.version.text!r})",
                )
    graph = {name: tuple(d for d in p.depends_on if d in packages) for name, p in packages.items()}
    if cycle := find_cycle(graph):
        yield (cycle[0], "dependsOn"), f"dependsOn cycle: {' -> '.join(cycle)}"


_QUANTITY = re.compile(r"^([+-]?[0-9.]+)([eE][+-]?[0-9]+|[numkMGTPE]i?|Ki)?$")
_SUFFIX: dict[str, int | Decimal] = {
    "": 1, "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "k": 10**3,
    "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18, "Ki": 2**10, "Mi": 2**20,
    "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
}  # fmt: skip


def parse_quantity(value: object) -> Decimal | None:
    """A Kubernetes quantity as a number, or None when it is not one."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return Decimal(str(value))
    if not isinstance(value, str):
        return None
    match = _QUANTITY.match(value.strip())
    if not match:
        return None
    number, suffix = match.group(1), match.group(2) or ""
    try:
        if suffix[:1] in {"e", "E"}:
            return Decimal(number + suffix)
        return Decimal(number) * Decimal(_SUFFIX[suffix])
    except (InvalidOperation, KeyError):
        return None


def find_cycle(graph: Mapping[str, tuple[str, ...]]) -> list[str] | None:
    """A dependency cycle as a path `[a, b, ..., a]`, or None. Deterministic (sorted walk)."""
    state: dict[str, int] = {}  # 1 = on the stack, 2 = done
    stack: list[str] = []
    for vertex in sorted(graph):
        if vertex not in state and (found := _visit(graph, vertex, state, stack)):
            return found
    return None


def _visit(
    graph: Mapping[str, tuple[str, ...]], vertex: str, state: dict[str, int], stack: list[str]
) -> list[str] | None:
    """find_cycle's depth-first walk from `vertex` (a module function: a nested one calling
    itself would be a reference cycle left for the collector at every pass)."""
    state[vertex] = 1
    stack.append(vertex)
    for nxt in sorted(graph.get(vertex, ())):
        if state.get(nxt) == 1:
            return [*stack[stack.index(nxt) :], nxt]
        if nxt not in state and (found := _visit(graph, nxt, state, stack)):
            return found
    stack.pop()
    state[vertex] = 2
    return None


def normalising_patch(raw: Mapping[str, Any]) -> dict[str, Any] | None:
    """The merge patch that stores a spec in the form it is read in: each package's `name` is
    its key and its image has no tag (the version is the tag pulled). None when it is in that
    form already, or when the spec is too malformed to tell (decoding then reports it)."""
    packages = raw.get("packages")
    if not isinstance(packages, Mapping):
        return None
    changes: dict[str, Any] = {}
    for key, package in packages.items():
        if not isinstance(package, Mapping):
            continue
        change: dict[str, str] = {}
        if "name" not in package:
            change["name"] = key
        image = package.get("image")
        if isinstance(image, str) and image_tag(image):
            change["image"] = image_without_tag(image)
        if change:
            changes[key] = change
    return {"packages": changes} if changes else None
