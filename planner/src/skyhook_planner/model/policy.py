"""DeploymentPolicy as the planner reads it: the decoded policy and each compartment's batch state.

A policy splits a Skyhook's nodes into compartments, each rolled out batch by batch.

Decoding (`decode_policy`) checks every field and names it in its error
(`spec.compartments[1].strategy: exactly one of fixed, linear, or exponential must be set`), and
applies upstream's defaults on read, since upstream only fills them in an admission webhook:
initialBatch 1, batchThreshold 100, safetyLimit 50, delta 1, growthFactor 2, no failureThreshold
(never stop). A compartment without a strategy does not inherit the default one: its batches are
its budget's ceiling.

Assignment to compartments and the batch rules are in `rules/batches.py`; the batch state
they keep in the Skyhook's status is `BatchState` here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from skyhook_planner.model.alerts import AlertGate, decode_gate
from skyhook_planner.model.spec import Budget, _Errors, _optional_int, decode_selector
from skyhook_planner.model.vocabulary import LabelSelector
from skyhook_planner.model.windows import MaintenanceWindow, decode_window
from skyhook_schemas import keys

FIXED, LINEAR, EXPONENTIAL = "fixed", "linear", "exponential"
STRATEGY_KINDS = (FIXED, LINEAR, EXPONENTIAL)
# Metric and log name of a compartment without a strategy.
NO_STRATEGY = "unknown"


class PolicyError(ValueError):
    def __init__(self, messages: Sequence[str]) -> None:
        super().__init__("; ".join(messages))
        self.messages = list(messages)


@dataclass(frozen=True)
class Strategy:
    kind: str
    initial_batch: int = 1
    batch_threshold: int = 100
    failure_threshold: int | None = None
    safety_limit: int = 50
    delta: int = 1
    growth_factor: int = 2


@dataclass(frozen=True)
class Compartment:
    name: str
    selector: LabelSelector
    budget: Budget
    strategy: Strategy | None = None

    @property
    def kind(self) -> str:
        return self.strategy.kind if self.strategy else NO_STRATEGY


@dataclass(frozen=True)
class Policy:
    name: str
    default: Compartment
    compartments: tuple[Compartment, ...] = ()
    reset_batch_state: bool | None = None  # resetBatchStateOnCompletion; None: not set
    # Our additions, for every Skyhook using the policy that does not set its own.
    maintenance_window: MaintenanceWindow | None = None
    alert_gate: AlertGate | None = None

    @property
    def all(self) -> tuple[Compartment, ...]:
        """The named compartments, then `__default__`."""
        return (*self.compartments, self.default)


# --- decoding ---------------------------------------------------------------------------------


def _decode_budget(raw: object, path: str, errors: _Errors) -> Budget:
    if not isinstance(raw, Mapping):
        errors.add(path, "exactly one of percent or count must be set")
        return Budget(count=1)
    percent = _optional_int(raw.get("percent"), f"{path}.percent", errors, 1, 100)
    count = _optional_int(raw.get("count"), f"{path}.count", errors, 1, None)
    if (raw.get("percent") is None) == (raw.get("count") is None):
        errors.add(path, "exactly one of percent or count must be set")
    return Budget(percent=percent, count=None if percent is not None else count)


_RANGES: dict[str, tuple[str, int, int | None, frozenset[str]]] = {
    # json name: (field, minimum, maximum, kinds it applies to)
    "initialBatch": ("initial_batch", 1, None, frozenset(STRATEGY_KINDS)),
    "batchThreshold": ("batch_threshold", 1, 100, frozenset(STRATEGY_KINDS)),
    "failureThreshold": ("failure_threshold", 1, None, frozenset(STRATEGY_KINDS)),
    "safetyLimit": ("safety_limit", 1, 100, frozenset(STRATEGY_KINDS)),
    "delta": ("delta", 1, None, frozenset({LINEAR})),
    "growthFactor": ("growth_factor", 2, None, frozenset({EXPONENTIAL})),
}


def _decode_strategy(raw: object, path: str, errors: _Errors) -> Strategy | None:
    present = [k for k in STRATEGY_KINDS if isinstance(raw, Mapping) and raw.get(k) is not None]
    if len(present) != 1:
        errors.add(path, "exactly one of fixed, linear, or exponential must be set")
        return None
    assert isinstance(raw, Mapping)
    kind = present[0]
    body = raw[kind]
    if not isinstance(body, Mapping):
        errors.add(f"{path}.{kind}", "must be an object")
        return None
    values: dict[str, Any] = {}
    for json_name, value in body.items():
        known = _RANGES.get(json_name)
        if known is None or kind not in known[3]:
            errors.add(f"{path}.{kind}.{json_name}", f"unknown field for a {kind} strategy")
            continue
        field, minimum, maximum, _ = known
        decoded = _optional_int(value, f"{path}.{kind}.{json_name}", errors, minimum, maximum)
        if decoded is not None:
            values[field] = decoded
    return Strategy(kind, **values)


def decode_policy(name: str, raw: Mapping[str, Any]) -> Policy:
    """Decode a DeploymentPolicy's `spec` with defaults applied; raises PolicyError listing
    every problem with its field path."""
    errors = _Errors()
    if not isinstance(raw, Mapping):
        raise PolicyError(["spec: must be an object"])
    default = raw.get("default")
    if not isinstance(default, Mapping):
        errors.add("spec.default", "required: an object with budget and strategy")
        default = {}
    default_compartment = Compartment(
        keys.DEFAULT_COMPARTMENT,
        LabelSelector(),
        _decode_budget(default.get("budget"), "spec.default.budget", errors),
        _decode_strategy(default.get("strategy"), "spec.default.strategy", errors),
    )
    compartments: list[Compartment] = []
    raw_compartments = raw.get("compartments") or ()
    if not isinstance(raw_compartments, list | tuple):
        errors.add("spec.compartments", "must be a list of compartments")
        raw_compartments = ()
    seen: set[str] = set()
    # Two compartments with the same selector could never both get a node: refuse the second.
    selectors: dict[str, str] = {}
    for index, body in enumerate(raw_compartments):
        path = f"spec.compartments[{index}]"
        if not isinstance(body, Mapping):
            errors.add(path, "must be an object with name, selector and budget")
            continue
        compartment_name = body.get("name")
        if not isinstance(compartment_name, str) or not compartment_name:
            errors.add(f"{path}.name", "required: a non-empty string")
            compartment_name = ""
        elif compartment_name == keys.DEFAULT_COMPARTMENT:
            errors.add(f"{path}.name", f'"{keys.DEFAULT_COMPARTMENT}" is reserved')
        elif compartment_name in seen:
            errors.add(f"{path}.name", f'"{compartment_name}" is not unique')
        seen.add(compartment_name)
        if body.get("selector") is None:
            errors.add(f"{path}.selector", "required: a label selector")
        elif (twin := selectors.get(_frozen(body["selector"]))) is not None:
            errors.add(f"{path}.selector", f'identical to the selector of compartment "{twin}"')
        else:
            selectors[_frozen(body["selector"])] = compartment_name
        strategy = None
        if body.get("strategy") is not None:
            strategy = _decode_strategy(body["strategy"], f"{path}.strategy", errors)
        compartments.append(
            Compartment(
                compartment_name,
                decode_selector(body.get("selector"), f"{path}.selector", errors),
                _decode_budget(body.get("budget"), f"{path}.budget", errors),
                strategy,
            )
        )
    reset = raw.get("resetBatchStateOnCompletion")
    if reset is not None and not isinstance(reset, bool):
        errors.add("spec.resetBatchStateOnCompletion", f"{reset!r} is not a boolean")
        reset = None
    window = decode_window(raw.get("maintenanceWindow"), "spec.maintenanceWindow", errors)
    gate = decode_gate(raw.get("alertGate"), "spec.alertGate", errors)
    if errors.messages:
        raise PolicyError(errors.messages)
    return Policy(name, default_compartment, tuple(compartments), reset, window, gate)


def _frozen(selector: object) -> str:
    """A selector as it was written, in a form comparable for equality (key order ignored)."""
    return json.dumps(selector, sort_keys=True, default=str)


# --- batch state ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class BatchState:
    """One compartment's progress, kept in status.compartmentStatuses.<name>.batchState with
    upstream's keys (zero and false values left out)."""

    current_batch: int = 1
    consecutive_failures: int = 0
    completed_nodes: int = 0
    failed_nodes: int = 0
    should_stop: bool = False
    last_batch_size: int = 0
    last_batch_failed: bool = False

    @classmethod
    def from_json(cls, raw: object) -> BatchState:
        """Read what a pass wrote; a missing or malformed field takes its initial value."""
        if not isinstance(raw, Mapping):
            return cls()
        values: dict[str, Any] = {}
        for f in fields(cls):
            value = raw.get(_camel(f.name))
            wanted = bool if f.type in {"bool", bool} else int
            if isinstance(value, wanted) and (wanted is bool or not isinstance(value, bool)):
                values[f.name] = value if wanted is bool or value >= 0 else 0
        return cls(**values)

    def to_json(self) -> dict[str, Any]:
        return {
            _camel(f.name): getattr(self, f.name) for f in fields(self) if getattr(self, f.name)
        }

    def progress(self, nodes: int) -> int:
        """Percent of the compartment's nodes processed (complete or failed)."""
        return (self.completed_nodes + self.failed_nodes) * 100 // nodes if nodes else 0


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)
