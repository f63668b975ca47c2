"""In what order queued node writes go out, and what a failed one takes with it: the writer's
schedule, pure and synchronous. The operator's writer (operator kube/writer.py) sends the lanes
it hands out; the planner's test driver (sim/driver.py) lands them in the in-memory cluster, so
the budget and incremental property tests check this schedule, the one that ships.

- Lanes and chains. A plan's actions about one node (its patch, metadata ConfigMap, pods) form
  that node's lane (`model.actions.lane_of`). A node's lanes, from every plan, wait in the
  node's chain and go out one at a time in the order they were queued. Different nodes' chains
  go out concurrently, the chain holding the most urgent lane first: releases and hand-offs
  (pods created or deleted), then starts, then bookkeeping.
- Failures. When a lane fails, the lanes queued behind it in its chain are dropped unsent (they
  were planned on top of it), and so is a lane queued later by a plan made from a listing that
  still showed the failed lane (`listed`). The next pass re-plans the node from the node as it
  is.
- Plans that change a Skyhook as a whole (`plan_order`). Such a plan goes out with nothing
  else in flight: in plan order up to its last Skyhook-wide action, each action of no lane (a
  barrier: finalizer, ConfigMap, status) after every lane planned before it, the nodes a
  stretch of lanes starts after the others, stopping at the first failed write; the rest is
  queued like any plan.
- Statuses. A plan's queued Skyhook status patches go out once its queued lanes that hand off
  or release a node are done with (`Queued.reported`), not behind its starts and bookkeeping.
- The budget gate. A lane that starts a node waits until every release queued before it, in
  any plan, is done, and is dropped if one of them failed: a watcher never counts more nodes in
  progress than the budget.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from skyhook_planner.model.actions import (
    Action,
    CreatePod,
    DeletePod,
    EmitEvent,
    EvictPod,
    PatchSkyhookStatus,
    Plan,
    StopPod,
    lane_of,
    skyhook_wide,
)

# Lane priorities: hand-offs and releases first, admissions after them, bookkeeping last.
URGENT, STARTING, LATER = 0, 1, 2


@dataclass(eq=False)
class Gate:
    """What the starting lanes of one plan wait for: every release queued before them."""

    left: int  # those releases not done yet
    lanes: list[Lane] = field(default_factory=list)
    failed: bool = False  # one of them failed: the lanes were dropped

    @property
    def open(self) -> bool:
        return self.left == 0 and not self.failed


@dataclass(eq=False)
class Lane:
    """One plan's actions about one node, in that node's chain until done with."""

    node: str
    actions: tuple[Action, ...]
    priority: int
    order: int  # queued order, to tell what a `listed` call showed
    gate: Gate | None = None  # set for a lane that starts its node

    @property
    def ready(self) -> bool:
        return self.gate is None or self.gate.open

    @property
    def reported(self) -> bool:
        """It hands off or releases its node: a Skyhook status waits for it, so the status
        never shows a stage done or a node complete before the node's own annotations do.
        Starts and bookkeeping (a `waiting` mark) go out after every hand-off; a status that
        waited for them would lag the rollout by as long as the writer's queue is deep."""
        return self.priority == URGENT


@dataclass(eq=False)
class _Chain:
    """A node's lanes, oldest first; the first is going out (`running`) or next."""

    node: str
    lanes: list[Lane] = field(default_factory=list)
    running: bool = False
    # The most urgent entry in the schedule's heap for this chain since it last handed out a
    # lane: a lane joining at a more urgent priority adds another (older entries find nothing).
    queued_at: int | None = None


@dataclass
class Queued:
    """What `queue` did with a plan's lanes."""

    lanes: list[Lane]  # every lane of the plan
    dropped: list[Lane]  # those dropped at once: planned on top of a lane that failed

    @property
    def reported(self) -> set[Lane]:
        """The lanes the plan's Skyhook status patches wait for (`Lane.reported`)."""
        return {lane for lane in self.lanes if lane.reported}


@dataclass(frozen=True)
class Wave:
    """Node lanes sent at once, each in its actions' order; the next step waits for all."""

    lanes: Mapping[str, tuple[Action, ...]]


Step = Wave | Action  # a Skyhook-level action goes out alone


@dataclass(frozen=True)
class PlanOrder:
    """How one plan goes out (`plan_order`). First `in_order`, one step after another, each
    only once every step before it landed (a plan that changes a Skyhook as a whole, with
    nothing else in flight); then, if they all did, the rest: `lanes` queued in the
    `LaneSchedule`, `statuses` once the queued lanes that report are done, `events` at once."""

    in_order: tuple[Step, ...]
    lanes: Mapping[str, tuple[Action, ...]]
    statuses: tuple[PatchSkyhookStatus, ...]
    events: tuple[EmitEvent, ...]


