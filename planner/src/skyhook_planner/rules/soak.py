"""Soak time: a minimum time between batch starts, so that a bad change shows on the nodes it
reached before it spreads (docs/fleet-safety.md). Pure: decided from the spec, the start times
the Skyhook's status records and the pass's clock.

`soakTime` is set on a Skyhook, or on its DeploymentPolicy for every Skyhook using it that does
not set its own. With a policy, each compartment's next batch starts no sooner than `soakTime`
after its last batch started; the nodes of one batch still start together. Without a policy the
budget has no batches, so each node start counts as one: a node starts no sooner than
`soakTime` after the last one did, whatever room the budget has.

The start times are kept in the Skyhook's status (`batchStarts`, per compartment; `__default__`
without a policy), written in the same status patch that records the nodes picked, so an
operator restart resumes the soak where it was. The soak is one more capacity blocker: asked
after the batches or the budget have let a node through, it answers `soak` with the time the
wait ends, and the pass asks for a timer then.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from skyhook_planner.model import status as statuses
from skyhook_planner.model.policy import Policy
from skyhook_planner.model.spec import SkyhookSpec
from skyhook_planner.model.times import describe, exact_stamp, parse_stamp, stamp
from skyhook_planner.model.waiting import SOAK, Reason
from skyhook_schemas import keys

CONDITION_SOAK = f"{keys.GROUP}/Soaking"
# The group of a Skyhook without a DeploymentPolicy, whose every node start is a batch.
NO_POLICY_GROUP = keys.DEFAULT_COMPARTMENT
# The hold word of a soak's reasons: the held-nodes metrics count them under it.
SOAKING = "Soaking"


def soak_time(spec: SkyhookSpec, policy: Policy | None) -> float | None:
    """The Skyhook's own soakTime, else its policy's; None when there is none (or it is 0)."""
    seconds = spec.soak_time_s
    if seconds is None and policy is not None:
        seconds = policy.soak_time_s
    return seconds or None


@dataclass
class Soak:
    """The soak as a capacity blocker: asked, in node order, for the nodes the batches or the
    budget let through; it lets a group (a compartment, `__default__` without a policy) start
    once its soak since the last start is over, and then (with a policy) the rest of that batch
    in the same pass."""

    seconds: float
    now: datetime
    recorded: Mapping[str, str]  # status.batchStarts
    group_of: Callable[[str], str]  # node -> compartment
    per_node: bool  # no policy: every node start is a batch of one
    started: set[str] = field(default_factory=set)  # groups that start this pass
    held: dict[str, datetime] = field(default_factory=dict)  # group -> when its soak ends

    def check(self, node: Any) -> Reason | None:
        group = self.group_of(node.name)
        if group in self.started:
            if not self.per_node:
                return None  # the same batch
            until = self.now + timedelta(seconds=self.seconds)
        else:
            last = parse_stamp(self.recorded.get(group))
            until = last + timedelta(seconds=self.seconds) if last is not None else self.now
            if until <= self.now:
                self.started.add(group)
                return None
        self.held[group] = until
        return _reason(group, until, self.seconds, self.per_node)

    def starts(self) -> dict[str, str]:
        """status.batchStarts after this pass."""
        return {**self.recorded, **{group: exact_stamp(self.now) for group in self.started}}

    def wake_in(self) -> float | None:
        """Seconds until the first held group's soak ends; None when nothing is held."""
        if not self.held:
            return None
        return max(0.0, (min(self.held.values()) - self.now).total_seconds())

    def condition(self, generation: int) -> dict[str, Any]:
        if not self.held:
            return statuses.condition(
                CONDITION_SOAK,
                False,
                "NotSoaking",
                f"No node waits for the soak time ({describe(self.seconds)}).",
                self.now,
                generation=generation,
            )
        waits = "; ".join(
            _what(group, self.per_node) + f" starts at {stamp(until)}"
            for group, until in sorted(self.held.items())
        )
        return statuses.condition(
            CONDITION_SOAK,
            True,
            SOAKING,
            f"Soaking for {describe(self.seconds)} after the last start: {waits}.",
            self.now,
            generation=generation,
        )

    def start_message(self, group: str) -> str:
        until = stamp(self.now + timedelta(seconds=self.seconds))
        what = "a node" if self.per_node else f"a batch of compartment {group}"
        return (
            f"Started {what}; {_what(group, self.per_node)} waits for the soak time "
            f"({describe(self.seconds)}) until {until}."
        )


def _what(group: str, per_node: bool) -> str:
    return "the next node" if per_node else f"the next batch of compartment {group}"


def _reason(group: str, until: datetime, seconds: float, per_node: bool) -> Reason:
    return Reason(
        SOAK,
        f"soak: {_what(group, per_node)} starts at {stamp(until)} "
        f"(soakTime {describe(seconds)} after the last start)",
        hold=SOAKING,
    )
