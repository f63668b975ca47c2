"""Kubernetes values the planner shares: taints, tolerations, label selectors, node conditions
and pod phases. Plain values with Kubernetes semantics and nothing else; the stage, state and
status words are `skyhook_schemas.nodestate`'s, durations and image tags are in
`skyhook_schemas` too.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

JsonDict = Mapping[str, Any]

# Pod phases after which a pod's containers never run again.
FINISHED_PHASES = frozenset({"Succeeded", "Failed"})

TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


# --- taints and tolerations -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Taint:
    """A node taint. Two taints are "the same taint" when key and effect match."""

    key: str
    effect: str
    value: str = ""

    def same_as(self, other: Taint) -> bool:
        return self.key == other.key and self.effect == other.effect

    def to_api(self) -> dict[str, str]:
        body = {"key": self.key, "effect": self.effect}
        if self.value:
            body["value"] = self.value
        return body

    def __str__(self) -> str:
        head = f"{self.key}={self.value}" if self.value else self.key
        return f"{head}:{self.effect}"

    @classmethod
    def from_api(cls, body: JsonDict) -> Taint:
        return cls(
            key=body.get("key", ""), effect=body.get("effect", ""), value=body.get("value") or ""
        )

    @classmethod
    def parse(cls, text: str) -> Taint:
        """`key[=value]:Effect`, as kubectl writes a taint; raises ValueError naming what is
        wrong. kubectl's trailing `-` (remove the taint) names no taint and is refused."""
        text = text.strip()
        if text.endswith("-"):
            raise ValueError(
                f"{text!r} ends with '-', which removes a taint rather than naming one"
            )
        head, sep, effect = text.rpartition(":")
        if not sep or not head or effect not in TAINT_EFFECTS:
            raise ValueError(
                f"{text!r} is not a taint: expected key[=value]:Effect with Effect one of "
                f"{', '.join(TAINT_EFFECTS)}"
            )
        key, _, value = head.partition("=")
        return cls(key=key, effect=effect, value=value)


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""
    toleration_seconds: int | None = None

    def tolerates(self, taint: Taint) -> bool:
        """Kubernetes matching: empty effect matches all effects; empty key with Exists matches
        every taint."""
        if self.effect and self.effect != taint.effect:
            return False
        if not self.key:
            return self.operator == "Exists"
        if self.key != taint.key:
            return False
        return self.operator == "Exists" or self.value == taint.value

    def to_api(self) -> dict[str, Any]:
        body: dict[str, Any] = {}
        if self.key:
            body["key"] = self.key
        body["operator"] = self.operator
        if self.value:
            body["value"] = self.value
        if self.effect:
            body["effect"] = self.effect
        if self.toleration_seconds is not None:
            body["tolerationSeconds"] = self.toleration_seconds
        return body


# --- label selectors ----------------------------------------------------------------------------

SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")

# Label syntax as the apiserver checks it: `[prefix/]name`, a DNS subdomain prefix of at most
# 253 characters, a name and any value of at most 63 characters (a value may be empty).
_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def is_object_name(name: str) -> bool:
    """Whether `name` is a valid name for most Kubernetes objects (a DNS subdomain)."""
    return len(name) <= 253 and bool(_DNS_SUBDOMAIN.fullmatch(name))


def label_key_problem(key: str) -> str | None:
    """Why `key` is not a valid label key, or None."""
    prefix, slash, name = key.rpartition("/")
    if slash and not (0 < len(prefix) <= 253 and _DNS_SUBDOMAIN.match(prefix)):
        return f"label key {key!r}: prefix must be a DNS subdomain of at most 253 characters"
    if not (len(name) <= 63 and _LABEL_NAME.match(name)):
        return (
            f"label key {key!r}: name must be at most 63 characters of letters, digits, '-', "
            "'_' or '.', starting and ending with a letter or digit"
        )
    return None


def label_value_problem(value: str) -> str | None:
    """Why `value` is not a valid label value, or None."""
    if value == "" or (len(value) <= 63 and _LABEL_NAME.match(value)):
        return None
    return (
        f"label value {value!r}: must be empty or at most 63 characters of letters, digits, "
        "'-', '_' or '.', starting and ending with a letter or digit"
    )


@dataclass(frozen=True)
class SelectorRequirement:
    key: str
    operator: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.operator == "In":
            return labels.get(self.key) in self.values
        if self.operator == "NotIn":
            return self.key not in labels or labels[self.key] not in self.values
        if self.operator == "Exists":
            return self.key in labels
        return self.key not in labels  # DoesNotExist


@dataclass(frozen=True)
class LabelSelector:
    """A Kubernetes label selector; the empty selector matches everything."""

    match_labels: Mapping[str, str] = field(default_factory=dict)
    match_expressions: tuple[SelectorRequirement, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.match_labels and not self.match_expressions

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in self.match_labels.items()) and all(
            r.matches(labels) for r in self.match_expressions
        )


# --- node conditions ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NodeCondition:
    type: str
    status: str
    reason: str = ""
    message: str = ""