def plan_order(plan: Plan) -> PlanOrder:
    """Split a plan into what goes out in order and what is queued. In order: every action up
    to the plan's last Skyhook-wide one, each action of no lane (finalizer, ConfigMap, status)
    after the lanes planned before it, and within a stretch of lanes the nodes the plan starts
    after the others (they may take the slots the others free). An Event rides in the lane
    `lane_of` names; after the cut, Events go out at once."""
    barriers = [i for i, action in enumerate(plan.actions) if skyhook_wide(action)]
    cut = barriers[-1] + 1 if barriers else 0
    steps: list[Step] = []
    stretch: dict[str, list[Action]] = {}
    for action in plan.actions[:cut]:
        node = lane_of(action)
        if node is not None:
            stretch.setdefault(node, []).append(action)
            continue
        steps += _waves(stretch, plan.starting)
        stretch = {}
        steps.append(action)
    lanes: dict[str, list[Action]] = {}
    statuses: list[PatchSkyhookStatus] = []
    events: list[EmitEvent] = []
    for action in plan.actions[cut:]:
        if isinstance(action, PatchSkyhookStatus):
            statuses.append(action)
        elif isinstance(action, EmitEvent):
            events.append(action)
        else:
            lanes.setdefault(lane_of(action) or "", []).append(action)
    queued = {node: tuple(actions) for node, actions in lanes.items()}
    return PlanOrder(tuple(steps), queued, tuple(statuses), tuple(events))


def _waves(stretch: Mapping[str, list[Action]], starting: Collection[str]) -> list[Wave]:
    others = {node: tuple(a) for node, a in stretch.items() if node not in starting}
    starts = {node: tuple(a) for node, a in stretch.items() if node in starting}
    return [Wave(lanes) for lanes in (others, starts) if lanes]


