"""DeploymentPolicy rules: which compartment each node belongs to, how big each batch is, and how
a finished batch is judged. The policy itself and its decoding are in `model/policy.py`.

Assignment (`assign`), recomputed every pass, so nothing about it is stored:
1. The Skyhook's nodes are taken in the planner's node order: oldest first (creation time),
   then name.
2. A node goes to the compartment whose selector matches it; when none does, to the synthetic
   `__default__` compartment, which has the policy's default budget and strategy.
3. When several match, the safest wins: strategy fixed, then linear, then exponential, then
   none; then the smaller capacity (the budget's ceiling over the number of the Skyhook's nodes
   the selector matches, at least 1); then the name, ascending. No label counting is involved,
   so the result depends only on the nodes' labels, never on the order they were listed in.

Batches (`batch_size`, `evaluate`): each compartment keeps a `BatchState` in the Skyhook's
status. When a batch has no node left in progress, `evaluate` compares the complete and failed
counts with the checkpoint of the last evaluation: the difference is the batch's outcome. A
batch fails when its success percentage is below batchThreshold; failures shrink the next batch
while progress (nodes processed over the compartment's nodes) is below safetyLimit, and
failureThreshold consecutive failures there stop the compartment (`should_stop`). Successes grow
it: fixed keeps initialBatch, linear adds delta, exponential multiplies by growthFactor. A batch
never exceeds the nodes remaining and is at least 1 while any remain.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol, TypeVar

from skyhook_planner.model.policy import (
    EXPONENTIAL,
    FIXED,
    LINEAR,
    Compartment,
    Policy,
    Strategy,
)
from skyhook_planner.model.spec import Budget
from skyhook_planner.rules import budget as budgets
from skyhook_schemas.status import BatchState

_SAFETY = {FIXED: 0, LINEAR: 1, EXPONENTIAL: 2}


# --- assignment -------------------------------------------------------------------------------


def ceiling(budget: Budget, nodes: int) -> int:
    """A compartment's ceiling: a count as given, a percentage of its nodes (at least 1)."""
    return budgets.reported_ceiling(budget, nodes)


class Labelled(Protocol):
    @property
    def labels(self) -> Mapping[str, str]: ...


N = TypeVar("N", bound=Labelled)


def assign(policy: Policy, nodes: Sequence[N], order: Callable[[N], Any]) -> dict[str, list[N]]:
    """Each compartment's nodes (every compartment present, `__default__` last) sorted by
    `order` (the planner's: oldest first, then name). The rules are in the module docstring."""
    ordered = sorted(nodes, key=order)
    selected = {
        c.name: sum(1 for n in ordered if c.selector.matches(n.labels)) for c in policy.compartments
    }

    def rank(c: Compartment) -> tuple[int, int, str]:
        safety = _SAFETY[c.strategy.kind] if c.strategy else len(_SAFETY)
        return (safety, ceiling(c.budget, max(1, selected[c.name])), c.name)

    result: dict[str, list[N]] = {c.name: [] for c in policy.all}
    for node in ordered:
        matching = [c for c in policy.compartments if c.selector.matches(node.labels)]
        chosen = min(matching, key=rank) if matching else policy.default
        result[chosen.name].append(node)
    return result


# --- batches ----------------------------------------------------------------------------------


def _failed_early(strategy: Strategy, state: BatchState, nodes: int) -> bool:
    return state.last_batch_failed and state.progress(nodes) < strategy.safety_limit


def batch_size(compartment: Compartment, state: BatchState, nodes: int) -> int:
    """The size of the compartment's next batch over `nodes` nodes."""
    strategy = compartment.strategy
    if strategy is None:
        return ceiling(compartment.budget, nodes)
    remaining = nodes - state.completed_nodes - state.failed_nodes

    def clamp(size: int) -> int:
        return max(1, min(size, remaining))

    if strategy.kind == FIXED:
        return clamp(strategy.initial_batch)
    if nodes == 0:
        return 0
    last = state.last_batch_size
    if last == 0:
        return clamp(strategy.initial_batch)
    if strategy.kind == LINEAR:
        if _failed_early(strategy, state, nodes):
            return clamp(max(1, last - strategy.delta))
        return clamp(last + strategy.delta)
    if _failed_early(strategy, state, nodes):
        return clamp(max(1, last // strategy.growth_factor))
    return clamp(min(last * strategy.growth_factor, nodes))


def evaluate(
    strategy: Strategy, state: BatchState, *, complete: int, failed: int, nodes: int
) -> BatchState:
    """The state after a batch ended (no node of the compartment in progress), given how many
    of its `nodes` are complete and how many failed now. Counts that went down (nodes moved to
    another compartment, a failed node recovered) or did not change only move the checkpoint."""
    if state.current_batch == 0:
        return replace(state, current_batch=1)
    succeeded = complete - state.completed_nodes
    newly_failed = failed - state.failed_nodes
    checkpoint = replace(state, completed_nodes=complete, failed_nodes=failed)
    if succeeded < 0 or newly_failed < 0 or succeeded == newly_failed == 0:
        return checkpoint
    size = succeeded + newly_failed
    batch_failed = succeeded * 100 // size < strategy.batch_threshold
    consecutive = state.consecutive_failures + 1 if batch_failed else 0
    should_stop = state.should_stop or (
        batch_failed
        and strategy.failure_threshold is not None
        and checkpoint.progress(nodes) < strategy.safety_limit
        and consecutive >= strategy.failure_threshold
    )
    return replace(
        checkpoint,
        current_batch=state.current_batch + 1,
        consecutive_failures=consecutive,
        should_stop=should_stop,
        last_batch_size=size,
        last_batch_failed=batch_failed,
    )


def reset_enabled(skyhook_option: bool | None, policy: Policy) -> bool:
    """Do completion and version changes reset batch state? The Skyhook's
    deploymentPolicyOptions.resetBatchStateOnCompletion, else the policy's, else yes (as
    upstream documents it)."""
    if skyhook_option is not None:
        return skyhook_option
    return policy.reset_batch_state is not False


# --- one pass over one compartment --------------------------------------------------------------


@dataclass(frozen=True)
class Found:
    """A compartment's nodes as a pass finds them."""

    complete: int = 0
    failed: int = 0  # incomplete, with a package erroring (retries included)
    active: int = 0  # in progress and not failed: the batch still running
    occupied: int = 0  # holding a slot of the ceiling: the active ones and the failed ones


def next_batch(
    compartment: Compartment,
    state: BatchState | None,
    nodes: int,
    found: Found,
    *,
    may_evaluate: bool,
    may_start: bool,
) -> tuple[BatchState | None, int]:
    """(the compartment's batch state after this pass, how many nodes may start now).

    A batch ends when none of its nodes is active; it is then evaluated (unless
    `may_evaluate` is false: the Skyhook is complete) and the next one starts, unless the
    compartment stopped or `may_start` is false (paused, disabled). Its size is the strategy's,
    and nodes in progress, failed ones still retrying included, never exceed the ceiling."""
    if found.active:
        return state, 0
    if compartment.strategy is not None and state is not None and may_evaluate:
        state = evaluate(
            compartment.strategy, state, complete=found.complete, failed=found.failed, nodes=nodes
        )
    if not may_start or (state is not None and state.should_stop):
        return state, 0
    size = batch_size(compartment, state or BatchState(), nodes)
    room = ceiling(compartment.budget, nodes) - found.occupied
    return state, max(0, min(size, room))
