"""The health gate as written (ours, docs/fleet-safety.md#health-gates): the signals that say a
node is healthy, and how long a node may take to show them after its interrupt.

    healthGate:
      nodeConditions: [{type: GPUHealthy, status: "True"}]   # every one must hold
      nodeLabels: {example.com/gpu-checks: passed}            # every one must hold
      checkPod: {image: registry/gpu-check:1.2, command: [/check], args: [--quick]}
      timeout: 15m                                            # default 10m

A Skyhook sets it, or its DeploymentPolicy for every Skyhook using it that sets none. What the
gate decides is rules/health.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated

from pydantic import BeforeValidator, Field, StrictStr, model_validator

from skyhook_planner.model.decoding import Closed, Duration, PullableImage, check, one_of
from skyhook_planner.model.vocabulary import label_key_problem, label_value_problem

DEFAULT_TIMEOUT_S = 600.0
CONDITION_STATUSES = ("True", "False", "Unknown")


@dataclass(frozen=True)
class ConditionSignal:
    """The node condition `type` must have `status`."""

    type: str
    status: str = "True"


@dataclass(frozen=True)
class CheckPod:
    """A pod run on the node once it waits at the gate: healthy once it succeeds."""

    image: str
    command: tuple[str, ...] = ()
    args: tuple[str, ...] = ()


@dataclass(frozen=True)
class HealthGate:
    conditions: tuple[ConditionSignal, ...] = ()
    labels: tuple[tuple[str, str], ...] = ()  # (key, value) pairs, sorted
    timeout_s: float = DEFAULT_TIMEOUT_S
    check_pod: CheckPod | None = None

    def unmet(self, labels: Mapping[str, str], conditions: Mapping[str, str]) -> tuple[str, ...]:
        """What the node shows that is not healthy, one phrase per signal; empty when healthy.
        `conditions` maps each node condition type to its status."""
        found = []
        for signal in self.conditions:
            status = conditions.get(signal.type)
            if status != signal.status:
                shown = "missing" if status is None else status
                found.append(f"condition {signal.type} is {shown} (wants {signal.status})")
        for key, value in self.labels:
            shown_label = labels.get(key)
            if shown_label != value:
                shown = "missing" if shown_label is None else repr(shown_label)
                found.append(f"label {key} is {shown} (wants {value!r})")
        return tuple(found)


class _ConditionWire(Closed):
    checked_when_missing = ("type",)
    type: Annotated[StrictStr, check(label_key_problem)]
    status: Annotated[StrictStr, one_of(CONDITION_STATUSES)] = "True"


LabelKey = Annotated[str, check(label_key_problem)]
LabelValue = Annotated[str, BeforeValidator(str), check(label_value_problem)]


def _positive(seconds: float) -> str | None:
    return None if seconds > 0 else "must be more than 0"


class _CheckPodWire(Closed):
    checked_when_missing = ("image",)
    image: Annotated[PullableImage, check(lambda image: None if image else "required")]
    command: tuple[StrictStr, ...] = ()
    args: tuple[StrictStr, ...] = ()


class HealthGateWire(Closed):
    """`healthGate` as written, in a Skyhook or a DeploymentPolicy."""

    node_conditions: tuple[_ConditionWire, ...] = ()
    node_labels: dict[LabelKey, LabelValue] = Field(default_factory=dict)
    check_pod: _CheckPodWire | None = None
    timeout: Annotated[Duration, check(_positive)] = DEFAULT_TIMEOUT_S

    @model_validator(mode="after")
    def _some_signal(self) -> HealthGateWire:
        if not (self.node_conditions or self.node_labels or self.check_pod):
            raise ValueError(
                "set nodeConditions, nodeLabels or checkPod: a gate needs a signal to wait for"
            )
        return self

    def decoded(self) -> HealthGate:
        return HealthGate(
            tuple(ConditionSignal(c.type, c.status) for c in self.node_conditions),
            tuple(sorted(self.node_labels.items())),
            self.timeout,
            CheckPod(self.check_pod.image, self.check_pod.command, self.check_pod.args)
            if self.check_pod
            else None,
        )
