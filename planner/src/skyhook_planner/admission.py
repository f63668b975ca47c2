"""Admission decisions, pure: what the webhooks answer for a Skyhook or DeploymentPolicy.

The rules are the decoders' (model/spec.py, model/policy.py), so a spec the webhook admits is
one the planner runs, and one it refuses is reported in status the same way when the webhook
was off. On top of them, admission adds what only makes sense at the door:
- a Skyhook's name must leave room for the node keys built from it;
- the DeploymentPolicy a Skyhook names must exist;
- a package's env may read (secretKeyRef) only the Secrets of the operator's namespace the
  operator's settings name (the pass holds such a Skyhook as invalid too, should it get in
  while the webhook is off);
- a policy still named by a Skyhook cannot be deleted;
- a package that declares `uninstall.enabled` may only leave the spec, or go down in version,
  once it is uninstalled from every node (no node in the old status's nodeState holds its
  version, nor does its nodesPerPackage count any when the node lists were shortened), and a
  downgrade also needs `uninstall.apply` set first; cancelling an uninstall is
  admitted with a warning.

An update that leaves `spec` as it was is always admitted: the operator's own metadata writes
(finalizer, version annotation) must go through even for an object admitted before the webhook
existed, or it could never be cleaned up and deleted.
"""

from __future__ import annotations

import copy
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from skyhook_planner.model.policy import (
    EXPONENTIAL,
    LINEAR,
    STRATEGY_KINDS,
    PolicyError,
    decode_policy,
)
from skyhook_planner.model.spec import SkyhookSpec, SpecError, decode_spec, unreadable_secrets
from skyhook_planner.model.status import summarize
from skyhook_schemas import keys
from skyhook_schemas.versions import VersionChange, VersionError, version_change

# The longest node key built from a Skyhook's name, `<group>/nodeState_<name>`, must keep its
# name part within the 63 characters Kubernetes allows.
MAX_SKYHOOK_NAME = 63 - len(keys.node_state_key("").removeprefix(keys.PREFIX))
# A refusal lists problems one per line; kubectl shows the whole message, so keep it readable.
MAX_MESSAGE = 4096

# What upstream's defaulting webhook fills into a strategy left without them.
STRATEGY_DEFAULTS: Mapping[str, Mapping[str, int]] = {
    kind: {
        "initialBatch": 1,
        "batchThreshold": 100,
        "safetyLimit": 50,
        **({"delta": 1} if kind == LINEAR else {}),
        **({"growthFactor": 2} if kind == EXPONENTIAL else {}),
    }
    for kind in STRATEGY_KINDS
}

Json = Mapping[str, Any]


@dataclass(frozen=True)
class Verdict:
    """The answer to one validating admission request: allowed or not, why, and what to warn
    the client about."""

    allowed: bool
    message: str = ""
    warnings: tuple[str, ...] = ()

    @classmethod
    def refuse(cls, problems: Sequence[str]) -> Verdict:
        return cls(False, summarize(problems, MAX_MESSAGE, sep="\n"))


ALLOWED = Verdict(True)


def _spec_unchanged(operation: str, new: Json | None, old: Json | None) -> bool:
    return operation == "UPDATE" and (new or {}).get("spec") == (old or {}).get("spec")


def review_skyhook(
    operation: str,
    new: Json | None,
    old: Json | None,
    policies: Collection[str],
    *,
    readable_secrets: Collection[str] = frozenset(),
    namespace: str = "",
) -> Verdict:
    """Admit or refuse a Skyhook create or update; `policies` are the existing
    DeploymentPolicies' names, `readable_secrets` the Secrets of the operator's `namespace`
    a package's env may read."""
    if operation not in {"CREATE", "UPDATE"} or new is None:
        return ALLOWED
    if _spec_unchanged(operation, new, old):
        return ALLOWED
    problems: list[str] = []
    name = (new.get("metadata") or {}).get("name") or ""
    if len(name) > MAX_SKYHOOK_NAME:
        problems.append(
            f"metadata.name: {name!r} is {len(name)} characters; at most {MAX_SKYHOOK_NAME} "
            f"leave room for the node annotation {keys.node_state_key('<name>')!r}"
        )
    raw = new.get("spec")
    warnings: tuple[str, ...] = ()
    try:
        spec = decode_spec(raw if isinstance(raw, Mapping) else {})
    except SpecError as error:
        problems += error.messages
    else:
        warnings = spec.warnings
        problems += unreadable_secrets(spec, readable_secrets, namespace)
        if operation == "UPDATE":
            refused, cancelled = _uninstall_gates(spec, old or {})
            problems += refused
            warnings = (*warnings, *cancelled)
        if spec.deployment_policy and spec.deployment_policy not in policies:
            problems.append(
                f'spec.deploymentPolicy: DeploymentPolicy "{spec.deployment_policy}" not found; '
                "create it first"
            )
    if problems:
        return Verdict(False, Verdict.refuse(problems).message, warnings)
    return Verdict(True, warnings=warnings)


