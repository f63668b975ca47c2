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

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import StrictBool, StrictInt, ValidationError, field_validator, model_validator

from skyhook_planner.model.alerts import AlertGate, GateWire
from skyhook_planner.model.decoding import (
    Closed,
    Duration,
    FalsyIsUnset,
    Loc,
    NonEmpty,
    SelectorWire,
    Wire,
    check,
    fail,
    in_range,
    messages,
)
from skyhook_planner.model.health import HealthGate, HealthGateWire
from skyhook_planner.model.spec import Budget
from skyhook_planner.model.vocabulary import LabelSelector, label_key_problem
from skyhook_planner.model.windows import MaintenanceWindow, WindowWire
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
class Topology:
    """Ours: nodes grouped into domains by the value of a label (`key`; a node without it is
    in the domain ""). At most `max_per_domain` of a domain's nodes in progress at once, or,
    with `one_domain_at_a_time`, nodes of one domain only."""

    key: str
    max_per_domain: int | None = None
    one_domain_at_a_time: bool = False


@dataclass(frozen=True)
class Policy:
    name: str
    default: Compartment
    compartments: tuple[Compartment, ...] = ()
    reset_batch_state: bool | None = None  # resetBatchStateOnCompletion; None: not set
    # Our additions, for every Skyhook using the policy that does not set its own.
    maintenance_window: MaintenanceWindow | None = None
    alert_gate: AlertGate | None = None
    soak_time_s: float | None = None  # seconds between a compartment's batch starts
    # Ours: limits over every Skyhook that names the policy together (rules/sharing.py).
    shared_budget: Budget | None = None
    topology: Topology | None = None
    reboot_deadline_s: float | None = None  # seconds a node may take to come back from a reboot
    health_gate: HealthGate | None = None  # what a node must show after its interrupt

    @property
    def all(self) -> tuple[Compartment, ...]:
        """The named compartments, then `__default__`."""
        return (*self.compartments, self.default)


# --- the policy as written ---------------------------------------------------------------------


def decode_policy(name: str, raw: Mapping[str, Any]) -> Policy:
    """Decode a DeploymentPolicy's `spec` with defaults applied; raises PolicyError listing
    every problem with its field path."""
    try:
        written = _PolicyWire.model_validate(raw)
    except ValidationError as error:
        raise PolicyError(messages(error, "spec")) from None
    return written.decoded(name)


class _BudgetWire(Wire):
    percent: Annotated[StrictInt, in_range(1, 100)] | None = None
    count: Annotated[StrictInt, in_range(1)] | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> _BudgetWire:
        if (self.percent is None) == (self.count is None):
            raise ValueError("exactly one of percent or count must be set")
        return self

    def decoded(self) -> Budget:
        return Budget(self.percent, self.count)


class _FixedWire(Closed):
    unknown_field = "unknown field for a fixed strategy"
    initial_batch: Annotated[StrictInt, in_range(1)] = 1
    batch_threshold: Annotated[StrictInt, in_range(1, 100)] = 100
    failure_threshold: Annotated[StrictInt, in_range(1)] | None = None
    safety_limit: Annotated[StrictInt, in_range(1, 100)] = 50


class _LinearWire(_FixedWire):
    unknown_field = "unknown field for a linear strategy"
    delta: Annotated[StrictInt, in_range(1)] = 1


class _ExponentialWire(_FixedWire):
    unknown_field = "unknown field for an exponential strategy"
    growth_factor: Annotated[StrictInt, in_range(2)] = 2


class _StrategyWire(Wire):
    fixed: _FixedWire | None = None
    linear: _LinearWire | None = None
    exponential: _ExponentialWire | None = None

    @property
    def given(self) -> list[tuple[str, _FixedWire]]:
        bodies = ((FIXED, self.fixed), (LINEAR, self.linear), (EXPONENTIAL, self.exponential))
        return [(kind, body) for kind, body in bodies if body is not None]

    @model_validator(mode="after")
    def _exactly_one(self) -> _StrategyWire:
        if len(self.given) != 1:
            raise ValueError("exactly one of fixed, linear, or exponential must be set")
        return self

    def decoded(self) -> Strategy:
        kind, body = self.given[0]
        return Strategy(kind, **body.model_dump())


def _reserved(name: str) -> str | None:
    return f'"{name}" is reserved' if name == keys.DEFAULT_COMPARTMENT else None


class _CompartmentWire(Wire):
    name: Annotated[NonEmpty, check(_reserved)]
    selector: SelectorWire
    budget: _BudgetWire
    # None: the budget's ceiling, not the default compartment's strategy.
    strategy: _StrategyWire | None = None

    def decoded(self) -> Compartment:
        return Compartment(
            self.name,
            self.selector.decoded(),
            self.budget.decoded(),
            self.strategy.decoded() if self.strategy else None,
        )


class _DefaultWire(Wire):
    budget: _BudgetWire
    strategy: _StrategyWire


class _TopologyWire(Closed):
    unknown_field = "unknown field for a topology"
    key: Annotated[NonEmpty, check(label_key_problem)]
    max_per_domain: Annotated[StrictInt, in_range(1)] | None = None
    one_domain_at_a_time: StrictBool = False

    @model_validator(mode="after")
    def _exactly_one(self) -> _TopologyWire:
        if (self.max_per_domain is None) == (not self.one_domain_at_a_time):
            raise ValueError("exactly one of maxPerDomain or oneDomainAtATime: true must be set")
        return self

    def decoded(self) -> Topology:
        return Topology(self.key, self.max_per_domain, self.one_domain_at_a_time)


class _PolicyWire(Wire):
    default: _DefaultWire
    compartments: Annotated[tuple[_CompartmentWire, ...], FalsyIsUnset] = ()
    reset_batch_state_on_completion: StrictBool | None = None
    maintenance_window: WindowWire | None = None
    alert_gate: GateWire | None = None
    soak_time: Duration | None = None
    reboot_deadline: Duration | None = None
    health_gate: HealthGateWire | None = None
    shared_budget: _BudgetWire | None = None
    topology: _TopologyWire | None = None

    @field_validator("compartments")
    @classmethod
    def _distinct(cls, compartments: tuple[_CompartmentWire, ...]) -> tuple[_CompartmentWire, ...]:
        if problems := list(_clashes(compartments)):
            fail(*problems)
        return compartments

    def decoded(self, name: str) -> Policy:
        default = Compartment(
            keys.DEFAULT_COMPARTMENT,
            LabelSelector(),
            self.default.budget.decoded(),
            self.default.strategy.decoded(),
        )
        return Policy(
            name,
            default,
            tuple(c.decoded() for c in self.compartments),
            self.reset_batch_state_on_completion,
            self.maintenance_window.decoded() if self.maintenance_window else None,
            self.alert_gate.decoded() if self.alert_gate else None,
            self.soak_time,
            self.shared_budget.decoded() if self.shared_budget else None,
            self.topology.decoded() if self.topology else None,
            reboot_deadline_s=self.reboot_deadline,
            health_gate=self.health_gate.decoded() if self.health_gate else None,
        )


def _clashes(compartments: tuple[_CompartmentWire, ...]) -> Iterator[tuple[Loc, str]]:
    for index, compartment in enumerate(compartments):
        earlier = compartments[:index]
        if any(c.name == compartment.name for c in earlier):
            yield (index, "name"), f'"{compartment.name}" is not unique'
        # Two compartments with the same selector could never both get a node.
        if twin := next((c for c in earlier if c.selector == compartment.selector), None):
            yield (index, "selector"), f'identical to the selector of compartment "{twin.name}"'
