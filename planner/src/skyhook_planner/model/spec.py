"""Decode a Skyhook object's `spec` into typed, validated values.

One decoder for the operator (planner, webhook-style checks, CLI). It collects every problem,
each named by its field path (`spec.packages.tuning.version: "1.x" is not a strict semver
version ...`), and raises them together in one `SpecError`. The rules are upstream's CRD and
webhook rules, plus ours: strict SemVer 2.0 versions and `dependsOn` cycles rejected
(docs/upstream-differences.md).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

from skyhook_planner.model.alerts import AlertGate, decode_gate
from skyhook_planner.model.imagecompat import Artifact, ArtifactError
from skyhook_planner.model.imagecompat import parse as parse_artifact
from skyhook_planner.model.vocabulary import (
    SELECTOR_OPERATORS,
    TAINT_EFFECTS,
    LabelSelector,
    SelectorRequirement,
    Toleration,
    label_key_problem,
    label_value_problem,
)
from skyhook_planner.model.windows import MaintenanceWindow, decode_window
from skyhook_schemas import keys
from skyhook_schemas.durations import parse_duration
from skyhook_schemas.images import ImageError, split_image, tag_mismatch_warning
from skyhook_schemas.versions import VersionError, parse_spec_version

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
    image_compatibility: ImageCompatibility | None = None
    # The full image reference chosen for one node from image_compatibility (pods pull it).
    chosen_image: str = ""

    @property
    def key(self) -> str:
        """The nodeState key `<name>|<version>`."""
        return keys.package_key(self.name, self.version)


@dataclass(frozen=True)
class Budget:
    """interruptionBudget: at most one of percent/count; neither means 100 %."""

    percent: int | None = None
    count: int | None = None


@dataclass(frozen=True)
class SkyhookSpec:
    packages: Mapping[str, Package] = field(default_factory=dict)
    node_selector: LabelSelector = field(default_factory=LabelSelector)
    pod_non_interrupt_labels: LabelSelector = field(default_factory=LabelSelector)
    budget: Budget = field(default_factory=Budget)
    deployment_policy: str = ""
    # deploymentPolicyOptions.resetBatchStateOnCompletion; None: the policy decides.
    reset_batch_state: bool | None = None
    additional_tolerations: tuple[Toleration, ...] = ()
    runtime_required: bool = False
    auto_taint_new_nodes: bool = False
    priority: int = DEFAULT_PRIORITY
    serial: bool = False
    pause: bool = False
    # Spellings upstream's operator runs but that are not what we would write (a shorthand
    # version, a tag on the image): `path: note` lines for an admission warning and an Event.
    warnings: tuple[str, ...] = ()
    # Our additions (core/windows.py, core/alerts.py); a DeploymentPolicy may set them too.
    maintenance_window: MaintenanceWindow | None = None
    alert_gate: AlertGate | None = None


# --- decoding ---------------------------------------------------------------------------------


class _Errors:
    def __init__(self) -> None:
        self.messages: list[str] = []
        self.warnings: list[str] = []

    def add(self, path: str, problem: str) -> None:
        self.messages.append(f"{path}: {problem}")

    def warn(self, path: str, note: str) -> None:
        self.warnings.append(f"{path}: {note}")


def _is_map(value: object) -> bool:
    return isinstance(value, Mapping)


def _string(raw: Mapping[str, Any], key: str, path: str, errors: _Errors) -> str:
    value = raw.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        errors.add(f"{path}.{key}", f"{value!r} is not a string")
        return ""
    return value


def _bool(raw: Mapping[str, Any], key: str, path: str, errors: _Errors) -> bool:
    value = raw.get(key, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        errors.add(f"{path}.{key}", f"{value!r} is not a boolean")
        return False
    return value


def _optional_int(value: object, path: str, errors: _Errors, minimum: int, maximum: int | None):  # type: ignore[no-untyped-def]
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        errors.add(path, f"{value!r} is not an integer")
        return None
    if value < minimum or (maximum is not None and value > maximum):
        allowed = f"{minimum}..{maximum}" if maximum is not None else f">= {minimum}"
        errors.add(path, f"{value} is out of range (allowed {allowed})")
        return None
    return value


def decode_selector(raw: object, path: str, errors: _Errors) -> LabelSelector:
    if raw is None:
        return LabelSelector()
    if not _is_map(raw):
        errors.add(path, "must be a label selector object")
        return LabelSelector()
    assert isinstance(raw, Mapping)
    labels = raw.get("matchLabels") or {}
    if not _is_map(labels) or not all(isinstance(v, str) for v in labels.values()):
        errors.add(f"{path}.matchLabels", "must map label keys to string values")
        labels = {}
    for key, value in labels.items():
        problem = label_key_problem(str(key)) or label_value_problem(value)
        if problem:
            errors.add(f"{path}.matchLabels", problem)
    requirements: list[SelectorRequirement] = []
    for index, expr in enumerate(raw.get("matchExpressions") or ()):
        expr_path = f"{path}.matchExpressions[{index}]"
        if not _is_map(expr):
            errors.add(expr_path, "must be an object with key, operator and values")
            continue
        operator = expr.get("operator")
        values = tuple(expr.get("values") or ())
        if operator not in SELECTOR_OPERATORS:
            errors.add(
                f"{expr_path}.operator",
                f"{operator!r} is not one of {', '.join(SELECTOR_OPERATORS)}",
            )
            continue
        if operator in {"In", "NotIn"} and not values:
            errors.add(f"{expr_path}.values", f"must not be empty for operator {operator}")
        if operator in {"Exists", "DoesNotExist"} and values:
            errors.add(f"{expr_path}.values", f"must be empty for operator {operator}")
        if not expr.get("key"):
            errors.add(f"{expr_path}.key", "required")
        elif problem := label_key_problem(str(expr["key"])):
            errors.add(f"{expr_path}.key", problem)
        for value in values:
            if problem := label_value_problem(str(value)):
                errors.add(f"{expr_path}.values", problem)
        requirements.append(SelectorRequirement(str(expr.get("key") or ""), operator, values))
    return LabelSelector(dict(labels), tuple(requirements))


def _decode_toleration(raw: object, path: str, errors: _Errors) -> Toleration | None:
    if not _is_map(raw):
        errors.add(path, "must be a toleration object")
        return None
    assert isinstance(raw, Mapping)
    operator = raw.get("operator") or "Equal"
    effect = raw.get("effect") or ""
    if operator not in {"Equal", "Exists"}:
        errors.add(f"{path}.operator", f"{operator!r} is not one of Equal, Exists")
    if effect and effect not in TAINT_EFFECTS:
        errors.add(f"{path}.effect", f"{effect!r} is not one of {', '.join(TAINT_EFFECTS)}")
    if operator == "Exists" and raw.get("value"):
        errors.add(f"{path}.value", "must be empty when operator is Exists")
    seconds = raw.get("tolerationSeconds")
    return Toleration(
        key=str(raw.get("key") or ""),
        operator=operator,
        value=str(raw.get("value") or ""),
        effect=effect,
        toleration_seconds=seconds if isinstance(seconds, int) else None,
    )


def _decode_interrupt(raw: object, path: str, errors: _Errors) -> Interrupt | None:
    if not _is_map(raw):
        errors.add(path, "must be an object with type and optional services")
        return None
    assert isinstance(raw, Mapping)
    kind = raw.get("type")
    if kind not in INTERRUPT_TYPES:
        errors.add(f"{path}.type", f"{kind!r} is not one of {', '.join(INTERRUPT_TYPES)}")
        return None
    services = raw.get("services") or ()
    if not isinstance(services, list | tuple) or not all(isinstance(s, str) for s in services):
        errors.add(f"{path}.services", "must be a list of systemd unit names")
        services = ()
    return Interrupt(kind, tuple(services))


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


def _decode_resources(raw: object, path: str, errors: _Errors) -> Resources | None:
    if raw is None:
        return None
    if not _is_map(raw):
        errors.add(path, "must be an object with cpuRequest, cpuLimit, memoryRequest, memoryLimit")
        return None
    assert isinstance(raw, Mapping)
    names = ("cpuRequest", "cpuLimit", "memoryRequest", "memoryLimit")
    given = {n: raw.get(n) for n in names if raw.get(n) not in (None, "")}
    if not given:
        return None
    missing = [n for n in names if n not in given]
    if missing:
        errors.add(
            path, f"if any resource override is set, all four must be; missing {', '.join(missing)}"
        )
        return None
    amounts: dict[str, Decimal] = {}
    for name, value in given.items():
        amount = parse_quantity(value)
        if amount is None:
            errors.add(f"{path}.{name}", f"{value!r} is not a Kubernetes quantity")
        elif amount <= 0:
            errors.add(f"{path}.{name}", f"{value!r} must be positive")
        else:
            amounts[name] = amount
    for kind in ("cpu", "memory"):
        request, limit = amounts.get(f"{kind}Request"), amounts.get(f"{kind}Limit")
        if request is not None and limit is not None and limit < request:
            errors.add(
                f"{path}.{kind}Limit",
                f"{given[f'{kind}Limit']!r} must be >= {kind}Request ({given[f'{kind}Request']!r})",
            )
    return Resources(*(str(given[n]) for n in names))


def _decode_config(
    raw: Mapping[str, Any], path: str, errors: _Errors
) -> tuple[dict[str, str], dict[str, Interrupt]]:
    """configMap and configInterrupts; every configInterrupt key must name a configMap key, or
    be a `*` glob matching at least one."""
    config_map = raw.get("configMap") or {}
    if not _is_map(config_map) or not all(isinstance(v, str) for v in config_map.values()):
        errors.add(f"{path}.configMap", "must map file names to string contents")
        config_map = {}
    config_interrupts: dict[str, Interrupt] = {}
    raw_ci = raw.get("configInterrupts") or {}
    if not _is_map(raw_ci):
        errors.add(f"{path}.configInterrupts", "must map configMap keys (or globs) to interrupts")
        raw_ci = {}
    for pattern, body in raw_ci.items():
        ci_path = f"{path}.configInterrupts.{pattern}"
        decoded = _decode_interrupt(body, ci_path, errors)
        if "*" in pattern:
            if not any(fnmatch.fnmatchcase(k, pattern) for k in config_map):
                errors.add(ci_path, f"glob {pattern!r} matches no configMap key")
        elif pattern not in config_map:
            errors.add(ci_path, f"{pattern!r} is not a key of {path}.configMap")
        if decoded is not None:
            config_interrupts[pattern] = decoded
    return dict(config_map), config_interrupts


def _decode_image(image: str, version: str, path: str, errors: _Errors) -> str:
    """The repository the package's pods pull `<repository>:<version>` from. A tag is accepted
    (upstream's operator drops it) and the version stays the tag pulled, with a warning when
    the two differ; a digest belongs in containerSHA."""
    if not image:
        errors.add(path, "required")
        return ""
    try:
        reference = split_image(image)
    except ImageError as err:
        errors.add(path, str(err))
        return image
    if reference.digest:
        errors.add(path, f"{image!r} carries a digest; give it as containerSHA instead")
    warning = tag_mismatch_warning(reference, version) if version else None
    if warning:
        errors.warn(path, warning)
    return reference.repository


def _decode_image_compatibility(
    raw: object, path: str, errors: _Errors
) -> ImageCompatibility | None:
    if not _is_map(raw):
        errors.add(path, "must be an object with one of inline, configMapRef, ref")
        return None
    assert isinstance(raw, Mapping)
    given = [k for k in ("inline", "configMapRef", "ref") if raw.get(k) is not None]
    unknown = sorted(set(raw) - {"inline", "configMapRef", "ref"})
    if unknown:
        errors.add(path, f"unknown field(s) {', '.join(unknown)}")
    if len(given) != 1:
        errors.add(path, "exactly one of inline, configMapRef, ref is required")
        return None
    if given == ["inline"]:
        try:
            return ImageCompatibility(inline=parse_artifact(raw["inline"], f"{path}.inline"))
        except ArtifactError as err:
            for message in err.messages:
                errors.messages.append(message)
            return None
    if given == ["ref"]:
        ref = raw["ref"]
        if not isinstance(ref, str) or not ref:
            errors.add(f"{path}.ref", "must be an OCI reference such as registry/repo:tag")
            return None
        try:
            split_image(ref)
        except ImageError as err:
            errors.add(f"{path}.ref", str(err))
            return None
        return ImageCompatibility(ref=ref)
    ref_map = raw["configMapRef"]
    if not _is_map(ref_map):
        errors.add(f"{path}.configMapRef", "must be {name, key}")
        return None
    name = _string(ref_map, "name", f"{path}.configMapRef", errors)
    item = _string(ref_map, "key", f"{path}.configMapRef", errors)
    if not name or not item:
        errors.add(f"{path}.configMapRef", "name and key are required")
        return None
    return ImageCompatibility(config_map=(name, item))


def _decode_package(key: str, raw: object, errors: _Errors) -> Package | None:
    path = f"spec.packages.{key}"
    if not _is_map(raw):
        errors.add(path, "must be a package object")
        return None
    assert isinstance(raw, Mapping)
    if not PACKAGE_NAME.match(key):
        errors.add(
            path, f"package name {key!r} must match {PACKAGE_NAME.pattern} (2-43 characters)"
        )
    name = _string(raw, "name", path, errors)
    if name and name != key:
        errors.add(f"{path}.name", f"{name!r} differs from the package key {key!r}; leave it unset")
    version = _string(raw, "version", path, errors)
    if not version:
        errors.add(f"{path}.version", "required")
    else:
        try:
            spelled = parse_spec_version(version)
        except VersionError as err:
            errors.add(f"{path}.version", str(err))
        else:
            if spelled.warning:
                errors.warn(f"{path}.version", spelled.warning)
    image = _decode_image(_string(raw, "image", path, errors), version, f"{path}.image", errors)
    interrupt = None
    if raw.get("interrupt") is not None:
        interrupt = _decode_interrupt(raw["interrupt"], f"{path}.interrupt", errors)
    config_map, config_interrupts = _decode_config(raw, path, errors)
    depends_on = raw.get("dependsOn") or {}
    if not _is_map(depends_on):
        errors.add(f"{path}.dependsOn", "must map package names to versions")
        depends_on = {}
    for dep, dep_version in depends_on.items():
        if not isinstance(dep_version, str) or not dep_version:
            errors.add(f"{path}.dependsOn.{dep}", "version must be a non-empty string")
    env = raw.get("env") or ()
    if not isinstance(env, list | tuple) or not all(_is_map(e) and e.get("name") for e in env):
        errors.add(f"{path}.env", "must be a list of {name, value | valueFrom} objects")
        env = ()
    grace: int | None = None
    shutdown = _string(raw, "gracefulShutdown", path, errors)
    if shutdown:
        seconds = parse_duration(shutdown)
        if seconds is None:
            errors.add(
                f"{path}.gracefulShutdown", f"{shutdown!r} is not a duration such as 46s or 2m"
            )
        else:
            grace = int(seconds)
    return Package(
        name=key,
        version=version,
        image=image,
        container_sha=_string(raw, "containerSHA", path, errors),
        agent_image_override=_string(raw, "agentImageOverride", path, errors),
        interrupt=interrupt,
        config_interrupts=config_interrupts,
        config_map=config_map,
        depends_on=dict(depends_on),
        env=tuple(dict(e) for e in env),
        resources=_decode_resources(raw.get("resources"), f"{path}.resources", errors),
        graceful_shutdown_s=grace,
        image_compatibility=(
            _decode_image_compatibility(
                raw["imageCompatibility"], f"{path}.imageCompatibility", errors
            )
            if raw.get("imageCompatibility") is not None
            else None
        ),
    )


def find_cycle(graph: Mapping[str, tuple[str, ...]]) -> list[str] | None:
    """A dependency cycle as a path `[a, b, ..., a]`, or None. Deterministic (sorted walk)."""
    state: dict[str, int] = {}  # 1 = on the stack, 2 = done
    stack: list[str] = []

    def visit(vertex: str) -> list[str] | None:
        state[vertex] = 1
        stack.append(vertex)
        for nxt in sorted(graph.get(vertex, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[vertex] = 2
        return None

    for vertex in sorted(graph):
        if vertex not in state and (found := visit(vertex)):
            return found
    return None


def _check_dependencies(packages: Mapping[str, Package], errors: _Errors) -> None:
    for pkg in packages.values():
        for dep, dep_version in pkg.depends_on.items():
            target = packages.get(dep)
            if target is None:
                errors.add(
                    f"spec.packages.{pkg.name}.dependsOn.{dep}",
                    f"no package {dep!r} in spec.packages",
                )
            elif isinstance(dep_version, str) and dep_version and target.version != dep_version:
                errors.add(
                    f"spec.packages.{pkg.name}.dependsOn.{dep}",
                    f"{keys.package_key(dep, dep_version)} does not exist (spec.packages.{dep}.version is {target.version!r})",
                )
    graph = {name: tuple(d for d in p.depends_on if d in packages) for name, p in packages.items()}
    cycle = find_cycle(graph)
    if cycle:
        errors.add("spec.packages", f"dependsOn cycle: {' -> '.join(cycle)}")


def decode_spec(raw: Mapping[str, Any]) -> SkyhookSpec:
    """Decode and validate `spec`; raises SpecError listing every problem."""
    errors = _Errors()
    if not _is_map(raw):
        raise SpecError(["spec: must be an object"])
    packages: dict[str, Package] = {}
    raw_packages = raw.get("packages") or {}
    if not _is_map(raw_packages):
        errors.add("spec.packages", "must map package names to packages")
        raw_packages = {}
    for key in sorted(raw_packages):
        pkg = _decode_package(key, raw_packages[key], errors)
        if pkg is not None:
            packages[key] = pkg
    _check_dependencies(packages, errors)

    raw_budget = raw.get("interruptionBudget") or {}
    if not _is_map(raw_budget):
        errors.add("spec.interruptionBudget", "must be an object with percent or count")
        raw_budget = {}
    percent = _optional_int(
        raw_budget.get("percent"), "spec.interruptionBudget.percent", errors, 0, 100
    )
    count = _optional_int(raw_budget.get("count"), "spec.interruptionBudget.count", errors, 0, None)
    if raw_budget.get("percent") is not None and raw_budget.get("count") is not None:
        errors.add("spec.interruptionBudget", "set percent or count, not both")
    policy = _string(raw, "deploymentPolicy", "spec", errors)
    if policy and (raw_budget.get("percent") is not None or raw_budget.get("count") is not None):
        errors.add(
            "spec.deploymentPolicy",
            "deploymentPolicy and interruptionBudget are mutually exclusive",
        )

    options = raw.get("deploymentPolicyOptions") or {}
    reset_batch_state = None
    if not _is_map(options):
        errors.add("spec.deploymentPolicyOptions", "must be an object")
    elif options.get("resetBatchStateOnCompletion") is not None:
        reset_batch_state = _bool(
            options, "resetBatchStateOnCompletion", "spec.deploymentPolicyOptions", errors
        )

    tolerations: list[Toleration] = []
    raw_tolerations = raw.get("additionalTolerations") or ()
    if not isinstance(raw_tolerations, list | tuple):
        errors.add("spec.additionalTolerations", "must be a list of tolerations")
        raw_tolerations = ()
    for index, body in enumerate(raw_tolerations):
        toleration = _decode_toleration(body, f"spec.additionalTolerations[{index}]", errors)
        if toleration is not None:
            tolerations.append(toleration)

    priority = raw.get("priority", DEFAULT_PRIORITY)
    priority = _optional_int(priority, "spec.priority", errors, 1, None) or DEFAULT_PRIORITY
    spec = SkyhookSpec(
        packages=packages,
        node_selector=decode_selector(raw.get("nodeSelectors"), "spec.nodeSelectors", errors),
        pod_non_interrupt_labels=decode_selector(
            raw.get("podNonInterruptLabels"), "spec.podNonInterruptLabels", errors
        ),
        budget=Budget(percent=percent, count=count),
        deployment_policy=policy,
        reset_batch_state=reset_batch_state,
        additional_tolerations=tuple(tolerations),
        runtime_required=_bool(raw, "runtimeRequired", "spec", errors),
        auto_taint_new_nodes=_bool(raw, "autoTaintNewNodes", "spec", errors),
        priority=priority,
        serial=_bool(raw, "serial", "spec", errors),
        pause=_bool(raw, "pause", "spec", errors),
        warnings=tuple(errors.warnings),
        maintenance_window=decode_window(
            raw.get("maintenanceWindow"), "spec.maintenanceWindow", errors
        ),
        alert_gate=decode_gate(raw.get("alertGate"), "spec.alertGate", errors),
    )
    if errors.messages:
        raise SpecError(errors.messages)
    return spec