def _uninstall_gates(spec: SkyhookSpec, old: Json) -> tuple[list[str], list[str]]:
    """What an update does to packages that declare `uninstall.enabled`: the refusals (removed,
    or downgraded, while still installed somewhere) and the cancel warnings. Read from the old
    object as stored; an old spec that does not decode gates nothing."""
    try:
        before = decode_spec(old.get("spec") or {})
    except SpecError:
        return [], []
    status = old.get("status")
    mirror = (status or {}).get("nodeState") if isinstance(status, Mapping) else None
    nodes = (
        [n for n in (mirror or {}).values() if isinstance(n, Mapping)]
        if isinstance(mirror, Mapping)
        else []
    )

    # A status whose node lists were shortened (model/status_size.py) counts every node's
    # packages instead.
    counted = status.get("nodesPerPackage") if isinstance(status, Mapping) else None
    counts = counted if isinstance(counted, Mapping) else {}

    def installed(key: str) -> bool:
        return bool(counts.get(key)) or any(key in node for node in nodes)

    refused: list[str] = []
    cancelled: list[str] = []
    for name, was in sorted(before.packages.items()):
        now = spec.packages.get(name)
        if was.uninstall.enabled and now is None:
            if installed(was.key):
                refused.append(
                    f"spec.packages.{name}: has uninstall.enabled=true and is still installed "
                    f"on some nodes; set uninstall.apply=true and wait for the uninstall to "
                    "finish before removing it from the spec"
                )
            continue
        if now is None:
            continue
        if was.uninstall.enabled and _downgrade(was.version, now.version):
            if not was.uninstall.apply:
                refused.append(
                    f"spec.packages.{name}.version: downgrade from {was.version} to "
                    f"{now.version} not allowed: set uninstall.apply=true first, wait for the "
                    "uninstall to finish, then change the version"
                )
            elif installed(was.key):
                refused.append(
                    f"spec.packages.{name}.version: downgrade from {was.version} to "
                    f"{now.version} not allowed: the uninstall has not finished on every node "
                    "yet; wait for it, then change the version"
                )
        if was.uninstalling and not now.uninstalling:
            cancelled.append(
                f"spec.packages.{name}.uninstall.apply: uninstall cancelled; nodes where it "
                "already finished will install the package again"
            )
    return refused, cancelled


def _downgrade(old: str, new: str) -> bool:
    try:
        return version_change(old, new) is VersionChange.DOWNGRADE
    except VersionError:
        return False


def review_policy(
    operation: str, new: Json | None, old: Json | None, referenced_by: Sequence[str]
) -> Verdict:
    """Admit or refuse a DeploymentPolicy create, update or delete; `referenced_by` are the
    Skyhooks naming it (for a delete)."""
    if operation == "DELETE":
        if not referenced_by:
            return ALLOWED
        name = ((old or {}).get("metadata") or {}).get("name", "")
        return Verdict(
            False,
            f'cannot delete DeploymentPolicy "{name}": still referenced by '
            f"{len(referenced_by)} Skyhook(s): {', '.join(sorted(referenced_by))}",
        )
    if new is None or _spec_unchanged(operation, new, old):
        return ALLOWED
    raw = new.get("spec")
    try:
        decode_policy((new.get("metadata") or {}).get("name", ""), raw if raw is not None else {})
    except PolicyError as error:
        return Verdict.refuse(error.messages)
    return ALLOWED


def default_policy(new: Json | None) -> dict[str, Any] | None:
    """The policy's spec with upstream's strategy defaults filled into every strategy it
    sets (a value given is kept, nothing else is touched), or None when nothing is missing."""
    spec = (new or {}).get("spec")
    if not isinstance(spec, Mapping):
        return None
    defaulted = copy.deepcopy(dict(spec))
    strategies: list[object] = []
    if isinstance(defaulted.get("default"), dict):
        strategies.append(defaulted["default"].get("strategy"))
    if isinstance(defaulted.get("compartments"), list):
        strategies += [c.get("strategy") for c in defaulted["compartments"] if isinstance(c, dict)]
    filled = False
    for strategy in strategies:
        if not isinstance(strategy, dict):
            continue
        for kind, defaults in STRATEGY_DEFAULTS.items():
            body = strategy.get(kind)
            if isinstance(body, dict):
                missing = {k: v for k, v in defaults.items() if k not in body}
                body.update(missing)
                filled = filled or bool(missing)
    return defaulted if filled else None