class LaneSchedule:
    """Every node lane queued and not done with, and which goes out next (`take`)."""

    def __init__(self) -> None:
        self._chains: dict[str, _Chain] = {}  # nodes with lanes queued, gated or going out
        # Each chain's actions, oldest first, kept as chains change: what `listed` shows.
        self._pending: dict[str, tuple[Action, ...]] = {}
        # Releasing lanes not done with yet, each with the gates waiting for it.
        self._releases: dict[Lane, list[Gate]] = {}
        self._heap: list[tuple[int, int, _Chain]] = []  # (priority, sequence, chain)
        self._sequence = itertools.count()
        self._queued = 0  # lanes queued so far: the next one's `order`
        self._listed_upto = 0  # lanes up to this `order` were shown by `listed`
        # Nodes whose listed lane failed since `listed` was last called.
        self._failed_since_listed: set[str] = set()

    @property
    def busy(self) -> bool:
        """Whether any lane is queued, waiting for its gate or going out."""
        return bool(self._chains)

    @property
    def pending(self) -> Mapping[str, tuple[Action, ...]]:
        """Per node, the actions of its lanes not done with, oldest first."""
        return self._pending

    def listed(self) -> dict[str, tuple[Action, ...]]:
        """`pending` for a pass to plan from (the snapshot replays it); a node's tuple stays
        the same object from one call to the next while its chain does not change.

        Each call opens a new window: a lane queued for a node whose listed lane failed since
        is dropped (it was planned from a listing that showed the failed lane)."""
        self._listed_upto = self._queued
        self._failed_since_listed.clear()
        return dict(self._pending)

    def queue(
        self,
        lanes: Mapping[str, Sequence[Action]],
        starting: frozenset[str] = frozenset(),
        releasing: frozenset[str] = frozenset(),
    ) -> Queued:
        """Append each of a plan's node lanes to its node's chain. `starting` are the nodes the
        plan moves into progress, `releasing` those it takes out of progress."""
        made = [
            self._lane(node, tuple(actions), starting, releasing) for node, actions in lanes.items()
        ]
        starts = [lane for lane in made if lane.node in starting]
        # This plan's releases count for its starts as those of earlier plans do. A lane that
        # both releases and starts its node waits like a start and is waited for by later ones.
        for lane in made:
            if lane.node in releasing and lane.node not in starting:
                self._releases[lane] = []
        if starts and self._releases:  # with none outstanding, the starts need no gate
            gate = Gate(left=len(self._releases), lanes=starts)
            for gates in self._releases.values():
                gates.append(gate)
            for lane in starts:
                lane.gate = gate
        for lane in starts:
            if lane.node in releasing:
                self._releases[lane] = []
        dropped: list[Lane] = []
        for lane in made:
            if lane.node in self._failed_since_listed or (
                lane.gate is not None and lane.gate.failed
            ):
                dropped.append(lane)
                dropped += self._done_with(lane, ok=False)
                continue
            chain = self._chains.get(lane.node)
            if chain is None:
                chain = self._chains[lane.node] = _Chain(lane.node)
            chain.lanes.append(lane)
            self._settle(chain)
        return Queued(made, dropped)

    def _lane(
        self,
        node: str,
        actions: tuple[Action, ...],
        starting: frozenset[str],
        releasing: frozenset[str],
    ) -> Lane:
        if node in releasing:
            priority = URGENT
        elif node in starting:
            priority = STARTING
        elif any(isinstance(a, CreatePod | DeletePod | StopPod | EvictPod) for a in actions):
            priority = URGENT  # a hand-off
        else:
            priority = LATER
        self._queued += 1
        return Lane(node, actions, priority, order=self._queued)

    def take(self) -> Lane | None:
        """The next lane to send, its chain now going out until `done`; None if no chain has a
        lane ready (each is going out, empty or waiting for its gate)."""
        while self._heap:
            _, _, chain = heapq.heappop(self._heap)
            if chain.running or not chain.lanes or not chain.lanes[0].ready:
                continue  # an older entry: the chain went out or was woken again since
            chain.running, chain.queued_at = True, None
            return chain.lanes[0]
        return None

    def done(self, lane: Lane, ok: bool) -> list[Lane]:
        """`lane` (handed out by `take`) was written, or failed (`ok` False). Returns the lanes
        dropped unsent because of it: the rest of its chain and the starts its failure gated."""
        chain = self._chains[lane.node]
        chain.running = False
        del chain.lanes[0]
        dropped = self._done_with(lane, ok)
        if ok:
            self._settle(chain)
        else:
            dropped += self._drop(chain, 0)  # the rest was planned on top of this lane
        return dropped

    def _settle(self, chain: _Chain) -> None:
        """After a chain changed: list what is left in it and queue its next lane, or forget it
        once it is empty."""
        if chain.lanes:
            self._pending[chain.node] = tuple(a for lane in chain.lanes for a in lane.actions)
            self._wake(chain)
        elif self._chains.get(chain.node) is chain:
            del self._chains[chain.node]
            del self._pending[chain.node]

    def _wake(self, chain: _Chain) -> None:
        """Queue the chain at the most urgent priority among its lanes, unless it is queued at
        least that urgently: a bookkeeping lane ahead of a hand-off for the same node goes out
        as urgently as the hand-off."""
        if chain.running or not chain.lanes or not chain.lanes[0].ready:
            return
        priority = min(lane.priority for lane in chain.lanes)
        if chain.queued_at is None or priority < chain.queued_at:
            chain.queued_at = priority
            heapq.heappush(self._heap, (priority, next(self._sequence), chain))

    def _drop(self, chain: _Chain, first: int) -> list[Lane]:
        """Drop the chain's lanes from index `first` on, unsent."""
        dropped = chain.lanes[first:]
        del chain.lanes[first:]
        also: list[Lane] = []
        for lane in dropped:
            also += self._done_with(lane, ok=False)
        self._settle(chain)
        return dropped + also

    def _done_with(self, lane: Lane, ok: bool) -> list[Lane]:
        """Once a lane is written, failed or dropped: open the gates that waited for it (or
        drop their starts, if it did not land). Returns the lanes that drops."""
        if not ok and lane.order <= self._listed_upto:
            self._failed_since_listed.add(lane.node)
        dropped: list[Lane] = []
        for gate in self._releases.pop(lane, ()):
            if gate.failed:
                continue
            gate.left -= 1
            if not ok:
                dropped += self._fail(gate)
            elif gate.open:
                for start in gate.lanes:
                    if (chain := self._chains.get(start.node)) is not None:
                        self._wake(chain)
                gate.lanes = []  # lane -> gate -> lanes is a cycle: break it once it is used
        return dropped

    def _fail(self, gate: Gate) -> list[Lane]:
        """A release the gate waited for did not land: drop its starts and what their chains
        hold after them (a start not queued yet is dropped when it is)."""
        gate.failed = True
        dropped: list[Lane] = []
        for start in gate.lanes:
            chain = self._chains.get(start.node)
            if chain is not None and start in chain.lanes:
                dropped += self._drop(chain, chain.lanes.index(start))
        gate.lanes = []
        return dropped
